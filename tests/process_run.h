// Runs a program as a child process under resource limits, for the tests that drive the fp8rl
// binary: fork + exec, the limits set in the child (address space, CPU seconds, file size, a
// wall clock enforced by the parent with SIGKILL), stdin from a file (default /dev/null),
// stdout and stderr captured, and wait4() for the exit status and the peak resident memory.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace fp8rl::test {

struct ProcessLimits {
  rlim_t address_space = 0;   // RLIMIT_AS bytes; 0: none
  rlim_t cpu_seconds = 0;     // RLIMIT_CPU; 0: none
  rlim_t file_size = 0;       // RLIMIT_FSIZE bytes (a write past it fails with EFBIG); 0: none
  double wall_seconds = 0;    // SIGKILL to the child's process group after this; 0: none
  bool as_nobody = false;     // when running as root, drop to uid/gid 65534 (root ignores modes)
  bool merge_output = false;  // stderr into stdout (one stream, in order)
  std::string stdin_path = "/dev/null";
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
};

struct ProcessResult {
  int exit_code = -1;      // -1 when killed by a signal
  int signal = 0;          // the terminating signal, 0 when it exited
  bool timed_out = false;  // killed by the wall-clock limit
  std::string out, err;    // err is empty with merge_output
  long max_rss_kb = 0;     // ru_maxrss of the child (with this process's size at fork)
  double wall_seconds = 0;
};

namespace process_detail {

inline std::string read_all(int fd) {
  std::string s;
  char buf[65536];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) s.append(buf, size_t(n));
  return s;
}

// An unnamed temporary file for one captured stream.
inline int capture_file() {
  char name[] = "/tmp/fp8rl_process_XXXXXX";
  const int fd = ::mkstemp(name);
  if (fd >= 0) ::unlink(name);
  return fd;
}

}  // namespace process_detail

// Exit code 125 from the child: it could not drop to nobody; 126: a limit could not be set;
// 127: exec failed.
inline ProcessResult run_process(const std::vector<std::string>& args,
                                 const ProcessLimits& limits = {}) {
  ProcessResult r;
  std::vector<std::string> words = args;
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int out_fd = process_detail::capture_file();
  const int err_fd = limits.merge_output ? out_fd : process_detail::capture_file();
  if (out_fd < 0 || err_fd < 0) {
    r.err = "cannot create the capture files";
    return r;
  }
  // The child's ru_maxrss includes what it inherited at fork() (Linux records the forked copy's
  // high-water mark at exec): give the freed heap back first, so that it is this process's few
  // MB and not whatever a test's generator once allocated.
  ::malloc_trim(0);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: the wall-clock kill reaches its children too
    const int in_fd = ::open(limits.stdin_path.c_str(), O_RDONLY);
    if (in_fd < 0) ::_exit(126);
    ::dup2(in_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    std::signal(SIGXFSZ, SIG_DFL);
    std::signal(SIGPIPE, SIG_DFL);
    // RLIMIT_CPU's hard limit one second above the soft one: SIGXCPU first (a named signal in
    // the verdict), SIGKILL only if that is ignored.
    const auto set = [](int resource, rlim_t value) {
      const struct rlimit lim { value, resource == RLIMIT_CPU ? value + 1 : value };
      if (value > 0 && ::setrlimit(resource, &lim) != 0) ::_exit(126);
    };
    set(RLIMIT_AS, limits.address_space);
    set(RLIMIT_CPU, limits.cpu_seconds);
    set(RLIMIT_FSIZE, limits.file_size);
    for (const auto& [name, value] : limits.env) ::setenv(name.c_str(), value.c_str(), 1);
    if (limits.as_nobody && ::geteuid() == 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
      ::_exit(125);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // Exit is detected without reaping (WNOWAIT): while the child is a zombie its pid, and so its
  // process group's id, cannot be reused, so the group kill below reaches only what it started.
  for (;;) {
    siginfo_t info{};
    const int w = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (w == 0 && info.si_pid == pid) break;
    if (w < 0 && errno != EINTR) break;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (limits.wall_seconds > 0 && elapsed > limits.wall_seconds && !r.timed_out) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(elapsed < 1 ? 2 : 10));
  }
  // Whatever the child left running in its group (a writer it started) goes with it.
  ::kill(-pid, SIGKILL);
  int status = 0;
  struct rusage usage {};
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.max_rss_kb = usage.ru_maxrss;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = process_detail::read_all(out_fd);
  if (!limits.merge_output) r.err = process_detail::read_all(err_fd);
  ::close(out_fd);
  if (err_fd != out_fd) ::close(err_fd);
  return r;
}

}  // namespace fp8rl::test
