#include "rl/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <thread>

#include "core/check.h"
#include "core/interrupt.h"

extern char** environ;

namespace fp8rl {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long the destructor lets the process exit by itself after closing its stdin, and how long
// it then waits after SIGTERM before SIGKILL.
constexpr milliseconds kExitGrace{2000};
constexpr milliseconds kTermGrace{500};
// How often an exchange that waits looks whether the process has exited.
constexpr milliseconds kExitPoll{50};

std::string errno_text(int err) {
  return std::strerror(err);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Moves a pipe end off fds 0-2 (when our own stdin/stdout/stderr were closed, pipe2 can return
// them, and dup2 onto the same number would keep its close-on-exec flag in the child).
int above_stdio(int fd) {
  if (fd > 2) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  // On failure `fd` stays open for the caller to close.
  CHECK(moved >= 0, "child process: fcntl(F_DUPFD_CLOEXEC) failed: {}", errno_text(errno));
  ::close(fd);
  return moved;
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  CHECK(flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0,
        "child process: fcntl(O_NONBLOCK) failed: {}", errno_text(errno));
}

// write() that cannot raise SIGPIPE in this process: SIGPIPE is blocked in this thread for the
// call, and one it raised is consumed before the mask is restored (a SIGPIPE that was already
// pending stays pending). The process-wide disposition is left alone.
ssize_t write_without_sigpipe(int fd, const char* data, size_t size) {
  sigset_t pipe_set, old_mask, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  const ssize_t n = ::write(fd, data, size);
  const int err = errno;
  if (n < 0 && err == EPIPE && !was_pending) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = err;
  return n;
}

std::string describe_status(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) {
    const int code = info.si_status;
    if (code == 127) return "exited with status 127 (the shell did not find the command)";
    if (code == 126) return "exited with status 126 (the command is not executable)";
    return fmt::format("exited with status {}", code);
  }
  const int sig = info.si_status;
  const char* name = ::sigabbrev_np(sig);
  const char* text = ::strsignal(sig);
  return fmt::format("was killed by signal {} (SIG{}: {}){}", sig, name ? name : "?",
                     text ? text : "?", info.si_code == CLD_DUMPED ? ", core dumped" : "");
}

}  // namespace

ChildProcess::ChildProcess(std::string command, std::string who,
                           std::vector<std::string> environment)
    : command_(std::move(command)), who_(std::move(who)) {
  CHECK(!command_.empty(), "{}: the command line is empty", who_);
  int in[2], out[2];
  CHECK(::pipe2(in, O_CLOEXEC) == 0, "{}: pipe2 failed: {}", who_, errno_text(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(in[0]);
    ::close(in[1]);
    RAISE("{}: pipe2 failed: {}", who_, errno_text(err));
  }
  try {
    for (int* fd : {&in[0], &in[1], &out[0], &out[1]}) *fd = above_stdio(*fd);
    // Our ends only (the child's ends are other open file descriptions).
    set_nonblocking(in[1]);
    set_nonblocking(out[0]);
  } catch (const Error&) {
    for (int fd : {in[0], in[1], out[0], out[1]}) ::close(fd);
    throw;
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears close-on-exec on the copies; the originals (close-on-exec) vanish at exec.
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
  // Descriptors of ours opened without close-on-exec (by libraries) stay out of the child too.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Own process group; default SIGPIPE/SIGINT/SIGTERM handling and no blocked signals, whatever
  // this process set for itself.
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP}) sigaddset(&defaults, sig);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  char sh[] = "sh";
  char dash_c[] = "-c";
  char* argv[] = {sh, dash_c, command_.data(), nullptr};
  // Ours, less the names `environment` sets, then those.
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const std::string& set : environment)
      replaced =
          replaced || entry.substr(0, entry.find('=') + 1) == set.substr(0, set.find('=') + 1);
    if (!replaced) envp.push_back(*e);
  }
  for (std::string& set : environment) envp.push_back(set.data());
  envp.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, "/bin/sh", &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  ::close(out[1]);
  stdin_fd_ = in[1];
  stdout_fd_ = out[0];
  if (rc != 0) {
    pid_ = -1;
    close_fd(stdin_fd_);
    close_fd(stdout_fd_);
    RAISE("{}: could not start /bin/sh -c '{}': {}", who_, command_, errno_text(rc));
  }
  // A second Ctrl-C ends fp8rl without this destructor: the group is killed from the handler.
  register_child_group(pid_);
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0) return;
  // EOF on its stdin is the signal to finish; then SIGTERM, then SIGKILL.
  close_fd(stdin_fd_);
  if (!wait_exit(kExitGrace)) {
    ::kill(-pid_, SIGTERM);
    wait_exit(kTermGrace);
  }
  kill_and_reap();
}

void ChildProcess::kill() {
  if (pid_ > 0) kill_and_reap();
}

void ChildProcess::kill_and_reap() {
  // The leader is not reaped yet, so its pid (= the group id) cannot have been reused: the
  // SIGKILL reaches only its group (what the shell started, even after the shell exited).
  ::kill(-pid_, SIGKILL);
  unregister_child_group(pid_);  // before the reap frees the group id for reuse
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  close_fd(stdin_fd_);
  close_fd(stdout_fd_);
}

