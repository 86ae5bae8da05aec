// Shared by the batched-training tests (batched_trainer_test.cc on the CPU, batched_cuda_test.cc
// on a GPU): small synthetic client datasets, the sequential reference (core/trainer.h, one
// client after another, as the simulator trains without batching) and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/batched/batched_trainer.h"
#include "core/data/dataset.h"
#include "core/env.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/trainer.h"

namespace fedmesh::batched_test {

// n samples of 6x6x1 "images" in [0, 1] whose label is a noisy function of the pixels, so
// training moves the weights in a data-dependent way.
inline Dataset Images(size_t n, uint64_t seed, int classes = 5) {
  Dataset d;
  d.sample_shape = {6, 6, 1};
  d.num_classes = classes;
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) {
    const int y = static_cast<int>(rng.UniformInt(classes));
    for (int f = 0; f < 36; ++f) {
      const double base = (f % classes == y) ? 0.8 : 0.2;
      d.features.push_back(static_cast<float>(std::clamp(base + rng.Normal(0.0, 0.2), 0.0, 1.0)));
    }
    d.labels.push_back(y);
  }
  return d;
}

inline ModelSpec SmallSpec(const std::string& name, float dropout = 0.0f,
                           std::vector<int> hidden = {16}) {
  ModelSpec spec;
  spec.name = name;
  spec.input_shape = {6, 6, 1};
  spec.num_classes = 5;
  spec.hidden = std::move(hidden);
  spec.dropout = dropout;
  return spec;
}

// One client's full input, owning what BatchedClient points at.
struct ClientCase {
  Dataset data;
  std::vector<float> params;
  std::vector<float> velocity;  // may be empty
  std::vector<float> anchor;    // may be empty
  uint64_t seed = 0;            // of the client's SeededEnv
};

// `sizes[j]` samples for client j, distinct start weights, a velocity for odd clients when
// `with_velocity`, and the start weights as FedProx anchor when `with_anchor`.
inline std::vector<ClientCase> MakeClients(const ModelSpec& spec, const std::vector<size_t>& sizes,
                                           bool with_velocity, bool with_anchor) {
  auto backend = MakeCpuBackend(1);
  // The layer code, as fedmesh-sim's workspaces run a client the batched trainer does not.
  auto model = BuildModel(spec, backend.get(), {BuiltinEngine::kLayers});
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  std::vector<ClientCase> out;
  for (size_t j = 0; j < sizes.size(); ++j) {
    ClientCase c;
    c.data = Images(sizes[j], 1000 + j);
    (*model)->InitParams(77 + j);
    c.params = (*model)->GetParams();
    if (with_velocity && j % 2 == 1) {
      Rng rng(500 + j);
      c.velocity.resize(c.params.size());
      for (float& v : c.velocity) v = static_cast<float>(rng.Normal(0.0, 0.01));
    }
    if (with_anchor) {
      (*model)->InitParams(900 + j);
      c.anchor = (*model)->GetParams();
    }
    c.seed = 4242 + 17 * j;
    out.push_back(std::move(c));
  }
  return out;
}

struct ClientOutcome {
  std::vector<float> params, velocity;
  std::vector<EpochStats> epochs;
  uint64_t next_random = 0;  // the client's Rng's next draw after training (the codec seed)
};

// The sequential reference: core/trainer.h on a one-thread CPU backend, as RunFitTask runs it.
inline ClientOutcome TrainSequentially(const ModelSpec& spec, const ClientCase& c,
                                       const TrainerOptions& options, int epochs) {
  auto backend = MakeCpuBackend(1);
  // The layer code, as fedmesh-sim's workspaces run a client the batched trainer does not.
  auto model = BuildModel(spec, backend.get(), {BuiltinEngine::kLayers});
  EXPECT_TRUE(model.ok());
  EXPECT_TRUE((*model)->SetParams(c.params).ok());
  SeededEnv env(nullptr, c.seed);
  Trainer trainer(model->get(), options, &env);
  if (!c.velocity.empty()) {
    EXPECT_TRUE(trainer.optimizer().SetVelocity(c.velocity).ok());
  }
  if (options.sgd.prox_mu > 0 && !c.anchor.empty()) {
    EXPECT_TRUE(trainer.optimizer().SetProxAnchor(c.anchor).ok());
  }
  ClientOutcome out;
  for (int e = 0; e < epochs; ++e) {
    auto st = trainer.TrainEpoch(c.data);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    out.epochs.push_back(*st);
  }
  out.params = (*model)->GetParams();
  out.velocity = trainer.optimizer().GetVelocity();
  out.next_random = env.rng().NextU64();
  return out;
}

