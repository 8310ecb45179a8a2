#include "cli/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

#include "cli/run_log.h"
#include "cli/svg_chart.h"
#include "core/check.h"
#include "core/input_file.h"
#include "core/spelling.h"

namespace fp8rl::cli {

namespace fs = std::filesystem;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr uint64_t kMaxConfigBytes = 4 << 20;

// How every report begins: an existing file that does not is not replaced.
constexpr std::string_view kReportStart =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";

// Charts two to a row across the page, one to a row on a narrow screen; each chart's SVG scales
// to its column.
constexpr const char* kStyle = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;padding:20px 24px;
max-width:1600px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:17px;margin:24px 0 8px}
.meta{color:#555;font-size:13px;margin:2px 0}
nav{font-size:13px;margin:6px 0} nav a{margin-right:14px}
.charts{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:14px}
@media (max-width:900px){.charts{grid-template-columns:minmax(0,1fr)}}
figure.chart{margin:0;border:1px solid #ddd;border-radius:4px;padding:8px 10px;min-width:0}
figure.chart>svg{display:block;width:100%;height:auto}
figcaption{font-weight:600;font-size:14px}
.legend{font-size:12px;margin:4px 0;line-height:1.7}
.legend span{margin-right:14px;white-space:nowrap}
.legend svg.key{vertical-align:middle;margin-right:4px}
svg .plot{fill:#fff;stroke:#999} svg .grid{stroke:#eee}
svg text{font-size:11px;fill:#555} svg .ytick{text-anchor:end}
svg .xtick,svg .xlabel{text-anchor:middle}
svg path.line{fill:none} svg path.band{fill-opacity:.2;stroke-opacity:.5;stroke-width:.7}
.note{color:#777;font-style:italic}
.table{overflow-x:auto}
table{border-collapse:collapse;font-size:13px}
th,td{padding:2px 10px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left;font-family:ui-monospace,monospace}
details{margin:6px 0} summary{cursor:pointer}
.group{border-left:3px solid #bbb;padding-left:8px;margin:10px 0}
.sample{display:flex;gap:10px;align-items:baseline;margin:2px 0 2px 8px}
.sample .meta{flex:0 0 auto;min-width:230px;white-space:nowrap} .sample pre{flex:1;min-width:0}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:6px;margin:4px 0;
max-height:480px;overflow:auto;font-size:12px}
pre.prompt{max-height:200px;background:#f0f3f8}
)";

// A chart: training's series on every step, the evaluations' (eval_strategy; TRL's names with
// the eval_ prefix) through the evaluated steps, so that the two read against each other.
struct Family {
  std::string title;
  const char* unit;
  std::vector<std::string> keys;
  std::vector<std::string> eval = {};
  double scale = 1.0;  // values are divided by it (bytes -> GiB)
};

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> keys_where(const RunMetrics& m, bool (*pick)(const std::string&)) {
  std::vector<std::string> out;
  for (const std::string& k : m.keys)
    if (pick(k)) out.push_back(k);
  return out;
}

// TensorBoard's smoothing: an exponential moving average over the finite values, divided by
// its weight so that the first steps are not pulled towards 0.
std::vector<double> smoothed(const std::vector<double>& y, double decay) {
  std::vector<double> out(y.size(), std::nan(""));
  double ema = 0, weight = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) continue;
    ema = decay * ema + (1 - decay) * y[i];
    weight = decay * weight + (1 - decay);
    out[i] = ema / weight;
  }
  return out;
}

std::vector<std::string> eval_of(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& k : keys) out.push_back("eval_" + k);
  return out;
}

// In reading order: what a run is judged by (reward, KL, lengths, engine-trainer mismatch, loss,
// memory, time), then the diagnostics.
std::vector<Family> families(const RunMetrics& m) {
  std::vector<std::string> reward = {"reward"};
  for (const std::string& k : keys_where(m, [](const std::string& k) {
         return starts_with(k, "rewards/") && ends_with(k, "/mean");
       }))
    reward.push_back(k);
  std::vector<std::string> eval_reward = {"eval_reward"};
  for (const std::string& k : keys_where(m, [](const std::string& k) {
         return starts_with(k, "eval_rewards/") && ends_with(k, "/mean");
       }))
    eval_reward.push_back(k);
  std::vector<std::string> timing =
      keys_where(m, [](const std::string& k) { return starts_with(k, "timing/"); });
  timing.push_back("step_seconds");  // sft
  const std::vector<std::string> dpo_rewards = {"rewards/chosen", "rewards/rejected",
                                                "rewards/margins"};
  const std::vector<std::string> dpo_logps = {"logps/chosen", "logps/rejected"};
  return {
      {"Reward", "", reward, eval_reward},
      // DPO (TRL's keys): the implicit rewards β (policy - ref) of the pairs.
      {"DPO implicit rewards", "", dpo_rewards, eval_of(dpo_rewards)},
      {"DPO preference accuracy", "fraction", {"rewards/accuracies"}, {"eval_rewards/accuracies"}},
      {"DPO policy log-probs", "nats", dpo_logps, eval_of(dpo_logps)},
      {"KL to the reference", "nats", {"kl"}},
      // The evaluations' mean only: their min and max would double a crowded chart.
      {"Completion length",
       "tokens",
       {"completions/mean_length", "completions/min_length", "completions/max_length",
        "completions/mean_terminated_length"},
       {"eval_completions/mean_length"}},
      {"Engine-trainer mismatch: logprob difference",
       "nats",
       {"sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max"}},
      // NeMo RL's token-level mean of exp(|difference|): 1 when the engine and the trainer agree.
      {"Engine-trainer mismatch: token probability error", "", {"sampling/token_prob_error/mean"}},
      {"Engine-trainer mismatch: importance sampling ratio",
       "",
       {"sampling/importance_sampling_ratio/mean", "sampling/importance_sampling_ratio/min",
        "sampling/importance_sampling_ratio/max"}},
      {"Loss", "", {"loss"}, {"eval_loss"}},
      {"Peak memory",
       "GiB",
       {"peak_memory_bytes/rollout", "peak_memory_bytes/train", "peak_memory_bytes"},
       {},
       kGiB},
      {m.has("eval_runtime") ? "Time per step and per evaluation" : "Time per step",
       "s",
       timing,
       {"eval_runtime"}},
      {"Throughput",
       "tokens/s",
       {"rollout_tokens_per_second", "train_tokens_per_second", "tokens_per_second"}},
      {"Clip ratios",
       "fraction",
       {"clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean", "cispo_clip_ratio",
        "completions/clipped_ratio"}},
      {"Entropy", "nats", {"entropy"}},
      {"Advantages", "", {"advantages/mean", "advantages/min", "advantages/max"}},
      {"Gradient norm", "", {"grad_norm"}},
      {"Learning rate", "", {"learning_rate"}},
  };
}

std::string value_text(const std::string& key, double v) {
  if (!std::isfinite(v)) return "&mdash;";
  if (starts_with(key, "peak_memory_bytes")) return fmt::format("{:.3f} GiB", v / kGiB);
  return fmt::format("{:.6g}", v);
}

std::string step_text(double step) {
  return fmt::format("{:.10g}", step);
}

// Which way is better, where a metric has an obvious one: +1 higher, -1 lower, 0 neither.
int better(const std::string& key) {
  const std::string k = starts_with(key, "eval_") ? key.substr(5) : key;  // the same metric
  if (k == "reward" || k == "rewards/accuracies" || k == "rewards/margins" ||
      (starts_with(k, "rewards/") && ends_with(k, "/mean")))
    return +1;
  if (k == "loss") return -1;
  return 0;
}

// The metrics in the order of the charts, then the others by name.
std::vector<std::string> summary_order(const RunMetrics& m) {
  std::vector<std::string> order;
  const auto add = [&](const std::string& key) {
    if (m.has(key) && std::find(order.begin(), order.end(), key) == order.end())
      order.push_back(key);
  };
  for (const Family& family : families(m)) {
    for (const std::string& key : family.keys) add(key);
    for (const std::string& key : family.eval) add(key);
  }
  for (const std::string& key : m.keys) add(key);
  return order;
}

// The run at a glance, above the charts: its steps and its wall time.
std::string overview(const RunMetrics& m) {
  double wall = 0;
  bool has_wall = false;
  for (const char* key : {"timing/step_seconds", "step_seconds"}) {
    if (!m.has(key) || has_wall) continue;
    for (double v : m.values.at(key))
      if (std::isfinite(v)) wall += v, has_wall = true;
  }
  std::string html = fmt::format("<p class=\"meta\">{}", counted(int64_t(m.steps.size()), "step"));
  if (!m.steps.empty())
    html += fmt::format(" (step {} to {})", step_text(m.steps.front()), step_text(m.steps.back()));
  if (has_wall && wall < 1e12)  // a corrupt time must not overflow the int64 split
    html += fmt::format("; wall time {}h {:02}m {:02}s (sum of the steps' times)",
                        int64_t(wall) / 3600, int64_t(wall) / 60 % 60, int64_t(wall) % 60);
  return html + "</p>";
}

std::string summary_section(const RunMetrics& m) {
  std::string html = "<h2 id=\"summary\">First, last and best per metric</h2><div class=\"table\">";
  html +=
      "<table><tr><th>metric</th><th>first</th><th>last</th><th>min</th><th>at step</th>"
      "<th>max</th><th>at step</th><th>best</th></tr>";
  for (const std::string& key : summary_order(m)) {
    const std::vector<double>& v = m.values.at(key);
    std::optional<size_t> first, last, lo, hi;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) continue;
      if (!first) first = i;
      last = i;
      if (!lo || v[i] < v[*lo]) lo = i;
      if (!hi || v[i] > v[*hi]) hi = i;
    }
    if (!first) continue;  // never a number: nothing to summarise
    const int dir = better(key);
    std::string best;
    if (dir != 0) {
      const size_t b = dir > 0 ? *hi : *lo;
      best = fmt::format("{} (step {})", value_text(key, v[b]), step_text(m.steps[b]));
    }
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td></tr>",
        html_escape(key), value_text(key, v[*first]), value_text(key, v[*last]),
        value_text(key, v[*lo]), step_text(m.steps[*lo]), value_text(key, v[*hi]),
        step_text(m.steps[*hi]), best);
  }
  return html + "</table></div>";
}

