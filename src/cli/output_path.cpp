#include "cli/output_path.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "core/check.h"
#include "core/output_file.h"

namespace fp8rl::cli {

namespace fs = std::filesystem;

namespace {

fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p), ec);
  CHECK(!ec, "cannot resolve path '{}': {}", p, ec.message());
  return r;
}

// Whether `inner` is `outer` or lies under it, component by component.
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin(), o = outer.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

void check_output_file(const std::string& out, const std::vector<std::string>& inputs) {
  CHECK(!out.empty(), "the output path is empty");
  check_replaceable(out);
  const fs::path r = resolved(out);
  for (const std::string& in : inputs) {
    if (in.empty()) continue;  // an optional input not given
    const fs::path ri = resolved(in);
    CHECK(r != ri, "output '{}' is the input '{}': refusing to overwrite it", out, in);
    CHECK(!(fs::is_directory(ri) && within(r, ri) && fs::exists(r)),
          "output '{}' is an existing file inside the input '{}': refusing to overwrite it", out,
          in);
  }
}

void check_output_dir(const std::string& out, const std::vector<std::string>& inputs, bool force) {
  CHECK(!out.empty(), "the output directory is empty");
  const fs::path r = resolved(out);
  for (const std::string& in : inputs) {
    const fs::path ri = resolved(in);
    CHECK(!within(ri, r),
          "output directory '{}' {} the input '{}': refusing to write over the input", out,
          r == ri ? "is" : "holds", in);
  }
  struct stat st;
  if (::stat(out.c_str(), &st) != 0) return;  // created by the writer
  CHECK(S_ISDIR(st.st_mode), "output '{}' exists and is not a directory", out);
  bool holds_model = fs::exists(r / "config.json");
  for (const auto& entry : fs::directory_iterator(r))
    holds_model = holds_model || entry.path().extension() == ".safetensors";
  CHECK(force || !holds_model,
        "output directory '{}' already holds a model: give --force to overwrite it", out);
}

void check_run_dir(const std::string& dir, const std::vector<std::string>& inputs) {
  CHECK(!dir.empty(), "the run directory is empty");
  const fs::path r = resolved(dir);
  for (const std::string& in : inputs) {
    if (in.empty()) continue;
    const fs::path ri = resolved(in);
    CHECK(!within(ri, r), "run directory '{}' {} the input '{}': refusing to write over the input",
          dir, r == ri ? "is" : "holds", in);
  }
}

}  // namespace fp8rl::cli
