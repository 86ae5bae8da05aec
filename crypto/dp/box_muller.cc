#include "crypto/dp/box_muller.h"

#include <math.h>

namespace fedmesh::dp_internal {

void BoxMullerPairs(const double* u1, const double* u2, double* c, double* s, size_t n) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  // Three loops, not one: in one loop GCC fuses sin and cos into a scalar sincos call,
  // which has no vector variant it will use, and the loop stays scalar.
#pragma omp simd
  for (size_t i = 0; i < n; ++i) s[i] = sqrt(-2.0 * log(u1[i]));
#pragma omp simd
  for (size_t i = 0; i < n; ++i) c[i] = s[i] * cos(kTwoPi * u2[i]);
#pragma omp simd
  for (size_t i = 0; i < n; ++i) s[i] = s[i] * sin(kTwoPi * u2[i]);
}

}  // namespace fedmesh::dp_internal
