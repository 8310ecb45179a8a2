// The GRPO prompt, DPO preference and KTO unpaired row readers alone (what the fuzzers drive): the
// file readers' results for the same row, and errors without the "PATH:LINE: " prefix.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "rl/preference_data.h"
#include "rl/prompt_data.h"
#include "test_util.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {
namespace {

using OrderedJson = nlohmann::ordered_json;

const tok::Tokenizer& tokenizer() {
  static const tok::Tokenizer t =
      tok::Tokenizer::from_file(std::string(FP8RL_TEST_DATA) + "/tokenizer/tiny_byte_level");
  return t;
}

ChatTemplateConfig toy_chat() {
  ChatTemplateConfig c;
  c.source =
      "{% for m in messages %}{{ '<x>' + m.role + '\\n' + m.content + '<|end|>\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<x>assistant\\n' }}{% endif %}";
  return c;
}

// A one-line dataset file for the file reader: one per process, rewritten by each call.
std::string dataset_file(const std::string& row) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("fp8rl_rl_data_" + std::to_string(::getpid()) + ".jsonl"))
                               .string();
  std::ofstream(path) << row << "\n";
  return path;
}

std::string error_of(const auto& read) {
  try {
    read();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(PromptRowReader, ReadsOneRowAsTheFileReaderDoes) {
  const ChatTemplateConfig chat = toy_chat();
  const PromptRowReader reader(tokenizer(), &chat, {});
  for (const std::string row :
       {R"({"prompt": "What is 2+2?", "answer": "4"})",
        R"({"messages": [{"role": "user", "content": "hi"}], "answer": 1})"}) {
    const PromptExample file = read_prompt_dataset(dataset_file(row), tokenizer(), &chat, {})[0];
    const PromptExample one = reader.read(OrderedJson::parse(row));
    EXPECT_EQ(one.ids, file.ids);
    EXPECT_EQ(one.text, file.text);
    EXPECT_EQ(one.columns, file.columns);
    EXPECT_EQ(one.columns.size(), 1u);  // the answer; the prompt is not a column
    EXPECT_EQ(one.line, 0);
  }
  EXPECT_EQ(error_of([&] { reader.read(OrderedJson::parse(R"({"answer": 1})")); }),
            "the row has neither \"prompt\" nor \"messages\"");
}

// The message list of a chat row is kept for the rewards (TRL passes it as the prompt); a text
// row has none. A file mixing the two is an error naming the line.
TEST(PromptRowReader, ChatRowsKeepTheirMessagesAndAFileIsOneKind) {
  const ChatTemplateConfig chat = toy_chat();
  const PromptRowReader reader(tokenizer(), &chat, {});
  const OrderedJson messages = OrderedJson::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(reader.read(OrderedJson{{"messages", messages}}).messages, nlohmann::json(messages));
  EXPECT_EQ(reader.read(OrderedJson{{"prompt", messages}}).messages, nlohmann::json(messages));
  EXPECT_TRUE(reader.read(OrderedJson::parse(R"({"prompt": "hi"})")).messages.is_null());
  const std::string path = dataset_file(
      std::string(R"({"messages": [{"role": "user", "content": "hi"}]})") + "\n" +
      R"({"messages": [{"role": "user", "content": "yo"}]})" + "\n" + R"({"prompt": "text"})");
  const std::string e = error_of([&] { read_prompt_dataset(path, tokenizer(), &chat, {}); });
  EXPECT_NE(e.find(":3: a text prompt, but line 1 holds a chat prompt"), std::string::npos) << e;
  // The control: the first two rows alone are one kind.
  std::ofstream(path) << R"({"messages": [{"role": "user", "content": "hi"}]})"
                      << "\n"
                      << R"({"prompt": [{"role": "user", "content": "yo"}]})"
                      << "\n";
  EXPECT_EQ(read_prompt_dataset(path, tokenizer(), &chat, {}).size(), 2u);
}

// TRL's chat_template_kwargs reach the template as variables for prompts and preference rows;
// without them the template's default renders, which the kwargs must change.
TEST(PromptRowReader, ChatTemplateKwargsAreTemplateVariables) {
  ChatTemplateConfig chat = toy_chat();
  chat.source = test::kThinkingSwitch + chat.source;
  const OrderedJson row =
      OrderedJson::parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
  PromptDataOptions off;
  off.chat_template_kwargs = {{"enable_thinking", false}};
  EXPECT_EQ(PromptRowReader(tokenizer(), &chat, off).read(row).text,
            "<x>nothink\n<x>user\nhi<|end|>\n<x>assistant\n");
  EXPECT_EQ(PromptRowReader(tokenizer(), &chat, {}).read(row).text,
            "<x>user\nhi<|end|>\n<x>assistant\n");
  PreferenceDataOptions p;
  p.eos_token_id = 300;
  const OrderedJson pair = OrderedJson::parse(
      R"({"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "assistant", "content": "a"}],)"
      R"( "rejected": [{"role": "assistant", "content": "b"}]})");
  const PreferencePair plain = PreferenceRowReader(tokenizer(), &chat, p).read(pair);
  p.chat_template_kwargs = {{"enable_thinking", false}};
  const PreferencePair thinking_off = PreferenceRowReader(tokenizer(), &chat, p).read(pair);
  EXPECT_EQ(thinking_off.prompt,
            tokenizer().encode("<x>nothink\n<x>user\nhi<|end|>\n<x>assistant\n"));
  EXPECT_EQ(plain.prompt, tokenizer().encode("<x>user\nhi<|end|>\n<x>assistant\n"));
  EXPECT_EQ(thinking_off.chosen, plain.chosen);  // the completions are the same
  off.chat_template_kwargs = "no";
  EXPECT_NE(error_of([&] {
              PromptRowReader(tokenizer(), &chat, off).read(row);
            }).find("chat_template_kwargs must be a mapping"),
            std::string::npos);
}

