// The paged decode kernel on the tensor cores (paged_decode.cuh; the CUDA-core kernel and the
// split-K scheme it shares are described in paged_attention.cu).
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/paged_decode.cuh"

namespace fp8rl::cuda {

namespace {

// The decode kernel on the tensor cores (Capabilities::decode_mma, head dims up to 128): the same
// items (sequence, KV head, chunk), chunks and partials as paged_decode_kernel, with the K/V tiles
// streamed through a two-stage cp.async ring and each of the 4 warps taking 16 keys of every
// 64-key tile with an online softmax of its own (one __syncthreads a tile). A block takes up to
// kMaxDecodeSegs items (AttentionArgs::decode_sms: a grid about as large as the SMs hold at
// once) as one stream of tiles: while it finishes an item, the next item's first tile and query
// rows are already being copied, so the table lookups, the first tile's latency and the merge
// at the end of an item are no longer a bubble in each block's stream of loads. S = Q K^T on
// mma.sync (the group's query heads as the A rows; fp32 accumulation) and O += P V with P split
// into bf16 hi + lo parts, so P keeps ~16 bits rather than bf16's 8 and kCudaPagedDecode's
// derivation (P in fp32) holds. Groups of up to 8 heads (kTall false) put P's lo part in the A rows
// 8-15, which Q leaves empty, so one mma.sync takes both parts and the two halves of the
// accumulator are summed at the end; groups of 9-16 run a second mma.sync. A row's max is raised
// only when a tile's exceeds it by kRescaleSlack (P then stays below 2^slack), so the output is
// rarely rescaled. The warps' states are merged through shared memory at the end, in warp order.
// Tiles start on a 16-key boundary (keys before the chunk are masked), so a warp's 16 keys are the
// slots of one block-table entry.
//
// FP8 pools (kFp8): the ring holds the tiles' codes and per-slot scales, half the bytes of bf16
// K/V, copied asynchronously like bf16 tiles; after a tile lands, each warp turns its own 16 keys
// into rows of one bf16 K/V tile, bf16(code * scale) as every attention kernel reads an FP8 pool
// (load_fp8_chunk), and its tensor-core steps read those.
constexpr int kMmaDecodeStages = 2;
constexpr float kRescaleSlack = 8.0f;                                       // log2 domain
constexpr int kMmaDecodeWarpKeys = kDecodeTile / (kDecodeThreads / kWarp);  // 16
static_assert(kMmaDecodeWarpKeys == 16 && kPagedBlockSize == 16,
              "a warp's keys are one k16 step of P V and one block of the table");
static_assert(kMmaDecodeStages == 2, "the tile stream below alternates two stages");

// A block's work item: keys [k0, k1) of sequence seq's query row under KV head kvh, ending in
// the output row (slots == 1) or in partial `slot` of the row's `slots`.
struct DecodeSeg {
  int seq, kvh, k0, k1, row, slot, slots;
};
// Items a block takes at most: its list is found in one pass of a warp (kWarp lanes), and is
// kept short so the smem of 3 blocks an SM still fits.
constexpr int kMaxDecodeSegs = 16;
static_assert(kMaxDecodeSegs <= kWarp, "a lane finds each item");

template <int D, bool kTall, bool kFp8>
struct MmaDecodeCfg {
  static constexpr int kLd = D + 8;  // smem row stride (bf16): conflict-free ldmatrix
  static constexpr int kQRows = kTall ? 16 : 8;
  static constexpr int kStageElems = 2 * kDecodeTile * kLd;  // a stage: K tile, then V tile
  // bf16 pools: the ring of bf16 stages; FP8 pools: one bf16 tile, and the ring of codes
  // (rows of D bytes, K then V) with their scales (K then V), bytes.
  static constexpr int kBf16Stages = kFp8 ? 1 : kMmaDecodeStages;
  static constexpr int kCodeStageBytes = kFp8 ? 2 * kDecodeTile * (D + 4) : 0;
  static constexpr int kCodesOffset = kBf16Stages * kStageElems * 2;
  static constexpr int kQOffset = kCodesOffset + kMmaDecodeStages * kCodeStageBytes;
  static constexpr int kQElems = kMmaDecodeStages * kQRows * kLd;
  static constexpr int kSegsOffset = kQOffset + kQElems * 2;  // bytes
  static constexpr int kSmemBytes = kSegsOffset + kMaxDecodeSegs * int(sizeof(DecodeSeg)) + 16;
  // The merge reuses the stage just consumed: per warp, O [16][D] and m, l [16] in f32.
  static_assert((kDecodeThreads / kWarp) * 16 * (D + 2) * 4 <= kStageElems * 2, "merge layout");
};

template <int D, bool kTall, bool kFp8>
__global__ void __launch_bounds__(kDecodeThreads, 3)
    paged_decode_mma_kernel(const AttentionArgs a, int items, int per, int slots, float* part_o,
                            float* part_ml) {
  using Cfg = MmaDecodeCfg<D, kTall, kFp8>;
  constexpr int kLd = Cfg::kLd, kChunks = D / 8, BK = kDecodeTile;
  constexpr int kWarps = kDecodeThreads / kWarp;
  constexpr int kRowsPerPass = kDecodeThreads / kChunks;      // key rows one pass of threads copies
  constexpr int kFp8RowsPerPass = kDecodeThreads / (D / 16);  // the same for 16-code chunks
  constexpr float kLog2e = 1.4426950408889634f;
  const int group = int(a.hq / a.hkv);

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ring = reinterpret_cast<bf16*>(smem_raw);  // [S or 1][K, V][BK][kLd]
  uint8_t* codes = smem_raw + Cfg::kCodesOffset;   // FP8: [S][K, V][BK][D], then [K, V][BK] f32
  bf16* qbuf = reinterpret_cast<bf16*>(smem_raw + Cfg::kQOffset);  // [S][kQRows][kLd]
  DecodeSeg* segs = reinterpret_cast<DecodeSeg*>(smem_raw + Cfg::kSegsOffset);
  int* seg_count = reinterpret_cast<int*>(segs + kMaxDecodeSegs);
  const int tid = int(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, tq = lane % 4;

  // The block's items are blockIdx.x + i gridDim.x for i < per, split-major (all rows' first
  // chunks, then second chunks, ...) so that chunks a row does not have spread over the
  // blocks; warp 0 keeps those with keys, in order. A row's result does not depend on which
  // block computes it or after what.
  if (warp == 0) {
    const int item = int(blockIdx.x) + lane * int(gridDim.x);
    DecodeSeg sg{};
    bool ok = false;
    if (lane < per && item < items) {
      const int rows = int(a.num_seqs * a.hkv), split = item / rows, rest = item % rows;
      sg.seq = rest / int(a.hkv);
      sg.kvh = rest % int(a.hkv);
      DecodeRow r;
      ok = decode_row(a, sg.seq, r) && split < r.splits;
      if (ok) {
        sg.k0 = r.lo + split * r.chunk;
        sg.k1 = min(sg.k0 + r.chunk, r.pos + 1);
        sg.row = r.row;
        sg.slot = r.slot0 + split;
        sg.slots = r.slots;
      }
    }
    const unsigned mask = __ballot_sync(0xffffffffu, ok);
    if (ok) segs[__popc(mask & ((1u << lane) - 1u))] = sg;
    if (lane == 0) *seg_count = __popc(mask);
  }
  __syncthreads();
  const int nseg = *seg_count;
  if (nseg == 0) return;

  // This thread copies column chunk cc of key rows j0 + kRowsPerPass * i of a tile.
  const int j0 = tid / kChunks, cc = (tid % kChunks) * 8;
  const int64_t slot_stride = a.hkv * D;
  // Keys [kt, kt + BK) of item sg into `stage` (kt: a multiple of the block size), and with
  // the item's first tile its group's query rows.
  auto load_tile = [&](const DecodeSeg& sg, int kt, int stage, bool with_q) {
    const int32_t* table = a.block_tables + int64_t(sg.seq) * a.table_stride;
    // The pool slot of key `key`'s row (0 past the chunk, where the source is not read).
    auto slot_of = [&](int key) {
      return int64_t(table[key >> kPagedBlockShift]) * kPagedBlockSize +
             (key & (kPagedBlockSize - 1));
    };
    if constexpr (kFp8) {
      // 16-code chunks: D / 16 a row, key rows j0f + kFp8RowsPerPass i; a scale a thread.
      uint8_t* kd = codes + stage * Cfg::kCodeStageBytes;
      uint8_t* vd = kd + BK * D;
      float* sd = reinterpret_cast<float*>(vd + BK * D);
      const int j0f = tid / (D / 16), cf = (tid % (D / 16)) * 16;
#pragma unroll
      for (int i = 0; i < BK / kFp8RowsPerPass; ++i) {
        const int j = j0f + kFp8RowsPerPass * i, key = kt + j;
        const bool ok = key < sg.k1;
        const int64_t off = ok ? slot_of(key) * slot_stride + int64_t(sg.kvh) * D + cf : 0;
        cp_async16(kd + j * D + cf, a.k8 + off, ok);
        cp_async16(vd + j * D + cf, a.v8 + off, ok);
      }
      static_assert(2 * BK == kDecodeThreads, "a scale a thread");
      const int j = tid % BK, key = kt + j;
      const bool ok = key < sg.k1;
      const int64_t head_row = ok ? slot_of(key) * a.hkv + sg.kvh : 0;
      cp_async4(sd + tid, (tid < BK ? a.k_scale : a.v_scale) + head_row, ok);
    } else {
      const int64_t head_off = int64_t(sg.kvh) * D + cc;
      bf16* kd = ring + stage * Cfg::kStageElems + j0 * kLd + cc;
      bf16* vd = kd + BK * kLd;
#pragma unroll
      for (int i = 0; i < BK / kRowsPerPass; ++i) {
        const int key = kt + j0 + kRowsPerPass * i;
        const bool ok = key < sg.k1;  // past the chunk: zeros, the source is not read
        const int64_t off = ok ? slot_of(key) * slot_stride + head_off : 0;
        cp_async16(kd + i * kRowsPerPass * kLd, a.k + off, ok);
        cp_async16(vd + i * kRowsPerPass * kLd, a.v + off, ok);
      }
    }
    if (with_q) {
      const int64_t head0 = int64_t(sg.row) * a.hq + int64_t(sg.kvh) * group;
      for (int e = tid; e < group * kChunks; e += kDecodeThreads) {
        const int hr = e / kChunks, c = (e % kChunks) * 8;
        cp_async16(qbuf + (stage * Cfg::kQRows + hr) * kLd + c, a.q + (head0 + hr) * D + c, true);
      }
    }
  };
  auto first_key = [](const DecodeSeg& sg) { return sg.k0 & ~(kPagedBlockSize - 1); };
  auto tiles_of = [&](const DecodeSeg& sg) { return int(ceil_div(sg.k1 - first_key(sg), BK)); };

  constexpr int kRowSets = kTall ? 2 : 1;  // softmax rows of a lane: g (and g + 8)
  const bool capped = a.softcap > 0.0f;
  const int mi = lane / 8, mr = lane % 8;
  uint32_t qa[D / 16][4];  // Q as the A operand: rows g and g + 8 of the 16 (heads of the group)
  float o[D / 8][4];       // kTall: rows g, g + 8; else rows g (P hi) and g + 8 (P lo) of head g
  float m[2], l[2];        // l per lane
  float amax = 0.0f;       // of the rows this block writes itself

  // One stream of tiles over the block's items: tile t of item si is in `stage`, and the tile
  // after it (the item's next, or the next item's first with its query rows) is copied into
  // the other stage while this one is used.
  load_tile(segs[0], first_key(segs[0]), 0, true);
  cp_async_commit();
  int si = 0, t = 0, stage = 0;
  for (;;) {
    cp_async_wait<0>();
    __syncthreads();  // tile t is visible; every warp is done with the other stage
    const DecodeSeg& sg = segs[si];
    const int k0 = sg.k0, k1 = sg.k1, kb0 = first_key(sg), tiles = tiles_of(sg);
    if (t + 1 < tiles)
      load_tile(sg, kb0 + (t + 1) * BK, stage ^ 1, false);
    else if (si + 1 < nseg)
      load_tile(segs[si + 1], first_key(segs[si + 1]), stage ^ 1, true);
    cp_async_commit();
    if constexpr (kFp8) {
      // This stage's codes into the bf16 tile, which every warp is done with. A warp reads
      // only its own 16 K and 16 V rows below, so it converts those itself and needs no
      // barrier with the other warps.
      const uint8_t* kc = codes + stage * Cfg::kCodeStageBytes;
      const float* sc = reinterpret_cast<const float*>(kc + 2 * BK * D);
      for (int e = lane; e < 2 * kMmaDecodeWarpKeys * (D / 8); e += kWarp) {
        const int r = e / (D / 8), c8 = (e % (D / 8)) * 8;  // r: the warp's K rows, then V rows
        const int row =
            (r / kMmaDecodeWarpKeys) * BK + warp * kMmaDecodeWarpKeys + r % kMmaDecodeWarpKeys;
        *reinterpret_cast<uint4*>(ring + row * kLd + c8) =
            fp8_chunk_bf16(*reinterpret_cast<const uint2*>(kc + row * D + c8), sc[row]);
      }
      __syncwarp();
    }
    if (t == 0) {  // the item's query rows (rows past the group zeros; 8-15 zeros unless kTall)
      const bf16* qs = qbuf + stage * Cfg::kQRows * kLd;
      const bool ok0 = g < group, ok1 = kTall && g + 8 < group;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const bf16* q0 = qs + g * kLd + kk * 16 + tq * 2;
        qa[kk][0] = ok0 ? *reinterpret_cast<const uint32_t*>(q0) : 0u;
        qa[kk][2] = ok0 ? *reinterpret_cast<const uint32_t*>(q0 + 8) : 0u;
        if constexpr (kTall) {
          qa[kk][1] = ok1 ? *reinterpret_cast<const uint32_t*>(q0 + 8 * kLd) : 0u;
          qa[kk][3] = ok1 ? *reinterpret_cast<const uint32_t*>(q0 + 8 * kLd + 8) : 0u;
        } else {
          qa[kk][1] = qa[kk][3] = 0u;
        }
      }
#pragma unroll
      for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;
    }
    const int kw = kb0 + t * BK + warp * kMmaDecodeWarpKeys;
    // Warp-uniform: keys past the chunk. Otherwise the warp sees a visible key (k0 lies in
    // the first tile's first 16), so each row's max below is finite.
    if (kw < k1) {
      const bf16* kst =
          ring + (kFp8 ? 0 : stage) * Cfg::kStageElems + warp * kMmaDecodeWarpKeys * kLd;
      const bf16* vst = kst + BK * kLd;
      float sa[2][4] = {}, sb[2][4] = {};  // two accumulation chains, summed below
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t kb[4];  // b-fragments of key tiles 0 and 1
        ldmatrix_x4(kb, kst + ((mi / 2) * 8 + mr) * kLd + kk * 16 + (mi % 2) * 8);
        float(&sc)[2][4] = kk % 2 == 0 ? sa : sb;
        mma_bf16(sc[0], qa[kk], kb[0], kb[1]);
        mma_bf16(sc[1], qa[kk], kb[2], kb[3]);
      }
      // Scores in the log2 domain ([j][2rr + c]: key kw + 8j + 2tq + c of row g + 8rr), keys
      // outside [k0, k1) -inf.
      float s[2][4];
#pragma unroll
      for (int rr = 0; rr < kRowSets; ++rr) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float x = (sa[j][2 * rr + c] + sb[j][2 * rr + c]) * a.scale;
            if (capped) x = a.softcap * tanhf(x / a.softcap);
            const int key = kw + 8 * j + 2 * tq + c;
            x = key >= k0 && key < k1 ? x * kLog2e : -INFINITY;
            s[j][2 * rr + c] = x;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const bool raise = mx > m[rr] + kRescaleSlack;  // always on a row's first tile
        if (__any_sync(0xffffffffu, raise)) {
          const float m_new = raise ? mx : m[rr];
          const float alpha = exp2f(m[rr] - m_new);  // 0 on the first tile (m = -inf)
          l[rr] *= alpha;
          m[rr] = m_new;
#pragma unroll
          for (int dn = 0; dn < D / 8; ++dn) {
            if constexpr (kTall) {
              o[dn][2 * rr] *= alpha;
              o[dn][2 * rr + 1] *= alpha;
            } else {  // both halves are head g's
              o[dn][0] *= alpha;
              o[dn][1] *= alpha;
              o[dn][2] *= alpha;
              o[dn][3] *= alpha;
            }
          }
        }
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float p = exp2f(s[j][2 * rr + c] - m[rr]);
            s[j][2 * rr + c] = p;
            l[rr] += p;
          }
      }
      // P as the A operand of the k16 step (the C layout of the two key tiles): hi and lo
      // parts; a[0], a[2] are row g's keys 2tq (+1) and 8 + 2tq (+1), a[1], a[3] row g + 8's.
      auto split_bf16 = [](float x0, float x1, uint32_t& hi, uint32_t& lo) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
        const float2 hf = __bfloat1622float2(h);
        hi = *reinterpret_cast<const uint32_t*>(&h);
        lo = pack_bf16(x0 - hf.x, x1 - hf.y);
      };
      uint32_t ph[4], pl[4];
      split_bf16(s[0][0], s[0][1], ph[0], pl[0]);
      split_bf16(s[1][0], s[1][1], ph[2], pl[2]);
      if constexpr (kTall) {
        split_bf16(s[0][2], s[0][3], ph[1], pl[1]);
        split_bf16(s[1][2], s[1][3], ph[3], pl[3]);
      } else {  // rows 8-15 carry the lo parts: one mma.sync for both
        ph[1] = pl[0];
        ph[3] = pl[2];
      }
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t vb[4];  // b-fragments of d tiles dn and dn + 1
        ldmatrix_x4_trans(vb, vst + ((mi % 2) * 8 + mr) * kLd + (dn + mi / 2) * 8);
        mma_bf16(o[dn], ph, vb[0], vb[1]);
        mma_bf16(o[dn + 1], ph, vb[2], vb[3]);
        if constexpr (kTall) {
          mma_bf16(o[dn], pl, vb[0], vb[1]);
          mma_bf16(o[dn + 1], pl, vb[2], vb[3]);
        }
      }
    }
    if (++t < tiles) {
      stage ^= 1;
      continue;
    }

    // The item's last tile: each warp's rows into this stage (every warp is done with its
    // K/V after the barrier; the next item's first tile is landing in the other), then the
    // warps merged in warp order.
    __syncthreads();
    float* wo =
        reinterpret_cast<float*>(ring + (kFp8 ? 0 : stage) * Cfg::kStageElems);  // [kWarps][16][D]
    float* wm = wo + kWarps * 16 * D;                                            // [kWarps][16]
    float* wl = wm + kWarps * 16;                                                // [kWarps][16]