std::string charts_section(const RunMetrics& m, const ReportOptions& options) {
  ChartLayout layout;
  layout.max_points = options.max_chart_points;
  std::string html = "<h2 id=\"curves\">Curves</h2><div class=\"charts\">";
  for (const Family& family : families(m)) {
    Chart chart{family.title, family.unit, m.steps, {}};
    for (const std::string& key : family.keys) {
      if (!m.has(key)) continue;
      std::vector<double> y;
      for (double v : m.values.at(key)) y.push_back(v / family.scale);
      chart.series.push_back({key, std::move(y), {}});
      // Step-to-step reward is noisy; its trend is what a run is judged by.
      if (key == "reward" && m.steps.size() >= 10)
        chart.series.push_back(
            {"reward (smoothed, EMA 0.9)", smoothed(chart.series.back().y, 0.9), {}});
    }
    // An evaluation's metrics are on its step's line only: one line through the evaluated
    // steps, not a dot between gaps.
    for (const std::string& key : family.eval) {
      if (!m.has(key)) continue;
      ChartSeries s{key, {}, {}};
      const std::vector<double>& v = m.values.at(key);
      for (size_t i = 0; i < v.size(); ++i)
        if (std::isfinite(v[i])) s.x.push_back(m.steps[i]), s.y.push_back(v[i] / family.scale);
      if (!s.x.empty()) chart.series.push_back(std::move(s));
    }
    if (!chart.series.empty()) html += render_chart(chart, layout);
  }
  return html + "</div>";
}

