#include "node/allreduce_service.h"

#include <cmath>

#include "core/builtin_graph.h"
#include "core/hex.h"
#include "core/json_line.h"
#include "core/onnx/onnx_writer.h"
#include "core/graph/graph_model.h"
#include "core/sha256.h"
#include "collective/group_members.h"
#include "collective/wire_floats.h"
#include "crypto/key_files.h"

namespace fedmesh {

AllreduceService::~AllreduceService() = default;

Result<std::unique_ptr<AllreduceService>> AllreduceService::Create(const NodeConfig& config, Env* env,
                                                                   std::function<void(const std::string&)> log) {
  std::unique_ptr<AllreduceService> s(new AllreduceService());
  s->config_ = config;
  s->env_ = env;
  s->log_ = std::move(log);
  FM_ASSIGN_OR_RETURN(Identity identity, ReadIdentity(config.key_path));
  if (identity.name() != config.node_id) {
    return Status::InvalidArgument("key file '" + config.key_path + "' belongs to site '" + identity.name() +
                                   "' but [node] id is '" + config.node_id + "'");
  }
  s->identity_ = std::make_unique<Identity>(std::move(identity));
  FM_ASSIGN_OR_RETURN(collective::ResolvedGroup group,
                      collective::ResolveGroup(config.collective.group, config.collective.allow_dir, *s->identity_,
                                               "[collective] group"));
  const std::vector<collective::RingMember>& members = group.members;
  const int rank = group.my_rank;

  const LocalTrainingOptions& t = config.training;
  FM_ASSIGN_OR_RETURN(s->site_, LoadSiteModel(t, /*with_test=*/true));
  FM_ASSIGN_OR_RETURN(s->store_, NodeStore::Open(config.db_path));
  collective::ZmqRingTransportOptions to;
  to.max_chunk_bytes = static_cast<uint64_t>(config.collective.chunk_kb) * 1024 * 2;
  FM_ASSIGN_OR_RETURN(s->transport_,
                      collective::ZmqRingTransport::Create(*s->identity_, members, config.collective.listen, to));
  collective::CommunicatorOptions co;
  co.ring.size = static_cast<int>(members.size());
  co.ring.rank = rank;
  co.ring.chunk_bytes = static_cast<uint64_t>(config.collective.chunk_kb) * 1024;
  co.ring.wire = collective::WireTypeOfCompression(config.collective.compression).value();
  co.timeout_ms = static_cast<int>(config.collective.timeout_ms);
  FM_ASSIGN_OR_RETURN(s->comm_, collective::Communicator::Create(co, s->transport_.get()));

  TrainerOptions topt = t.trainer;
  AllreduceService* self = s.get();
  if (config.collective.sync_every == 1) {
    topt.gradient_hook = [self](std::span<float> grads) {
      return self->comm_->Allreduce(grads, collective::ReduceOp::kAverage);
    };
  } else {
    const int64_t k = config.collective.sync_every;
    topt.step_hook = [self, k](int64_t steps) { return steps % k == 0 ? self->AllreduceParams() : Status::OK(); };
  }
  s->trainer_ = std::make_unique<Trainer>(s->site_.model.get(), topt, env);
  s->log_("rank " + std::to_string(rank) + " of " + std::to_string(members.size()) + " on " +
          s->transport_->endpoint() + " (" + std::to_string(s->site_.train.size()) + " training examples, " +
          (config.collective.sync_every == 1 ? std::string("gradient all-reduce every step")
                                             : "model all-reduce every " + std::to_string(config.collective.sync_every) +
                                                   " steps") +
          ", " + config.collective.compression + " on the wire)");
  return s;
}

Status AllreduceService::AllreduceParams() {
  params_ = site_.model->GetParams();
  FM_RETURN_IF_ERROR(comm_->Allreduce(std::span<float>(params_), collective::ReduceOp::kAverage));
  return site_.model->SetParams(params_);
}

Status AllreduceService::SaveFinalModel(const std::string& sha_hex) {
  NodeCheckpoint cp;
  FM_ASSIGN_OR_RETURN(std::optional<NodeCheckpoint> old, store_->LoadCheckpoint());
  if (old) cp.model_version = old->model_version;
  ++cp.model_version;
  cp.model = site_.model->GetParams();
  cp.attributes["collective/model_sha256"] = sha_hex;
  cp.attributes["collective/size"] = std::to_string(comm_->size());
  if (const graph::GraphModel* g = site_.model->graph_model()) {
    // fedmesh-model export --db rebuilds the model from its graph.
    FM_ASSIGN_OR_RETURN(std::string onnx, onnx::SerializeArchitecture(g->graph()));
    cp.attributes["model/graph_hex"] = ToHex(onnx);
    cp.attributes["model/graph_sha256"] = g->hash();
  } else {
    cp.attributes["model/spec"] = SpecToText(config_.training.model);
  }
  return store_->SaveCheckpoint(cp);
}

Result<AllreduceRunStats> AllreduceService::Run(const std::atomic<bool>* stop) {
  Result<AllreduceRunStats> r = RunEpochs(stop);
  // A failed run: a dead neighbour will never take what is queued for it; do not wait
  // long for it on the way out (a successful one waits up to linger_ms for its last chunks).
  if (!r.ok()) transport_->SetLinger(1000);
  return r;
}

Result<AllreduceRunStats> AllreduceService::RunEpochs(const std::atomic<bool>* stop) {
  AllreduceRunStats stats;
  const double start = env_->NowSeconds();
  // Everybody starts from rank 0's model.
  params_ = site_.model->GetParams();
  FM_RETURN_IF_ERROR(comm_->Broadcast(std::span<float>(params_), 0).WithContext("broadcasting the initial model"));
  FM_RETURN_IF_ERROR(site_.model->SetParams(params_));
  // Steps per epoch: the smallest rank's, so every rank makes the same collective calls.
  const int batch = config_.training.trainer.batch_size;
  const float mine = static_cast<float>((site_.train.size() + batch - 1) / batch);
  FM_ASSIGN_OR_RETURN(std::vector<float> all, comm_->Allgather(std::span<const float>(&mine, 1)));
  const int64_t steps_per_epoch = static_cast<int64_t>(*std::min_element(all.begin(), all.end()));
  if (steps_per_epoch != static_cast<int64_t>(mine)) {
    log_("steps per epoch: " + std::to_string(steps_per_epoch) + " (the smallest rank's; this rank has data for " +
         std::to_string(static_cast<int64_t>(mine)) + ")");
  }
  const int64_t k = config_.collective.sync_every;
  for (int e = 1; e <= config_.training.epochs; ++e) {
    if (stop != nullptr && stop->load()) return Status::Unavailable("stopped by a signal before epoch " + std::to_string(e));
    FM_ASSIGN_OR_RETURN(EpochStats ep, trainer_->TrainSteps(site_.train, steps_per_epoch));
    if (k > 1 && ep.steps % k != 0) FM_RETURN_IF_ERROR(AllreduceParams());  // end every epoch in step
    stats.steps += ep.steps;
    stats.epochs = e;
    const std::vector<float> p = site_.model->GetParams();
    const Sha256Digest digest = Sha256::Hash(std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(p.data()), p.size() * sizeof(float)));
    stats.model_sha256 = Sha256Hex(digest);
    JsonLine line;
    line.Add("node", config_.node_id)
        .Add("rank", comm_->rank())
        .Add("size", comm_->size())
        .Add("epoch", e)
        .Add("steps", ep.steps)
        .Add("train_loss", ep.mean_loss)
        .Add("bytes_sent", static_cast<int64_t>(comm_->ring().bytes_sent()))
        .Add("time_s", env_->NowSeconds() - start);
    std::string shown;
    if (site_.test.size() > 0) {
      FM_ASSIGN_OR_RETURN(EvalStats ev, trainer_->Evaluate(site_.test));
      stats.test_accuracy = ev.accuracy;
      line.Add("test_accuracy", ev.accuracy).Add("test_loss", ev.loss);
      shown = ", test accuracy " + std::to_string(ev.accuracy);
    }
    line.Add("model_sha256", stats.model_sha256);
    if (!config_.training.metrics_path.empty()) {
      FM_RETURN_IF_ERROR(AppendJsonLine(config_.training.metrics_path, line));
    }
    log_("epoch " + std::to_string(e) + ": " + std::to_string(ep.steps) + " steps, train loss " +
         std::to_string(ep.mean_loss) + shown + ", model " + stats.model_sha256.substr(0, 16));
  }
  FM_RETURN_IF_ERROR(SaveFinalModel(stats.model_sha256));
  // Nobody leaves while a neighbour may still need its chunks.
  FM_RETURN_IF_ERROR(comm_->Barrier());
  return stats;
}

}  // namespace fedmesh
