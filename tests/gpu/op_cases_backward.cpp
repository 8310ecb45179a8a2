// Op cases of the backward ops (ops/backward.h): each CUDA op against the CPU reference on the
// same inputs (activations bf16-representable, gradients general f32), the saving forwards
// also against their plain CUDA forward bit for bit, gradients into guarded buffers, and a
// negative control per op (the op run with a term or an input that a bug would drop or
// change must exceed the bound). Bounds: tests/tolerances.h cuda_backward_bound,
// kCudaBf16OperandGemm.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "harness.h"
#include "model/rope.h"
#include "op_cases.h"
#include "ops/backward.h"
#include "ops/uniform_hash.h"
#include "tolerances.h"

namespace fp8rl::gpu_test {

using test::cuda_backward_bound;
using test::kCudaBf16Op;
using test::kCudaBf16OperandGemm;
using test::kCudaFp8GradientGemm;
using test::kCudaNormRope;
using test::kF32Eps;

namespace {

constexpr float kEps = 1e-6f;

// Host f32 values uniform in [-bound, bound] with all 24 bits (gradients are not bf16).
Tensor f32_values(Shape s, uint64_t seed, float bound = 1.0f) {
  Tensor t = Tensor::empty(s, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.ptr<float>()[i] = uniform_hash(seed, uint64_t(i), bound);
  return t;
}

// Positions pos0 + i and the frequencies of a head dim, on the host and on the device.
struct Rope {
  Tensor pos, freq;
  TensorView pos_d, freq_d;
};
Rope make_rope(Harness& h, int64_t t, int64_t d, int32_t pos0) {
  Rope r;
  r.pos = Tensor::empty({t}, DType::i32);
  for (int64_t i = 0; i < t; ++i) r.pos.ptr<int32_t>()[i] = pos0 + int32_t(i);
  RopeConfig rc;
  rc.theta = 1e6;
  const std::vector<float> f = rope_inv_freq(rc, d);
  r.freq = Tensor::empty({d / 2}, DType::f32);
  std::memcpy(r.freq.view().data, f.data(), f.size() * 4);
  r.pos_d = to_device(h, r.pos, DType::i32);
  r.freq_d = to_device(h, r.freq, DType::f32);
  return r;
}

}  // namespace

// ---- RMSNorm ------------------------------------------------------------------------------

void rms_norm_backward_case(Harness& h, Outcome& o, int64_t rows, int64_t d, bool plus_one,
                            bool alias) {
  const Tensor x = host_values({rows, d}, 301, 3.0f), w = host_values({d}, 302, 1.0f);
  const Tensor dy = f32_values({rows, d}, 303), dw0 = host_values({d}, 304);
  Tensor out_ref = Tensor::empty({rows, d}, DType::f32),
         inv_ref = Tensor::empty({rows}, DType::f32);
  Tensor dx_ref = Tensor::empty({rows, d}, DType::f32), dw_ref = copy_of(dw0);
  ops::rms_norm_save(h.cpu, x, w, kEps, plus_one, out_ref, inv_ref);
  ops::rms_norm_backward(h.cpu, x, w, inv_ref, plus_one, dy, dx_ref, dw_ref);

  const TensorView x_d = to_device(h, x, DType::bf16), w_d = to_device(h, w, DType::f32);
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {rows, d}, DType::bf16);
  const TensorView inv = ops::scratch_alloc(h.gpu, {rows}, DType::f32);
  const TensorView dy_d = ops::scratch_alloc(h.gpu, {rows, d}, DType::f32);
  const TensorView dx = alias ? dy_d : ops::scratch_alloc(h.gpu, {rows, d}, DType::f32);
  const TensorView dw = ops::scratch_alloc(h.gpu, {d}, DType::f32);
  g.seal();
  upload_into(h, dy, dy_d);
  upload_into(h, dw0, dw);
  ops::rms_norm_save(h.gpu, x_d, w_d, kEps, plus_one, out, inv);
  ops::rms_norm_backward(h.gpu, x_d, w_d, inv, plus_one, dy_d, dx, dw);
  o.checks.push_back(compare("out", as_f32(h, out), out_ref, kCudaBf16Op));
  o.checks.push_back(compare("inv_rms", as_f32(h, inv), inv_ref, cuda_backward_bound(d)));
  o.checks.push_back(compare("dx", as_f32(h, dx), dx_ref, cuda_backward_bound(d)));
  o.checks.push_back(compare("dw (+=)", as_f32(h, dw), dw_ref, cuda_backward_bound(rows * d)));
  std::vector<TensorView> outs = {out, inv, dx, dw};
  if (!alias) outs.push_back(dy_d);
  o.checks.push_back(g.verify(outs));
  // The saving forward writes rms_norm's bits.
  const TensorView out2 = ops::scratch_alloc(h.gpu, {rows, d}, DType::bf16);
  ops::rms_norm(h.gpu, x_d, w_d, kEps, plus_one, out2);
  o.checks.push_back(
      expect_le("out bytes != rms_norm (bit-exact)", bytes_differing(h, out, out2), 0));
  // Negative control: x = 0 with the true inverse RMS gives x_hat = 0, dx without its mean term.
  const TensorView zero = ops::scratch_alloc(h.gpu, {rows, d}, DType::bf16);
  const TensorView dx_bad = ops::scratch_alloc(h.gpu, {rows, d}, DType::f32);
  const TensorView dy2 = to_device(h, dy, DType::f32);
  ops::fill_zero(h.gpu, zero);
  ops::rms_norm_backward(h.gpu, zero, w_d, inv, plus_one, dy2, dx_bad);
  o.checks.push_back(
      must_exceed(compare("dx without x_hat", as_f32(h, dx_bad), dx_ref, cuda_backward_bound(d))));
}

void rms_norm_rope_backward_case(Harness& h, Outcome& o, int64_t t, int64_t heads, int64_t d,
                                 bool norm, bool plus_one, int32_t pos0, bool alias) {
  const Tensor x = host_values({t, heads, d}, 311, 3.0f), w = host_values({d}, 312, 1.0f);
  const Tensor dy = f32_values({t, heads, d}, 313), dw0 = host_values({d}, 314);
  const Rope rp = make_rope(h, t, d, pos0);
  const TensorView w_h = norm ? w.view() : TensorView();
  Tensor out_ref = Tensor::empty({t, heads, d}, DType::f32);
  Tensor inv_ref = Tensor::zeros({t * heads}, DType::f32);
  Tensor dx_ref = Tensor::empty({t, heads, d}, DType::f32), dw_ref = copy_of(dw0);
  ops::rms_norm_rope_save(h.cpu, x, w_h, kEps, plus_one, rp.pos, rp.freq, out_ref, inv_ref);
  ops::rms_norm_rope_backward(h.cpu, x, w_h, inv_ref, plus_one, rp.pos, rp.freq, dy, dx_ref,
                              norm ? dw_ref.view() : TensorView());

  const TensorView x_d = to_device(h, x, DType::bf16);
  const TensorView w_d = norm ? to_device(h, w, DType::f32) : TensorView();
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {t, heads, d}, DType::bf16);
  const TensorView inv = ops::scratch_alloc(h.gpu, {t * heads}, DType::f32);
  const TensorView dy_d = ops::scratch_alloc(h.gpu, {t, heads, d}, DType::f32);
  const TensorView dx = alias ? dy_d : ops::scratch_alloc(h.gpu, {t, heads, d}, DType::f32);
  const TensorView dw = ops::scratch_alloc(h.gpu, {d}, DType::f32);
  g.seal();
  upload_into(h, dy, dy_d);
  upload_into(h, dw0, dw);
  ops::fill_zero(h.gpu, inv);  // not written without the norm
  ops::rms_norm_rope_save(h.gpu, x_d, w_d, kEps, plus_one, rp.pos_d, rp.freq_d, out, inv);
  ops::rms_norm_rope_backward(h.gpu, x_d, w_d, inv, plus_one, rp.pos_d, rp.freq_d, dy_d, dx,
                              norm ? dw : TensorView());
  o.checks.push_back(compare("out", as_f32(h, out), out_ref, norm ? kCudaNormRope : kCudaBf16Op));
  if (norm) o.checks.push_back(compare("inv_rms", as_f32(h, inv), inv_ref, cuda_backward_bound(d)));
  o.checks.push_back(compare("dx", as_f32(h, dx), dx_ref, cuda_backward_bound(d)));
  o.checks.push_back(compare("dw (+=)", as_f32(h, dw), dw_ref, cuda_backward_bound(t * heads * d)));
  std::vector<TensorView> outs = {out, inv, dx, dw};
  if (!alias) outs.push_back(dy_d);
  o.checks.push_back(g.verify(outs));
  const TensorView out2 = ops::scratch_alloc(h.gpu, {t, heads, d}, DType::bf16);
  ops::rms_norm_rope(h.gpu, x_d, w_d, kEps, plus_one, rp.pos_d, rp.freq_d, out2);
  o.checks.push_back(
      expect_le("out bytes != rms_norm_rope (bit-exact)", bytes_differing(h, out, out2), 0));
  if (!norm) {  // the composition is rope_backward itself
    const TensorView r = to_device(h, dy, DType::f32);
    ops::rope_backward(h.gpu, r, rp.pos_d, rp.freq_d);
    o.checks.push_back(
        expect_le("dx bytes != rope_backward (bit-exact)", bytes_differing(h, r, dx), 0));
  }
  // Negative control: positions off by one (the angles of the next token).
  const Rope shifted = make_rope(h, t, d, pos0 + 1);
  const TensorView dx_bad = ops::scratch_alloc(h.gpu, {t, heads, d}, DType::f32);
  const TensorView dy2 = to_device(h, dy, DType::f32);
  ops::rms_norm_rope_backward(h.gpu, x_d, w_d, inv, plus_one, shifted.pos_d, shifted.freq_d, dy2,
                              dx_bad);
  o.checks.push_back(must_exceed(
      compare("dx at positions + 1", as_f32(h, dx_bad), dx_ref, cuda_backward_bound(d))));
}

