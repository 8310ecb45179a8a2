// A one-line progress bar on stderr for long work: redrawn at most 10 times a second while
// stderr is a terminal, a line every 10% otherwise (logs stay short).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace fp8rl::cli {

class Progress {
 public:
  Progress(std::string what, int64_t total, std::string unit);
  ~Progress();  // ends the line
  // `done` of total; `extra` is appended (e.g. "loss 1.23").
  void update(int64_t done, const std::string& extra = "");

 private:
  std::string what_, unit_;
  int64_t total_;
  bool tty_;
  int last_decile_ = -1;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace fp8rl::cli
