// A FitTask served by the site's own trainer process (node/external_trainer.h): the
// middle phase of RunFitTask and the evaluation of RunEvalTask with the training and the
// scoring done elsewhere. The node's model gives the tensors' names and layout (a graph
// model's ONNX initializer names, which are the trainer module's state_dict names); the
// global model goes out with the site's local tensors in place, and what comes back is
// checked by ExternalTrainer and then finished exactly like fedmesh's own training
// (change, local tensors kept, codec, error feedback). Thread-safety: as RunFitTask.
#pragma once

#include <string>
#include <vector>

#include "core/model.h"
#include "core/status.h"
#include "core/wire/messages.h"
#include "node/fit_task_runner.h"
#include "node/trainer_protocol.h"

namespace fedmesh {

// The model's tensors in flat-vector order: a graph model's parameters, then its state
// (BatchNorm running statistics). FailedPrecondition for a built-in (layer) model: an
// external trainer needs the federation to train a graph model ([model] onnx).
Result<std::vector<trainer::TensorSpec>> TrainerTensors(const Model& model);

struct ExternalFit {
  // Non-empty: the task failed (the reason) and `trained` is not set.
  std::string failed;
  TrainedFit trained;  // params, num_examples, last_epoch.mean_loss = the trainer's "loss"
};

// Phase 2 of RunFitTask by ctx.external. The request carries the prepared settings
// (epochs, lr, batch, momentum, prox_mu, loss) and FitSeed for reproducible shuffles.
// `task.local_epochs` = 0 never reaches here (PrepareFitTask refuses it).
// `steps` > 0 asks for that many minibatch steps instead of epochs (gossip).
Result<ExternalFit> TrainFitTaskExternally(const FitContext& ctx, PreparedFitTask& prepared,
                                           const FitCarry& carry, const wire::FitTask& task,
                                           uint64_t steps = 0);

// RunEvalTask by ctx.external: the trainer evaluates the task's model on its held-out
// data; its "loss" and other metrics make the evaluation FitResult. Fine-tuned and
// local-only baselines are not asked of it. A failure is FitOutcome::refused.
Result<FitOutcome> RunEvalTaskExternally(const FitContext& ctx, const wire::FitTask& task,
                                         const FitCarry& carry);

}  // namespace fedmesh