TEST(PreferenceRowReader, ReadsOneRowAsTheFileReaderDoes) {
  PreferenceDataOptions o;
  o.eos_token_id = 300;  // "<|end|>" of the tiny tokenizer
  const PreferenceRowReader reader(tokenizer(), nullptr, o);
  const std::string row = R"({"prompt": "Say", "chosen": " yes", "rejected": " no"})";
  const PreferencePair file =
      read_preference_dataset(dataset_file(row), tokenizer(), nullptr, o)[0];
  const PreferencePair one = reader.read(OrderedJson::parse(row));
  EXPECT_EQ(one.prompt, tokenizer().encode("Say", true));
  EXPECT_EQ(one.prompt, file.prompt);
  EXPECT_EQ(one.chosen, file.chosen);
  EXPECT_EQ(one.rejected, file.rejected);
  EXPECT_EQ(one.chosen.back(), 300);
  EXPECT_EQ(error_of([&] { reader.read(OrderedJson::parse(R"({"prompt": "Say"})")); }),
            "the row needs \"chosen\" and \"rejected\"");
}

// Content that is not a string (a number, a mapping) is named with its message, before anything
// is rendered: it was reported as the renders' token-prefix mismatch.
TEST(PreferenceRowReader, ContentThatIsNotAStringIsNamed) {
  PreferenceDataOptions o;
  o.eos_token_id = 300;
  const ChatTemplateConfig chat = toy_chat();
  const PreferenceRowReader reader(tokenizer(), &chat, o);
  const auto row = [](const std::string& chosen, const std::string& rejected) {
    return R"({"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "assistant", )"
           R"("content": )" +
           chosen + R"(}], "rejected": [{"role": "assistant", "content": )" + rejected + "}]}";
  };
  EXPECT_EQ(error_of([&] { reader.read(OrderedJson::parse(row("5", R"("b")"))); }),
            "\"chosen\"[0].content must be a string, got 5");
  EXPECT_EQ(error_of([&] { reader.read(OrderedJson::parse(row(R"("a")", R"({"text": "b"})"))); }),
            "\"rejected\"[0].content must be a string, got {\"text\":\"b\"}");
  // Without "prompt": the shared messages are checked too.
  EXPECT_EQ(
      error_of([&] {
        reader.read(OrderedJson::parse(
            R"({"chosen": [{"role": "user", "content": true}, {"role": "assistant", "content": "a"}],)"
            R"( "rejected": [{"role": "user", "content": true}, {"role": "assistant", "content": "b"}]})"));
      }),
      "\"chosen\"[0].content must be a string, got true");
  // The file reader names the row's line.
  const std::string path = dataset_file(row("5", R"("b")"));
  EXPECT_EQ(error_of([&] { read_preference_dataset(path, tokenizer(), &chat, o); }),
            path + ":1: \"chosen\"[0].content must be a string, got 5");
  // The control: string content reads.
  EXPECT_EQ(tokenizer().decode(reader.read(OrderedJson::parse(row(R"("a")", R"("b")"))).chosen),
            "a<|end|>\n");
}

// Review finding (docs/RELIABILITY.md): a tokenizer whose normalizer strips whitespace encodes
// a whitespace-only prompt + completion as no tokens; the reader read the last token of that
// empty list (undefined behaviour) and accepted an empty prompt. Both are now errors or safe.
TEST(PreferenceRowReader, WhitespaceThatEncodesToNothingIsAnError) {
  const tok::Tokenizer stripping = [] {
    nlohmann::json j = nlohmann::json::parse(
        std::ifstream(std::string(FP8RL_TEST_DATA) + "/tokenizer/tiny_byte_level/tokenizer.json"));
    j["normalizer"] = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}};
    return tok::Tokenizer::from_json_text(j.dump());
  }();
  ASSERT_TRUE(stripping.encode("   ", true).empty());
  PreferenceDataOptions o;
  o.eos_token_id = 300;
  const PreferenceRowReader reader(stripping, nullptr, o);
  EXPECT_EQ(
      error_of([&] {
        reader.read(OrderedJson::parse(R"({"prompt": " ", "chosen": " ", "rejected": "  "})"));
      }),
      "the prompt has no tokens");
  // The control: the same reader takes a prompt with text.
  EXPECT_EQ(
      reader.read(OrderedJson::parse(R"({"prompt": "a", "chosen": " ", "rejected": " b"})")).chosen,
      (std::vector<int32_t>{300}));
}

