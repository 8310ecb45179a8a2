#include "cli/run_log.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <deque>

#include "core/check.h"
#include "core/input_file.h"
#include "core/nan.h"
#include "formats/json_read.h"

namespace fp8rl::cli {

namespace {

constexpr uint64_t kMaxMetricsLine = 1 << 20;  // a step's metrics are a few kB
constexpr uint64_t kMaxSampleLine = 64 << 20;  // a prompt and a long completion

// Replaces the bare tokens NaN, Infinity and -Infinity outside strings by null.
std::string null_python_nonfinite(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size())
        out += line[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
      if (line.compare(i, token.size(), token) == 0) {
        out += "null";
        i += token.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

nlohmann::json parse_line(const std::string& line, const std::string& path, uint64_t number) {
  // The one JSON policy (formats/json_read.h): a line nested deeper than its limit is an error,
  // not a stack overflow. Duplicate keys are left to the last one, as the logs were read before.
  JsonLimits limits;
  limits.reject_duplicate_keys = false;
  nlohmann::json j;
  try {
    j = parse_json_text(line, "the line", limits);
  } catch (const Error& first) {
    try {
      j = parse_json_text(null_python_nonfinite(line), "the line", limits);
    } catch (const Error&) {
      RAISE("{}:{}: not valid JSON: {}", path, number, first.what());
    }
  }
  CHECK(j.is_object(), "{}:{}: not a JSON object but {}", path, number, j.type_name());
  return j;
}

double number_or_nan(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  return kNaN;
}

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

}  // namespace

void add_metrics_line(RunMetrics& m, const std::string& line, const std::string& path,
                      uint64_t number) {
  if (blank(line)) return;
  const nlohmann::json j = parse_line(line, path, number);
  const auto step = j.find("step");
  m.steps.push_back(step != j.end() && step->is_number() ? step->get<double>()
                                                         : double(m.steps.size() + 1));
  const size_t n = m.steps.size();
  for (const auto& [key, value] : j.items()) {
    if (key == "step") continue;
    auto [it, added] = m.values.try_emplace(key);
    it->second.resize(n - 1, kNaN);  // a key first seen now: absent before
    it->second.push_back(number_or_nan(value));
  }
  for (auto& [key, column] : m.values) column.resize(n, kNaN);  // absent on this line
}

void finish_metrics(RunMetrics& m) {
  m.keys.clear();
  for (const auto& [key, column] : m.values) m.keys.push_back(key);
}

RunMetrics read_metrics(const std::string& path) {
  RunMetrics m;
  InputLines lines(path, "metrics file", kMaxMetricsLine);
  std::string line;
  while (lines.next(line)) add_metrics_line(m, line, path, lines.line_number());
  finish_metrics(m);
  return m;
}

std::string cut_utf8(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Back off over continuation bytes (10xxxxxx) to the start of the character cut in two.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::optional<RunSample> parse_sample_line(const std::string& line, const std::string& path,
                                           uint64_t number, size_t max_chars) {
  if (blank(line)) return std::nullopt;
  const nlohmann::json j = parse_line(line, path, number);
  RunSample s;
  const auto step = j.find("step");
  s.step = step != j.end() && step->is_number_integer() ? step->get<int64_t>() : 0;
  const auto text = [&](const char* key) {
    const auto v = j.find(key);
    if (v == j.end() || v->is_null()) return std::string();
    return v->is_string() ? v->get<std::string>() : v->dump(1);
  };
  const std::string prompt = text("prompt"), completion = text("completion");
  s.prompt_bytes = prompt.size();
  s.completion_bytes = completion.size();
  s.prompt = cut_utf8(prompt, max_chars);
  s.completion = cut_utf8(completion, max_chars);
  s.reward = j.contains("reward") ? number_or_nan(j["reward"]) : kNaN;
  s.advantage = j.contains("advantage") ? number_or_nan(j["advantage"]) : kNaN;
  return s;
}

std::vector<RunSample> read_last_samples(const std::string& path, size_t last_steps,
                                         size_t max_chars) {
  std::deque<std::vector<RunSample>> steps;  // the samples of each kept step
  InputLines lines(path, "samples file", kMaxSampleLine);
  std::string line;
  while (lines.next(line)) {
    std::optional<RunSample> s = parse_sample_line(line, path, lines.line_number(), max_chars);
    if (!s) continue;
    if (steps.empty() || steps.back().front().step != s->step) steps.emplace_back();
    steps.back().push_back(std::move(*s));
    if (steps.size() > last_steps) steps.pop_front();
  }
  std::vector<RunSample> out;
  for (auto& group : steps)
    for (RunSample& s : group) out.push_back(std::move(s));
  return out;
}

}  // namespace fp8rl::cli
