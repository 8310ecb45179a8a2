// A whole .npy file, as read_npy checks it.
#include <cstring>

#include "formats/npy.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fp8rl::fuzz::run([&] {
    const fp8rl::Tensor t = fp8rl::parse_npy(fp8rl::fuzz::as_text(data, size), "fuzz.npy");
    // An accepted file's data is exactly the tensor's bytes, at the end of the file.
    if (t.nbytes() > size ||
        (t.nbytes() > 0 && std::memcmp(t.ptr<void>(), data + size - t.nbytes(), t.nbytes()) != 0))
      __builtin_trap();
  });
}
