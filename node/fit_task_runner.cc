#include "node/fit_task_runner.h"

#include <algorithm>
#include <cmath>

#include "core/codec/payload.h"
#include "core/codec/update_prediction.h"
#include "core/wire/wire_codec.h"
#include "core/rng.h"
#include "node/external_task.h"
#include "node/record_privacy.h"

namespace fedmesh {

uint64_t FitSeed(uint64_t seed, std::string_view node_id, uint64_t round) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the id, then SplitMix rounds
  for (char c : node_id) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return SplitMix64(SplitMix64(seed ^ 0x6669747365656400ull) ^ SplitMix64(h) ^
                    SplitMix64(round + 0x9E3779B97F4A7C15ull));
}

namespace {

FitOutcome Refuse(std::string why) {
  FitOutcome o;
  o.refused = std::move(why);
  return o;
}

}  // namespace

PreparedFitTask PrepareFitTask(const FitContext& ctx, const wire::FitTask& task) {
  PreparedFitTask p;
  auto refuse = [&p](std::string why) {
    p = PreparedFitTask{};
    p.refused = std::move(why);
    return std::move(p);
  };
  p.chain = *ctx.default_chain;
  if (!task.update_codec.empty()) {
    auto prescribed = codec::Chain::Parse(task.update_codec);
    if (!prescribed.ok()) return refuse("update codec: " + prescribed.status().message());
    p.chain = std::move(*prescribed);
  }
  const size_t n = ctx.model->num_params();
  if (task.with_prediction && task.secagg.has_value()) {
    return refuse("an update prediction cannot be applied under secure aggregation");
  }
  // Size first: it bounds what decoding allocates. With a prediction: model, then p.
  const uint64_t values = task.with_prediction ? 2 * uint64_t{n} : n;
  if (task.global_model.element_count != values) {
    return refuse("global model has " + std::to_string(task.global_model.element_count) +
                  " values but this node's model has " + std::to_string(n) + " parameters" +
                  (task.with_prediction ? " (x2 with its update prediction)" : "") +
                  "; check that [model] matches the aggregator's");
  }
  // Any chain; decoding guarantees finite values.
  auto global = codec::DecodePayload(task.global_model);
  if (!global.ok()) return refuse("global model: " + global.status().message());
  if (task.with_prediction) {
    if (Status s = codec::SplitPrediction(std::move(*global), n, &p.global, &p.prediction);
        !s.ok()) {
      return refuse("global model: " + s.message());
    }
  } else {
    p.global = std::move(*global);
  }
  p.trainer = ctx.trainer;
  p.trainer.batch_size = static_cast<int>(std::min<uint32_t>(task.batch_size, 1u << 30));
  p.trainer.sgd.lr = static_cast<float>(task.learning_rate);
  p.trainer.sgd.momentum = static_cast<float>(task.momentum);
  p.trainer.sgd.prox_mu = static_cast<float>(task.prox_mu);
  if (!task.loss.empty()) {  // the aggregator's loss; none from older senders: the node's
    auto kind = ParseLossKind(task.loss);
    if (!kind.ok()) return refuse(kind.status().message());
    p.trainer.loss = LossOptions{};
    p.trainer.loss.kind = *kind;
    p.trainer.loss.class_weights = task.class_weights;
    p.trainer.loss.pos_weight = task.pos_weight > 0 ? static_cast<float>(task.pos_weight) : 1.0f;
  }
  if (task.local_epochs < 1) return refuse("local_epochs must be >= 1");
  if (Status s = ValidateTrainerOptions(p.trainer); !s.ok()) return refuse(s.message());
  p.round = task.round;
  p.epochs = task.local_epochs;
  p.env = SeededEnv(ctx.clock, FitSeed(ctx.seed, ctx.node_id, task.round));
  return p;
}

