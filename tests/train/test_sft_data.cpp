// The SFT data side: each TRL row type read into tokens and a loss mask, the errors of bad rows
// (each naming its line), and padding-free packing (the epoch plan and the packed batch).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "formats/json_read.h"
#include "test_util.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/sft_batch.h"
#include "train/sft_data.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;
using Mask = std::vector<uint8_t>;

const std::string kTokenizerPath = std::string(FP8RL_TEST_DATA) + "/tokenizer/tiny_byte_level";
constexpr int32_t kEos = 300;  // "<|end|>" of the tiny tokenizer
constexpr int32_t kBos = 301;  // "<x>", made the BOS of bos_tokenizer()

// A chat template in the shape of ChatML, over the tiny tokenizer's added tokens.
ChatTemplateConfig toy_chat() {
  ChatTemplateConfig c;
  c.source =
      "{% for m in messages %}{{ '<x>' + m.role + '\\n' + m.content + '<|end|>\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<x>assistant\\n' }}{% endif %}";
  return c;
}

const tok::Tokenizer& tokenizer() {
  static const tok::Tokenizer t = tok::Tokenizer::from_file(kTokenizerPath);
  return t;
}

// The tiny tokenizer with a post-processor that adds "<x>" as BOS (as Llama's adds <s>).
const tok::Tokenizer& bos_tokenizer() {
  static const tok::Tokenizer t = [] {
    nlohmann::json j = read_json_file(kTokenizerPath + "/tokenizer.json");
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<x>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<x>", {{"id", "<x>"}, {"ids", {kBos}}, {"tokens", {"<x>"}}}}}}};
    return tok::Tokenizer::from_json_text(j.dump());
  }();
  return t;
}

SftDataOptions default_options() {
  SftDataOptions o;
  o.eos_token_id = kEos;
  return o;
}

class SftDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fp8rl_sft_data_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& text) {
    const std::string path = (dir_ / ("data" + std::to_string(files_++) + ".jsonl")).string();
    std::ofstream(path) << text;
    return path;
  }
  std::vector<SftExample> read(const std::string& text, const SftDataOptions& o = default_options(),
                               const ChatTemplateConfig* chat = nullptr,
                               const tok::Tokenizer& t = tokenizer()) {
    return read_sft_dataset(write(text), t, chat, o);
  }
  // The error of reading `text`; it must start with "PATH:LINE: " and contain `what`.
  void expect_error(const std::string& text, int64_t line, const std::string& what,
                    const SftDataOptions& o = default_options(),
                    const ChatTemplateConfig* chat = nullptr) {
    const std::string path = write(text);
    try {
      read_sft_dataset(path, tokenizer(), chat, o);
      ADD_FAILURE() << "no error for: " << text;
    } catch (const Error& e) {
      const std::string message = e.what();
      const std::string prefix = path + ":" + std::to_string(line) + ": ";
      EXPECT_EQ(message.substr(0, prefix.size()), prefix) << message;
      EXPECT_NE(message.find(what), std::string::npos) << message;
    }
  }

  fs::path dir_;
  int files_ = 0;
};

// The text of the tokens that are targets (mask 1, position >= 1), decoded as one sequence.
std::string target_text(const SftExample& ex) {
  Ids ids;
  for (size_t t = 1; t < ex.input_ids.size(); ++t)
    if (ex.loss_mask[t]) ids.push_back(ex.input_ids[t]);
  return tokenizer().decode(ids);
}

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(SftDataTest, InputIdsRowsAreTakenAsIsWithLossOnAll) {
  const auto ex = read("\n{\"input_ids\": [5, 6, 7]}\n  \n{\"input_ids\": [301, 0]}\n");
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].input_ids, (Ids{5, 6, 7}));  // no EOS appended to pre-tokenized rows
  EXPECT_EQ(ex[0].loss_mask, (Mask{1, 1, 1}));
  EXPECT_EQ(ex[0].line, 2);  // blank lines count in the numbering
  EXPECT_EQ(ex[1].input_ids, (Ids{301, 0}));
  EXPECT_EQ(ex[1].line, 4);
  EXPECT_EQ(ex[0].num_targets(), 2);
}

