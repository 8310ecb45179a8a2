#include "tokenizer/tokenizer_json.h"

#include <string>

namespace fp8rl::tok {

namespace {

// Builds the DOM for everything but model.vocab and model.merges, which it captures flat.
class Handler final : public nlohmann::json_sax<Json> {
 public:
  explicit Handler(TokenizerJson& out) : out_(out) {}

  bool null() override { return value(Json(nullptr)); }
  bool boolean(bool b) override { return value(Json(b)); }
  bool number_integer(number_integer_t v) override {
    if (capture_ == Capture::kVocab) return vocab_id(v);
    return value(Json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (capture_ == Capture::kVocab) {
      return vocab_id(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
    }
    return value(Json(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    CHECK(capture_ == Capture::kNone, "model.{}: expected integers and strings, got {}",
          capture_name(), v);
    return value(Json(v));
  }
  bool string(string_t& s) override {
    if (capture_ == Capture::kMerges) return merge_string(s);
    CHECK(capture_ == Capture::kNone,
          "model.vocab: the id of '{}' must be an integer, got a string", vocab_key_);
    return value(Json(std::move(s)));
  }
  bool binary(binary_t&) override { RAISE("unexpected binary value"); }

  bool start_object(std::size_t) override {
    if (pending_ == Capture::kVocab) {
      capture_ = Capture::kVocab;
      pending_ = Capture::kNone;
      out_.has_vocab = true;
      return true;
    }
    CHECK(capture_ == Capture::kNone, "model.{}: unexpected object", capture_name());
    pending_ = Capture::kNone;
    return open(Json::object());
  }
  bool end_object() override {
    if (capture_ == Capture::kVocab) {
      capture_ = Capture::kNone;
      return value(Json(nullptr));
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (pending_ == Capture::kMerges) {
      capture_ = Capture::kMerges;
      pending_ = Capture::kNone;
      out_.has_merges = true;
      return true;
    }
    if (capture_ == Capture::kMerges) {
      CHECK(!in_pair_, "model.merges: merge {} is nested too deep", out_.merges.size());
      in_pair_ = true;
      pair_parts_ = 0;
      pair_index_ = out_.merges.size();
      return true;
    }
    CHECK(capture_ == Capture::kNone, "model.vocab: unexpected list");
    pending_ = Capture::kNone;
    return open(Json::array());
  }
  bool end_array() override {
    if (capture_ == Capture::kMerges) {
      if (in_pair_) {
        CHECK(pair_parts_ == 2, "model.merges: merge {} must be a pair of strings", pair_index_);
        in_pair_ = false;
        return true;
      }
      capture_ = Capture::kNone;
      return value(Json(nullptr));
    }
    return close();
  }
  bool key(string_t& k) override {
    if (capture_ == Capture::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    // model.vocab and model.merges: the object two levels down whose key path is ["model"].
    if (stack_.size() == 2 && path_.size() == 2 && path_[1] == "model") {
      if (k == "vocab") pending_ = Capture::kVocab;
      if (k == "merges") pending_ = Capture::kMerges;
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    RAISE("invalid JSON at byte {}: {}", position, e.what());
  }

 private:
  enum class Capture { kNone, kVocab, kMerges };
  const char* capture_name() const { return capture_ == Capture::kVocab ? "vocab" : "merges"; }

  // A scalar lands in the current container (a value's pending capture is cancelled by it).
  bool value(Json v) {
    pending_ = Capture::kNone;
    if (stack_.empty()) {
      out_.root = std::move(v);
      return true;
    }
    Json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
    } else {
      top[key_] = std::move(v);
    }
    return true;
  }
  bool open(Json container) {
    Json* slot;
    if (stack_.empty()) {
      out_.root = std::move(container);
      slot = &out_.root;
    } else if (stack_.back()->is_array()) {
      stack_.back()->push_back(std::move(container));
      slot = &stack_.back()->back();
    } else {
      slot = &((*stack_.back())[key_] = std::move(container));
    }
    path_.push_back(stack_.empty() || stack_.back()->is_array() ? std::string() : key_);
    stack_.push_back(slot);
    return true;
  }
  bool close() {
    stack_.pop_back();
    path_.pop_back();
    return true;
  }
  bool vocab_id(int64_t id) {
    CHECK(id >= 0 && id < kMaxTokenId, "model.vocab: id {} of '{}' is out of range [0, {})", id,
          vocab_key_, kMaxTokenId);
    out_.vocab.push_back({static_cast<uint32_t>(out_.vocab_bytes.size()),
                          static_cast<uint32_t>(vocab_key_.size()), id});
    out_.vocab_bytes.insert(out_.vocab_bytes.end(), vocab_key_.begin(), vocab_key_.end());
    return true;
  }
  uint32_t append_merge_bytes(std::string_view s) {
    const auto offset = static_cast<uint32_t>(out_.merge_bytes.size());
    out_.merge_bytes.insert(out_.merge_bytes.end(), s.begin(), s.end());
    return offset;
  }
  bool merge_string(const std::string& s) {
    if (in_pair_) {
      CHECK(pair_parts_ < 2, "model.merges: merge {} must be a pair of strings", pair_index_);
      const uint32_t offset = append_merge_bytes(s);
      if (pair_parts_++ == 0) {
        out_.merges.push_back({offset, static_cast<uint32_t>(s.size()), 0, 0});
      } else {
        out_.merges.back().right_offset = offset;
        out_.merges.back().right_length = static_cast<uint32_t>(s.size());
      }
      return true;
    }
    // The legacy "a b" form: exactly one space separates the two parts.
    const size_t space = s.find(' ');
    CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
          "model.merges: merge {} '{}' must be two tokens separated by one space",
          out_.merges.size(), s);
    const uint32_t offset = append_merge_bytes(s);
    out_.merges.push_back({offset, static_cast<uint32_t>(space),
                           offset + static_cast<uint32_t>(space) + 1,
                           static_cast<uint32_t>(s.size() - space - 1)});
    return true;
  }

  TokenizerJson& out_;
  std::vector<Json*> stack_;
  std::vector<std::string> path_;  // the key that leads to each open container ("" in lists)
  std::string key_;
  Capture pending_ = Capture::kNone;  // the next value is vocab or merges
  Capture capture_ = Capture::kNone;
  std::string vocab_key_;
  bool in_pair_ = false;
  int pair_parts_ = 0;
  size_t pair_index_ = 0;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, std::string_view source) {
  // The DOM of the non-vocab sections is built without recursion, but its later use (copies,
  // the Sequence builders) recurses: the depth is bounded first, with the offending byte.
  check_json_text(text, source, JsonLimits{}.max_depth);
  TokenizerJson out;
  Handler handler(out);
  try {
    Json::sax_parse(text.begin(), text.end(), &handler);
  } catch (const Error& e) {
    RAISE("{}: {}", source, e.what());
  } catch (const Json::exception& e) {
    RAISE("{}: invalid JSON: {}", source, e.what());
  }
  CHECK(out.root.is_object(), "{}: the top level must be a JSON object", source);
  return out;
}

}  // namespace fp8rl::tok
