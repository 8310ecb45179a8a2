// The op harness's case functions, by family (op_cases_*.cpp), and the names they share;
// op_cases.cpp registers them, perf_cases.cpp times ops at prefill sizes.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"
#include "ops/memory.h"

namespace fp8rl::gpu_test {

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// A negative control: the comparison of a deliberately wrong result must fail.
inline Check must_exceed(Check c) {
  c.what = "negative control: " + c.what + " exceeds the bound";
  c.ok = std::isfinite(c.err) && c.err > c.bound;
  return c;
}

// "op params" case names; "K=v K=v" parameter lists.
std::string fmtname(const char* op, const std::string& params);
std::string shape(std::initializer_list<std::pair<const char*, int64_t>> kv);
// Token ids from an integer hash of (seed, index).
std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed);
// Ragged token counts every family runs.
inline constexpr int64_t kTokens[] = {1, 19, 257, 989};

// Helpers of the fused-op cases (op_cases_rows.cpp): host values into an existing device
// tensor; x + delta rounded to bf16 as `add` stores it; a host copy; how many bytes differ
// between two device tensors of the same size.
void upload_into(Harness& h, const Tensor& host, const TensorView& dev);
Tensor bf16_sum(const Tensor& x, const Tensor& delta);
Tensor copy_of(const Tensor& t);
double bytes_differing(Harness& h, const TensorView& a, const TensorView& b);

// Where rms_norm_rope writes: in place, a KV-cache slice, or rows with a padded stride.
enum class RopeDest { in_place, cache, stride_pad8, stride_pad3 };
const char* rope_dest_name(RopeDest d);

// op_cases_rows.cpp: element-wise and row-wise ops, fused add + norm, fused norm + RoPE.
void embedding_case(Harness& h, Outcome& o, int64_t t, int64_t vocab, int64_t hd, float scale);
void rms_norm_case(Harness& h, Outcome& o, int64_t rows, int64_t d, bool plus_one, bool in_place);
void rope_case(Harness& h, Outcome& o, int64_t t, int64_t heads, int64_t d, int32_t base);
void gated_case(Harness& h, Outcome& o, int64_t t, int64_t i, bool silu, bool in_place);
void add_case(Harness& h, Outcome& o, int64_t t, int64_t d);
void add_f32_case(Harness& h, Outcome& o, int64_t t, int64_t d);
void add_rms_norm_case(Harness& h, Outcome& o, int64_t t, int64_t d, bool plus_one, bool alias);
void rms_norm_rope_case(Harness& h, Outcome& o, int64_t t, int64_t heads, int64_t d, bool norm,
                        bool plus_one, int32_t pos0, RopeDest dest);
void rope_store_kv_case(Harness& h, Outcome& o, int64_t t, int64_t hq, int64_t hkv, int64_t d,
                        bool norm, bool fp8_kv, bool in_place);
void softcap_case(Harness& h, Outcome& o, int64_t t, int64_t v, DType dt);
void fill_case(Harness& h, Outcome& o, int64_t n);
void copy_elements_case(Harness& h, Outcome& o, int64_t m);

// op_cases_attention.cpp: attention (both kernels) and CUDA-graph replays of a block.
void attention_case(Harness& h, Outcome& o, int64_t t, int64_t first, int64_t hq, int64_t hkv,
                    int64_t d, int64_t window, float softcap);
void graph_case(Harness& h, Outcome& o, Fp8Scheme scheme, ActScaling act);
// A sequence of a paged batch: tokens in the cache after the step, new queries among them.
struct PagedSeq {
  int64_t context, queries;
};
// The pools of a paged case (blocks of 16, the unused slots NaN) on both devices: kp, vp the
// CPU reference's f32 values (the cached tokens k_all / v_all [tokens, hkv, d] stored at
// `mapping` on the CPU; FP8: bf16(code * scale) of the CPU's codes kc, vc and scales ks, vs);
// kp_d, vp_d the device pools (empty: bf16, or codes with sc_d), still to be filled by the
// caller's store_kv on the GPU.
struct PagedPools {
  Tensor kp, vp, kc, vc, ks, vs;
  TensorView kp_d, vp_d;
  ops::KvScales sc_d;
};
PagedPools make_paged_pools(Harness& h, const Tensor& k_all, const Tensor& v_all,
                            const Tensor& mapping, int64_t blocks, int64_t hkv, int64_t d,
                            bool fp8_kv);
// fp8_kv: the pools hold e4m3 codes with a scale per slot and kv head.
void paged_attention_case(Harness& h, Outcome& o, const std::vector<PagedSeq>& seqs, int64_t hq,
                          int64_t hkv, int64_t d, int64_t window, float softcap,
                          bool fp8_kv = false);

// The tensor-core decode kernel's grid sized for one multiprocessor (blocks of up to 16 items,
// each item's first tile copied while the one before finishes; CudaDeviceOptions::
// persistent_decode_sms = 1) and a block per item (0), each on a second device of the same GPU:
// run(ctx, out) computes a paged attention into out (shaped like `want`) on ctx, and both
// results must be `want`'s bits (the harness's device, the grid sized for all of them, whose
// last paged_attention computed `want`), as an item's result does not depend on the block that
// computes it or on what that block did before. The grids each device ran are checked too
// (CudaDevice::last_decode_grid), so the equality is not of one grid with itself.
void persistent_decode_checks(Harness& h, Outcome& o,
                              const std::function<void(Context, const TensorView&)>& run,
                              const TensorView& want);

