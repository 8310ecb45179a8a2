// Launchers of the CUDA kernels, on raw device pointers. One .cu file per op family defines
// them; every launcher checks its launch (cudaGetLastError) and raises fp8rl::Error on failure.
// Host code in ops/cuda/*.cpp turns tensor views into these arguments after the checks of
// ops.cpp. Included by nvcc and by the host compiler: CUDA runtime types only, no fmt.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8rl::cuda {

// Slots per block of the paged KV cache (model/kv_cache.h's kKvBlockSize): a compile-time
// constant of the kernels, so a key's slot is a shift and a mask.
inline constexpr int kPagedBlockShift = 4;
inline constexpr int kPagedBlockSize = 1 << kPagedBlockShift;

using bf16 = __nv_bfloat16;

// Raises fp8rl::Error naming the kernel when the last launch failed (backend.cpp).
void check_launch(const char* kernel, const char* file, int line);
#define FP8RL_LAUNCH_CHECK(name) ::fp8rl::cuda::check_launch(name, __FILE__, __LINE__)

// Where a fused kernel writes its FP8 output. token: scales[row]; group: scales[g * padded_rows
// + row] (token-fastest, cuBLASLt VEC128) with rows in [rows, padded_rows) written as code 0
// and scale 1.
struct QuantOut {
  uint8_t* codes = nullptr;  // [padded_rows, cols]
  float* scales = nullptr;
  int64_t padded_rows = 0;
  bool group = false;  // false: one scale per row (token)
  // Optional [rows, cols] (row stride cols): the quantized values also written rounded to bf16,
  // for a LoRA adapter that reads the same input (fused norm and gated activation only).
  bf16* plain = nullptr;
};

// ---- embedding.cu
// out[t,:] = table[ids[t],:] * scale; ids outside [0, vocab) give NaN rows.
void launch_embedding(const int32_t* ids, int64_t t, const bf16* table, int64_t vocab, int64_t h,
                      float scale, bf16* out, cudaStream_t s);

// ---- norm.cu (w is f32 [d]). With a delta, x += delta first (in place, rounded to bf16
// as launch_add rounds it) and the updated x is normalized: the residual add fused with the
// next norm; out may then alias delta. Without delta, out may alias x.
// The delta: bf16 [rows, d].
struct NormDelta {
  const bf16* x = nullptr;
  bool present() const { return x != nullptr; }
};
// out = rms_norm(x); amax (if set, pre-zeroed) gets max |out| over the bf16 outputs.
void launch_rms_norm(bf16* x, const NormDelta& delta, const float* w, int64_t rows, int64_t d,
                     float eps, bool plus_one, bf16* out, float* amax, cudaStream_t s);
// quantize(rms_norm(x)) per token or per 1x128 group from the fp32 normalized values.
void launch_rms_norm_quant(bf16* x, const NormDelta& delta, const float* w, int64_t rows, int64_t d,
                           float eps, bool plus_one, const QuantOut& q, cudaStream_t s);

// ---- rope.cu: out[t, heads, d] = rope(rms_norm(x) per head) (no norm when w is null); x and
// out have token strides x_stride / out_stride (elements) and may be the same tensor.
void launch_rope(const bf16* x, int64_t x_stride, bf16* out, int64_t out_stride, int64_t t,
                 int64_t heads, int64_t d, const float* w, float eps, bool plus_one,
                 const int32_t* positions, const float* inv_freq, cudaStream_t s);

// ops::rope_store_kv in one kernel: q [t, hq, d] -> q_out, k [t, hkv, d] rotated and v [t, hkv,
// d] into pool slot slot_mapping[i] (slots outside [0, slots) skipped), as launch_rope then
// launch_store_kv / launch_store_kv_fp8 (k_scale null: bf16 pools) store them. d % 16 == 0, d <=
// 256, every pointer 16-byte aligned and every token stride a multiple of 8 elements.
struct RopeStoreArgs {
  const bf16 *q, *k, *v;
  int64_t q_stride, k_stride, v_stride;  // token strides, elements
  bf16* q_out;
  int64_t q_out_stride;
  int64_t t, hq, hkv, d;
  const float *q_norm, *k_norm;  // [d] or null
  float eps;
  bool plus_one;
  const int32_t* positions;  // [t]
  const float* inv_freq;     // [d / 2]
  const int32_t* slot_mapping;
  int64_t slots;
  void *k_pool, *v_pool;     // bf16 [slots, hkv, d], or e4m3 codes with the scales below
  float *k_scale, *v_scale;  // [slots, hkv], null for bf16 pools
};
bool rope_store_kv_supported(int64_t d);
void launch_rope_store_kv(const RopeStoreArgs& a, cudaStream_t s);

