// FM_HD marks a function callable from both host and CUDA device code. Element-wise math
// shared by the CPU tests and the CUDA kernels (core/cuda/kernel_math.h, CounterUniform) is
// written once with it, so the host can check the very code a kernel runs.
#pragma once

#if defined(__CUDACC__)
#define FM_HD __host__ __device__
#else
#define FM_HD
#endif
