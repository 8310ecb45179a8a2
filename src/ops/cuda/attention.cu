// Causal grouped-query attention for prefill (and any number of new queries) against a KV
// cache, FlashAttention-2 style: each block owns 64 query rows of one head (4 warps x 16 rows),
// walks the visible key tiles with an online softmax, and never materializes the [T, C] scores.
//
// Per key tile: S = Q K^T on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate), scale,
// optional softcap, causal and sliding-window masks, running max / sum in fp32 per row, then
// O += P V with P rounded to bf16 as the A operand (FlashAttention-2 does the same). K and V
// tiles are double-buffered through cp.async so the next tile loads while this one computes.
//
// Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4 * g + tq; A regs hold (row g | g+8,
// cols 2tq..2tq+1 | +8); B regs (k 2tq..2tq+1 | +8, col g); C (row g | g+8, cols 2tq, 2tq+1).
// The C layout of two adjacent n-tiles of S is exactly the A layout of a 16-key k-step of P.
#include "ops/cuda/common.cuh"

namespace fp8rl::cuda {

namespace {

constexpr int kBr = 64;  // query rows per block
constexpr int kAttnThreads = 128;

template <int D, int BC>
struct AttnCfg {
  static constexpr int kLd = D + 8;  // smem row stride (bf16): rows 16 B apart mod 128 B
  static constexpr int kSmemBytes = (kBr + 4 * BC) * kLd * 2;  // Q + 2 stages of K and V
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: zero-fill, the source is not read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <int D, int BC>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(const AttentionArgs a) {
  using Cfg = AttnCfg<D, BC>;
  constexpr int kLd = Cfg::kLd;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr bool kQInRegs = D <= 128;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);  // [kBr][kLd]
  bf16* ks = qs + kBr * kLd;                     // [2][BC][kLd]
  bf16* vs = ks + 2 * BC * kLd;                  // [2][BC][kLd]

  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, tq = lane % 4;
  const int t = int(a.t), first = int(a.first), window = int(a.window);
  // Later query blocks see more keys: start them first so the tail of the grid is short.
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * kBr;
  const int64_t h = blockIdx.y;
  const int64_t kvh = h / (a.hq / a.hkv);
  const int kv_hi = first + min(q0 + kBr, t) - 1;  // last key any row of the block sees
  const int kv_lo = window > 0 ? max(0, first + q0 - window + 1) : 0;
  const int tile0 = kv_lo / BC, tile1 = kv_hi / BC;

  for (int c = tid; c < kBr * kChunks; c += kAttnThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int tok = q0 + r;
    cp_async16(qs + r * kLd + col, a.q + (int64_t(tok < t ? tok : 0) * a.hq + h) * D + col, tok < t);
  }
  cp_async_commit();
  auto load_kv = [&](int tile, int stage) {
    for (int c = tid; c < BC * kChunks; c += kAttnThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const int key = tile * BC + r;
      const bool ok = key <= kv_hi;  // keys past the block's last query: zeros, never read
      const int64_t off = (int64_t(ok ? key : 0) * a.hkv + kvh) * D + col;
      cp_async16(ks + (stage * BC + r) * kLd + col, a.k + off, ok);
      cp_async16(vs + (stage * BC + r) * kLd + col, a.v + off, ok);
    }
  };
  load_kv(tile0, 0);
  cp_async_commit();

  // This warp's 16 query rows: Q fragments once (D <= 128), reloaded per tile otherwise.
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qa[kQInRegs ? D / 16 : 1][4];
  const bf16* q_frag_base = qs + (warp * 16 + (lane % 16)) * kLd + (lane / 16) * 8;
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qa[kk], q_frag_base + kk * 16);
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row0 = q0 + warp * 16 + g;  // this thread's rows: row0 and row0 + 8
  const int slot[2] = {first + row0, first + row0 + 8};
  const int warp_slot_min = first + q0 + warp * 16, warp_slot_max = warp_slot_min + 15;
  const float score_mul = a.softcap > 0.0f ? a.scale : a.scale * kLog2e;

