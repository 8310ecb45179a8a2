#include "rl/reward_model.h"

#include <algorithm>
#include <filesystem>

#include "core/check.h"
#include "formats/json_read.h"
#include "formats/model_config.h"
#include "formats/quant_config.h"
#include "model/sequence_score.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

// The SEQ_CLS flag of an adapter directory's config, read before the weights load.
bool adapter_has_head(const std::string& dir) {
  const std::string path = dir + "/adapter_config.json";
  CHECK(fs::exists(path), "reward model adapter '{}' is not a PEFT adapter: no adapter_config.json",
        dir);
  return LoraConfig::from_peft_json(read_json_file(path), path).sequence_classification;
}

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

}  // namespace

RewardModelReward::RewardModelReward(RewardModelOptions o) : options_(std::move(o)) {
  const std::string& dir = options_.model;
  const std::string who = fmt::format("reward model '{}'", options_.name);
  CHECK(!dir.empty(), "{}: 'model' must name a model directory", who);
  CHECK(options_.max_batch_tokens > 0, "{}: max_batch_tokens must be positive", who);
  const ModelConfig config = ModelConfig::load(dir);
  const bool head_in_adapter = !options_.adapter.empty() && adapter_has_head(options_.adapter);
  CHECK(config.sequence_classification || head_in_adapter,
        "{}: '{}' is {} with no score head: give a *ForSequenceClassification checkpoint, or an "
        "adapter with task_type SEQ_CLS whose modules_to_save hold the score head (what fp8rl "
        "reward trains)",
        who, dir, config.architecture);
  // The head's labels are checked here for a checkpoint, at load for an adapter's head.
  CHECK(!config.sequence_classification || config.num_labels == 1,
        "{}: '{}' has num_labels = {}; a reward takes one score per sample (num_labels 1)", who,
        dir, config.num_labels);
  pad_token_id_ = config.pad_token_id;

  // Its own tokenizer and template: the adapter's directory first (a trainer saves them
  // there), then the model's.
  std::string tok_dir;
  for (const std::string& d : {options_.adapter, dir})
    if (tok_dir.empty() && !d.empty() && fs::exists(d + "/tokenizer.json")) tok_dir = d;
  CHECK(!tok_dir.empty(),
        "{}: neither '{}' nor the adapter has a tokenizer.json; the reward model reads the "
        "samples with its own tokenizer",
        who, dir);
  tokenizer_ = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_file(tok_dir));
  CHECK(tokenizer_->vocab_size() <= config.vocab_size,
        "{}: the tokenizer of '{}' has {} tokens, more than the reward model's vocab_size {}: "
        "its vocabulary does not fit the model",
        who, tok_dir, tokenizer_->vocab_size(), config.vocab_size);
  if (fs::exists(tok_dir + "/tokenizer_config.json")) {
    try {
      chat_ = load_chat_template_config(tok_dir);
    } catch (const Error&) {
      // No template: conversational samples are refused when they come (score()).
    }
  }
}

RewardModelReward::~RewardModelReward() = default;

void RewardModelReward::load(const RewardModelHost& host) {
  CHECK(host.ctx != nullptr, "reward model '{}': no device context to load onto", options_.name);
  ctx_ = *host.ctx;
  if (ctx_.device == Device::cpu) {
    scratch_ = std::make_unique<Arena>();
    ctx_.scratch = scratch_.get();
  }
  if (host.policy != nullptr &&
      same_directory(options_.model,
                     host.policy_dir.empty() ? host.policy->dir() : host.policy_dir)) {
    model_ = host.policy;  // the frozen base once; the adapters differ
  } else if (host.shapes_only) {
    // The weights' shapes as ModelSession plans them: the scheme asked for, else the stored.
    shapes_only_ = true;
    scratch_ = std::make_unique<Arena>(
        Arena::measuring(ctx_.device, ctx_.device == Device::cuda ? 256 : 64));
    ctx_ = Context{ctx_.device, scratch_.get()};
    ctx_.dry_run = true;
    const ModelConfig config = ModelConfig::load(options_.model);
    const Fp8Scheme stored = parse_quantization_config(config.quantization).weight;
    const DType unquantized =
        ctx_.device == Device::cpu && config.dtype == DType::f32 ? DType::f32 : DType::bf16;
    own_model_ = std::make_unique<Model>(
        Model::random(config, options_.fp8 ? options_.fp8 : std::optional<Fp8Scheme>(stored), ctx_,
                      0, true, unquantized));
    model_ = own_model_.get();
  } else {
    LoadOptions lo;
    lo.fp8 = options_.fp8;
    own_model_ = std::make_unique<Model>(Model::load(options_.model, lo));
    own_model_->to_device(ctx_);
    model_ = own_model_.get();
  }
  if (!options_.adapter.empty()) {
    adapter_ = std::make_unique<LoraAdapter>(LoraAdapter::load_peft(options_.adapter, *model_));
    CHECK(!adapter_->has_score_head() || adapter_->config().num_labels == 1,
          "reward model '{}': the adapter '{}' has a score head of {} labels; a reward takes one "
          "score per sample (num_labels 1)",
          options_.name, options_.adapter, adapter_->config().num_labels);
    adapter_->to_device(ctx_);
  }
}

