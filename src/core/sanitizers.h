// The few hot leaf loops of the CPU kernels (a GEMM tile, a gradient tile) opt out of the
// sanitizers' checks: instrumented, their loads cannot vectorize, and they were three quarters
// of a training test's time under AddressSanitizer and UBSan. Their
// callers stay checked and compute every pointer and extent such a loop reads or writes. The
// sanitizer build compiles the files that hold them fully optimized (src/ops/CMakeLists.txt).
#pragma once

#define FP8RL_UNSANITIZED __attribute__((no_sanitize("address", "undefined")))