  for (int tile = tile0; tile <= tile1; ++tile) {
    const int stage = (tile - tile0) & 1;
    if (tile < tile1) {
      load_kv(tile + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows and the tile's BC keys.
    float s[BC / 8][4];
#pragma unroll
    for (int j = 0; j < BC / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    const bf16* kst = ks + stage * BC * kLd;
    const int mi = lane / 8, mr = lane % 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qf[4];
      if constexpr (kQInRegs) {
        qf[0] = qa[kk][0], qf[1] = qa[kk][1], qf[2] = qa[kk][2], qf[3] = qa[kk][3];
      } else {
        ldmatrix_x4(qf, q_frag_base + kk * 16);
      }
#pragma unroll
      for (int j = 0; j < BC / 8; j += 2) {
        uint32_t kb[4];  // b-fragments of key tiles j and j + 1
        ldmatrix_x4(kb, kst + (j * 8 + (mi / 2) * 8 + mr) * kLd + kk * 16 + (mi % 2) * 8);
        mma_bf16(s[j], qf, kb[0], kb[1]);
        mma_bf16(s[j + 1], qf, kb[2], kb[3]);
      }
    }

    // Scores in the log2 domain; masks only where the tile crosses the diagonal or window.
    const int kbase = tile * BC;
    const bool need_mask =
        kbase + BC - 1 > warp_slot_min || (window > 0 && kbase <= warp_slot_max - window);
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < BC / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[j][e] * score_mul;
        if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap) * kLog2e;
        if (need_mask) {
          const int key = kbase + j * 8 + tq * 2 + (e & 1);
          const int sl = slot[e / 2];
          if (key > sl || (window > 0 && key <= sl - window)) v = -INFINITY;
        }
        s[j][e] = v;
        mx[e / 2] = fmaxf(mx[e / 2], v);
      }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      base[r] = mx[r] == -INFINITY ? 0.0f : mx[r];  // a row with nothing visible yet
      const float alpha = exp2f(m[r] - base[r]);
      m[r] = mx[r];
      l[r] *= alpha;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        o[dn][2 * r] *= alpha;
        o[dn][2 * r + 1] *= alpha;
      }
    }
#pragma unroll
    for (int j = 0; j < BC / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - base[e / 2]);
        l[e / 2] += s[j][e];
      }

    // O += P V.
    const bf16* vst = vs + stage * BC * kLd;
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t vb[4];  // b-fragments of d tiles dn and dn + 1
        ldmatrix_x4_trans(vb, vst + (kk * 16 + (mi % 2) * 8 + mr) * kLd + (dn + mi / 2) * 8);
        mma_bf16(o[dn], pa, vb[0], vb[1]);
        mma_bf16(o[dn + 1], pa, vb[2], vb[3]);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int row = row0 + 8 * r;
    if (row >= t) continue;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    bf16* dst = a.out + (int64_t(row) * a.hq + h) * D + tq * 2;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(dst + dn * 8) =
          pack_bf16(o[dn][2 * r] * inv, o[dn][2 * r + 1] * inv);
  }
}

template <int D, int BC>
cudaError_t set_smem_limit() {
  return cudaFuncSetAttribute(attention_kernel<D, BC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              AttnCfg<D, BC>::kSmemBytes);
}

template <int D, int BC>
void launch(const AttentionArgs& a, cudaStream_t s) {
  const dim3 grid(unsigned(ceil_div(a.t, kBr)), unsigned(a.hq));
  attention_kernel<D, BC><<<grid, kAttnThreads, AttnCfg<D, BC>::kSmemBytes, s>>>(a);
}

}  // namespace

bool attention_supports(int64_t d) { return d == 32 || d == 64 || d == 128 || d == 256; }

cudaError_t attention_init() {
  const cudaError_t e[] = {set_smem_limit<32, 64>(), set_smem_limit<64, 64>(),
                           set_smem_limit<128, 64>(), set_smem_limit<256, 32>()};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return x;
  return cudaSuccess;
}

void launch_attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.t == 0) return;
  switch (a.d) {
    case 32:
      launch<32, 64>(a, s);
      break;
    case 64:
      launch<64, 64>(a, s);
      break;
    case 128:
      launch<128, 64>(a, s);
      break;
    case 256:
      launch<256, 32>(a, s);
      break;
    default:
      return;  // attention_supports() is checked by the caller
  }
  FP8RL_LAUNCH_CHECK("attention");
}

}  // namespace fp8rl::cuda