// op_cases_shared_prefix.cpp: decode steps whose sequences share prefix blocks in groups of
// `members`, through the shared-prefix path of the decode kernel.
void paged_shared_prefix_case(Harness& h, Outcome& o, int64_t members, int64_t prefix_blocks,
                              int64_t hq, int64_t hkv, int64_t d, int64_t window, float softcap,
                              bool fp8_kv);

// A random linear layer on both devices: quantized on the CPU with `scheme` (off: bf16
// values), its CPU weight and the device copy prepared for ops::linear (op_cases_fp8.cpp).
struct DeviceLinear {
  LinearWeight cpu, gpu;
  std::vector<DeviceBuffer> storage;
  Tensor w_codes, w_scales, w_values, bias;
};
std::unique_ptr<DeviceLinear> make_linear(Harness& h, int64_t n, int64_t k, Fp8Scheme scheme,
                                          ActScaling act, bool bias, uint64_t seed);
// Two projections without adapters reading one quantized input (gate and up) through the
// group op.
inline void linear_pair(Context& ctx, const ops::QuantizedActivation& x, const LinearWeight& w0,
                        const TensorView& out0, const LinearWeight& w1, const TensorView& out1) {
  const ops::Projection group[] = {{&w0, {}, out0, {}}, {&w1, {}, out1, {}}};
  ops::linear_group(ctx, ops::LinearInput{{}, x}, group);
}

// op_cases_fp8.cpp: activation quantization (standalone and fused), weight quantization, linears.
void fp8_quotient_case(Harness& h, Outcome& o);
void quantize_midpoints_case(Harness& h, Outcome& o, ActScaling act);
void quantize_case(Harness& h, Outcome& o, ActScaling act, int64_t m, int64_t k, float bound);
void rms_norm_quant_case(Harness& h, Outcome& o, ActScaling act, int64_t m, int64_t k,
                         bool plus_one);
void add_rms_norm_quant_case(Harness& h, Outcome& o, ActScaling act, int64_t m, int64_t k,
                             bool plus_one);
void gated_quant_case(Harness& h, Outcome& o, ActScaling act, int64_t m, int64_t k, bool silu);
void quantize_weight_case(Harness& h, Outcome& o, Fp8Scheme s, int64_t n, int64_t k);
void concurrent_linear_case(Harness& h, Outcome& o, int64_t m, bool bias);
// A group of 1-3 projections of widths ns reading one input, each with an adapter of rank r
// (A matrices side by side in memory when `adjacent`), LoRA dropout p.
void linear_group_case(Harness& h, Outcome& o, Fp8Scheme scheme, int64_t m, std::vector<int64_t> ns,
                       int64_t k, int64_t r, bool adjacent, float p);
void streaming_case(Harness& h, Outcome& o, Fp8Scheme scheme, ActScaling act, int64_t m, int64_t n,
                    int64_t k, bool pair, bool bias);
void linear_case(Harness& h, Outcome& o, int64_t m, int64_t n, int64_t k, Fp8Scheme scheme,
                 ActScaling act, bool bias, DType out_dtype, bool prequantized);

// op_cases_sampling.cpp: the sampler, CUDA vs the CPU reference, and its graph replay.
void sample_case(Harness& h, Outcome& o, int64_t rows, int64_t v, int k);
void sample_perf_case(Harness& h, Outcome& o, int64_t rows, int64_t v, int k, bool filtered);

// op_cases_backward.cpp: the backward ops (ops/backward.h) against the CPU reference. alias:
// the gradient is written over dy (dout); in_place: dropout over x.
void rms_norm_backward_case(Harness& h, Outcome& o, int64_t rows, int64_t d, bool plus_one,
                            bool alias);
void rms_norm_rope_backward_case(Harness& h, Outcome& o, int64_t t, int64_t heads, int64_t d,
                                 bool norm, bool plus_one, int32_t pos0, bool alias);
void gated_backward_case(Harness& h, Outcome& o, int64_t t, int64_t i, bool silu, bool alias);
void softcap_backward_case(Harness& h, Outcome& o, int64_t t, int64_t v, bool alias);
void lora_dropout_case(Harness& h, Outcome& o, int64_t m, int64_t k, float p, bool in_place);
void linear_backward_input_case(Harness& h, Outcome& o, int64_t m, int64_t n, int64_t k,
                                Fp8Scheme scheme, bool accumulate);
void linear_accumulate_case(Harness& h, Outcome& o, int64_t m, int64_t n, int64_t k);
void lora_backward_case(Harness& h, Outcome& o, int64_t m, int64_t k, int64_t n, int64_t r, float p,
                        bool with_dx);
// op_cases_moe.cpp: moe_route (replay: none, every row, or rows with -1 among them) and
// moe_experts (scheme off: bf16 experts) against the CPU, and a captured MoE layer.
enum class MoeReplay { none, all, partly };
void moe_route_case(Harness& h, Outcome& o, int64_t t, int64_t e, int64_t k, int64_t hd,
                    bool normalize, MoeReplay replay);
// rank > 0: adapters of that rank on every expert projection.
void moe_experts_case(Harness& h, Outcome& o, int64_t t, int64_t e, int64_t k, int64_t hd,
                      int64_t inter, Fp8Scheme scheme, bool silu, int64_t rank);
void moe_graph_case(Harness& h, Outcome& o, Fp8Scheme scheme);
void add_moe_cases(std::vector<OpCase>& c);

// Appends the backward cases to the registry (correctness_cases() calls it).
void add_backward_cases(std::vector<OpCase>& c);
// Appends the optimizer's cases (op_cases_optimizer.cpp).
void add_optimizer_cases(std::vector<OpCase>& c);

}  // namespace fp8rl::gpu_test
