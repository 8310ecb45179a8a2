// A reward model as a reward function (TRL's reward_funcs entry that is a model): a sequence
// classifier scores each prompt + completion, and its first score is the reward.
//
// The reward model reads text with its own tokenizer and chat template, as TRL does: a
// conversational sample is re-rendered as prompt messages + {role: assistant, content:
// completion} with the reward model's template (no generation prompt), a text sample is prompt
// + completion; both are tokenized without special tokens. The score is the head at the last
// token that is not the reward model's pad token (model/sequence_score.h).
//
// The classifier is a *ForSequenceClassification checkpoint (its `score` head), optionally
// with a PEFT adapter, or any supported base with a SEQ_CLS adapter whose modules_to_save hold
// the head (what fp8rl reward trains). When the base is the policy's own directory the policy's
// frozen weights serve both (one copy): only the adapters differ.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/adapter.h"
#include "model/model.h"
#include "model/sequence_score.h"
#include "ops/context.h"
#include "ops/standby_region.h"
#include "rl/reward.h"
#include "rl/reward_set.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

struct RewardModelOptions {
  std::string name = "reward_model";
  std::string model;    // model directory
  std::string adapter;  // PEFT adapter directory; empty: none
  // nullopt: the checkpoint's own precision (FP8 checkpoints as stored); a scheme: quantized
  // on load (off: unquantized). Not used when the policy's weights are shared.
  std::optional<Fp8Scheme> fp8;
  int64_t max_batch_tokens = 4096;  // tokens per scoring forward
};

// What a reward model shares with its run: the device and the policy's weights.
struct RewardModelHost {
  Context* ctx = nullptr;
  const Model* policy = nullptr;  // shared when the reward model's `model` is its directory
  // A dry run's plan: a reward model with weights of its own gets their shapes on a measuring
  // context (nothing read or allocated); it plans (plan_scoring) but cannot score.
  bool shapes_only = false;
  // The policy's directory, if given: what `policy` was made from (a plan_only session's
  // shapes name none); empty: policy->dir().
  std::string policy_dir = {};
};

class RewardModelReward final : public RewardFunction {
 public:
  // Checks what can be checked without weights (config.json's architecture and labels, the
  // adapter's config, the tokenizer and its vocabulary): a bad reward model fails before the
  // run loads anything.
  explicit RewardModelReward(RewardModelOptions options);
  ~RewardModelReward() override;
  // Loads the weights (or takes the policy's) onto the host's device.
  void load(const RewardModelHost& host);
  bool loaded() const { return model_ != nullptr; }
  bool shares_policy() const { return own_model_ == nullptr && model_ != nullptr; }
  const Model* own_model() const { return own_model_.get(); }  // null when shared (or unloaded)
  size_t adapter_bytes() const { return adapter_ != nullptr ? adapter_->nbytes() : 0; }

  // After load(): plans scoring calls of up to `sequences` samples of up to `max_length`
  // tokens (a rollout's, in the policy's tokens: the reward model's own tokenizer may make
  // more, which then grows the region) and from now on runs each scoring forward's KV pool
  // in `region`: one more phase of the run's standby region. The caller sizes the region and
  // the scratch arena with the plan before anything holds them.
  ScorePlan plan_scoring(StandbyRegion& region, int64_t sequences, int64_t max_length);

  const std::string& name() const override { return options_.name; }
  RewardValues score(const RewardBatch& batch) override;
  // The token ids the reward model reads for each sample of the batch.
  std::vector<std::vector<int32_t>> encode(const RewardBatch& batch) const;

 private:
  RewardModelOptions options_;
  std::optional<int64_t> pad_token_id_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  std::optional<ChatTemplateConfig> chat_;
  std::unique_ptr<Model> own_model_;
  const Model* model_ = nullptr;
  std::unique_ptr<LoraAdapter> adapter_;
  Context ctx_;
  std::unique_ptr<Arena> scratch_;  // the CPU's scratch for scoring, apart from the run's
  bool shapes_only_ = false;
  StandbyRegion* region_ = nullptr;  // where scoring's KV lies (plan_scoring); null: its own
};

// Loads every reward_model function of the set (RewardModelReward::load).
void load_reward_models(RewardSet& set, const RewardModelHost& host);

// What a run's reward models take beside the policy: the largest scoring phase of the set's
// loaded reward models (plan_scoring with `region`; zero without any), their own weights'
// and their adapters' bytes.
struct RewardModelsPlan {
  ScorePlan scoring;
  size_t weights_bytes = 0, adapter_bytes = 0;
  int64_t count = 0;  // reward models planned
};
RewardModelsPlan plan_reward_models(RewardSet& set, StandbyRegion& region, int64_t sequences,
                                    int64_t max_length);

}  // namespace fp8rl
