#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace fp8rl::tok {

int byte_fallback_value(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

namespace {

// All tokens become one string: each character maps back to its byte, except in tokens that
// contain a character outside the alphabet (added tokens such as "<|im_end|>" written in
// plain text), which are taken as their UTF-8 bytes; invalid UTF-8 becomes U+FFFD.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool all_mapped = true;
      for (size_t i = 0; i < t.size();) {
        const int b = kByteLevelAlphabet.byte_of(next_code_point(t, i));
        if (b < 0) {
          all_mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!all_mapped) {
        bytes.resize(mark);
        bytes.append(t);
      }
    }
    std::string text;
    append_utf8_lossy(text, bytes);
    tokens.assign(1, std::move(text));
  }
};

// Runs of "<0xXX>" tokens become their bytes when they form valid UTF-8, and one U+FFFD per
// byte when they do not (tokenizers' rule, which differs from a lossy UTF-8 decode).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (find_invalid_utf8(run) == std::string_view::npos) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
    };
    for (std::string& t : tokens) {
      const int b = byte_fallback_value(t);
      if (b >= 0) {
        run.push_back(static_cast<char>(b));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
  bool has_byte_fallback() const override { return true; }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = replace_all(t, pattern_, content_);
  }

 private:
  Regex pattern_;
  std::string content_;
};

// Strips up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0;
      for (size_t k = 0; k < start_ && t.compare(begin, content_.size(), content_) == 0; ++k) {
        begin += content_.size();
      }
      size_t end = t.size();
      for (size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                         t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++k) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

// The replacement character becomes a space, except in the first token, where every
// replacement character is dropped unless prepend_scheme is "never" (tokenizers' rule).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_in_first)
      : replacement_(std::move(replacement)), drop_in_first_(drop_in_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      std::string out;
      size_t pos = 0;
      for (size_t hit; (hit = t.find(replacement_, pos)) != std::string::npos;
           pos = hit + replacement_.size()) {
        out.append(t, pos, hit - pos);
        if (!(i == 0 && drop_in_first_)) out.push_back(' ');
      }
      out.append(t, pos);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }
  bool has_byte_fallback() const override {
    for (const auto& step : steps_) {
      if (step->has_byte_fallback()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& config, int depth) {
  if (config.is_null()) return nullptr;
  const std::string where = "tokenizer.json decoder";
  const std::string type = json_type(config, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(
        regex_from_pattern(json_at(config, "pattern", where), where),
        json_string(config, "content", where));
  }
  if (type == "Strip") {
    auto count = [&](const char* key) {
      const Json& v = json_at(config, key, where);
      CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
            "{}: Strip '{}' must be a non-negative integer", where, key);
      return v.get<size_t>();
    };
    return std::make_unique<StripDecoder>(json_char(config, "content", where), count("start"),
                                          count("stop"));
  }
  if (type == "Metaspace") {
    const std::string scheme = json_string_or(config, "prepend_scheme", "always", where);
    const bool never = scheme == "never" || !json_bool_or(config, "add_prefix_space", true, where);
    return std::make_unique<MetaspaceDecoder>(json_char(config, "replacement", where), !never);
  }
  if (type == "Sequence") {
    check_sequence_depth(depth, where);
    const Json& list = json_at(config, "decoders", where);
    CHECK(list.is_array(), "{}: 'decoders' must be a list", where);
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const Json& step : list) {
      if (auto d = make_decoder(step, depth + 1)) steps.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  RAISE(
      "{}: unsupported type '{}' (supported: ByteLevel, ByteFallback, Fuse, Replace, Strip, "
      "Metaspace, Sequence)",
      where, type);
}

}  // namespace fp8rl::tok