// ---- attention.cu
struct AttentionArgs {
  const bf16* q;  // [t, hq, d]
  const bf16* k;  // [c, hkv, d]
  const bf16* v;  // [c, hkv, d]
  bf16* out;      // [t, hq, d]
  int64_t t, hq, hkv, d, c, first;
  float scale, softcap;
  int64_t window;
  float* amax;  // if set: max |out| (of the bf16 values) is atomically max-reduced into it
  // If set (the prefill kernels attention.cu / attention_wgmma.cu only): [rows, hq] f32, the
  // natural log-sum-exp of each written query row's scores, from the kernel's own running max
  // and sum (the training forward saves it for the attention backward).
  float* lse = nullptr;
  // Paged (cu_q set): k and v are pools [slots, hkv, d]; the grid's z dimension runs over
  // num_seqs sequences, sequence z owning rows cu_q[z] .. cu_q[z+1] of q and out at positions
  // context_lens[z] - n + i, its key j in slot
  // block_tables[z * table_stride + j / block_size] * block_size + j % block_size; t is then
  // the most rows of a sequence (the grid's x dimension covers it) and c, first are unused.
  const int32_t* cu_q = nullptr;
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t table_stride = 0, num_seqs = 1;
  int block_size = 0;  // kPagedBlockSize (checked by the launcher)
  // An FP8 pool (paged only; k and v are then unused): e4m3 codes [slots, hkv, d] and f32
  // scales [slots, hkv], read as bf16(code * scale). Runs on the mma.sync and decode kernels.
  const uint8_t* k8 = nullptr;
  const uint8_t* v8 = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  // Shared prefixes of a decode step (ops::PagedBatch; launch_paged_decode only, set only for
  // layers without a window): group g's members prefix_members[prefix_cu_members[g] ..
  // prefix_cu_members[g+1]] share keys [0, prefix_lens[g]); prefix_len_of_seq[s] the shared
  // keys of sequence s (0: none). prefix_groups: the capacity of the group arrays.
  const int32_t* prefix_cu_members = nullptr;
  const int32_t* prefix_members = nullptr;
  const int32_t* prefix_lens = nullptr;
  const int32_t* prefix_len_of_seq = nullptr;
  int64_t prefix_groups = 0;
  // The tensor-core decode kernel's grid (paged_decode_mma.cu): > 0, about as many blocks as
  // this many multiprocessors hold at once, each looping over its work items with the next
  // item's first K/V tile in flight while it finishes one; 0, a block per item.
  int decode_sms = 0;
};
bool attention_supports(int64_t d);
// Raises the kernels' dynamic shared-memory limits; once per device, before the first launch.
cudaError_t attention_init();
// mma.sync kernel (attention.cu), any head dim attention_supports().
void launch_attention(const AttentionArgs& a, cudaStream_t s);
// attention_wgmma.cu: the Hopper kernel, for the head dims attention_wgmma_supports(). Its
// init sets its limits and reports whether the device runs it (an sm_90 GPU that loaded this
// build's sm_90a code).
cudaError_t attention_wgmma_init(bool* available);
bool attention_wgmma_supports(const AttentionArgs& a);
void launch_attention_wgmma(const AttentionArgs& a, cudaStream_t s);

// ---- paged_attention.cu: the paged KV cache.
// k_pool/v_pool[slot_mapping[i]] = k[i], v[i] ([t, row] bf16, token strides k_stride, v_stride
// elements; row = hkv * d values, a multiple of 8, 16-byte aligned); slots outside
// [0, slots) are skipped (negative: padding).
void launch_store_kv(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                     const int32_t* slot_mapping, int64_t t, int64_t row, bf16* k_pool,
                     bf16* v_pool, int64_t slots, cudaStream_t s);
