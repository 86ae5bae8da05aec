// BatchedTrainer: local training of up to `capacity` clients at once, each with its own
// weights, momentum buffer, data and batch order, through one BatchedOps (CPU or one GPU).
// It reproduces, client by client, what Trainer::TrainEpoch (core/trainer.h) does over
// `epochs` epochs on a Model of the same spec: the same shuffle per epoch drawn from the
// client's own Rng, the same batches (the last one partial), the gradient of the batch's
// mean loss, dropout masks seeded by SplitMix64(step) as Model::ForwardBackward seeds them,
// one fused SGD step per batch (momentum, weight decay, FedProx), and the same per-epoch
// statistics. On CPU ops the results equal the sequential Trainer's (tests/core/
// batched_trainer_test.cc); on CUDA they agree to float rounding.
//
// The clients run in lockstep: step s trains every client that has an s-th batch in the
// epoch. Clients are ordered by their steps per epoch, so the ones still training are a
// prefix and the kernels cover only them; a client whose data is used up waits (its
// weights and velocity untouched) until the epoch ends for all. The clients' samples are
// uploaded to ops memory once per call (or kept from the call before, see Train); a step
// uploads only its sample indices, and the ops gather the batches (BatchedOps::GatherRows).
//
// Only models made of Flatten, Dense, ReLU and Dropout layers (logreg, mlp) are supported;
// Create fails with Unimplemented for any other (cnn).
// Thread-safety: one thread drives a trainer at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/batched/batched_ops.h"
#include "core/data/dataset.h"
#include "core/env.h"
#include "core/model.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/trainer.h"

namespace fedmesh {

// One client's input to BatchedTrainer::Train. The spans and pointers must stay valid for
// the call.
struct BatchedClient {
  std::span<const float> params;    // start weights, num_params() values
  std::span<const float> velocity;  // momentum buffer to continue; empty = zeros
  // FedProx anchor (the round's global model), used when options.sgd.prox_mu > 0; empty =
  // no proximal term, as Sgd without an anchor. All clients of a call or none have one.
  std::span<const float> prox_anchor;
  const Dataset* data = nullptr;  // the client's training samples, not empty
  // Names `data` across calls: the trainer keeps the samples of a nonzero id in ops memory
  // (a GPU up to kGpuResidentBytes of them; the CPU the last call's) and uploads them again
  // only when the id is new or its size changed. 0: uploaded in every call. REQUIRES: one
  // id, one content, for the trainer's life.
  uint64_t data_id = 0;
  // The client's batch orders: one Rng::Shuffle of 0..n-1 per epoch, as Trainer draws them
  // from its Env, so the generator is left exactly where the sequential run leaves it.
  Rng* rng = nullptr;
};

struct BatchedClientResult {
  std::vector<float> params;
  std::vector<float> velocity;     // the momentum buffer after training (zeros without momentum)
  std::vector<EpochStats> epochs;  // one per epoch; seconds is the whole group's epoch time
};

class BatchedTrainer {
 public:
  // How many bytes of clients' samples (4 per feature and label) stay in GPU memory
  // between calls, so that a client trained again is not uploaded again.
  static constexpr size_t kGpuResidentBytes = size_t{1} << 30;

  // Whether Create can train models of `spec`: the built-ins made of Flatten, Dense, ReLU
  // and Dropout layers (logreg, mlp).
  static bool Trains(const ModelSpec& spec) {
    return !IsOnnxModelName(spec.name) && (spec.name == "logreg" || spec.name == "mlp");
  }
  // A trainer for models of `spec` (BuildModel's), up to `capacity` >= 1 clients per Train
  // call. Unimplemented for a model with layers other than Flatten/Dense/ReLU/Dropout.
  static Result<std::unique_ptr<BatchedTrainer>> Create(const ModelSpec& spec,
                                                        std::unique_ptr<BatchedOps> ops,
                                                        int capacity);
  ~BatchedTrainer();

  int capacity() const { return capacity_; }
  size_t num_params() const { return num_params_; }
  const BatchedOps& ops() const { return *ops_; }
  BatchedOps& ops() { return *ops_; }