TEST_F(SftDataTest, InputIdsCompletionMask) {
  const std::string row = R"({"input_ids": [5, 6, 7, 8], "completion_mask": [0, 0, 1, 1]})";
  EXPECT_EQ(read(row)[0].loss_mask, (Mask{0, 0, 1, 1}));
  SftDataOptions all = default_options();
  all.completion_only_loss = false;
  EXPECT_EQ(read(row, all)[0].loss_mask, (Mask{1, 1, 1, 1}));
}

TEST_F(SftDataTest, TextRowsGetEosAndLossOnAll) {
  const auto ex = read(R"({"text": "hello world"})");
  ASSERT_EQ(ex.size(), 1u);
  const Ids body = tokenizer().encode("hello world", true);
  EXPECT_EQ(ex[0].input_ids, concat(body, {kEos}));
  EXPECT_EQ(ex[0].loss_mask, Mask(body.size() + 1, 1));
  // Text that already ends with the EOS token gets no second one.
  EXPECT_EQ(read(R"({"text": "hello world<|end|>"})")[0].input_ids, ex[0].input_ids);
  // No EOS token known: an error rather than examples that never learn to stop.
  SftDataOptions no_eos = default_options();
  no_eos.eos_token_id = -1;
  expect_error(R"({"text": "hi"})", 1, "EOS", no_eos);
}

TEST_F(SftDataTest, TextRowsGetThePostProcessorsBos) {
  const auto ex = read(R"({"text": "hello"})", default_options(), nullptr, bos_tokenizer());
  EXPECT_EQ(ex[0].input_ids, concat(concat({kBos}, tokenizer().encode("hello")), {kEos}));
}

TEST_F(SftDataTest, DatasetTextField) {
  SftDataOptions o = default_options();
  o.dataset_text_field = "body";
  EXPECT_EQ(read(R"({"body": "hello", "text": 3})", o)[0].input_ids,
            concat(tokenizer().encode("hello"), {kEos}));
  expect_error(R"({"text": "hello"})", 1, "no usable field", o);
}

TEST_F(SftDataTest, PromptCompletionTrainsOnTheCompletion) {
  const auto ex = read(R"({"prompt": "hello", "completion": " the world"})");
  const Ids prompt = tokenizer().encode("hello");
  const Ids full = concat(tokenizer().encode("hello the world"), {kEos});
  ASSERT_EQ(ex[0].input_ids, full);
  Mask want(full.size(), 1);
  std::fill(want.begin(), want.begin() + ptrdiff_t(prompt.size()), uint8_t{0});
  EXPECT_EQ(ex[0].loss_mask, want);
  EXPECT_EQ(target_text(ex[0]), " the world<|end|>");

  SftDataOptions all = default_options();
  all.completion_only_loss = false;
  EXPECT_EQ(read(R"({"prompt": "hello", "completion": " the world"})", all)[0].loss_mask,
            Mask(full.size(), 1));
}

TEST_F(SftDataTest, PromptCompletionMergedBoundaryTokenIsATarget) {
  // "Say " + "world": the prompt ends in "Ġ", the whole text has "Ġworld"; TRL's mask by prompt
  // length would hide "Ġworld", the completion's first word.
  const auto ex = read(R"({"prompt": "Say ", "completion": "world"})");
  const Ids full = concat(tokenizer().encode("Say world"), {kEos});
  ASSERT_EQ(ex[0].input_ids, full);
  ASSERT_EQ(tokenizer().encode("Say ").size(), full.size() - 1);  // the merge happens
  EXPECT_EQ(target_text(ex[0]), " world<|end|>");
}

