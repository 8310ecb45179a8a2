// The rest of a Hugging Face model directory's text setup: tokenizer_config.json (special
// token strings, add_bos/add_eos, chat templates), chat_template.jinja and
// additional_chat_templates/*.jinja (which newer transformers write instead, and which win over
// tokenizer_config.json), and generation_config.json (the ids that stop generation).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp8rl::tok {

class Tokenizer;

struct NamedChatTemplate {
  std::string name;    // "default" for a single template
  std::string source;  // the Jinja text
};

struct TokenizerConfig {
  // Reads the files of a model directory (`path` is the directory or its tokenizer_config.json);
  // each file is optional (a missing one leaves its fields empty), a malformed one is an
  // fp8rl::Error naming it.
  static TokenizerConfig load(const std::filesystem::path& path);
  // From file contents; an empty view means the file is absent.
  static TokenizerConfig from_json_text(std::string_view tokenizer_config_json,
                                        std::string_view generation_config_json = {});

  // Special tokens by the names transformers gives them (a string, or the content of an
  // AddedToken object); unset when the file has none or null.
  std::optional<std::string> bos_token, eos_token, unk_token, pad_token, sep_token, cls_token,
      mask_token;
  std::vector<std::string> additional_special_tokens;
  std::optional<bool> add_bos_token, add_eos_token;
  // transformers' decode() option (our decode never applies it; see tokenizer.h).
  bool clean_up_tokenization_spaces = false;

  // In file order; a plain string template is named "default".
  std::vector<NamedChatTemplate> chat_templates;
  // The template with this name, or nullptr.
  const std::string* chat_template(std::string_view name = "default") const;

  // generation_config.json: eos_token_id (a number or a list), bos_token_id, pad_token_id.
  std::vector<int32_t> generation_eos_token_ids;
  std::optional<int32_t> generation_bos_token_id, generation_pad_token_id;

  // What a chat template sees as variables besides messages: bos_token, eos_token, ... for the
  // tokens that are set (transformers passes special_tokens_map the same way).
  std::vector<std::pair<std::string, std::string>> special_tokens_map() const;

  // Ids that end generation: generation_config's eos ids, then eos_token's id when the
  // tokenizer knows it and it is not already listed.
  std::vector<int32_t> stop_token_ids(const Tokenizer& tokenizer) const;
};

}  // namespace fp8rl::tok
