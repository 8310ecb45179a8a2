// fp8rl report RUN_DIR [--out FILE] [--samples N] [--max-text BYTES]
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "cli/report.h"
#include "core/check.h"
#include "core/output_file.h"

namespace fp8rl::cli {

namespace {
struct ReportCommandOptions {
  std::string run_dir, out;
  ReportOptions report;
};

void run_report(const ReportCommandOptions& o) {
  namespace fs = std::filesystem;
  const fs::path dir(o.run_dir);
  const std::string out = o.out.empty() ? (dir / "report.html").string() : o.out;
  // The run's files are the inputs, not its directory: the default output lies inside it, and
  // a second report replaces the first.
  check_output_file(out, {(dir / "metrics.jsonl").string(), (dir / "samples.jsonl").string(),
                          (dir / "config.yaml").string(), (dir / "config.json").string()});
  // Like init --out over a model: a file that exists and is not an earlier report (a model's
  // config.json, a notebook) is not ours to replace.
  std::error_code ec;
  CHECK(!fs::exists(out, ec) || is_report_file(out),
        "output '{}' exists and is not a report written by fp8rl report: refusing to overwrite it",
        out);
  const std::string html = render_report(o.run_dir, o.report);
  write_file_replacing(out, html);
  fmt::print("wrote {} ({} kB)\n", out, (html.size() + 1023) / 1024);
}
}  // namespace

void add_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportCommandOptions>();
  CLI::App* c = app.add_subcommand(
      "report", "Write a self-contained HTML page of a training run: curves, summary, samples");
  c->add_option("run_dir", o->run_dir, "Run directory of fp8rl sft / grpo / dpo (metrics.jsonl)")
      ->required();
  c->add_option("--out", o->out, "Output HTML file (default: RUN_DIR/report.html)");
  c->add_option("--samples", o->report.sample_steps,
                "Show the sample completions of the last this many steps")
      ->capture_default_str();
  c->add_option("--max-text", o->report.max_text_bytes,
                "Cut each shown prompt and completion to this many bytes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->callback([o] { run_report(*o); });
}

}  // namespace fp8rl::cli
