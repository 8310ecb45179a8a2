// tokenizer_config.json (+ generation_config.json) and its chat templates rendered:
// [u32 n][n bytes of tokenizer_config.json][generation_config.json]. Every template the config
// names is parsed and rendered on a fixed conversation with the config's special tokens, as
// `fp8rl chat-template` renders it (load_chat_template_config, build_chat_context).
#include "fuzz_input.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace {

nlohmann::ordered_json conversation() {
  return nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"}])");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fp8rl::tok::Tokenizer tokenizer = fp8rl::tok::Tokenizer::from_file(
      fp8rl::fuzz::source_path("examples/demo/model/tokenizer.json"));
  static const nlohmann::ordered_json messages = conversation();
  const auto [config, generation] = fp8rl::fuzz::split_prefixed(fp8rl::fuzz::as_text(data, size));
  return fp8rl::fuzz::run([&, config = config, generation = generation] {
    const auto tc = fp8rl::tok::TokenizerConfig::from_json_text(config, generation);
    (void)tc.stop_token_ids(tokenizer);
    fp8rl::ChatTemplateConfig cfg;
    for (const auto& [key, value] : tc.special_tokens_map()) cfg.special_tokens[key] = value;
    if (!tc.additional_special_tokens.empty())
      cfg.special_tokens["additional_special_tokens"] = tc.additional_special_tokens;
    fp8rl::ChatRequest request;
    request.messages = messages;
    request.add_generation_prompt = true;
    fp8rl::ChatTemplateOptions options;
    options.fixed_now = fp8rl::parse_local_datetime("2025-01-02T03:04:05");
    for (const fp8rl::tok::NamedChatTemplate& t : tc.chat_templates) {
      try {
        (void)fp8rl::ChatTemplate(t.source).render(fp8rl::build_chat_context(cfg, request),
                                                   options);
      } catch (const fp8rl::Error&) {
      }
    }
  });
}