// The same into an FP8 pool: each (token, head) row of d values quantized with the recipe
// (scale = amax / 448, codes = e4m3(x / scale)) into codes [slots, hkv, d] and scales
// [slots, hkv], bit-identical to quant/fp8.h.
void launch_store_kv_fp8(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                         const int32_t* slot_mapping, int64_t t, int64_t hkv, int64_t d,
                         uint8_t* k_codes, uint8_t* v_codes, float* k_scale, float* v_scale,
                         int64_t slots, cudaStream_t s);
// Rows cu_q_end[0] .. t of out [t, row] (the padding after the last sequence) set to zero.
void launch_zero_padding_rows(bf16* out, int64_t t, int64_t row, const int32_t* cu_q_end,
                              cudaStream_t s);
// The split-K decode kernel: every sequence has at most one new query (paged AttentionArgs
// with t <= 1). Each sequence's visible keys are cut into at most kPagedDecodeMaxSplits
// chunks by a rule of their count alone, so a row's result never depends on the batch.
// part_o [t_rows, hq, max_splits, d] and part_ml [t_rows, hq, max_splits, 2] f32 scratch,
// max_splits = paged_decode_max_splits(max_context_len).
constexpr int kPagedDecodeMaxSplits = 16;
// What the tensor-core decode kernel ran as: its items (chunk, KV head, sequence) and the
// blocks that took them (fewer with AttentionArgs::decode_sms); {0, 0} when it did not run.
struct DecodeGrid {
  int64_t items = 0, blocks = 0;
};
constexpr int kPagedDecodeMaxGroup = 16;  // query heads per kv head the kernel takes
int paged_decode_max_splits(int64_t max_context_len);
bool paged_decode_supports(int64_t d, int64_t group);
cudaError_t paged_decode_init();
// decode_mma: head dims up to 128 (bf16 or FP8 pools) on the tensor-core kernel (P split into
// bf16 hi + lo, the CUDA-core kernel's bound); else, and for D = 256, on the CUDA cores.
DecodeGrid launch_paged_decode(const AttentionArgs& a, int max_splits, bool decode_mma,
                               float* part_o, float* part_ml, cudaStream_t s);
// With shared prefixes (a.prefix_len_of_seq set) a sequence in a group has its prefix cut into
// at most kPagedDecodeMaxSplits / 2 chunks by the prefix length alone (computed once for the
// whole group by the prefix kernel, each K/V tile read once for all members' query heads) and
// its remaining keys into at most as many again; the combine merges prefix chunks first. The
// partials then hold paged_decode_slots(max_context_len) chunks per row. tensor_cores: the
// prefix kernel on mma.sync with P rounded to bf16 (the prefill kernels' error); else on the
// CUDA cores with P in fp32 like the decode kernel.
int paged_decode_slots(int64_t max_context_len);
DecodeGrid launch_paged_decode_shared(const AttentionArgs& a, int max_splits, int slots,
                                      bool tensor_cores, bool decode_mma, float* part_o,
                                      float* part_ml, cudaStream_t s);

// ---- activation.cu: act 0 = SiLU, 1 = GELU-tanh. gate/up/out [rows, cols].
void launch_gated(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int act, bf16* out,
                  float* amax, cudaStream_t s);
// Raises the staged quantizing kernel's shared-memory limit; once per device.
cudaError_t gated_init();
void launch_gated_quant(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int act,
                        const QuantOut& q, cudaStream_t s);

