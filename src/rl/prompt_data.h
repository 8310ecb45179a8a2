// The prompts of a GRPO run: JSONL rows with `prompt` (a string, tokenized
// raw as TRL does: processing_class(text=prompt), the post-processor's special tokens
// included) or `messages` / a conversational `prompt` (a list of {role, content}: the chat
// template's render with the generation prompt, apply_chat_template(add_generation_prompt=
// True), tokenized without added special tokens), plus any other columns, which go to the
// rewards. Every problem is an fp8rl::Error "DATASET:LINE: what is wrong".
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
struct ModelConfig;

struct PromptExample {
  std::vector<int32_t> ids;  // the prompt's tokens
  std::string text;          // the prompt text (the rendered template for chat prompts)
  // Chat prompts: the message list as the row holds it (what TRL passes reward functions as the
  // prompt); null for text prompts.
  nlohmann::json messages;
  nlohmann::json columns;  // every other column of the row (an object)
  int64_t line = 0;        // 1-based line in the JSONL file
};

struct PromptDataOptions {
  // A prompt longer than this is an error naming its row, unless `truncation` keeps its last
  // max_prompt_length tokens (TRL's old left truncation). nullopt: no limit.
  std::optional<int64_t> max_prompt_length = 512;
  bool truncation = false;
  // TRL's chat_template_kwargs: extra variables of the chat template (null: none).
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
};

// One row at a time, as read_prompt_dataset reads each line (and as the fuzzer drives it).
// `tokenizer` and `chat` (null when the model has no chat template) must outlive the reader.
class PromptRowReader {
 public:
  PromptRowReader(const tok::Tokenizer& tokenizer, const ChatTemplateConfig* chat,
                  const PromptDataOptions& options);
  ~PromptRowReader();
  PromptRowReader(const PromptRowReader&) = delete;
  PromptRowReader& operator=(const PromptRowReader&) = delete;

  // One parsed row; the example's line is left 0, and errors lack the "DATASET:LINE: " prefix.
  PromptExample read(const nlohmann::ordered_json& row) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `chat` may be null when the model has no chat template (chat rows are then an error). The
// rows are all chat prompts or all text prompts: TRL tells reward functions one format for the
// whole dataset (a mixed file is an error naming the first row of the other kind).
std::vector<PromptExample> read_prompt_dataset(const std::string& path,
                                               const tok::Tokenizer& tokenizer,
                                               const ChatTemplateConfig* chat,
                                               const PromptDataOptions& options);

// Every prompt of `prompts` (read from `path`) must leave a whole completion room in the
// model's context (check_context: max_context, which YaRN extends past max_position_embeddings):
// the first row whose prompt plus max_completion_length exceeds it is an error naming the
// lengths, the context and what to change. Cheap, so a run checks it before the weights load
// rather than failing in the round that draws the row.
void check_prompt_room(const std::vector<PromptExample>& prompts, const std::string& path,
                       int64_t max_completion_length, const ModelConfig& config);

// The online trainers' prompt order of epoch `epoch` over `n` rows: a Fisher-Yates permutation
// drawn from the counter-based stream of (seed, epoch) alone, so a resumed run replays it.
std::vector<size_t> prompt_epoch_order(uint64_t seed, int64_t epoch, size_t n);

}  // namespace fp8rl