// ---- gated activations, softcap, dropout ---------------------------------------------------

void gated_backward_case(Harness& h, Outcome& o, int64_t t, int64_t i, bool silu, bool alias) {
  const Tensor gate = host_values({t, i}, 321, 4.0f), up = host_values({t, i}, 322, 2.0f);
  const Tensor dout = f32_values({t, i}, 323);
  Tensor dg_ref = Tensor::empty({t, i}, DType::f32), du_ref = Tensor::empty({t, i}, DType::f32);
  auto run = [&](Context& c, const TensorView& g, const TensorView& u, const TensorView& d,
                 const TensorView& dg, const TensorView& du) {
    if (silu)
      ops::silu_mul_backward(c, g, u, d, dg, du);
    else
      ops::gelu_tanh_mul_backward(c, g, u, d, dg, du);
  };
  run(h.cpu, gate, up, dout, dg_ref, du_ref);
  const TensorView gate_d = to_device(h, gate, DType::bf16), up_d = to_device(h, up, DType::bf16);
  Guard g(h);
  const TensorView dout_d = ops::scratch_alloc(h.gpu, {t, i}, DType::f32);
  const TensorView dg = alias ? dout_d : ops::scratch_alloc(h.gpu, {t, i}, DType::f32);
  const TensorView du = ops::scratch_alloc(h.gpu, {t, i}, DType::f32);
  g.seal();
  upload_into(h, dout, dout_d);
  run(h.gpu, gate_d, up_d, dout_d, dg, du);
  o.checks.push_back(compare("dgate", as_f32(h, dg), dg_ref, cuda_backward_bound(1)));
  o.checks.push_back(compare("dup", as_f32(h, du), du_ref, cuda_backward_bound(1)));
  std::vector<TensorView> outs = {dg, du};
  if (!alias) outs.push_back(dout_d);
  o.checks.push_back(g.verify(outs));
  // Negative control: gate and up swapped.
  const TensorView d2 = to_device(h, dout, DType::f32);
  const TensorView dg_bad = ops::scratch_alloc(h.gpu, {t, i}, DType::f32);
  const TensorView du_bad = ops::scratch_alloc(h.gpu, {t, i}, DType::f32);
  run(h.gpu, up_d, gate_d, d2, dg_bad, du_bad);
  o.checks.push_back(must_exceed(compare("dgate with gate and up swapped", as_f32(h, dg_bad),
                                         dg_ref, cuda_backward_bound(1))));
}