TEST_F(SftDataTest, MessagesTrainOnAssistantTurnsWithoutHeaders) {
  const ChatTemplateConfig chat = toy_chat();
  const std::string row =
      R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},)"
      R"( {"role": "assistant", "content": "hello world"}, {"role": "user", "content": "again"},)"
      R"( {"role": "assistant", "content": "the end"}]})";
  const auto ex = read(row, default_options(), &chat);
  const std::string rendered =
      "<x>system\nbe brief<|end|>\n<x>user\nhi<|end|>\n<x>assistant\nhello world<|end|>\n"
      "<x>user\nagain<|end|>\n<x>assistant\nthe end<|end|>\n";
  EXPECT_EQ(ex[0].input_ids, tokenizer().encode(rendered));  // no EOS added, no BOS
  EXPECT_EQ(target_text(ex[0]), "hello world<|end|>\nthe end<|end|>\n");

  SftDataOptions all = default_options();
  all.assistant_only_loss = false;
  EXPECT_EQ(read(row, all, &chat)[0].loss_mask, Mask(ex[0].input_ids.size(), 1));
}

// TRL's chat_template_kwargs reach the template as variables (a Qwen3-style thinking switch);
// without them the template's default renders, which the kwargs must change.
TEST_F(SftDataTest, ChatTemplateKwargsAreTemplateVariables) {
  ChatTemplateConfig chat = toy_chat();
  chat.source = test::kThinkingSwitch + chat.source;
  const std::string row =
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})";
  SftDataOptions off = default_options();
  off.chat_template_kwargs = {{"enable_thinking", false}};
  const auto with = read(row, off, &chat), without = read(row, default_options(), &chat);
  EXPECT_EQ(with[0].input_ids,
            tokenizer().encode("<x>nothink\n<x>user\nhi<|end|>\n<x>assistant\nyo<|end|>\n"));
  EXPECT_EQ(without[0].input_ids,
            tokenizer().encode("<x>user\nhi<|end|>\n<x>assistant\nyo<|end|>\n"));
  EXPECT_EQ(target_text(with[0]), "yo<|end|>\n");  // the assistant mask still finds the turn
  SftDataOptions bad = default_options();
  bad.chat_template_kwargs = nlohmann::json::array({1});
  expect_error(row, 1, "chat_template_kwargs must be a mapping", bad, &chat);
}

TEST_F(SftDataTest, MessagesWithARealTemplate) {
  const ChatTemplateConfig chat =
      load_chat_template_config(std::string(FP8RL_TEST_DATA) + "/chat/templates/qwen2_5_like");
  const auto ex = read(
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi there"}]})",
      default_options(), &chat);
  EXPECT_EQ(target_text(ex[0]), "Hi there<|im_end|>\n");
  EXPECT_EQ(tokenizer().decode(ex[0].input_ids).find("<|im_start|>system\nYou are Qwen"), 0u);
}

TEST_F(SftDataTest, ToolsGoToTheTemplate) {
  const ChatTemplateConfig chat =
      load_chat_template_config(std::string(FP8RL_TEST_DATA) + "/chat/templates/qwen2_5_like");
  const std::string messages =
      R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi there"}])";
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather"}}])";
  const auto with = read(R"({"messages": )" + messages + R"(, "tools": )" + tools + "}",
                         default_options(), &chat);
  const auto without = read(R"({"messages": )" + messages + "}", default_options(), &chat);
  EXPECT_NE(tokenizer().decode(with[0].input_ids).find("get_weather"), std::string::npos);
  EXPECT_EQ(tokenizer().decode(without[0].input_ids).find("get_weather"), std::string::npos);
  EXPECT_EQ(target_text(with[0]), "Hi there<|im_end|>\n");
}

