// The tolerance the backend comparisons use: max |got - want| / max |want| over a whole
// tensor (a floor keeps all-zero references meaningful), robust to the cancellation that
// makes element-wise relative errors of sums meaningless. NaN anywhere fails; an exact
// match passes even at rel = 0.
// Thread-safety: pure function.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace fedmesh {

inline ::testing::AssertionResult CloseRel(const std::vector<float>& got, const std::vector<float>& want,
                                           double rel, const std::string& what, double floor = 1e-6) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": sizes differ: " << got.size() << " vs " << want.size();
  double max_diff = 0.0, max_ref = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - want[i]);
    if (std::isnan(d))
      return ::testing::AssertionFailure() << what << ": NaN at " << i << ": " << got[i] << " vs " << want[i];
    if (d > max_diff) {
      max_diff = d;
      worst = i;
    }
    max_ref = std::max(max_ref, std::fabs(double(want[i])));
  }
  const double err = max_diff / std::max(max_ref, floor);
  if (err < rel || max_diff == 0.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative error " << err << " >= " << rel
                                       << " (worst at " << worst << ": " << got[worst] << " vs "
                                       << want[worst] << ", max |ref| " << max_ref << ")";
}

}  // namespace fedmesh