// KTO's unpaired rows: prompt + completion (text or messages) + a boolean label, read as the
// file reader reads them; the completion kept whole for the trainer to cut.
TEST(PreferenceRowReader, UnpairedRowsReadAsTheFileReaderDoes) {
  PreferenceDataOptions o;
  o.eos_token_id = 300;
  o.max_prompt_length = std::nullopt;
  const ChatTemplateConfig chat = toy_chat();
  const PreferenceRowReader reader(tokenizer(), &chat, o);
  const std::string row = R"({"prompt": "Say", "completion": " yes", "label": false})";
  const UnpairedExample file = read_unpaired_dataset(dataset_file(row), tokenizer(), &chat, o)[0];
  const UnpairedExample one = reader.read_unpaired(OrderedJson::parse(row));
  EXPECT_EQ(one.prompt, tokenizer().encode("Say", true));
  EXPECT_EQ(one.prompt, file.prompt);
  EXPECT_EQ(one.completion, file.completion);
  EXPECT_EQ(one.completion.back(), 300);
  EXPECT_FALSE(one.desirable);
  EXPECT_EQ(file.line, 1);
  // Conversational: the template's render of the prompt with the generation prompt, then of
  // prompt + completion.
  const UnpairedExample chat_row = reader.read_unpaired(OrderedJson::parse(
      R"({"prompt": [{"role": "user", "content": "hi"}], "completion": [{"role": "assistant", )"
      R"("content": "yo"}], "label": true})"));
  EXPECT_TRUE(chat_row.desirable);
  EXPECT_EQ(tokenizer().decode(chat_row.completion), "yo<|end|>\n");
}

TEST(PreferenceRowReader, BadUnpairedRowsAreNamed) {
  PreferenceDataOptions o;
  o.eos_token_id = 300;
  o.max_prompt_length = std::nullopt;
  o.max_length = 8;
  const PreferenceRowReader reader(tokenizer(), nullptr, o);
  const auto error = [&](const std::string& row) {
    return error_of([&] { reader.read_unpaired(OrderedJson::parse(row)); });
  };
  EXPECT_EQ(error(R"({"prompt": "Say", "completion": " yes"})"),
            "the row needs \"label\" (unpaired rows: prompt, completion, label)");
  EXPECT_EQ(error(R"({"completion": " yes", "label": true})"),
            "the row needs \"prompt\" (unpaired rows: prompt, completion, label)");
  EXPECT_EQ(error(R"({"prompt": "Say", "completion": " yes", "label": 1})"),
            "\"label\" must be true (desirable) or false (undesirable), got 1");
  EXPECT_EQ(error(R"({"prompt": "Say", "completion": " yes", "label": "true"})"),
            "\"label\" must be true (desirable) or false (undesirable), got \"true\"");
  EXPECT_EQ(error(R"({"prompt": "Say", "chosen": " yes", "rejected": " no"})"),
            "the row has \"chosen\"/\"rejected\": kto reads unpaired rows (\"prompt\", "
            "\"completion\", \"label\"); write each pair as two rows");
  EXPECT_EQ(error(R"({"prompt": "Say", "completion": "", "label": true})"),
            "\"completion\" must be a non-empty string or a list of messages");
  EXPECT_EQ(error(R"({"prompt": "Say", "completion": [{"role": "assistant"}], "label": true})"),
            "\"prompt\" and \"completion\" must both be strings or both message lists");
  const size_t prompt = tokenizer().encode("Say something longer here", true).size();
  ASSERT_GE(prompt, 8u);
  EXPECT_EQ(
      error(R"({"prompt": "Say something longer here", "completion": " x", "label": true})"),
      fmt::format("the prompt has {} tokens: max_length 8 leaves no completion token", prompt));
  const std::string long_row =
      R"({"prompt": "Say", "completion": " yes yes yes yes", "label": true})";
  EXPECT_NE(error(long_row).find("more than max_length 8"), std::string::npos) << error(long_row);
  // The control: with truncation the long row reads, whole (the trainer cuts it).
  o.truncation = true;
  const PreferenceRowReader cutting(tokenizer(), nullptr, o);
  const UnpairedExample e = cutting.read_unpaired(OrderedJson::parse(long_row));
  EXPECT_GT(e.prompt.size() + e.completion.size(), 8u);
}

}  // namespace
}  // namespace fp8rl
