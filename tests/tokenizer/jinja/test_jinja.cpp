#include <gtest/gtest.h>

#include "tokenizer/jinja/chat_template.h"

TEST(Jinja, Smoke) {
  EXPECT_EQ(fp8rl::render_chat_template("{{ 1 + 2 }}", nlohmann::ordered_json::object()), "3");
}
