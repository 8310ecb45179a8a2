#include "model/merge.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/check.h"
#include "core/output_file.h"
#include "model/quantize.h"
#include "quant/fp8.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

// Whether `path` is `dir` or lies inside it (both made absolute, symlinks resolved where they
// exist, so "m/../m/x" and a link into the model are caught too).
bool within(const fs::path& path, const fs::path& dir) {
  const fs::path p = fs::weakly_canonical(fs::absolute(path));
  const fs::path d = fs::weakly_canonical(fs::absolute(dir));
  auto pi = p.begin(), di = d.begin();
  for (; di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // the trailing "" of a path ending in '/'
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

// config.json of the output: the model's, without quantization_config, stating `dtype` under
// the key(s) the model's config uses (transformers 5 writes "dtype", earlier "torch_dtype").
nlohmann::json merged_config(const Model& model, DType dtype) {
  nlohmann::json config = model.config().raw;
  config.erase("quantization_config");
  const char* name = dtype == DType::f32 ? "float32" : "bfloat16";
  bool stated = false;
  for (const char* key : {"dtype", "torch_dtype"})
    if (config.contains(key)) {
      config[key] = name;
      stated = true;
    }
  if (!stated) config["torch_dtype"] = name;
  return config;
}

// The merged model's tensors into `dir` with its config.json; the decoder linears in
// `linear_dtype`, every other floating tensor in options.dtype.
void write_unquantized(const Model& model, const LoraAdapter& adapter, const fs::path& dir,
                       DType dtype, DType linear_dtype) {
  struct Projection {
    int64_t layer;
    int index;
  };
  std::map<std::string, Projection> linears;  // "model.layers.0.self_attn.q_proj" -> where
  for (int64_t l = 0; l < model.config().num_layers; ++l)
    for (int p = 0; p < 7; ++p) linears[projection_path(l, p)] = {l, p};

  std::vector<Tensor> owned;
  std::vector<std::pair<std::string, TensorView>> tensors;
  const auto add_converted = [&](const std::string& name, const TensorView& src, DType to) {
    Tensor t = Tensor::empty(src.shape, to);
    convert(src.data, src.dtype, t.ptr<void>(), to, size_t(src.numel()));
    owned.push_back(t);
    tensors.emplace_back(name, t.view());
  };
  for (const std::string& name : model.checkpoint().names()) {
    const size_t dot = name.rfind('.');
    const std::string prefix = name.substr(0, dot), leaf = name.substr(dot + 1);
    auto it = linears.find(prefix);
    if (it != linears.end() && leaf == "weight") {
      const Tensor w = merged_weight(model, adapter, it->second.layer, it->second.index);
      add_converted(name, w, linear_dtype);
      continue;
    }
    // An FP8 base's scales belong to the codes that the merge replaces.
    if (it != linears.end() && model.prequantized() &&
        (leaf == "weight_scale" || leaf == "weight_scale_inv" || leaf == "input_scale"))
      continue;
    const SafetensorsTensorInfo& info = model.checkpoint().info(name);
    const TensorView src = model.checkpoint().view(name);
    const bool floating = info.supported && (info.dtype == DType::f32 ||
                                             info.dtype == DType::bf16 || info.dtype == DType::f16);
    CHECK(
        floating || (info.supported && info.dtype != DType::f8e4m3 && info.dtype != DType::f8e5m2),
        "checkpoint '{}': tensor '{}' is {}, which the merge cannot carry over", model.dir(), name,
        info.dtype_str);
    if (floating)
      add_converted(name, src, dtype);
    else
      tensors.emplace_back(name, src);  // integer tensors as they are
  }
  write_checkpoint(dir.string(), tensors);
  write_file_replacing(dir / "config.json", merged_config(model, dtype).dump(2) + "\n");
}

}  // namespace

Tensor merged_weight(const Model& model, const LoraAdapter& adapter, int64_t layer,
                     int projection) {
  CHECK(layer >= 0 && layer < int64_t(model.layers.size()), "layer {} is outside the model", layer);
  const Linear& lin = *model.layers[size_t(layer)].projection(projection);
  const int64_t n = lin.out_features(), k = lin.in_features();
  Tensor w = Tensor::empty({n, k}, DType::f32);  // [N, K] f32
  if (lin.weight.dtype == DType::f8e4m3)
    dequantize_weight(lin.weight, lin.scheme, lin.scales, w);
  else
    convert(lin.weight.data, lin.weight.dtype, w.ptr<float>(), DType::f32, size_t(n * k));
  if (!adapter.targeted(layer, projection)) return w;
  CHECK(adapter.device() == Device::cpu, "merging reads the adapter on the host, not on {}",
        device_name(adapter.device()));

  const TensorView a = adapter.master_a(layer, projection);  // [r, K] f32
  const TensorView b = adapter.master_b(layer, projection);  // [N, r] f32
  const int64_t r = a.dim(0);
  CHECK(a.dim(1) == k && b.dim(0) == n && b.dim(1) == r,
        "adapter of {} is A {} B {}, the weight is [{}, {}]", projection_path(layer, projection),
        a.shape.str(), b.shape.str(), n, k);
  const double scale = adapter.config().scale();
  const float* pa = a.ptr<float>();
  const float* pb = b.ptr<float>();
  float* pw = w.ptr<float>();
  std::vector<double> row(static_cast<size_t>(k));  // the fp64 sum of row i of B A
  for (int64_t i = 0; i < n; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t j = 0; j < r; ++j) {
      const double bij = pb[i * r + j];
      const float* arow = pa + j * k;
      for (int64_t c = 0; c < k; ++c) row[size_t(c)] += bij * double(arow[c]);
    }
    for (int64_t c = 0; c < k; ++c)
      pw[i * k + c] = float(double(pw[i * k + c]) + scale * row[size_t(c)]);
  }
  return w;
}

