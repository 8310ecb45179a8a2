// The mixture-of-experts ops on CUDA against the CPU reference with emulated bf16 activations
// (Context::bf16_activations): moe_route (plain, replayed, partly replayed, `chosen`), and
// moe_experts for bf16 and FP8 experts under imbalanced routing (expert 0 takes every token,
// the upper half of the experts none), each with negative controls; a decode-sized route +
// experts captured in a CUDA graph and replayed on another input's routing.
//
// The inputs sit on grids that make the sums before the first bf16 rounding exact in fp32 in
// any order (router logits; gate and up, with power-of-two FP8 scales), so both backends round
// the same values: what differs is only what tests/tolerances.h derives.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "harness.h"
#include "op_cases.h"
#include "ops/uniform_hash.h"
#include "quant/fp8.h"
#include "tolerances.h"

namespace fp8rl::gpu_test {

namespace {

// Values in {-2, -1, 0, 1, 2} * unit, from a hash.
Tensor grid_values(Shape s, uint64_t seed, float unit) {
  Tensor t = Tensor::empty(s, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float u = uniform_hash(seed, uint64_t(i), 1.0f);  // [-1, 1]
    const int v = std::min(4, int(std::floor((u + 1.0f) * 2.5f))) - 2;
    t.ptr<float>()[i] = float(v) * unit;
  }
  return t;
}

// A CPU context rounding where CUDA stores bf16.
struct CpuBf16 {
  Arena arena{size_t(1) << 28};
  Context ctx{Device::cpu, &arena};
  CpuBf16() { ctx.bf16_activations = true; }
};

// How many elements of two i32 tensors differ.
double ids_differing(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += a.ptr<int32_t>()[i] != b.ptr<int32_t>()[i];
  return double(n);
}

// Values in {-amax, 0, amax}, from a hash: every FP8 scale group (a row, a 1x128 or 128x128
// block, a tensor) holds amax, so with amax = 448 * 2^-m its scale is 2^-m and its codes are
// 0 and +-448: the products of two such operands are +-448^2 2^-m-n, and a sum of up to 2^10
// of them is exact in fp32 (13 significant bits a 128-long block, 15 over K = 512), in any
// order and in the tensor cores' FP8 accumulation.
Tensor ternary_values(Shape s, uint64_t seed, float amax) {
  Tensor t = Tensor::empty(s, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float u = uniform_hash(seed, uint64_t(i), 1.0f);  // [-1, 1]
    t.ptr<float>()[i] = u < -1.0f / 3 ? -amax : (u > 1.0f / 3 ? amax : 0.0f);
  }
  return t;
}
constexpr float kGateAmax = 448.0f / 16384;  // scale 2^-14
constexpr float kInputAmax = 448.0f / 1024;  // scale 2^-10

TensorView upload(Harness& h, std::vector<DeviceBuffer>& store, const TensorView& host, DType dt) {
  if (host.empty()) return host;
  store.emplace_back(h.gpu, size_t(host.numel()) * dtype_size(dt));
  TensorView d = store.back().view(host.shape, dt);
  Tensor conv = Tensor::empty(host.shape, dt);
  convert(host.data, host.dtype, conv.view().data, dt, size_t(host.numel()));
  ops::copy(h.gpu, conv.view(), d);
  return d;
}

// An MoE layer's experts on both devices: gate and up ternary (kGateAmax: exact sums over
// ternary inputs of kInputAmax), down random; quantized per expert with `scheme` (off: bf16
// values). The router: grid values {-2..2} / 8.
struct DeviceExperts {
  MoeWeights cpu, gpu;
  std::vector<Tensor> host;
  std::vector<DeviceBuffer> store;
};

ExpertLinear host_experts(DeviceExperts& d, const Tensor& values, Fp8Scheme scheme) {
  ExpertLinear w;
  const int64_t e = values.shape()[0], n = values.shape()[1], k = values.shape()[2];
  if (scheme == Fp8Scheme::off) {
    w.weight = values.view();
    return w;
  }
  const Shape per = weight_scale_shape(scheme, n, k);
  d.host.push_back(Tensor::empty({e, n, k}, DType::f8e4m3));
  w.weight = d.host.back().view();
  d.host.push_back(Tensor::empty({e * per.numel()}, DType::f32));
  w.scales = d.host.back().view();
  w.scheme = scheme;
  w.act = matching_act_scaling(scheme);
  for (int64_t x = 0; x < e; ++x) {
    const LinearWeight one = w.expert(x);
    const TensorView v(const_cast<float*>(values.ptr<float>()) + x * n * k, DType::f32, {n, k});
    quantize_weight(v, scheme, one.weight, one.scales);
  }
  return w;
}

std::unique_ptr<DeviceExperts> make_experts(Harness& h, int64_t e, int64_t hd, int64_t inter,
                                            Fp8Scheme scheme, uint64_t seed) {
  auto d = std::make_unique<DeviceExperts>();
  d->host.reserve(16);  // views into these tensors stay valid
  d->host.push_back(ternary_values({e, inter, hd}, seed, kGateAmax));
  const Tensor& gate = d->host.back();
  d->host.push_back(ternary_values({e, inter, hd}, seed + 1, kGateAmax));
  const Tensor& up = d->host.back();
  d->host.push_back(host_values({e, hd, inter}, seed + 2, 1.7f / std::sqrt(float(inter))));
  const Tensor& down = d->host.back();
  d->host.push_back(grid_values({e, hd}, seed + 3, 1.0f / 8));
  d->cpu.router.weight = d->host.back().view();
  d->cpu.gate = host_experts(*d, gate, scheme);
  d->cpu.up = host_experts(*d, up, scheme);
  d->cpu.down = host_experts(*d, down, scheme);
  d->gpu = d->cpu;
  d->gpu.router.weight = upload(h, d->store, d->cpu.router.weight, DType::bf16);
  for (auto [c, g] : {std::pair{&d->cpu.gate, &d->gpu.gate},
                      {&d->cpu.up, &d->gpu.up},
                      {&d->cpu.down, &d->gpu.down}}) {
    g->weight = upload(h, d->store, c->weight, c->is_fp8() ? DType::f8e4m3 : DType::bf16);
    g->scales = upload(h, d->store, c->scales, DType::f32);
  }
  return d;
}

// Adapters of rank r on every expert projection, A and B ternary (1/16): with ternary inputs
// the gate and up adapters' sums stay exact (the down adapter reads act(gate) * up, which is
// not on a grid; its error ends in the output, no FP8 input after it). Scale 2.
struct DeviceLora {
  MoeLora cpu, gpu;
  std::vector<Tensor> host;
  std::vector<DeviceBuffer> store;
};

std::unique_ptr<DeviceLora> make_lora(Harness& h, int64_t e, int64_t hd, int64_t inter, int64_t r,
                                      uint64_t seed) {
  auto d = std::make_unique<DeviceLora>();
  d->host.reserve(6);
  for (auto [c, g, n, k] : {std::tuple{&d->cpu.gate, &d->gpu.gate, inter, hd},
                            {&d->cpu.up, &d->gpu.up, inter, hd},
                            {&d->cpu.down, &d->gpu.down, hd, inter}}) {
    d->host.push_back(ternary_values({e, r, k}, seed++, 1.0f / 16));
    c->a = d->host.back().view();
    d->host.push_back(ternary_values({e, n, r}, seed++, 1.0f / 16));
    c->b = d->host.back().view();
    c->scale = 2.0f;
    g->a = upload(h, d->store, c->a, DType::bf16);
    g->b = upload(h, d->store, c->b, DType::bf16);
    g->scale = c->scale;
  }
  return d;
}

// Imbalanced routing of t tokens over e experts, k each: expert 0 for every token, the others
// distinct from [1, e / 2) (the upper half gets no token), the slots rotated by token so the
// combine must sort them; weights in [0.05, 1] (bf16 values, not normalized).
void imbalanced_routing(int64_t t, int64_t e, int64_t k, Tensor& ids, Tensor& w) {
  ids = Tensor::empty({t, k}, DType::i32);
  w = Tensor::empty({t, k}, DType::f32);
  const int64_t pool = e / 2 - 1;
  for (int64_t i = 0; i < t; ++i) {
    std::vector<int32_t> mine{0};
    for (uint64_t j = 0; int64_t(mine.size()) < k; ++j) {
      const int32_t x =
          1 + int32_t(uint64_t((uniform_hash(77 + i, j, 1.0f) + 1.0f) * 0.5f * float(pool)) %
                      uint64_t(pool));
      if (std::find(mine.begin(), mine.end(), x) == mine.end()) mine.push_back(x);
    }
    for (int64_t s = 0; s < k; ++s) {
      ids.ptr<int32_t>()[i * k + s] = mine[size_t((s + i) % k)];
      const float u = 0.525f + 0.475f * uniform_hash(91, uint64_t(i * k + s), 1.0f);
      w.ptr<float>()[i * k + s] = bf16_to_f32(f32_to_bf16(u));
    }
  }
}

// S of cuda_moe_experts_bound: max over tokens of sum_j |w_j| max |y_j|, each token's expert
// outputs y_j computed by the CPU reference one slot at a time with weight 1.
double combine_scale(Context& cpu, const Tensor& x, const MoeWeights& w, ops::GatedActivation act,
                     const MoeLora& lora, const Tensor& ids, const Tensor& wt) {
  const int64_t t = x.shape()[0], hd = x.shape()[1], k = ids.shape()[1];
  std::vector<double> per(size_t(t), 0.0);
  for (int64_t j = 0; j < k; ++j) {
    Tensor one = Tensor::empty({t, 1}, DType::i32), ones = Tensor::empty({t, 1}, DType::f32);
    for (int64_t i = 0; i < t; ++i) {
      one.ptr<int32_t>()[i] = ids.ptr<int32_t>()[i * k + j];
      ones.ptr<float>()[i] = 1.0f;
    }
    Tensor y = Tensor::empty({t, hd}, DType::f32);
    ops::moe_experts(cpu, x, w, act, ones, one, y, lora);
    for (int64_t i = 0; i < t; ++i) {
      double m = 0;
      for (int64_t c = 0; c < hd; ++c)
        m = std::max(m, double(std::fabs(y.ptr<float>()[i * hd + c])));
      per[size_t(i)] += std::fabs(wt.ptr<float>()[i * k + j]) * m;
    }
  }
  return *std::max_element(per.begin(), per.end());
}

}  // namespace

void moe_route_case(Harness& h, Outcome& o, int64_t t, int64_t e, int64_t k, int64_t hd,
                    bool normalize, MoeReplay replay) {
  auto ex = make_experts(h, e, hd, 16, Fp8Scheme::off, 501);
  // x on {-2..2} / 16, the router on {-2..2} / 8: every logit a multiple of 2^-7 below 2^7.
  const Tensor x = grid_values({t, hd}, 502, 1.0f / 16);
  // Replayed ids: k consecutive experts from a start that moves with the token (distinct);
  // a third of the rows unrecorded (-1) when only partly replayed.
  Tensor ids = Tensor::empty({t, k}, DType::i32);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t s = 0; s < k; ++s)
      ids.ptr<int32_t>()[i * k + s] =
          replay == MoeReplay::partly && i % 3 == 1 ? -1 : int32_t((i * 7 + s) % e);
  const bool replaying = replay != MoeReplay::none;
  CpuBf16 cpu;
  Tensor w_ref = Tensor::empty({t, k}, DType::f32), ids_ref = copy_of(ids);
  Tensor chosen_ref = Tensor::empty({t, k}, DType::i32);
  ops::moe_route(cpu.ctx, x, ex->cpu.router, normalize, w_ref, ids_ref, replaying,
                 replaying ? chosen_ref.view() : TensorView());
  const TensorView x_d = to_device(h, x, DType::bf16);
  const TensorView ids_d = to_device(h, ids, DType::i32);
  Guard g(h);
  const TensorView w_d = ops::scratch_alloc(h.gpu, {t, k}, DType::f32);
  const TensorView chosen_d = ops::scratch_alloc(h.gpu, {t, k}, DType::i32);
  g.seal();
  ops::moe_route(h.gpu, x_d, ex->gpu.router, normalize, w_d, ids_d, replaying,
                 replaying ? chosen_d : TensorView());
  const Tensor w_got = to_host(h, w_d);
  o.checks.push_back(compare("weights", w_got, w_ref, test::kCudaMoeRoute));
  o.checks.push_back(
      expect_le("expert ids differing", ids_differing(to_host(h, ids_d), ids_ref), 0));
  if (replaying) {
    o.checks.push_back(
        expect_le("chosen ids differing", ids_differing(to_host(h, chosen_d), chosen_ref), 0));
    o.checks.push_back(g.verify({w_d, chosen_d}));
  } else {
    o.checks.push_back(g.verify({w_d}));
  }
  // Negative control: the weights of the other normalization.
  Tensor w_other = Tensor::empty({t, k}, DType::f32), ids_other = copy_of(ids);
  ops::moe_route(cpu.ctx, x, ex->cpu.router, !normalize, w_other, ids_other, replaying,
                 replaying ? Tensor::empty({t, k}, DType::i32).view() : TensorView());
  o.checks.push_back(must_exceed(
      compare("weights vs the other normalization", w_got, w_other, test::kCudaMoeRoute)));
}

