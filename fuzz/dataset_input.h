// What the dataset-reader targets share: the demo model's tokenizer and EOS, two chat templates
// (the demo model's, and a Qwen 2.5-like one that renders tools), and the JSONL loop.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "formats/json_read.h"
#include "fuzz_input.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace fp8rl::fuzz {

struct DatasetFixture {
  tok::Tokenizer tokenizer = tok::Tokenizer::from_file(source_path("examples/demo/model"));
  int32_t eos_token_id = tokenizer.token_to_id(
      tok::TokenizerConfig::load(source_path("examples/demo/model")).eos_token.value());
  std::vector<ChatTemplateConfig> chats = {
      load_chat_template_config(source_path("examples/demo/model")),
      load_chat_template_config(source_path("tests/data/chat/templates/qwen2_5_like"))};
};

// Each non-blank line of `text` parsed with the JSON policy, as for_each_jsonl_row does, and
// handed to `row`; a line's clean rejection does not stop the next.
template <class F>
void for_each_row(std::string_view text, F&& row) {
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    run([&] { row(parse_ordered_json_text(line, "the row"), line); });
  }
}

}  // namespace fp8rl::fuzz
