// An agent episode's completions as the trainer sees them (rl/agent_environment.h). Each chat
// completion the agent asks for is its prompt's tokens (the chat template's render of the
// request's messages) and the sampled tokens. While each request's prompt extends the episode's
// last sequence (the previous prompt, its completion and new messages: a growing conversation)
// the sequence grows by the new tokens, as episode_rollout's turns do: the model's tokens as
// sampled (trained), the rest context (masked). A prompt that does not extend it (the agent
// rewrote its history, or its template renders earlier turns otherwise) starts a new sequence.
// All of an episode's sequences share its reward and are one sample of the loss; together they
// hold at most the planned prompt + max_completion_length tokens, the pass's plan of a sample.
#pragma once

#include <cstdint>
#include <vector>

namespace fp8rl {

struct AgentSequence {
  std::vector<int32_t> ids;      // [n] the prompt, then every later token
  std::vector<float> logp;       // [n] the engine's processed logprob of sampled tokens, else 0
  std::vector<uint8_t> sampled;  // [n] 1: sampled by the model (trained), 0: context
};

class AgentTrajectory {
 public:
  // `max_prompt`: the prompt the trainer's pass is planned for (the first sequence's tokens up
  // to there are the sample's prompt, the rest of its prompt context in the completion);
  // `max_completion`: max_completion_length, every token after that prompt.
  AgentTrajectory(int64_t max_prompt, int64_t max_completion);

  // Whether a completion of `prompt` would extend the last sequence.
  bool extends(const std::vector<int32_t>& prompt) const;
  // The tokens a completion of `prompt` may sample within the budget (< 1: none).
  int64_t room(const std::vector<int32_t>& prompt) const;
  // Records a completion of `prompt`: `ids` sampled with processed logprobs `logp`. It must
  // fit (room(prompt) >= ids.size()).
  void record(const std::vector<int32_t>& prompt, const std::vector<int32_t>& ids,
              const std::vector<float>& logp);

  const std::vector<AgentSequence>& sequences() const { return sequences_; }
  int64_t completions() const { return completions_; }
  // The first sequence's tokens that are the sample's prompt.
  int64_t prompt_length() const { return prompt_length_; }
  // The tokens after that prompt, over every sequence (each later one whole).
  int64_t completion_tokens() const;

 private:
  int64_t max_prompt_, max_completion_;
  int64_t prompt_length_ = 0;
  int64_t completions_ = 0;
  std::vector<AgentSequence> sequences_;
};

}  // namespace fp8rl