void softcap_backward_case(Harness& h, Outcome& o, int64_t t, int64_t v, bool alias) {
  const float cap = 30.0f;
  Tensor y = host_values({t, v}, 331, 3.0f * cap);
  ops::softcap(h.cpu, y, cap, ops::Output::f32);  // y = cap tanh(x / cap), an fp32 output
  const Tensor dy = f32_values({t, v}, 332);
  Tensor dx_ref = Tensor::empty({t, v}, DType::f32);
  ops::softcap_backward(h.cpu, y, cap, dy, dx_ref);
  const TensorView y_d = to_device(h, y, DType::f32);
  Guard g(h);
  const TensorView dy_d = ops::scratch_alloc(h.gpu, {t, v}, DType::f32);
  const TensorView dx = alias ? dy_d : ops::scratch_alloc(h.gpu, {t, v}, DType::f32);
  g.seal();
  upload_into(h, dy, dy_d);
  ops::softcap_backward(h.gpu, y_d, cap, dy_d, dx);
  o.checks.push_back(compare("dx", as_f32(h, dx), dx_ref, cuda_backward_bound(1)));
  std::vector<TensorView> outs = {dx};
  if (!alias) outs.push_back(dy_d);
  o.checks.push_back(g.verify(outs));
  // Negative control: y = 0 gives the factor 1 (no derivative of tanh).
  const TensorView zero = ops::scratch_alloc(h.gpu, {t, v}, DType::f32);
  const TensorView dx_bad = ops::scratch_alloc(h.gpu, {t, v}, DType::f32);
  ops::fill_zero(h.gpu, zero);
  ops::softcap_backward(h.gpu, zero, cap, to_device(h, dy, DType::f32), dx_bad);
  o.checks.push_back(
      must_exceed(compare("dx without tanh'", as_f32(h, dx_bad), dx_ref, cuda_backward_bound(1))));
}

void lora_dropout_case(Harness& h, Outcome& o, int64_t m, int64_t k, float p, bool in_place) {
  const Tensor x = host_values({m, k}, 341, 2.0f);
  const ops::LoraDropout drop{p, 77};
  Tensor ref = Tensor::empty({m, k}, DType::f32);
  ops::lora_dropout(h.cpu, x, drop, ref);
  Guard g(h);
  const TensorView x_d = ops::scratch_alloc(h.gpu, {m, k}, DType::bf16);
  const TensorView out = in_place ? x_d : ops::scratch_alloc(h.gpu, {m, k}, DType::bf16);
  g.seal();
  upload_into(h, x, x_d);
  ops::lora_dropout(h.gpu, x_d, drop, out);
  // x * 1 / (1 - p) rounded once to bf16; a mask that differs anywhere is an O(1) error.
  o.checks.push_back(compare("out", as_f32(h, out), ref, kCudaBf16Op));
  std::vector<TensorView> outs = {out};
  if (!in_place) outs.push_back(x_d);
  o.checks.push_back(g.verify(outs));
  if (p > 0) {  // negative control: another seed's mask
    const TensorView bad = ops::scratch_alloc(h.gpu, {m, k}, DType::bf16);
    ops::lora_dropout(h.gpu, to_device(h, x, DType::bf16), {p, 78}, bad);
    o.checks.push_back(must_exceed(compare("out with seed + 1", as_f32(h, bad), ref, kCudaBf16Op)));
  }
}

// ---- linear layers and LoRA ------------------------------------------------------------------

void linear_backward_input_case(Harness& h, Outcome& o, int64_t m, int64_t n, int64_t k,
                                Fp8Scheme scheme, bool accumulate) {
  const ActScaling act = scheme == Fp8Scheme::off     ? ActScaling::none
                         : scheme == Fp8Scheme::block ? ActScaling::group
                         : scheme == Fp8Scheme::row   ? ActScaling::token
                                                      : ActScaling::tensor;
  auto l = make_linear(h, n, k, scheme, act, false, 351);
  const Tensor dy = f32_values({m, n}, 352), dx0 = host_values({m, k}, 353);
  Tensor ref = accumulate ? copy_of(dx0) : Tensor::empty({m, k}, DType::f32);
  ops::linear_backward_input(h.cpu, dy, l->cpu, ref, accumulate);
  const TensorView dy_d = to_device(h, dy, DType::f32);
  Guard g(h);
  const TensorView dx = ops::scratch_alloc(h.gpu, {m, k}, DType::f32);
  g.seal();
  if (accumulate) upload_into(h, dx0, dx);
  ops::linear_backward_input(h.gpu, dy_d, l->gpu, dx, accumulate);
  // FP8-row weights whose shape the FP8 tensor cores take run the FP8 path (dY in e4m3).
  const bool fp8_path = scheme == Fp8Scheme::row && n % 16 == 0 && k % 16 == 0 &&
                        h.dev->gemm_path(Fp8Scheme::row).find("OUTER_VEC") != std::string::npos;
  const double bound = fp8_path ? kCudaFp8GradientGemm : kCudaBf16OperandGemm;
  o.checks.push_back(compare(fp8_path ? "dx (FP8 path)" : "dx", as_f32(h, dx), ref, bound));
  o.checks.push_back(g.verify({dx}));
  {  // dy rounded once by gemm_gradient: the reference path's rounding, so the same bits there
    ops::ScratchScope scope(h.gpu);
    const TensorView shared = to_device(h, dx0, DType::f32);
    ops::linear_backward_input(h.gpu, ops::gemm_gradient(h.gpu, dy_d), l->gpu, shared, accumulate);
    o.checks.push_back(compare("dx, dy from gemm_gradient", as_f32(h, shared),
                               fp8_path ? ref : as_f32(h, dx), fp8_path ? bound : 0.0));
  }
  if (fp8_path)  // Control: the FP8 path ran (its e4m3 dY errs beyond the bf16 path's bound).
    o.checks.push_back(must_exceed(compare("dx (FP8 path) against the bf16 path's bound",
                                           as_f32(h, dx), ref, kCudaBf16OperandGemm)));
  const TensorView bad = to_device(h, dx0, DType::f32);
  if (scheme != Fp8Scheme::off) {
    // Negative control: the codes without their scales.
    LinearWeight unscaled = l->gpu;
    unscaled.scales = ops::scratch_alloc(h.gpu, l->gpu.scales.shape, DType::f32);
    ops::fill(h.gpu, unscaled.scales, 1.0f);
    ops::linear_backward_input(h.gpu, dy_d, unscaled, bad, accumulate);
    o.checks.push_back(
        must_exceed(compare("dx without the weight scales", as_f32(h, bad), ref, bound)));
  } else if (accumulate) {
    // Negative control: written instead of accumulated.
    ops::linear_backward_input(h.gpu, dy_d, l->gpu, bad, false);
    o.checks.push_back(
        must_exceed(compare("dx not accumulated", as_f32(h, bad), ref, kCudaBf16OperandGemm)));
  }
}

