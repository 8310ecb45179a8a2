// tokenizer_config.json, generation_config.json and chat template files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "fixtures.h"
#include "tokenizer/tokenizer_config.h"

using namespace fp8rl::tok;

TEST(TokenizerConfig, SpecialTokensAndTemplate) {
  const auto c = TokenizerConfig::from_json_text(R"({
    "bos_token": "<s>",
    "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": false},
    "pad_token": null,
    "unk_token": "<unk>",
    "add_bos_token": true,
    "add_eos_token": false,
    "additional_special_tokens": ["<a>", {"content": "<b>"}],
    "clean_up_tokenization_spaces": true,
    "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
  })");
  EXPECT_EQ(c.bos_token, "<s>");
  EXPECT_EQ(c.eos_token, "</s>");
  EXPECT_FALSE(c.pad_token.has_value());
  EXPECT_EQ(c.unk_token, "<unk>");
  EXPECT_EQ(c.add_bos_token, true);
  EXPECT_EQ(c.add_eos_token, false);
  EXPECT_EQ(c.additional_special_tokens, (std::vector<std::string>{"<a>", "<b>"}));
  EXPECT_TRUE(c.clean_up_tokenization_spaces);
  ASSERT_NE(c.chat_template(), nullptr);
  EXPECT_EQ(*c.chat_template(),
            "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(c.chat_template("tool_use"), nullptr);
  const auto map = c.special_tokens_map();
  ASSERT_EQ(map.size(), 3u);
  EXPECT_EQ(map[0], (std::pair<std::string, std::string>{"bos_token", "<s>"}));
  EXPECT_EQ(map[1], (std::pair<std::string, std::string>{"eos_token", "</s>"}));
}

TEST(TokenizerConfig, NamedTemplatesAndGenerationConfig) {
  const auto c = TokenizerConfig::from_json_text(
      R"({"chat_template": [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"}],
          "eos_token": "<|im_end|>"})",
      R"({"eos_token_id": [151645, 151643], "bos_token_id": 151643, "pad_token_id": null})");
  ASSERT_EQ(c.chat_templates.size(), 2u);
  EXPECT_EQ(*c.chat_template("default"), "A");
  EXPECT_EQ(*c.chat_template("tool_use"), "B");
  EXPECT_EQ(c.generation_eos_token_ids, (std::vector<int32_t>{151645, 151643}));
  EXPECT_EQ(c.generation_bos_token_id, 151643);
  EXPECT_FALSE(c.generation_pad_token_id.has_value());

  const auto single = TokenizerConfig::from_json_text("{}", R"({"eos_token_id": 2})");
  EXPECT_EQ(single.generation_eos_token_ids, (std::vector<int32_t>{2}));
}

TEST(TokenizerConfig, StopTokenIds) {
  const auto t = fixtures::load(fixtures::byte_level_json());
  auto c = TokenizerConfig::from_json_text(R"({"eos_token": "<|end|>"})",
                                           R"({"eos_token_id": [5, 300]})");
  EXPECT_EQ(c.stop_token_ids(t), (std::vector<int32_t>{5, 300}));
  c = TokenizerConfig::from_json_text(R"({"eos_token": "<|end|>"})");
  EXPECT_EQ(c.stop_token_ids(t), (std::vector<int32_t>{300}));
}

TEST(TokenizerConfig, ModelDirectoryFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "fp8rl_test_tokenizer_config";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "additional_chat_templates");
  auto write = [&](const std::filesystem::path& p, const std::string& s) {
    std::ofstream(dir / p, std::ios::binary) << s;
  };
  write("tokenizer_config.json", R"({"chat_template": "old", "bos_token": "<s>"})");
  write("generation_config.json", R"({"eos_token_id": 7})");
  write("chat_template.jinja", "new {{ messages }}\n");
  write("additional_chat_templates/rag.jinja", "rag");
  const auto c = TokenizerConfig::load(dir);
  EXPECT_EQ(*c.chat_template(), "new {{ messages }}\n");  // the .jinja file wins
  EXPECT_EQ(*c.chat_template("rag"), "rag");
  EXPECT_EQ(c.bos_token, "<s>");
  EXPECT_EQ(c.generation_eos_token_ids, (std::vector<int32_t>{7}));
  // The tokenizer_config.json path works as well as its directory.
  EXPECT_EQ(*TokenizerConfig::load(dir / "tokenizer_config.json").chat_template("rag"), "rag");
  EXPECT_THROW(TokenizerConfig::load(dir / "missing"), fp8rl::Error);

  // An empty directory is a config with nothing set.
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto empty = TokenizerConfig::load(dir);
  EXPECT_TRUE(empty.chat_templates.empty());
  EXPECT_FALSE(empty.eos_token.has_value());
  std::filesystem::remove_all(dir);
}

TEST(TokenizerConfig, MalformedFilesAreClearErrors) {
  auto message = [](const std::string& tc, const std::string& gc = {}) {
    try {
      TokenizerConfig::from_json_text(tc, gc);
    } catch (const fp8rl::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{not json").find("tokenizer_config.json is not valid JSON"),
            std::string::npos);
  EXPECT_NE(message(R"({"chat_template": 3})").find("'chat_template' must be a string"),
            std::string::npos);
  EXPECT_NE(message(R"({"eos_token": 3})").find("'eos_token' must be a string"), std::string::npos);
  EXPECT_NE(message("{}", R"({"eos_token_id": "x"})").find("eos_token_id"), std::string::npos);
  EXPECT_NE(message(R"({"chat_template": [{"name": "x"}]})").find("missing field 'template'"),
            std::string::npos);
}

TEST(TokenizerConfig, DeepNestingIsAClearError) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const auto& [tc, gc] :
       {std::pair<std::string, std::string>{R"({"x":)" + deep + "}", ""},
        std::pair<std::string, std::string>{"{}", R"({"x":)" + deep + "}"}}) {
    try {
      TokenizerConfig::from_json_text(tc, gc);
      ADD_FAILURE() << "no error";
    } catch (const fp8rl::Error& e) {
      EXPECT_NE(std::string(e.what()).find("limit of 256"), std::string::npos) << e.what();
    }
  }
}
