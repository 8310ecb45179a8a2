// The FP8-row GEMM of a decode step on Hopper's warpgroup MMA (sm_90a):
//   Y[m, n] = (sum_k X[m, k] W[n, k]) x_scale[m] w_scale[n] (+ bias[n]),  e4m3 codes, M <= 256.
//
// Why not cuBLASLt: its one OUTER_VEC_32F configuration tiles 128 x 128 with no split-K, so a
// 256-row step of o_proj (N = 4,096) runs 64 tiles on 132 SMs and pays a whole K loop per tile
// (docs/PERFORMANCE.md). Here a block takes 128 weight rows and all 256 token rows (each weight
// byte read once), and the K range of a tile is split over a cluster of 1, 2 or 4 blocks so the
// grid fills the SMs; the blocks of a cluster add their fp32 partial tiles through distributed
// shared memory in rank order (deterministic) and each writes a quarter (half, all) of the
// rows, scaled and rounded once.
//
// Per block: 256 threads, two warpgroups, each owning 64 weight rows. A k-block is 128 bytes of
// K (one 128-byte swizzle panel, wgmma.cuh) for the 128 weight rows and the 256 token rows,
// 48 KB, streamed through a 4-stage cp.async ring three k-blocks ahead. Each warpgroup issues
// per k-block and per half of the token rows four m64n128k32 wgmmas into a fresh accumulator and
// adds it to its fp32 sums: the FP8 tensor cores keep ~14 bits while they accumulate, so the
// sums are promoted every 128 K as cuBLASLt does with fast accumulation off (kCudaFp8Gemm).
//
// Accumulator layout (wgmma.cuh): weight row wg 64 + 16 warp + g + 8 (e / 2), token row
// 128 half + 8 j + 2 tq + e % 2 for part[j][e]; the epilogue transposes through shared memory
// so that a warp writes 64 consecutive outputs of a row.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/wgmma.cuh"

namespace fp8rl::cuda {

namespace {

constexpr int kConsumers = 256;             // two warpgroups of MMA warps (warps 4-11)
constexpr int kThreads = 128 + kConsumers;  // after the producer warpgroup (warps 0-3)
constexpr int kBn = 128;                    // weight rows (output columns) per block
constexpr int kBm = 128;                    // token rows (output rows) per block
constexpr int kBk = 128;                    // K bytes per k-block: one swizzle panel
constexpr int kStages = 6;
constexpr uint32_t kWTile = kBn * kBk;
constexpr uint32_t kXTile = kBm * kBk;
constexpr uint32_t kStageBytes = kWTile + kXTile;
constexpr int kEpiLd = kBn + 4;  // fp32 row stride of the epilogue tile: conflict-free stores
// The stages, their full and empty barriers, and slack to align the stages to 1024 bytes.
constexpr int kSmemBytes = int(kStages * kStageBytes + 2 * kStages * 8 + 1024);
static_assert(kBm * kEpiLd * 4 <= int(kStages * kStageBytes),
              "the epilogue tile reuses the stages");

#ifdef FP8RL_WGMMA
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Two floats at shared address `addr` of the cluster's block `rank`.
__device__ __forceinline__ float2 load_cluster_f2(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n"
               : "=f"(v.x), "=f"(v.y)
               : "r"(remote)
               : "memory");
  return v;
}
__device__ __forceinline__ void consumers_sync() {  // the 256 MMA threads only
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}

// mbarriers (a phase completes when its arrivals and expected transaction bytes are in).
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// A [rows x 128 bytes] box at (k byte `k0`, row `r0`) of a 2-D tensor map into shared memory,
// 128-byte swizzled; rows past the tensor's end arrive as zeros.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int k0, int r0,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k0), "r"(r0), "r"(bar)
      : "memory");
}
#endif

