#include "node/allreduce_service.h"

#include <algorithm>
#include <cmath>

#include "config/config_loader.h"
#include "core/builtin_graph.h"
#include "core/hex.h"
#include "core/json_line.h"
#include "core/onnx/onnx_writer.h"
#include "core/graph/graph_model.h"
#include "core/sha256.h"
#include "collective/group_members.h"
#include "collective/wire_floats.h"
#include "node/ring_liveness.h"
#include "crypto/key_files.h"

namespace fedmesh {

AllreduceService::~AllreduceService() = default;

Status AllreduceService::StartSwim(const std::vector<collective::RingMember>& members, int rank,
                                   collective::ElasticOptions& eo) {
  // SWIM's own transport, one port above the ring's, between the same keys.
  std::vector<collective::RingMember> swim = members;
  std::vector<PublicIdentity> group;
  for (collective::RingMember& m : swim) {
    FM_ASSIGN_OR_RETURN(m.endpoint, SwimEndpoint(m.endpoint));
    group.push_back(m.identity);
  }
  FM_ASSIGN_OR_RETURN(const std::string listen, SwimEndpoint(config_.collective.listen));
  collective::ZmqRingTransportOptions to;
  to.max_chunk_bytes = 1 << 20;  // probes and syncs are small
  to.linger_ms = 0;
  FM_ASSIGN_OR_RETURN(swim_transport_, collective::ZmqRingTransport::Create(*identity_, swim, listen, to));
  RingLivenessOptions lo;
  lo.group_id = config_.federation_id + "/collective";
  lo.swim.probe_interval_s = static_cast<double>(config_.collective.swim_probe_ms) / 1000;
  lo.swim.probe_timeout_s = lo.swim.probe_interval_s * 0.4;
  lo.swim.suspicion_timeout_s = static_cast<double>(config_.collective.swim_suspicion_ms) / 1000;
  lo.swim.join_retry_s = lo.swim.probe_interval_s;
  lo.swim.sync_interval_s = 4 * lo.swim.probe_interval_s;
  FM_ASSIGN_OR_RETURN(liveness_, RingLiveness::Start(lo, *identity_, std::move(group), rank, swim_transport_.get()));
  RingLiveness* l = liveness_.get();
  eo.dead = [l](int member) { return l->Dead(member); };
  if (log_) {
    log_("SWIM failure detection on " + listen + " (probe every " + std::to_string(config_.collective.swim_probe_ms) +
         " ms, suspicion " + std::to_string(config_.collective.swim_suspicion_ms) + " ms)");
  }
  return Status::OK();
}

Result<std::unique_ptr<AllreduceService>> AllreduceService::Create(const NodeConfig& config, Env* env,
                                                                   std::function<void(const std::string&)> log) {
  std::unique_ptr<AllreduceService> s(new AllreduceService());
  s->config_ = config;
  s->env_ = env;
  s->log_ = std::move(log);
  FM_ASSIGN_OR_RETURN(Identity identity, FromKey(ReadIdentity(config.key_path), config.config_path, "node", "key"));
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
  FM_ASSIGN_OR_RETURN(to.security, collective::ParseRingSecurity(config.collective.security));
  to.log = s->log_;
  FM_ASSIGN_OR_RETURN(s->transport_,
                      collective::ZmqRingTransport::Create(*s->identity_, members, config.collective.listen, to));
  collective::CommunicatorOptions co;
  co.ring.size = static_cast<int>(members.size());
  co.ring.rank = rank;
  co.ring.chunk_bytes = static_cast<uint64_t>(config.collective.chunk_kb) * 1024;
  co.ring.wire = collective::WireTypeOfCompression(config.collective.compression).value();
  co.timeout_ms = static_cast<int>(config.collective.timeout_ms);

  TrainerOptions topt = t.trainer;
  AllreduceService* self = s.get();
  const bool elastic = config.collective.elastic;
  const int64_t k = config.collective.sync_every;
  if (elastic) {
    collective::ElasticOptions eo;
    eo.comm = co;
    eo.reform_window_ms = static_cast<int>(config.collective.reform_window_ms);
    eo.start_window_ms = static_cast<int>(config.collective.timeout_ms);
    eo.min_members = static_cast<int>(config.collective.min_members);
    if (config.collective.swim) FM_RETURN_IF_ERROR(s->StartSwim(members, rank, eo));
    FM_ASSIGN_OR_RETURN(s->elastic_ring_, collective::ElasticRing::Create(eo, static_cast<int>(members.size()), rank,
                                                                          s->transport_.get()));
    collective::ElasticHooks hooks;
    hooks.save = [self] { return self->SaveState(); };
    hooks.restore = [self](std::span<const float> state) { return self->RestoreState(state); };
    if (k == 1) {
      hooks.apply = [self](std::span<const float> average) {
        // What the trainer does with an all-reduced gradient: the optimizer step.
        // A private copy: StateFromAverage zeroes the state's part of what it is given.
        std::vector<float> grads(average.begin(), average.end());
        self->StateFromAverage(std::span<float>(grads));
        Model& m = *self->site_.model;
        m.backend().CopyFromHost(m.grads(), grads.data(), grads.size() * sizeof(float));
        self->trainer_->optimizer().Step();
        return Status::OK();
      };
    } else {
      hooks.apply = [self](std::span<const float> average) { return self->site_.model->SetParams(average); };
    }
    hooks.log = s->log_;
    s->elastic_ = std::make_unique<collective::ElasticSteps>(s->elastic_ring_.get(), std::move(hooks));
    if (k == 1) {
      topt.gradient_hook = [self](std::span<float> grads) {
        self->StateIntoGrads(grads);
        FM_RETURN_IF_ERROR(self->elastic_->Step(grads));
        self->StateFromAverage(grads);
        return Status::OK();
      };
    } else {
      topt.step_hook = [self, k](int64_t steps) { return steps % k == 0 ? self->AllreduceParams() : Status::OK(); };
    }
  } else if (k == 1) {
    topt.gradient_hook = [self](std::span<float> grads) {
      self->StateIntoGrads(grads);
      FM_RETURN_IF_ERROR(self->comm_->Allreduce(grads, collective::ReduceOp::kAverage));
      self->StateFromAverage(grads);
      return Status::OK();
    };
  } else {
    // Counted over the epoch, not the call: an epoch may take two passes (RunEpochs).
    topt.step_hook = [self, k](int64_t) { return ++self->epoch_steps_ % k == 0 ? self->AllreduceParams() : Status::OK(); };
  }
  if (!elastic) {
    FM_ASSIGN_OR_RETURN(s->comm_, collective::Communicator::Create(co, s->transport_.get()));
  }
  s->trainer_ = std::make_unique<Trainer>(s->site_.model.get(), topt, env);
  s->log_("rank " + std::to_string(rank) + " of " + std::to_string(members.size()) + " on " +
          s->transport_->endpoint() + " (" + std::to_string(s->site_.train.size()) + " training examples, " +
          (config.collective.sync_every == 1 ? std::string("gradient all-reduce every step")
                                             : "model all-reduce every " + std::to_string(config.collective.sync_every) +
                                                   " steps") +
          ", " + config.collective.compression + " on the wire, " +
          collective::RingSecurityLabel(s->transport_->security()) +
          (elastic ? ", elastic" : "") + ")");
  return s;
}

// The model's buffers are in its backend's memory (a GPU's, with device = cuda): copied.
void AllreduceService::StateIntoGrads(std::span<float> grads) const {
  Model& m = *site_.model;
  const size_t t = m.num_trainable(), n = m.num_params() - t;
  if (n > 0) m.backend().CopyToHost(grads.data() + t, m.params() + t, n * sizeof(float));
}

void AllreduceService::StateFromAverage(std::span<float> grads) {
  Model& m = *site_.model;
  const size_t t = m.num_trainable(), n = m.num_params() - t;
  if (n > 0) m.backend().CopyFromHost(m.params() + t, grads.data() + t, n * sizeof(float));
  std::fill(grads.begin() + t, grads.end(), 0.0f);
}

Status AllreduceService::AllreduceParams() {
  params_ = site_.model->GetParams();
  if (elastic_) {
    FM_RETURN_IF_ERROR(elastic_->Step(std::span<float>(params_)));
  } else {
    FM_RETURN_IF_ERROR(comm_->Allreduce(std::span<float>(params_), collective::ReduceOp::kAverage));
  }
  return site_.model->SetParams(params_);
}

std::vector<float> AllreduceService::SaveState() const {
  std::vector<float> state = site_.model->GetParams();
  const std::vector<float> v = trainer_->optimizer().GetVelocity();
  state.insert(state.end(), v.begin(), v.end());
  state.push_back(static_cast<float>(steps_per_epoch_));
  return state;
}

Status AllreduceService::RestoreState(std::span<const float> state) {
  const size_t n = site_.model->num_params();
  const size_t v = trainer_->optimizer().GetVelocity().size();
  if (state.size() != n + v + 1) {
    return Status::InvalidArgument("the ring's training state has " + std::to_string(state.size()) +
                                   " values; this member's model needs " + std::to_string(n + v + 1));
  }
  FM_RETURN_IF_ERROR(site_.model->SetParams(state.subspan(0, n)));
  if (v > 0) FM_RETURN_IF_ERROR(trainer_->optimizer().SetVelocity(state.subspan(n, v)));
  steps_per_epoch_ = static_cast<int64_t>(state[n + v]);
  return Status::OK();
}

Status AllreduceService::SaveFinalModel(const std::string& sha_hex) {
  NodeCheckpoint cp;
  FM_ASSIGN_OR_RETURN(std::optional<NodeCheckpoint> old, store_->LoadCheckpoint());
  if (old) cp.model_version = old->model_version;
  ++cp.model_version;
  cp.model = site_.model->GetParams();
  cp.attributes["collective/model_sha256"] = sha_hex;
  cp.attributes["collective/size"] =
      std::to_string(elastic_ ? elastic_ring_->view().size() : static_cast<size_t>(comm_->size()));
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
  if (elastic_) return RunElastic(stop);
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
    // Exactly the agreed steps, so that every rank makes the same collective calls: a pass
    // can take fewer (a BatchNorm model leaves out a last batch of one), then another pass
    // makes them up.
    epoch_steps_ = 0;
    int64_t taken = 0;
    double loss_sum = 0;
    while (taken < steps_per_epoch) {
      FM_ASSIGN_OR_RETURN(EpochStats ep, trainer_->TrainSteps(site_.train, steps_per_epoch - taken));
      if (ep.steps == 0) return Status::Internal("a training pass took no step");
      taken += ep.steps;
      loss_sum += ep.mean_loss * static_cast<double>(ep.steps);
    }
    if (k > 1 && steps_per_epoch % k != 0) FM_RETURN_IF_ERROR(AllreduceParams());  // end every epoch in step
    stats.steps += taken;
    FM_RETURN_IF_ERROR(EndEpoch(e, taken, loss_sum / static_cast<double>(taken), comm_->rank(), comm_->size(), start, &stats));
  }
  FM_RETURN_IF_ERROR(SaveFinalModel(stats.model_sha256));
  // Nobody leaves while a neighbour may still need its chunks.
  FM_RETURN_IF_ERROR(comm_->Barrier());
  return stats;
}

