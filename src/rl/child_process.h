// A long-lived child process that answers one line per request line: a command line run through
// /bin/sh -c, its stdin and stdout our pipes, its stderr ours. It never hangs the caller (every
// exchange has a deadline), never kills the caller with SIGPIPE, and never leaves a zombie: the
// destructor closes its stdin, waits briefly, then kills its process group and reaps it.
// Not thread-safe: one exchange at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8rl {

// Up to `max_bytes` of a child's output as an error message may quote it: control characters
// and DEL escaped (\n, \r, \t, \xNN), so that the message stays one line and no terminal
// escape sequence reaches the terminal; "..." marks a cut.
std::string printable_excerpt(std::string_view text, size_t max_bytes = 200);

class ChildProcess {
 public:
  // Starts `command` in its own process group (so that a kill reaches the programs the shell
  // starts). `who` names the process in errors ("reward process 'x'"). A failure to start is an
  // fp8rl::Error; a command the shell cannot find shows up as exit status 127 at the first
  // exchange.
  // `environment`: NAME=VALUE entries added to ours (replacing ours of the same names).
  ChildProcess(std::string command, std::string who, std::vector<std::string> environment = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Writes `request` (which must end in '\n') and returns the next line of output (without the
  // '\n'), within `timeout` for the whole exchange. An fp8rl::Error naming the process and the
  // cause when it times out, exits (status or signal named), closes its pipes, answers before
  // reading the whole request, answers more than one line, or writes more than max_line_bytes
  // without a newline; the process is then killed and every later exchange fails.
  // `waiting_on_us`, when given, is asked every few milliseconds: while it returns true the
  // process is waiting on the caller (an answer to a request of its own), and the timeout
  // starts again; what it throws ends the exchange, the process left running.
  std::string exchange(std::string_view request, std::chrono::milliseconds timeout,
                       size_t max_line_bytes, const std::function<bool()>& waiting_on_us = {});

  // Kills the process group now and reaps the process (after an error the caller found in an
  // answer); later exchanges fail. Idempotent.
  void kill();

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& command() const { return command_; }

 private:
  // An fp8rl::Error "<who>: <what>" after killing the process.
  [[noreturn]] void fail(const std::string& what);
  // The process stopped talking (`what`: "closed its stdout"): waits up to a second for it to
  // exit and fails naming its exit status or signal.
  [[noreturn]] void fail_ended(const std::string& what);
  // Waits until the process has exited or `wait` has passed, without reaping it; true if exited
  // (then exit_description_ says how).
  bool wait_exit(std::chrono::milliseconds wait);
  // SIGKILL to the process group and reap the leader.
  void kill_and_reap();

  std::string command_;
  std::string who_;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;             // our end of the child's stdin (non-blocking, close-on-exec)
  int stdout_fd_ = -1;            // our end of the child's stdout (non-blocking, close-on-exec)
  std::string pending_;           // output read past the last line returned
  std::string exit_description_;  // "exited with status 1", once wait_exit saw it exit
  std::string failure_;           // why the process was killed, for later exchanges
};

}  // namespace fp8rl