Status ApplyLocalValues(const FitContext& ctx, std::vector<float>& global, const FitCarry& carry) {
  size_t local_total = 0;
  for (const auto& [offset, size] : ctx.local) {
    if (offset + size > global.size())
      return Status::Internal("a local tensor range lies outside the model");
    local_total += size;
  }
  if (!ctx.local.empty() && carry.local_values.size() == local_total) {
    size_t at = 0;
    for (const auto& [offset, size] : ctx.local) {
      std::copy(carry.local_values.begin() + at, carry.local_values.begin() + at + size,
                global.begin() + offset);
      at += size;
    }
  }
  return Status::OK();
}

std::span<const float> StartVelocity(const PreparedFitTask& p, const FitCarry& carry) {
  if (p.trainer.sgd.momentum > 0 && carry.velocity.size() == p.global.size()) {
    return carry.velocity;
  }
  return {};
}

namespace {

// The global model with the site's own local values loaded into ctx.model.
Status LoadWithLocalValues(const FitContext& ctx, std::vector<float>& global, const FitCarry& carry) {
  FM_RETURN_IF_ERROR(ApplyLocalValues(ctx, global, carry));
  return ctx.model->SetParams(global);
}

// Trains ctx.model from `start` for `epochs` on ctx.train with the task's settings (no
// proximal term) and adds its held-out loss and metrics to `metrics` as prefix + name.
Status TrainAndScore(const FitContext& ctx, const PreparedFitTask& p, const std::vector<float>& start,
                     uint32_t epochs, const Dataset& test, const std::string& prefix, uint64_t salt,
                     std::map<std::string, double>& metrics) {
  FM_RETURN_IF_ERROR(ctx.model->SetParams(start));
  TrainerOptions options = p.trainer;
  options.sgd.prox_mu = 0;
  SeededEnv env(ctx.clock, FitSeed(ctx.seed, ctx.node_id, p.round) ^ (salt * 0x9E3779B97F4A7C15ull));
  Trainer trainer(ctx.model, options, &env);
  for (uint32_t e = 0; e < epochs; ++e) FM_RETURN_IF_ERROR(trainer.TrainEpoch(*ctx.train).status());
  FM_ASSIGN_OR_RETURN(auto stats, trainer.Evaluate(test));
  if (std::isfinite(stats.loss)) metrics[prefix + "loss"] = stats.loss;
  for (const auto& [name, value] : stats.metrics)
    if (std::isfinite(value)) metrics[prefix + name] = value;
  return Status::OK();
}

}  // namespace

Result<FitOutcome> RunEvalTask(const FitContext& ctx, const wire::FitTask& task,
                               const FitCarry& carry, const Dataset& test) {
  FitOutcome out;
  if (!task.evaluate_only) return Status::Internal("RunEvalTask needs an evaluate_only task");
  if (ctx.external != nullptr) return RunEvalTaskExternally(ctx, task, carry);
  if (test.size() == 0) {
    out.refused = "this site has no held-out data to evaluate on ([data] test)";
    return out;
  }
  PreparedFitTask p = PrepareFitTask(ctx, task);
  if (!p.refused.empty()) {
    out.refused = std::move(p.refused);
    return out;
  }
  // A cross-evaluation candidate is another site's whole model, its local tensors too.
  FM_RETURN_IF_ERROR(task.candidate.empty() ? LoadWithLocalValues(ctx, p.global, carry)
                                            : ctx.model->SetParams(p.global));
  Trainer trainer(ctx.model, p.trainer, &p.env);
  auto stats = trainer.Evaluate(test);
  if (!stats.ok()) {
    out.refused = "evaluating round " + std::to_string(task.round) + ": " + stats.status().message();
    return out;
  }
  if (!std::isfinite(stats->loss)) {
    out.refused = "the model's loss on this site's held-out data is not finite";
    return out;
  }
  out.result.round = task.round;
  out.result.num_examples = test.size();
  out.result.train_loss = stats->loss;
  out.result.update = wire::FloatPayload({});
  out.result.evaluation = true;
  for (const auto& [name, value] : stats->metrics)
    if (std::isfinite(value)) out.result.metrics[name] = value;  // AUC of one class: NaN
  // "Did federation help this site?": the global model fine-tuned here, and the first
  // model trained here alone, scored on the same held-out rows.
  const bool can_train = ctx.train != nullptr && ctx.train->size() > 0;
  if (task.finetune_epochs > 0 && can_train) {
    FM_RETURN_IF_ERROR(TrainAndScore(ctx, p, p.global, task.finetune_epochs, test, "finetuned_",
                                     /*salt=*/1, out.result.metrics));
  }
  if (task.local_only_epochs > 0 && can_train && ctx.first_global != nullptr &&
      ctx.first_global->size() == p.global.size()) {
    FM_RETURN_IF_ERROR(TrainAndScore(ctx, p, *ctx.first_global, task.local_only_epochs, test,
                                     "local_only_", /*salt=*/2, out.result.metrics));
    out.local_model = ctx.model->GetParams();
  }
  out.global = std::move(p.global);
  return out;
}

