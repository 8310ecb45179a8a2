// The run logs `fp8rl report` reads (cli/run_log.h): each line of the input as a metrics.jsonl
// line and as a samples.jsonl line.
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include "cli/run_log.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fp8rl::fuzz::as_text(data, size);
  fp8rl::cli::RunMetrics metrics;
  uint64_t number = 0;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string line(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    ++number;
    fp8rl::fuzz::run([&] { fp8rl::cli::add_metrics_line(metrics, line, "metrics.jsonl", number); });
    fp8rl::fuzz::run([&] {
      const std::optional<fp8rl::cli::RunSample> s =
          fp8rl::cli::parse_sample_line(line, "samples.jsonl", number, 16);
      // The text is cut to the asked size, never more.
      if (s && (s->prompt.size() > 16 || s->completion.size() > 16)) __builtin_trap();
    });
  }
  fp8rl::cli::finish_metrics(metrics);
  // One value per line read in every column.
  for (const auto& [key, column] : metrics.values)
    if (column.size() != metrics.steps.size()) __builtin_trap();
  return 0;
}
