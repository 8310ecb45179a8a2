// `fp8rl report RUN_DIR`: one self-contained HTML page of a training run (inline CSS and SVG,
// no script, no external resource): a chart per metric family present in metrics.jsonl (two to
// a row, the evaluations' eval_ metrics drawn in their training metric's chart), then a table of
// every metric's first, last and best value, then the last steps' sample completions of
// samples.jsonl grouped by prompt.
#pragma once

#include <cstddef>
#include <string>

namespace fp8rl::cli {

struct ReportOptions {
  size_t sample_steps = 4;        // the last this many steps of samples.jsonl are shown
  size_t max_text_bytes = 4000;   // a prompt or completion is cut to this for display
  size_t max_chart_points = 600;  // per series; longer runs are bucketed (min/max band kept)
};

// The HTML of the run in `run_dir`: metrics.jsonl is required (its absence is an error naming
// the directory); samples.jsonl and config.yaml / config.json are shown when present. A
// malformed line is an error naming file:line.
std::string render_report(const std::string& run_dir, const ReportOptions& options = {});

// Whether the regular file `path` begins as render_report's pages do: an earlier report,
// which `fp8rl report --out` may replace (any other existing file it refuses).
bool is_report_file(const std::string& path);

}  // namespace fp8rl::cli