Result<TrainedFit> TrainFitTask(const FitContext& ctx, PreparedFitTask& p, const FitCarry& carry) {
  Model& model = *ctx.model;
  // Local tensors start from the site's own values (the global model's in the first task).
  FM_RETURN_IF_ERROR(LoadWithLocalValues(ctx, p.global, carry));
  Trainer trainer(&model, p.trainer, &p.env);
  if (auto v = StartVelocity(p, carry); !v.empty()) {
    FM_RETURN_IF_ERROR(trainer.optimizer().SetVelocity(v));
  }
  if (p.trainer.sgd.prox_mu > 0) FM_RETURN_IF_ERROR(trainer.optimizer().SetProxAnchor(p.global));

  TrainedFit out;
  for (uint32_t e = 0; e < p.epochs; ++e) {
    if (ctx.stop && ctx.stop()) {
      out.stopped = true;
      return out;
    }
    FM_ASSIGN_OR_RETURN(out.last_epoch, trainer.TrainEpoch(*ctx.train));
  }
  out.params = model.GetParams();
  if (p.trainer.sgd.momentum > 0) out.velocity = trainer.optimizer().GetVelocity();
  return out;
}

Result<FitOutcome> FinishFitTask(const FitContext& ctx, PreparedFitTask& p, TrainedFit trained,
                                 FitCarry& carry) {
  FitOutcome out;
  out.last_epoch = trained.last_epoch;
  if (!std::isfinite(out.last_epoch.mean_loss)) return Refuse("training diverged (non-finite loss)");
  const size_t n = p.global.size();
  if (trained.params.size() != n) {
    return Status::Internal("trained " + std::to_string(trained.params.size()) +
                            " parameters for a model of " + std::to_string(n));
  }
  std::vector<float> delta = std::move(trained.params);
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(delta[i])) return Refuse("training diverged (non-finite weights)");
    delta[i] -= p.global[i];  // the update is the change to the model received
  }
  // Local tensors: the site keeps what it trained and sends nothing of them.
  std::vector<float> local_values;
  for (const auto& [offset, size] : ctx.local)
    for (size_t i = offset; i < offset + size; ++i) local_values.push_back(p.global[i] + delta[i]);
  if (ctx.corrupt) ctx.corrupt(delta);
  // What the aggregator already predicted need not be sent (it adds p back).
  if (!p.prediction.empty()) {
    for (size_t i = 0; i < n; ++i) delta[i] -= p.prediction[i];
  }
  for (const auto& [offset, size] : ctx.local)
    std::fill(delta.begin() + offset, delta.begin() + offset + size, 0.0f);

  // Error feedback: rebuilt when the chain changes. What the old chain left behind is still
  // owed to the aggregator, so its state carries over.
  const codec::Chain& chain = p.chain;
  std::optional<codec::ErrorFeedback> feedback = carry.feedback;
  if (!feedback || !(feedback->chain() == chain)) {
    auto next = codec::ErrorFeedback::Create(chain, ctx.feedback);
    if (!next.ok()) return Refuse("error feedback: " + next.status().message());
    if (feedback) {
      if (Status s = next->Restore(feedback->residual(), feedback->velocity()); !s.ok()) {
        return Refuse("error feedback: " + s.message());
      }
    }
    feedback.emplace(std::move(*next));
  }
  std::vector<uint8_t> bytes;
  // Drawn after the epochs' shuffles: the batched trainer leaves p.env where a Trainer would.
  if (Status s = feedback->Encode(delta, p.env.rng().NextU64(), &bytes); !s.ok()) {
    return Refuse("encoding the update failed: " + s.message());
  }

  out.result.round = p.round;
  out.result.num_examples = trained.num_examples > 0 ? trained.num_examples : ctx.train->size();
  out.result.applied_prediction = !p.prediction.empty();
  out.result.train_loss = out.last_epoch.mean_loss;
  out.result.update = codec::MakePayload(chain, delta.size(), std::move(bytes));
  out.result.bytes_before_codec = 4 * static_cast<uint64_t>(n);
  out.result.bytes_after_codec = out.result.update.bytes.size();
  out.global = std::move(p.global);
  out.chain_name = chain.name();
  carry.feedback = std::move(feedback);
  if (!ctx.local.empty()) carry.local_values = std::move(local_values);
  // Without momentum the optimizer's buffer is all zeros: carrying it would cost a model's
  // worth of memory (a simulator's million clients) or checkpoint space for nothing.
  if (p.trainer.sgd.momentum > 0) {
    carry.velocity = std::move(trained.velocity);
  } else {
    carry.velocity.clear();
  }
  return out;
}

