#include "core/batched/batched_trainer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "core/layers/activations.h"
#include "core/layers/dense.h"
#include "core/sgd.h"

namespace fedmesh {
namespace {

constexpr size_t Align64(size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

// The buffers, declared after ops_, go back to it before it goes.
BatchedTrainer::~BatchedTrainer() = default;

Result<std::unique_ptr<BatchedTrainer>> BatchedTrainer::Create(const ModelSpec& spec,
                                                               std::unique_ptr<BatchedOps> ops,
                                                               int capacity) {
  if (ops == nullptr) return Status::InvalidArgument("batched training needs ops, got none");
  if (capacity < 1) {
    return Status::InvalidArgument("batched training needs room for at least 1 client, got " +
                                   std::to_string(capacity));
  }
  std::unique_ptr<BatchedTrainer> t(new BatchedTrainer());
  // The architecture comes from the model zoo itself, so layer order, parameter layout and
  // the per-layer dropout seeds are those of the Model the sequential Trainer steps.
  t->reference_backend_ = MakeCpuBackend(1);
  FM_ASSIGN_OR_RETURN(t->reference_,
                      BuildModel(spec, t->reference_backend_.get(), {BuiltinEngine::kLayers}));
  const Model& model = *t->reference_;
  int width = static_cast<int>(ShapeSize(model.input_shape()));
  size_t offset = 0;
  bool params_before = false;
  for (const auto& layer : model.layers()) {
    Stage st;
    st.in = st.out = width;
    st.needs_dx = params_before;
    if (dynamic_cast<const Flatten*>(layer.get()) != nullptr) {
      st.kind = Kind::kFlatten;
    } else if (dynamic_cast<const Relu*>(layer.get()) != nullptr) {
      st.kind = Kind::kRelu;
    } else if (dynamic_cast<const Dropout*>(layer.get()) != nullptr) {
      st.kind = Kind::kDropout;
      st.p = spec.dropout;
      st.seed_slot = t->dropout_layers_++;
      if (layer->Describe() != Dropout(spec.dropout).Describe()) {
        return Status::Internal("batched training: model '" + spec.name + "' has " +
                                layer->Describe() + " but its spec says dropout " +
                                std::to_string(spec.dropout));
      }
    } else if (dynamic_cast<const Dense*>(layer.get()) != nullptr) {
      st.kind = Kind::kDense;
      const size_t n = layer->num_params();  // out * (in + 1)
      st.out = static_cast<int>(n / (static_cast<size_t>(width) + 1));
      st.param_offset = offset;
      if (static_cast<size_t>(st.out) * (width + 1) != n ||
          layer->Describe() !=
              "Dense(" + std::to_string(width) + "->" + std::to_string(st.out) + ")") {
        return Status::Internal("batched training: cannot read the shape of " + layer->Describe());
      }
    } else {
      return Status::Unimplemented(
          "batched training supports models made of Dense, ReLU, Dropout and Flatten layers "
          "(logreg, mlp); model '" +
          spec.name + "' has " + layer->Describe() + ": train it one client at a time");
    }
    offset += layer->num_params();
    params_before = params_before || layer->num_params() > 0;
    width = st.out;
    t->stages_.push_back(st);
  }
  if (offset != model.num_params()) {
    return Status::Internal("batched training: layer parameters do not add up to the model's");
  }
  t->ops_ = std::move(ops);
  t->capacity_ = capacity;
  t->num_params_ = model.num_params();
  t->param_stride_ = static_cast<int64_t>((t->num_params_ + 15) / 16 * 16);  // 64-byte aligned
  t->input_size_ = static_cast<int>(ShapeSize(model.input_shape()));
  t->classes_ = model.num_classes();
  const size_t state = static_cast<size_t>(capacity) * t->param_stride_;
  FM_ASSIGN_OR_RETURN(t->params_, OpsBuffer<float>::Make(t->ops_.get(), state));
  FM_ASSIGN_OR_RETURN(t->grads_, OpsBuffer<float>::Make(t->ops_.get(), state));
  FM_ASSIGN_OR_RETURN(t->velocity_, OpsBuffer<float>::Make(t->ops_.get(), state));
  return t;
}

Status BatchedTrainer::Reserve(int rows) {
  if (rows <= rows_) return Status::OK();
  owned_.clear();
  step_.reset();
  rows_ = 0;
  const size_t cap = static_cast<size_t>(capacity_), R = static_cast<size_t>(rows);
  const size_t D = static_cast<size_t>(dropout_layers_);
  seeds_offset_ = Align64(sizeof(int32_t) * cap);
  idx_offset_ = Align64(seeds_offset_ + sizeof(uint64_t) * D * cap);
  step_bytes_ = idx_offset_ + sizeof(int32_t) * cap * R;
  FM_ASSIGN_OR_RETURN(step_, OpsBuffer<uint8_t>::Make(ops_.get(), step_bytes_));
  staging_.assign((step_bytes_ + 7) / 8, 0);
  FM_ASSIGN_OR_RETURN(labels_, OpsBuffer<int32_t>::Make(ops_.get(), cap * R));

  auto alloc = [&](size_t floats) -> Result<float*> {
    FM_ASSIGN_OR_RETURN(auto buffer, OpsBuffer<float>::Make(ops_.get(), floats));
    owned_.push_back(std::move(buffer));
    return owned_.back().data();
  };
  const size_t L = stages_.size();
  acts_.assign(L + 1, nullptr);
  dacts_.assign(L + 1, nullptr);
  masks_.assign(L, nullptr);
  FM_ASSIGN_OR_RETURN(acts_[0], alloc(cap * R * input_size_));
  for (size_t i = 0; i < L; ++i) {
    const Stage& st = stages_[i];
    if (st.kind == Kind::kFlatten) {
      acts_[i + 1] = acts_[i];
    } else {
      FM_ASSIGN_OR_RETURN(acts_[i + 1], alloc(cap * R * st.out));
    }
    if (st.kind == Kind::kDropout) {
      FM_ASSIGN_OR_RETURN(masks_[i], alloc(cap * R * st.out));
    }
  }
  FM_ASSIGN_OR_RETURN(dacts_[L], alloc(cap * R * classes_));
  for (size_t i = L; i-- > 0;) {
    const Stage& st = stages_[i];
    if (!st.needs_dx) break;
    if (st.kind == Kind::kFlatten) {
      dacts_[i] = dacts_[i + 1];
    } else {
      FM_ASSIGN_OR_RETURN(dacts_[i], alloc(cap * R * st.in));
    }
  }
  rows_ = rows;
  return Status::OK();
}

Status BatchedTrainer::UploadData(std::span<const BatchedClient> clients,
                                  const std::vector<int>& client_of) {
  const size_t B = client_of.size();
  const size_t in = static_cast<size_t>(input_size_);
  // Each Dataset of the call once (by address), with its first row once it is in ops memory.
  std::map<const Dataset*, int64_t> row_of;
  std::vector<const BatchedClient*> missing;  // to upload, each Dataset once
  int64_t missing_rows = 0, call_rows = 0;
  auto scan = [&] {
    row_of.clear();
    missing.clear();
    missing_rows = call_rows = 0;
    for (size_t slot = 0; slot < B; ++slot) {
      const BatchedClient& c = clients[client_of[slot]];
      if (row_of.count(c.data) > 0) continue;
      call_rows += static_cast<int64_t>(c.data->size());
      auto it = c.data_id == 0 ? resident_.end() : resident_.find(c.data_id);
      if (it != resident_.end() && it->second.size == c.data->size()) {
        row_of[c.data] = it->second.row;
      } else {
        row_of[c.data] = -1;
        missing.push_back(&c);
        missing_rows += static_cast<int64_t>(c.data->size());
      }
    }
  };
  scan();
  if (arena_used_ + missing_rows > arena_rows_) {
    // No room: start over with this call's Datasets alone, in a buffer grown when they do
    // not fit (on a GPU doubled, up to what may stay resident, so that clients trained one
    // call at a time all become resident within a few rounds).
    resident_.clear();
    arena_used_ = 0;
    scan();
    const int64_t keep_rows =
        static_cast<int64_t>(ResidentBytes() / (sizeof(float) * in + sizeof(int32_t)));
    const int64_t rows = std::max(call_rows, std::min(keep_rows, 2 * arena_rows_));
    if (rows > arena_rows_) {
      data_.reset();
      data_labels_.reset();
      arena_rows_ = 0;
      FM_ASSIGN_OR_RETURN(data_,
                          OpsBuffer<float>::Make(ops_.get(), static_cast<size_t>(rows) * in));
      FM_ASSIGN_OR_RETURN(data_labels_,
                          OpsBuffer<int32_t>::Make(ops_.get(), static_cast<size_t>(rows)));
      arena_rows_ = rows;
    }
  }
  BatchedOps& ops = *ops_;
  for (const BatchedClient* c : missing) {
    const Dataset& d = *c->data;
    ops.CopyFromHost(data_.data() + static_cast<size_t>(arena_used_) * in, d.features.data(),
                     d.size() * in * sizeof(float));
    ops.CopyFromHost(data_labels_.data() + arena_used_, d.labels.data(),
                     d.size() * sizeof(int32_t));
    row_of[c->data] = arena_used_;
    if (c->data_id != 0) resident_[c->data_id] = Resident{arena_used_, d.size()};
    arena_used_ += static_cast<int64_t>(d.size());
  }
  std::vector<int64_t> offsets(B);
  for (size_t slot = 0; slot < B; ++slot) offsets[slot] = row_of[clients[client_of[slot]].data];
  if (offsets_.size() == 0) {
    FM_ASSIGN_OR_RETURN(offsets_, OpsBuffer<int64_t>::Make(ops_.get(), capacity_));
  }
  if (offsets != uploaded_offsets_) {
    uploaded_offsets_.clear();  // until the copy below is known to have happened
    ops.CopyFromHost(offsets_.data(), offsets.data(), B * sizeof(int64_t));
    FM_RETURN_IF_ERROR(ops.Synchronize());
    uploaded_offsets_ = std::move(offsets);
  }
  return ops.Synchronize();
}

size_t BatchedTrainer::ResidentBytes() const {
  // Host memory gains nothing from a second copy of the samples beyond the call's; a GPU
  // saves an upload per call for each Dataset it keeps.
  return ops_->kind() == BackendKind::kCpu ? 0 : kGpuResidentBytes;
}

Status BatchedTrainer::EnsureStats(int epochs) {
  if (epochs <= stats_epochs_) return Status::OK();
  const size_t n = static_cast<size_t>(epochs) * capacity_;
  stats_epochs_ = 0;
  FM_ASSIGN_OR_RETURN(loss_, OpsBuffer<double>::Make(ops_.get(), n));
  FM_ASSIGN_OR_RETURN(correct_, OpsBuffer<int64_t>::Make(ops_.get(), n));
  stats_epochs_ = epochs;
  return Status::OK();
}

Result<std::vector<BatchedClientResult>> BatchedTrainer::Train(
    std::span<const BatchedClient> clients, const TrainerOptions& options, int epochs,
    const Env* clock) {
  const int B = static_cast<int>(clients.size());
  if (clients.size() > static_cast<size_t>(capacity_)) {
    return Status::InvalidArgument("got " + std::to_string(clients.size()) +
                                   " clients but this batched trainer holds at most " +
                                   std::to_string(capacity_));
  }
  FM_RETURN_IF_ERROR(ValidateTrainerOptions(options));
  if (epochs < 1)
    return Status::InvalidArgument("epochs must be >= 1, got " + std::to_string(epochs));
  if (B == 0) return std::vector<BatchedClientResult>{};
  const size_t P = num_params_;
  const bool prox = options.sgd.prox_mu > 0 && !clients[0].prox_anchor.empty();
  size_t max_samples = 0;
  for (int j = 0; j < B; ++j) {
    const BatchedClient& c = clients[j];
    auto bad = [&](const std::string& what) {
      return Status::InvalidArgument("batched client " + std::to_string(j) + ": " + what);
    };
    if (c.params.size() != P) {
      return bad("has " + std::to_string(c.params.size()) + " parameters, the model has " +
                 std::to_string(P));
    }
    if (!c.velocity.empty() && c.velocity.size() != P) {
      return bad("optimizer state has " + std::to_string(c.velocity.size()) +
                 " values, the model has " + std::to_string(P));
    }
    if (options.sgd.prox_mu > 0 && c.prox_anchor.empty() == prox) {
      return bad("FedProx anchors must be given for every client of a call or for none");
    }
    if (prox && c.prox_anchor.size() != P) {
      return bad("FedProx anchor has " + std::to_string(c.prox_anchor.size()) +
                 " values, the model has " + std::to_string(P));
    }
    if (c.data == nullptr || c.rng == nullptr) return bad("needs data and an Rng");
    if (Status s = reference_->CheckCompatible(*c.data); !s.ok()) {
      return s.WithContext("batched client " + std::to_string(j));
    }
    if (c.data->size() == 0) return bad("cannot train on an empty dataset");
    max_samples = std::max(max_samples, c.data->size());
  }
  FM_RETURN_IF_ERROR(ops_->Synchronize());  // a device that failed earlier fails here
  const int bs = options.batch_size;
  FM_RETURN_IF_ERROR(Reserve(static_cast<int>(std::min<size_t>(bs, max_samples))));
  FM_RETURN_IF_ERROR(EnsureStats(epochs));
  if (prox && anchor_.size() == 0) {
    FM_ASSIGN_OR_RETURN(anchor_, OpsBuffer<float>::Make(ops_.get(), params_.size()));
  }

  // Slots: the clients ordered by steps per epoch, most first (ties keep the given order),
  // so at every step the clients still training are slots [0, active).
  std::vector<int64_t> steps(B);
  for (int j = 0; j < B; ++j)
    steps[j] = static_cast<int64_t>((clients[j].data->size() + bs - 1) / bs);
  std::vector<int> client_of(B);
  std::iota(client_of.begin(), client_of.end(), 0);
  std::stable_sort(client_of.begin(), client_of.end(),
                   [&](int a, int b) { return steps[a] > steps[b]; });

  BatchedOps& ops = *ops_;
  const int64_t stride = param_stride_;
  for (int slot = 0; slot < B; ++slot) {
    const BatchedClient& c = clients[client_of[slot]];
    ops.CopyFromHost(params_.data() + slot * stride, c.params.data(), P * sizeof(float));
    if (c.velocity.empty()) {
      ops.Fill(velocity_.data() + slot * stride, P, 0.0f);
    } else {
      ops.CopyFromHost(velocity_.data() + slot * stride, c.velocity.data(), P * sizeof(float));
    }
    if (prox) {
      ops.CopyFromHost(anchor_.data() + slot * stride, c.prox_anchor.data(), P * sizeof(float));
    }
  }
  {
    const std::vector<double> zeros(static_cast<size_t>(epochs) * capacity_, 0.0);
    ops.CopyFromHost(loss_.data(), zeros.data(), zeros.size() * sizeof(double));
    ops.CopyFromHost(correct_.data(), zeros.data(), zeros.size() * sizeof(int64_t));
  }

  FM_RETURN_IF_ERROR(UploadData(clients, client_of));

  uint8_t* host = reinterpret_cast<uint8_t*>(staging_.data());
  int32_t* host_rows = reinterpret_cast<int32_t*>(host);
  uint64_t* host_seeds = reinterpret_cast<uint64_t*>(host + seeds_offset_);
  int32_t* host_idx = reinterpret_cast<int32_t*>(host + idx_offset_);
  const int32_t* dev_rows = reinterpret_cast<const int32_t*>(step_.data());
  const uint64_t* dev_seeds = reinterpret_cast<const uint64_t*>(step_.data() + seeds_offset_);
  const int32_t* dev_idx = reinterpret_cast<const int32_t*>(step_.data() + idx_offset_);
  const int32_t* dev_labels = labels_.data();
  const size_t in = static_cast<size_t>(input_size_);
  const int64_t R_cap = rows_;
  const SgdStepParams sgd{options.sgd.lr, options.sgd.momentum, options.sgd.weight_decay,
                          options.sgd.prox_mu};
  // The step is fused into the backward pass, as the Trainer does (Sgd::plain()).
  const bool plain = IsPlainSgd(options.sgd, prox);
  const size_t L = stages_.size();

  std::vector<std::vector<uint32_t>> orders(B);
  std::vector<double> epoch_seconds(epochs, 0.0);
  for (int e = 0; e < epochs; ++e) {
    const double start = clock != nullptr ? clock->NowSeconds() : 0.0;
    for (int slot = 0; slot < B; ++slot) {
      const BatchedClient& c = clients[client_of[slot]];
      orders[slot].resize(c.data->size());
      std::iota(orders[slot].begin(), orders[slot].end(), 0u);
      c.rng->Shuffle(orders[slot]);
    }
    double* loss = loss_.data() + static_cast<size_t>(e) * capacity_;
    int64_t* correct = correct_.data() + static_cast<size_t>(e) * capacity_;
    int active = B;
    for (int64_t s = 0; s < steps[client_of[0]]; ++s) {
      while (active > 0 && steps[client_of[active - 1]] <= s) --active;
      // The step's rows per client, its seeds, and its samples gathered into the staging.
      int R = 0;
      std::fill(host_rows, host_rows + capacity_, 0);
      for (int slot = 0; slot < active; ++slot) {
        const int client = client_of[slot];
        const size_t n = clients[client].data->size();
        const int rows = static_cast<int>(std::min<size_t>(bs, n - static_cast<size_t>(s) * bs));
        host_rows[slot] = rows;
        R = std::max(R, rows);
        // The sequential Trainer's step counter runs on across epochs.
        const uint64_t step = static_cast<uint64_t>(e * steps[client] + s);
        for (size_t i = 0; i < L; ++i) {
          if (stages_[i].seed_slot < 0) continue;
          host_seeds[static_cast<size_t>(stages_[i].seed_slot) * capacity_ + slot] =
              SplitMix64(SplitMix64(step) + i);  // Model::Forward's seed of layer i
        }
      }
      for (int slot = 0; slot < active; ++slot) {
        const uint32_t* order = orders[slot].data() + static_cast<size_t>(s) * bs;
        std::copy(order, order + host_rows[slot], host_idx + static_cast<size_t>(slot) * R_cap);
      }
      ops.CopyFromHost(step_.data(), host,
                       idx_offset_ + sizeof(int32_t) * static_cast<size_t>(active) * R_cap);
      // Padding rows are zeros: they stay finite through the layers and, with zero
      // dlogits, add exact zeros to the gradients.
      ops.GatherRows(data_.data(), data_labels_.data(), offsets_.data(), dev_idx, R_cap, dev_rows,
                     R, input_size_, acts_[0], R_cap * static_cast<int64_t>(in), labels_.data(),
                     R_cap, active);

      // Forward.
      for (size_t i = 0; i < L; ++i) {
        const Stage& st = stages_[i];
        const float* x = acts_[i];
        float* y = acts_[i + 1];
        switch (st.kind) {
          case Kind::kFlatten:
            break;
          case Kind::kDense: {
            const float* w = params_.data() + st.param_offset;
            ops.Gemm(false, true, R, st.out, st.in, 1.0f, x, st.in, R_cap * st.in, w, st.in, stride,
                     0.0f, y, st.out, R_cap * st.out, active, GemmRows::kM, dev_rows);
            ops.AddBias(y, R_cap * st.out, w + static_cast<size_t>(st.out) * st.in, stride, R,
                        st.out, active);
            break;
          }
          case Kind::kRelu:
            ops.ReluForward(x, y, static_cast<size_t>(R) * st.out, R_cap * st.out, active);
            break;
          case Kind::kDropout:
            ops.DropoutForward(x, y, masks_[i], static_cast<size_t>(R) * st.out, R_cap * st.out,
                               st.p, dev_seeds + static_cast<size_t>(st.seed_slot) * capacity_,
                               active);
            break;
        }
      }
      ops.SoftmaxCrossEntropy(acts_[L], dev_labels, R_cap, R, classes_, dev_rows, dacts_[L], loss,
                              correct, active);
      // Backward.
      for (size_t i = L; i-- > 0;) {
        const Stage& st = stages_[i];
        const float* dy = dacts_[i + 1];
        float* dx = dacts_[i];
        switch (st.kind) {
          case Kind::kFlatten:
            break;
          case Kind::kDense: {
            float* w = params_.data() + st.param_offset;
            float* dw = grads_.data() + st.param_offset;
            const size_t weights = static_cast<size_t>(st.out) * st.in;
            // dx first: a plain step updates w below (Dense::BackwardSgd's order).
            if (dx != nullptr) {
              ops.Gemm(false, false, R, st.in, st.out, 1.0f, dy, st.out, R_cap * st.out, w, st.in,
                       stride, 0.0f, dx, st.in, R_cap * st.in, active, GemmRows::kM, dev_rows);
            }
            // dy is zero in the padding rows (zero dlogits, propagated exactly). A plain step
            // accumulates -lr * dW straight into w, as Dense::BackwardSgd does.
            ops.Gemm(true, false, st.out, st.in, R, plain ? -sgd.lr : 1.0f, dy, st.out,
                     R_cap * st.out, acts_[i], st.in, R_cap * st.in, plain ? 1.0f : 0.0f,
                     plain ? w : dw, st.in, stride, active, GemmRows::kK, dev_rows);
            ops.BiasGrad(dy, R_cap * st.out, dw + weights, stride, R, st.out, active);
            if (plain) {
              ops.SgdStep(w + weights, dw + weights, /*velocity=*/nullptr, nullptr, st.out, stride,
                          sgd, dev_rows, active);
            }
            break;
          }
          case Kind::kRelu:
            if (dx != nullptr) {
              ops.ReluBackward(acts_[i + 1], dy, dx, static_cast<size_t>(R) * st.out,
                               R_cap * st.out, active);
            }
            break;
          case Kind::kDropout:
            if (dx != nullptr) {
              ops.Multiply(dy, masks_[i], dx, static_cast<size_t>(R) * st.out, R_cap * st.out,
                           active);
            }
            break;
        }
      }
      if (!plain) {
        ops.SgdStep(params_.data(), grads_.data(), velocity_.data(),
                    prox ? anchor_.data() : nullptr, P, stride, sgd, dev_rows, active);
      }
    }
    if (clock != nullptr) {
      FM_RETURN_IF_ERROR(ops.Synchronize());  // queued kernels count in the epoch's time
      epoch_seconds[e] = clock->NowSeconds() - start;
    }
  }

  std::vector<double> loss(static_cast<size_t>(epochs) * capacity_);
  std::vector<int64_t> correct(loss.size());
  ops.CopyToHost(loss.data(), loss_.data(), loss.size() * sizeof(double));
  ops.CopyToHost(correct.data(), correct_.data(), correct.size() * sizeof(int64_t));
  std::vector<BatchedClientResult> results(B);
  for (int slot = 0; slot < B; ++slot) {
    const int j = client_of[slot];
    BatchedClientResult& r = results[j];
    r.params.resize(P);
    r.velocity.resize(P);
    ops.CopyToHost(r.params.data(), params_.data() + slot * stride, P * sizeof(float));
    ops.CopyToHost(r.velocity.data(), velocity_.data() + slot * stride, P * sizeof(float));
    const int64_t n = static_cast<int64_t>(clients[j].data->size());
    for (int e = 0; e < epochs; ++e) {
      const size_t at = static_cast<size_t>(e) * capacity_ + slot;
      EpochStats st;
      st.samples = n;
      st.steps = steps[j];
      st.mean_loss = loss[at] / static_cast<double>(n);
      st.train_accuracy = static_cast<double>(correct[at]) / static_cast<double>(n);
      st.seconds = epoch_seconds[e];
      st.samples_per_s = st.seconds > 0 ? static_cast<double>(n) / st.seconds : 0.0;
      r.epochs.push_back(st);
    }
  }
  FM_RETURN_IF_ERROR(ops.Synchronize());
  return results;
}

}  // namespace fedmesh