std::string bytes_note(size_t shown, size_t total) {
  return shown < total
             ? fmt::format(" <span class=\"note\">(first {} of {} bytes)</span>", shown, total)
             : std::string();
}

// The value of `key` that metrics.jsonl logged for `step` (NaN where none).
double logged_at(const RunMetrics& m, const std::string& key, int64_t step) {
  if (!m.has(key)) return std::nan("");
  const std::vector<double>& v = m.values.at(key);
  for (size_t i = m.steps.size(); i-- > 0;)
    if (m.steps[i] == double(step) && std::isfinite(v[i])) return v[i];
  return std::nan("");
}

// Per step, its completions under their prompts: samples.jsonl writes a round's groups whole,
// one prompt's completions after another, so consecutive rows with one prompt are a group.
std::string samples_section(const std::vector<RunSample>& samples, const RunMetrics& m) {
  std::string html = "<h2 id=\"samples\">Sample completions</h2>";
  if (samples.empty()) return html + "<p class=\"note\">no samples to show</p>";
  for (size_t begin = 0; begin < samples.size();) {
    size_t end = begin, groups = 0, finite = 0;
    double sum = 0;
    for (; end < samples.size() && samples[end].step == samples[begin].step; ++end) {
      if (end == begin || samples[end].prompt != samples[end - 1].prompt) ++groups;
      if (std::isfinite(samples[end].reward)) sum += samples[end].reward, ++finite;
    }
    const int64_t step = samples[begin].step;
    const double logged = logged_at(m, "reward", step);
    html += fmt::format(
        "<details{}><summary>step {}: {} completion{} of {} prompt{}{}{}</summary>",
        end == samples.size() ? " open" : "", step, end - begin, end - begin == 1 ? "" : "s",
        groups, groups == 1 ? "" : "s",
        finite ? fmt::format(", mean reward {:.4g}", sum / double(finite)) : "",
        std::isfinite(logged) ? fmt::format(" (the step's logged reward {:.4g})", logged) : "");
    for (size_t i = begin; i < end; ++i) {
      const RunSample& s = samples[i];
      if (i == begin || s.prompt != samples[i - 1].prompt)
        html += fmt::format(
            "{}<div class=\"group\"><details open><summary>prompt{}</summary>"
            "<pre class=\"prompt\">{}</pre></details>",
            i == begin ? "" : "</div>", bytes_note(s.prompt.size(), s.prompt_bytes),
            html_escape(s.prompt));
      html += fmt::format(
          "<div class=\"sample\"><div class=\"meta\">reward {} &middot; advantage {}{}</div>"
          "<pre>{}</pre></div>",
          value_text("reward", s.reward), value_text("advantage", s.advantage),
          bytes_note(s.completion.size(), s.completion_bytes), html_escape(s.completion));
    }
    html += "</div></details>";
    begin = end;
  }
  return html;
}

