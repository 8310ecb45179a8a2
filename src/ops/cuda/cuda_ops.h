// The CUDA backend of the op interface, on tensor views: what ops.cpp, memory.cpp and
// device.cpp call when ctx.device is cuda. CUDA-free (the backend is an opaque reference), so
// the dispatch layer compiles without CUDA headers; defined in ops/cuda/*.cpp.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "ops/backward.h"
#include "ops/memory.h"
#include "ops/ops.h"
#include "ops/optimizer.h"
#include "ops/sampling.h"

namespace fp8rl::cuda {

class Backend;

// ---- devices and memory (cuda_ops.cpp)
int device_count();
std::string describe(int ordinal);
std::string gemm_path(Backend& b, Fp8Scheme scheme);
void* device_malloc(Backend& b, size_t bytes);
void device_free(Backend& b, void* p, size_t bytes);
// Page-locked host memory (cudaMallocHost / cudaFreeHost).
void* host_malloc_pinned(size_t bytes);
void host_free_pinned(void* p);
TensorView arena_alloc(Backend& b, Shape shape, DType dtype);
size_t arena_mark(Backend& b);
const void* arena_base(Backend& b);
void arena_rewind(Backend& b, size_t mark);
void arena_reserve(Backend& b, size_t bytes);
size_t arena_high_water(Backend& b);
void copy(Backend& b, const TensorView& src, const TensorView& dst);
void copy_to_host_async(Backend& b, const TensorView& src, const TensorView& dst);
void copy_elements(Backend& b, const TensorView& src, const TensorView& moves,
                   const TensorView& dst);
// CUDA events with timing, for ops::StreamMark.
void* event_create();
void event_destroy(void* e);
void event_record(Backend& b, void* e);
void event_wait(void* e);
double event_seconds(void* begin, void* end);
void fill_zero(Backend& b, const TensorView& dst);
void fill(Backend& b, const TensorView& dst, float value);
void fill_uniform(Backend& b, const TensorView& dst, uint64_t seed, float bound);
void synchronize(Backend& b);
size_t device_free_bytes(Backend& b);

// ---- ops (cuda_ops.cpp); operands already checked by ops.cpp
void embedding(Backend& b, const TensorView& ids, const TensorView& table, float scale,
               const TensorView& out);
void rms_norm(Backend& b, const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out);
void add_rms_norm(Backend& b, const TensorView& x, const TensorView& delta, const TensorView& w,
                  float eps, bool plus_one, const TensorView& out);
void rope(Backend& b, const TensorView& x, const TensorView& positions, const TensorView& inv_freq);
void rms_norm_rope(Backend& b, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   const TensorView& positions, const TensorView& inv_freq, const TensorView& out);
void attention(Backend& b, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const ops::AttentionParams& p,
               const TensorView& out, float* amax);
void store_kv(Backend& b, const TensorView& k, const TensorView& v, const TensorView& slot_mapping,
              const TensorView& k_pool, const TensorView& v_pool, const ops::KvScales& scales);
// Whether ops::rope_store_kv runs as one kernel for head dim d and these operands (else as its
// three ops).
bool rope_store_kv_supported(int64_t d, std::initializer_list<const TensorView*> operands);
void rope_store_kv(Backend& b, const TensorView& q, const TensorView& k, const TensorView& v,
                   const ops::QkRope& qk, const TensorView& slot_mapping, const TensorView& k_pool,
                   const TensorView& v_pool, const ops::KvScales& scales, const TensorView& q_out);
// lse (optional, [t, hq] f32): written by the prefill kernels only (batch.max_query_len > 1).
// out_q (optional): ops::paged_attention's.
void paged_attention(Backend& b, const TensorView& q, const TensorView& k_pool,
                     const TensorView& v_pool, const ops::PagedBatch& batch,
                     const ops::AttentionParams& p, const TensorView& out, float* amax,
                     const ops::KvScales& scales, float* lse = nullptr,
                     const ops::QuantizedActivation* out_q = nullptr);
size_t paged_attention_scratch_bytes(int64_t t, int64_t heads, int64_t head_dim,
                                     int64_t max_context_len);
void gated(Backend& b, const TensorView& gate, const TensorView& up, int act,
           const TensorView& out);
void add(Backend& b, const TensorView& a, const TensorView& c, float alpha, const TensorView& out);
void softcap(Backend& b, const TensorView& x, float cap);

// ---- the optimizer (optimizer.cpp)
void adamw_step(Backend& b, const ops::AdamWStep& step, const TensorView& params,
                const TensorView& grads, float grad_scale, const TensorView& exp_avg,
                const TensorView& exp_avg_sq, const TensorView& compute_copy);
void sgd_step(Backend& b, const ops::SgdStep& step, const TensorView& params,
              const TensorView& grads, float grad_scale, const TensorView& momentum_buffer,
              const TensorView& compute_copy);
double l2_norm(Backend& b, const TensorView& x);

// ---- the sampler (sampling.cu)
void sample(Backend& b, const TensorView& logits, const TensorView& rows, const TensorView& history,
            int top_logprobs, const ops::SampleOutput& out);
size_t sample_scratch_bytes(int64_t r, int64_t v);

// ---- FP8 activations (cuda_ops.cpp)
ops::QuantizedActivation alloc_quantized(Backend& b, ActScaling act, int64_t rows, int64_t cols);
size_t quantized_bytes(ActScaling act, int64_t rows, int64_t cols);
void quantize(Backend& b, const TensorView& x, const ops::QuantizedActivation& q,
              float static_scale);
void rms_norm_quant(Backend& b, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                    const ops::QuantizedActivation& q, const TensorView& plain);
void add_rms_norm_quant(Backend& b, const TensorView& x, const TensorView& delta,
                        const TensorView& w, float eps, bool plus_one,
                        const ops::QuantizedActivation& q, const TensorView& plain);
void gated_quant(Backend& b, const TensorView& gate, const TensorView& up, int act,
                 const ops::QuantizedActivation& q, const TensorView& plain);
void dequantize(Backend& b, const ops::QuantizedActivation& q, const TensorView& out);
// CudaDevice::check_fp8_quotient.
uint64_t check_fp8_quotient(Backend& b, uint32_t b_first, uint32_t b_count, uint32_t b_step,
                            uint32_t (&bad)[2]);

// Bytes an arena allocation of `bytes` takes: the backend's arena hands out 256-byte aligned
// views (Backend::arena), so scratch sums round each allocation up to 256.
inline size_t arena_aligned(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// ---- linear layers (linear.cpp)
// x_amax: max |x| computed by the producer (tensor scaling), or nullptr.
void linear(Backend& b, const TensorView& x, const LinearWeight& w, const TensorView& out,
            const float* x_amax = nullptr);
void linear(Backend& b, const ops::QuantizedActivation& x, const LinearWeight& w,
            const TensorView& out);
// W dequantized to bf16 [N,K] in the arena (the caller's scope): the bf16 fallback's weight.
TensorView dequantized_weight(Backend& b, const LinearWeight& w);
// ops::linear_group on the device (ops/cuda/linear.cpp: the backend's choice of kernels).
void linear_group(Backend& b, const ops::LinearInput& in, std::span<const ops::Projection> group,
                  const LinearWeight* stacked);
void linear_accumulate(Backend& b, const TensorView& x, const LinearWeight& w, float alpha,
                       const TensorView& out);
size_t linear_scratch_bytes(const LinearWeight& w, int64_t m);
// The fp32 K-slice partials of a group's down products in its streaming launch (StreamingDown):
// M rows, K inputs, `rows` stacked A rows.
size_t streaming_down_scratch_bytes(int64_t m, int64_t k, int64_t rows);
void quantize_weight(Backend& b, const TensorView& w, Fp8Scheme scheme, const TensorView& q,
                     const TensorView& scales);
void prepare_linear(Context& ctx, LinearWeight& w, std::vector<DeviceBuffer>& storage);
double time_gemm(Backend& b, const LinearWeight& w, int64_t m, int iters);

// ---- mixture of experts (moe.cpp); operands already checked by ops.cpp. act 0 = SiLU, 1 =
// GELU-tanh. Scratch from the backend's arena, as the *_scratch_bytes declare.
void moe_route(Backend& b, const TensorView& x, const LinearWeight& router, bool normalize,
               const TensorView& weights, const TensorView& experts, bool replay,
               const TensorView& chosen);
size_t moe_route_scratch_bytes(const LinearWeight& router, int64_t t);
// lora: bf16 A [E, r, K], B [E, N, r] (the adapter's compute copy), without dropout.
void moe_experts(Backend& b, const TensorView& x, const MoeWeights& w, int act,
                 const TensorView& weights, const TensorView& experts, const TensorView& out,
                 const MoeLora& lora);
size_t moe_experts_scratch_bytes(const MoeWeights& w, int64_t t, int64_t k, int64_t lora_rank);
// What the CUDA experts cannot run, as a clear error (a dry run too): adapter dropout or ranks
// not multiples of 8, FP8 experts below sm_89 or without a dynamic activation scaling, widths
// not multiples of 16.
// b may be null (a dry run without a device).
void check_moe_experts(const Backend* b, const TensorView& x, const MoeWeights& w, int64_t k,
                       const MoeLora& lora, const TensorView& out);

// ---- backward ops (backward.cpp; linear_backward_input in linear_backward_input.cpp); operands
// already checked by ops/backward.cpp. Scratch comes from the backend's arena; the *_scratch_bytes
// are what a dry run declares.
void rms_norm_save(Backend& b, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   const TensorView& out, const TensorView& inv_rms);
void rms_norm_backward(Backend& b, const TensorView& x, const TensorView& w,
                       const TensorView& inv_rms, bool plus_one, const TensorView& dy,
                       const TensorView& dx, const TensorView& dw);
size_t rms_norm_backward_scratch_bytes(int64_t rows, int64_t d);  // with dw
void rope_backward(Backend& b, const TensorView& dy, const TensorView& positions,
                   const TensorView& inv_freq);
void rms_norm_rope_save(Backend& b, const TensorView& x, const TensorView& w, float eps,
                        bool plus_one, const TensorView& positions, const TensorView& inv_freq,
                        const TensorView& out, const TensorView& inv_rms);
void rms_norm_rope_backward(Backend& b, const TensorView& x, const TensorView& w,
                            const TensorView& inv_rms, bool plus_one, const TensorView& positions,
                            const TensorView& inv_freq, const TensorView& dy, const TensorView& dx,
                            const TensorView& dw);
// act 0 = SiLU, 1 = GELU-tanh.
void gated_backward(Backend& b, const TensorView& gate, const TensorView& up,
                    const TensorView& dout, int act, const TensorView& dgate,
                    const TensorView& dup);
void softcap_backward(Backend& b, const TensorView& y, float cap, const TensorView& dy,
                      const TensorView& dx);
void lora_dropout(Backend& b, const TensorView& x, const ops::LoraDropout& dropout,
                  const TensorView& out);
// out (bf16) = dy (f32) rounded (ops::gemm_gradient).
void round_to_bf16(Backend& b, const TensorView& dy, const TensorView& out);
// dy as a bf16 GEMM operand: itself when gemm_gradient made it, else rounded into the arena
// (the caller's scope).
const void* bf16_gradient(Backend& b, const TensorView& dy);
void lora_backward(Backend& b, const TensorView& x, const TensorView& a, const TensorView& bw,
                   float scale, const ops::LoraDropout& dropout, const TensorView& dy,
                   const TensorView& dx, const TensorView& da, const TensorView& db);
size_t lora_backward_scratch_bytes(int64_t m, int64_t k, int64_t n, int64_t r, bool dropout,
                                   bool dy_f32);
void linear_backward_input(Backend& b, const TensorView& dy, const LinearWeight& w,
                           const TensorView& dx, bool accumulate);
size_t linear_backward_input_scratch_bytes(const LinearWeight& w, int64_t m, bool dy_f32);
void paged_attention_lse(Backend& b, const TensorView& q, const TensorView& k_pool,
                         const TensorView& v_pool, const ops::PagedBatch& batch,
                         const ops::AttentionParams& p, const TensorView& out,
                         const TensorView& lse);
void paged_attention_backward(Backend& b, const TensorView& q, const TensorView& k_pool,
                              const TensorView& v_pool, const ops::PagedBatch& batch,
                              const ops::AttentionParams& p, const TensorView& out,
                              const TensorView& lse, const TensorView& dout, const TensorView& dq,
                              const TensorView& dk, const TensorView& dv);
// The tiled path's delta and bf16 dout (more than the reference path's delta alone).
size_t paged_attention_backward_scratch_bytes(int64_t t, int64_t hq, int64_t d);
void lm_head_cross_entropy(Backend& b, const TensorView& x, const LinearWeight& lm_head,
                           const TensorView& targets, const ops::CrossEntropyParams& p,
                           const TensorView& loss, const TensorView& logprob, const TensorView& lse,
                           const TensorView& entropy);
void lm_head_cross_entropy_backward(Backend& b, const TensorView& x, const LinearWeight& lm_head,
                                    const TensorView& targets, const ops::CrossEntropyParams& p,
                                    const TensorView& lse, const TensorView& dloss,
                                    const TensorView& dx);
size_t lm_head_cross_entropy_scratch_bytes(const LinearWeight& lm_head, int64_t t,
                                           const ops::CrossEntropyParams& p);

// ---- profiling (cuda_ops.cpp): a range per op while the backend profiles.
class ProfileRange {
 public:
  ProfileRange(Backend& b, const char* name);
  ProfileRange(Backend& b, std::string name);
  ~ProfileRange();
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;

 private:
  Backend* b_;  // null when not profiling
  std::string name_;
};
bool profiling(Backend& b);

}  // namespace fp8rl::cuda
