// The files of a run directory (train/run_dir.h) read back for `fp8rl report`: metrics.jsonl as
// columns of numbers, and the last steps of samples.jsonl.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fp8rl::cli {

// metrics.jsonl as columns: steps[i] is line i's "step" (its 1-based record number where the
// line has none); values[key][i] its number, NaN where the line has null (NaN and infinities
// are logged as null), a non-number or no such key. Booleans count as 0 and 1.
struct RunMetrics {
  std::vector<double> steps;
  std::vector<std::string> keys;  // sorted by name, "step" left out
  std::map<std::string, std::vector<double>> values;

  bool has(const std::string& key) const { return values.count(key) > 0; }
};

// A line that is not a JSON object is an error naming file:line. Python writers (TRL) put bare
// NaN / Infinity tokens in their JSON; they are read as null. Blank lines are skipped.
RunMetrics read_metrics(const std::string& path);
// One line of it (number: its 1-based line, for errors) added to `m`; a blank line adds
// nothing. Call finish_metrics after the last.
void add_metrics_line(RunMetrics& m, const std::string& line, const std::string& path,
                      uint64_t number);
void finish_metrics(RunMetrics& m);

struct RunSample {
  int64_t step = 0;
  std::string prompt, completion;                 // cut to max_chars for display
  size_t prompt_bytes = 0, completion_bytes = 0;  // before the cut
  double reward = 0, advantage = 0;               // NaN where null or missing
};

// The samples of the last `last_steps` distinct steps of samples.jsonl, in file order, with
// prompt and completion cut to at most max_chars bytes (at a UTF-8 character boundary). A prompt
// that is not a string (a list of chat messages) is shown as its JSON.
std::vector<RunSample> read_last_samples(const std::string& path, size_t last_steps,
                                         size_t max_chars);
// One line of it (errors name path:number); nullopt for a blank line.
std::optional<RunSample> parse_sample_line(const std::string& line, const std::string& path,
                                           uint64_t number, size_t max_chars);

// Cuts `text` to at most max_bytes bytes without splitting a UTF-8 character.
std::string cut_utf8(const std::string& text, size_t max_bytes);

}  // namespace fp8rl::cli