TEST_F(SftDataTest, ConversationalPromptCompletion) {
  const ChatTemplateConfig chat = toy_chat();
  const std::string row =
      R"({"prompt": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"},)"
      R"( {"role": "user", "content": "again"}], "completion": [{"role": "assistant", "content": "the end"}]})";
  const auto ex = read(row, default_options(), &chat);
  EXPECT_EQ(target_text(ex[0]), "the end<|end|>\n");  // not the prompt's assistant turn
  SftDataOptions both = default_options();
  both.completion_only_loss = false;
  EXPECT_EQ(target_text(read(row, both, &chat)[0]), "yes<|end|>\nthe end<|end|>\n");
  // Completion only, whatever its roles: from the end of the prompt's generation header.
  SftDataOptions any_role = default_options();
  any_role.assistant_only_loss = false;
  EXPECT_EQ(target_text(read(row, any_role, &chat)[0]), "the end<|end|>\n");
}

TEST_F(SftDataTest, TemplatesThatAreNotPrefixStable) {
  // The last message renders differently ("<x>" before it), so a turn's tokens change once a
  // later turn follows: an error for assistant-only loss, fine for loss on everything.
  ChatTemplateConfig chat;
  chat.source =
      "{% for m in messages %}{% if loop.last %}{{ '<x>' }}{% endif %}"
      "{{ m.role + ':' + m.content + '<|end|>' }}{% endfor %}";
  const std::string row =
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},)"
      R"( {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})";
  expect_error("\n" + row, 2, "not a token prefix", default_options(), &chat);
  SftDataOptions all = default_options();
  all.assistant_only_loss = false;
  EXPECT_EQ(read(row, all, &chat).size(), 1u);
}

TEST_F(SftDataTest, Truncation) {
  const std::string row = R"({"input_ids": [1, 2, 3, 4, 5, 6]})";
  SftDataOptions o = default_options();
  o.max_length = 4;
  expect_error("{\"input_ids\": [1, 2]}\n" + row, 2, "6 tokens, longer than max_length 4", o);
  o.truncation = true;
  const auto ex = read(row, o);
  EXPECT_EQ(ex[0].input_ids, (Ids{1, 2, 3, 4}));  // keep_start
  EXPECT_EQ(ex[0].loss_mask, (Mask{1, 1, 1, 1}));
  o.max_length = 6;
  o.truncation = false;
  EXPECT_EQ(read(row, o)[0].input_ids.size(), 6u);  // exactly max_length is fine
  // A prompt filling the whole window leaves nothing to train on.
  o.max_length = 2;
  o.truncation = true;
  expect_error(R"({"prompt": "hello the world", "completion": " x"})", 1, "no token to train on",
               o);
}

// A conversation's length is measured from the one render of the whole, before each assistant
// turn's render of the conversation so far (quadratic in the turns: 4,000 turns took 39 s to
// reach the length error); with truncation only the turns inside the kept tokens are rendered,
// and the example is the one the full method gives.
TEST_F(SftDataTest, LongConversationsAreMeasuredFirst) {
  const ChatTemplateConfig chat = toy_chat();
  const auto conversation = [](int turns) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    for (int i = 0; i < turns; ++i)
      messages.push_back(
          {{"role", i % 2 ? "assistant" : "user"}, {"content", "turn " + std::to_string(i)}});
    return nlohmann::ordered_json{{"messages", messages}}.dump();
  };
  const std::string long_row = conversation(4000);
  const auto start = std::chrono::steady_clock::now();
  expect_error(long_row, 1, "longer than max_length 1024", default_options(), &chat);
  SftDataOptions cut = default_options();
  cut.truncation = true;
  cut.max_length = 64;
  const SftExample truncated = read(long_row, cut, &chat)[0];
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  // The reference: a conversation short enough for every turn's render, cut by hand.
  SftDataOptions whole = default_options();
  whole.max_length = 100000;
  SftExample reference = read(conversation(40), whole, &chat)[0];
  ASSERT_GT(reference.input_ids.size(), 64u);
  reference.input_ids.resize(64);
  reference.loss_mask.resize(64);
  EXPECT_EQ(truncated.input_ids, reference.input_ids);
  EXPECT_EQ(truncated.loss_mask, reference.loss_mask);
  EXPECT_GT(truncated.num_targets(), 0);
}

