#include "model/quantize.h"

#include <filesystem>
#include <fstream>
#include <map>

#include "core/check.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "quant/fp8.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

// The stored shape of a weight scale: compressed-tensors keeps channel scales as [N, 1].
Shape stored_scale_shape(const LinearWeight& w, Fp8Format format) {
  if (format == Fp8Format::compressed_tensors && w.scheme == Fp8Scheme::row)
    return {w.out_features(), 1};
  return w.scales.shape;
}

bool is_weight_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return p.extension() == ".safetensors" || name == "model.safetensors.index.json" ||
         name == "config.json" || p.extension() == ".bin" || p.extension() == ".pt";
}

}  // namespace

void write_fp8_checkpoint(const Model& model, const std::string& out_dir, Fp8Format format) {
  CHECK(!model.prequantized(), "'{}' is already an FP8 checkpoint", model.dir());
  CHECK(model.scheme() != Fp8Scheme::off, "write_fp8_checkpoint needs a model quantized on load");
  CHECK(!model.config().has_moe(),
        "writing FP8 checkpoints of MoE models ({}) is not supported yet; load the unquantized "
        "checkpoint with --fp8 instead",
        model.config().architecture);
  const nlohmann::json qconfig = make_quantization_config(model.scheme(), format);
  CHECK(fs::absolute(out_dir) != fs::absolute(model.dir()),
        "the output directory must differ from the model directory '{}'", model.dir());

  std::map<std::string, const LinearWeight*> linears;
  for (const auto& [name, w] : model.named_linears()) linears[name + ".weight"] = w;

  const std::string scale_name(weight_scale_name(format));
  std::vector<std::pair<std::string, TensorView>> tensors;
  for (const std::string& name : model.checkpoint().names()) {
    auto it = linears.find(name);
    if (it == linears.end()) {
      tensors.emplace_back(name, model.checkpoint().view(name));
      continue;
    }
    const LinearWeight& w = *it->second;
    const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
    tensors.emplace_back(name, w.weight);
    tensors.emplace_back(prefix + "." + scale_name,
                         TensorView(w.scales.data, DType::f32, stored_scale_shape(w, format)));
  }

  fs::create_directories(out_dir);
  write_checkpoint(out_dir, tensors);
  nlohmann::json config = model.config().raw;
  config["quantization_config"] = qconfig;
  write_file_replacing(fs::path(out_dir) / "config.json", config.dump(2) + "\n");
  copy_model_files(model.dir(), out_dir);
}

// Tokenizer and generation files, through the same rules: inputs opened as regular files,
// outputs replacing only regular files.
void copy_model_files(const std::string& from, const std::string& to) {
  constexpr uint64_t kMaxSideFileBytes = uint64_t{1} << 30;
  for (const auto& entry : fs::directory_iterator(from)) {
    if (!entry.is_regular_file() || is_weight_file(entry.path())) continue;
    write_file_replacing(fs::path(to) / entry.path().filename(),
                         read_input_file(entry.path(), "model file", kMaxSideFileBytes));
  }
}

}  // namespace fp8rl