bool ChildProcess::wait_exit(milliseconds wait) {
  const auto deadline = Clock::now() + wait;
  for (;;) {
    siginfo_t info{};
    // WNOWAIT: look without reaping (kill_and_reap reaps).
    const int rc = ::waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc == 0 && info.si_pid == pid_) {
      exit_description_ = describe_status(info);
      return true;
    }
    if (rc < 0 && errno != EINTR) return false;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

std::string printable_excerpt(std::string_view text, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += char(c);
    }
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

void ChildProcess::fail(const std::string& what) {
  failure_ = what;
  kill_and_reap();
  RAISE("{}: {}", who_, what);
}

void ChildProcess::fail_ended(const std::string& what) {
  if (wait_exit(milliseconds(1000))) fail(fmt::format("{} ({})", what, exit_description_));
  fail(fmt::format("{} but is still running", what));
}

std::string ChildProcess::exchange(std::string_view request, milliseconds timeout,
                                   size_t max_line_bytes,
                                   const std::function<bool()>& waiting_on_us) {
  CHECK(pid_ > 0, "{}: is no longer running ({})", who_,
        failure_.empty() ? "it was stopped" : failure_);
  CHECK(!request.empty() && request.back() == '\n', "{}: a request must end in a newline", who_);
  if (!pending_.empty()) {
    fail(fmt::format("wrote output that was not an answer to a request: '{}'",
                     pending_.substr(0, 200)));
  }
  auto deadline = Clock::now() + timeout;
  size_t written = 0;
  char buffer[1 << 16];
  // The answer when pending_ holds a whole line; fails on an answer that breaks the protocol.
  const auto take_line = [&]() -> std::optional<std::string> {
    const size_t newline = pending_.find('\n');
    if (newline == std::string::npos) {
      if (pending_.size() > max_line_bytes)
        fail(fmt::format("wrote more than {} bytes without a newline", max_line_bytes));
      return std::nullopt;
    }
    if (written < request.size()) {
      fail(fmt::format("answered before reading the whole request ({} of {} bytes): '{}'", written,
                       request.size(),
                       printable_excerpt(std::string_view(pending_).substr(0, newline))));
    }
    std::string line = pending_.substr(0, newline);
    pending_.erase(0, newline + 1);
    if (!pending_.empty()) {
      fail(fmt::format("answered more than one line: '{}' after '{}'", printable_excerpt(pending_),
                       printable_excerpt(line)));
    }
    return line;
  };
  for (;;) {
    if (waiting_on_us && waiting_on_us()) deadline = Clock::now() + timeout;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      fail(fmt::format("gave no answer within {} s{}", double(timeout.count()) / 1000.0,
                       written < request.size()
                           ? fmt::format(" (it read only {} of the {} bytes of the request)",
                                         written, request.size())
                           : ""));
    }
    pollfd fds[2] = {{stdout_fd_, POLLIN, 0},
                     {written < request.size() ? stdin_fd_ : -1, POLLOUT, 0}};
    // Woken at least every kExitPoll to look whether the process itself has exited: a program
    // it started in the background may hold the pipes open, so no end of file comes.
    const int ready = ::poll(fds, 2, int(std::min<int64_t>(left.count() + 1, kExitPoll.count())));
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail(fmt::format("poll failed: {}", errno_text(errno)));
    }
    if (fds[0].revents != 0) {
      const ssize_t n = ::read(stdout_fd_, buffer, sizeof(buffer));
      if (n == 0) fail_ended("closed its stdout");
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        fail(fmt::format("reading its stdout failed: {}", errno_text(errno)));
      }
      if (n > 0) {
        pending_.append(buffer, size_t(n));
        if (std::optional<std::string> line = take_line()) return *line;
      }
    }
    if (fds[1].revents != 0) {
      const ssize_t n =
          write_without_sigpipe(stdin_fd_, request.data() + written, request.size() - written);
      if (n < 0 && errno == EPIPE) fail_ended("closed its stdin");
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        fail(fmt::format("writing to its stdin failed: {}", errno_text(errno)));
      }
      if (n > 0) written += size_t(n);
    }
    if (wait_exit(milliseconds(0))) {
      // It exited, and what it wrote before is in the pipe to read: its answer, if whole.
      bool end_of_file = false;
      for (;;) {
        const ssize_t n = ::read(stdout_fd_, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR) continue;
        end_of_file = n == 0;
        if (n <= 0) break;
        pending_.append(buffer, size_t(n));
        if (pending_.size() > max_line_bytes + 1) break;
      }
      if (std::optional<std::string> line = take_line()) return *line;
      if (end_of_file) fail(fmt::format("closed its stdout ({})", exit_description_));
      fail(
          fmt::format("{} without an answer, while a program it started still holds its stdout "
                      "open",
                      exit_description_));
    }
  }
}

}  // namespace fp8rl
