// fp8rl chat-template PATH --messages-file F.json [--add-generation-prompt] [--var key=value ...]
//
// Prints exactly what HF transformers' apply_chat_template(messages, tokenize=False, ...) returns
// for the model's chat template (no trailing newline added). A template that raises (e.g.
// "Conversation roles must alternate") makes the command fail with the template's message.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/check.h"
#include "formats/json_read.h"
#include "tokenizer/chat_request.h"
#include "tokenizer/jinja/chat_template.h"

namespace fp8rl::cli {
namespace {

struct ChatTemplateArgs {
  std::string path;
  std::string messages_file;
  bool add_generation_prompt = false;
  std::vector<std::string> vars;
  std::string template_name;
  std::string now;
};

// --var key=value: the value is JSON when it parses as JSON (enable_thinking=false), else a
// string (name=alice).
void add_variable(nlohmann::ordered_json& variables, const std::string& text) {
  const std::size_t eq = text.find('=');
  CHECK(eq != std::string::npos && eq > 0, "--var expects key=value, got '{}'", text);
  const std::string value = text.substr(eq + 1);
  nlohmann::ordered_json parsed;
  try {
    parsed = parse_ordered_json_text(value, "--var " + text.substr(0, eq));
  } catch (const Error&) {
    parsed = value;
  }
  variables[text.substr(0, eq)] = std::move(parsed);
}

void run_chat_template(const ChatTemplateArgs& args) {
  const ChatTemplateConfig config = load_chat_template_config(args.path, args.template_name);

  ChatRequest request =
      chat_request_from_json(read_ordered_json_file(args.messages_file), args.messages_file);
  request.add_generation_prompt = args.add_generation_prompt;
  for (const std::string& v : args.vars) add_variable(request.variables, v);

  ChatTemplateOptions options;
  if (!args.now.empty()) options.fixed_now = parse_local_datetime(args.now);
  const std::string text =
      ChatTemplate(config.source).render(build_chat_context(config, request), options);
  CHECK(std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0,
        "writing the rendered template to stdout failed");
}

}  // namespace

void add_chat_template_command(CLI::App& app) {
  auto args = std::make_shared<ChatTemplateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "chat-template",
      "Render a conversation with the model's chat template, as HF transformers does");
  cmd->add_option("PATH", args->path, "tokenizer_config.json, or a model directory holding one")
      ->required();
  cmd->add_option("--messages-file", args->messages_file,
                  "JSON file: an array of messages, or {\"messages\": [...], \"tools\": [...]}")
      ->required();
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt,
                "End with the header of an assistant turn");
  cmd->add_option(
         "--var", args->vars,
         "key=value template variable, repeatable; JSON when it parses (enable_thinking=false), "
         "else a string")
      ->allow_extra_args(false);
  cmd->add_option("--template", args->template_name,
                  "Which named template when the config lists several (default: \"default\")");
  cmd->add_option(
      "--now", args->now,
      "YYYY-MM-DDTHH:MM:SS: the local time strftime_now() sees, for reproducible output");
  cmd->callback([args] { run_chat_template(*args); });
}

}  // namespace fp8rl::cli