TEST_F(SftDataTest, BadRowsNameTheirLine) {
  const std::string good = "{\"input_ids\": [1, 2]}\n";
  const ChatTemplateConfig chat = toy_chat();
  expect_error(good + "{\"text\": \"a\"\n", 2, "not valid JSON");
  expect_error(good + "\n[1, 2]\n", 3, "must be a JSON object");
  expect_error(good + "{\"foo\": 1, \"bar\": 2}", 2, "no usable field");
  expect_error(good + "{\"foo\": 1, \"bar\": 2}", 2, "foo, bar");
  expect_error(good + "{\"text\": null}", 2, "no usable field");
  expect_error(good + "{}", 2, "(the row has: none)");
  expect_error(good + "{\"text\": 5}", 2, "\"text\" must be a string");
  expect_error(good + "{\"text\": \"\"}", 2, "empty string");
  expect_error(good + "{\"input_ids\": [1, 2.5]}", 2, "input_ids[1] must be an integer");
  expect_error(good + "{\"input_ids\": [1, \"2\"]}", 2, "input_ids[1] must be an integer");
  expect_error(good + "{\"input_ids\": [1, 302]}", 2, "outside the vocabulary [0, 302)");
  expect_error(good + "{\"input_ids\": [-1, 2]}", 2, "outside the vocabulary");
  expect_error(good + "{\"input_ids\": [1, 18446744073709551615]}", 2, "outside the vocabulary");
  expect_error(good + "{\"input_ids\": []}", 2, "empty list");
  expect_error(good + "{\"input_ids\": 7}", 2, "list of token ids");
  expect_error(good + "{\"input_ids\": [7]}", 2, "no token to train on");
  expect_error(good + "{\"input_ids\": [1, 2], \"completion_mask\": [1]}", 2, "completion_mask");
  expect_error(good + "{\"prompt\": \"a\"}", 2, "needs a \"completion\"");
  expect_error(good + "{\"completion\": \"a\"}", 2, "needs a \"prompt\"");
  expect_error(good + "{\"prompt\": \"a\", \"completion\": 3}", 2,
               "\"completion\" must be a string");
  expect_error(good + R"({"messages": [{"role": "user", "content": "hi"}]})", 2,
               "no assistant turn", default_options(), &chat);
  expect_error(good + R"({"messages": [{"role": "assistant", "content": "hi"}]})", 2,
               "need a chat template");
  expect_error(good + R"({"messages": []})", 2, "empty list", default_options(), &chat);
  expect_error(good + R"({"messages": [{"content": "hi"}]})", 2, "no string \"role\"",
               default_options(), &chat);
  expect_error(good + R"({"messages": "hi"})", 2, "must be a list", default_options(), &chat);
  // The template's own failure (content missing in arithmetic) is named with the line too.
  expect_error(good + R"({"messages": [{"role": "assistant"}]})", 2, "chat template error",
               default_options(), &chat);
  // Invalid UTF-8 inside a JSON string.
  expect_error(good + "{\"text\": \"a\xff\"}", 2, "not valid JSON");
}

