#include "core/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace fp8rl {

namespace {

// A signal handler gets no argument but the signal, so what it writes must be reachable
// without one: these are the module's only globals. Lock-free atomics are safe to use in a
// handler (a plain object shared with the trainer's threads would be a data race).
std::atomic<int> g_stop_signal{0};
std::atomic<const char*> g_stop_note{nullptr};  // what the first signal prints
constexpr int kMaxGroups = 8;
std::atomic<pid_t> g_child_groups[kMaxGroups];
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free &&
              std::atomic<const char*>::is_always_lock_free);

constexpr char kTrainingNote[] =
    "\nfp8rl: stopping after the current step and saving a checkpoint "
    "(interrupt again to exit at once, saving nothing)\n";

void on_signal(int sig) {
  int none = 0;
  if (g_stop_signal.compare_exchange_strong(none, sig)) {
    // write(2) is async-signal-safe; fmt and stdio are not. errno is the interrupted code's.
    const int saved_errno = errno;
    const char* note = g_stop_note.load();
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, note, std::strlen(note));
    errno = saved_errno;
    return;
  }
  for (std::atomic<pid_t>& g : g_child_groups)
    if (const pid_t p = g.load(); p > 0) ::kill(-p, SIGKILL);
  // The default action, as if no handler were installed: the shell sees the process die of
  // the signal. Both signals are blocked while this runs, so it arrives when the handler returns.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

}  // namespace

InterruptHandler::InterruptHandler(const char* first_signal_note) {
  struct sigaction current {};
  ::sigaction(SIGINT, nullptr, &current);
  CHECK(current.sa_handler != on_signal, "an InterruptHandler is already installed");
  g_stop_signal.store(0);
  g_stop_note.store(first_signal_note != nullptr ? first_signal_note : kTrainingNote);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  // Interrupted system calls resume (the trainers poll the flag between steps, not in them).
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &previous_int_);
  ::sigaction(SIGTERM, &sa, &previous_term_);
}

InterruptHandler::~InterruptHandler() {
  ::sigaction(SIGINT, &previous_int_, nullptr);
  ::sigaction(SIGTERM, &previous_term_, nullptr);
}

StopRequest InterruptHandler::stop_request() const {
  return StopRequest(&g_stop_signal);
}

void register_child_group(pid_t group) {
  for (std::atomic<pid_t>& g : g_child_groups) {
    pid_t empty = 0;
    if (g.compare_exchange_strong(empty, group)) return;
  }
}

void unregister_child_group(pid_t group) {
  for (std::atomic<pid_t>& g : g_child_groups) {
    pid_t p = group;
    if (g.compare_exchange_strong(p, 0)) return;
  }
}

}  // namespace fp8rl