// 168 registers a thread at launch (12 warps, 3 on each SM sub-partition's 16K registers);
// the producer warpgroup then gives back all but 40 and the MMA warpgroups take 232.
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_wgmma_kernel(const __grid_constant__ CUtensorMap w_map,
                          const __grid_constant__ CUtensorMap x_map, const Fp8RowGemm g) {
#ifdef FP8RL_WGMMA
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* base = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const uint32_t base_s = smem_u32(base);
  const uint32_t full0 = base_s + kStages * kStageBytes, empty0 = full0 + kStages * 8;
  const int tid = int(threadIdx.x) - 128;  // MMA threads 0..255; the producer's are negative
  const int wg = tid / 128, warp = (tid % 128) / kWarp, lane = tid % kWarp;
  const int gq = lane / 4, tq = lane % 4;
  const int splits = int(gridDim.x) / int(ceil_div(g.n, kBn));
  const int split = splits > 1 ? int(cluster_rank()) : 0;
  const int n0 = int(blockIdx.x) / splits * kBn, m0 = int(blockIdx.y) * kBm;
  const int kblocks = g.k / kBk;
  const int kb0 = split * kblocks / splits, nkb = (split + 1) * kblocks / splits - kb0;

  if (tid == -128) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1);   // the producer's arrival with the stage's bytes
      mbar_init(empty0 + 8 * s, 2);  // one arrival per MMA warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  float acc[16][4];  // [token rows / 8][4]: fp32 sums over this block's K range
  if (tid < 0) {
    // Producer: one thread streams the k-blocks through the ring.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == -128)
      for (int i = 0; i < nkb; ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbar_wait(empty0 + 8 * s, uint32_t((i / kStages - 1) & 1));
        const uint32_t st = base_s + s * kStageBytes, full = full0 + 8 * s;
        mbar_arrive_expect_tx(full, kStageBytes);
        tma_load(st, &w_map, (kb0 + i) * kBk, n0, full);
        tma_load(st + kWTile, &x_map, (kb0 + i) * kBk, m0, full);
      }
    __syncwarp();
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
    // Two buffers of one k-block's products: the tensor cores run k-block i + 1 while k-block
    // i's are added to the sums.
    float pa[16][4], pb[16][4];
    auto issue = [&](int i, float(&p)[16][4]) {
      const int s = i % kStages;
      mbar_wait(full0 + 8 * s, uint32_t((i / kStages) & 1));
      const uint32_t st = base_s + s * kStageBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBk / 32; ++kk)
        wgmma_m64n128k32_e4m3_ss(p, sw128_desc(st + wg * 64 * kBk + kk * 32, 16, 1024),
                                 sw128_desc(st + kWTile + kk * 32, 16, 1024), kk > 0);
      wgmma_commit();
    };
    auto retire = [&](int i, float(&p)[16][4]) {  // k-block i's products have landed
      fence_registers(p);
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] += p[j][e];
      if (tid % 128 == 0) mbar_arrive(empty0 + 8 * (i % kStages));  // done with its stage
    };
    if (nkb > 0) issue(0, pa);
    for (int i = 0; i < nkb; i += 2) {
      if (i + 1 < nkb) {
        issue(i + 1, pb);
        wgmma_wait<1>();
      } else {
        wgmma_wait<0>();
      }
      retire(i, pa);
      if (i + 1 < nkb) {
        if (i + 2 < nkb) {
          issue(i + 2, pa);
          wgmma_wait<1>();
        } else {
          wgmma_wait<0>();
        }
        retire(i + 1, pb);
      }
    }
    consumers_sync();  // both warpgroups are past their last wgmma: the stages are free

    // This block's partial tile, [token row][weight row] fp32, into its own shared memory.
    float* tile = reinterpret_cast<float*>(base);
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        tile[(8 * j + 2 * tq + e % 2) * kEpiLd + wg * 64 + warp * 16 + gq + 8 * (e / 2)] =
            acc[j][e];
  }
  if (splits > 1)
    cluster_sync();
  else
    __syncthreads();

  if (tid >= 0) {
    // Rank r sums the cluster's partials of its share of the token rows, in rank order.
    const float* tile = reinterpret_cast<const float*>(base);
    const int rows = kBm / splits, pair = tid % 64;
    const int n = n0 + 2 * pair;
    const float2 ws = n < g.n ? make_float2(g.w_scale[n], g.w_scale[n + 1]) : make_float2(0, 0);
    const float2 bias = g.bias != nullptr && n < g.n ? make_float2(g.bias[n], g.bias[n + 1])
                                                     : make_float2(0.0f, 0.0f);
    for (int r = split * rows + tid / 64; r < (split + 1) * rows && m0 + r < g.m;
         r += kConsumers / 64) {
      const uint32_t addr = smem_u32(tile + r * kEpiLd + 2 * pair);
      float2 sum = make_float2(0.0f, 0.0f);
      for (int q = 0; q < splits; ++q) {
        const float2 v = splits > 1
                             ? load_cluster_f2(addr, uint32_t(q))
                             : *reinterpret_cast<const float2*>(tile + r * kEpiLd + 2 * pair);
        sum.x += v.x;
        sum.y += v.y;
      }
      if (n >= g.n) continue;
      const int m = m0 + r;
      const float xs = g.x_scale[m];
      const float y0 = sum.x * xs * ws.x + bias.x, y1 = sum.y * xs * ws.y + bias.y;
      if (g.y_f32)
        *reinterpret_cast<float2*>(static_cast<float*>(g.y) + int64_t(m) * g.n + n) =
            make_float2(y0, y1);
      else
        *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(g.y) + int64_t(m) * g.n + n) =
            __floats2bfloat162_rn(y0, y1);
    }
  }
  if (splits > 1) cluster_sync();  // the others may still read this block's tile
