// Merging a LoRA adapter into the model's weights, W' = W + scale * B A for every targeted
// projection (what PEFT's merge_and_unload computes), and writing the merged model as a
// checkpoint: unquantized (bf16 or f32), or re-quantized to FP8 with the recipe and written by
// write_fp8_checkpoint in the compressed-tensors format.
#pragma once

#include <optional>
#include <string>

#include "core/tensor.h"
#include "model/adapter.h"
#include "model/model.h"

namespace fp8rl {

struct MergeOptions {
  // Dtype of every floating-point tensor of the output that is not FP8 (bf16 or f32); it is
  // also what config.json's dtype states.
  DType dtype = DType::bf16;
  // Re-quantize the merged decoder linears with this scheme (row, block or tensor); nullopt:
  // write them in `dtype`.
  std::optional<Fp8Scheme> fp8;
};

// The merged weight of one projection, [N, K] f32: the base weight as fp32 (an FP8 weight
// dequantized with its scales), plus scale * B A summed in fp64 and rounded once, when the
// adapter targets it (else the base weight unchanged).
Tensor merged_weight(const Model& model, const LoraAdapter& adapter, int64_t layer, int projection);

// Writes the merged model into `out_dir`, a directory that must not exist yet or be empty and
// must be neither the model's directory nor inside it. Every tensor of the model's checkpoint
// keeps its name; the FP8 scale tensors of an FP8 base are dropped (its linears are written
// merged and dequantized) unless options.fp8 quantizes them again. config.json loses its
// quantization_config (or gets the new one) and states the dtype; every other regular file of
// the model directory is copied. All of it is written into a temporary sibling directory that
// is renamed into place at the end, so `out_dir` is complete or absent.
// `model` must be loaded as stored (no on-the-fly FP8 scheme), `adapter` loaded for it.
void write_merged_checkpoint(const Model& model, const LoraAdapter& adapter,
                             const std::string& out_dir, const MergeOptions& options = {});

}  // namespace fp8rl
