#include "model/tape.h"

#include "core/check.h"
#include "core/rng.h"

namespace fp8rl {

LayerSaved alloc_layer_saved(Arena& arena, const ModelConfig& c, int64_t t, DType dt) {
  return alloc_layer_saved([&](Shape shape, DType d) { return arena.alloc(shape, d); }, c, t, dt);
}

LayerSaved alloc_layer_saved(const std::function<TensorView(Shape, DType)>& alloc_fn,
                             const ModelConfig& c, int64_t t, DType dt) {
  struct {
    const std::function<TensorView(Shape, DType)>& fn;
    TensorView alloc(Shape shape, DType d) const { return fn(shape, d); }
  } a{alloc_fn};
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  LayerSaved s;
  s.inv_rms_in = a.alloc({t}, DType::f32);
  s.h_attn = a.alloc({t, h}, dt);
  s.q_pre = a.alloc({t, c.q_dim()}, dt);
  s.k_pre = a.alloc({t, c.kv_dim()}, dt);
  if (c.qk_norm) {
    s.q_inv_rms = a.alloc({t * c.num_heads}, DType::f32);
    s.k_inv_rms = a.alloc({t * c.num_kv_heads}, DType::f32);
  }
  s.q = a.alloc({t, c.q_dim()}, dt);
  s.attn = a.alloc({t, c.q_dim()}, dt);
  s.lse = a.alloc({t, c.num_heads}, DType::f32);
  if (c.sandwich_norms) {
    s.o_out = a.alloc({t, h}, dt);
    s.inv_rms_o = a.alloc({t}, DType::f32);
    s.down_out = a.alloc({t, h}, dt);
    s.inv_rms_down = a.alloc({t}, DType::f32);
  }
  s.x_mid = a.alloc({t, h}, dt);
  s.inv_rms_mid = a.alloc({t}, DType::f32);
  s.h_mlp = a.alloc({t, h}, dt);
  s.gate = a.alloc({t, i}, dt);
  s.up = a.alloc({t, i}, dt);
  s.act = a.alloc({t, i}, dt);
  if (c.has_moe()) {
    s.route_w = a.alloc({t, c.moe.top_k}, DType::f32);
    s.route_ids = a.alloc({t, c.moe.top_k}, DType::i32);
  }
  return s;
}

Tape alloc_tape(Arena& a, const ModelConfig& c, int64_t t, DType dt, bool checkpointing,
                Arena* host) {
  CHECK(host == nullptr || checkpointing,
        "offloading the layer inputs needs activation checkpointing");
  Tape tape;
  tape.checkpointing = checkpointing;
  if (host != nullptr) {
    const TensorView both[2] = {a.alloc({t, c.hidden_size}, dt), a.alloc({t, c.hidden_size}, dt)};
    for (int64_t li = 0; li < c.num_layers; ++li) {
      tape.x_in.push_back(both[li % 2]);
      tape.x_host.push_back(host->alloc({t, c.hidden_size}, dt));
    }
  } else {
    for (int64_t li = 0; li < c.num_layers; ++li)
      tape.x_in.push_back(a.alloc({t, c.hidden_size}, dt));
  }
  const int64_t sets = checkpointing ? 1 : c.num_layers;
  for (int64_t li = 0; li < sets; ++li) tape.layers.push_back(alloc_layer_saved(a, c, t, dt));
  tape.x_final = a.alloc({t, c.hidden_size}, dt);
  tape.inv_rms_final = a.alloc({t}, DType::f32);
  tape.h_final = a.alloc({t, c.hidden_size}, dt);
  return tape;
}

uint64_t lora_dropout_seed(uint64_t seed, int64_t layer, int projection) {
  return rng_key(seed, uint64_t(layer) * 7 + uint64_t(projection));
}

}  // namespace fp8rl
