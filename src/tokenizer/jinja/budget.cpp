#include "tokenizer/jinja/budget.h"

namespace fp8rl::jinja {
namespace {

// count * unit, or nullopt-like -1 when it overflows 64 bits.
std::int64_t product(std::int64_t count, std::int64_t unit) {
  if (count <= 0 || unit <= 0) return 0;
  std::int64_t r;
  if (__builtin_mul_overflow(count, unit, &r)) return -1;
  return r;
}

std::string asked(std::int64_t n, std::string_view unit) {
  return n < 0 ? std::string("more than 2^63 ") + std::string(unit) : fmt::format("{} {}", n, unit);
}

}  // namespace

void fail_budget(std::string message) {
  throw TemplateError(TemplateError::Kind::budget, message);
}

void Budget::fail_steps() const {
  fail_budget(fmt::format("{} steps (RenderLimits::max_steps)", limits_.max_steps));
}

void Budget::charge_items(std::int64_t n) {
  if (n <= 0) return;
  if (n > limits_.max_steps - use_.steps) {
    use_.steps = limits_.max_steps;
    fail_steps();
  }
  use_.steps += n;
}

void Budget::enter() {
  if (depth_ >= limits_.max_depth) {
    fail_budget(fmt::format(
        "{} nested calls and blocks (RenderLimits::max_depth): maximum recursion depth exceeded",
        limits_.max_depth));
  }
  ++depth_;
  if (depth_ > use_.depth) use_.depth = depth_;
}

std::size_t Budget::string_bytes(std::int64_t count, std::int64_t unit, std::string_view what) {
  const std::int64_t n = product(count, unit);
  if (n < 0 || n > limits_.max_string_bytes) {
    fail_budget(fmt::format("{} bytes per string (RenderLimits::max_string_bytes; {} asks for {})",
                            limits_.max_string_bytes, what, asked(n, "bytes")));
  }
  if (n > use_.string_bytes) use_.string_bytes = n;
  return static_cast<std::size_t>(n);
}

std::size_t Budget::item_count(std::int64_t count, std::int64_t unit, std::string_view what) {
  const std::int64_t n = product(count, unit);
  if (n < 0 || n > limits_.max_items) {
    fail_budget(fmt::format("{} items per list (RenderLimits::max_items; {} asks for {})",
                            limits_.max_items, what, asked(n, "items")));
  }
  if (n > use_.items) use_.items = n;
  return static_cast<std::size_t>(n);
}

void Budget::check_output(std::size_t bytes) {
  const auto n = static_cast<std::int64_t>(bytes);
  if (n > limits_.max_output_bytes) {
    fail_budget(fmt::format("{} bytes of output (RenderLimits::max_output_bytes)",
                            limits_.max_output_bytes));
  }
  if (n > use_.output_bytes) use_.output_bytes = n;
}

void Budget::charge_created(std::size_t bytes) {
  const auto n = static_cast<std::int64_t>(bytes);
  if (n > limits_.max_total_bytes - use_.total_bytes) {
    fail_budget(fmt::format(
        "{} bytes created in total (RenderLimits::max_total_bytes: the strings, lists and dicts "
        "of one render; {} bytes created before a value of {} bytes)",
        limits_.max_total_bytes, use_.total_bytes, n));
  }
  use_.total_bytes += n;
}

}  // namespace fp8rl::jinja