TEST_F(SftDataTest, ManyRowsKeepTheirOrderAndTheFirstErrorIsReported) {
  // More rows than one parallel chunk (4096), with blank lines between.
  std::string text;
  for (int i = 0; i < 9000; ++i)
    text += "{\"input_ids\": [" + std::to_string(i % 300) + ", 1]}\n" + (i % 7 == 0 ? "\n" : "");
  const auto ex = read(text);
  ASSERT_EQ(ex.size(), 9000u);
  for (size_t i = 1; i < ex.size(); ++i) {
    ASSERT_EQ(ex[i].input_ids[0], int32_t(i % 300));
    ASSERT_GT(ex[i].line, ex[i - 1].line);
  }
  EXPECT_EQ(ex.back().line, 9000 + 9000 / 7 + 1);
  // Bad rows at lines 2045 (the end of one thread's share, for 2 to 16 threads), 2050 (the start
  // of the next share, reached first in time) and 8000 (a later chunk): the first is named.
  std::string bad;
  for (int i = 1; i <= 9000; ++i)
    bad += std::string(i == 2045                ? "{\"text\": 1}"
                       : i == 2050 || i == 8000 ? "[]"
                                                : "{\"input_ids\": [1, 2]}") +
           "\n";
  expect_error(bad, 2045, "must be a string");
}

// The row reader alone (what the fuzzer drives) gives the file reader's example, and its
// errors lack only the "PATH:LINE: " prefix.
TEST_F(SftDataTest, RowReaderReadsOneRowAsTheFileReaderDoes) {
  const ChatTemplateConfig chat = toy_chat();
  const std::string row =
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})";
  const SftRowReader reader(tokenizer(), &chat, default_options());
  const SftExample one = reader.read(nlohmann::ordered_json::parse(row));
  const SftExample file = read(row, default_options(), &chat)[0];
  EXPECT_EQ(one.input_ids, file.input_ids);
  EXPECT_EQ(one.loss_mask, file.loss_mask);
  EXPECT_EQ(one.line, 0);
  EXPECT_EQ(file.line, 1);
  try {
    reader.read(nlohmann::ordered_json::parse(R"({"input_ids": [1, "x"]})"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("input_ids[1] must be an integer", 0), 0u) << e.what();
  }
}

TEST_F(SftDataTest, EmptyDatasetIsAnError) {
  const std::string path = write("\n  \n");
  try {
    read_sft_dataset(path, tokenizer(), nullptr, default_options());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no examples"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      read_sft_dataset((dir_ / "missing.jsonl").string(), tokenizer(), nullptr, default_options()),
      Error);
}

TEST_F(SftDataTest, ModelDirectorySetup) {
  // A model directory: the tiny tokenizer, eos_token and a chat template in its config.
  const fs::path model = dir_ / "model";
  fs::create_directories(model);
  fs::copy_file(kTokenizerPath + "/tokenizer.json", model / "tokenizer.json");
  nlohmann::json config = {{"eos_token", "<|end|>"}, {"chat_template", toy_chat().source}};
  std::ofstream(model / "tokenizer_config.json") << config.dump();
  SftTokenizerSetup setup = load_sft_tokenizer_setup(model.string(), tokenizer());
  EXPECT_EQ(setup.eos_token_id, kEos);
  ASSERT_TRUE(setup.chat.has_value());
  EXPECT_EQ(setup.chat->source, toy_chat().source);
  SftDataOptions o;
  o.eos_token_id = setup.eos_token_id;
  EXPECT_EQ(read(R"({"text": "hi"})", o, &*setup.chat)[0].input_ids.back(), kEos);

  // No template, no eos_token: neither is set.
  std::ofstream(model / "tokenizer_config.json") << "{}";
  setup = load_sft_tokenizer_setup(model.string(), tokenizer());
  EXPECT_EQ(setup.eos_token_id, -1);
  EXPECT_FALSE(setup.chat.has_value());
  // An eos_token the tokenizer does not have.
  std::ofstream(model / "tokenizer_config.json") << R"({"eos_token": "</s>"})";
  EXPECT_THROW(load_sft_tokenizer_setup(model.string(), tokenizer()), Error);
}

// ---- packing ----

SftExample example_of_length(size_t n, int32_t first_token) {
  SftExample ex;
  for (size_t t = 0; t < n; ++t) ex.input_ids.push_back(first_token + int32_t(t));
  ex.loss_mask.assign(n, 1);
  return ex;
}

