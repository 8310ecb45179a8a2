// The SFT dataset: JSONL rows in TRL's formats, tokenized into examples with a per-token loss
// mask, as TRL's SFTTrainer prepares them.
//
// A row (one JSON object per line; blank lines skipped) is used by the first of these fields
// it holds, as TRL picks (pre-tokenized first, then conversational, then standard):
//   input_ids              list of ints, as is (no EOS added); loss on all tokens, or on the
//                          tokens of an optional completion_mask (list of 0/1) when
//                          completion_only_loss is not false
//   messages               list of {role, content, ...}: the chat template's render of the
//                          whole conversation, tokenized without added special tokens (the
//                          template writes them); loss on the assistant turns only
//                          (assistant_only_loss), else on all tokens; an optional "tools" field
//                          goes to the template as apply_chat_template's tools
//   prompt + completion    two strings: tokenize(prompt + completion + EOS); loss on the
//                          completion only unless completion_only_loss is false. Two message
//                          lists (conversational): the render of prompt + completion; loss on
//                          the completion's turns (its assistant turns with assistant_only_loss)
//   <dataset_text_field>   a string ("text"): tokenize(text + EOS); loss on all tokens
// Standard text is tokenized with the post-processor's special tokens (BOS), as HF's
// tokenizer(text) is by default; EOS is appended when the tokens do not already end with it.
//
// Where the prompt's tokens are not a prefix of the prompt + completion tokens (a BPE merge
// across the boundary, e.g. a prompt ending in a space), TRL warns and masks len(prompt) tokens;
// here the targets start at the first token that differs, so the merged token, which holds
// completion text, is trained on.
//
// Assistant turns without {% generation %} markers: message i's targets are the tokens that
// render(messages[0..i]) adds to render(messages[0..i), add_generation_prompt=true), i.e. its
// content and end-of-turn tokens but not the assistant header. This needs the template to be
// prefix-stable: both renders' tokens must be prefixes of the whole conversation's tokens. A
// template that renders a turn differently once later turns follow (Qwen3 dropping earlier
// reasoning, say), or a token merging across a turn boundary, makes the row an error naming
// its line; set assistant_only_loss to false to train such rows on all tokens. The row's length
// is checked first, from the render of the whole conversation; with truncation, only the turns
// that begin within the first max_length tokens are rendered and checked.
//
// Every problem with a row is an fp8rl::Error "DATASET:LINE: what is wrong".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja/chat_template.h"

namespace fp8rl {

namespace tok {
class Tokenizer;
}

struct SftExample {
  std::vector<int32_t> input_ids;  // [n] the tokens of one example
  // [n] 1: the token is a training target (predicted from the tokens before it); entry 0 is
  // never a target, having no token before it.
  std::vector<uint8_t> loss_mask;
  int64_t line = 0;  // 1-based line in the JSONL file

  // Tokens t >= 1 with loss_mask[t] set: the number of predictions this example trains.
  int64_t num_targets() const;
};

struct SftDataOptions {
  int64_t max_length = 1024;  // TRL's default
  // false: an example longer than max_length is an error naming its line; true: cut to its
  // first max_length tokens (TRL's truncation_mode "keep_start").
  bool truncation = false;
  std::string dataset_text_field = "text";
  // TRL's: unset = loss on the completion only for prompt-completion rows; true/false force it.
  std::optional<bool> completion_only_loss;
  // messages rows train on the assistant turns only (TRL's default is false; sft_config.h).
  bool assistant_only_loss = true;
  // The tokenizer's EOS token id (tokenizer_config.json's eos_token), appended to text and
  // completions; -1 when the tokenizer has none, which makes such rows an error.
  int32_t eos_token_id = -1;
  // input_ids must lie in [0, vocab_size); 0: the tokenizer's vocab_size().
  int64_t vocab_size = 0;
  // TRL's chat_template_kwargs: extra variables of the chat template (null: none).
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
};

// One row at a time, as read_sft_dataset reads each line (and as the fuzzer drives it).
// `tokenizer` and `chat` (null when the model has no chat template) must outlive the reader;
// read() is const and safe to call from several threads at once.
class SftRowReader {
 public:
  SftRowReader(const tok::Tokenizer& tokenizer, const ChatTemplateConfig* chat,
               const SftDataOptions& options);
  // tokenizer null: rows of input_ids only (a row of text is an error naming the missing
  // tokenizer.json); options.vocab_size must then be set.
  SftRowReader(const tok::Tokenizer* tokenizer, const ChatTemplateConfig* chat,
               const SftDataOptions& options);
  ~SftRowReader();
  SftRowReader(const SftRowReader&) = delete;
  SftRowReader& operator=(const SftRowReader&) = delete;

  // One parsed row; the example's line is left 0, and errors lack the "DATASET:LINE: " prefix.
  SftExample read(const nlohmann::ordered_json& row) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `chat` may be null when the model has no chat template (messages rows are then an error).
// An empty dataset (no non-blank line) is an error too. Rows are encoded in parallel over the
// cores (parallel_for); the examples keep the file's order, and of several bad rows the first
// is reported.
std::vector<SftExample> read_sft_dataset(const std::string& path, const tok::Tokenizer& tokenizer,
                                         const ChatTemplateConfig* chat,
                                         const SftDataOptions& options);
// The same for a model without tokenizer.json (null): rows of input_ids only.
std::vector<SftExample> read_sft_dataset(const std::string& path, const tok::Tokenizer* tokenizer,
                                         const ChatTemplateConfig* chat,
                                         const SftDataOptions& options);

// What a model directory adds to its tokenizer for SFT data.
struct SftTokenizerSetup {
  // tokenizer_config.json's eos_token as an id (TRL's processing_class.eos_token); -1: none.
  int32_t eos_token_id = -1;
  // The model's chat template (transformers' lookup, "default"); unset when it has none.
  std::optional<ChatTemplateConfig> chat;
};
// An eos_token the tokenizer does not know, or a malformed config, is an error.
SftTokenizerSetup load_sft_tokenizer_setup(const std::string& model_dir,
                                           const tok::Tokenizer& tokenizer);

}  // namespace fp8rl
