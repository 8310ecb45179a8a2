// The verdict on one run of the CLI against hostile input: either a clean error (exit code 1,
// stderr's last line a single `fp8rl: error: ...` naming the problem) or a correct success
// (exit 0 and the case's own check); never a signal, a timeout, or memory past the case's
// bound; and the inputs (every file's type, size and bytes) exactly as they were.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "process_run.h"

namespace fp8rl::test {

enum class Outcome { error, success, error_or_success };

struct Expect {
  Outcome outcome = Outcome::error;
  std::string fragment;  // must appear in the error line (when it is an error)
  long max_rss_mb = 512;
  double max_seconds = 0;  // a bound tighter than the wall-clock kill; 0: none
  // The success check: "" when the output is right, else what is wrong.
  std::function<std::string(const ProcessResult&)> success;
};

// path -> "type size hash" of every entry under the given paths (lstat: a symlink is recorded as
// a link to its target, never followed; FIFOs and devices are recorded by type, never read).
using Snapshot = std::map<std::string, std::string>;

inline uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

inline void snapshot_entry(const std::filesystem::path& p, Snapshot& snap) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) {
    snap[p.string()] = "absent";
    return;
  }
  std::string sig;
  if (S_ISREG(st.st_mode) && st.st_size > (off_t{64} << 20)) {
    // The suite's huge files are sparse "endless" inputs: their size and modification time
    // (any write changes it) stand for their bytes, which would take minutes to read.
    sig = "file " + std::to_string(st.st_size) + " mtime " + std::to_string(st.st_mtim.tv_sec) +
          "." + std::to_string(st.st_mtim.tv_nsec);
  } else if (S_ISREG(st.st_mode)) {
    std::ifstream in(p, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    sig = "file " + std::to_string(bytes.size()) + " " + std::to_string(fnv1a(bytes));
  } else if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    sig = "symlink -> " + std::filesystem::read_symlink(p, ec).string();
  } else if (S_ISDIR(st.st_mode)) {
    sig = "directory";
    for (const auto& e : std::filesystem::directory_iterator(p)) snapshot_entry(e.path(), snap);
  } else if (S_ISFIFO(st.st_mode)) {
    sig = "fifo";
  } else {
    sig = "special " + std::to_string(st.st_mode);
  }
  snap[p.string()] = sig;
}

inline Snapshot snapshot(const std::vector<std::filesystem::path>& paths) {
  Snapshot snap;
  for (const auto& p : paths) snapshot_entry(p, snap);
  return snap;
}

// What differs between two snapshots ("" when none), for the failure message.
inline std::string snapshot_diff(const Snapshot& before, const Snapshot& after) {
  std::string diff;
  for (const auto& [path, sig] : before) {
    const auto it = after.find(path);
    const std::string now = it == after.end() ? "absent" : it->second;
    if (now != sig) diff += "\n  " + path + ": was " + sig + ", now " + now;
  }
  for (const auto& [path, sig] : after)
    if (!before.count(path)) diff += "\n  " + path + ": new " + sig;
  return diff;
}

inline std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// "" when the run passes, else every reason it does not.
inline std::string verdict(const ProcessResult& r, const Expect& e, const Snapshot& before,
                           const Snapshot& after) {
  std::string why;
  const auto fail = [&](const std::string& reason) { why += (why.empty() ? "" : "; ") + reason; };
  if (r.timed_out) fail("timed out after " + std::to_string(r.wall_seconds) + " s");
  if (r.signal != 0) fail("killed by signal " + std::to_string(r.signal));
  if (e.max_seconds > 0 && r.wall_seconds > e.max_seconds)
    fail("took " + std::to_string(r.wall_seconds) + " s, over " + std::to_string(e.max_seconds));
  if (r.max_rss_kb > e.max_rss_mb * 1024)
    fail("peak RSS " + std::to_string(r.max_rss_kb / 1024) + " MB over " +
         std::to_string(e.max_rss_mb) + " MB");
  const std::string changed = snapshot_diff(before, after);
  if (!changed.empty()) fail("inputs or existing outputs changed:" + changed);
  if (r.timed_out || r.signal != 0) return why;

  const std::string line = last_line(r.err);
  const bool clean_error = r.exit_code == 1 && line.rfind("fp8rl: error: ", 0) == 0 &&
                           r.err.find("fp8rl: error: ") == r.err.rfind("fp8rl: error: ");
  const bool allowed_error = e.outcome != Outcome::success;
  const bool allowed_success = e.outcome != Outcome::error;
  if (r.exit_code == 0) {
    if (!allowed_success) {
      fail("exit 0 where an error was expected (stdout: " + r.out.substr(0, 200) + ")");
    } else if (e.success) {
      const std::string wrong = e.success(r);
      if (!wrong.empty()) fail("exit 0 with wrong output: " + wrong);
    }
  } else if (!allowed_error) {
    fail("exit " + std::to_string(r.exit_code) + " where success was expected: " + line);
  } else if (!clean_error) {
    fail("exit " + std::to_string(r.exit_code) + " without one `fp8rl: error:` as the last line: " +
         r.err.substr(r.err.size() > 600 ? r.err.size() - 600 : 0));
  } else if (!e.fragment.empty() && line.find(e.fragment) == std::string::npos) {
    fail("the error does not name '" + e.fragment + "': " + line);
  }
  return why;
}

}  // namespace fp8rl::test
