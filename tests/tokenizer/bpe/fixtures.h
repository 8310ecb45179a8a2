// Small tokenizer.json documents for the unit tests, built in code so that each test can
// change one field. Two families, like the real models: byte-level (GPT-2 / Llama 3 / Qwen)
// and SentencePiece-style with byte fallback (Llama 2 / Mistral / Gemma).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace fixtures {

using Json = nlohmann::json;

inline std::string byte_char(uint8_t b) {
  return std::string(fp8rl::tok::kByteLevelAlphabet.utf8_of(b));
}

// Byte-level BPE: ids 0-255 are the bytes' alphabet characters, then merged tokens.
// Merges (by rank): "Ġ t", "l l", "e ll", "h ell", "hell o", "h e", "Ġt he", "Ġ w", "o r",
// "Ġw or", "Ġwor l", "Ġworl d", "ä ¸", "ä¸ Ń" (the UTF-8 of 中 in alphabet characters).
inline Json byte_level_json() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<uint8_t>(b))] = b;
  const std::string g = byte_char(' ');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {g, "t"},
      {"l", "l"},
      {"e", "ll"},
      {"h", "ell"},
      {"hell", "o"},
      {"h", "e"},
      {g + "t", "he"},
      {g, "w"},
      {"o", "r"},
      {g + "w", "or"},
      {g + "wor", "l"},
      {g + "worl", "d"},
      {byte_char(0xE4), byte_char(0xB8)},
      {byte_char(0xE4) + byte_char(0xB8), byte_char(0xAD)}};
  Json merge_list = Json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back(a + " " + b);  // the legacy string form
  }
  Json added = Json::array();
  added.push_back({{"id", 300},
                   {"content", "<|end|>"},
                   {"special", true},
                   {"normalized", false},
                   {"lstrip", false},
                   {"rstrip", false},
                   {"single_word", false}});
  added.push_back({{"id", 301},
                   {"content", "<x>"},
                   {"special", false},
                   {"normalized", false},
                   {"lstrip", false},
                   {"rstrip", false},
                   {"single_word", false}});
  return Json{{"version", "1.0"},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "ByteLevel"},
                {"add_prefix_space", false},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"post_processor",
               {{"type", "ByteLevel"},
                {"add_prefix_space", true},
                {"trim_offsets", false},
                {"use_regex", true}}},
              {"decoder",
               {{"type", "ByteLevel"},
                {"add_prefix_space", true},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

// SentencePiece-style BPE as Llama 2 saves it: spaces become "▁" with one prepended, unknown
// characters fall back to <0xXX> byte tokens, <s> is added by the template.
inline Json sentencepiece_json() {
  Json vocab = Json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int next = 259;
  for (const char* t : {"\u2581", "a", "b", "c", "h", "e", "l", "o", "w", "r", "d", "\u4E2D"}) {
    vocab[t] = next++;
  }
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"\u2581", "h"},     {"e", "l"},          {"el", "l"}, {"ell", "o"},
      {"\u2581h", "ello"}, {"\u2581", "w"},     {"o", "r"},  {"\u2581w", "or"},
      {"\u2581wor", "l"},  {"\u2581worl", "d"}, {"a", "b"},  {"\u2581", "ab"}};
  Json merge_list = Json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back(Json::array({a, b}));  // the pair form
  }
  Json added = Json::array();
  int id = 0;
  for (const char* t : {"<unk>", "<s>", "</s>"}) {
    added.push_back({{"id", id++},
                     {"content", t},
                     {"special", true},
                     {"normalized", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false}});
  }
  return Json{{"version", "1.0"},
              {"added_tokens", added},
              {"normalizer",
               {{"type", "Sequence"},
                {"normalizers",
                 {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
              {"pre_tokenizer", nullptr},
              {"post_processor",
               {{"type", "TemplateProcessing"},
                {"single",
                 {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                {"pair", Json::array()},
                {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
              {"decoder",
               {{"type", "Sequence"},
                {"decoders",
                 {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                  {{"type", "ByteFallback"}},
                  {{"type", "Fuse"}},
                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", "<unk>"},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

inline fp8rl::tok::Tokenizer load(const Json& j) {
  return fp8rl::tok::Tokenizer::from_json_text(j.dump(), "test tokenizer.json");
}

inline int32_t id_of(const fp8rl::tok::Tokenizer& t, const std::string& token) {
  return t.token_to_id(token);
}

}  // namespace fixtures
