// Causal grouped-query attention on Hopper's warpgroup MMA (wgmma, sm_90a), head dim 128: the
// same algorithm, 64-row query blocks and online softmax as attention.cu
// (attention_common.cuh), with the two matrix products issued by a 4-warp group as
// asynchronous wgmma:
//   S[64 x BC] = Q K^T   A = Q from registers (loaded once), B = K tile, K-major in smem
//   O[64 x 128] += P V   A = P from registers (bf16), B = V tile, MN-major in smem
// Each operand is read from shared memory once per warpgroup rather than once per warp.
//
// Two warpgroups per block take the same 64 rows of two query heads that share a KV head
// (grouped-query attention), so they need exactly the same K/V tiles: each tile is loaded
// once for both, halving the L2 -> SM traffic that bounds a one-head block (every block
// streams all of its visible keys; K/V of a layer fit in L2).
//
// Software pipeline (the FlashAttention-3 idea within one warpgroup): while the tensor cores
// compute P_j V_j, the warps exponentiate the next tile's scores S_{j+1}, which were issued
// just before; the output is rescaled once P_j V_j has landed. K/V tiles sit in three
// cp.async stages, 128-byte swizzled (wgmma.cuh), so tile j + 2 loads during tile j; the
// last stages first hold Q on its way to registers.
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/wgmma.cuh"

namespace fp8rl::cuda {

namespace {

constexpr int kWgD = 128;  // head dim of this kernel
constexpr int kWgBc = 64;  // keys per tile
constexpr int kWgStages = 3;

template <int WG>  // warpgroups (query heads) per block
struct WgCfg {
  static constexpr int kThreads = WG * kAttnThreads;
  static constexpr uint32_t kPanel = kWgBc * 128u;  // 64 columns x BC rows, 128-byte swizzled
  static constexpr uint32_t kTile = 2 * kPanel;     // a K or V tile: 128 columns
  static constexpr uint32_t kStage = 2 * kTile;     // K and V
  static_assert(kAttnRows * (kWgD + 8) * 2 <= kStage, "a head's Q is staged in one K/V stage");
  static_assert(WG < kWgStages, "Q stages must leave stage 0 for the first tile");
  // The stages and slack to align them to 1024 bytes.
  static constexpr int kSmemBytes = int(kWgStages * kStage + 1024);
};

template <int WG>
__global__ void __launch_bounds__(WG* kAttnThreads, 2 / WG)
    attention_wgmma_kernel(const AttentionArgs a) {
#ifdef FP8RL_WGMMA
  using Cfg = WgCfg<WG>;
  constexpr int D = kWgD, BC = kWgBc;
  constexpr uint32_t kPanel = Cfg::kPanel, kTile = Cfg::kTile, kStage = Cfg::kStage;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Swizzle atoms must sit at 1024-byte aligned shared addresses.
  unsigned char* base = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const uint32_t base_s = smem_u32(base);

  const int tid = threadIdx.x, wg = tid / kAttnThreads, wtid = tid % kAttnThreads;
  const int warp = wtid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, tq = lane % 4;
  const QueryBlock b = QueryBlock::make<BC>(a, int64_t(blockIdx.y) * WG + wg, warp, g);
  if (b.q0 >= b.t) return;
  const int ntiles = b.tile1 - b.tile0 + 1;  // the same for every warpgroup of the block

  // Tile i of the block (key tile tile0 + i) lives in stage i % 3: K at its start, V after.
  // Row r (key) of a tile, 16-byte chunk ch of its 16: panel ch / 8, swizzled chunk ch % 8.
  // Always one commit group per call, empty past the last tile, so waits count uniformly.
  auto load_kv = [&](int i) {
    if (i < ntiles) {
      unsigned char* kst = base + (i % kWgStages) * kStage;
      // Every chunk's cache row first (paged: a block-table load each), then the copies: the
      // table loads overlap instead of each waiting in front of its cp.async.
      constexpr int kPer = BC * 16 / Cfg::kThreads;
      static_assert(BC * 16 % Cfg::kThreads == 0);
      int64_t off[kPer];
      bool ok[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int c = tid + j * Cfg::kThreads, r = c / 16, ch = c % 16;
        const int key = (b.tile0 + i) * BC + r;
        ok[j] = key <= b.kv_hi;  // keys past the block's last query: zeros, never read
        off[j] = (b.kv_row(ok[j] ? key : 0) * a.hkv + b.kvh) * D + ch * 8;
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int c = tid + j * Cfg::kThreads, r = c / 16, ch = c % 16;
        const uint32_t dst = uint32_t(ch / 8) * kPanel + sw128_offset(r, ch % 8);
        cp_async16(kst + dst, a.k + off[j], ok[j]);
        cp_async16(kst + kTile + dst, a.v + off[j], ok[j]);
      }
    }
    cp_async_commit();
  };
  auto k_desc = [&](int i, int kk) {  // k-step kk: 16 head-dim columns, 4 per panel
    return sw128_desc(base_s + (i % kWgStages) * kStage + (kk / 4) * kPanel + (kk % 4) * 32, 16,
                      1024);
  };
  auto v_desc = [&](int i, int kk) {  // k-step kk: 16 keys, two 8-row groups
    return sw128_desc(base_s + (i % kWgStages) * kStage + kTile + kk * 2048, kPanel, 1024);
  };

  // Each warpgroup's Q through one of the last stages into registers, tile 0 meanwhile; then
  // tiles 1 and 2 into the freed stages.
  bf16* qs = reinterpret_cast<bf16*>(base + (kWgStages - WG + wg) * kStage);  // [64][D + 8]
  load_query_rows<D>(a, b, qs, wtid);
  cp_async_commit();
  load_kv(0);
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) query_fragment<D>(qs, warp, lane, kk, qa[kk]);
  __syncthreads();
  load_kv(1);
  load_kv(2);

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
  float s[BC / 8][4];
#pragma unroll
  for (int j = 0; j < BC / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
  uint32_t pa[BC / 16][4];

  // S_0 and P_0.
  cp_async_wait<2>();
  fence_proxy_async();  // this thread's cp.async writes, visible to wgmma's reads
  __syncthreads();
  fence_registers(s);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wgmma_m64n64k16_rs(s, qa[kk], k_desc(0, kk), kk > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(s);
  softmax_scores<BC>(s, m, l, alpha, a, b, b.tile0 * BC, tq);
#pragma unroll
  for (int kk = 0; kk < BC / 16; ++kk) p_fragment<BC>(s, kk, pa[kk]);

  // Every tile but the last: issue S_{i+1} and P_i V_i; softmax S_{i+1} while P_i V_i runs.
  // (The last tile is peeled off so that the wgmma issue/wait pattern of this loop has no
  // branches: ptxas serializes wgmma when it cannot see that accumulators are idle.)
  for (int i = 0; i + 1 < ntiles; ++i) {
    cp_async_wait<1>();  // tile i + 1 resident (tile i + 2 may still load)
    fence_proxy_async();
    __syncthreads();
    fence_registers(s);
    fence_registers(o);
    fence_registers(pa);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) wgmma_m64n64k16_rs(s, qa[kk], k_desc(i + 1, kk), kk > 0);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) wgmma_m64n128k16_rs_tb(o, pa[kk], v_desc(i, kk), 1);
    wgmma_commit();
    wgmma_wait<1>();  // S_{i+1}, the older group, is done
    fence_registers(s);
    softmax_scores<BC>(s, m, l, alpha, a, b, (b.tile0 + i + 1) * BC, tq);
    wgmma_wait<0>();
    fence_registers(o);
    rescale_output<D>(o, alpha);
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) p_fragment<BC>(s, kk, pa[kk]);
    __syncthreads();  // every warp is done with stage i % 3: refill it with tile i + 3
    load_kv(i + 3);
  }
  fence_registers(o);
  fence_registers(pa);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BC / 16; ++kk) wgmma_m64n128k16_rs_tb(o, pa[kk], v_desc(ntiles - 1, kk), 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(o);
  store_output_rows<D>(o, l, m, a, b, warp, g, tq);
#else
  __trap();  // never launched: attention_wgmma_init() reports the kernel unavailable
#endif
}