// All clients at once through `trainer`. With `data_of`, client j is given the Dataset of
// case data_of[j] (the same object: datasets shared between clients, as the simulator's
// shards are), which must hold what case j's does, and the BatchedClient::data_id
// data_of[j] + 1.
inline Result<std::vector<ClientOutcome>> TrainBatched(BatchedTrainer& trainer,
                                                       const std::vector<ClientCase>& cases,
                                                       const TrainerOptions& options, int epochs,
                                                       const std::vector<size_t>& data_of = {}) {
  std::vector<SeededEnv> envs;
  envs.reserve(cases.size());
  std::vector<BatchedClient> clients(cases.size());
  for (size_t j = 0; j < cases.size(); ++j) {
    envs.emplace_back(nullptr, cases[j].seed);
    clients[j].params = cases[j].params;
    clients[j].velocity = cases[j].velocity;
    clients[j].prox_anchor = cases[j].anchor;
    clients[j].data = &cases[data_of.empty() ? j : data_of[j]].data;
    clients[j].data_id = data_of.empty() ? 0 : data_of[j] + 1;
    clients[j].rng = &envs[j].rng();
  }
  auto r = trainer.Train(clients, options, epochs);
  if (!r.ok()) return r.status();
  std::vector<ClientOutcome> out(cases.size());
  for (size_t j = 0; j < cases.size(); ++j) {
    out[j].params = std::move((*r)[j].params);
    out[j].velocity = std::move((*r)[j].velocity);
    out[j].epochs = std::move((*r)[j].epochs);
    out[j].next_random = envs[j].rng().NextU64();
  }
  return out;
}

// max |a - b| / max(1, |b|) over the elements (relative for large values, absolute near 0).
inline double MaxRelativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d =
        std::fabs(double(a[i]) - double(b[i])) / std::max(1.0, std::fabs(double(b[i])));
    worst = std::max(worst, std::isnan(d) ? INFINITY : d);
  }
  return worst;
}

inline double RelativeDiff(double a, double b) {
  return std::fabs(a - b) / std::max(1.0, std::fabs(b));
}

// Everything a client's training produced agrees within `tol` (0: bit for bit).
inline void ExpectSameOutcome(const ClientOutcome& got, const ClientOutcome& want, double tol,
                              const std::string& what) {
  SCOPED_TRACE(what);
  if (tol == 0) {
    EXPECT_TRUE(got.params == want.params)
        << "params differ, max rel " << MaxRelativeDiff(got.params, want.params);
    EXPECT_TRUE(got.velocity == want.velocity)
        << "velocity differs, max rel " << MaxRelativeDiff(got.velocity, want.velocity);
  } else {
    EXPECT_LE(MaxRelativeDiff(got.params, want.params), tol);
    EXPECT_LE(MaxRelativeDiff(got.velocity, want.velocity), tol);
  }
  EXPECT_EQ(got.next_random, want.next_random);  // same shuffles drawn: same codec seed after
  ASSERT_EQ(got.epochs.size(), want.epochs.size());
  for (size_t e = 0; e < want.epochs.size(); ++e) {
    EXPECT_EQ(got.epochs[e].samples, want.epochs[e].samples) << "epoch " << e;
    EXPECT_EQ(got.epochs[e].steps, want.epochs[e].steps) << "epoch " << e;
    if (tol == 0) {
      EXPECT_EQ(got.epochs[e].mean_loss, want.epochs[e].mean_loss) << "epoch " << e;
      EXPECT_EQ(got.epochs[e].train_accuracy, want.epochs[e].train_accuracy) << "epoch " << e;
    } else {
      EXPECT_LE(RelativeDiff(got.epochs[e].mean_loss, want.epochs[e].mean_loss), tol)
          << "epoch " << e;
      // A logit within rounding of a tie may flip one sample's argmax.
      EXPECT_LE(std::fabs(got.epochs[e].train_accuracy - want.epochs[e].train_accuracy),
                1.0 / static_cast<double>(want.epochs[e].samples) + 1e-12)
          << "epoch " << e;
    }
  }
}

}  // namespace fedmesh::batched_test
