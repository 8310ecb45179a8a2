// An agent program as GRPO's environment (`environment_server: COMMAND`, docs/ENVIRONMENTS.md):
// any program that speaks the OpenAI API. fp8rl serves /v1/chat/completions on 127.0.0.1 at an
// ephemeral port and starts the program once per run through /bin/sh -c with OPENAI_BASE_URL
// (http://127.0.0.1:PORT/v1) and OPENAI_API_KEY (a random key of the run, which the endpoint
// requires) in its environment. Per round it writes the environment protocol's reset line
// (rl/environment_process.h) naming the episodes; the program asks for chat completions with
// `model` (or the header X-Episode-Id) = an episode id, and answers with one line
//   {"episodes": [{"id": ..., "reward": number}, ...]}
// when the round's episodes are done. While they run, the calling thread drives the engine
// (Engine::serve over a serve::RequestQueue): the requests of every episode batched together,
// with the run's adapter and sampling settings; each answer is recorded, token for token, in its
// episode's trajectory (rl/agent_trajectory.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "rl/agent_trajectory.h"

namespace fp8rl {

namespace tok {
class Tokenizer;
}
class Engine;
class ConversationTokens;

struct AgentOptions {
  std::string command;  // run as /bin/sh -c COMMAND
  // The program may stay silent this long while none of its requests is being answered.
  double timeout_s = 300;
  // The run's: every completion samples with these (temperature, top_p, ...); n, max_tokens,
  // seed, stop strings and stop ids, top logprobs are set per request.
  SamplingParams sampling;
  int64_t max_prompt_length = 1;  // the prompt the trainer's pass is planned for
  int64_t max_completion_length = 512;
  int64_t max_context = 0;  // the model's
  int http_threads = 16;    // requests answered at once (a stream holds one to its end)
};

struct AgentEpisodeInput {
  std::string id;      // unique in the run
  nlohmann::json row;  // the dataset row (every column), for the reset line
  uint64_t seed = 0;   // the episode's sampling stream (each completion keyed from it)
};

struct AgentEpisodeResult {
  AgentTrajectory trajectory{1, 1};
  double reward = 0;
  nlohmann::json opening;       // the first request's messages
  nlohmann::json messages;      // the last request's messages after the opening, its answer last
  std::string last_completion;  // the last answer's text (special tokens skipped)
  std::vector<int32_t> last_ids;
  bool truncated = false;  // the last answer ended at its token budget
};

struct AgentStats {
  int64_t requests = 0;  // completions answered and recorded
  int64_t refused = 0;   // requests answered with an error (unknown episode, ...)
  int64_t prefill_tokens = 0, prefix_hit_tokens = 0;  // the engine's, over the round
};

class AgentEnvironment {
 public:
  // Starts the endpoint and the program. `chat` renders the requests' messages (as fp8rl serve
  // does); chat, tokenizer and the eos ids' owner must outlive this object.
  AgentEnvironment(const AgentOptions& options, const ConversationTokens& chat,
                   const tok::Tokenizer& tokenizer, std::vector<int32_t> eos_ids);
  // Ends the program (its stdin closed, then killed) and the endpoint.
  ~AgentEnvironment();
  AgentEnvironment(const AgentEnvironment&) = delete;
  AgentEnvironment& operator=(const AgentEnvironment&) = delete;

  // Runs a round: the program gets the reset line for `inputs`; `engine` answers its requests
  // until it reports the rewards. Results in the order of `inputs`. An fp8rl::Error naming the
  // program when it exits, stays silent past the timeout, answers malformed JSON or leaves an
  // episode without a completion.
  std::vector<AgentEpisodeResult> run(Engine& engine, const std::vector<AgentEpisodeInput>& inputs,
                                      AgentStats& stats);

  const std::string& who() const;
  const std::string& base_url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8rl
