// The one error type and CHECK family of fp8rl.
//
// CHECK(cond, fmt, args...) throws fp8rl::Error with the message, file and line when cond is
// false; RAISE(fmt, args...) throws unconditionally. Both are always on (no NDEBUG variant):
// they guard user input and invariants alike, and a wrong answer is worse than a slow one.
// The condition must be a real bool so that CHECK("message") or CHECK(ptr) does not compile.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace fp8rl {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line)
      : std::runtime_error(std::move(message)), file_(file), line_(line) {}
  const char* file() const { return file_; }
  int line() const { return line_; }
  // "message (at src/x.cpp:12)"
  std::string describe() const;

 private:
  const char* file_;
  int line_;
};

namespace detail {
[[noreturn]] void raise_error(const char* file, int line, std::string message);
}  // namespace detail

}  // namespace fp8rl

#define RAISE(...) ::fp8rl::detail::raise_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

#define CHECK(cond, ...)                                                                      \
  do {                                                                                        \
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(cond)>, bool>,                  \
                  "CHECK takes a bool condition");                                            \
    if (!(cond)) [[unlikely]]                                                                 \
      ::fp8rl::detail::raise_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__));           \
  } while (0)
