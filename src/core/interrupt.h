// Ctrl-C and SIGTERM for the long-running commands (training). While an InterruptHandler is
// alive, the first SIGINT or SIGTERM only asks the run to stop: it sets the flag a StopRequest
// reads, which the trainers poll between steps (they then save the last completed step and
// end). A second one ends the process at once, by the signal's default action, after killing
// the child process groups registered here.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <atomic>

namespace fp8rl {

// What a training loop polls between steps: 0 while the run goes on, else the number of the
// signal that asked it to stop. A default one never asks.
class StopRequest {
 public:
  StopRequest() = default;
  explicit StopRequest(const std::atomic<int>* signal) : signal_(signal) {}
  int signal() const { return signal_ != nullptr ? signal_->load(std::memory_order_relaxed) : 0; }
  bool requested() const { return signal() != 0; }

 private:
  const std::atomic<int>* signal_ = nullptr;
};

// Installs the SIGINT and SIGTERM handlers for its lifetime (the previous actions come back
// after); one at a time.
class InterruptHandler {
 public:
  // first_signal_note: what the first signal prints on stderr (static storage; null: that the
  // run stops after its current step and saves a checkpoint).
  explicit InterruptHandler(const char* first_signal_note = nullptr);
  ~InterruptHandler();
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;
  StopRequest stop_request() const;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

// The process groups a second signal kills before the process ends (a reward process): the
// ordinary path kills them in their owners' destructors, which an exit by a signal skips.
// A full table (8 groups) leaves a group unregistered; its owner still kills it normally.
void register_child_group(pid_t group);
void unregister_child_group(pid_t group);

}  // namespace fp8rl