void moe_experts_case(Harness& h, Outcome& o, int64_t t, int64_t e, int64_t k, int64_t hd,
                      int64_t inter, Fp8Scheme scheme, bool silu, int64_t rank) {
  auto ex = make_experts(h, e, hd, inter, scheme, 601);
  auto lora = rank > 0 ? make_lora(h, e, hd, inter, rank, 651) : std::make_unique<DeviceLora>();
  const Tensor x = ternary_values({t, hd}, 602, kInputAmax);
  Tensor ids, wt;
  imbalanced_routing(t, e, k, ids, wt);
  const ops::GatedActivation act =
      silu ? ops::GatedActivation::silu : ops::GatedActivation::gelu_tanh;
  CpuBf16 cpu;
  Tensor ref = Tensor::empty({t, hd}, DType::f32);
  ops::moe_experts(cpu.ctx, x, ex->cpu, act, wt, ids, ref, lora->cpu);
  const double s = combine_scale(cpu.ctx, x, ex->cpu, act, lora->cpu, ids, wt);
  const TensorView x_d = to_device(h, x, DType::bf16);
  const TensorView ids_d = to_device(h, ids, DType::i32);
  const TensorView wt_d = to_device(h, wt, DType::f32);
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {t, hd}, DType::bf16);
  g.seal();
  ops::moe_experts(h.gpu, x_d, ex->gpu, act, wt_d, ids_d, out, lora->gpu);
  const double bound = test::cuda_moe_experts_bound(k);
  const Tensor got = as_f32(h, out);
  o.checks.push_back(compare("out / S", got, ref, bound, s));
  o.checks.push_back(g.verify({out}));
  o.info = fmt::format("S {:.3g}, max |ref| {:.3g}", s, [&] {
    double m = 0;
    for (int64_t i = 0; i < ref.numel(); ++i)
      m = std::max(m, double(std::fabs(ref.ptr<float>()[i])));
    return m;
  }());
  // Negative controls: the routing weights not applied (all 1); each token given the next
  // token's experts (a wrong permutation).
  Tensor ones = Tensor::empty({t, k}, DType::f32);
  for (int64_t i = 0; i < t * k; ++i) ones.ptr<float>()[i] = 1.0f;
  const TensorView bad = ops::scratch_alloc(h.gpu, {t, hd}, DType::bf16);
  ops::moe_experts(h.gpu, x_d, ex->gpu, act, to_device(h, ones, DType::f32), ids_d, bad, lora->gpu);
  o.checks.push_back(must_exceed(compare("weights not applied", as_f32(h, bad), ref, bound, s)));
  if (t > 1) {
    Tensor shifted = Tensor::empty({t, k}, DType::i32);
    for (int64_t i = 0; i < t; ++i)
      std::memcpy(shifted.ptr<int32_t>() + i * k, ids.ptr<int32_t>() + ((i + 1) % t) * k,
                  size_t(k) * 4);
    ops::moe_experts(h.gpu, x_d, ex->gpu, act, wt_d, to_device(h, shifted, DType::i32), bad,
                     lora->gpu);
    o.checks.push_back(
        must_exceed(compare("experts of the next token", as_f32(h, bad), ref, bound, s)));
  }
  if (rank > 0) {  // the adapters left out
    ops::moe_experts(h.gpu, x_d, ex->gpu, act, wt_d, ids_d, bad);
    o.checks.push_back(must_exceed(compare("adapters left out", as_f32(h, bad), ref, bound, s)));
  }
}

