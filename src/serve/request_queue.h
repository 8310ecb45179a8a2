// Between the HTTP handler threads and the engine's thread: handlers submit requests and read
// their tokens from a channel each; the engine's thread runs Engine::serve over this feed,
// admitting what was submitted between steps and pushing every sampled token to its channel.
// A handler whose client went away aborts its requests (the engine frees their sequences at
// the next step). Shutdown: stop() or a signal (core/interrupt.h) ends serve() and fails every
// open channel.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/interrupt.h"
#include "engine/engine.h"

namespace fp8rl::serve {

// One sampled token of one choice, as a handler reads it.
struct TokenEvent {
  int part = 0;  // which of the submitted requests (a prompt of /v1/completions)
  int sample = 0;
  int32_t token = 0;
  float logprob = 0;
  float processed_logprob = 0;  // under the tempered distribution, when the request asks for it
  std::vector<std::pair<int32_t, float>> top;
  std::string text;  // the text this event releases (held back text comes later)
  bool done = false;
  FinishReason finish = FinishReason::length;
};

// The events of one HTTP request's engine requests, in order; failed when the engine refused
// them or shut down.
class Channel {
 public:
  void push(TokenEvent event);
  void fail(const std::string& message);
  // The next event; nullopt when `timeout` passed without one or the channel failed (error()).
  std::optional<TokenEvent> pop(std::chrono::milliseconds timeout);
  std::optional<std::string> error() const;

 private:
  friend class RequestQueue;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<TokenEvent> events_;
  std::optional<std::string> error_;
  std::vector<int64_t> ids_;  // the engine requests (set at submit)
};

// How a request's text is released while it is generated.
struct Release {
  // Bytes held back at the end of the text until the choice ends: the longest stop string
  // minus one, so that a stop string, which the engine cuts off, is never sent in part.
  size_t holdback = 0;
  bool hold_all = false;  // the whole text at the end (tool calls are parsed from it)
};

class RequestQueue : public RequestFeed {
 public:
  explicit RequestQueue(StopRequest signal) : signal_(signal) {}

  // Handler threads. The requests were checked (Engine::validate) by the caller.
  std::shared_ptr<Channel> submit(std::vector<GenerationRequest> requests, Release release);
  void abort(const Channel& channel);
  void stop();  // ends serve() (as a signal does)
  int64_t live_sequences() const { return live_sequences_.load(); }
  int64_t live_requests() const { return live_requests_.load(); }
  // Requests aborted while the engine was running them (a client gone mid-stream).
  int64_t aborted_requests() const { return aborted_requests_.load(); }

  // The engine's thread (RequestFeed).
  bool poll(bool idle, int64_t live_sequences, std::vector<Arrival>& arrived,
            std::vector<int64_t>& aborted) override;
  void on_token(int64_t id, int sample, const CompletionOutput& out, bool done) override;
  void on_rejected(int64_t id, const std::string& message) override;
  // After serve() returned: every channel still open fails with `message`.
  void fail_all(const std::string& message);

 private:
  struct Route {
    std::shared_ptr<Channel> channel;
    int part = 0;
    Release release;
    std::vector<size_t> sent;  // text bytes released, per sample
    int samples_left = 0;
  };
  struct Submitted {
    Arrival arrival;
    Route route;
  };

  StopRequest signal_;
  std::mutex mutex_;  // guards submitted_, aborted_, stop_, next_id_
  std::condition_variable wake_;
  std::vector<Submitted> submitted_;
  std::vector<int64_t> aborted_;
  bool stop_ = false;
  int64_t next_id_ = 0;
  std::unordered_map<int64_t, Route> routes_;  // the engine's thread only
  std::atomic<int64_t> live_sequences_{0}, live_requests_{0}, aborted_requests_{0};
};

}  // namespace fp8rl::serve
