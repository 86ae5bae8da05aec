// Weighted averaging of model updates: the arithmetic of FedAvg, out = Σ w_i u_i / Σ w_i,
// where w_i is typically client i's number of training examples. Every aggregation strategy
// that averages (FedAvg, FedProx, FedAvgM, the server optimisers) builds on this one kernel.
// Updates arrive from the network, so malformed input is a Status, not a crash.
// Thread-safety: a pure function; concurrent calls are safe when their outputs differ.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace fedmesh {

// Writes the weighted average of `updates` into `out`. Each output element is accumulated
// in double over all updates and rounded to float once, so the result does not drift with
// the number of clients. Updates with weight 0 are ignored.
//
// InvalidArgument, with `out` left untouched, when: there are no updates; weights.size()
// differs from updates.size(); an update's size differs from out.size() (the message names
// the update and both sizes); a weight is negative or not finite, or all weights are 0; or
// an update holds a NaN or infinity (the message names the update and the index).
//
// `out` may be the very buffer of one of the updates (e.g. averaging into the current
// global model); any other overlap with an update gives an unspecified result.
Status WeightedAverage(const std::vector<std::span<const float>>& updates,
                       const std::vector<double>& weights, std::span<float> out);

// Index of the first NaN or infinity in `x`, or x.size() when all are finite.
size_t FirstNonFinite(std::span<const float> x);
// "NaN", "+inf" or "-inf": how an error message names a non-finite value.
std::string DescribeNonFinite(float v);

}  // namespace fedmesh