void lora_backward_case(Harness& h, Outcome& o, int64_t m, int64_t k, int64_t n, int64_t r, float p,
                        bool with_dx) {
  const float scale = 2.0f;
  const ops::LoraDropout drop{p, 91};
  const Tensor x = host_values({m, k}, 361, 2.0f);
  const Tensor a = f32_values({r, k}, 362, 1.0f / std::sqrt(float(k)));
  const Tensor b = f32_values({n, r}, 363, 0.5f);
  const Tensor dy = f32_values({m, n}, 364);
  const Tensor dx0 = host_values({m, k}, 365), da0 = host_values({r, k}, 366),
               db0 = host_values({n, r}, 367);
  Tensor dx_ref = copy_of(dx0), da_ref = copy_of(da0), db_ref = copy_of(db0);
  ops::lora_backward(h.cpu, x, a, b, scale, drop, dy, with_dx ? dx_ref.view() : TensorView(),
                     da_ref, db_ref);
  const TensorView x_d = to_device(h, x, DType::bf16), a_d = to_device(h, a, DType::f32),
                   b_d = to_device(h, b, DType::f32), dy_d = to_device(h, dy, DType::f32);
  Guard g(h);
  const TensorView dx = ops::scratch_alloc(h.gpu, {m, k}, DType::f32);
  const TensorView da = ops::scratch_alloc(h.gpu, {r, k}, DType::f32);
  const TensorView db = ops::scratch_alloc(h.gpu, {n, r}, DType::f32);
  g.seal();
  upload_into(h, dx0, dx);
  upload_into(h, da0, da);
  upload_into(h, db0, db);
  ops::lora_backward(h.gpu, x_d, a_d, b_d, scale, drop, dy_d, with_dx ? dx : TensorView(), da, db);
  // bf16 operands and intermediates (tests/tolerances.h kCudaLoraBackward).
  const double bound = test::kCudaLoraBackward;
  if (with_dx) o.checks.push_back(compare("dx (+=)", as_f32(h, dx), dx_ref, bound));
  o.checks.push_back(compare("dA (+=)", as_f32(h, da), da_ref, bound));
  o.checks.push_back(compare("dB (+=)", as_f32(h, db), db_ref, bound));
  o.checks.push_back(g.verify({dx, da, db}));
  {  // dy rounded once by gemm_gradient (the model's backward shares it with the base's dx)
    ops::ScratchScope scope(h.gpu);
    const TensorView dy_bf = ops::gemm_gradient(h.gpu, dy_d);
    const TensorView sx = to_device(h, dx0, DType::f32), sa = to_device(h, da0, DType::f32),
                     sb = to_device(h, db0, DType::f32);
    ops::lora_backward(h.gpu, x_d, a_d, b_d, scale, drop, dy_bf, with_dx ? sx : TensorView(), sa,
                       sb);
    if (with_dx)
      o.checks.push_back(compare("dx, dy from gemm_gradient", as_f32(h, sx), dx_ref, bound));
    o.checks.push_back(compare("dA, dy from gemm_gradient", as_f32(h, sa), da_ref, bound));
    o.checks.push_back(compare("dB, dy from gemm_gradient", as_f32(h, sb), db_ref, bound));
  }
  // Negative control: without the forward's dropout mask, or (p = 0) without the scale.
  const TensorView bx = to_device(h, dx0, DType::f32), ba = to_device(h, da0, DType::f32),
                   bb = to_device(h, db0, DType::f32);
  const bool no_mask = p > 0;
  ops::lora_backward(h.gpu, x_d, a_d, b_d, no_mask ? scale : 1.0f,
                     no_mask ? ops::LoraDropout{} : drop, dy_d, bx, ba, bb);
  const std::string how = no_mask ? " without the dropout mask" : " without the scale";
  if (with_dx) o.checks.push_back(must_exceed(compare("dx" + how, as_f32(h, bx), dx_ref, bound)));
  o.checks.push_back(must_exceed(compare("dA" + how, as_f32(h, ba), da_ref, bound)));
}

// LoRA's up projection accumulated into the base output: out (bf16) += alpha x W^T. cuBLASLt's
// epilogue may round alpha x W^T to bf16 before adding C: two roundings of at most 2^-8 of
// their values (measured 2.2-2.5 2^-9 of max |ref|, above what one rounding can give), so
// twice kCudaBf16Op. Control: alpha ignored.
void linear_accumulate_case(Harness& h, Outcome& o, int64_t m, int64_t n, int64_t k) {
  const float alpha = 2.0f;
  auto l = make_linear(h, n, k, Fp8Scheme::off, ActScaling::none, false, 371);
  const Tensor x = host_values({m, k}, 372, 2.0f), out0 = host_values({m, n}, 373, 4.0f);
  Tensor ref = copy_of(out0);
  ops::linear_accumulate(h.cpu, x, l->cpu, alpha, ref);
  const TensorView x_d = to_device(h, x, DType::bf16);
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {m, n}, DType::bf16);
  g.seal();
  upload_into(h, out0, out);
  ops::linear_accumulate(h.gpu, x_d, l->gpu, alpha, out);
  o.checks.push_back(compare("out (+=)", as_f32(h, out), ref, 2 * kCudaBf16Op));
  o.checks.push_back(g.verify({out}));
  const TensorView bad = to_device(h, out0, DType::bf16);
  ops::linear_accumulate(h.gpu, x_d, l->gpu, 1.0f, bad);
  o.checks.push_back(
      must_exceed(compare("out without alpha", as_f32(h, bad), ref, 2 * kCudaBf16Op)));
}

// ---- lm_head cross-entropy ---------------------------------------------------------------------