Status AllreduceService::EndEpoch(int epoch, int64_t steps, double mean_loss, int rank, int size, double start,
                                  AllreduceRunStats* stats) {
  stats->epochs = epoch;
  const std::vector<float> p = site_.model->GetParams();
  const Sha256Digest digest = Sha256::Hash(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(p.data()), p.size() * sizeof(float)));
  stats->model_sha256 = Sha256Hex(digest);
  const uint64_t bytes_sent = elastic_ ? elastic_ring_->comm().ring().bytes_sent() : comm_->ring().bytes_sent();
  JsonLine line;
  line.Add("node", config_.node_id)
      .Add("rank", rank)
      .Add("size", size)
      .Add("epoch", epoch)
      .Add("steps", steps)
      .Add("train_loss", mean_loss)
      .Add("bytes_sent", static_cast<int64_t>(bytes_sent))
      .Add("time_s", env_->NowSeconds() - start);
  if (elastic_) line.Add("generation", static_cast<int64_t>(elastic_ring_->generation()));
  std::string shown;
  if (site_.test.size() > 0) {
    FM_ASSIGN_OR_RETURN(EvalStats ev, trainer_->Evaluate(site_.test));
    stats->test_accuracy = ev.accuracy;
    line.Add("test_accuracy", ev.accuracy).Add("test_loss", ev.loss);
    shown = ", test accuracy " + std::to_string(ev.accuracy);
  }
  line.Add("model_sha256", stats->model_sha256);
  if (!config_.training.metrics_path.empty()) {
    FM_RETURN_IF_ERROR(AppendJsonLine(config_.training.metrics_path, line));
  }
  log_("epoch " + std::to_string(epoch) + ": " + std::to_string(steps) + " steps, train loss " +
       std::to_string(mean_loss) + shown + ", model " + stats->model_sha256.substr(0, 16));
  return Status::OK();
}

