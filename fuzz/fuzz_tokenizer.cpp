// tokenizer.json load, then encode/decode: [u32 n][n bytes of tokenizer.json][text]. The text
// is encoded (with and without the post-processor's tokens) and decoded back; its bytes, read
// as ids, are decoded too (unknown ids must be a clean error).
#include <cstring>
#include <vector>

#include "fuzz_input.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [json, text] = fp8rl::fuzz::split_prefixed(fp8rl::fuzz::as_text(data, size));
  return fp8rl::fuzz::run([&, json = json, text = text] {
    const auto t = fp8rl::tok::Tokenizer::from_json_text(json, "fuzz tokenizer.json");
    const int32_t vocab = t.vocab_size();
    for (int32_t id : {-1, 0, vocab - 1, vocab}) {
      (void)t.id_to_token(id);
      (void)t.is_special(id);
    }
    (void)t.token_to_id(text);

    std::vector<int32_t> raw(text.size() / 4);
    if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
    try {
      (void)t.decode(raw, /*skip_special=*/false);
    } catch (const fp8rl::Error&) {
    }

    const std::vector<int32_t> ids = t.encode(text, /*add_special=*/true);
    for (int32_t id : ids)
      if (id < 0 || id >= vocab) __builtin_trap();  // encode gives only ids the tokenizer has
    (void)t.decode(ids, /*skip_special=*/true);
    (void)t.decode(t.encode(text, /*add_special=*/false), /*skip_special=*/false);
  });
}