#else
  (void)w_map;
  (void)x_map;
  (void)g;
  __trap();  // never launched: fp8_gemm_wgmma_init() reports the kernel unavailable
#endif
}

__global__ void probe_kernel(int* out) {
#ifdef FP8RL_WGMMA
  *out = 1;
#else
  *out = 0;
#endif
}

}  // namespace

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// [rows, k] bytes with rows `ld` bytes apart, read in boxes of box_rows x 128 bytes.
bool encode(CUtensorMap* map, const uint8_t* data, int64_t rows, int64_t k, int64_t ld,
            uint32_t box_rows) {
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld)};
  const cuuint32_t box[2] = {uint32_t(kBk), box_rows};
  const cuuint32_t elem[2] = {1, 1};
  PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
  return fn != nullptr &&
         fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(data), dims, strides, box,
            elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

cudaError_t fp8_gemm_wgmma_init(bool* available) {
  *available = false;
  int dev = 0, major = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e != cudaSuccess || major != 9) return e;
  e = cudaFuncSetAttribute(fp8_gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kSmemBytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(fp8_gemm_wgmma_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed,
                             0);
  if (e != cudaSuccess) return e;
  int* flag = nullptr;
  int host = 0;
  e = cudaMalloc(&flag, sizeof(int));
  if (e != cudaSuccess) return e;
  probe_kernel<<<1, 1>>>(flag);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(flag);
  *available = e == cudaSuccess && host == 1 && encode_fn() != nullptr;
  return e;
}

bool fp8_gemm_wgmma_fits(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && m <= kFp8GemmMaxRows && n % 2 == 0 && k % kBk == 0 && k >= kBk;
}

int fp8_gemm_wgmma_splits(int64_t m, int64_t n, int64_t k, int multiprocessors) {
  const int64_t tiles = ceil_div(n, kBn) * ceil_div(m, kBm), kblocks = k / kBk;
  for (int s : {4, 2})
    if (tiles * s <= multiprocessors && kblocks >= 4 * s) return s;
  return 1;
}

bool launch_fp8_gemm_wgmma(const Fp8RowGemm& g, int splits, cudaStream_t s) {
  CUtensorMap w_map, x_map;
  if (!encode(&w_map, g.w, g.n, g.k, g.w_ld, kBn) || !encode(&x_map, g.x, g.m, g.k, g.x_ld, kBm))
    return false;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(ceil_div(g.n, kBn) * splits), unsigned(ceil_div(g.m, kBm)), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = size_t(kSmemBytes);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(splits);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // A failed launch is the runtime's last error, which the check reads.
  (void)cudaLaunchKernelEx(&cfg, fp8_gemm_wgmma_kernel, w_map, x_map, g);
  FP8RL_LAUNCH_CHECK("fp8_gemm_wgmma");
  return true;
}

}  // namespace fp8rl::cuda