#pragma unroll
    for (int rr = 0; rr < kRowSets; ++rr) {
      float sum = l[rr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = g + 8 * rr;
      if (row >= group) continue;
      float* dst = wo + (warp * 16 + row) * D + tq * 2;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        const float2 x = kTall ? make_float2(o[dn][2 * rr], o[dn][2 * rr + 1])
                               : make_float2(o[dn][0] + o[dn][2], o[dn][1] + o[dn][3]);
        *reinterpret_cast<float2*>(dst + dn * 8) = x;
      }
      if (tq == 0) {
        wm[warp * 16 + row] = m[rr];
        wl[warp * 16 + row] = sum;
      }
    }
    __syncthreads();
    const bool direct = sg.slots == 1;
    const int slot = sg.slot;
    const int64_t head0 = int64_t(sg.row) * a.hq + int64_t(sg.kvh) * group;
    for (int e = tid; e < group * D; e += kDecodeThreads) {
      const int row = e / D, d = e % D;
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, wm[w * 16 + row]);
      float acc = 0.0f, sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(wm[w * 16 + row] - mx);  // 0 for a warp without keys (m = -inf)
        acc += f * wo[(w * 16 + row) * D + d];
        sum += f * wl[w * 16 + row];
      }
      const int64_t head = head0 + row;
      if (direct) {
        const bf16 v = __float2bfloat16_rn(acc * (sum > 0.0f ? 1.0f / sum : 0.0f));
        a.out[head * D + d] = v;
        amax = fmaxf(amax, fabsf(__bfloat162float(v)));
      } else {
        part_o[(head * slots + slot) * D + d] = acc;
        if (d == 0) {
          part_ml[(head * slots + slot) * 2] = mx;
          part_ml[(head * slots + slot) * 2 + 1] = sum;
        }
      }
    }
    if (++si == nseg) break;
    t = 0;
    stage ^= 1;  // the next item's first tile
  }
  if (a.amax != nullptr) {
    amax = warp_max(amax);
    if (lane == 0 && amax > 0.0f) atomic_max_nonneg(a.amax, amax);
  }
}

