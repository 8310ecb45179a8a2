// Internal to ops/*.cpp: FP8RL_DISPATCH runs an op's CPU reference or its CUDA implementation
// (inside a profiling range), nothing in a dry run; without nvcc a CUDA context raises.
#pragma once

#include "core/check.h"
#if FP8RL_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

#if FP8RL_HAVE_CUDA
#define FP8RL_DISPATCH(ctx, name, cpu_call, cuda_call) \
  do {                                                 \
    if ((ctx).dry_run) break;                          \
    if ((ctx).device == Device::cpu) {                 \
      cpu_call;                                        \
    } else {                                           \
      cuda::ProfileRange range_(*(ctx).cuda, name);    \
      cuda_call;                                       \
    }                                                  \
  } while (0)
#else
#define FP8RL_DISPATCH(ctx, name, cpu_call, cuda_call)                        \
  do {                                                                        \
    if ((ctx).dry_run) break;                                                 \
    if ((ctx).device == Device::cpu) {                                        \
      cpu_call;                                                               \
    } else {                                                                  \
      RAISE("{}: this build has no CUDA backend (built without nvcc)", name); \
    }                                                                         \
  } while (0)
#endif