std::vector<SftExample> varied_examples(size_t count) {
  std::vector<SftExample> out;
  for (size_t i = 0; i < count; ++i) out.push_back(example_of_length(1 + (i * 37) % 50, 0));
  return out;
}

std::vector<size_t> flatten(const std::vector<std::vector<size_t>>& plan) {
  std::vector<size_t> all;
  for (const auto& b : plan) all.insert(all.end(), b.begin(), b.end());
  return all;
}

TEST(SftPacking, EveryExampleOncePerEpochWithinBudgets) {
  const auto ex = varied_examples(97);
  for (const int64_t batch_size : {1, 3, 8, 1000}) {
    for (const int64_t max_tokens : {1, 40, 120, 100000}) {
      const auto plan = plan_epoch(ex, batch_size, max_tokens, 7, 2, true);
      std::vector<size_t> all = flatten(plan);
      std::sort(all.begin(), all.end());
      std::vector<size_t> want(ex.size());
      std::iota(want.begin(), want.end(), size_t{0});
      ASSERT_EQ(all, want) << batch_size << " " << max_tokens;
      const std::vector<size_t> order = flatten(plan);
      size_t next = 0;
      for (size_t b = 0; b < plan.size(); ++b) {
        ASSERT_FALSE(plan[b].empty());
        int64_t tokens = 0;
        for (const size_t i : plan[b]) tokens += int64_t(ex[i].input_ids.size());
        EXPECT_LE(int64_t(plan[b].size()), batch_size);
        if (plan[b].size() > 1) {
          EXPECT_LE(tokens, max_tokens);  // a lone example may exceed it
        }
        next += plan[b].size();
        // Greedy: the next example would not have fitted.
        if (b + 1 < plan.size()) {
          const auto n = int64_t(ex[order[next]].input_ids.size());
          EXPECT_TRUE(int64_t(plan[b].size()) == batch_size || tokens + n > max_tokens);
        }
      }
    }
  }
}

TEST(SftPacking, OrderIsAFunctionOfSeedAndEpoch) {
  const auto ex = varied_examples(50);
  const auto a = plan_epoch(ex, 4, 200, 11, 3, true);
  EXPECT_EQ(plan_epoch(ex, 4, 200, 11, 3, true), a);  // as a resumed run replays it
  EXPECT_NE(flatten(plan_epoch(ex, 4, 200, 11, 4, true)), flatten(a));
  EXPECT_NE(flatten(plan_epoch(ex, 4, 200, 12, 3, true)), flatten(a));
  std::vector<size_t> identity(ex.size());
  std::iota(identity.begin(), identity.end(), size_t{0});
  EXPECT_NE(flatten(a), identity);
  EXPECT_EQ(flatten(plan_epoch(ex, 4, 200, 11, 3, false)), identity);
  EXPECT_EQ(flatten(plan_epoch(ex, 4, 200, 99, 8, false)), identity);
  EXPECT_THROW(plan_epoch(ex, 0, 200, 1, 0, true), Error);
  EXPECT_THROW(plan_epoch(ex, 4, 0, 1, 0, true), Error);
}

int64_t batch_tokens(const std::vector<SftExample>& ex, const std::vector<size_t>& batch) {
  int64_t n = 0;
  for (const size_t i : batch) n += int64_t(ex[i].input_ids.size());
  return n;
}

