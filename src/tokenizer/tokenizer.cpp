#include "tokenizer/tokenizer.h"

#include "core/input_file.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace fp8rl::tok {

namespace {

// tokenizer.json files reach 35 MB (Gemma 3); the bound only stops runaway inputs.
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{1} << 30;

const Json& field_or_null(const Json& j, const char* key) {
  static const Json kNull;  // immutable: shared by all callers
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::vector<AddedToken> parse_added_tokens(const Json& list, const BpeModel& model) {
  const std::string where = "tokenizer.json added_tokens";
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  CHECK(list.is_array(), "{}: expected a list", where);
  for (const Json& item : list) {
    AddedToken t;
    t.content = json_string(item, "content", where);
    CHECK(!t.content.empty(), "{}: a token has empty content", where);
    const Json& id = json_at(item, "id", where);
    CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxTokenId,
          "{}: token '{}' has an invalid id {} (ids are in [0, {}))", where, t.content,
          json_excerpt(id), kMaxTokenId);
    t.id = id.get<int32_t>();
    t.special = json_bool_or(item, "special", false, where);
    t.single_word = json_bool_or(item, "single_word", false, where);
    t.lstrip = json_bool_or(item, "lstrip", false, where);
    t.rstrip = json_bool_or(item, "rstrip", false, where);
    t.normalized = json_bool_or(item, "normalized", !t.special, where);
    // tokenizers gives a token that is already in the vocabulary its vocabulary id.
    if (const int32_t vocab_id = model.token_to_id(t.content); vocab_id >= 0) t.id = vocab_id;
    tokens.push_back(std::move(t));
  }
  return tokens;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(file)) file /= "tokenizer.json";
  CHECK(std::filesystem::exists(file), "no tokenizer file at {}{}", file.string(),
        std::filesystem::is_directory(path) ? " (a model directory must hold tokenizer.json)" : "");
  return from_json_text(read_input_file(file, "tokenizer file", kMaxTokenizerJsonBytes),
                        file.string());
}

Tokenizer Tokenizer::from_json_text(std::string_view json_text, std::string_view source) {
  TokenizerJson file = parse_tokenizer_json(json_text, source);
  const Json& j = file.root;
  Tokenizer t;
  try {
    t.normalizer_ = make_normalizer(field_or_null(j, "normalizer"));
    t.pre_tokenizer_ = make_pre_tokenizer(field_or_null(j, "pre_tokenizer"));
    t.model_ = std::make_unique<BpeModel>(BpeModel::from_json(file));
    t.added_ = AddedVocabulary(parse_added_tokens(field_or_null(j, "added_tokens"), *t.model_),
                               t.normalizer_.get());
    t.post_processor_ = make_post_processor(field_or_null(j, "post_processor"));
    t.decoder_ = make_decoder(field_or_null(j, "decoder"));
  } catch (const Error& e) {
    RAISE("{}: {}", source, e.what());
  } catch (const Json::exception& e) {
    RAISE("{}: unexpected content: {}", source, e.what());
  }
  t.vocab_size_ = t.model_->id_limit();
  for (const AddedToken& a : t.added_.tokens()) t.vocab_size_ = std::max(t.vocab_size_, a.id + 1);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  check_utf8(text, "text to encode");
  // Offsets inside the pipeline are 32-bit.
  CHECK(text.size() < (size_t{1} << 32), "text to encode is {} bytes; the limit is 4 GiB",
        text.size());
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  BpeModel::Scratch scratch;
  std::vector<Section> sections;
  added_.split(text, /*normalized=*/false, sections);
  for (const Section& s : sections) {
    if (s.token >= 0) {
      ids.push_back(s.token);
    } else {
      encode_section(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids, scratch);
    }
  }
  if (post_processor_) ids = post_processor_->process(std::move(ids), add_special);
  return ids;
}

void Tokenizer::encode_section(std::string_view text, bool at_text_start, std::vector<int32_t>& ids,
                               BpeModel::Scratch& scratch) const {
  Words words, work;
  words.text.assign(text);
  if (normalizer_) normalizer_->normalize(words.text);
  auto encode_words = [&](Words& w) {
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(w, work);
    for (const Words::Word& word : w.words) model_->encode_word(w.view(word), ids, scratch);
  };
  if (!added_.has_normalized_tokens()) {
    if (!words.text.empty()) {
      words.words.push_back({0, static_cast<uint32_t>(words.text.size()), at_text_start});
      encode_words(words);
    }
    return;
  }
  // Tokens marked normalized are matched in the normalized text.
  std::vector<Section> sections;
  added_.split(words.text, /*normalized=*/true, sections);
  for (const Section& s : sections) {
    if (s.token >= 0) {
      ids.push_back(s.token);
      continue;
    }
    Words part;
    part.text = words.text.substr(s.begin, s.end - s.begin);
    part.words.push_back(
        {0, static_cast<uint32_t>(part.text.size()), at_text_start && s.begin == 0});
    encode_words(part);
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    CHECK(id >= 0 && id < vocab_size_, "token id {} is out of range (vocabulary size {})", id,
          vocab_size_);
    if (const AddedToken* a = added_.find_id(id)) {
      if (!(skip_special && a->special)) tokens.push_back(a->content);
      continue;
    }
    const std::string_view token = model_->id_to_token(id);
    CHECK(!token.empty(), "token id {} has no token in this vocabulary", id);
    tokens.emplace_back(token);
  }
  std::string text;
  if (decoder_) {
    decoder_->decode_chain(tokens);
    for (const std::string& t : tokens) text += t;
  } else {
    // Without a decoder tokenizers joins the tokens with spaces.
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
  }
  return text;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  const int32_t id = added_.find_content(token);
  return id >= 0 ? id : model_->token_to_id(token);
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = added_.find_id(id)) return a->content;
  return model_->id_to_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* a = added_.find_id(id);
  return a != nullptr && a->special;
}

bool Tokenizer::decodes_byte_fallback() const {
  return decoder_ != nullptr && decoder_->has_byte_fallback();
}

}  // namespace fp8rl::tok
