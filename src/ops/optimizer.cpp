#include "ops/optimizer.h"

#include "core/check.h"
#include "ops/cpu/optimizer_ops.h"
#include "ops/dispatch.h"

namespace fp8rl::ops {

namespace {

void check_optimizer_ctx(const Context& ctx, const char* what) {
  // A dry run may plan for a CUDA device that is not there (it computes nothing).
  CHECK(ctx.device != Device::cuda || ctx.cuda != nullptr || ctx.dry_run,
        "{}: CUDA Context has no backend (use CudaDevice::context())", what);
}

// A contiguous [n] tensor of dtype on ctx's device.
void check_vector(const Context& ctx, const TensorView& t, DType dtype, int64_t n, const char* what,
                  const char* name) {
  CHECK(t.dtype == dtype && t.device == ctx.device && t.is_contiguous() && t.numel() == n,
        "{}: {} must be a contiguous {} tensor of {} elements on {}, got {} {} on {}", what, name,
        dtype_name(dtype), n, device_name(ctx.device), dtype_name(t.dtype), t.shape.str(),
        device_name(t.device));
}

void check_update(const Context& ctx, const TensorView& params, const TensorView& grads,
                  const TensorView& compute_copy, const char* what) {
  check_optimizer_ctx(ctx, what);
  const int64_t n = params.numel();
  CHECK(n > 0, "{}: no parameters", what);
  check_vector(ctx, params, DType::f32, n, what, "params");
  check_vector(ctx, grads, DType::f32, n, what, "grads");
  if (!compute_copy.empty()) check_vector(ctx, compute_copy, DType::bf16, n, what, "compute_copy");
}

}  // namespace

void adamw_step(Context& ctx, const AdamWStep& step, const TensorView& params,
                const TensorView& grads, float grad_scale, const TensorView& exp_avg,
                const TensorView& exp_avg_sq, const TensorView& compute_copy) {
  const char* what = "adamw_step";
  check_update(ctx, params, grads, compute_copy, what);
  check_vector(ctx, exp_avg, DType::f32, params.numel(), what, "exp_avg");
  check_vector(ctx, exp_avg_sq, DType::f32, params.numel(), what, "exp_avg_sq");
  FP8RL_DISPATCH(
      ctx, what,
      cpu::adamw_step(step, params, grads, grad_scale, exp_avg, exp_avg_sq, compute_copy),
      cuda::adamw_step(*ctx.cuda, step, params, grads, grad_scale, exp_avg, exp_avg_sq,
                       compute_copy));
}

void sgd_step(Context& ctx, const SgdStep& step, const TensorView& params, const TensorView& grads,
              float grad_scale, const TensorView& momentum_buffer, const TensorView& compute_copy) {
  const char* what = "sgd_step";
  check_update(ctx, params, grads, compute_copy, what);
  CHECK(momentum_buffer.empty() == (step.momentum == 0.0),
        "{}: a momentum buffer goes with momentum != 0 (momentum {}, buffer {})", what,
        step.momentum, momentum_buffer.empty() ? "empty" : "given");
  if (!momentum_buffer.empty())
    check_vector(ctx, momentum_buffer, DType::f32, params.numel(), what, "momentum_buffer");
  FP8RL_DISPATCH(
      ctx, what, cpu::sgd_step(step, params, grads, grad_scale, momentum_buffer, compute_copy),
      cuda::sgd_step(*ctx.cuda, step, params, grads, grad_scale, momentum_buffer, compute_copy));
}

double l2_norm(Context& ctx, const TensorView& x) {
  const char* what = "l2_norm";
  check_optimizer_ctx(ctx, what);
  check_vector(ctx, x, DType::f32, x.numel(), what, "x");
  double norm = 0.0;
  FP8RL_DISPATCH(ctx, what, norm = cpu::l2_norm(x), norm = cuda::l2_norm(*ctx.cuda, x));
  return norm;
}

}  // namespace fp8rl::ops
