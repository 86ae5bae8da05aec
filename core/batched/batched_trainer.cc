#include "core/batched/batched_trainer.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/layers/activations.h"
#include "core/layers/dense.h"
#include "core/sgd.h"

namespace fedmesh {
namespace {

constexpr size_t Align64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Below this many floats a step's gather runs on one thread (a fork costs more).
constexpr size_t kParallelGatherFloats = size_t{1} << 18;

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
  FM_ASSIGN_OR_RETURN(t->reference_, BuildModel(spec, t->reference_backend_.get()));
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
  labels_offset_ = Align64(seeds_offset_ + sizeof(uint64_t) * D * cap);
  inputs_offset_ = Align64(labels_offset_ + sizeof(int32_t) * cap * R);
  step_bytes_ = inputs_offset_ + sizeof(float) * cap * R * input_size_;
  FM_ASSIGN_OR_RETURN(step_, OpsBuffer<uint8_t>::Make(ops_.get(), step_bytes_));
  staging_.assign((step_bytes_ + 7) / 8, 0);

  auto alloc = [&](size_t floats) -> Result<float*> {
    FM_ASSIGN_OR_RETURN(auto buffer, OpsBuffer<float>::Make(ops_.get(), floats));
    owned_.push_back(std::move(buffer));
    return owned_.back().data();
  };
  const size_t L = stages_.size();
  acts_.assign(L + 1, nullptr);
  dacts_.assign(L + 1, nullptr);
  masks_.assign(L, nullptr);
  acts_[0] = reinterpret_cast<float*>(step_.data() + inputs_offset_);
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

  uint8_t* host = reinterpret_cast<uint8_t*>(staging_.data());
  int32_t* host_rows = reinterpret_cast<int32_t*>(host);
  uint64_t* host_seeds = reinterpret_cast<uint64_t*>(host + seeds_offset_);
  int32_t* host_labels = reinterpret_cast<int32_t*>(host + labels_offset_);
  float* host_inputs = reinterpret_cast<float*>(host + inputs_offset_);
  const int32_t* dev_rows = reinterpret_cast<const int32_t*>(step_.data());
  const uint64_t* dev_seeds = reinterpret_cast<const uint64_t*>(step_.data() + seeds_offset_);
  const int32_t* dev_labels = reinterpret_cast<const int32_t*>(step_.data() + labels_offset_);
  const size_t in = static_cast<size_t>(input_size_);
  const int64_t R_cap = rows_;
  const SgdStepParams sgd{options.sgd.lr, options.sgd.momentum, options.sgd.weight_decay,
                          options.sgd.prox_mu};
  // The step is fused into the backward pass, as the Trainer does (Sgd::plain()).
  const bool plain = IsPlainSgd(options.sgd, prox);
  const size_t L = stages_.size();
  const int threads = std::max(1, omp_get_num_procs());

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
      const bool parallel_gather = static_cast<size_t>(active) * R * in >= kParallelGatherFloats;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel_gather)
      for (int slot = 0; slot < active; ++slot) {
        const Dataset& d = *clients[client_of[slot]].data;
        const uint32_t* idx = orders[slot].data() + static_cast<size_t>(s) * bs;
        const int rows = host_rows[slot];
        float* x = host_inputs + static_cast<size_t>(slot) * R_cap * in;
        int32_t* y = host_labels + static_cast<size_t>(slot) * R_cap;
        for (int r = 0; r < rows; ++r) {
          std::memcpy(x + r * in, d.sample(idx[r]), in * sizeof(float));
          y[r] = d.labels[idx[r]];
        }
        // Padding rows are zeros: they stay finite through the layers and, with zero
        // dlogits, add exact zeros to the gradients.
        std::fill(x + rows * in, x + static_cast<size_t>(R) * in, 0.0f);
        std::fill(y + rows, y + R, 0);
      }
      ops.CopyFromHost(step_.data(), host,
                       inputs_offset_ + sizeof(float) * static_cast<size_t>(active) * R_cap * in);

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