// Which code the device actually loaded: 1 when it is the sm_90a build with wgmma.
__global__ void wgmma_probe_kernel(int* out) {
#ifdef FP8RL_WGMMA
  *out = 1;
#else
  *out = 0;
#endif
}

// Two heads per block when consecutive query heads pair up within their KV group.
int heads_per_block(const AttentionArgs& a) {
  return (a.hq / a.hkv) % 2 == 0 ? 2 : 1;
}

template <int WG>
void launch_wg(const AttentionArgs& a, cudaStream_t s) {
  const dim3 grid(unsigned(ceil_div(a.t, kAttnRows)), unsigned(a.hq / WG), unsigned(a.num_seqs));
  attention_wgmma_kernel<WG><<<grid, WgCfg<WG>::kThreads, WgCfg<WG>::kSmemBytes, s>>>(a);
}

}  // namespace

cudaError_t attention_wgmma_init(bool* available) {
  *available = false;
  int dev = 0, major = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e != cudaSuccess || major != 9) return e;
  e = cudaFuncSetAttribute(attention_wgmma_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           WgCfg<1>::kSmemBytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(attention_wgmma_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             WgCfg<2>::kSmemBytes);
  if (e != cudaSuccess) return e;
  int* flag = nullptr;
  int host = 0;
  e = cudaMalloc(&flag, sizeof(int));
  if (e != cudaSuccess) return e;
  wgmma_probe_kernel<<<1, 1>>>(flag);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(flag);
  *available = e == cudaSuccess && host == 1;
  return e;
}

bool attention_wgmma_supports(const AttentionArgs& a) {
  return a.d == kWgD && a.k8 == nullptr;  // an FP8 pool runs on the mma.sync kernel
}

void launch_attention_wgmma(const AttentionArgs& a, cudaStream_t s) {
  if (a.t == 0 || a.num_seqs == 0) return;
  if (heads_per_block(a) == 2)
    launch_wg<2>(a, s);
  else
    launch_wg<1>(a, s);
  FP8RL_LAUNCH_CHECK("attention_wgmma");
}

}  // namespace fp8rl::cuda