  // Trains every client for `epochs` >= 1 epochs with `options` (batch size, lr, momentum,
  // weight decay, prox_mu; eval_batch_size is not used) and returns their results in the
  // order given. InvalidArgument, naming the client, for input that does not fit (sizes,
  // data shape, empty data, too many clients), before any Rng is touched; the ops' error
  // if the device failed (the Rngs have then advanced).
  // `clock` (may be null) times the epochs for EpochStats::seconds.
  // A client with a data_id keeps its samples in ops memory for later calls (see
  // BatchedClient::data_id).
  Result<std::vector<BatchedClientResult>> Train(std::span<const BatchedClient> clients,
                                                 const TrainerOptions& options, int epochs,
                                                 const Env* clock = nullptr);

 private:
  enum class Kind { kFlatten, kDense, kRelu, kDropout };
  struct Stage {
    Kind kind;
    int in = 0, out = 0;      // Dense: features in and out; others: width (in == out)
    size_t param_offset = 0;  // Dense: its weights [out, in] then bias [out]
    float p = 0.0f;           // Dropout probability
    bool needs_dx = false;    // the gradient w.r.t. its input is used (a layer before has params)
    int seed_slot = -1;       // Dropout: its row of per-client seeds in the step upload
  };

  BatchedTrainer() = default;
  Status Reserve(int batch_size);
  // Makes every client's samples resident (uploading those that are not) and uploads each
  // slot's first row (client_of: the client of each slot).
  Status UploadData(std::span<const BatchedClient> clients, const std::vector<int>& client_of);
  Status EnsureStats(int epochs);

  std::unique_ptr<Backend> reference_backend_;
  std::unique_ptr<Model> reference_;  // the architecture, for CheckCompatible
  std::unique_ptr<BatchedOps> ops_;   // before every OpsBuffer: destroyed after them
  std::vector<Stage> stages_;
  int capacity_ = 0;
  size_t num_params_ = 0;
  int64_t param_stride_ = 0;  // floats between clients' parameter vectors
  int input_size_ = 0;
  int classes_ = 0;
  int dropout_layers_ = 0;

  // Per-client state, capacity x param_stride each.
  OpsBuffer<float> params_, grads_, velocity_, anchor_;
  // Activations for batches up to rows_: acts_[i] is stage i's input, acts_.back() the
  // logits; dacts_[i] the loss gradient w.r.t. acts_[i] (null where not needed).
  int rows_ = 0;
  std::vector<OpsBuffer<float>> owned_;
  std::vector<float*> acts_, dacts_, masks_;
  // The step upload: [rows: int32 x capacity][seeds: uint64 x dropout_layers x capacity]
  // [sample indices: int32 x capacity x rows_], each region 64-byte aligned; the same
  // layout in host staging. The gathered batch goes to acts_[0] and labels_.
  OpsBuffer<uint8_t> step_;
  std::vector<uint64_t> staging_;  // uint64 storage keeps every region aligned
  size_t seeds_offset_ = 0, idx_offset_ = 0, step_bytes_ = 0;
  OpsBuffer<int32_t> labels_;  // capacity x rows_
  // The clients' samples in ops memory (arena_rows_ rows, the first arena_used_ taken); the
  // resident ones by BatchedClient::data_id; offsets_ holds each slot's first row, as last
  // uploaded (uploaded_offsets_).
  struct Resident {
    int64_t row = 0;
    size_t size = 0;
  };
  size_t ResidentBytes() const;
  OpsBuffer<float> data_;
  OpsBuffer<int32_t> data_labels_;
  int64_t arena_rows_ = 0, arena_used_ = 0;
  std::map<uint64_t, Resident> resident_;
  OpsBuffer<int64_t> offsets_;  // capacity
  std::vector<int64_t> uploaded_offsets_;
  // Per-epoch statistics, epochs x capacity.
  int stats_epochs_ = 0;
  OpsBuffer<double> loss_;
  OpsBuffer<int64_t> correct_;
};

}  // namespace fedmesh
