// Op cases: the shared-prefix path of the paged decode kernel (ops::PagedBatch's prefix_*).
//
// Two groups of `members` decode sequences, each group over one shared prefix of
// `prefix_blocks` physical blocks (stored once, as the engine's forked samples hold them) and
// every member with a private suffix of its own length (1 to 90 tokens in blocks of its own;
// the last member's 601-602, two chunks),
// interleaved with two unrelated sequences; blocks in a fixed shuffled order, unused slots NaN.
// The reference is the exact CPU paged attention over the same tables (the CPU ignores the
// description: the math is the same keys in another chunking). Checks: the shared path with
// the prefix kernel on the tensor cores (the harness's device; P rounded to bf16 on the prefix
// keys, so kCudaAttention) and on the CUDA cores (a second device with shared_prefix_mma off;
// kCudaPagedDecode), the per-sequence path (no description; kCudaPagedDecode), the fused amax,
// a CUDA graph replay equal to the eager run, with a window the description ignored (bit for
// bit the per-sequence path), and the negative control: both groups described as one whose
// members share the first's prefix blocks (they do not) exceeds the bound 10x, on both
// prefix kernels.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "harness.h"
#include "op_cases.h"
#include "ops/device.h"
#include "ops/uniform_hash.h"
#include "tolerances.h"

namespace fp8rl::gpu_test {

namespace {

constexpr int64_t kBlock = 16;

// The description of `groups` (member sequence indices each) sharing `prefix` keys, at the
// capacities of S sequences, on the device.
void describe(Harness& h, ops::PagedBatch& b, const std::vector<std::vector<int32_t>>& groups,
              int32_t prefix, int64_t seqs) {
  Tensor cu = Tensor::zeros({seqs / 2 + 1}, DType::i32), mem = Tensor::zeros({seqs}, DType::i32),
         lens = Tensor::zeros({seqs / 2}, DType::i32), of_seq = Tensor::zeros({seqs}, DType::i32);
  int32_t m = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int32_t s : groups[g]) {
      mem.ptr<int32_t>()[m++] = s;
      of_seq.ptr<int32_t>()[s] = prefix;
    }
    lens.ptr<int32_t>()[g] = prefix;
    cu.ptr<int32_t>()[g + 1] = m;
  }
  for (int64_t g = int64_t(groups.size()) + 1; g <= seqs / 2; ++g) cu.ptr<int32_t>()[g] = m;
  b.prefix_cu_members = to_device(h, cu, DType::i32);
  b.prefix_members = to_device(h, mem, DType::i32);
  b.prefix_lens = to_device(h, lens, DType::i32);
  b.prefix_len_of_seq = to_device(h, of_seq, DType::i32);
}

}  // namespace

