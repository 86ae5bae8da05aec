// RunFitTask: what a node does with one FitTask, without any I/O: decode the global model
// (any codec chain), train local_epochs on the node's data with the task's settings, and
// encode the change (local weights - global model) with the prescribed or the node's own
// codec chain through error feedback. fedmesh-node's FederatedClient wraps it with ZeroMQ,
// the wall clock and a checkpoint; fedmesh-sim calls the very same function for each
// virtual client (or, batching clients, its prepare and finish phases around a batched
// trainer that reproduces TrainFitTask), so simulated and real federations train
// identically.
//
// Randomness is a pure function of (seed, node id, round): the batch order and the codec's
// seed come from FitSeed, not from a stream that other events (retries, earlier rounds)
// advance. A restarted node that re-trains a round therefore sends the same update, and a
// simulator with the same ids and seed reproduces a real run.
// Thread-safety: one call at a time per FitCarry and Model; different (carry, model) pairs
// may run on different threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/codec/codec.h"
#include "core/codec/error_feedback.h"
#include "core/data/dataset.h"
#include "core/env.h"
#include "core/model.h"
#include "core/status.h"
#include "core/trainer.h"
#include "core/wire/messages.h"

namespace fedmesh {

class ExternalTrainer;
class RecordPrivacyLedger;

// What a node carries from one task to the next: the optimizer's momentum buffer and the
// codec's error feedback (created on first use with the chain the task needs).
struct FitCarry {
  std::vector<float> velocity;
  // The site's own values of its local tensors (FitContext::local), concatenated in range
  // order; empty until the first task trained them.
  std::vector<float> local_values;
  std::optional<codec::ErrorFeedback> feedback;
};

// The node's fixed side of every task.
struct FitContext {
  Model* model = nullptr;             // training workspace; its weights are overwritten
  const Dataset* train = nullptr;     // the node's private data
  TrainerOptions trainer;             // eval batch and weight decay; the task sets the rest
  const codec::Chain* default_chain = nullptr;  // used when the task prescribes none
  codec::ErrorFeedbackOptions feedback;
  std::string node_id;
  uint64_t seed = 0;                  // the node's [train] seed
  const Env* clock = nullptr;         // for samples/s only; may be null
  // Applied to the change before encoding. Empty for real nodes; the simulator's
  // Byzantine clients (sim/) corrupt their update here.
  std::function<void(std::vector<float>& delta)> corrupt;
  // Ranges (offset, size) of the flat vector that stay on this site ([model] local, e.g.
  // FedBN's BatchNorm tensors): trained from the site's own values rather than the global
  // model's, and sent as zeros, so they never leave it. Empty: everything is shared.
  std::vector<std::pair<size_t, size_t>> local;
  // Checked between epochs: true abandons the task (FitOutcome::stopped).
  std::function<bool()> stop;
  // The federation's first model (version 0) as this node received it, for the local-only
  // baseline an evaluation task may ask for (FitTask::local_only_epochs). May be null.
  const std::vector<float>* first_global = nullptr;
  // [train] external: the site's own trainer process trains and evaluates instead of
  // `model` (node/external_task.h); `model` then only gives the tensors' names and layout,
  // and `train` may be empty. Null (the default): fedmesh's trainer.
  ExternalTrainer* external = nullptr;
  // [privacy] mode = "dp-sgd": the site's ledger. A fit task whose planned DP-SGD steps
  // (local_epochs x ceil(n / batch) at q = batch / n) would exceed its budget is refused
  // with the ledger's reason; otherwise it trains with DP-SGD and the ledger spends those
  // steps once training has started (also when the task is stopped or its update refused).
  // Null (the default): no record-level DP.
  RecordPrivacyLedger* privacy = nullptr;
  // The simulator's DP-SGD noise is seeded from (seed, node, round) so runs replay; a real
  // site's comes from the OS CSPRNG (false, the default).
  bool seeded_privacy_noise = false;
};

struct FitOutcome {
  // Non-empty: the task was refused (a sentence saying why) and nothing else is set.
  std::string refused;
  bool stopped = false;          // abandoned because stop() became true
  wire::FitResult result;        // round, num_examples, train_loss, update, byte counts
  EpochStats last_epoch;
  std::vector<float> global;     // the decoded global model the node trained from
  std::string chain_name;        // the chain the update was encoded with
  // RunEvalTask with local_only_epochs: the local-only model's weights (for a site that
  // shares it for cross-evaluation); empty otherwise.
  std::vector<float> local_model;
};

// The seed of (node, round): mixes all three so nodes and rounds get independent streams.
uint64_t FitSeed(uint64_t seed, std::string_view node_id, uint64_t round);

// Serves `task`. A bad task (size or codec mismatch, invalid settings, divergence) is a
// refusal in FitOutcome::refused; an error Status means the model or trainer failed
// (internal). `carry` changes only when a result is produced.
// It is the three phases below in a row; fedmesh-sim's batched trainer (sim/, [sim]
// batched_clients) runs the middle one for many tasks at once instead.
Result<FitOutcome> RunFitTask(const FitContext& context, const wire::FitTask& task,
                              FitCarry& carry);

// Serves an evaluate_only task (federated evaluation): decodes the global model as
// RunFitTask does, keeps the site's local tensors, evaluates on `test` (the site's
// held-out data) and fills FitOutcome::result as an evaluation FitResult (num_examples,
// mean loss, finite metrics, empty update). With task.finetune_epochs it then trains that
// model on context.train for as many epochs and adds its held-out "finetuned_*" metrics;
// with task.local_only_epochs it trains context.first_global alone ("local_only_*"; left
// out when the node has no first model, e.g. it restarted since). Refused
// (FitOutcome::refused) when `test` is empty or the task does not fit the model. `carry`
// is not changed; the model's weights are left unspecified.
Result<FitOutcome> RunEvalTask(const FitContext& context, const wire::FitTask& task,
                               const FitCarry& carry, const Dataset& test);

// ---- RunFitTask's phases ----------------------------------------------------------------
// A task checked and decoded, ready to train.
struct PreparedFitTask {
  // Non-empty: the task is refused (a sentence saying why) and nothing else is set.
  std::string refused;
  uint64_t round = 0;
  uint32_t epochs = 0;          // local_epochs, >= 1
  codec::Chain chain;           // the update's chain: the task's, else the node's default
  std::vector<float> global;    // the decoded global model: start weights, FedProx anchor
  // The task's update prediction (core/codec/update_prediction.h), subtracted from the
  // change before encoding; empty when the task has none.
  std::vector<float> prediction;
  TrainerOptions trainer;       // the node's options with the task's batch, lr, momentum, mu
  // Randomness of the task (FitSeed): each epoch's shuffle, then the codec's seed, in
  // that order. Whatever trains the task must draw its shuffles from env.rng().
  SeededEnv env{nullptr, 0};
};

// What training produced, for FinishFitTask.
struct TrainedFit {
  bool stopped = false;          // context.stop() ended it early; nothing else is final
  std::vector<float> params;     // the weights after the last epoch
  std::vector<float> velocity;   // the momentum buffer; read only when momentum > 0
  EpochStats last_epoch;
  // The examples the update weighs; 0 = context.train->size(). An external trainer says.
  uint64_t num_examples = 0;
};

// Phase 1: checks the task against the node (reads only context.model->num_params()),
// decodes the global model and builds the training settings and the seeded Env.
PreparedFitTask PrepareFitTask(const FitContext& context, const wire::FitTask& task);

// The momentum buffer training starts from: the carried one when momentum is on and it
// fits, else empty (zeros).
std::span<const float> StartVelocity(const PreparedFitTask& prepared, const FitCarry& carry);

// The global model with the site's own values of its local tensors (FitContext::local;
// the global model's until a task trained them) written into `global`.
Status ApplyLocalValues(const FitContext& context, std::vector<float>& global, const FitCarry& carry);

// Phase 2 as a node runs it: prepared.epochs epochs with a Trainer on context.model,
// checking context.stop() before each.
Result<TrainedFit> TrainFitTask(const FitContext& context, PreparedFitTask& prepared,
                                const FitCarry& carry);

// Phase 3: refuses a diverged result, then the change (trained - global), the corrupt
// hook, error feedback and encoding (codec seed from prepared.env), and the carry update.
// REQUIRES: !trained.stopped, trained.params.size() == prepared.global.size().
Result<FitOutcome> FinishFitTask(const FitContext& context, PreparedFitTask& prepared,
                                 TrainedFit trained, FitCarry& carry);

}  // namespace fedmesh
