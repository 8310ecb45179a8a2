#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace fp8rl::cli {

Progress::Progress(std::string what, int64_t total, std::string unit)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(std::max<int64_t>(total, 1)),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  if (drawn_ && tty_) std::fputc('\n', stderr);
}

void Progress::update(int64_t done, const std::string& extra) {
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double frac = std::clamp(double(done) / double(total_), 0.0, 1.0);
  const int decile = int(frac * 10);
  if (tty_) {
    if (drawn_ && done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  } else if (decile == last_decile_) {
    return;
  }
  last_decile_ = decile;
  last_draw_ = now;
  drawn_ = true;
  const int width = 30, filled = int(frac * width);
  const double rate = secs > 0 ? double(done) / secs : 0.0;
  const double eta = rate > 0 ? double(total_ - done) / rate : 0.0;
  std::string bar(size_t(filled), '#');
  bar.resize(size_t(width), '.');
  std::fprintf(stderr, "%s%s [%s] %lld/%lld %s, %.1f %s/s, %.0fs elapsed, ETA %.0fs%s%s%s",
               tty_ ? "\r" : "", what_.c_str(), bar.c_str(), (long long)done, (long long)total_,
               unit_.c_str(), rate, unit_.c_str(), secs, eta, extra.empty() ? "" : ", ",
               extra.c_str(), tty_ ? "\x1b[K" : "\n");
  std::fflush(stderr);
}

}  // namespace fp8rl::cli