void moe_graph_case(Harness& h, Outcome& o, Fp8Scheme scheme) {
  constexpr int64_t T = 8, E = 16, K = 4, H = 256, I = 96;
  auto ex = make_experts(h, E, H, I, scheme, 701);
  const Tensor x1 = ternary_values({T, H}, 702, kInputAmax);
  const Tensor x2 = ternary_values({T, H}, 703, kInputAmax);
  const TensorView x_d = to_device(h, x1, DType::bf16);
  const TensorView w_d = ops::scratch_alloc(h.gpu, {T, K}, DType::f32);
  const TensorView ids_d = ops::scratch_alloc(h.gpu, {T, K}, DType::i32);
  const TensorView out = ops::scratch_alloc(h.gpu, {T, H}, DType::bf16);
  auto layer = [&] {
    ops::moe_route(h.gpu, x_d, ex->gpu.router, true, w_d, ids_d);
    ops::moe_experts(h.gpu, x_d, ex->gpu, ops::GatedActivation::silu, w_d, ids_d, out);
  };
  layer();
  const Tensor eager1 = to_host(h, out), ids1 = to_host(h, ids_d);
  upload_into(h, x2, x_d);
  layer();
  const Tensor eager2 = to_host(h, out), ids2 = to_host(h, ids_d);
  upload_into(h, x1, x_d);
  h.dev->begin_capture();
  layer();
  CudaGraph graph = h.dev->end_capture();
  upload_into(h, x2, x_d);
  ops::fill(h.gpu, out, NAN);  // the replay must rewrite every output element
  graph.replay();
  const Tensor replayed = to_host(h, out);
  const auto differing = [](const Tensor& a, const Tensor& b) {
    return double(std::memcmp(a.view().data, b.view().data, a.nbytes()) != 0);
  };
  o.info = fmt::format("{} graph nodes, {} of {} expert ids differ between the inputs",
                       graph.nodes(), ids_differing(ids1, ids2), T * K);
  o.checks.push_back(
      expect_le("replay on x2 != eager on x2 (bit-exact)", differing(replayed, eager2), 0));
  // Negative control: the two inputs route differently, and the replay did not keep x1's.
  o.checks.push_back(must_exceed(
      expect_le("expert ids differing between x1 and x2", ids_differing(ids1, ids2), 0)));
  o.checks.push_back(
      must_exceed(expect_le("replay on x2 == eager on x1", differing(replayed, eager1), 0)));
}

