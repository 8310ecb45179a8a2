#include "rl/reward_data.h"

#include <cmath>

#include "core/check.h"
#include "formats/json_read.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

namespace {

using OrderedJson = nlohmann::ordered_json;

// One sequence cut to max_length, or an error naming it.
void fit(std::vector<int32_t>& ids, const PreferenceDataOptions& o, const char* name) {
  const int64_t n = int64_t(ids.size());
  if (n <= o.max_length) return;
  CHECK(o.truncation,
        "\"{}\" has {} tokens, more than max_length {} (set truncation to keep its first {})", name,
        n, o.max_length, o.max_length);
  ids.resize(size_t(o.max_length));
}

}  // namespace

std::vector<RewardPair> read_reward_dataset(const std::string& path,
                                            const tok::Tokenizer& tokenizer,
                                            const ChatTemplateConfig* chat,
                                            const PreferenceDataOptions& options) {
  PreferenceDataOptions o = options;
  o.max_prompt_length.reset();
  const int64_t limit = o.max_length;
  o.max_length = int64_t{1} << 40;  // the whole sequence is checked here, after the join
  const PreferenceRowReader reader(tokenizer, chat, o);
  std::vector<RewardPair> out;
  for_each_jsonl_row(path, [&](const OrderedJson& row, int64_t line) {
    RewardPair p;
    p.line = line;
    CHECK(row.is_object(), "a row must be a JSON object");
    const bool prompt = row.contains("prompt") && !row["prompt"].is_null();
    CHECK(row.contains("chosen") && row.contains("rejected"),
          "the row needs \"chosen\" and \"rejected\"");
    if (!prompt && row["chosen"].is_string() && row["rejected"].is_string()) {
      CHECK(options.eos_token_id >= 0, "the tokenizer has no EOS token to end the texts with");
      for (const char* name : {"chosen", "rejected"}) {
        const std::string& text = row[name].get_ref<const std::string&>();
        CHECK(!text.empty(), "\"{}\" must be a non-empty string", name);
        std::vector<int32_t>& ids = name[0] == 'c' ? p.chosen : p.rejected;
        ids = tokenizer.encode(text, true);
        ids.push_back(options.eos_token_id);
      }
    } else {
      const PreferencePair pp = reader.read(row);
      p.chosen = pp.prompt;
      p.chosen.insert(p.chosen.end(), pp.chosen.begin(), pp.chosen.end());
      p.rejected = pp.prompt;
      p.rejected.insert(p.rejected.end(), pp.rejected.begin(), pp.rejected.end());
    }
    PreferenceDataOptions lim = o;
    lim.max_length = limit;
    fit(p.chosen, lim, "chosen");
    fit(p.rejected, lim, "rejected");
    if (row.contains("margin") && !row["margin"].is_null()) {
      const OrderedJson& m = row["margin"];
      CHECK(m.is_number() && std::isfinite(m.get<double>()),
            "\"margin\" must be a finite number, got {}", json_excerpt(m));
      p.margin = m.get<double>();
    }
    out.push_back(std::move(p));
  });
  CHECK(!out.empty(), "{}: no pairs (the file has no non-blank line)", path);
  const bool margins = out[0].margin.has_value();
  for (const RewardPair& p : out)
    CHECK(p.margin.has_value() == margins,
          "{}:{}: {} \"margin\" while line {} {}: every row or none must have one", path, p.line,
          margins ? "no" : "a", out[0].line, margins ? "has one" : "has none");
  return out;
}

}  // namespace fp8rl