// ---- elementwise.cu
void launch_add(const bf16* a, const bf16* b, float alpha, bf16* out, int64_t n, cudaStream_t s);
void launch_softcap_bf16(bf16* x, int64_t n, float cap, cudaStream_t s);
void launch_softcap_f32(float* x, int64_t n, float cap, cudaStream_t s);
// ---- linear.cu: the weight-streaming FP8 GEMM of at most kStreamingMaxRows rows (e4m3 codes
// both sides, mma.sync, sm_89+). y[m, n] = bf16(sum_k x[m, k] w[n, k] * x_scale * w_scale + bias[n]
// (+ lora_scale * sum_j lora_xa[m, j] lora_b[n, j])). K % 16 == 0, every segment's n % 16 == 0,
// pointers 16-byte aligned. A launch covers up to four weights that read the same input
// (q/k/v, gate/up), segment s owning output tiles [first_tile, first_tile + n / 16).
struct StreamingSegment {
  const uint8_t* w = nullptr;      // [n, k] e4m3 codes
  const float* w_scale = nullptr;  // [n] when w_scale_per_row, else [1]
  bool w_scale_per_row = true;
  const float* bias = nullptr;  // [n] or null
  bf16* y = nullptr;            // [m, ldy]
  int64_t ldy = 0, n = 0;
  int first_tile = 0;
  const bf16* lora_xa = nullptr;  // [m, lora_ld] or null: no LoRA sum
  const bf16* lora_b = nullptr;   // [n, lora_rank]
  int64_t lora_ld = 0;
  int lora_rank = 0;
  float lora_scale = 0.0f;
};
// Past 16 rows the tokens' codes, which every block reads through L2 beside its weight rows,
// cost more than cuBLASLt's tiles lose (measured on an H200: at 32 rows the two are even).
inline constexpr int kStreamingMaxRows = 16;
inline constexpr int kStreamingMaxSegments = 4;
// The group's LoRA down products in the same launch: xa [m, rows] = bf16(x a^T), fp32 sums,
// over the A matrices of the group stacked by rows (at most kStreamingDownMaxRows). The grid's
// first blocks compute it as (16 rows of A) x (a K slice) tiles; the last slice of a row tile
// to finish sums the slices' fp32 partials in slice order (deterministic) and writes xa; the
// segments' epilogues, which read xa through lora_xa, wait until every row tile is written.
inline constexpr int kStreamingDownMaxRows = 256;
inline constexpr int kStreamingSyncWords = 32;  // kStreamingDownMaxRows / 16 counters + 2
struct StreamingDown {
  const bf16* x = nullptr;  // [m, k] the unquantized input; null: no down products here
  const bf16* a = nullptr;  // [rows, k]
  int rows = 0;
  bf16* xa = nullptr;        // [m, rows]
  float* partial = nullptr;  // [ceil(k / kStreamingDownSlice), m, rows] fp32 scratch
  // kStreamingSyncWords words, zero before the launch and zero again after it (the kernel's
  // last block resets them), so one buffer serves every launch of a stream.
  unsigned* sync = nullptr;
};
inline constexpr int64_t kStreamingDownSlice = 1024;  // K of a down-product block
struct StreamingArgs {
  const uint8_t* x = nullptr;      // [m, k] e4m3 codes
  const float* x_scale = nullptr;  // [m] when x_scale_per_row, else [1]
  bool x_scale_per_row = true;
  int m = 0;
  int64_t k = 0;
  StreamingSegment seg[kStreamingMaxSegments];
  int num_segments = 0;
  StreamingDown down;
  int multiprocessors = 132;  // the device's, for the launch shape
};
void launch_linear_streaming(const StreamingArgs& a, cudaStream_t s);
// LoRA's up projections of a group: y[m, n] = bf16(y[m, n] + scale * sum_j xa[m, j] b[n, j])
// (fp32 sum, one rounding) for each segment, at most 4 segments of one rank
// (lora_expand_supported: 8, 16, 32 or 64, B rows 16-byte aligned, n and the leading
// dimensions even), on the tensor cores.
struct LoraExpandSegment {
  const bf16* xa = nullptr;  // [m, ld], the first rank columns read
  int64_t ld = 0;
  const bf16* b = nullptr;  // [n, rank]
  int rank = 0;
  float scale = 0.0f;
  bf16* y = nullptr;  // [m, ldy]
  int64_t ldy = 0, n = 0;
  // The base product y0 the up product is added to, [m, ld_base] (a column slice of a stacked
  // GEMM's output, which the kernel so also copies into y); null: y itself.
  const bf16* base = nullptr;
  int64_t ld_base = 0;
  int first_tile = 0;  // set by launch_lora_expand: the segment's first column tile
};
struct LoraExpandArgs {
  int m = 0;
  LoraExpandSegment seg[kStreamingMaxSegments];
  int num_segments = 0;
};
bool lora_expand_supported(int rank);
void launch_lora_expand(const LoraExpandArgs& a, cudaStream_t s);

