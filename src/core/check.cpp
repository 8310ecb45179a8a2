#include "core/check.h"

#include <cstring>

namespace fp8rl {

std::string Error::describe() const {
  // Report the path from src/ on: absolute build paths are noise in user messages.
  const char* rel = std::strstr(file_, "src/");
  return fmt::format("{} (at {}:{})", what(), rel ? rel : file_, line_);
}

namespace detail {
void raise_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), file, line);
}
}  // namespace detail

}  // namespace fp8rl