void add_moe_cases(std::vector<OpCase>& c) {
  auto add = [&](std::string name, std::function<void(Harness&, Outcome&)> fn, bool quick) {
    c.push_back({std::move(name), std::move(fn), quick});
  };
  for (auto [e, k, hd] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 256}, {128, 8, 2048}})
    for (int64_t t : {1, 7, 64, 300})
      for (bool normalize : {true, false})
        add(
            fmtname("moe_route",
                    shape({{"T", t}, {"E", e}, {"k", k}, {"H", hd}, {"normalize", normalize}})),
            [=](Harness& h, Outcome& o) {
              moe_route_case(h, o, t, e, k, hd, normalize, MoeReplay::none);
            },
            t == 7 && e == 8);
  for (int64_t t : {7, 64, 300})
    for (MoeReplay r : {MoeReplay::all, MoeReplay::partly})
      add(
          fmtname("moe_route replay", shape({{"T", t},
                                             {"E", 128},
                                             {"k", 8},
                                             {"H", 2048},
                                             {"unrecorded_rows", r == MoeReplay::partly}})),
          [=](Harness& h, Outcome& o) { moe_route_case(h, o, t, 128, 8, 2048, true, r); }, t == 7);
  for (Fp8Scheme s : {Fp8Scheme::off, Fp8Scheme::row, Fp8Scheme::block, Fp8Scheme::tensor}) {
    for (int64_t t : {1, 7, 64, 300})
      add(
          fmtname("moe_experts", std::string(scheme_name(s)) + " " +
                                     shape({{"T", t}, {"E", 8}, {"k", 2}, {"H", 256}, {"I", 96}})),
          [=](Harness& h, Outcome& o) { moe_experts_case(h, o, t, 8, 2, 256, 96, s, true, 0); },
          t == 7);
    add(
        fmtname("moe_experts",
                std::string(scheme_name(s)) + " " +
                    shape({{"T", 300}, {"E", 16}, {"k", 4}, {"H", 512}, {"I", 160}})),
        [=](Harness& h, Outcome& o) { moe_experts_case(h, o, 300, 16, 4, 512, 160, s, true, 0); },
        false);
  }
  add(
      "moe_experts gelu_tanh row T=64 E=8 k=2 H=256 I=96",
      [](Harness& h, Outcome& o) {
        moe_experts_case(h, o, 64, 8, 2, 256, 96, Fp8Scheme::row, false, 0);
      },
      false);
  for (Fp8Scheme s : {Fp8Scheme::off, Fp8Scheme::row, Fp8Scheme::block})
    for (int64_t t : {1, 64})
      add(
          fmtname("moe_experts lora",
                  std::string(scheme_name(s)) + " " +
                      shape({{"T", t}, {"E", 8}, {"k", 2}, {"H", 256}, {"I", 96}, {"r", 8}})),
          [=](Harness& h, Outcome& o) { moe_experts_case(h, o, t, 8, 2, 256, 96, s, true, 8); },
          t == 64 && s == Fp8Scheme::row);
  for (Fp8Scheme s : {Fp8Scheme::off, Fp8Scheme::row})
    add(
        fmtname("moe_graph", std::string(scheme_name(s)) + " T=8 E=16 k=4"),
        [=](Harness& h, Outcome& o) { moe_graph_case(h, o, s); }, s == Fp8Scheme::row);
}

}  // namespace fp8rl::gpu_test