void paged_shared_prefix_case(Harness& h, Outcome& o, int64_t members, int64_t prefix_blocks,
                              int64_t hq, int64_t hkv, int64_t d, int64_t window, float softcap,
                              bool fp8_kv) {
  constexpr int64_t kGroups = 2;
  const int64_t prefix = prefix_blocks * kBlock;
  // Sequences: an unrelated one (700 tokens), the groups' members interleaved, another
  // unrelated one (33 tokens).
  struct Seq {
    int64_t group, context;  // group -1: unrelated
  };
  std::vector<Seq> seqs{{-1, 700}};
  for (int64_t i = 0; i < members; ++i)
    for (int64_t g = 0; g < kGroups; ++g)  // the last members: two chunks of their own
      seqs.push_back({g, prefix + 1 + (i + 1 == members ? 600 + g : (37 * i + 11 * g) % 90)});
  seqs.push_back({-1, 33});
  const int64_t n_seqs = int64_t(seqs.size());
  std::vector<std::vector<int32_t>> groups(kGroups);
  int64_t blocks = kGroups * prefix_blocks + 1, width = 1, max_c = 1, tokens = kGroups * prefix;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const Seq& q = seqs[size_t(s)];
    const int64_t own = q.group < 0 ? q.context : q.context - prefix;  // private tokens
    blocks += ceil_div(own, kBlock);
    tokens += own;
    width = std::max(width, ceil_div(q.context, kBlock));
    max_c = std::max(max_c, q.context);
    if (q.group >= 0) groups[size_t(q.group)].push_back(int32_t(s));
  }
  std::vector<int32_t> perm(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) perm[size_t(i)] = int32_t(i);
  std::sort(perm.begin(), perm.end(), [](int32_t a, int32_t b) {
    return uniform_hash(93, uint64_t(a), 1.0f) < uniform_hash(93, uint64_t(b), 1.0f);
  });
  Tensor tables = Tensor::zeros({n_seqs, width}, DType::i32),
         cu = Tensor::empty({n_seqs + 1}, DType::i32), lens = Tensor::empty({n_seqs}, DType::i32);
  Tensor mapping = Tensor::empty({tokens}, DType::i32);
  size_t next = 0;
  int64_t tok = 0;
  auto store = [&](const int32_t* table, int64_t from, int64_t to) {  // positions [from, to)
    for (int64_t j = from; j < to; ++j)
      mapping.ptr<int32_t>()[tok++] = table[j / kBlock] * int32_t(kBlock) + int32_t(j % kBlock);
  };
  std::vector<std::vector<int32_t>> prefix_table(kGroups);
  for (int64_t g = 0; g < kGroups; ++g) {
    for (int64_t b = 0; b < prefix_blocks; ++b) prefix_table[size_t(g)].push_back(perm[next++]);
    store(prefix_table[size_t(g)].data(), 0, prefix);
  }
  for (int64_t s = 0; s < n_seqs; ++s) {
    const Seq& q = seqs[size_t(s)];
    int32_t* table = tables.ptr<int32_t>() + s * width;
    const int64_t first = q.group < 0 ? 0 : prefix;
    if (q.group >= 0) std::copy_n(prefix_table[size_t(q.group)].begin(), prefix_blocks, table);
    for (int64_t b = first / kBlock; b < ceil_div(q.context, kBlock); ++b) table[b] = perm[next++];
    store(table, first, q.context);
    cu.ptr<int32_t>()[s] = int32_t(s);
    lens.ptr<int32_t>()[s] = int32_t(q.context);
  }
  cu.ptr<int32_t>()[n_seqs] = int32_t(n_seqs);
  const Tensor k_all = host_values({tokens, hkv, d}, 84, 3.0f),
               v_all = host_values({tokens, hkv, d}, 85, 2.0f);
  const Tensor q = host_values({n_seqs, hq, d}, 86, 3.0f);
  PagedPools pools = make_paged_pools(h, k_all, v_all, mapping, blocks, hkv, d, fp8_kv);

  ops::PagedBatch cpu_batch;
  cpu_batch.cu_q = cu;
  cpu_batch.context_lens = lens;
  cpu_batch.block_tables = tables;
  cpu_batch.num_seqs = n_seqs;
  cpu_batch.max_query_len = 1;
  cpu_batch.max_context_len = max_c;
  ops::AttentionParams p;
  p.scale = 1.0f / std::sqrt(float(d));
  p.softcap = softcap;
  p.window = window;
  Tensor ref = Tensor::empty({n_seqs, hq, d}, DType::f32);
  ops::paged_attention(h.cpu, q, pools.kp, pools.vp, cpu_batch, p, ref);

  const TensorView q_d = to_device(h, q, DType::bf16), k_d = to_device(h, k_all, DType::bf16),
                   v_d = to_device(h, v_all, DType::bf16),
                   map_d = to_device(h, mapping, DType::i32);
  ops::PagedBatch plain = cpu_batch;
  plain.cu_q = to_device(h, cu, DType::i32);
  plain.context_lens = to_device(h, lens, DType::i32);
  plain.block_tables = to_device(h, tables, DType::i32);
  ops::PagedBatch shared = plain;
  describe(h, shared, groups, int32_t(prefix), n_seqs);
  ops::PagedBatch wrong = plain;  // both groups claimed to share group 0's prefix blocks
  std::vector<int32_t> all = groups[0];
  all.insert(all.end(), groups[1].begin(), groups[1].end());
  std::sort(all.begin(), all.end());
  describe(h, wrong, {all}, int32_t(prefix), n_seqs);

  const TensorView amax = ops::scratch_alloc(h.gpu, {1}, DType::f32);
  Guard guard(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {n_seqs, hq, d}, DType::bf16);
  guard.seal();
  ops::store_kv(h.gpu, k_d, v_d, map_d, pools.kp_d, pools.vp_d, pools.sc_d);
  ops::fill_zero(h.gpu, amax);
  ops::paged_attention(h.gpu, q_d, pools.kp_d, pools.vp_d, shared, p, out, amax, pools.sc_d);
  o.checks.push_back(guard.verify({out}));

  double vmax = 0;
  for (int64_t i = 0; i < pools.vp.numel(); ++i)
    if (!std::isnan(pools.vp.ptr<float>()[i]))
      vmax = std::max(vmax, double(std::fabs(pools.vp.ptr<float>()[i])));
  const bool windowed = window > 0;  // the description is ignored: the decode kernel's bound
  const double mma_bound = windowed ? test::kCudaPagedDecode : test::kCudaAttention;
  const double core_bound = test::kCudaPagedDecode;
  const Tensor got = as_f32(h, out), got_bits = to_host(h, out);
  const Check mma_check =
      compare("shared path, mma.sync prefix: out / max|v|", got, ref, mma_bound, vmax);
  o.checks.push_back(mma_check);
  float want = 0;
  for (int64_t i = 0; i < got.numel(); ++i) want = std::max(want, std::fabs(got.ptr<float>()[i]));
  const float fused = to_host(h, amax).ptr<float>()[0];
  o.checks.push_back(
      {"fused amax == max|out|", double(std::fabs(fused - want)), 0.0, fused == want});

  // CUDA graph: the prefix kernel, the per-sequence kernel and the combine replay bit for bit.
  {
    h.dev->begin_capture();
    ops::paged_attention(h.gpu, q_d, pools.kp_d, pools.vp_d, shared, p, out, {}, pools.sc_d);
    CudaGraph graph = h.dev->end_capture();
    ops::fill(h.gpu, out, NAN);
    graph.replay();
    const Tensor replayed = to_host(h, out);
    const bool same =
        std::memcmp(got_bits.view().data, replayed.view().data, got_bits.nbytes()) == 0;
    o.checks.push_back({"graph replay == eager", same ? 0.0 : 1.0, 0.0, same});
  }

  if (!fp8_kv && d <= 128)  // the tensor-core kernel's pools and head dims
    persistent_decode_checks(
        h, o,
        [&](Context c, const TensorView& y) {
          ops::paged_attention(c, q_d, pools.kp_d, pools.vp_d, shared, p, y, {}, pools.sc_d);
        },
        out);

  // The per-sequence path: within the bound too; with a window it is what the shared
  // description runs (the window could cut into a prefix), bit for bit.
  ops::paged_attention(h.gpu, q_d, pools.kp_d, pools.vp_d, plain, p, out, {}, pools.sc_d);
  const Check plain_check =
      compare("per-sequence path: out / max|v|", as_f32(h, out), ref, core_bound, vmax);
  o.checks.push_back(plain_check);
  if (windowed) {
    const Tensor plain_bits = to_host(h, out);
    const bool same =
        std::memcmp(got_bits.view().data, plain_bits.view().data, got_bits.nbytes()) == 0;
    o.checks.push_back({"window: shared == per-sequence bit for bit", same ? 0.0 : 1.0, 0.0, same});
  }

  // The CUDA-core prefix kernel, on a second device of the same GPU (the tensors are the
  // harness's).
  CudaDeviceOptions core_opt;
  core_opt.shared_prefix_mma = false;
  core_opt.decode_mma = false;
  CudaDevice core_dev(core_opt);
  Context core = core_dev.context();
  ops::paged_attention(core, q_d, pools.kp_d, pools.vp_d, shared, p, out, {}, pools.sc_d);
  const Check core_check =
      compare("shared path, CUDA-core prefix: out / max|v|", as_f32(h, out), ref, core_bound, vmax);
  o.checks.push_back(core_check);

  // Negative control: a group whose members do not share the claimed blocks.
  double wrong_mma = 0, wrong_core = 0;
  if (!windowed) {
    ops::paged_attention(h.gpu, q_d, pools.kp_d, pools.vp_d, wrong, p, out, {}, pools.sc_d);
    const Check c = compare("", as_f32(h, out), ref, mma_bound, vmax);
    wrong_mma = c.err;
    o.checks.push_back({"wrong groups exceed the bound 10x (mma.sync)", c.err, 10 * mma_bound,
                        c.err > 10 * mma_bound});
    ops::paged_attention(core, q_d, pools.kp_d, pools.vp_d, wrong, p, out, {}, pools.sc_d);
    const Check d = compare("", as_f32(h, out), ref, core_bound, vmax);
    wrong_core = d.err;
    o.checks.push_back({"wrong groups exceed the bound 10x (CUDA cores)", d.err, 10 * core_bound,
                        d.err > 10 * core_bound});
  }
  o.info = fmt::format(
      "err mma.sync {:.3g}, CUDA cores {:.3g}, per-sequence {:.3g}; wrong groups {:.3g} / {:.3g}{}",
      mma_check.err, core_check.err, plain_check.err, wrong_mma, wrong_core,
      fp8_kv ? ", FP8 KV" : "");
}

}  // namespace fp8rl::gpu_test