// out[r, j] += bias[j] in fp32 (out f32).
void launch_add_bias(float* out, const float* bias, int64_t rows, int64_t n, cudaStream_t s);
// out[r, j] = bf16(y[r, j] + bias[j]): a GEMM's fp32 result with its bias, rounded once.
void launch_bias_round(const float* y, const float* bias, int64_t rows, int64_t n, bf16* out,
                       cudaStream_t s);
// out[r, j] = bf16(y0[r, j] + y1[r, j] (+ bias[j])): the two K halves of a split GEMM summed in
// fp32 and rounded once; bias may be null.
void launch_sum_round(const float* y0, const float* y1, const float* bias, int64_t rows, int64_t n,
                      bf16* out, cudaStream_t s);
// dst[moves[2i]] = src[moves[2i + 1]] for i < m; moves outside [0, n_dst) x [0, n_src) skipped.
void launch_copy_elements(const int32_t* src, int64_t n_src, const int32_t* moves, int64_t m,
                          int32_t* dst, int64_t n_dst, cudaStream_t s);
void launch_fill_f32(float* x, int64_t n, float v, cudaStream_t s);
void launch_fill_bf16(bf16* x, int64_t n, float v, cudaStream_t s);
// Uniform in [-bound, bound] from uniform_hash(seed, i) (the CPU computes the same floats).
void launch_fill_uniform_f32(float* x, int64_t n, uint64_t seed, float bound, cudaStream_t s);
void launch_fill_uniform_bf16(bf16* x, int64_t n, uint64_t seed, float bound, cudaStream_t s);
// out[i] = in[0] for i < n (a device scalar broadcast to a vector).
void launch_broadcast(const float* in, float* out, int64_t n, cudaStream_t s);

// ---- quantize.cu (x is bf16, or f32 when x_f32)
// Per token / per 1x128 group: rows [0, padded_rows) of q (pad rows: code 0, scale 1). With
// rows_end (device), rows from *rows_end on are taken as zeros without reading x (code 0,
// scale 1): a captured batch's padding rows, which x need not hold; with zero_padding (a bf16
// [rows, cols] buffer, x itself included) those rows of it are also written with zeros.
void launch_quantize_rows(const void* x, bool x_f32, int64_t rows, int64_t cols, const QuantOut& q,
                          cudaStream_t s, const int32_t* rows_end = nullptr,
                          bf16* zero_padding = nullptr);
// *amax = max(*amax, max |x|) (pre-zero *amax).
void launch_amax(const void* x, bool x_f32, int64_t n, float* amax, cudaStream_t s);
// Per tensor: scale = amax ? fp8_scale(*amax) : static_scale; codes = e4m3(x / scale);
// *scale_out = scale.
void launch_quantize_tensor(const void* x, bool x_f32, int64_t n, const float* amax,
                            float static_scale, uint8_t* codes, float* scale_out, cudaStream_t s);
// x_hat[rows, cols] bf16 from codes/scales in the layouts above (mode 0 tensor, 1 token,
// 2 group).
void launch_dequantize_act(const uint8_t* codes, const float* scales, int mode, int64_t rows,
                           int64_t cols, int64_t padded_rows, bf16* out, cudaStream_t s);
// Weights [n, k] bf16 -> codes + canonical scales (scheme 1 tensor, 2 row, 3 block). Per
// tensor needs amax_tmp (one float) zeroed beforehand.
void launch_quantize_weight(const bf16* w, int64_t n, int64_t k, int scheme, uint8_t* q,
                            float* scales, float* amax_tmp, cudaStream_t s);
// w_hat[n, k] bf16 = codes * canonical scales.
void launch_dequantize_weight(const uint8_t* q, const float* scales, int scheme, int64_t n,
                              int64_t k, bf16* out, cudaStream_t s);
