// Writes a model whose decoder linears are FP8 as a checkpoint vLLM, SGLang and transformers
// load: compressed-tensors (weight_scale) or quant_method "fp8" (weight_scale_inv, 128x128).
#pragma once

#include <string>

#include "formats/quant_config.h"
#include "model/model.h"

namespace fp8rl {

// `model` must have been loaded with an on-the-fly FP8 scheme. Every other tensor of its
// checkpoint is copied unchanged; config.json gains the quantization_config; the other files
// of the model directory (tokenizer, generation config, ...) are copied.
void write_fp8_checkpoint(const Model& model, const std::string& out_dir, Fp8Format format);

// Copies every regular file of the model directory `from` except the weights and config.json
// (tokenizer, generation config, chat template, ...) into the directory `to`.
void copy_model_files(const std::string& from, const std::string& to);

}  // namespace fp8rl
