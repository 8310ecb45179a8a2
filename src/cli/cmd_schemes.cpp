// fp8rl schemes MODEL: the FP8 scaling schemes side by side on one model: weight bytes,
// KL(fp32 || fp8) and top-1 agreement against the unquantized logits, and forward time.
#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/check.h"
#include "core/rng.h"
#include "core/spelling.h"
#include "model/forward.h"

namespace fp8rl::cli {

namespace {

struct SchemesOptions {
  std::string model, ids;
  int64_t tokens = 128;
  int repeat = 3;
  uint64_t seed = 0;
};

struct Row {
  std::string scheme;
  double linear_bytes = 0, model_bytes = 0, kl = 0, top1 = 0, seconds = 0, cpu_seconds = 0;
};

// Best wall time of `repeat` forwards, and the process CPU time of that run (all threads):
// on a shared machine the two differ, and the CPU time is the one that says what the code costs.
Tensor run_forward(const Model& m, const std::vector<int32_t>& ids, double* seconds,
                   double* cpu_seconds, int repeat) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  const std::vector<int32_t> pos = iota(ids.size());
  Tensor logits = Tensor::empty({int64_t(ids.size()), m.config().vocab_size}, DType::f32);
  *seconds = INFINITY;
  for (int r = 0; r < repeat; ++r) {
    KvCache cache(m.config(), int64_t(ids.size()));
    SequenceInput seq{ids, pos, &cache};
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    forward(ctx, m, nullptr, {&seq, 1}, LogitRows::all, logits);  // the base model alone
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (dt.count() < *seconds) {
      *seconds = dt.count();
      *cpu_seconds = double(std::clock() - c0) / CLOCKS_PER_SEC;
    }
  }
  return logits;
}

// Mean over positions of KL(softmax(p) || softmax(q)), and the fraction of equal argmaxes.
void compare(const Tensor& p, const Tensor& q, double* kl, double* top1) {
  const int64_t rows = p.shape()[0], v = p.shape()[1];
  double kl_sum = 0;
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = p.ptr<float>() + r * v;
    const float* b = q.ptr<float>() + r * v;
    double ma = -INFINITY, mb = -INFINITY;
    int64_t ia = 0, ib = 0;
    for (int64_t j = 0; j < v; ++j) {
      if (a[j] > ma) ma = a[j], ia = j;
      if (b[j] > mb) mb = b[j], ib = j;
    }
    double za = 0, zb = 0;
    for (int64_t j = 0; j < v; ++j) za += std::exp(a[j] - ma), zb += std::exp(b[j] - mb);
    const double lza = std::log(za), lzb = std::log(zb);
    double k = 0;
    for (int64_t j = 0; j < v; ++j) {
      const double la = a[j] - ma - lza, lb = b[j] - mb - lzb;
      k += std::exp(la) * (la - lb);
    }
    kl_sum += k;
    same += ia == ib;
  }
  *kl = kl_sum / double(rows);
  *top1 = double(same) / double(rows);
}

void run_schemes(const SchemesOptions& o) {
  const ModelConfig config = ModelConfig::load(o.model);
  std::vector<int32_t> ids;
  if (!o.ids.empty()) {
    ids = parse_ids(o.ids);
  } else {
    CHECK(o.tokens > 0, "--tokens must be positive");
    for (int64_t i = 0; i < o.tokens; ++i)
      ids.push_back(int32_t(uniform01(o.seed, uint64_t(i)) * float(config.vocab_size)) %
                    int32_t(config.vocab_size));
  }
  CHECK(o.repeat > 0, "--repeat must be positive");
  std::vector<Row> rows;
  Tensor reference;
  for (Fp8Scheme s : {Fp8Scheme::off, Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block}) {
    LoadOptions load;
    load.fp8 = s;
    const Model m = Model::load(o.model, load);
    CHECK(!m.prequantized(),
          "schemes compares quantizations of an unquantized checkpoint; '{}' "
          "is already FP8",
          o.model);
    Row row;
    row.scheme = std::string(scheme_name(s));
    for (const auto& [name, w] : m.named_linears()) row.linear_bytes += double(w->nbytes());
    row.linear_bytes += double(m.expert_bytes());
    row.model_bytes = row.linear_bytes + double(m.embed.nbytes()) +
                      (config.tie_word_embeddings ? 0.0 : double(m.lm_head.weight.nbytes()));
    const Tensor logits = run_forward(m, ids, &row.seconds, &row.cpu_seconds, o.repeat);
    if (s == Fp8Scheme::off) reference = logits;
    compare(reference, logits, &row.kl, &row.top1);
    rows.push_back(row);
  }
  fmt::print("model {} ({}), {}, CPU forward best of {}\n", o.model, config.architecture,
             counted(int64_t(ids.size()), "token"), o.repeat);
  fmt::print("{:<8} {:>12} {:>12} {:>15} {:>7} {:>11} {:>11} {:>10}\n", "scheme", "linear MiB",
             "weights MiB", "KL(fp32||fp8)", "top-1", "forward ms", "CPU ms", "tokens/s");
  for (const Row& r : rows) {
    fmt::print("{:<8} {:>12.3f} {:>12.3f} {:>15.3e} {:>7.3f} {:>11.2f} {:>11.2f} {:>10.0f}\n",
               r.scheme, r.linear_bytes / 1048576.0, r.model_bytes / 1048576.0, r.kl, r.top1,
               r.seconds * 1e3, r.cpu_seconds * 1e3, double(ids.size()) / r.seconds);
  }
}

}  // namespace

void add_schemes_command(CLI::App& app) {
  auto o = std::make_shared<SchemesOptions>();
  CLI::App* c = app.add_subcommand(
      "schemes", "Compare FP8 scaling schemes (off/tensor/row/block): bytes, KL, top-1, speed");
  c->add_option("model", o->model, "Hugging Face model directory (unquantized)")->required();
  c->add_option("--ids", o->ids, "Comma-separated token ids (default: --tokens random ids)");
  c->add_option("--tokens", o->tokens, "Number of random token ids")->capture_default_str();
  c->add_option("--seed", o->seed, "Seed of the random ids")->capture_default_str();
  c->add_option("--repeat", o->repeat, "Timed forwards per scheme (best is shown)")
      ->capture_default_str();
  c->callback([o] { run_schemes(*o); });
}

}  // namespace fp8rl::cli
