// Shared by the simulator's tests: whether the real dataset is installed, and a small
// experiment that fits CI's two cores.
#pragma once

#include <gtest/gtest.h>

#include "core/data/data_source.h"
#include "sim/sim_options.h"

namespace fedmesh {

inline bool HaveData() { return LoadDataSource(DataSourceSpec{}, DataSplit::kTest).ok(); }

#define REQUIRE_DATA()                                                             \
  if (!::fedmesh::HaveData())                                                      \
  GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"

// A small, quick experiment: 20 clients, 5 per round, 1,000 test samples, 2 threads.
inline SimOptions SmallSim(uint64_t rounds = 4) {
  SimOptions o;
  o.clients = 20;
  o.clients_per_round = 5;
  o.rounds = rounds;
  o.test_samples = 1000;
  o.threads = 2;
  o.trainer.sgd.lr = 0.1f;
  return o;
}

}  // namespace fedmesh