// Self-check of the quantizers' division (common.cuh fp8_quotient) against IEEE division: adds
// to *mismatches the number of differing quotients over divisor significands
// b_first + i * b_step (i < b_count, in units of 2^-23) x all dividend significands, and
// writes one differing pair's bits to bad[0..1]. 2^23 divisors x 2^23 dividends is the proof.
void launch_fp8_quotient_check(uint32_t b_first, uint32_t b_count, uint32_t b_step,
                               unsigned long long* mismatches, uint32_t* bad, cudaStream_t s);
// Block scales [nb, kb] row-major -> [nb, ld] (ld >= kb; pad columns 1).
void launch_repack_block_scales(const float* in, int64_t nb, int64_t kb, int64_t ld, float* out,
                                cudaStream_t s);

// ---- backward.cu: the backward ops' element-wise and row-wise kernels (ops/backward.h);
// activations bf16, gradients f32, every sum in a fixed order (no float atomics).
// inv_rms[r] = 1 / sqrt(mean(x[r]^2) + eps) of x [rows, d].
void launch_inv_rms(const bf16* x, int64_t rows, int64_t d, float eps, float* inv_rms,
                    cudaStream_t s);
// RMSNorm's gradient: dx [rows, d] (may be dy); with dw set, dw [d] += sum_rows dy * x_hat
// through partial [norm_dw_chunks(rows), d] f32 scratch.
int64_t norm_dw_chunks(int64_t rows);
void launch_rms_norm_backward(const bf16* x, const float* w, const float* inv_rms, bool plus_one,
                              const float* dy, float* dx, float* dw, float* partial, int64_t rows,
                              int64_t d, cudaStream_t s);
// RoPE's inverse rotation of dy [t, heads, d] f32, in place.
void launch_rope_backward(float* dy, int64_t t, int64_t heads, int64_t d, const int32_t* positions,
                          const float* inv_freq, cudaStream_t s);
// act 0 = SiLU, 1 = GELU-tanh; all n elements; dgate / dup may be dout.
void launch_gated_backward(const bf16* gate, const bf16* up, const float* dout, int64_t n, int act,
                           float* dgate, float* dup, cudaStream_t s);
void launch_softcap_backward(const float* y, float cap, const float* dy, float* dx, int64_t n,
                             cudaStream_t s);
// LoRA's dropout multiplier of flat element i: keep = 1 / (1 - p) where
// uniform_hash(seed, i, 1) >= threshold = 2p - 1, else 0; 1 everywhere when off (p = 0).
struct DropoutMask {
  bool on = false;
  float threshold = 0.0f, keep = 1.0f;
  uint64_t seed = 0;
};
// out = x * mask, as bf16 (may be x) or exactly as f32.
void launch_lora_dropout(const bf16* x, const DropoutMask& m, int64_t n, bf16* out, cudaStream_t s);
void launch_lora_dropout_f32(const bf16* x, const DropoutMask& m, int64_t n, float* out,
                             cudaStream_t s);
// dx += mask * t.
void launch_dropout_accumulate(const float* t, const DropoutMask& m, int64_t n, float* dx,
                               cudaStream_t s);
void launch_f32_to_bf16(const float* in, int64_t n, bf16* out, cudaStream_t s);

// The lm_head cross-entropy on one chunk of f32 logits [rows, v] (the raw x W^T; targets,
// loss, logprob, lse, entropy, dloss offset to the chunk's first row). _rows writes lse,
// logprob, loss and entropy (nullable) of z = softcap(l) / temperature, leaving the logits as
// they are; _grad turns them into the gradient with respect to the raw logits.
// kCrossEntropyIgnore rows: zero; targets outside [0, v): NaN.
inline constexpr int32_t kCrossEntropyIgnore = -100;  // ops::kIgnoreIndex
void launch_cross_entropy_rows(float* logits, const int32_t* targets, int64_t rows, int64_t v,
                               float temperature, float softcap, float* loss, float* logprob,
                               float* lse, float* entropy, cudaStream_t s);
void launch_cross_entropy_grad(float* logits, const int32_t* targets, int64_t rows, int64_t v,
                               float temperature, float softcap, const float* lse,
                               const float* dloss, cudaStream_t s);

}  // namespace fp8rl::cuda
