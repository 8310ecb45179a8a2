// One query row of causal attention, exact or as the CUDA kernels compute it, over key/value
// rows found through `Rows`: the contiguous cache of attention() and the paged cache of
// paged_attention() share these loops, so a row's result depends only on the values at its
// logical positions, never on where they are stored.
//
// Rows: key(j, kvh) and value(j, kvh) give the D values of logical position j, kv head kvh.
//
// With Rounding::bf16 (attend_bf16) it follows the CUDA kernels (ops/cuda/attention_common.cuh,
// shared by the mma.sync and wgmma kernels): keys in tiles of BC positions (aligned to
// multiples of BC), an online softmax in the log2 domain with the scale folded into the
// exponent, P = exp2(fma(s, scale * log2 e, -running max * scale * log2 e)), P rounded to bf16
// before P.V while the normalizer sums the unrounded P, and the output o * (1 / l) rounded to
// bf16 (CUDA's exp2 is ex2.approx, within ~2 ulp of std::exp2).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

// The cache of attention(): [C, Hkv, D] contiguous.
struct ContiguousRows {
  const float* k;
  const float* v;
  int64_t hkv, d;
  const float* key(int64_t j, int64_t kvh) const { return k + (j * hkv + kvh) * d; }
  const float* value(int64_t j, int64_t kvh) const { return v + (j * hkv + kvh) * d; }
};

// One sequence in a paged cache [num_blocks, block_size, Hkv, D]: position j lives in physical
// slot table[j / block_size] * block_size + j % block_size.
struct PagedRows {
  const float* k;
  const float* v;
  const int32_t* table;
  int64_t block_size, hkv, d;
  int64_t slot(int64_t j) const {
    return int64_t(table[j / block_size]) * block_size + j % block_size;
  }
  const float* key(int64_t j, int64_t kvh) const { return k + (slot(j) * hkv + kvh) * d; }
  const float* value(int64_t j, int64_t kvh) const { return v + (slot(j) * hkv + kvh) * d; }
};

// One sequence in an FP8 paged cache: codes [num_blocks, block_size, Hkv, D] e4m3 and scales
// [num_blocks, block_size, Hkv] f32. A row is dequantized as it is read, code * scale in fp32
// (then rounded to bf16 where the CUDA kernels hold it in bf16), into the caller's buffer: the
// pointer key() returns is valid until the next key() call, value()'s until the next value().
struct Fp8PagedRows {
  const uint8_t* k;
  const uint8_t* v;
  const float* k_scale;
  const float* v_scale;
  const int32_t* table;
  int64_t block_size, hkv, d;
  bool bf16;
  float* k_row;  // [D] scratch
  float* v_row;  // [D] scratch
  int64_t slot(int64_t j) const {
    return int64_t(table[j / block_size]) * block_size + j % block_size;
  }
  const float* dequantize(const uint8_t* codes, const float* scales, int64_t j, int64_t kvh,
                          float* row) const {
    const int64_t at = slot(j) * hkv + kvh;
    const float s = scales[at];
    const uint8_t* c = codes + at * d;
    for (int64_t i = 0; i < d; ++i) {
      const float x = e4m3_to_f32(c[i]) * s;
      row[i] = bf16 ? round_to_bf16(x) : x;
    }
    return row;
  }
  const float* key(int64_t j, int64_t kvh) const { return dequantize(k, k_scale, j, kvh, k_row); }
  const float* value(int64_t j, int64_t kvh) const { return dequantize(v, v_scale, j, kvh, v_row); }
};

// Query qv against positions [lo, pos], exact fp32 softmax. s: scratch indexed by position
// (at least pos + 1 floats). lse (optional): the natural log-sum-exp of the scores, for the
// backward (ops/backward.h).
template <typename Rows>
void attend_exact(const float* qv, const Rows& rows, int64_t kvh, int64_t d, int64_t lo,
                  int64_t pos, const AttentionParams& p, float* s, float* o,
                  float* lse = nullptr) {
  float mx = -INFINITY;
  for (int64_t j = lo; j <= pos; ++j) {
    const float* kv = rows.key(j, kvh);
    float dot = 0.0f;
    for (int64_t i = 0; i < d; ++i) dot += qv[i] * kv[i];
    dot *= p.scale;
    if (p.softcap > 0) dot = p.softcap * std::tanh(dot / p.softcap);
    s[j] = dot;
    mx = std::max(mx, dot);
  }
  float sum = 0.0f;
  for (int64_t j = lo; j <= pos; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  if (lse != nullptr) *lse = mx + std::log(sum);
  for (int64_t i = 0; i < d; ++i) o[i] = 0.0f;
  for (int64_t j = lo; j <= pos; ++j) {
    const float w = s[j] / sum;
    const float* vv = rows.value(j, kvh);
    for (int64_t i = 0; i < d; ++i) o[i] += w * vv[i];
  }
}

// The same as the CUDA kernels compute it. s: scratch for the scores of one key tile (at
// least min(64, pos + 1) floats).
template <typename Rows>
void attend_bf16(const float* qv, const Rows& rows, int64_t kvh, int64_t d, int64_t lo, int64_t pos,
                 const AttentionParams& p, float* s, float* o) {
  constexpr float kLog2e = 1.4426950408889634f;
  const int64_t bc = d > 128 ? 32 : 64;  // the kernels' key tile: 64, 32 for D = 256
  const bool capped = p.softcap > 0.0f;
  const float mul = capped ? 1.0f : p.scale * kLog2e;  // scores stay unscaled until exp2
  float m = -INFINITY, l = 0.0f;
  for (int64_t i = 0; i < d; ++i) o[i] = 0.0f;
  for (int64_t tile = lo / bc * bc; tile <= pos; tile += bc) {
    const int64_t j0 = std::max(lo, tile), j1 = std::min(pos, tile + bc - 1);
    float mx = m;
    for (int64_t j = j0; j <= j1; ++j) {
      const float* kv = rows.key(j, kvh);
      float v = 0.0f;
      for (int64_t i = 0; i < d; ++i) v += qv[i] * kv[i];
      if (capped) v = p.softcap * std::tanh(v * p.scale / p.softcap) * kLog2e;
      s[j - j0] = v;
      mx = std::max(mx, v);
    }
    // Every tile holds at least one visible key, so mx is finite; alpha is 0 on the first.
    const float base = mx * mul;
    const float alpha = std::exp2(m * mul - base);
    m = mx;
    l *= alpha;
    for (int64_t i = 0; i < d; ++i) o[i] *= alpha;
    for (int64_t j = j0; j <= j1; ++j) {
      const float pj = std::exp2(std::fma(s[j - j0], mul, -base));
      l += pj;
      const float pr = round_to_bf16(pj);  // the mma's bf16 A operand
      const float* vv = rows.value(j, kvh);
      for (int64_t i = 0; i < d; ++i) o[i] += pr * vv[i];
    }
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int64_t i = 0; i < d; ++i) o[i] = round_to_bf16(o[i] * inv);
}

template <typename Rows>
void attend(Rounding r, const float* qv, const Rows& rows, int64_t kvh, int64_t d, int64_t lo,
            int64_t pos, const AttentionParams& p, float* s, float* o) {
  if (r == Rounding::bf16)
    attend_bf16(qv, rows, kvh, d, lo, pos, p, s, o);
  else
    attend_exact(qv, rows, kvh, d, lo, pos, p, s, o);
}

}  // namespace fp8rl::ops::cpu
