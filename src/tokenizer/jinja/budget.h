// The execution budget of one render: a chat template is code from a downloaded model, so a
// render must end, in bounded memory, whatever the template does. Counted here:
//   steps      statements run, expressions evaluated, loop iterations, calls (macros, filters,
//              tests, functions), plus one step per item or per kBytesPerStep bytes that a
//              built-in walks or builds;
//   depth      nested calls and blocks (macro recursion, recursive loops, nested expressions);
//   strings    the size of every string a template builds, checked BEFORE it is allocated where a
//              size is computed from a count (repeat, padding widths, indents), with overflow
//              of the multiplication caught;
//   items      the length of every list, tuple or dict a template builds, likewise;
//   output     the rendered text;
//   total      the bytes of every string, list, tuple and dict the render creates, summed over
//              the whole render (an upper bound on what it can hold at once: many strings, each
//              under the per-string cap, kept in a list or a namespace would otherwise exhaust
//              memory). Counted where expressions and blocks produce a value no other value
//              shares: a string's bytes, a container's slots (sizeof(Value) each, a dict's pair
//              two); values passed through (a variable, a literal, the chosen branch of an `if`
//              or `and`/`or`) are not counted again.
// Exceeding any of them is a TemplateError of kind `budget` that names the limit and its value.
//
// The defaults are far above what real templates use: the repo's corpus (tests/data/chat, the
// demo model's template) peaks at the values in tests/tokenizer/jinja/test_jinja.cpp
// (ChatTemplateBudget.CorpusUsesAFractionOfTheDefaults), which checks the margin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace fp8rl::jinja {

inline constexpr int kMaxEvalDepth = 1500;
// Built-ins charge one step per this many bytes they scan or write.
inline constexpr std::int64_t kBytesPerStep = 64;

struct RenderLimits {
  std::int64_t max_steps = 20'000'000;
  // Each level takes well under 1 KB of stack in a release build (see interpreter.h); raising
  // this far past the default risks the stack of the rendering thread.
  int max_depth = kMaxEvalDepth;
  std::int64_t max_string_bytes = std::int64_t{256} << 20;
  std::int64_t max_items = std::int64_t{1} << 22;
  std::int64_t max_output_bytes = std::int64_t{256} << 20;
  std::int64_t max_total_bytes = std::int64_t{1} << 30;
};

// The high-water marks of one render (what the corpus check records).
struct BudgetUse {
  std::int64_t steps = 0;
  int depth = 0;
  std::int64_t string_bytes = 0;  // the largest string checked
  std::int64_t items = 0;         // the longest list/tuple/dict checked
  std::int64_t output_bytes = 0;
  std::int64_t total_bytes = 0;  // created over the whole render
};

class Budget {
 public:
  explicit Budget(const RenderLimits& limits) : limits_(limits) {}

  void step() {
    if (++use_.steps > limits_.max_steps) fail_steps();
  }
  // Work proportional to `n` items or bytes / kBytesPerStep, charged by built-ins.
  void charge_items(std::int64_t n);
  void charge_bytes(std::int64_t n) { charge_items(n / kBytesPerStep); }

  void enter();  // one level deeper; fails past max_depth
  void leave() { --depth_; }

  // `count` copies of `unit` bytes (or items): the checked product, or a budget error naming
  // `what` when it would exceed the limit (or 64 bits).
  std::size_t string_bytes(std::int64_t count, std::int64_t unit, std::string_view what);
  std::size_t item_count(std::int64_t count, std::int64_t unit, std::string_view what);
  // A string or container of this size is about to be (or was just) built.
  void check_string(std::size_t bytes, std::string_view what) {
    string_bytes(static_cast<std::int64_t>(bytes), 1, what);
  }
  void check_items(std::size_t n, std::string_view what) {
    item_count(static_cast<std::int64_t>(n), 1, what);
  }
  void check_output(std::size_t bytes);
  // A value of `bytes` (Value::unshared_bytes) was just created: added to the render's total.
  void charge_created(std::size_t bytes);

  const RenderLimits& limits() const { return limits_; }
  const BudgetUse& use() const { return use_; }

 private:
  [[noreturn]] void fail_steps() const;

  RenderLimits limits_;
  BudgetUse use_;
  int depth_ = 0;
};

// A TemplateError of kind budget: "<limit> <unit> (<detail>)", completed by the caller into
// "chat template exceeded its budget of ...".
[[noreturn]] void fail_budget(std::string message);

}  // namespace fp8rl::jinja