template <int D, bool kTall, bool kFp8>
cudaError_t set_smem_limit() {
  return cudaFuncSetAttribute(paged_decode_mma_kernel<D, kTall, kFp8>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              MmaDecodeCfg<D, kTall, kFp8>::kSmemBytes);
}

template <int D, bool kTall, bool kFp8>
DecodeGrid launch_kernel(const AttentionArgs& a, int max_splits, int slots, float* part_o,
                         float* part_ml, cudaStream_t s) {
  using Cfg = MmaDecodeCfg<D, kTall, kFp8>;
  const int64_t items = int64_t(max_splits) * a.hkv * a.num_seqs;
  // Persistent: the items spread evenly over about as many blocks as the SMs hold at once
  // (a block's items are then a few, each one's first tile copied while the last finishes).
  // More than kMaxDecodeSegs items a block take several such waves, sized so that the last
  // one is full: 2.6 waves of 16 items a block (8-chunk rows) ran 9% slower than a block per
  // item, its last wave a long tail (docs/PERFORMANCE.md).
  int64_t per = 1;
  if (a.decode_sms > 0) {
    // A failed query only sizes the grid for one block an SM: the results do not depend on it.
    int resident = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &resident, paged_decode_mma_kernel<D, kTall, kFp8>, kDecodeThreads, Cfg::kSmemBytes) !=
            cudaSuccess ||
        resident < 1)
      resident = 1;
    const int64_t blocks = int64_t(resident) * a.decode_sms;
    const int64_t waves = ceil_div(items, blocks * kMaxDecodeSegs);
    per = ceil_div(items, blocks * waves);
  }
  const int64_t grid = ceil_div(items, per);
  paged_decode_mma_kernel<D, kTall, kFp8><<<unsigned(grid), kDecodeThreads, Cfg::kSmemBytes, s>>>(
      a, int(items), int(per), slots, part_o, part_ml);
  return {items, grid};
}