Result<FitOutcome> RunFitTask(const FitContext& ctx, const wire::FitTask& task, FitCarry& carry) {
  PreparedFitTask prepared = PrepareFitTask(ctx, task);
  if (!prepared.refused.empty()) return Refuse(std::move(prepared.refused));
  double dp_q = 0.0;
  int64_t dp_steps = 0;
  if (ctx.privacy != nullptr && ctx.privacy->options().enabled()) {
    if (ctx.external != nullptr) return Refuse("dp-sgd cannot be applied to an external trainer's steps");
    const size_t n = ctx.train->size();
    if (n == 0) return Refuse("this site has no training data");
    const DpSgdEpoch epoch = DpSgdEpochOf(n, prepared.trainer.batch_size);
    dp_q = epoch.sampling_rate;
    dp_steps = int64_t{prepared.epochs} * epoch.steps;
    // The site decides: a task that would overspend its budget is refused, whoever asks.
    if (Status s = ctx.privacy->CheckBudget(dp_q, dp_steps); !s.ok()) return Refuse(s.message());
    std::optional<uint64_t> noise_seed;
    if (ctx.seeded_privacy_noise) noise_seed = FitSeed(ctx.seed ^ 0x64702d736764ull, ctx.node_id, task.round);
    FM_ASSIGN_OR_RETURN(prepared.trainer.dp, ctx.privacy->TrainerOptions(noise_seed));
  }
  TrainedFit trained;
  if (ctx.external != nullptr) {
    FM_ASSIGN_OR_RETURN(ExternalFit external, TrainFitTaskExternally(ctx, prepared, carry, task));
    if (!external.failed.empty()) return Refuse(std::move(external.failed));
    trained = std::move(external.trained);
  } else {
    auto t = TrainFitTask(ctx, prepared, carry);
    // Spent once training started, whatever came of it.
    if (dp_steps > 0) FM_RETURN_IF_ERROR(ctx.privacy->Spend(dp_q, dp_steps));
    FM_RETURN_IF_ERROR(t.status());
    trained = std::move(*t);
  }
  if (trained.stopped) {
    FitOutcome out;
    out.stopped = true;
    out.last_epoch = trained.last_epoch;
    return out;
  }
  FM_ASSIGN_OR_RETURN(FitOutcome out, FinishFitTask(ctx, prepared, std::move(trained), carry));
  if (dp_steps > 0) out.result.record_privacy = ctx.privacy->Report();
  return out;
}

}  // namespace fedmesh