void lm_head_cross_entropy_case(Harness& h, Outcome& o, int64_t t, int64_t v, int64_t hd,
                                Fp8Scheme scheme, float softcap, float temperature,
                                int64_t chunk_rows) {
  const ActScaling act = scheme == Fp8Scheme::off     ? ActScaling::none
                         : scheme == Fp8Scheme::block ? ActScaling::group
                                                      : ActScaling::token;
  auto l = make_linear(h, v, hd, scheme, act, false, 381);
  const Tensor x = host_values({t, hd}, 382, 2.0f);
  Tensor targets = Tensor::empty({t}, DType::i32);
  const std::vector<int32_t> ids = random_ids(t, v, 383);
  for (int64_t i = 0; i < t; ++i)
    targets.ptr<int32_t>()[i] = i % 7 == 3 ? ops::kIgnoreIndex : ids[size_t(i)];
  const Tensor dloss = f32_values({t}, 384);
  const ops::CrossEntropyParams p{temperature, softcap, chunk_rows};
  Tensor loss_ref = Tensor::empty({t}, DType::f32), lp_ref = Tensor::empty({t}, DType::f32),
         lse_ref = Tensor::empty({t}, DType::f32), ent_ref = Tensor::empty({t}, DType::f32),
         dx_ref = Tensor::empty({t, hd}, DType::f32);
  ops::lm_head_cross_entropy(h.cpu, x, l->cpu, targets, p, loss_ref, lp_ref, lse_ref, ent_ref);
  ops::lm_head_cross_entropy_backward(h.cpu, x, l->cpu, targets, p, lse_ref, dloss, dx_ref);
  // The bound on the scaled logits z, absolute: the GEMM's (relative to max |raw logit|),
  // through the softcap (1-Lipschitz) and 1 / temperature; and the range of z.
  Tensor raw = Tensor::empty({t, v}, DType::f32);
  ops::linear(h.cpu, x, l->cpu, raw, ops::Output::f32);
  double max_raw = 0, zmin = INFINITY, zmax = -INFINITY;
  for (int64_t i = 0; i < raw.numel(); ++i) {
    const double r = raw.ptr<float>()[i];
    const double z = (softcap > 0 ? softcap * std::tanh(r / softcap) : r) / temperature;
    max_raw = std::max(max_raw, std::fabs(r));
    zmin = std::min(zmin, z);
    zmax = std::max(zmax, z);
  }
  const double gemm = scheme == Fp8Scheme::off ? test::cuda_f32_gemm_bound(hd) : test::kCudaFp8Gemm;
  const double ez = gemm * max_raw / temperature;

  const TensorView x_d = to_device(h, x, DType::bf16), tg_d = to_device(h, targets, DType::i32),
                   dloss_d = to_device(h, dloss, DType::f32);
  Guard g(h);
  const TensorView loss = ops::scratch_alloc(h.gpu, {t}, DType::f32);
  const TensorView lp = ops::scratch_alloc(h.gpu, {t}, DType::f32);
  const TensorView lse = ops::scratch_alloc(h.gpu, {t}, DType::f32);
  const TensorView ent = ops::scratch_alloc(h.gpu, {t}, DType::f32);
  const TensorView dx = ops::scratch_alloc(h.gpu, {t, hd}, DType::f32);
  g.seal();
  ops::lm_head_cross_entropy(h.gpu, x_d, l->gpu, tg_d, p, loss, lp, lse, ent);
  ops::lm_head_cross_entropy_backward(h.gpu, x_d, l->gpu, tg_d, p, lse, dloss_d, dx);
  o.info = h.dev->gemm_path(scheme);
  // lse is 1-Lipschitz in max |dz|, logprob = z_t - lse moves by 2 ez, the entropy
  // lse - sum p z by ez + |sum dp z| <= ez (1 + 2 range z); dx: the bf16 operand GEMM plus the
  // relative change 2 ez of each probability, doubled.
  o.checks.push_back(compare("lse (abs)", as_f32(h, lse), lse_ref, ez, 1.0));
  o.checks.push_back(compare("logprob (abs)", as_f32(h, lp), lp_ref, 2 * ez, 1.0));
  o.checks.push_back(compare("loss (abs)", as_f32(h, loss), loss_ref, 2 * ez, 1.0));
  o.checks.push_back(
      compare("entropy (abs)", as_f32(h, ent), ent_ref, ez * (2 + 2 * (zmax - zmin)), 1.0));
  o.checks.push_back(compare("dx", as_f32(h, dx), dx_ref, kCudaBf16OperandGemm + 4 * ez));
  o.checks.push_back(g.verify({loss, lp, lse, ent, dx}));
  // Negative controls: the forward at twice the temperature; the backward without dloss.
  ops::CrossEntropyParams hot = p;
  hot.temperature = 2 * temperature;
  const TensorView lse_bad = ops::scratch_alloc(h.gpu, {t}, DType::f32);
  const TensorView tmp = ops::scratch_alloc(h.gpu, {t}, DType::f32);
  ops::lm_head_cross_entropy(h.gpu, x_d, l->gpu, tg_d, hot, tmp, tmp, lse_bad);
  o.checks.push_back(
      must_exceed(compare("lse at twice the temperature", as_f32(h, lse_bad), lse_ref, ez, 1.0)));
  const TensorView ones = ops::scratch_alloc(h.gpu, {t}, DType::f32);
  const TensorView dx_bad = ops::scratch_alloc(h.gpu, {t, hd}, DType::f32);
  ops::fill(h.gpu, ones, 1.0f);
  ops::lm_head_cross_entropy_backward(h.gpu, x_d, l->gpu, tg_d, p, lse, ones, dx_bad);
  o.checks.push_back(must_exceed(
      compare("dx without dloss", as_f32(h, dx_bad), dx_ref, kCudaBf16OperandGemm + 4 * ez)));
}

// ---- attention ------------------------------------------------------------------------------

