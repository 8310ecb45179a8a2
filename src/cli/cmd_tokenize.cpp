// fp8rl tokenize / detokenize: a model's tokenizer.json from the command line, printing ids as
// JSON arrays (the format the peer tests and scripts compare).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/check.h"
#include "core/input_file.h"
#include "formats/json_read.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl::cli {

namespace {

struct TokenizeArgs {
  std::string path;
  std::string text_file;
  std::string jsonl;
  bool special = false;
};

struct DetokenizeArgs {
  std::string path;
  std::string ids;
  bool skip_special = false;
};

// Bounds on what one command reads: a text to encode, and one JSONL line.
constexpr uint64_t kMaxTextBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxLineBytes = uint64_t{64} << 20;

void append_ids(std::string& out, const std::vector<int32_t>& ids) {
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  out += ']';
}

void write_stdout(const std::string& s) {
  CHECK(std::fwrite(s.data(), 1, s.size(), stdout) == s.size(), "error writing to stdout");
}

void run_tokenize(const TokenizeArgs& a) {
  CHECK(a.text_file.empty() != a.jsonl.empty(),
        "tokenize: give exactly one of --text-file or --jsonl");
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(a.path);
  std::string out;
  if (!a.text_file.empty()) {
    const std::string text = read_input_file(a.text_file, "--text-file", kMaxTextBytes);
    append_ids(out, tokenizer.encode(text, a.special));
    out += '\n';
    write_stdout(out);
    return;
  }
  // Each line's ids are written as soon as it is encoded: memory stays bounded by one line.
  InputLines lines(a.jsonl, "--jsonl", kMaxLineBytes);
  std::string line;
  while (lines.next(line)) {
    const nlohmann::json value =
        parse_json_text(line, fmt::format("{} line {}", a.jsonl, lines.line_number()));
    CHECK(value.is_string(), "{} line {}: expected a JSON string, got {}", a.jsonl,
          lines.line_number(), value.type_name());
    out.clear();
    append_ids(out, tokenizer.encode(value.get_ref<const std::string&>(), a.special));
    out += '\n';
    write_stdout(out);
  }
  CHECK(std::fflush(stdout) == 0, "error writing to stdout");
}

// "1,2,3", "[1, 2, 3]" or "" (no ids).
std::vector<int32_t> parse_ids(std::string_view text) {
  std::vector<int32_t> ids;
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(token, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    CHECK(used == token.size() && v >= 0 && v <= INT32_MAX,
          "--ids: '{}' is not a token id (expected non-negative integers separated by commas)",
          token);
    ids.push_back(static_cast<int32_t>(v));
    token.clear();
  };
  for (char c : text) {
    if (c == ',') {
      CHECK(!token.empty(), "--ids: empty entry in '{}'", text);
      flush();
    } else if (c == '[' || c == ']' || c == ' ' || c == '\t' || c == '\n') {
      flush();
    } else {
      token += c;
    }
  }
  flush();
  return ids;
}

void run_detokenize(const DetokenizeArgs& a) {
  const std::vector<int32_t> ids = parse_ids(a.ids);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(a.path);
  write_stdout(tokenizer.decode(ids, a.skip_special));
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  auto targs = std::make_shared<TokenizeArgs>();
  CLI::App* t = app.add_subcommand(
      "tokenize",
      "Encode text with a model's tokenizer.json and print the ids as JSON arrays.\n"
      "Added tokens written in the text (e.g. <|im_start|>) are always recognised; --special\n"
      "also adds the post-processor's tokens (BOS/EOS), as add_special_tokens=True does.");
  t->add_option("PATH", targs->path, "tokenizer.json, or a model directory holding one")
      ->required();
  auto* text_file = t->add_option("--text-file", targs->text_file,
                                  "Encode the whole file as one text; prints one array");
  auto* jsonl =
      t->add_option("--jsonl", targs->jsonl, "One JSON string per line; prints one array per line");
  text_file->excludes(jsonl);
  t->add_flag("--special", targs->special, "Add the post-processor's special tokens (BOS/EOS)");
  t->callback([targs] { run_tokenize(*targs); });

  auto dargs = std::make_shared<DetokenizeArgs>();
  CLI::App* d = app.add_subcommand(
      "detokenize",
      "Decode token ids with a model's tokenizer.json and print the text exactly "
      "(no newline added).");
  d->add_option("PATH", dargs->path, "tokenizer.json, or a model directory holding one")
      ->required();
  d->add_option("--ids", dargs->ids, "Token ids: 1,2,3 or [1,2,3]")->required();
  d->add_flag("--skip-special", dargs->skip_special, "Drop special tokens from the text");
  d->callback([dargs] { run_detokenize(*dargs); });
}

}  // namespace fp8rl::cli
