// The pairs of a DPO run, TRL's preference format: JSONL rows with
// `prompt` + `chosen` + `rejected`, each a string (standard: tokenize(prompt), then
// tokenize(prompt + completion) + EOS, the completion's tokens being those after the prompt's)
// or a list of {role, content} messages (conversational: the chat template's render of the
// prompt with the generation prompt, then of prompt + completion). Rows with only `chosen` and
// `rejected` message lists take their common leading messages as the prompt (TRL's implicit
// prompt). KTO's unpaired rows: `prompt` + `completion` (the same two formats) + a boolean
// `label` (true: desirable). Every problem is an fp8rl::Error "DATASET:LINE: what is wrong".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fp8rl {

namespace tok {
class Tokenizer;
}
struct ChatTemplateConfig;

struct PreferencePair {
  std::vector<int32_t> prompt;            // the prompt's tokens
  std::vector<int32_t> chosen, rejected;  // the completions' tokens (after the prompt)
  int64_t line = 0;
};

// One unpaired example (KTO). The completion is whole: a row over max_length (with truncation)
// is cut by the trainer, which also cuts the mismatched sequences its completion enters.
struct UnpairedExample {
  std::vector<int32_t> prompt, completion;
  bool desirable = false;
  int64_t line = 0;
};

struct PreferenceDataOptions {
  int64_t max_length = 1024;                       // prompt + completion tokens
  std::optional<int64_t> max_prompt_length = 512;  // nullopt: no limit
  // false: a row over a limit is an error naming it; true: the prompt keeps its last
  // max_prompt_length tokens, prompt + completion its first max_length tokens.
  bool truncation = false;
  int32_t eos_token_id = -1;  // appended to standard completions; -1: none (error)
  // TRL's chat_template_kwargs: extra variables of the chat template (null: none).
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
};

// One row at a time, as read_preference_dataset reads each line (and as the fuzzer drives it).
// `tokenizer` and `chat` (null when the model has no chat template) must outlive the reader.
class PreferenceRowReader {
 public:
  PreferenceRowReader(const tok::Tokenizer& tokenizer, const ChatTemplateConfig* chat,
                      const PreferenceDataOptions& options);
  ~PreferenceRowReader();
  PreferenceRowReader(const PreferenceRowReader&) = delete;
  PreferenceRowReader& operator=(const PreferenceRowReader&) = delete;

  // One parsed row; the pair's line is left 0, and errors lack the "DATASET:LINE: " prefix.
  PreferencePair read(const nlohmann::ordered_json& row) const;
  // An unpaired row (prompt, completion, label); max_prompt_length is not read. A prompt of
  // max_length tokens or more is an error, and a longer row too unless truncation is set.
  UnpairedExample read_unpaired(const nlohmann::ordered_json& row) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::vector<PreferencePair> read_preference_dataset(const std::string& path,
                                                    const tok::Tokenizer& tokenizer,
                                                    const ChatTemplateConfig* chat,
                                                    const PreferenceDataOptions& options);

std::vector<UnpairedExample> read_unpaired_dataset(const std::string& path,
                                                   const tok::Tokenizer& tokenizer,
                                                   const ChatTemplateConfig* chat,
                                                   const PreferenceDataOptions& options);

}  // namespace fp8rl
