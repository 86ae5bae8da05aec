#include "node/external_task.h"

#include <cmath>

#include "core/graph/graph_model.h"
#include "core/wire/wire_codec.h"
#include "node/external_trainer.h"

namespace fedmesh {

Result<std::vector<trainer::TensorSpec>> TrainerTensors(const Model& model) {
  const graph::GraphModel* g = model.graph_model();
  if (g == nullptr) {
    return Status::FailedPrecondition(
        "an external trainer ([train] external) needs the federation to train a graph model "
        "([model] onnx on the aggregator); this one trains the built-in '" + model.name() + "'");
  }
  std::vector<trainer::TensorSpec> out;
  size_t at = 0;
  for (const auto* slots : {&g->param_slots(), &g->state_slots()}) {
    for (const graph::TensorSlot& s : *slots) {
      // The payload is the flat vector itself, sent without a copy: slots must tile it.
      if (s.offset != at)
        return Status::Internal("graph tensor '" + s.name + "' is not where the flat vector's order puts it");
      out.push_back(trainer::TensorSpec{s.name, s.dims});
      at += s.size;
    }
  }
  if (at != model.num_params()) return Status::Internal("the graph's tensors do not cover its parameters");
  return out;
}

namespace {

trainer::TaskRequest Request(const FitContext& ctx, const PreparedFitTask& p, const wire::FitTask& task,
                             std::vector<trainer::TensorSpec> tensors) {
  trainer::TaskRequest r;
  r.round = task.round;
  r.node_id = ctx.node_id;
  r.epochs = p.epochs;
  r.lr = p.trainer.sgd.lr;
  r.batch = static_cast<uint32_t>(p.trainer.batch_size);
  r.momentum = p.trainer.sgd.momentum;
  r.prox_mu = p.trainer.sgd.prox_mu;
  r.seed = FitSeed(ctx.seed, ctx.node_id, task.round);
  r.loss = task.loss.empty() ? "cross_entropy" : task.loss;
  r.deadline_unix_ms = task.deadline_unix_ms;
  r.tensors = std::move(tensors);
  return r;
}

}  // namespace

Result<ExternalFit> TrainFitTaskExternally(const FitContext& ctx, PreparedFitTask& p,
                                           const FitCarry& carry, const wire::FitTask& task,
                                           uint64_t steps) {
  ExternalFit out;
  FM_ASSIGN_OR_RETURN(auto tensors, TrainerTensors(*ctx.model));
  trainer::TaskRequest request = Request(ctx, p, task, std::move(tensors));
  request.kind = "fit";
  if (steps > 0) {
    request.steps = steps;
    request.epochs = 0;
  }
  // Local tensors ([model] local) go out as the site's own values; the global model stays
  // in p.global, the base of the change.
  std::vector<float> start = p.global;
  FM_RETURN_IF_ERROR(ApplyLocalValues(ctx, start, carry));
  auto answer = ctx.external->Run(std::move(request), start, ctx.stop);
  if (!answer.ok()) {
    if (ctx.stop && ctx.stop()) {
      out.trained.stopped = true;
      return out;
    }
    out.failed = "the site's trainer failed: " + answer.status().message();
    return out;
  }
  out.trained.params = std::move(answer->values);
  out.trained.num_examples = answer->num_examples;
  auto loss = answer->metrics.find("loss");
  out.trained.last_epoch.mean_loss = loss != answer->metrics.end() ? static_cast<float>(loss->second) : 0.0f;
  out.trained.last_epoch.samples = static_cast<int64_t>(answer->num_examples);
  return out;
}

Result<FitOutcome> RunEvalTaskExternally(const FitContext& ctx, const wire::FitTask& task,
                                         const FitCarry& carry) {
  FitOutcome out;
  PreparedFitTask p = PrepareFitTask(ctx, task);
  if (!p.refused.empty()) {
    out.refused = std::move(p.refused);
    return out;
  }
  FM_ASSIGN_OR_RETURN(auto tensors, TrainerTensors(*ctx.model));
  trainer::TaskRequest request = Request(ctx, p, task, std::move(tensors));
  request.kind = "evaluate";
  std::vector<float> model = p.global;
  // A cross-evaluation candidate is another site's whole model, its local tensors too.
  if (task.candidate.empty()) FM_RETURN_IF_ERROR(ApplyLocalValues(ctx, model, carry));
  auto answer = ctx.external->Run(std::move(request), model, ctx.stop);
  if (!answer.ok()) {
    out.refused = "the site's trainer failed: " + answer.status().message();
    return out;
  }
  out.result.round = task.round;
  out.result.num_examples = answer->num_examples;
  out.result.update = wire::FloatPayload({});
  out.result.evaluation = true;
  for (const auto& [name, value] : answer->metrics) {
    if (name == "loss") {
      out.result.train_loss = value;
    } else {
      out.result.metrics[name] = value;
    }
  }
  out.global = std::move(p.global);
  return out;
}

}  // namespace fedmesh