// Full-prefill sequences of the given lengths over a paged bf16 pool (blocks of 16 in a
// shuffled order, unused slots NaN), two padding rows after them. The saving forward: out
// equals the CUDA paged_attention bit for bit, lse the CPU's within the fp32 bound (absolute,
// relative to max(1, |lse|)). The backward gets the same out (the CPU's, rounded to bf16 for
// both) and the same lse on both devices. The reference kernels differ from the CPU in fp32
// order only: cuda_backward_bound of the longest chain (context x D x group, test_backward's
// count); the tiled kernels round dout, P and dS to bf16: kCudaAttentionBackward. Negative
// controls: lse + 1, and the case's feature dropped (window 0, softcap 0, or else the query
// scale x 1.1, as a wrong Gemma query scalar would be).
void attention_backward_case(Harness& h, Outcome& o, const std::vector<int64_t>& lens, int64_t hq,
                             int64_t hkv, int64_t d, int64_t window, float softcap) {
  constexpr int64_t kBlock = 16, kPadding = 2;
  const int64_t n_seqs = int64_t(lens.size());
  int64_t width = 1, blocks = 1, rows = 0, max_len = 1;
  for (int64_t n : lens) {
    width = std::max(width, ceil_div(n, kBlock));
    blocks += ceil_div(n, kBlock);
    rows += n;
    max_len = std::max(max_len, n);
  }
  const int64_t t = rows + kPadding;
  std::vector<int32_t> perm(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) perm[size_t(i)] = int32_t(i);
  std::sort(perm.begin(), perm.end(), [](int32_t a, int32_t b) {
    return uniform_hash(93, uint64_t(a), 1.0f) < uniform_hash(93, uint64_t(b), 1.0f);
  });
  Tensor tables = Tensor::zeros({n_seqs, width}, DType::i32),
         cu = Tensor::empty({n_seqs + 1}, DType::i32), ctx = Tensor::empty({n_seqs}, DType::i32),
         mapping = Tensor::empty({t}, DType::i32);
  size_t next = 0;
  cu.ptr<int32_t>()[0] = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t n = lens[size_t(s)];
    int32_t* table = tables.ptr<int32_t>() + s * width;
    for (int64_t b = 0; b < ceil_div(n, kBlock); ++b) table[b] = perm[next++];
    for (int64_t j = 0; j < n; ++j)
      mapping.ptr<int32_t>()[cu.ptr<int32_t>()[s] + j] =
          table[j / kBlock] * int32_t(kBlock) + int32_t(j % kBlock);
    cu.ptr<int32_t>()[s + 1] = cu.ptr<int32_t>()[s] + int32_t(n);
    ctx.ptr<int32_t>()[s] = int32_t(n);
  }
  mapping.ptr<int32_t>()[rows] = mapping.ptr<int32_t>()[rows + 1] = -1;
  const Tensor k = host_values({t, hkv, d}, 391, 3.0f), v = host_values({t, hkv, d}, 392, 2.0f);
  const Tensor q = host_values({t, hq, d}, 393, 3.0f);
  const Tensor dout = f32_values({t, hq, d}, 394);
  Tensor kp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32),
         vp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32);
  std::fill(kp.ptr<float>(), kp.ptr<float>() + kp.numel(), NAN);
  std::fill(vp.ptr<float>(), vp.ptr<float>() + vp.numel(), NAN);
  ops::store_kv(h.cpu, k, v, mapping, kp, vp);
  ops::PagedBatch batch;
  batch.cu_q = cu;
  batch.context_lens = ctx;
  batch.block_tables = tables;
  batch.num_seqs = n_seqs;
  batch.max_query_len = batch.max_context_len = max_len;
  ops::AttentionParams p;
  p.scale = 1.0f / std::sqrt(float(d));
  p.softcap = softcap;
  p.window = window;
  Tensor out_ref = Tensor::empty({t, hq, d}, DType::f32),
         lse_ref = Tensor::empty({t, hq}, DType::f32);
  ops::paged_attention_lse(h.cpu, q, kp, vp, batch, p, out_ref, lse_ref);
  Tensor out_bf = copy_of(out_ref);  // the out both backwards read: bf16 values
  for (int64_t i = 0; i < out_bf.numel(); ++i)
    out_bf.ptr<float>()[i] = round_to_bf16(out_bf.ptr<float>()[i]);
  Tensor dq_ref = Tensor::empty({t, hq, d}, DType::f32),
         dk_ref = Tensor::empty({t, hkv, d}, DType::f32),
         dv_ref = Tensor::empty({t, hkv, d}, DType::f32);
  ops::paged_attention_backward(h.cpu, q, kp, vp, batch, p, out_bf, lse_ref, dout, dq_ref, dk_ref,
                                dv_ref);

  const TensorView q_d = to_device(h, q, DType::bf16), k_d = to_device(h, k, DType::bf16),
                   v_d = to_device(h, v, DType::bf16), map_d = to_device(h, mapping, DType::i32);
  const TensorView kp_d = to_device(h, kp, DType::bf16), vp_d = to_device(h, vp, DType::bf16);
  ops::PagedBatch batch_d = batch;
  batch_d.cu_q = to_device(h, cu, DType::i32);
  batch_d.context_lens = to_device(h, ctx, DType::i32);
  batch_d.block_tables = to_device(h, tables, DType::i32);
  ops::store_kv(h.gpu, k_d, v_d, map_d, kp_d, vp_d);
  const TensorView outb_d = to_device(h, out_bf, DType::bf16),
                   lse_in = to_device(h, lse_ref, DType::f32),
                   dout_d = to_device(h, dout, DType::f32);
  Guard g(h);
  const TensorView out = ops::scratch_alloc(h.gpu, {t, hq, d}, DType::bf16);
  const TensorView lse = ops::scratch_alloc(h.gpu, {t, hq}, DType::f32);
  const TensorView dq = ops::scratch_alloc(h.gpu, {t, hq, d}, DType::f32);
  const TensorView dk = ops::scratch_alloc(h.gpu, {t, hkv, d}, DType::f32);
  const TensorView dv = ops::scratch_alloc(h.gpu, {t, hkv, d}, DType::f32);
  g.seal();
  ops::paged_attention_lse(h.gpu, q_d, kp_d, vp_d, batch_d, p, out, lse);
  ops::paged_attention_backward(h.gpu, q_d, kp_d, vp_d, batch_d, p, outb_d, lse_in, dout_d, dq, dk,
                                dv);
  const Tensor lse_h = as_f32(h, lse);
  double lse_err = 0;
  for (int64_t i = 0; i < t * hq; ++i)
    lse_err = std::max(lse_err, std::fabs(double(lse_h.ptr<float>()[i]) - lse_ref.ptr<float>()[i]) /
                                    std::max(1.0, std::fabs(double(lse_ref.ptr<float>()[i]))));
  o.checks.push_back(expect_le("lse (abs / max(1, |lse|))", lse_err, test::cuda_lse_bound(d)));
  o.checks.push_back(compare("out", as_f32(h, out), out_ref, test::kCudaAttention));
  // Every head dim and the 16-slot blocks here run the tiled kernels unless the harness asks
  // for the reference ones.
  const bool tiled = h.tiled_attention_backward;
  o.info = tiled ? "tiled mma.sync" : "reference kernels";
  const double bound =
      tiled ? test::kCudaAttentionBackward : cuda_backward_bound(max_len * d * (hq / hkv));
  o.checks.push_back(compare("dq", as_f32(h, dq), dq_ref, bound));
  o.checks.push_back(compare("dk", as_f32(h, dk), dk_ref, bound));
  o.checks.push_back(compare("dv", as_f32(h, dv), dv_ref, bound));
  o.checks.push_back(g.verify({out, lse, dq, dk, dv}));
  const TensorView out2 = ops::scratch_alloc(h.gpu, {t, hq, d}, DType::bf16);
  ops::paged_attention(h.gpu, q_d, kp_d, vp_d, batch_d, p, out2);
  o.checks.push_back(
      expect_le("out bytes != paged_attention (bit-exact)", bytes_differing(h, out, out2), 0));
  // Deterministic (no atomics): a second run writes the same bits.
  const TensorView dq2 = ops::scratch_alloc(h.gpu, {t, hq, d}, DType::f32),
                   dk2 = ops::scratch_alloc(h.gpu, {t, hkv, d}, DType::f32),
                   dv2 = ops::scratch_alloc(h.gpu, {t, hkv, d}, DType::f32);
  ops::paged_attention_backward(h.gpu, q_d, kp_d, vp_d, batch_d, p, outb_d, lse_in, dout_d, dq2,
                                dk2, dv2);
  o.checks.push_back(expect_le("dq, dk, dv bytes differing between two runs",
                               double(bytes_differing(h, dq, dq2) + bytes_differing(h, dk, dk2) +
                                      bytes_differing(h, dv, dv2)),
                               0));
  // Negative control: every probability scaled by 1/e (lse + 1).
  Tensor lse_bad = copy_of(lse_ref);
  for (int64_t i = 0; i < lse_bad.numel(); ++i) lse_bad.ptr<float>()[i] += 1.0f;
  const TensorView dq_bad = ops::scratch_alloc(h.gpu, {t, hq, d}, DType::f32),
                   dk_bad = ops::scratch_alloc(h.gpu, {t, hkv, d}, DType::f32),
                   dv_bad = ops::scratch_alloc(h.gpu, {t, hkv, d}, DType::f32);
  ops::paged_attention_backward(h.gpu, q_d, kp_d, vp_d, batch_d, p, outb_d,
                                to_device(h, lse_bad, DType::f32), dout_d, dq_bad, dk_bad, dv_bad);
  o.checks.push_back(must_exceed(compare("dv with lse + 1", as_f32(h, dv_bad), dv_ref, bound)));
  o.checks.push_back(must_exceed(compare("dq with lse + 1", as_f32(h, dq_bad), dq_ref, bound)));
  ops::AttentionParams off = p;
  std::string dropped;
  if (window > 0) {
    off.window = 0;
    dropped = "window 0";
  } else if (softcap > 0) {
    off.softcap = 0;
    dropped = "softcap 0";
  } else {
    off.scale = p.scale * 1.1f;
    dropped = "scale x 1.1";
  }
  ops::paged_attention_backward(h.gpu, q_d, kp_d, vp_d, batch_d, off, outb_d, lse_in, dout_d,
                                dq_bad, dk_bad, dv_bad);
  o.checks.push_back(must_exceed(compare("dk with " + dropped, as_f32(h, dk_bad), dk_ref, bound)));
  o.checks.push_back(must_exceed(compare("dq with " + dropped, as_f32(h, dq_bad), dq_ref, bound)));
}

