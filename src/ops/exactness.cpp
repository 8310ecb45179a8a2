#include "ops/exactness.h"

#include "core/check.h"
#if FP8RL_HAVE_CUDA
#include "ops/cuda/backend.h"
#endif

namespace fp8rl::ops {

void set_batch_invariant(Context& ctx, bool on) {
  // The CPU always is; a dry run without the device runs no kernel to pin.
  if (ctx.device == Device::cpu || (ctx.dry_run && ctx.cuda == nullptr)) return;
#if FP8RL_HAVE_CUDA
  ctx.cuda->set_batch_invariant(on);
#else
  (void)on;
  RAISE("batch invariance: this build has no CUDA backend");
#endif
}

bool batch_invariant(const Context& ctx) {
#if FP8RL_HAVE_CUDA
  return ctx.device == Device::cuda && ctx.cuda != nullptr && ctx.cuda->batch_invariant();
#else
  (void)ctx;
  return false;
#endif
}

}  // namespace fp8rl::ops
