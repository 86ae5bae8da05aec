// Box-Muller over arrays: the arithmetic half of GaussianNoise::Add, in its own translation
// unit built with -ffast-math -fopenmp-simd so that log, sin and cos run through glibc's
// vector math library (libmvec, 4 doubles per call with AVX2). Its inputs are always finite
// (u1 in (0, 1], u2 in [0, 1)), which is what -ffast-math assumes. About 4x the scalar loop
// on cpu-2c; values agree with the scalar formula to a few ulp (libmvec's accuracy).
// Thread-safety: a pure function.
#pragma once

#include <cstddef>

namespace fedmesh::dp_internal {

// For i < n: c[i] = r cos(t), s[i] = r sin(t) with r = sqrt(-2 log u1[i]), t = 2 pi u2[i].
void BoxMullerPairs(const double* u1, const double* u2, double* c, double* s, size_t n);

}  // namespace fedmesh::dp_internal