template <int D>
DecodeGrid launch(const AttentionArgs& a, int max_splits, int slots, float* part_o, float* part_ml,
                  cudaStream_t s) {
  const bool tall = a.hq / a.hkv > 8, fp8 = a.k8 != nullptr;
  if (fp8)
    return tall ? launch_kernel<D, true, true>(a, max_splits, slots, part_o, part_ml, s)
                : launch_kernel<D, false, true>(a, max_splits, slots, part_o, part_ml, s);
  return tall ? launch_kernel<D, true, false>(a, max_splits, slots, part_o, part_ml, s)
              : launch_kernel<D, false, false>(a, max_splits, slots, part_o, part_ml, s);
}

template <int D>
cudaError_t set_smem_limits() {
  const cudaError_t e[4] = {set_smem_limit<D, false, false>(), set_smem_limit<D, true, false>(),
                            set_smem_limit<D, false, true>(), set_smem_limit<D, true, true>()};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return x;
  return cudaSuccess;
}

}  // namespace

cudaError_t paged_decode_mma_init(int d) {
  switch (d) {
    case 32:
      return set_smem_limits<32>();
    case 64:
      return set_smem_limits<64>();
    case 128:
      return set_smem_limits<128>();
    default:
      return cudaSuccess;
  }
}

DecodeGrid launch_paged_decode_mma(const AttentionArgs& a, int max_splits, int slots, float* part_o,
                                   float* part_ml, cudaStream_t s) {
  DecodeGrid g;
  switch (a.d) {
    case 32:
      g = launch<32>(a, max_splits, slots, part_o, part_ml, s);
      break;
    case 64:
      g = launch<64>(a, max_splits, slots, part_o, part_ml, s);
      break;
    case 128:
      g = launch<128>(a, max_splits, slots, part_o, part_ml, s);
      break;
    default:
      return g;  // kMmaDecodeMaxD: the caller sends other head dims to the CUDA-core kernel
  }
  FP8RL_LAUNCH_CHECK("paged_decode_mma");
  return g;
}

}  // namespace fp8rl::cuda