TEST(SftPacking, MaxBatchTokensBoundsEveryEpoch) {
  const auto ex = varied_examples(61);
  int later_epochs_larger = 0;  // cases where epoch 0's largest batch is no bound
  for (const int64_t batch_size : {1, 2, 5, 64}) {
    for (const int64_t max_tokens : {1, 30, 75, 100000}) {
      const int64_t bound = max_batch_tokens(ex, batch_size, max_tokens);
      int64_t most = 0, first_epoch = 0;
      for (int64_t epoch = 0; epoch < 20; ++epoch) {
        for (const auto& b : plan_epoch(ex, batch_size, max_tokens, 5, epoch, true)) {
          const int64_t n = batch_tokens(ex, b);
          EXPECT_LE(n, bound) << batch_size << " " << max_tokens;
          most = std::max(most, n);
          if (epoch == 0) first_epoch = std::max(first_epoch, n);
        }
      }
      later_epochs_larger += first_epoch < most;
    }
  }
  EXPECT_GT(later_epochs_larger, 0);
  // By hand: the budget, the batch_size longest together, or one longest over the budget.
  std::vector<SftExample> hand = {example_of_length(10, 0), example_of_length(7, 0),
                                  example_of_length(3, 0)};
  EXPECT_EQ(max_batch_tokens(hand, 2, 12), 12);
  EXPECT_EQ(max_batch_tokens(hand, 2, 100), 17);
  EXPECT_EQ(max_batch_tokens(hand, 1, 100), 10);
  hand.push_back(example_of_length(20, 0));
  EXPECT_EQ(max_batch_tokens(hand, 2, 12), 20);
  // Reached: three examples of 6, two per batch within 12 tokens.
  const std::vector<SftExample> sixes(3, example_of_length(6, 0));
  EXPECT_EQ(max_batch_tokens(sixes, 2, 12), 12);
  EXPECT_EQ(batch_tokens(sixes, plan_epoch(sixes, 2, 12, 1, 0, true)[0]), 12);
}

TEST(SftPacking, BatchTargetsStopAtSequenceBoundaries) {
  std::vector<SftExample> ex(3);
  ex[0].input_ids = {10, 11, 12};
  ex[0].loss_mask = {1, 1, 1};
  ex[1].input_ids = {20, 21, 22, 23};
  ex[1].loss_mask = {0, 0, 1, 1};  // a prompt of two tokens
  ex[2].input_ids = {30, 31};
  ex[2].loss_mask = {1, 1};
  const std::vector<size_t> idx = {1, 0, 2};
  const SftBatch b = make_batch(ex, idx);
  EXPECT_EQ(b.input_ids, (Ids{20, 21, 22, 23, 10, 11, 12, 30, 31}));
  EXPECT_EQ(b.positions, (Ids{0, 1, 2, 3, 0, 1, 2, 0, 1}));
  EXPECT_EQ(b.cu_seqlens, (std::vector<int64_t>{0, 4, 7, 9}));
  // Never the next example's first token as a target of an example's last position.
  const int32_t x = kIgnoreTarget;
  EXPECT_EQ(b.targets, (Ids{x, 22, 23, x, 11, 12, x, 31, x}));
  EXPECT_EQ(b.num_targets, 5);
  int64_t sum = 0;
  for (const size_t i : idx) sum += ex[i].num_targets();
  EXPECT_EQ(b.num_targets, sum);

  const std::vector<size_t> none, out_of_range = {3};
  EXPECT_THROW(make_batch(ex, none), Error);
  EXPECT_THROW(make_batch(ex, out_of_range), Error);
}

TEST_F(SftDataTest, ReadThenPackEndToEnd) {
  const ChatTemplateConfig chat = toy_chat();
  const auto ex = read(
      "{\"text\": \"hello\"}\n{\"prompt\": \"hello\", \"completion\": \" world\"}\n"
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
      "\n",
      default_options(), &chat);
  const auto plan = plan_epoch(ex, 8, 1 << 20, 1, 0, true);
  ASSERT_EQ(plan.size(), 1u);
  const SftBatch b = make_batch(ex, plan[0]);
  int64_t total = 0, targets = 0;
  for (const auto& e : ex) total += int64_t(e.input_ids.size()), targets += e.num_targets();
  EXPECT_EQ(int64_t(b.input_ids.size()), total);
  EXPECT_EQ(b.num_targets, targets);
  EXPECT_EQ(b.cu_seqlens.back(), total);
}

}  // namespace
}  // namespace fp8rl
