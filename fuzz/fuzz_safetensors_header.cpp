// The safetensors header: [u64 little-endian data size][header JSON text], as
// parse_safetensors_header sees a file (its buffer size and its header), without the data.
#include "formats/safetensors_header.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t buffer_size = 0;
  for (int i = 0; i < 8; ++i) buffer_size |= uint64_t(data[i]) << (8 * i);
  const std::string_view text = fp8rl::fuzz::as_text(data + 8, size - 8);
  return fp8rl::fuzz::run([&] {
    const fp8rl::SafetensorsHeader h =
        fp8rl::parse_safetensors_header(text, size_t(buffer_size), "fuzz.safetensors");
    // Every accepted tensor lies inside the buffer (the validator's promise).
    for (const auto& t : h.tensors)
      if (t.end > buffer_size || t.begin > t.end) __builtin_trap();
  });
}
