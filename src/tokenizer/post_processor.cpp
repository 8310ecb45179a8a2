#include "tokenizer/post_processor.h"

#include <map>
#include <string>

namespace fp8rl::tok {

namespace {

class TemplateProcessing final : public PostProcessor {
 public:
  // The single-sequence template, flattened: a run of special ids or the sequence itself.
  struct Piece {
    bool is_sequence;
    std::vector<int32_t> ids;
  };
  explicit TemplateProcessing(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  std::vector<int32_t> process(std::vector<int32_t> ids, bool add_special) const override {
    if (!add_special) return ids;
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Piece& p : pieces_) {
      if (p.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), p.ids.begin(), p.ids.end());
      }
    }
    return out;
  }

 private:
  std::vector<Piece> pieces_;
};

class WrapProcessing final : public PostProcessor {
 public:
  WrapProcessing(int32_t first, int32_t last) : first_(first), last_(last) {}
  std::vector<int32_t> process(std::vector<int32_t> ids, bool add_special) const override {
    if (!add_special) return ids;
    ids.insert(ids.begin(), first_);
    ids.push_back(last_);
    return ids;
  }

 private:
  int32_t first_, last_;
};

class IdentityProcessing final : public PostProcessor {
 public:
  std::vector<int32_t> process(std::vector<int32_t> ids, bool) const override { return ids; }
};

class SequenceProcessing final : public PostProcessor {
 public:
  explicit SequenceProcessing(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids, bool add_special) const override {
    for (const auto& step : steps_) ids = step->process(std::move(ids), add_special);
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

std::unique_ptr<PostProcessor> make_template(const Json& config, const std::string& where) {
  // special_tokens: {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}
  std::map<std::string, std::vector<int32_t>> specials;
  if (auto it = config.find("special_tokens"); it != config.end() && it->is_object()) {
    for (auto s = it->begin(); s != it->end(); ++s) {
      const Json& ids = json_at(s.value(), "ids", where + " special_tokens." + s.key());
      CHECK(ids.is_array(), "{}: special_tokens.{}.ids must be a list", where, s.key());
      specials[s.key()] = ids.get<std::vector<int32_t>>();
    }
  }
  const Json& single = json_at(config, "single", where);
  CHECK(single.is_array(), "{}: 'single' must be a list", where);
  std::vector<TemplateProcessing::Piece> pieces;
  for (const Json& item : single) {
    if (auto seq = item.find("Sequence"); seq != item.end()) {
      pieces.push_back({true, {}});
    } else if (auto sp = item.find("SpecialToken"); sp != item.end()) {
      const std::string id = json_string(*sp, "id", where + " SpecialToken");
      auto found = specials.find(id);
      CHECK(found != specials.end(),
            "{}: special token '{}' is used in the template but not "
            "listed in special_tokens",
            where, id);
      pieces.push_back({false, found->second});
    } else {
      RAISE("{}: template item must be Sequence or SpecialToken, got {}", where,
            json_excerpt(item));
    }
  }
  return std::make_unique<TemplateProcessing>(std::move(pieces));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& config, int depth) {
  if (config.is_null()) return nullptr;
  const std::string where = "tokenizer.json post_processor";
  const std::string type = json_type(config, where);
  if (type == "TemplateProcessing") return make_template(config, where);
  if (type == "ByteLevel") return std::make_unique<IdentityProcessing>();
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    // cls and sep are ["token", id].
    const Json& cls = json_at(config, "cls", where);
    const Json& sep = json_at(config, "sep", where);
    CHECK(cls.is_array() && cls.size() == 2 && cls[1].is_number_integer() && sep.is_array() &&
              sep.size() == 2 && sep[1].is_number_integer(),
          "{}: cls and sep must be [\"token\", id]", where);
    return std::make_unique<WrapProcessing>(cls[1].get<int32_t>(), sep[1].get<int32_t>());
  }
  if (type == "Sequence") {
    check_sequence_depth(depth, where);
    const Json& list = json_at(config, "processors", where);
    CHECK(list.is_array(), "{}: 'processors' must be a list", where);
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const Json& step : list) {
      if (auto p = make_post_processor(step, depth + 1)) steps.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessing>(std::move(steps));
  }
  RAISE(
      "{}: unsupported type '{}' (supported: TemplateProcessing, ByteLevel, BertProcessing, "
      "RobertaProcessing, Sequence)",
      where, type);
}

}  // namespace fp8rl::tok
