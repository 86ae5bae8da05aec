#include "core/codec/update_prediction.h"

#include <cmath>
#include <string>

#include "core/codec/payload.h"
#include "core/wire/wire_codec.h"

namespace fedmesh::codec {

std::vector<float> PredictUpdate(std::span<const float> before, std::span<const float> after,
                                 double beta) {
  std::vector<float> p(after.size());
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = static_cast<float>(beta * (static_cast<double>(after[i]) - before[i]));
    if (!std::isfinite(p[i])) return {};
  }
  return p;
}

Result<PackedPrediction> PackWithPrediction(const Chain& chain, std::span<const float> model,
                                            std::span<const float> prediction, uint64_t seed) {
  const size_t n = model.size();
  if (n == 0 || prediction.size() != n) {
    return Status::InvalidArgument("a prediction of " + std::to_string(prediction.size()) +
                                   " values for a model of " + std::to_string(n));
  }
  std::vector<float> both(2 * n);
  std::copy(model.begin(), model.end(), both.begin());
  std::copy(prediction.begin(), prediction.end(), both.begin() + static_cast<ptrdiff_t>(n));
  PackedPrediction out;
  auto encoded = EncodePayload(chain, both, seed);
  if (!encoded.ok()) {  // e.g. fp16 beyond 65504: exact instead, as for a plain model
    out.payload = wire::FloatPayload(both);
    out.prediction.assign(prediction.begin(), prediction.end());
    return out;
  }
  out.payload = std::move(*encoded);
  // What the node will subtract: p after the chain's loss, not p itself.
  FM_ASSIGN_OR_RETURN(std::vector<float> decoded, DecodePayload(out.payload));
  std::vector<float> model_seen;
  FM_RETURN_IF_ERROR(SplitPrediction(std::move(decoded), n, &model_seen, &out.prediction));
  return out;
}

Status SplitPrediction(std::vector<float> packed, size_t n, std::vector<float>* model,
                       std::vector<float>* prediction) {
  if (packed.size() != 2 * n) {
    return Status::InvalidArgument("a model with its update prediction has " +
                                   std::to_string(packed.size()) + " values; expected 2 x " +
                                   std::to_string(n));
  }
  prediction->assign(packed.begin() + static_cast<ptrdiff_t>(n), packed.end());
  packed.resize(n);
  *model = std::move(packed);
  return Status::OK();
}

}  // namespace fedmesh::codec
