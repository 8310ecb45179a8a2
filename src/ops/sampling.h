// The token sampler as a device op: one call draws the next token of R sequences from a batch
// of logits, with per-row parameters, and reports the logprobs an RL trainer needs. CPU
// reference in ops/cpu/sampling.cpp, CUDA in ops/cuda/sampling.cu (one block per row).
//
// Semantics of one row (both backends; the CPU is the reference):
//  x     = logits[logit_row, :] (f32 [V], finite or -inf).
//  (a) repetition penalty, HF / vLLM style, on the SET of ids in history[history_begin,
//      history_end) (an id listed twice is penalized once): x_i = x_i > 0 ? x_i / p : x_i * p.
//  (b) ids in history[banned_begin, banned_end) get -inf (min_tokens: eos and stop ids).
//  (c) temperature == 0: the token is the argmax of x, the lowest index on ties.
//  (d) else l_i = x_i / T (fp32 division, bit-identical on both backends), M = max l, and a
//      token is kept when it passes every active filter, in the order
//        top-k (0 < k < V): l_i >= the k-th largest l (ties with the k-th value kept);
//        top-p (top_p < 1): with e_i = exp(l_i - M) over the top-k set, the smallest value
//          threshold v such that sum_{l_j >= v} e_j >= top_p * sum e_j, i.e. the smallest set
//          of largest probabilities whose mass reaches top_p (ties with the boundary value
//          kept; the largest token always). The masses are summed as integers,
//          w_i = floor(e_i * 2^40) (exact in fixed point, so the sum has no order and the CUDA
//          reduction is deterministic); the target is ceil(top_p * sum w) computed in fp64.
//          The quantization moves the mass by at most V * 2^-40 of the total (2^-22 at V=2^18),
//          below fp32 resolution.
//        min-p (min_p > 0): e_i >= min_p, i.e. p_i >= min_p * p_max (a ratio, so it does not
//          matter whether the mass was renormalized after top-k / top-p).
//      -inf tokens (banned, or x = -inf) are never kept. If nothing is kept (every id banned),
//      the row falls back to (c).
//  (e) the draw: the kept token with the largest l_i + g_i, g_i = -log(-log(u_i)) (Gumbel-max,
//      the exponential race in log space), u_i = uniform01(rng_key(stream, position), i) from
//      core/rng.h, lowest index on ties. The noise of a token depends on (stream, position,
//      token) only: never on the batch, the row order or the thread count. CPU and CUDA draw
//      the same token unless the two best scores lie within the float rounding of log
//      (about 2^-20 absolute) or a token sits on a top-p / min-p boundary within the ulps of exp.
//  (f) logprobs[r]           = log_softmax(raw x)[token] (vLLM's default: the model's raw
//      output, before penalty, ban, temperature and filters);
//      processed_logprobs[r] = log_softmax(raw x / T)[token] over the FULL vocabulary (no
//      penalty, no ban, no filter; T = 0 counts as 1), which is what an RL trainer recomputes
//      from its own forward (the tempered distribution it samples from, not the filtered one).
//  (g) top_ids[r, :], top_logprobs[r, :]: the K = top_logprobs largest raw logprobs and their
//      ids, descending, the lowest id first on ties.
//
// CUDA: no host synchronization and no allocation inside (scratch from the context's arena,
// sized by sample_scratch_bytes), so the op can be captured in a CUDA graph. Cost per row:
// about 4 passes over V (copy, sums, temperature, draw), 4 more for top-k and 5 for top-p
// (radix select), and K more for K top logprobs (one argmax pass each); a row without
// penalty, ban, top-k or top-p reads its logits once (twice with min-p).
#pragma once

#include <cstdint>

#include "ops/context.h"
#include "ops/sample_row.h"

namespace fp8rl::ops {

// The most top logprobs per row (vLLM's default max_logprobs).
inline constexpr int kMaxTopLogprobs = 20;

struct SampleOutput {
  TensorView tokens;              // [R] i32
  TensorView logprobs;            // [R] f32, raw (f)
  TensorView processed_logprobs;  // [R] f32 (f); may be empty (not computed)
  TensorView top_ids;             // [R, K] i32; empty when K = 0
  TensorView top_logprobs;        // [R, K] f32; empty when K = 0
};

// logits [L, V] f32; rows [R, kSampleRowWords] i32 (SampleRow bytes, 8-byte aligned); history [H]
// i32 (may be empty when no row has a range); top_logprobs = K in [0, kMaxTopLogprobs]. Ids in
// history must be in [0, V) (checked on the CPU; CUDA ignores ids outside it); rows' logit_row must
// be in [0, L) and their ranges inside history (checked on the CPU, undefined on CUDA: the engine
// builds them on the host).
void sample(Context& ctx, const TensorView& logits, const TensorView& rows,
            const TensorView& history, int top_logprobs, const SampleOutput& out);

// Scratch bytes sample() takes from the context's arena for R rows of V logits (CUDA: one
// f32 working copy of each row; CPU: working rows for each of the current num_threads()).
size_t sample_scratch_bytes(const Context& ctx, int64_t r, int64_t v);

}  // namespace fp8rl::ops
