// The registry of op cases: ragged token counts (1, 19, 257, 989), head dims 32..256,
// K not a multiple of 128 (block edge groups) or of 8/16 (scalar kernel paths, GEMM fallback),
// every FP8 scheme and activation scaling, in-place variants. Bounds: tests/tolerances.h. The
// cases themselves live in op_cases_*.cpp.
#include <cmath>
#include <tuple>

#include "op_cases.h"

namespace fp8rl::gpu_test {

std::string fmtname(const char* op, const std::string& params) {
  return std::string(op) + " " + params;
}

// Token ids from an integer hash of (seed, index).
std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + uint64_t(i) + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    v[size_t(i)] = int32_t((z ^ (z >> 31)) % uint64_t(vocab));
  }
  return v;
}

std::string shape(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s;
  for (const auto& [k, v] : kv) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s;
}

std::vector<OpCase> correctness_cases() {
  std::vector<OpCase> c;
  auto add = [&](std::string name, std::function<void(Harness&, Outcome&)> fn, bool quick) {
    c.push_back({std::move(name), std::move(fn), quick});
  };
  add(
      "fill_uniform n=100003", [](Harness& h, Outcome& o) { fill_case(h, o, 100003); }, true);
  for (int64_t m : {1, 256, 5000})
    add(
        fmtname("copy_elements", shape({{"moves", m}})),
        [=](Harness& h, Outcome& o) { copy_elements_case(h, o, m); }, m == 256);
  for (int64_t t : kTokens)
    for (int64_t hd : {192, 200}) {
      const float sc = hd == 192 ? std::sqrt(192.0f) : 1.0f;
      add(
          fmtname("embedding", shape({{"T", t}, {"H", hd}})),
          [=](Harness& h, Outcome& o) { embedding_case(h, o, t, 1000, hd, sc); }, t == 19);
    }
  for (int64_t t : kTokens)
    for (int64_t d : {64, 128, 200, 4096})
      for (bool plus_one : {false, true}) {
        const bool in_place = d == 128;
        add(
            fmtname("rms_norm",
                    shape({{"rows", t}, {"D", d}, {"plus_one", plus_one}, {"in_place", in_place}})),
            [=](Harness& h, Outcome& o) { rms_norm_case(h, o, t, d, plus_one, in_place); },
            t == 19 && !plus_one);
      }
  for (int64_t t : {1, 19, 257})
    for (int64_t d : {64, 128, 256})
      for (int32_t base : {0, 100000})
        add(
            fmtname("rope", shape({{"T", t}, {"heads", 4}, {"D", d}, {"pos0", base}})),
            [=](Harness& h, Outcome& o) { rope_case(h, o, t, 4, d, base); }, t == 19 && base == 0);
  for (int64_t t : {1, 19, 257})
    for (int64_t i : {320, 1000, 2880})
      for (bool silu : {true, false})
        add(
            fmtname(silu ? "silu_mul" : "gelu_tanh_mul",
                    shape({{"T", t}, {"I", i}, {"in_place", i == 320}})),
            [=](Harness& h, Outcome& o) { gated_case(h, o, t, i, silu, i == 320); },
            t == 19 && i == 1000);
  for (int64_t t : kTokens)
    add(
        fmtname("add", shape({{"T", t}, {"H", 1000}})),
        [=](Harness& h, Outcome& o) { add_case(h, o, t, 1000); }, t == 19);
  for (int64_t t : kTokens)
    add(
        fmtname("add_f32", shape({{"T", t}, {"H", 1001}})),
        [=](Harness& h, Outcome& o) { add_f32_case(h, o, t, 1001); }, t == 19);
  // Fused residual add + norm: hidden sizes with scalar tails (1001, 203), warp rows (200),
  // every block plan up to one segment of NCH 8 (12288) and a multi-segment row (20000).
  for (int64_t t : kTokens)
    for (int64_t d : {200, 1001, 4096})
      for (bool plus_one : {false, true}) {
        const bool alias = d == 4096;
        add(
            fmtname("add_rms_norm",
                    shape({{"T", t}, {"H", d}, {"plus_one", plus_one}, {"out_is_delta", alias}})),
            [=](Harness& h, Outcome& o) { add_rms_norm_case(h, o, t, d, plus_one, alias); },
            t == 19 && !plus_one);
      }
  for (int64_t d : {203, 12288, 20000})
    add(
        fmtname("add_rms_norm", shape({{"T", 19}, {"H", d}, {"plus_one", 0}, {"out_is_delta", 0}})),
        [=](Harness& h, Outcome& o) { add_rms_norm_case(h, o, 19, d, false, false); }, false);
  // Fused q/k norm + RoPE: head dims 64/128/256 (vector kernel), 48 (vector, a warp per head),
  // 72 (scalar kernel); with and without the norm; in place, into a cache slice, strided rows.
  struct R {
    int64_t heads, d;
    bool norm, plus_one;
    int32_t pos0;
    RopeDest dest;
  };
  const R ropes[] = {
      {4, 64, true, false, 0, RopeDest::in_place},
      {2, 128, true, false, 0, RopeDest::cache},
      {3, 256, true, true, 100000, RopeDest::cache},
      {8, 128, true, false, 100000, RopeDest::in_place},
      {4, 128, false, false, 0, RopeDest::cache},
      {2, 64, false, false, 100000, RopeDest::stride_pad8},
      {2, 128, true, false, 0, RopeDest::stride_pad8},
      {2, 128, true, true, 0, RopeDest::stride_pad3},
      {3, 48, true, false, 0, RopeDest::in_place},
      {2, 72, true, false, 100000, RopeDest::cache},
      {5, 72, false, false, 0, RopeDest::in_place},
      {40, 64, true, false, 0, RopeDest::cache},
  };
  for (int64_t t : kTokens)
    for (const R& r : ropes)
      add(
          fmtname("rms_norm_rope", shape({{"T", t},
                                          {"heads", r.heads},
                                          {"D", r.d},
                                          {"norm", r.norm},
                                          {"plus_one", r.plus_one},
                                          {"pos0", r.pos0}}) +
                                       " " + rope_dest_name(r.dest)),
          [=](Harness& h, Outcome& o) {
            rms_norm_rope_case(h, o, t, r.heads, r.d, r.norm, r.plus_one, r.pos0, r.dest);
          },
          t == 19 && r.d != 256);
  // q/k norm + RoPE + the K/V store in one op: Qwen3-8B's heads, a Gemma-like D = 256 with one
  // kv head, D = 64, D = 48 (a warp per head, idle lanes), D = 72 (the three ops' fallback).
  struct K {
    int64_t hq, hkv, d;
    bool norm, fp8_kv, in_place;
  };
  const K stores[] = {
      {32, 8, 128, true, false, false}, {32, 8, 128, true, true, false},
      {32, 8, 128, false, false, true}, {4, 1, 256, true, true, true},
      {6, 2, 64, true, false, false},   {3, 1, 48, true, true, false},
      {2, 2, 72, true, false, false},
  };
  for (int64_t t : {int64_t{1}, int64_t{19}, int64_t{257}})
    for (const K& r : stores)
      add(
          fmtname("rope_store_kv", shape({{"T", t},
                                          {"Hq", r.hq},
                                          {"Hkv", r.hkv},
                                          {"D", r.d},
                                          {"norm", r.norm},
                                          {"fp8_kv", r.fp8_kv},
                                          {"in_place", r.in_place}})),
          [=](Harness& h, Outcome& o) {
            rope_store_kv_case(h, o, t, r.hq, r.hkv, r.d, r.norm, r.fp8_kv, r.in_place);
          },
          t == 19);
  add(
      "softcap bf16 T=19 V=1000",
      [](Harness& h, Outcome& o) { softcap_case(h, o, 19, 1000, DType::bf16); }, true);
  add(
      "softcap f32 T=19 V=1000",
      [](Harness& h, Outcome& o) { softcap_case(h, o, 19, 1000, DType::f32); }, false);

  // Attention: (T, first slot, Hq, Hkv, D, window, softcap).
  struct A {
    int64_t t, first, hq, hkv, d, window;
    float softcap;
  };
  const A attn[] = {
      {1, 0, 4, 2, 64, 0, 0},       {19, 0, 8, 2, 128, 0, 0},   {257, 0, 4, 4, 128, 0, 0},
      {989, 0, 8, 2, 64, 0, 0},     {257, 0, 2, 1, 256, 0, 0},  {19, 238, 4, 2, 128, 0, 0},
      {1, 300, 8, 2, 128, 0, 0},    {257, 0, 6, 2, 32, 8, 0},   {989, 0, 4, 2, 128, 100, 0},
      {19, 200, 4, 2, 64, 50, 0},   {257, 0, 4, 2, 256, 0, 50}, {989, 0, 2, 2, 256, 0, 0},
      {1, 988, 4, 1, 256, 0, 0},    {989, 0, 4, 1, 32, 0, 30},  {257, 0, 4, 2, 128, 0, 50},
      {989, 37, 8, 1, 128, 300, 0}, {130, 0, 2, 2, 128, 0, 0}};
  for (const A& a : attn)
    add(
        fmtname("attention", shape({{"T", a.t},
                                    {"first", a.first},
                                    {"Hq", a.hq},
                                    {"Hkv", a.hkv},
                                    {"D", a.d},
                                    {"window", a.window},
                                    {"softcap", int64_t(a.softcap)}})),
        [=](Harness& h, Outcome& o) {
          attention_case(h, o, a.t, a.first, a.hq, a.hkv, a.d, a.window, a.softcap);
        },
        a.t == 19 || (a.t == 257 && a.d == 256));

  // Paged attention: ragged batches over scattered blocks, with prefill chunks (the prefill
  // kernels) or only decodes (the split-K decode kernel: 5000 and 4097 keys take several
  // chunks); a sequence without new queries in each. (Hq, Hkv, D, window, softcap).
  const std::vector<PagedSeq> mixed = {{1, 1},    {19, 19}, {257, 257},  {300, 1},
                                       {100, 37}, {40, 0},  {1000, 130}, {65, 2}};
  const std::vector<PagedSeq> decodes = {{1, 1},    {17, 1},   {256, 1},  {257, 1}, {40, 0},
                                         {1000, 1}, {5000, 1}, {4097, 1}, {64, 1}};
  struct P {
    int64_t hq, hkv, d, window;
    float softcap;
  };
  const P paged[] = {{8, 8, 64, 0, 0},     {8, 2, 128, 0, 0}, {8, 1, 256, 0, 0},
                     {16, 2, 128, 100, 0}, {4, 1, 64, 0, 30}, {8, 2, 32, 50, 0},
                     {32, 2, 128, 300, 0}};
  for (bool fp8_kv : {false, true})
    for (bool decode : {false, true})
      for (const P& a : paged)
        add(
            fmtname((std::string(decode ? "paged_attention decode" : "paged_attention mixed") +
                     (fp8_kv ? " fp8kv" : ""))
                        .c_str(),
                    shape({{"Hq", a.hq},
                           {"Hkv", a.hkv},
                           {"D", a.d},
                           {"window", a.window},
                           {"softcap", int64_t(a.softcap)}})),
            [=](Harness& h, Outcome& o) {
              paged_attention_case(h, o, decode ? decodes : mixed, a.hq, a.hkv, a.d, a.window,
                                   a.softcap, fp8_kv);
            },
            a.d == 128 && a.window == 0);

  // The shared-prefix path of the decode kernel: groups of n members over prefixes of 1 to
  // 256 blocks (n x GQA group rows of up to 32 per prefix block: several batches per group
  // at n 16 x 4 and n 8 x 16), softcap, FP8 pools, and a window (the description ignored).
  struct S {
    int64_t members, prefix_blocks, hq, hkv, d, window;
    float softcap;
    bool fp8_kv;
  };
  const S shared[] = {
      {2, 1, 8, 8, 64, 0, 0, false},     {8, 8, 32, 8, 128, 0, 0, false},
      {8, 64, 32, 8, 128, 0, 0, true},   {16, 64, 32, 8, 128, 0, 0, false},
      {16, 8, 16, 2, 128, 0, 50, false}, {8, 256, 32, 8, 128, 0, 0, false},
      {2, 256, 8, 8, 64, 0, 30, true},   {16, 8, 8, 1, 256, 0, 0, false},
      {8, 8, 16, 1, 64, 0, 0, true},     {8, 64, 16, 4, 256, 0, 0, true},
      {8, 8, 32, 8, 128, 100, 0, false},
  };
  for (const S& a : shared)
    add(
        fmtname(a.fp8_kv ? "paged_attention shared_prefix fp8kv" : "paged_attention shared_prefix",
                shape({{"n", a.members},
                       {"blocks", a.prefix_blocks},
                       {"Hq", a.hq},
                       {"Hkv", a.hkv},
                       {"D", a.d},
                       {"window", a.window},
                       {"softcap", int64_t(a.softcap)}})),
        [=](Harness& h, Outcome& o) {
          paged_shared_prefix_case(h, o, a.members, a.prefix_blocks, a.hq, a.hkv, a.d, a.window,
                                   a.softcap, a.fp8_kv);
        },
        a.members == 8 && a.prefix_blocks == 8 && a.window == 0);

  for (ActScaling act :
       {ActScaling::token, ActScaling::group, ActScaling::tensor, ActScaling::static_tensor})
    for (int64_t m : kTokens)
      for (int64_t k : {192, 200, 2880, 4096}) {
        const std::string an(act_scaling_name(act));
        add(
            fmtname("quantize", an + " " + shape({{"M", m}, {"K", k}})),
            [=](Harness& h, Outcome& o) { quantize_case(h, o, act, m, k, 5.0f); },
            m == 19 && k == 200);
      }
  add("fp8_quotient reciprocal-multiply division vs IEEE", fp8_quotient_case, false);
  for (ActScaling act : {ActScaling::token, ActScaling::tensor})
    add(
        fmtname("quantize", std::string(act_scaling_name(act)) + " e4m3 midpoints"),
        [=](Harness& h, Outcome& o) { quantize_midpoints_case(h, o, act); }, true);
  for (ActScaling act : {ActScaling::token, ActScaling::group, ActScaling::tensor})
    for (int64_t m : kTokens)
      for (int64_t k : {192, 200, 4096}) {
        const std::string an(act_scaling_name(act));
        add(
            fmtname("rms_norm_quant", an + " " + shape({{"M", m}, {"K", k}})),
            [=](Harness& h, Outcome& o) { rms_norm_quant_case(h, o, act, m, k, k == 200); },
            m == 19 && k == 200);
        add(
            fmtname("add_rms_norm_quant", an + " " + shape({{"M", m}, {"K", k}})),
            [=](Harness& h, Outcome& o) { add_rms_norm_quant_case(h, o, act, m, k, k == 200); },
            m == 19 && k == 200);
        add(
            fmtname("silu_mul_quant", an + " " + shape({{"M", m}, {"K", k + 128}})),
            [=](Harness& h, Outcome& o) { gated_quant_case(h, o, act, m, k + 128, true); },
            m == 19 && k == 200);
      }
  // Row plans of the fused quantizers past the sizes above: NCH 8 (12288) and several
  // segments (20000, 20003 with a scalar tail).
  for (ActScaling act : {ActScaling::token, ActScaling::group})
    for (int64_t k : {12288, 20000, 20003}) {
      const std::string an(act_scaling_name(act));
      add(
          fmtname("add_rms_norm_quant", an + " " + shape({{"M", 19}, {"K", k}})),
          [=](Harness& h, Outcome& o) { add_rms_norm_quant_case(h, o, act, 19, k, false); }, false);
      add(
          fmtname("silu_mul_quant", an + " " + shape({{"M", 19}, {"K", k}})),
          [=](Harness& h, Outcome& o) { gated_quant_case(h, o, act, 19, k, true); }, false);
      add(
          fmtname("quantize", an + " " + shape({{"M", 19}, {"K", k}})),
          [=](Harness& h, Outcome& o) { quantize_case(h, o, act, 19, k, 5.0f); }, false);
    }
  add(
      "gelu_tanh_mul_quant group M=257 K=2880",
      [](Harness& h, Outcome& o) { gated_quant_case(h, o, ActScaling::group, 257, 2880, false); },
      false);
  add(
      "gelu_tanh_mul_quant token M=257 K=4224",
      [](Harness& h, Outcome& o) { gated_quant_case(h, o, ActScaling::token, 257, 4224, false); },
      false);
  for (Fp8Scheme s : {Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{256, 192}, {300, 200}, {1024, 4096}})
      add(
          fmtname("quantize_weight",
                  std::string(scheme_name(s)) + " " + shape({{"N", n}, {"K", k}})),
          [=](Harness& h, Outcome& o) { quantize_weight_case(h, o, s, n, k); }, n == 300);

  // Linear: bf16, each FP8 scheme with its activation scaling, the mixed pairs cuBLASLt runs
  // through broadcast scales, the dequantized fallback (block x token, K % 16 != 0), biases,
  // fp32 output (lm_head), and pre-quantized inputs (the fused path of the forward).
  struct L {
    Fp8Scheme s;
    ActScaling act;
    int64_t n, k;
    bool bias;
    DType out;
    bool pre;
  };
  const DType bf = DType::bf16;
  std::vector<L> lin = {
      {Fp8Scheme::off, ActScaling::none, 256, 192, false, bf, false},
      {Fp8Scheme::off, ActScaling::none, 1024, 4096, true, bf, false},
      {Fp8Scheme::off, ActScaling::none, 1000, 256, false, DType::f32, false},
      {Fp8Scheme::tensor, ActScaling::tensor, 256, 192, false, bf, false},
      {Fp8Scheme::tensor, ActScaling::tensor, 2048, 1024, true, bf, false},
      {Fp8Scheme::tensor, ActScaling::static_tensor, 512, 256, false, bf, false},
      {Fp8Scheme::tensor, ActScaling::token, 512, 256, false, bf, false},
      {Fp8Scheme::row, ActScaling::token, 256, 192, false, bf, false},
      {Fp8Scheme::row, ActScaling::token, 1024, 2880, true, bf, false},
      {Fp8Scheme::row, ActScaling::token, 2048, 1024, false, bf, true},
      {Fp8Scheme::row, ActScaling::tensor, 512, 256, false, bf, false},
      {Fp8Scheme::block, ActScaling::group, 256, 192, false, bf, false},
      {Fp8Scheme::block, ActScaling::group, 1024, 2880, false, bf, false},
      {Fp8Scheme::block, ActScaling::group, 2048, 1024, true, bf, true},
      {Fp8Scheme::block, ActScaling::group, 320, 640, false, DType::f32, false},
      {Fp8Scheme::block, ActScaling::token, 512, 256, false, bf, false},
      {Fp8Scheme::row, ActScaling::token, 200, 200, false, bf, false},
      {Fp8Scheme::block, ActScaling::group, 304, 200, false, bf, false},
  };
  for (const L& l : lin)
    for (int64_t m : kTokens) {
      const std::string name =
          std::string(scheme_name(l.s)) + "/" + std::string(act_scaling_name(l.act)) + " " +
          shape({{"M", m}, {"N", l.n}, {"K", l.k}}) + (l.bias ? " bias" : "") +
          (l.out == DType::f32 ? " f32-out" : "") + (l.pre ? " prequantized" : "");
      add(
          fmtname("linear", name),
          [=](Harness& h, Outcome& o) {
            linear_case(h, o, m, l.n, l.k, l.s, l.act, l.bias, l.out, l.pre);
          },
          (m == 19 || m == 1) && l.n <= 512);
    }

  // Past the weight-streaming kernel's 64 rows (decode steps of 65-256 sequences).
  for (int64_t m : {72, 200})
    for (bool bias : {false, true})
      add(
          fmt::format("linear concurrent row/token M={} N=1024+1536 K=8192{}", m,
                      bias ? " bias" : ""),
          [=](Harness& h, Outcome& o) { concurrent_linear_case(h, o, m, bias); }, m == 72 && !bias);

  // The group op with adapters: Qwen3-8B's q/k/v (A matrices side by side: one down product)
  // and gate/up at a GRPO group's 8 rows (streaming, up products fused), 100 rows (the grouped
  // up kernel) and 300 (cuBLASLt's); A matrices apart, LoRA dropout, bf16 weights, small shapes;
  // the grouped up kernel's partial row and column tiles at ranks 64 and 8.
  struct Group {
    Fp8Scheme s;
    int64_t m;
    std::vector<int64_t> ns;
    int64_t k, r;
    bool adjacent;
    float p;
  };
  for (const Group& c : {Group{Fp8Scheme::row, 8, {4096, 1024, 1024}, 4096, 32, true, 0.0f},
                         Group{Fp8Scheme::row, 8, {12288, 12288}, 4096, 32, true, 0.0f},
                         Group{Fp8Scheme::row, 100, {4096, 1024, 1024}, 4096, 32, true, 0.0f},
                         Group{Fp8Scheme::row, 300, {512, 256}, 512, 16, true, 0.0f},
                         Group{Fp8Scheme::row, 13, {512, 256, 256}, 256, 8, false, 0.0f},
                         Group{Fp8Scheme::row, 19, {512, 256}, 256, 8, true, 0.1f},
                         Group{Fp8Scheme::off, 8, {512, 256, 256}, 256, 16, true, 0.0f},
                         Group{Fp8Scheme::off, 300, {512}, 256, 16, true, 0.0f},
                         Group{Fp8Scheme::row, 200, {520, 264, 264}, 256, 64, true, 0.0f},
                         Group{Fp8Scheme::off, 37, {264, 136}, 128, 8, true, 0.0f}}) {
    std::string widths;
    for (int64_t n : c.ns) widths += fmt::format("{}{}", widths.empty() ? "" : "+", n);
    add(
        fmt::format("linear_group lora {} M={} N={} K={} r={}{}{}", scheme_name(c.s), c.m, widths,
                    c.k, c.r, c.adjacent ? "" : " apart", c.p > 0 ? " dropout" : ""),
        [=](Harness& h, Outcome& o) {
          linear_group_case(h, o, c.s, c.m, c.ns, c.k, c.r, c.adjacent, c.p);
        },
        c.k <= 512);
  }

  // The weight-streaming kernel (at most kStreamingMaxRows rows): Qwen3-8B's projections at a
  // GRPO group's 8 rows and at 16, ragged row counts, the grouped launch of a pair, a bias,
  // per-tensor scales; one row past the limit, where cuBLASLt must run.
  struct Streaming {
    Fp8Scheme s;
    ActScaling act;
    int64_t m, n, k;
    bool pair, bias;
  };
  for (Streaming c : {Streaming{Fp8Scheme::row, ActScaling::token, 8, 6144, 4096, false, false},
                      Streaming{Fp8Scheme::row, ActScaling::token, 16, 4096, 12288, false, false},
                      Streaming{Fp8Scheme::row, ActScaling::token, 13, 12288, 4096, true, false},
                      Streaming{Fp8Scheme::row, ActScaling::token, 1, 1024, 4096, false, true},
                      Streaming{Fp8Scheme::row, ActScaling::token, 16, 256, 208, true, false},
                      Streaming{Fp8Scheme::tensor, ActScaling::tensor, 13, 512, 1024, false, true},
                      Streaming{Fp8Scheme::row, ActScaling::tensor, 8, 512, 1024, false, false},
                      Streaming{Fp8Scheme::tensor, ActScaling::token, 16, 512, 1024, true, false},
                      Streaming{Fp8Scheme::row, ActScaling::token, 17, 512, 1024, false, false}})
    add(
        fmt::format("linear streaming {}/{} M={} N={}{} K={}{}", scheme_name(c.s),
                    act_scaling_name(c.act), c.m, c.n, c.pair ? " x2" : "", c.k,
                    c.bias ? " bias" : ""),
        [=](Harness& h, Outcome& o) {
          streaming_case(h, o, c.s, c.act, c.m, c.n, c.k, c.pair, c.bias);
        },
        c.n <= 512);

  for (auto [s, a] : {std::pair{Fp8Scheme::off, ActScaling::none},
                      {Fp8Scheme::tensor, ActScaling::tensor},
                      {Fp8Scheme::row, ActScaling::token},
                      {Fp8Scheme::block, ActScaling::group}})
    add(
        fmt::format("graph attention block {}", scheme_name(s)),
        [=](Harness& h, Outcome& o) { graph_case(h, o, s, a); }, s == Fp8Scheme::row);

  // The sampler: a small vocabulary, Qwen's (151936) and Gemma's (2^18); 1..64 rows of every
  // parameter kind; top logprobs 0, 5 and 20.
  for (auto [r, v, k] : {std::tuple<int64_t, int64_t, int>{1, 1000, 0},
                         {24, 1000, 5},
                         {64, 151936, 20},
                         {16, 262144, 5}})
    add(
        fmtname("sample", shape({{"R", r}, {"V", v}, {"K", k}})),
        [=](Harness& h, Outcome& o) { sample_case(h, o, r, v, k); }, v == 1000);

  add_moe_cases(c);
  add_backward_cases(c);
  add_optimizer_cases(c);
  return c;
}

}  // namespace fp8rl::gpu_test