Result<AllreduceRunStats> AllreduceService::RunElastic(const std::atomic<bool>* stop) {
  AllreduceRunStats stats;
  const double start = env_->NowSeconds();
  const int batch = config_.training.trainer.batch_size;
  steps_per_epoch_ = static_cast<int64_t>((site_.train.size() + batch - 1) / batch);
  // The first view (rank 0's model for everyone), or the running ring's state for a member
  // that was restarted.
  FM_RETURN_IF_ERROR(elastic_->Start().WithContext("forming the ring"));
  collective::ElasticRing& ring = *elastic_ring_;
  if (elastic_->fresh_start()) {
    // Steps per epoch: the smallest member's, so every member makes the same calls.
    const float mine = static_cast<float>((site_.train.size() + batch - 1) / batch);
    FM_ASSIGN_OR_RETURN(std::vector<float> all, ring.comm().Allgather(std::span<const float>(&mine, 1)));
    steps_per_epoch_ = static_cast<int64_t>(*std::min_element(all.begin(), all.end()));
  } else {
    log_("joined the running ring (generation " + std::to_string(ring.generation()) + ", members " +
         std::to_string(ring.view().size()) + ") at " + (config_.collective.sync_every == 1 ? "step " : "average ") +
         std::to_string(elastic_->steps_completed()));
  }
  // The ring's steps are its averages: one per training step (k = 1), or one per block of k
  // local steps, the last block of an epoch possibly shorter (local SGD ends every epoch in
  // step). A member that took the ring's state goes on from the start of the next block.
  const uint64_t k = static_cast<uint64_t>(config_.collective.sync_every);
  const uint64_t spe = static_cast<uint64_t>(std::max<int64_t>(steps_per_epoch_, 1));
  const uint64_t blocks = (spe + k - 1) / k;  // averages per epoch
  const uint64_t total = blocks * static_cast<uint64_t>(config_.training.epochs);
  double loss_sum = 0;
  int64_t loss_steps = 0;
  while (elastic_->steps_completed() < total) {
    if (stop != nullptr && stop->load()) return Status::Unavailable("stopped by a signal at step " + std::to_string(elastic_->steps_completed()));
    const uint64_t done = elastic_->steps_completed();
    const uint64_t epoch_end = (done / blocks + 1) * blocks;
    const uint64_t steps_left = spe - (done % blocks) * k;  // training steps left in this epoch
    Result<EpochStats> ep = trainer_->TrainSteps(site_.train, static_cast<int64_t>(steps_left));
    Status averaged = ep.status();
    if (ep.ok() && k > 1 && elastic_->steps_completed() < epoch_end) averaged = AllreduceParams();  // the last block
    if (!averaged.ok()) {
      if (elastic_->TakeResynced()) continue;  // took the ring's state: go on from its step
      return averaged;
    }
    loss_sum += ep->mean_loss * static_cast<double>(ep->steps);
    loss_steps += ep->steps;
    stats.steps += ep->steps;
    if (elastic_->steps_completed() == epoch_end) {
      FM_RETURN_IF_ERROR(EndEpoch(static_cast<int>(epoch_end / blocks), loss_steps, loss_steps ? loss_sum / loss_steps : 0.0,
                                  static_cast<int>(std::lower_bound(ring.view().begin(), ring.view().end(), ring.me()) -
                                                   ring.view().begin()),
                                  static_cast<int>(ring.view().size()), start, &stats));
      loss_sum = 0;
      loss_steps = 0;
    }
  }
  FM_RETURN_IF_ERROR(SaveFinalModel(stats.model_sha256));
  if (ring.reforms() > 0 || elastic_->rollbacks() > 0) {
    log_("the ring re-formed " + std::to_string(ring.reforms()) + " times (" + std::to_string(elastic_->rollbacks()) +
         " steps rolled back here); it ended with " + std::to_string(ring.view().size()) + " members");
  }
  // Nobody leaves while a neighbour may still need its chunks; a member that died at the
  // very end does not undo the run.
  if (Status s = ring.comm().Barrier(); !s.ok()) log_("the final barrier failed (" + s.ToString() + "); the model is saved");
  return stats;
}

}  // namespace fedmesh
