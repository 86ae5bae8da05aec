// Update prediction (predictive coding of client updates): the aggregator sends, with the
// global model, a guess p of the change each node will make this round, p = beta * (the
// last round's global change); the node encodes its change minus p and the aggregator adds
// p back. With a lossless update chain the round's result is the same as without (FedAvg
// of the nodes' changes, up to float rounding); with a sparsifying chain (topk:0.01) the
// dense part every node shares travels once per round on the downlink, and the uplink's
// few coordinates carry only what differs. Error feedback then works on change - p.
//
// Both ends must subtract and add the very same p: the aggregator keeps what the payload
// decodes to (a lossy downlink chain quantises p too), and a node says in
// FitResult::applied_prediction whether it used it.
//
// Wire form: FitTask::global_model holds 2n values, the model and then p, in the downlink
// chain (the downlink doubles with "none", grows by a quarter of the model's float32 size
// with int8); FitTask::with_prediction marks it.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/codec/codec.h"
#include "core/status.h"
#include "core/wire/messages.h"

namespace fedmesh::codec {

// beta * (after - before), or empty when a value is not finite (the next round then goes
// without a prediction). REQUIRES: before.size() == after.size().
std::vector<float> PredictUpdate(std::span<const float> before, std::span<const float> after,
                                 double beta);

struct PackedPrediction {
  wire::TensorPayload payload;    // model then prediction, 2n values
  std::vector<float> prediction;  // p as the receiver decodes it
};

// Encodes model ++ prediction with `chain` (seeded by `seed`), or exactly (float32) when
// the chain refuses them (fp16 beyond its range). REQUIRES: equal, non-zero sizes.
Result<PackedPrediction> PackWithPrediction(const Chain& chain, std::span<const float> model,
                                            std::span<const float> prediction, uint64_t seed);

// Splits a decoded with-prediction model of 2n values into its two halves.
// InvalidArgument when the size is not 2 * n.
Status SplitPrediction(std::vector<float> packed, size_t n, std::vector<float>* model,
                       std::vector<float>* prediction);

}  // namespace fedmesh::codec