std::string config_section(const fs::path& dir) {
  for (const char* name : {"config.yaml", "config.json"}) {
    const fs::path path = dir / name;
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    const std::string text = read_input_file(path, "config file", kMaxConfigBytes);
    return fmt::format(
        "<h2 id=\"config\">Configuration</h2><details><summary>{}</summary><pre>{}</pre>"
        "</details>",
        name, html_escape(text));
  }
  return "";
}

}  // namespace

bool is_report_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(kReportStart.size() + 256, '\0');
  in.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(in.gcount()));
  return head.starts_with(kReportStart) && head.find("<title>fp8rl report: ") != std::string::npos;
}

std::string render_report(const std::string& run_dir, const ReportOptions& options) {
  const fs::path dir(run_dir);
  std::error_code ec;
  CHECK(fs::exists(dir, ec), "run directory '{}' does not exist", run_dir);
  CHECK(fs::is_directory(dir, ec), "'{}' is not a directory (give a run directory)", run_dir);
  const fs::path metrics_path = dir / "metrics.jsonl";
  CHECK(fs::exists(metrics_path, ec),
        "no metrics.jsonl in '{}': not the run directory of fp8rl sft / grpo / dpo", run_dir);
  const RunMetrics metrics = read_metrics(metrics_path.string());
  const fs::path samples_path = dir / "samples.jsonl";
  const bool has_samples = fs::exists(samples_path, ec);
  std::vector<RunSample> samples;
  if (has_samples)
    samples =
        read_last_samples(samples_path.string(), options.sample_steps, options.max_text_bytes);

  const std::string config = config_section(dir);
  std::string html = fmt::format(
      "{2}<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
      "<title>fp8rl report: {0}</title><style>{1}</style></head><body>"
      "<h1>fp8rl run report</h1><p class=\"meta\">{0}</p>",
      html_escape(run_dir), kStyle, kReportStart);
  if (metrics.steps.empty()) {
    html += "<p class=\"note\">metrics.jsonl holds no steps yet</p>";
  } else {
    html += overview(metrics);
    html += "<nav><a href=\"#curves\">Curves</a><a href=\"#summary\">Metrics table</a>";
    if (has_samples) html += "<a href=\"#samples\">Samples</a>";
    if (!config.empty()) html += "<a href=\"#config\">Configuration</a>";
    html += "</nav>";
    // The curves first: they are what a run is read by; the table gives their exact values.
    html += charts_section(metrics, options);
    html += summary_section(metrics);
  }
  if (has_samples) html += samples_section(samples, metrics);
  html += config;
  return html + "</body></html>\n";
}

}  // namespace fp8rl::cli