std::vector<std::vector<int32_t>> RewardModelReward::encode(const RewardBatch& batch) const {
  std::vector<std::vector<int32_t>> ids;
  const bool conversational = !batch.prompt_messages.is_null();
  for (int64_t i = 0; i < batch.size(); ++i) {
    std::string text;
    if (conversational) {
      CHECK(chat_.has_value(),
            "reward model '{}': the prompts are conversations and '{}' has no chat template to "
            "render them with",
            options_.name, options_.model);
      ChatRequest request;
      for (const auto& m : batch.prompt_messages[size_t(i)])
        request.messages.push_back(nlohmann::ordered_json(m));
      nlohmann::ordered_json reply = nlohmann::ordered_json::object();
      reply["role"] = "assistant";
      reply["content"] = batch.completions[size_t(i)];
      request.messages.push_back(std::move(reply));
      text = ChatTemplate(chat_->source).render(build_chat_context(*chat_, request));
    } else {
      text = batch.prompts[size_t(i)] + batch.completions[size_t(i)];
    }
    ids.push_back(tokenizer_->encode(text, false));
    CHECK(!ids.back().empty(), "reward model '{}': sample {} has no tokens", options_.name, i);
  }
  return ids;
}

ScorePlan RewardModelReward::plan_scoring(StandbyRegion& region, int64_t sequences,
                                          int64_t max_length) {
  CHECK(loaded(), "reward model '{}' planned before its weights were loaded", options_.name);
  const LinearWeight head = adapter_ != nullptr && adapter_->has_score_head()
                                ? adapter_->score_head(ctx_.device)
                                : LinearWeight{};
  ScoreShape shape;
  shape.sequences = sequences;
  shape.max_length = model_->config().max_context > 0
                         ? std::min(max_length, model_->config().max_context)
                         : max_length;
  shape.max_batch_tokens = options_.max_batch_tokens;
  region_ = &region;
  return fp8rl::plan_scoring(ctx_, *model_, adapter_.get(), head.weight.empty() ? nullptr : &head,
                             shape);
}

RewardValues RewardModelReward::score(const RewardBatch& batch) {
  CHECK(loaded(), "reward model '{}' scored before its weights were loaded", options_.name);
  CHECK(!shapes_only_, "reward model '{}' was loaded as shapes for a plan; it cannot score",
        options_.name);
  const std::vector<std::vector<int32_t>> ids = encode(batch);
  const LinearWeight head = adapter_ != nullptr && adapter_->has_score_head()
                                ? adapter_->score_head(ctx_.device)
                                : LinearWeight{};
  ScoreOptions so;
  so.pad_token_id = pad_token_id_;
  so.max_batch_tokens = options_.max_batch_tokens;
  so.region = region_;
  so.holder = this;
  const std::vector<float> s = score_sequences(ctx_, *model_, adapter_.get(),
                                               head.weight.empty() ? nullptr : &head, ids, so);
  RewardValues out;
  for (float v : s) out.push_back(double(v));
  return out;
}

void load_reward_models(RewardSet& set, const RewardModelHost& host) {
  for (size_t i = 0; i < set.size(); ++i)
    if (auto* rm = dynamic_cast<RewardModelReward*>(&set.function(i))) rm->load(host);
}

RewardModelsPlan plan_reward_models(RewardSet& set, StandbyRegion& region, int64_t sequences,
                                    int64_t max_length) {
  RewardModelsPlan p;
  for (size_t i = 0; i < set.size(); ++i) {
    auto* rm = dynamic_cast<RewardModelReward*>(&set.function(i));
    if (rm == nullptr || !rm->loaded()) continue;
    const ScorePlan s = rm->plan_scoring(region, sequences, max_length);
    if (s.kv_bytes > p.scoring.kv_bytes) {
      p.scoring.kv_bytes = s.kv_bytes;
      p.scoring.kv_blocks = s.kv_blocks;
    }
    p.scoring.scratch_bytes = std::max(p.scoring.scratch_bytes, s.scratch_bytes);
    if (rm->own_model() != nullptr) p.weights_bytes += rm->own_model()->device_bytes();
    p.adapter_bytes += rm->adapter_bytes();
    ++p.count;
  }
  return p;
}

}  // namespace fp8rl