// ---- the registry ------------------------------------------------------------------------

// Ragged token counts (kTokens); hidden sizes with a scalar tail (200) and a large row (4096);
// q/k head dims 64/128/256 and 72; MLP widths as the forward's cases; linears of every FP8
// scheme with K not a multiple of 128 (block edges); LoRA ranks 8 and 16 with and without
// dropout.
void add_backward_cases(std::vector<OpCase>& c) {
  auto add = [&](std::string name, std::function<void(Harness&, Outcome&)> fn, bool quick) {
    c.push_back({std::move(name), std::move(fn), quick});
  };
  for (int64_t t : kTokens)
    for (int64_t d : {64, 200, 4096})
      for (bool plus_one : {false, true}) {
        const bool alias = d == 200;
        add(
            fmtname("rms_norm_backward",
                    shape({{"rows", t}, {"D", d}, {"plus_one", plus_one}, {"dx_is_dy", alias}})),
            [=](Harness& h, Outcome& o) { rms_norm_backward_case(h, o, t, d, plus_one, alias); },
            t == 19 && !plus_one);
      }
  // Many chunks of the two-pass dw reduction (q/k-norm-like rows).
  add(
      "rms_norm_backward rows=20000 D=128 plus_one=0 dx_is_dy=0",
      [](Harness& h, Outcome& o) { rms_norm_backward_case(h, o, 20000, 128, false, false); },
      false);
  struct R {
    int64_t heads, d;
    bool norm, plus_one;
    int32_t pos0;
    bool alias;
  };
  const R ropes[] = {{4, 64, true, false, 0, false},   {2, 128, true, true, 100000, true},
                     {8, 128, false, false, 0, false}, {3, 72, true, false, 100000, false},
                     {4, 256, true, false, 0, false},  {2, 64, false, false, 100000, true}};
  for (int64_t t : kTokens)
    for (const R& r : ropes)
      add(
          fmtname("rms_norm_rope_backward", shape({{"T", t},
                                                   {"heads", r.heads},
                                                   {"D", r.d},
                                                   {"norm", r.norm},
                                                   {"plus_one", r.plus_one},
                                                   {"pos0", r.pos0},
                                                   {"dx_is_dy", r.alias}})),
          [=](Harness& h, Outcome& o) {
            rms_norm_rope_backward_case(h, o, t, r.heads, r.d, r.norm, r.plus_one, r.pos0, r.alias);
          },
          t == 19 && r.d == 128);
  for (int64_t t : {1, 19, 257})
    for (int64_t i : {320, 1000, 2880})
      for (bool silu : {true, false})
        add(
            fmtname(silu ? "silu_mul_backward" : "gelu_tanh_mul_backward",
                    shape({{"T", t}, {"I", i}, {"dgate_is_dout", i == 320}})),
            [=](Harness& h, Outcome& o) { gated_backward_case(h, o, t, i, silu, i == 320); },
            t == 19 && i == 1000);
  for (auto [t, alias] : {std::pair<int64_t, bool>{19, false}, {257, true}})
    add(
        fmtname("softcap_backward", shape({{"T", t}, {"V", 1000}, {"dx_is_dy", alias}})),
        [=](Harness& h, Outcome& o) { softcap_backward_case(h, o, t, 1000, alias); }, t == 19);
  for (int64_t m : kTokens)
    for (float p : {0.0f, 0.1f})
      add(
          fmtname("lora_dropout",
                  shape({{"M", m}, {"K", 200}, {"in_place", m == 257}}) + fmt::format(" p={}", p)),
          [=](Harness& h, Outcome& o) { lora_dropout_case(h, o, m, 200, p, m == 257); },
          m == 19 && p > 0);
  struct L {
    Fp8Scheme s;
    int64_t n, k;
    bool accumulate;
  };
  const L lin[] = {{Fp8Scheme::off, 256, 192, true},     {Fp8Scheme::off, 1024, 2880, false},
                   {Fp8Scheme::tensor, 512, 256, false}, {Fp8Scheme::tensor, 2048, 1024, true},
                   {Fp8Scheme::row, 256, 192, true},     {Fp8Scheme::row, 1024, 2880, false},
                   {Fp8Scheme::block, 256, 192, false},  {Fp8Scheme::block, 2048, 1024, true},
                   {Fp8Scheme::block, 304, 200, true},   {Fp8Scheme::row, 200, 200, false}};
  for (const L& l : lin)
    for (int64_t m : kTokens)
      add(
          fmtname("linear_backward_input", std::string(scheme_name(l.s)) + " " +
                                               shape({{"M", m}, {"N", l.n}, {"K", l.k}}) +
                                               (l.accumulate ? " +=" : "")),
          [=](Harness& h, Outcome& o) {
            linear_backward_input_case(h, o, m, l.n, l.k, l.s, l.accumulate);
          },
          (m == 19 || m == 1) && l.n <= 512);
  struct A {
    int64_t k, n, r;
  };
  for (const A& a : {A{256, 192, 8}, A{1024, 2048, 16}, A{2880, 200, 8}, A{512, 384, 4}})
    for (int64_t m : kTokens)
      for (float p : {0.0f, 0.1f}) {
        const bool with_dx = !(a.k == 1024 && p == 0);
        add(
            fmtname("lora_backward", shape({{"M", m}, {"K", a.k}, {"N", a.n}, {"r", a.r}}) +
                                         fmt::format(" p={}", p) + (with_dx ? "" : " no-dx")),
            [=](Harness& h, Outcome& o) { lora_backward_case(h, o, m, a.k, a.n, a.r, p, with_dx); },
            m == 19 && a.k == 256);
      }
  for (int64_t m : kTokens)
    for (auto [n, k] : {std::pair<int64_t, int64_t>{192, 8}, {4096, 32}, {200, 16}})
      add(
          fmtname("linear_accumulate", shape({{"M", m}, {"N", n}, {"K", k}})),
          [=](Harness& h, Outcome& o) { linear_accumulate_case(h, o, m, n, k); }, m == 19);
  struct C {
    int64_t t, v, hd;
    Fp8Scheme s;
    float softcap, temperature;
    int64_t chunk;
  };
  const C ces[] = {{19, 1000, 256, Fp8Scheme::off, 0.0f, 1.0f, 1024},
                   {257, 1000, 256, Fp8Scheme::off, 30.0f, 0.7f, 100},
                   {989, 4096, 512, Fp8Scheme::off, 0.0f, 1.0f, 256},
                   {19, 1024, 256, Fp8Scheme::row, 30.0f, 1.0f, 8},
                   {257, 2048, 1024, Fp8Scheme::block, 0.0f, 1.0f, 128}};
  for (const C& e : ces)
    add(
        fmtname("lm_head_cross_entropy",
                std::string(scheme_name(e.s)) + " " +
                    shape({{"T", e.t}, {"V", e.v}, {"H", e.hd}, {"chunk", e.chunk}}) +
                    fmt::format(" softcap={} temperature={}", e.softcap, e.temperature)),
        [=](Harness& h, Outcome& o) {
          lm_head_cross_entropy_case(h, o, e.t, e.v, e.hd, e.s, e.softcap, e.temperature, e.chunk);
        },
        e.t == 19);
  struct At {
    int64_t hq, hkv, d, window;
    float softcap;
  };
  const std::vector<int64_t> ragged = {1, 19, 257, 100, 40}, longest = {989};
  const At attn[] = {{8, 2, 128, 0, 0.0f},
                     {4, 1, 64, 0, 30.0f},
                     {8, 8, 64, 100, 0.0f},
                     {4, 2, 256, 0, 0.0f},
                     {6, 2, 32, 50, 0.0f}};
  for (bool long_seq : {false, true})
    for (const At& a : attn)
      add(
          fmtname("paged_attention_backward", std::string(long_seq ? "T=989 " : "ragged ") +
                                                  shape({{"Hq", a.hq},
                                                         {"Hkv", a.hkv},
                                                         {"D", a.d},
                                                         {"window", a.window},
                                                         {"softcap", int64_t(a.softcap)}})),
          [=](Harness& h, Outcome& o) {
            attention_backward_case(h, o, long_seq ? longest : ragged, a.hq, a.hkv, a.d, a.window,
                                    a.softcap);
          },
          !long_seq && a.d == 128);
  // Sequences ending one before, at and one after the tiled kernels' 64-row tiles (and a
  // 32-key tile edge for D = 256), several in one batch.
  const std::vector<int64_t> edges = {63, 64, 65, 128, 191, 32};
  for (const At& a : {At{8, 2, 128, 0, 30.0f}, At{4, 1, 256, 70, 0.0f}})
    add(
        fmtname("paged_attention_backward",
                "tile-edges " + shape({{"Hq", a.hq},
                                       {"Hkv", a.hkv},
                                       {"D", a.d},
                                       {"window", a.window},
                                       {"softcap", int64_t(a.softcap)}})),
        [=](Harness& h, Outcome& o) {
          attention_backward_case(h, o, edges, a.hq, a.hkv, a.d, a.window, a.softcap);
        },
        false);
}

}  // namespace fp8rl::gpu_test
