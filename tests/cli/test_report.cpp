// fp8rl report: the HTML page of a synthetic run directory (charts per present metric family,
// escaped samples, gaps for null / NaN, bucketing of long runs) and its errors, through
// render_report and through the fp8rl binary.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli/report.h"
#include "cli/run_log.h"
#include "cli/svg_chart.h"
#include "core/check.h"

namespace fs = std::filesystem;
using namespace fp8rl;
using namespace fp8rl::cli;

namespace {

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size()))
    ++n;
  return n;
}

// A fresh, empty run directory (removed by the destructor).
struct RunDir {
  fs::path path;
  explicit RunDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("fp8rl_report_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~RunDir() { fs::remove_all(path); }
  void write(const std::string& file, const std::string& text) const {
    std::ofstream(path / file, std::ios::binary) << text;
  }
  std::string str() const { return path.string(); }
};

// GRPO-like lines: reward, one reward function, KL, lengths and peak rollout memory; no
// entropy, grad norm, timing, ...
std::string grpo_lines(int steps) {
  std::string text;
  for (int s = 1; s <= steps; ++s)
    text += "{\"step\": " + std::to_string(s) + ", \"reward\": " + std::to_string(0.1 * s) +
            ", \"rewards/accuracy/mean\": " + std::to_string(0.05 * s) +
            ", \"kl\": " + std::to_string(0.001 * s) +
            ", \"completions/mean_length\": 100, \"completions/min_length\": 20,"
            " \"completions/max_length\": 256, \"peak_memory_bytes/rollout\": 2147483648}\n";
  return text;
}

// The d attributes of the <path> elements (lines and bands) in `html`.
std::vector<std::string> path_data(const std::string& html) {
  std::vector<std::string> out;
  const std::regex d(R"re( d="([^"]*)")re");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), d); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  return out;
}

// The number of charts in `html`.
size_t charts(const std::string& html) {
  return count(html, "<figure class=\"chart\">");
}

// The d attributes of the series' lines (class "line") in `html`, in drawing order.
std::vector<std::string> line_data(const std::string& html) {
  std::vector<std::string> out;
  const std::regex d(R"re(<path class="line" d="([^"]*)")re");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), d); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  return out;
}

// The <figure> of the chart titled `title`, "" when there is none.
std::string figure(const std::string& html, const std::string& title) {
  const size_t at = html.find("<figcaption>" + title);
  if (at == std::string::npos) return "";
  const size_t begin = html.rfind("<figure", at), end = html.find("</figure>", at);
  return html.substr(begin, end - begin);
}

struct Result {
  int exit_code;
  std::string output;
};

// The shell execs fp8rl: a death by a signal (a crash, a sanitizer's abort) is exit_code -1, not
// the shell's 128 + signal.
Result run(const std::string& args) {
  FILE* p = popen(("exec " + std::string(FP8RL_BIN) + " " + args + " 2>&1").c_str(), "r");
  Result r{0, ""};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string error_of(const std::string& run_dir) {
  try {
    render_report(run_dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Report, OneChartPerPresentMetricFamily) {
  const RunDir dir("families");
  dir.write("metrics.jsonl", grpo_lines(20));
  const std::string html = render_report(dir.str());
  EXPECT_EQ(charts(html), 4u);
  for (const char* title : {"Reward", "KL to the reference", "Completion length", "Peak memory"})
    EXPECT_EQ(count(html, std::string("<figcaption>") + title), 1u) << title;
  for (const char* title : {"Entropy", "Loss", "Gradient norm", "Learning rate", "Throughput",
                            "Clip ratios", "Engine-trainer mismatch", "Time per step"})
    EXPECT_EQ(count(html, std::string("<figcaption>") + title), 0u) << title;
  // The reward chart: the reward, the per-function mean and the smoothed reward.
  const std::string reward = figure(html, "Reward");
  EXPECT_NE(reward.find("rewards/accuracy/mean"), std::string::npos);
  EXPECT_NE(reward.find("reward (smoothed"), std::string::npos);
  EXPECT_EQ(count(reward, "class=\"line\""), 3u);
  // Bytes are drawn in GiB: the constant 2 GiB sits between ticks around 2.
  const std::string memory = figure(html, "Peak memory");
  EXPECT_NE(memory.find(">2<"), std::string::npos) << memory;
  // No external resource and no script anywhere in the page.
  EXPECT_EQ(count(html, "http://"), count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);

  // Another family appears exactly when its key does.
  dir.write("metrics.jsonl",
            "{\"step\": 1, \"entropy\": 0.5, \"grad_norm\": 1}\n{\"step\": 2, \"entropy\": 0.4}\n");
  const std::string other = render_report(dir.str());
  EXPECT_EQ(charts(other), 2u);
  EXPECT_EQ(count(other, "<figcaption>Entropy"), 1u);
  EXPECT_EQ(count(other, "<figcaption>Gradient norm"), 1u);
  EXPECT_EQ(count(other, "<figcaption>Reward"), 0u);
  // The engine-trainer mismatch: the logprob difference and the token probability error.
  dir.write("metrics.jsonl",
            "{\"step\": 1, \"sampling/sampling_logp_difference/mean\": 0.01, "
            "\"sampling/token_prob_error/mean\": 1.01}\n");
  const std::string mismatch = render_report(dir.str());
  EXPECT_EQ(charts(mismatch), 2u);
  EXPECT_NE(figure(mismatch, "Engine-trainer mismatch: token probability error")
                .find("sampling/token_prob_error/mean"),
            std::string::npos);
  EXPECT_EQ(count(mismatch, "<figcaption>Engine-trainer mismatch: logprob difference"), 1u);
}

TEST(Report, DpoAndSftRunsGetTheirCharts) {
  const RunDir dir("dpo");
  dir.write("metrics.jsonl",
            "{\"step\": 1, \"loss\": 0.69, \"rewards/chosen\": 0.1, \"rewards/rejected\": -0.1, "
            "\"rewards/margins\": 0.2, \"rewards/accuracies\": 0.6, \"logps/chosen\": -40, "
            "\"logps/rejected\": -45}\n");
  std::string html = render_report(dir.str());
  EXPECT_EQ(charts(html), 4u);
  for (const char* title :
       {"Loss", "DPO implicit rewards", "DPO preference accuracy", "DPO policy log-probs"})
    EXPECT_EQ(count(html, std::string("<figcaption>") + title), 1u) << title;
  EXPECT_EQ(count(html, "<figcaption>Reward"), 0u);
  dir.write("metrics.jsonl",
            "{\"step\": 1, \"loss\": 2, \"tokens_per_second\": 900, "
            "\"peak_memory_bytes\": 1073741824, \"step_seconds\": 2}\n");
  html = render_report(dir.str());
  EXPECT_EQ(charts(html), 4u);
  for (const char* title : {"Loss", "Throughput", "Peak memory", "Time per step"})
    EXPECT_EQ(count(html, std::string("<figcaption>") + title), 1u) << title;
  EXPECT_NE(html.find("wall time 0h 00m 02s"), std::string::npos);
}

// The evaluations' metrics (eval_ names, on some steps only; eval_on_start's on a step 0 of
// their own) are drawn in their training metric's chart, each one line with a marker per
// evaluation through the evaluated steps. The training series keep every step.
TEST(Report, EvalMetricsAreDrawnInTheirTrainingChart) {
  const RunDir dir("eval");
  std::string text =
      "{\"step\": 0, \"eval_reward\": 0.3, \"eval_rewards/accuracy/mean\": 0.3, "
      "\"eval_completions/mean_length\": 4, \"eval_completions/max_length\": 8, "
      "\"eval_runtime\": 2}\n";
  for (int s = 1; s <= 20; ++s) {
    text += "{\"step\": " + std::to_string(s) + ", \"reward\": " + std::to_string(0.01 * s) +
            ", \"completions/mean_length\": 5";
    if (s % 5 == 0)
      text += ", \"eval_reward\": " + std::to_string(0.3 + 0.02 * s) +
              ", \"eval_rewards/accuracy/mean\": 0.5, \"eval_completions/mean_length\": 4, "
              "\"eval_completions/max_length\": 8, \"eval_runtime\": 2";
    text += "}\n";
  }
  dir.write("metrics.jsonl", text);
  const std::string html = render_report(dir.str());
  EXPECT_EQ(html.find("<figcaption>Eval"), std::string::npos);  // no chart of their own
  const std::string reward = figure(html, "Reward");
  ASSERT_FALSE(reward.empty());
  for (const char* key : {"eval_reward", "eval_rewards/accuracy/mean"})
    EXPECT_NE(reward.find(std::string(key) + "</span>"), std::string::npos) << key;
  // reward, the smoothed reward, eval_reward and the function's eval mean: the eval lines run
  // through steps 0, 5, 10, 15, 20 in one piece.
  const std::vector<std::string> lines = line_data(reward);
  ASSERT_EQ(lines.size(), 4u);
  for (size_t i : {2u, 3u}) {
    EXPECT_EQ(count(lines[i], "M"), 1u) << lines[i];
    EXPECT_EQ(count(lines[i], "L"), 4u) << lines[i];
  }
  EXPECT_EQ(count(lines[0], "L"), 19u);  // reward: steps 1 to 20
  // A marker per evaluation and one in each eval series' legend key; none on training lines.
  EXPECT_EQ(count(reward, "class=\"marker\""), 2u * (5 + 1));
  // The completion length chart gets the evaluations' mean only, the time chart eval_runtime.
  const std::string length = figure(html, "Completion length");
  EXPECT_NE(length.find("eval_completions/mean_length</span>"), std::string::npos);
  EXPECT_EQ(length.find("eval_completions/max_length"), std::string::npos);
  EXPECT_NE(figure(html, "Time per step and per evaluation").find("eval_runtime</span>"),
            std::string::npos);
  // Control: without evaluations the reward chart has its training lines only, no marker.
  dir.write("metrics.jsonl", grpo_lines(20));
  const std::string plain = figure(render_report(dir.str()), "Reward");
  EXPECT_EQ(plain.find("eval_"), std::string::npos);
  EXPECT_EQ(count(plain, "class=\"marker\""), 0u);
  // The best eval_reward is the highest, as for reward.
  EXPECT_NE(html.find("0.7 (step 20)"), std::string::npos);
  // SFT and DPO: eval_loss in the loss chart, DPO's eval metrics in theirs.
  dir.write(
      "metrics.jsonl",
      "{\"step\": 1, \"loss\": 0.69, \"rewards/accuracies\": 0.5, \"rewards/margins\": 0}\n"
      "{\"step\": 2, \"loss\": 0.6, \"rewards/accuracies\": 0.6, \"rewards/margins\": 0.1, "
      "\"eval_loss\": 0.65, \"eval_rewards/accuracies\": 0.7, \"eval_rewards/margins\": 0.1}\n");
  const std::string dpo = render_report(dir.str());
  EXPECT_NE(figure(dpo, "Loss").find("eval_loss</span>"), std::string::npos);
  EXPECT_NE(figure(dpo, "DPO preference accuracy").find("eval_rewards/accuracies</span>"),
            std::string::npos);
  EXPECT_NE(figure(dpo, "DPO implicit rewards").find("eval_rewards/margins</span>"),
            std::string::npos);
  EXPECT_EQ(dpo.find("<figcaption>Eval"), std::string::npos);
}

// The page's order and layout: the charts, two to a row (one on a narrow screen) and scaled to
// their column, come before the table of first / last / best values, which comes before the
// samples.
TEST(Report, ChartsComeFirstTwoToARow) {
  const RunDir dir("layout");
  dir.write("metrics.jsonl", grpo_lines(12));
  dir.write("samples.jsonl",
            "{\"step\": 12, \"prompt\": \"p\", \"completion\": \"c\", \"reward\": 1, "
            "\"advantage\": 0}\n");
  const std::string html = render_report(dir.str());
  const size_t charts = html.find("<div class=\"charts\">"), table = html.find("<table");
  ASSERT_NE(charts, std::string::npos);
  ASSERT_NE(table, std::string::npos);
  EXPECT_LT(charts, table);
  EXPECT_LT(html.rfind("</figure>"), table);  // every chart
  EXPECT_LT(table, html.find("<h2 id=\"samples\">"));
  // Every chart is a cell of the one grid.
  EXPECT_EQ(count(html, "<figure class=\"chart\">"), 4u);
  EXPECT_EQ(count(html.substr(charts, table - charts), "<figure class=\"chart\">"), 4u);
  // Two columns, one below 900 px; the SVGs fill their cell.
  const std::string style = html.substr(0, html.find("</style>"));
  EXPECT_NE(style.find(".charts{display:grid;grid-template-columns:repeat(2,minmax(0,1fr))"),
            std::string::npos);
  EXPECT_NE(style.find("@media (max-width:900px){.charts{grid-template-columns:minmax(0,1fr)}}"),
            std::string::npos);
  EXPECT_NE(style.find("figure.chart>svg{display:block;width:100%;height:auto}"),
            std::string::npos);
  // The charts in reading order: reward, KL, lengths, memory.
  const char* order[] = {"Reward", "KL to the reference", "Completion length", "Peak memory"};
  for (size_t i = 1; i < std::size(order); ++i)
    EXPECT_LT(html.find(std::string("<figcaption>") + order[i - 1]),
              html.find(std::string("<figcaption>") + order[i]))
        << order[i];
}

// Series that lie on one another (min = mean = max lengths, a reward that is its one function's
// mean) stay apart by their dash patterns, and each legend key shows its series' pattern.
TEST(Report, SeriesHaveDistinctDashPatterns) {
  const RunDir dir("dashes");
  std::string text;
  for (int s = 1; s <= 12; ++s)
    text += "{\"step\": " + std::to_string(s) +
            ", \"completions/mean_length\": 8, \"completions/min_length\": 8, "
            "\"completions/max_length\": 8, \"completions/mean_terminated_length\": 8" +
            (s % 4 == 0 ? ", \"eval_completions/mean_length\": 8" : "") + "}\n";
  dir.write("metrics.jsonl", text);
  const std::string chart = figure(render_report(dir.str()), "Completion length");
  ASSERT_FALSE(chart.empty());
  const std::regex line(
      R"re(<path class="line" d="([^"]*)"[^>]*?(?: stroke-dasharray="([^"]*)")?/>)re");
  std::vector<std::string> dashes, paths;
  for (auto it = std::sregex_iterator(chart.begin(), chart.end(), line);
       it != std::sregex_iterator(); ++it) {
    paths.push_back((*it)[1]);
    dashes.push_back((*it)[2]);
  }
  ASSERT_EQ(dashes.size(), 5u);
  // The four training lines on the same points ...
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(paths[i], paths[0]) << i;
  // ... and the evaluations' line drawn five ways: one solid, four dashed, no pattern twice.
  EXPECT_EQ(dashes[0], "");
  for (size_t i = 0; i < dashes.size(); ++i)
    for (size_t j = i + 1; j < dashes.size(); ++j) EXPECT_NE(dashes[i], dashes[j]) << i << j;
  // The legend keys carry the same patterns, in the same order.
  const std::string legend = chart.substr(0, chart.find("<svg xmlns"));
  for (size_t i = 1; i < dashes.size(); ++i)
    EXPECT_NE(legend.find("stroke-dasharray=\"" + dashes[i] + "\""), std::string::npos) << i;
  for (size_t i = 0; i < kDashPatterns; ++i)
    for (size_t j = i + 1; j < kDashPatterns; ++j)
      EXPECT_STRNE(series_dash(i), series_dash(j)) << i << j;
}

// Values at the edges of double: a chart or a note, never a hang or an error.
TEST(Report, ExtremeValuesGiveAChartOrANote) {
  const RunDir dir("extreme");
  dir.write("metrics.jsonl",
            "{\"step\": 1, \"grad_norm\": 1e300, \"loss\": 1e17, \"kl\": 0}\n"
            "{\"step\": 2, \"grad_norm\": -1e308, \"loss\": 100000000000000016, \"kl\": 0}\n"
            "{\"step\": 3, \"grad_norm\": 1e308, \"loss\": 1e17, \"kl\": 1e-300}\n");
  const std::string html = render_report(dir.str());
  EXPECT_NE(figure(html, "Gradient norm").find("values beyond the range of a chart"),
            std::string::npos);
  EXPECT_EQ(count(figure(html, "Loss"), "class=\"line\""), 1u);
  EXPECT_EQ(count(figure(html, "KL"), "class=\"line\""), 1u);
  for (const std::string& d : path_data(html))
    EXPECT_TRUE(std::regex_match(d, std::regex("[MLZ0-9.,-]+"))) << d;
  EXPECT_EQ(nice_ticks(1e17, 1e17 + 16, 5), (std::vector<double>{1e17, 1e17 + 16}));
}

TEST(Report, SummaryTableHasFirstLastAndBest) {
  const RunDir dir("summary");
  // loss is absent on the first line and null on the third; reward peaks at step 2.
  dir.write("metrics.jsonl",
            "{\"step\": 1, \"reward\": 0.5, \"timing/step_seconds\": 3600}\n"
            "{\"step\": 2, \"reward\": 0.9, \"loss\": 2.5, \"timing/step_seconds\": 61}\n"
            "{\"step\": 3, \"reward\": 0.7, \"loss\": null, \"timing/step_seconds\": 1}\n"
            "{\"step\": 4, \"reward\": 0.6, \"loss\": 1.5, \"a_custom\": 7}\n");
  const std::string html = render_report(dir.str());
  EXPECT_NE(html.find("4 steps (step 1 to 4); wall time 1h 01m 02s"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>reward</td><td>0.5</td><td>0.6</td><td>0.5</td><td>1</td>"
                      "<td>0.9</td><td>2</td><td>0.9 (step 2)</td></tr>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<tr><td>loss</td><td>2.5</td><td>1.5</td><td>1.5</td><td>4</td>"
                      "<td>2.5</td><td>2</td><td>1.5 (step 4)</td></tr>"),
            std::string::npos);
  // Rows in chart order (reward first), other metrics after them by name.
  EXPECT_LT(html.find("<td>reward</td>"), html.find("<td>loss</td>"));
  EXPECT_LT(html.find("<td>loss</td>"), html.find("<td>timing/step_seconds</td>"));
  EXPECT_LT(html.find("<td>timing/step_seconds</td>"), html.find("<td>a_custom</td>"));
  EXPECT_NE(html.find("<td>a_custom</td><td>7</td><td>7</td>"), std::string::npos);
}

TEST(Report, SampleTextIsEscapedAndOnlyTheLastStepsShown) {
  const RunDir dir("samples");
  dir.write("metrics.jsonl", grpo_lines(10));
  std::string samples;
  for (int s = 1; s <= 10; ++s)
    for (int c = 0; c < 2; ++c)
      samples += "{\"step\": " + std::to_string(s) + ", \"prompt\": \"Q & A <b>" +
                 std::to_string(s) + "</b>\", \"completion\": \"<script>alert(" +
                 std::to_string(s) +
                 ")</script> 'x' \\\"y\\\"\", \"reward\": 1.0, \"advantage\": -0.5}\n";
  dir.write("samples.jsonl", samples);
  ReportOptions options;
  options.sample_steps = 3;
  const std::string html = render_report(dir.str(), options);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(count(html, "&lt;script&gt;alert(10)&lt;/script&gt; &#39;x&#39; &quot;y&quot;"), 2u);
  EXPECT_EQ(count(html, "Q &amp; A &lt;b&gt;9&lt;/b&gt;"), 1u);  // once above its group
  EXPECT_EQ(html.find("<b>"), std::string::npos);
  for (int s = 1; s <= 10; ++s)
    EXPECT_EQ(count(html, "<summary>step " + std::to_string(s) + ": 2 completions"),
              s >= 8 ? 1u : 0u)
        << s;
  // The last step is open, earlier ones collapsed.
  EXPECT_NE(html.find("<details open><summary>step 10:"), std::string::npos);
  EXPECT_NE(html.find("<details><summary>step 9:"), std::string::npos);
}

// A step's completions are shown under their prompts (samples.jsonl writes whole groups), with
// the step's mean reward beside the one metrics.jsonl logged.
TEST(Report, SamplesAreGroupedByPrompt) {
  const RunDir dir("groups");
  dir.write("metrics.jsonl", "{\"step\": 1, \"reward\": 0.25}\n");
  std::string samples;
  for (const char* prompt : {"first prompt", "second prompt"})
    for (int c = 0; c < 2; ++c)
      samples +=
          std::string("{\"step\": 1, \"prompt\": \"") + prompt +
          "\", \"completion\": \"c\", \"reward\": " + (prompt[0] == 'f' && c == 0 ? "1" : "0") +
          ", \"advantage\": 0}\n";
  dir.write("samples.jsonl", samples);
  const std::string html = render_report(dir.str());
  EXPECT_NE(html.find("<summary>step 1: 4 completions of 2 prompts, mean reward 0.25 "
                      "(the step's logged reward 0.25)</summary>"),
            std::string::npos)
      << html;
  EXPECT_EQ(count(html, "<div class=\"group\">"), 2u);
  EXPECT_EQ(count(html, "<pre class=\"prompt\">first prompt</pre>"), 1u);
  EXPECT_EQ(count(html, "<pre class=\"prompt\">second prompt</pre>"), 1u);
  EXPECT_EQ(count(html, "<div class=\"sample\">"), 4u);
  // Each group holds its two completions: the second group starts after the first's two.
  const size_t second = html.find("<pre class=\"prompt\">second prompt</pre>");
  EXPECT_EQ(count(html.substr(0, second), "<div class=\"sample\">"), 2u);
}

// The run that scripts/report_screenshot.sh renders (tests/data/report_run: 40 steps of
// examples/demo.yaml with beta 0.04, evaluations every 10 steps and num_completions_to_print 16)
// gives the page that script is for.
TEST(Report, TheShippedDemoRun) {
  const std::string html = render_report(std::string(FP8RL_TEST_DATA) + "/report_run");
  EXPECT_LT(html.rfind("</figure>"), html.find("<table"));
  const std::string reward = figure(html, "Reward");
  EXPECT_EQ(count(reward, "class=\"line\""), 5u);  // 3 training series, 2 evaluation series
  EXPECT_NE(reward.find("eval_reward</span>"), std::string::npos);
  EXPECT_EQ(count(reward, "class=\"marker\""), 2u * (5 + 1));  // steps 0, 10, 20, 30, 40
  for (const char* title :
       {"KL to the reference", "Completion length", "Engine-trainer mismatch: logprob difference",
        "Loss", "Peak memory", "Time per step and per evaluation"})
    EXPECT_FALSE(figure(html, title).empty()) << title;
  // The last 4 steps' samples, 2 whole groups of 8 each.
  EXPECT_EQ(count(html, "<div class=\"group\">"), 8u);
  EXPECT_NE(html.find("<summary>step 40: 16 completions of 2 prompts"), std::string::npos);
}

TEST(Report, HugeCompletionsAreCut) {
  const RunDir dir("huge");
  dir.write("metrics.jsonl", grpo_lines(2));
  // 1 MB of "é" (2 bytes each): a cut at an odd byte count must not split one.
  std::string long_text;
  for (int i = 0; i < 500000; ++i) long_text += "\xC3\xA9";
  dir.write("samples.jsonl", "{\"step\": 2, \"prompt\": \"p\", \"completion\": \"" + long_text +
                                 "\", \"reward\": null, \"advantage\": 0}\n");
  ReportOptions options;
  options.max_text_bytes = 1001;
  const std::string html = render_report(dir.str(), options);
  EXPECT_LT(html.size(), 100000u);
  EXPECT_NE(html.find("(first 1000 of 1000000 bytes)"), std::string::npos);
  EXPECT_EQ(cut_utf8("a\xC3\xA9", 2), "a");
  EXPECT_EQ(cut_utf8("a\xC3\xA9", 3), "a\xC3\xA9");
  EXPECT_EQ(cut_utf8("abc", 2), "ab");
}

TEST(Report, NullAndNaNAreGapsNotBrokenPaths) {
  const RunDir dir("nan");
  // Line 3 as Python's json writes a NaN (TRL), line 5 as nlohmann writes one.
  std::string text;
  for (int s = 1; s <= 8; ++s)
    text += "{\"step\": " + std::to_string(s) + ", \"kl\": " +
            (s == 3   ? "NaN"
             : s == 5 ? "null"
                      : std::to_string(0.01 * s)) +
            ", \"note\": \"NaN in a string stays\"}\n";
  dir.write("metrics.jsonl", text);
  const std::string html = render_report(dir.str());
  const std::string kl = figure(html, "KL to the reference");
  ASSERT_FALSE(kl.empty());
  const std::vector<std::string> paths = path_data(kl);
  ASSERT_EQ(paths.size(), 1u);
  for (const std::string& d : path_data(html))
    EXPECT_TRUE(std::regex_match(d, std::regex("[MLZ0-9.,-]+"))) << d;
  // Steps 1-2, 4 (one point: a circle) and 6-8: two line runs.
  EXPECT_EQ(count(paths[0], "M"), 2u) << paths[0];
  EXPECT_EQ(count(kl, "<circle"), 1u);
  // Control: without the gaps the line is one run.
  std::string full;
  for (int s = 1; s <= 8; ++s)
    full += "{\"step\": " + std::to_string(s) + ", \"kl\": " + std::to_string(0.01 * s) + "}\n";
  dir.write("metrics.jsonl", full);
  const std::vector<std::string> whole = path_data(figure(render_report(dir.str()), "KL"));
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(count(whole[0], "M"), 1u);
  // A string value does not make a chart or a summary row; the NaN inside it is left as it is.
  const RunMetrics m = read_metrics((dir.path / "metrics.jsonl").string());
  EXPECT_EQ(m.steps.size(), 8u);
  dir.write("metrics.jsonl", text);
  const RunMetrics with_nan = read_metrics((dir.path / "metrics.jsonl").string());
  EXPECT_TRUE(std::isnan(with_nan.values.at("kl")[2]));
  EXPECT_TRUE(std::isnan(with_nan.values.at("kl")[4]));
  EXPECT_DOUBLE_EQ(with_nan.values.at("kl")[3], 0.04);
  EXPECT_EQ(html.find("<td>note</td>"), std::string::npos);
}

TEST(Report, OneStepAndNoStep) {
  const RunDir dir("one");
  dir.write("metrics.jsonl", "{\"step\": 1, \"loss\": 2.0}\n");
  const std::string html = render_report(dir.str());
  const std::string loss = figure(html, "Loss");
  ASSERT_FALSE(loss.empty());
  EXPECT_EQ(count(loss, "<circle"), 1u);
  EXPECT_EQ(html.find("nan"), std::string::npos);
  EXPECT_EQ(html.find("inf"), std::string::npos);
  dir.write("metrics.jsonl", "");
  const std::string empty = render_report(dir.str());
  EXPECT_NE(empty.find("holds no steps yet"), std::string::npos);
  EXPECT_EQ(empty.find("<svg"), std::string::npos);
}

TEST(Report, LongRunsAreBucketedKeepingTheEnvelope) {
  // 100k steps of a slow wave with one spike: at most max_points points, the spike kept as the
  // max of its bucket, the mean line near the wave.
  const size_t n = 100000;
  std::vector<double> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = double(i + 1);
    y[i] = std::sin(double(i) * 1e-4);
  }
  y[54321] = 100;
  y[70000] = std::nan("");
  const auto runs = reduce_series(x, y, 600);
  size_t points = 0;
  double top = -1, bottom = 1;
  for (const auto& run : runs)
    for (const ChartPoint& p : run) {
      ++points;
      top = std::max(top, p.max);
      bottom = std::min(bottom, p.min);
      EXPECT_LE(p.min, p.mean);
      EXPECT_LE(p.mean, p.max);
    }
  EXPECT_LE(points, 600u);
  EXPECT_GE(points, 590u);
  EXPECT_EQ(top, 100.0);
  EXPECT_LT(bottom, -0.99);
  EXPECT_EQ(runs.size(), 1u);  // one NaN among other values in its bucket is no gap

  // Through the page: 100k lines give a page of bounded size whose y axis reaches the spike.
  const RunDir dir("long");
  std::string text;
  for (size_t i = 0; i < n; ++i)
    text += fmt::format("{{\"step\": {}, \"grad_norm\": {}}}\n", i + 1, i == 54321 ? 100.0 : 1.0);
  dir.write("metrics.jsonl", text);
  const std::string html = render_report(dir.str());
  const std::string chart = figure(html, "Gradient norm");
  EXPECT_LT(chart.size(), 40000u);
  EXPECT_NE(chart.find(">100<"), std::string::npos);
  EXPECT_EQ(count(chart, "class=\"band\""), 1u);
  // Control: below max_points nothing is bucketed and there is no band.
  const auto few = reduce_series({1, 2, 3}, {1, std::nan(""), 3}, 600);
  ASSERT_EQ(few.size(), 2u);
  EXPECT_EQ(few[0][0].mean, 1.0);
}

void expect_ticks(double lo, double hi, int target, const std::vector<double>& expected) {
  const std::vector<double> ticks = nice_ticks(lo, hi, target);
  ASSERT_EQ(ticks.size(), expected.size()) << lo << ".." << hi;
  for (size_t i = 0; i < ticks.size(); ++i) EXPECT_NEAR(ticks[i], expected[i], 1e-12) << i;
}

TEST(Report, NiceTicks) {
  expect_ticks(0, 1, 5, {0, 0.2, 0.4, 0.6, 0.8, 1});
  expect_ticks(3, 97, 5, {0, 20, 40, 60, 80, 100});
  expect_ticks(-0.3, 0.1, 4, {-0.3, -0.2, -0.1, 0, 0.1});
  expect_ticks(1.8, 2.2, 5, {1.8, 1.9, 2.0, 2.1, 2.2});
}

TEST(Report, MalformedLinesNameFileAndLine) {
  const RunDir dir("malformed");
  dir.write("metrics.jsonl", "{\"step\": 1, \"loss\": 1}\n\n{\"step\": 2, \"loss\": }\n");
  std::string e = error_of(dir.str());
  EXPECT_NE(e.find("metrics.jsonl:3: not valid JSON"), std::string::npos) << e;
  dir.write("metrics.jsonl", "{\"step\": 1}\n[1, 2]\n");
  e = error_of(dir.str());
  EXPECT_NE(e.find("metrics.jsonl:2: not a JSON object but array"), std::string::npos) << e;
  dir.write("metrics.jsonl", "{\"step\": 1}\n");
  dir.write("samples.jsonl", "{\"step\": 1, \"completion\": \"a\"}\n{\"step\": 1, \"compl");
  e = error_of(dir.str());
  EXPECT_NE(e.find("samples.jsonl:2: not valid JSON"), std::string::npos) << e;
}

TEST(Report, MissingDirectoryOrMetricsNameTheDirectory) {
  const RunDir dir("missing");
  EXPECT_NE(
      error_of(dir.str() + "/nope").find("run directory '" + dir.str() + "/nope' does not exist"),
      std::string::npos);
  EXPECT_NE(error_of(dir.str()).find("no metrics.jsonl in '" + dir.str() + "'"), std::string::npos);
  dir.write("file", "x");
  EXPECT_NE(error_of(dir.str() + "/file").find("is not a directory"), std::string::npos);
}

TEST(ReportCommand, WritesTheReportAndReplacesIt) {
  const RunDir dir("command");
  dir.write("metrics.jsonl", grpo_lines(5));
  dir.write("config.yaml", "learning_rate: 1e-5 # <tuned>\n");
  Result r = run("report " + dir.str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + dir.str() + "/report.html"), std::string::npos);
  std::ifstream in(dir.path / "report.html");
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("learning_rate: 1e-5 # &lt;tuned&gt;"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path / "report.html.tmp"));
  // A second report replaces the first; --out elsewhere.
  EXPECT_EQ(run("report " + dir.str()).exit_code, 0);
  const std::string other = dir.str() + "/other.html";
  r = run("report " + dir.str() + " --out " + other + " --samples 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(other));
}

TEST(ReportCommand, ErrorsAreOneLine) {
  const RunDir dir("command_errors");
  Result r = run("report " + dir.str() + "/nope");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(
      r.output.rfind("fp8rl: error: run directory '" + dir.str() + "/nope' does not exist", 0), 0u)
      << r.output;
  EXPECT_EQ(count(r.output, "\n"), 1u);
  dir.write("metrics.jsonl", "{\"step\": 1}\n{oops}\n");
  r = run("report " + dir.str());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("metrics.jsonl:2"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.path / "report.html"));
  // The run's own files are never overwritten, nor a directory.
  dir.write("metrics.jsonl", "{\"step\": 1}\n");
  r = run("report " + dir.str() + " --out " + dir.str() + "/metrics.jsonl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("is the input"), std::string::npos) << r.output;
  r = run("report " + dir.str() + " --out " + dir.str());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = run("report " + dir.str() + " --max-text 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
}

}  // namespace
