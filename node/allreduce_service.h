// AllreduceService: `fedmesh-node` with [train] mode = "allreduce" (docs/collectives.md).
// The sites of [collective] group train one model together, synchronously, with no
// aggregator: each rank trains on its own data and the ranks average exactly, over the
// ring collectives (collective/communicator.h) on CurveZMQ between the members' keys.
//   start      rank 0's initial model is broadcast, so every rank starts from it; the
//              ranks agree on the steps per epoch (the smallest rank's, so nobody waits
//              at a collective another rank never calls).
//   each step  sync_every = 1: the step's gradients are all-reduced (averaged) before the
//              optimizer step; every rank applies the same gradient to the same model, so
//              the models stay bit-identical. sync_every = k: local SGD, the models are
//              averaged every k steps (and once more at the end).
//   epochs     [train] epochs passes; after each, a metrics line (node, rank, epoch, train
//              loss, held-out accuracy and loss, bytes sent, seconds, model SHA-256).
//   end        the final model is saved in the node's store (fedmesh-model export --db),
//              and Run returns OK.
// Elastic ([collective] elastic, the default): a member silent for timeout_ms is taken for
// dead and the others re-form the ring and go on from the last average they all completed
// (a step's gradients, or with local SGD the model after a block of sync_every steps;
// collective/elastic_steps.h); a restarted member rejoins at a boundary with the ring's
// model, optimizer state and position; min_members bounds how few may go on. With
// [collective] swim, SWIM (node/ring_liveness.h) declares a dead member dead within about
// swim_probe_ms + swim_suspicion_ms and the ring goes on without waiting timeout_ms. Not
// elastic: a rank that dies stops the others with DeadlineExceeded after timeout_ms.
// Thread-safety: Run blocks its thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "collective/communicator.h"
#include "collective/elastic_steps.h"
#include "collective/zmq_ring_transport.h"
#include "core/env.h"
#include "core/status.h"
#include "core/trainer.h"
#include "crypto/identity.h"
#include "node/node_config.h"
#include "node/ring_liveness.h"
#include "node/site_model.h"
#include "storage/node_store.h"

namespace fedmesh {

struct AllreduceRunStats {
  int64_t epochs = 0;
  int64_t steps = 0;
  double test_accuracy = -1;  // after the last epoch; -1 without held-out data
  std::string model_sha256;   // hex, of the final float32 parameters
};

class AllreduceService {
 public:
  // Reads the key, the members' keys ([collective] allow) and the data, binds [collective]
  // listen. Errors name the file or key at fault.
  static Result<std::unique_ptr<AllreduceService>> Create(const NodeConfig& config, Env* env,
                                                          std::function<void(const std::string&)> log);
  ~AllreduceService();

  // Trains [train] epochs with the group; *stop ends it between steps (Cancelled).
  Result<AllreduceRunStats> Run(const std::atomic<bool>* stop);
  int rank() const { return elastic_ ? elastic_ring_->me() : comm_->rank(); }
  const std::string& endpoint() const { return transport_->endpoint(); }

 private:
  Result<AllreduceRunStats> RunEpochs(const std::atomic<bool>* stop);
  Result<AllreduceRunStats> RunElastic(const std::atomic<bool>* stop);
  // The metrics line and log line of a finished epoch.
  Status EndEpoch(int epoch, int64_t steps, double mean_loss, int rank, int size, double start,
                  AllreduceRunStats* stats);
  // Elastic hooks: the training state (parameters, optimizer velocity, steps per epoch).
  std::vector<float> SaveState() const;
  Status RestoreState(std::span<const float> state);
  AllreduceService() = default;
  // [collective] swim: starts the detector on every member's port + 1 and gives the elastic
  // ring its verdicts.
  Status StartSwim(const std::vector<collective::RingMember>& members, int rank, collective::ElasticOptions& eo);
  Status AllreduceParams();
  // Gradient all-reduce: a model's non-trainable state (BatchNorm running statistics, which
  // each rank's forward updates from its own batch) rides in the state positions of the
  // gradient buffer, whose gradient is zero, and comes back averaged, so that every rank
  // keeps the same model (DDP keeps buffers in step by broadcasting them).
  void StateIntoGrads(std::span<float> grads) const;
  void StateFromAverage(std::span<float> grads);
  Status SaveFinalModel(const std::string& sha_hex);

  NodeConfig config_;
  Env* env_ = nullptr;
  std::function<void(const std::string&)> log_;
  std::unique_ptr<Identity> identity_;
  SiteModel site_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<NodeStore> store_;
  // SWIM ([collective] swim): its transport, and the detector (stopped before the transport).
  std::unique_ptr<collective::ZmqRingTransport> swim_transport_;
  std::unique_ptr<RingLiveness> liveness_;
  std::unique_ptr<collective::ZmqRingTransport> transport_;
  std::unique_ptr<collective::Communicator> comm_;             // not elastic
  std::unique_ptr<collective::ElasticRing> elastic_ring_;     // elastic
  std::unique_ptr<collective::ElasticSteps> elastic_;
  int64_t steps_per_epoch_ = 0;
  int64_t epoch_steps_ = 0;  // not elastic, local SGD: training steps so far in this epoch
  std::vector<float> params_;  // scratch for model averaging
};

}  // namespace fedmesh