void write_merged_checkpoint(const Model& model, const LoraAdapter& adapter,
                             const std::string& out_dir, const MergeOptions& options) {
  CHECK(options.dtype == DType::bf16 || options.dtype == DType::f32,
        "the merged model is written in bf16 or f32, not {}", dtype_name(options.dtype));
  CHECK(!options.fp8 || *options.fp8 != Fp8Scheme::off,
        "re-quantizing the merged model needs a scheme: row, block or tensor");
  CHECK(model.prequantized() || model.scheme() == Fp8Scheme::off,
        "the model to merge into must be loaded as stored, not quantized on load");
  CHECK(adapter.num_layers() == model.config().num_layers,
        "the adapter has {} layers, the model {}", adapter.num_layers(), model.config().num_layers);
  // The merged checkpoint is written as a causal LM: a classifier's head would be lost.
  CHECK(!adapter.has_score_head(),
        "the adapter is a SEQ_CLS reward adapter with a score head: merging it is not "
        "supported; use it as it is (rewards: [{{type: reward_model, adapter: DIR}}])");
  CHECK(!model.config().sequence_classification,
        "merging into a sequence classifier ({}) is not supported", model.config().architecture);
  for (int64_t l = 0; l < adapter.num_layers(); ++l)
    for (int p = 4; p < 7; ++p)
      CHECK(adapter.experts(l, p) == 0,
            "merging an adapter on MoE experts ({}) is not supported yet", projection_path(l, p));
  CHECK(!out_dir.empty(), "the output directory is empty");
  const fs::path out = fs::absolute(out_dir).lexically_normal();
  CHECK(!within(out, model.dir()),
        "the output directory '{}' is the model directory '{}' or inside it; choose a new "
        "directory elsewhere",
        out_dir, model.dir());
  CHECK(!fs::exists(out) || (fs::is_directory(out) && fs::is_empty(out)),
        "the output '{}' exists and is not an empty directory; the merge writes a new one",
        out_dir);
  const fs::path parent = out.has_filename() ? out.parent_path() : out.parent_path().parent_path();
  CHECK(fs::is_directory(parent), "the parent directory of '{}' does not exist", out_dir);

  const std::string name =
      out.has_filename() ? out.filename().string() : out.parent_path().filename().string();
  const fs::path tmp = parent / ("." + name + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  try {
    fs::create_directories(tmp);
    if (!options.fp8) {
      write_unquantized(model, adapter, tmp, options.dtype, options.dtype);
    } else {
      // The merged linears are staged in f32 (quantized from the exact merge, not from a
      // bf16 rounding of it) and loaded with the scheme, so the FP8 checkpoint comes from
      // the same quantizer and writer as `fp8rl quantize`.
      const fs::path staging = tmp / ".staging";
      fs::create_directories(staging);
      write_unquantized(model, adapter, staging, options.dtype, DType::f32);
      {
        LoadOptions load;
        load.fp8 = options.fp8;
        const Model staged = Model::load(staging.string(), load);
        write_fp8_checkpoint(staged, tmp.string(), Fp8Format::compressed_tensors);
      }
      fs::remove_all(staging);
    }
    copy_model_files(model.dir(), tmp.string());
    if (fs::exists(out)) fs::remove(out);  // an empty directory (checked above)
    fs::rename(tmp, out);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
}

}  // namespace fp8rl
