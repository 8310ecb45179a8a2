// The messages file of `fp8rl chat-template --messages-file` (and a chat line of `generate`):
// parsed with the JSON policy, read by chat_request_from_json, rendered with one of the
// repository's chat templates (chosen by the input) and encoded with the demo tokenizer.
#include <algorithm>
#include <filesystem>
#include <vector>

#include "formats/json_read.h"
#include "fuzz_input.h"
#include "tokenizer/chat_request.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Fixture {
  fp8rl::tok::Tokenizer tokenizer = fp8rl::tok::Tokenizer::from_file(
      fp8rl::fuzz::source_path("examples/demo/model/tokenizer.json"));
  std::vector<fp8rl::ChatTemplateConfig> configs;
  std::vector<fp8rl::ChatTemplate> templates;

  Fixture() {
    std::vector<std::string> dirs = {fp8rl::fuzz::source_path("examples/demo/model")};
    const auto corpus = fp8rl::fuzz::source_path("tests/data/chat/templates");
    for (const auto& e : std::filesystem::directory_iterator(corpus))
      if (e.path().filename() != "named_templates") dirs.push_back(e.path().string());
    std::sort(dirs.begin(), dirs.end());
    for (const std::string& d : dirs) {
      configs.push_back(fp8rl::load_chat_template_config(d));
      templates.emplace_back(configs.back().source);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture f;
  const std::string_view text = fp8rl::fuzz::as_text(data, size);
  return fp8rl::fuzz::run([&] {
    fp8rl::ChatRequest request = fp8rl::chat_request_from_json(
        fp8rl::parse_ordered_json_text(text, "messages file"), "messages file");
    request.add_generation_prompt = size % 2 == 1;
    const size_t i = fp8rl::fuzz::pick(text, f.templates.size());
    fp8rl::ChatTemplateOptions options;
    options.fixed_now = fp8rl::parse_local_datetime("2025-01-02T03:04:05");
    const std::string prompt =
        f.templates[i].render(fp8rl::build_chat_context(f.configs[i], request), options);
    (void)f.tokenizer.encode(prompt, /*add_special=*/false);
  });
}
