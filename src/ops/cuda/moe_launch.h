// The launchers of the mixture-of-experts kernels (moe.cu) on raw device pointers, called by
// moe.cpp after the checks of ops.cpp. CUDA runtime types only.
//
// The experts' rows are permuted on the device (a counting sort by expert), so every launch
// shape is a function of T, k, E and the widths alone: no host sync, nothing data-dependent
// on the host, and a decode step with MoE layers can be captured in a CUDA graph.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8rl::cuda {

// Rows of a grouped GEMM tile: an expert's permuted rows are cut into tiles of this many.
inline constexpr int kMoeTileRows = 64;
// The most experts a token may pick (top-k) on CUDA: the combine kernel sorts a token's
// experts in shared memory.
inline constexpr int kMoeMaxTopK = 64;

// ---- routing: one warp per token over its router logits.
struct MoeRouteArgs {
  const __nv_bfloat16* logits = nullptr;  // [t, e], the router's linear output
  int64_t t = 0, e = 0, k = 0;
  bool normalize = false, replay = false;
  float* weights = nullptr;    // [t, k]
  int32_t* experts = nullptr;  // [t, k]: written, or read under replay (first id -1: route)
  int32_t* chosen = nullptr;   // [t, k] or null
};
void launch_moe_route(const MoeRouteArgs& a, cudaStream_t s);

// ---- the permutation of the (token, slot) pairs by expert, stable in pair order.
struct MoePermutation {
  int32_t* offsets = nullptr;        // [e + 1] first permuted row of each expert; [e]: rows used
  int32_t* tile_first = nullptr;     // [e + 1] first row tile of each expert; [e]: tiles used
  int32_t* pair_of_row = nullptr;    // [t k] pair p = token * k + slot of each permuted row
  int32_t* row_of_pair = nullptr;    // [t k] permuted row of each pair, -1: id outside [0, e)
  int32_t* expert_of_row = nullptr;  // [t k]
};
void launch_moe_permute(const int32_t* experts, int64_t pairs, int64_t e, const MoePermutation& p,
                        cudaStream_t s);

// ---- an expert GEMM's input rows: gathered from x (k > 0: row r reads token pair_of_row[r] /
// k) or the permuted rows themselves (k = 0), copied in bf16 or quantized with the FP8
// recipe: per row (token), per 1x128 group (group; scales [rows, groups]) or over the rows of
// the row's expert (tensor; amax [e] made by launch_moe_amax, the scale written per row).
// Rows at or past offsets[e] are left alone.
enum class MoeInput : int { plain = 0, token = 1, group = 2, tensor = 3 };
struct MoeInputArgs {
  const __nv_bfloat16* src = nullptr;  // [*, cols]
  int64_t rows = 0, cols = 0, k = 0, e = 0;
  MoeInput mode = MoeInput::plain;
  __nv_bfloat16* out = nullptr;  // plain: [rows, cols] bf16
  uint8_t* codes = nullptr;      // FP8 modes: [rows, cols]
  float* scales = nullptr;       // [rows] (token, tensor) or [rows, ceil(cols / 128)] (group)
  float* expert_amax = nullptr;  // tensor: [e]
};
void launch_moe_input(const MoeInputArgs& a, const MoePermutation& p, cudaStream_t s);
// expert_amax[x] = max |row| over the input rows of expert x (expert_amax zeroed before).
void launch_moe_amax(const MoeInputArgs& a, const MoePermutation& p, cudaStream_t s);

// ---- the grouped GEMM: y_j[r, :] = in[r, :] W_j[x]^T for every permuted row r of expert x,
// one or two projections j side by side (gate and up read the same rows).
enum class MoeWeightScale : int { none = 0, tensor = 1, row = 2, block = 3 };
struct MoeGemmArgs {
  const void* x = nullptr;          // [rows, k] bf16 or e4m3 codes
  const float* x_scales = nullptr;  // FP8: [rows] or [rows, ceil(k / 128)] (x_group)
  bool x_group = false;
  bool fp8 = false;
  int64_t rows = 0, n = 0, k = 0, e = 0;
  int projections = 1;
  const void* w[2] = {nullptr, nullptr};          // [e, n, k] bf16 or e4m3
  const float* w_scales[2] = {nullptr, nullptr};  // per expert: [1], [n], [n/128, k/128] blocks
  MoeWeightScale scale = MoeWeightScale::none;
  __nv_bfloat16* y[2] = {nullptr, nullptr};  // [rows, n]
  // accumulate: y = bf16(fma(alpha, x W^T, y)), an adapter's up product added into its
  // projection's output as the CPU's linear_accumulate rounds it (else y = bf16(x W^T)).
  bool accumulate = false;
  float alpha = 1.0f;
};
void launch_moe_gemm(const MoeGemmArgs& a, const MoePermutation& p, cudaStream_t s);

// ---- out[t, :] = sum over the token's experts in increasing id of weight * y[its row], each
// product and each partial sum rounded to bf16 (the CPU reference's order).
void launch_moe_combine(const __nv_bfloat16* y, int64_t h, const float* weights,
                        const int32_t* experts, const int32_t* row_of_pair, int64_t t, int64_t k,
                        __nv_bfloat16* out, cudaStream_t s);

}  // namespace fp8rl::cuda
