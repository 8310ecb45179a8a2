// Causal grouped-query attention for prefill (and any number of new queries) against a KV
// cache, FlashAttention-2 style: each block owns 64 query rows of one head (4 warps x 16 rows),
// walks the visible key tiles with an online softmax, and never materializes the [T, C] scores.
//
// Per key tile: S = Q K^T on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate), scale,
// optional softcap, causal and sliding-window masks, running max / sum in fp32 per row, then
// O += P V with P rounded to bf16 as the A operand (FlashAttention-2 does the same). K and V
// tiles are double-buffered through cp.async so the next tile loads while this one computes
// (an FP8 paged cache is dequantized to bf16 by plain loads and stores into the same tiles).
//
// Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4 * g + tq; A regs hold (row g | g+8,
// cols 2tq..2tq+1 | +8); B regs (k 2tq..2tq+1 | +8, col g); C (row g | g+8, cols 2tq, 2tq+1).
// The C layout of two adjacent n-tiles of S is exactly the A layout of a 16-key k-step of P.
#include "ops/cuda/attention_common.cuh"

namespace fp8rl::cuda {

namespace {

template <int D, int BC>
struct AttnCfg {
  static constexpr int kLd = D + 8;  // smem row stride (bf16): rows 16 B apart mod 128 B
  static constexpr int kSmemBytes = (kAttnRows + 4 * BC) * kLd * 2;  // Q + 2 stages of K and V
};

template <int D, int BC>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(const AttentionArgs a) {
  using Cfg = AttnCfg<D, BC>;
  constexpr int kLd = Cfg::kLd;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr bool kQInRegs = D <= 128;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);  // [kAttnRows][kLd]
  bf16* ks = qs + kAttnRows * kLd;               // [2][BC][kLd]
  bf16* vs = ks + 2 * BC * kLd;                  // [2][BC][kLd]

  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, tq = lane % 4;
  const QueryBlock b = QueryBlock::make<BC>(a, blockIdx.y, warp, g);
  if (b.q0 >= b.t) return;

  load_query_rows<D>(a, b, qs, tid);
  cp_async_commit();
  auto load_kv = [&](int tile, int stage) {
    for (int c = tid; c < BC * kChunks; c += kAttnThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const int key = tile * BC + r;
      const bool ok = key <= b.kv_hi;  // keys past the block's last query: zeros, never read
      const int64_t head_row = b.kv_row(ok ? key : 0) * a.hkv + b.kvh;
      const int64_t off = head_row * D + col;
      if (a.k8 != nullptr) {  // FP8 pool: dequantized on the way in
        load_fp8_chunk(ks + (stage * BC + r) * kLd + col, a.k8 + off, a.k_scale + head_row, ok);
        load_fp8_chunk(vs + (stage * BC + r) * kLd + col, a.v8 + off, a.v_scale + head_row, ok);
      } else {
        cp_async16(ks + (stage * BC + r) * kLd + col, a.k + off, ok);
        cp_async16(vs + (stage * BC + r) * kLd + col, a.v + off, ok);
      }
    }
  };
  load_kv(b.tile0, 0);
  cp_async_commit();

  // This warp's 16 query rows: Q fragments once (D <= 128), reloaded per tile otherwise.
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qa[kQInRegs ? D / 16 : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) query_fragment<D>(qs, warp, lane, kk, qa[kk]);
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int tile = b.tile0; tile <= b.tile1; ++tile) {
    const int stage = (tile - b.tile0) & 1;
    if (tile < b.tile1) {
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
        query_fragment<D>(qs, warp, lane, kk, qf);
      }
#pragma unroll
      for (int j = 0; j < BC / 8; j += 2) {
        uint32_t kb[4];  // b-fragments of key tiles j and j + 1
        ldmatrix_x4(kb, kst + (j * 8 + (mi / 2) * 8 + mr) * kLd + kk * 16 + (mi % 2) * 8);
        mma_bf16(s[j], qf, kb[0], kb[1]);
        mma_bf16(s[j + 1], qf, kb[2], kb[3]);
      }
    }

    softmax_tile<BC, D>(s, o, m, l, a, b, tile * BC, tq);

    // O += P V.
    const bf16* vst = vs + stage * BC * kLd;
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t pa[4];
      p_fragment<BC>(s, kk, pa);
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
  store_output_rows<D>(o, l, m, a, b, warp, g, tq);
}

template <int D, int BC>
cudaError_t set_smem_limit() {
  return cudaFuncSetAttribute(attention_kernel<D, BC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              AttnCfg<D, BC>::kSmemBytes);
}

template <int D, int BC>
void launch(const AttentionArgs& a, cudaStream_t s) {
  const dim3 grid(unsigned(ceil_div(a.t, kAttnRows)), unsigned(a.hq), unsigned(a.num_seqs));
  attention_kernel<D, BC><<<grid, kAttnThreads, AttnCfg<D, BC>::kSmemBytes, s>>>(a);
}

}  // namespace

bool attention_supports(int64_t d) {
  return d == 32 || d == 64 || d == 128 || d == 256;
}

cudaError_t attention_init() {
  const cudaError_t e[] = {set_smem_limit<32, 64>(), set_smem_limit<64, 64>(),
                           set_smem_limit<128, 64>(), set_smem_limit<256, 32>(),
                           paged_decode_init()};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return x;
  return cudaSuccess;
}

void launch_attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.t == 0 || a.num_seqs == 0) return;
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
