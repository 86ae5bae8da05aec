// MaxPool, AveragePool and GlobalAveragePool on the GPU (CPU: core/graph/ops/pool.cc), with
// the CPU kernel's window geometry (core/graph/ops/window_geometry.h). Forward is one
// thread per output, scanning its window in the CPU's order (so MaxPool breaks ties and
// propagates NaN as the CPU does, and AveragePool's float sums match); MaxPool keeps each
// output's argmax in the workspace. Backward is one thread per INPUT element, adding the
// gradients of the windows that contain it in increasing output order, as the CPU's
// scatter does: no float atomics, the same gradients on every run. GlobalAveragePool sums
// each plane in one block (double, fixed order).
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/cuda/graph/cuda_op_kernel.h"
#include "core/cuda/graph/cuda_ops.h"
#include "core/graph/ops/window_geometry.h"

namespace fedmesh::graph::cuda_ops {
namespace {

using fedmesh::cuda::kBlockThreads;
using fedmesh::cuda::LaunchConfig;
using ops::PoolAttrs;
using ops::PoolGeometry;

// One axis as kernels read it.
struct Ax {
  int64_t in, k, stride, pad0, pad1, out;
  // PoolAxis::Window.
  __device__ void Window(int64_t o, int64_t* begin, int64_t* end, int64_t* padded) const {
    const int64_t b = o * stride - pad0;
    const int64_t e = b + k < in + pad1 ? b + k : in + pad1;
    *padded = e - b;
    *begin = b > 0 ? b : 0;
    *end = e < in ? e : in;
  }
  // The outputs whose windows contain input i: [*lo, *hi).
  __device__ void Covering(int64_t i, int64_t* lo, int64_t* hi) const {
    const int64_t first = i + pad0 - k + 1;  // o * stride >= first
    *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    const int64_t last = (i + pad0) / stride + 1;  // o * stride <= i + pad0
    *hi = last < out ? last : out;
  }
};

struct Geo2 {
  int64_t planes;
  Ax h, w;
};

Geo2 Geo2Of(const PoolGeometry& g) {
  auto ax = [](const ops::PoolAxis& a) { return Ax{a.in, a.k, a.stride, a.pad0, a.pad1, a.out}; };
  return {g.planes(), ax(g.h), ax(g.w)};
}

__global__ void MaxPoolForwardKernel(const float* __restrict__ x, Geo2 g, float* __restrict__ y,
                                     int32_t* __restrict__ arg) {
  const int64_t out_pix = g.h.out * g.w.out, in_pix = g.h.in * g.w.in;
  FM_GRID_STRIDE(e, g.planes * out_pix) {
    const int64_t p = e / out_pix, o = e % out_pix;
    const int64_t oh = o / g.w.out, ow = o % g.w.out;
    int64_t hb, he, hpad, wb, we, wpad;
    g.h.Window(oh, &hb, &he, &hpad);
    g.w.Window(ow, &wb, &we, &wpad);
    const float* xp = x + p * in_pix;
    int64_t best_at = hb * g.w.in + wb;
    float best = xp[best_at];
    for (int64_t ih = hb; ih < he; ++ih)
      for (int64_t iw = wb; iw < we; ++iw) {
        const float v = xp[ih * g.w.in + iw];
        if (v > best || isnan(v)) {  // NaN propagates, as on the CPU
          best = v;
          best_at = ih * g.w.in + iw;
        }
      }
    y[e] = best;
    arg[e] = static_cast<int32_t>(best_at);
  }
}

// dx[i] += dy[o] for every output o (increasing) whose argmax is i.
__global__ void MaxPoolBackwardKernel(const float* __restrict__ dy, const int32_t* __restrict__ arg, Geo2 g,
                                      float* __restrict__ dx) {
  const int64_t out_pix = g.h.out * g.w.out, in_pix = g.h.in * g.w.in;
  FM_GRID_STRIDE(e, g.planes * in_pix) {
    const int64_t p = e / in_pix, q = e % in_pix;
    const int64_t ih = q / g.w.in, iw = q % g.w.in;
    int64_t oh0, oh1, ow0, ow1;
    g.h.Covering(ih, &oh0, &oh1);
    g.w.Covering(iw, &ow0, &ow1);
    float d = dx[e];
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t o = p * out_pix + oh * g.w.out + ow;
        if (arg[o] == q) d += dy[o];
      }
    dx[e] = d;
  }
}

__device__ float Divisor(bool include_pad, int64_t h, int64_t w, int64_t hpad, int64_t wpad) {
  return static_cast<float>(include_pad ? hpad * wpad : h * w);
}

__global__ void AveragePoolForwardKernel(const float* __restrict__ x, Geo2 g, bool include_pad,
                                         float* __restrict__ y) {
  const int64_t out_pix = g.h.out * g.w.out, in_pix = g.h.in * g.w.in;
  FM_GRID_STRIDE(e, g.planes * out_pix) {
    const int64_t p = e / out_pix, o = e % out_pix;
    int64_t hb, he, hpad, wb, we, wpad;
    g.h.Window(o / g.w.out, &hb, &he, &hpad);
    g.w.Window(o % g.w.out, &wb, &we, &wpad);
    const float* xp = x + p * in_pix;
    float s = 0.0f;
    for (int64_t ih = hb; ih < he; ++ih)
      for (int64_t iw = wb; iw < we; ++iw) s += xp[ih * g.w.in + iw];
    y[e] = s / Divisor(include_pad, he - hb, we - wb, hpad, wpad);
  }
}

// dx[i] += dy[o] / divisor(o) for every output o (increasing) whose window holds i.
__global__ void AveragePoolBackwardKernel(const float* __restrict__ dy, Geo2 g, bool include_pad,
                                          float* __restrict__ dx) {
  const int64_t out_pix = g.h.out * g.w.out, in_pix = g.h.in * g.w.in;
  FM_GRID_STRIDE(e, g.planes * in_pix) {
    const int64_t p = e / in_pix, q = e % in_pix;
    const int64_t ih = q / g.w.in, iw = q % g.w.in;
    int64_t oh0, oh1, ow0, ow1;
    g.h.Covering(ih, &oh0, &oh1);
    g.w.Covering(iw, &ow0, &ow1);
    float d = dx[e];
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      int64_t hb, he, hpad;
      g.h.Window(oh, &hb, &he, &hpad);
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        int64_t wb, we, wpad;
        g.w.Window(ow, &wb, &we, &wpad);
        d += dy[p * out_pix + oh * g.w.out + ow] / Divisor(include_pad, he - hb, we - wb, hpad, wpad);
      }
    }
    dx[e] = d;
  }
}

// y[p] = mean of plane p (double, fixed order): one block per plane.
__global__ void PlaneMeanKernel(const float* __restrict__ x, int64_t planes, int64_t pix, float* __restrict__ y) {
  __shared__ double s[kBlockThreads];
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < pix; i += blockDim.x) acc += x[p * pix + i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = kBlockThreads / 2; k > 0; k >>= 1) {
      if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
      __syncthreads();
    }
    if (threadIdx.x == 0) y[p] = static_cast<float>(s[0] / static_cast<double>(pix));
    __syncthreads();
  }
}

__global__ void PlaneSpreadKernel(const float* __restrict__ dy, int64_t planes, int64_t pix,
                                  float* __restrict__ dx) {
  FM_GRID_STRIDE(e, planes * pix) dx[e] += dy[e / pix] / static_cast<float>(pix);
}

class CudaWindowPool : public CudaOpKernel {
 public:
  CudaWindowPool(std::unique_ptr<OpKernel> cpu, const Node& n, PoolAttrs a)
      : CudaOpKernel(std::move(cpu)), label_(n.Label()), a_(std::move(a)) {}

 protected:
  PoolGeometry Geometry(const Dims& x) const {
    Result<PoolGeometry> g = ops::ResolvePool(label_, a_, x);
    FM_CHECK(g.ok());  // InferShapes succeeded on these dims
    return *g;
  }

 private:
  std::string label_;
  PoolAttrs a_;
};

class CudaMaxPool final : public CudaWindowPool {
 public:
  using CudaWindowPool::CudaWindowPool;

  // One int32 argmax per output, in float-sized slots.
  size_t WorkspaceFloats(const std::vector<Dims>&, const std::vector<Dims>& out) const override {
    static_assert(sizeof(int32_t) == sizeof(float));
    return static_cast<size_t>(NumElements(out[0]));
  }

  Status Forward(const KernelCall& c) override {
    const PoolGeometry g = Geometry(*c.in_dims[0]);
    FM_CHECK(g.in_pix() <= INT32_MAX);
    const int64_t n = g.planes() * g.out_pix();
    LaunchConfig l;
    if (n == 0 || !Begin(c, &l)) return Status::OK();
    MaxPoolForwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(c.in[0], Geo2Of(g), c.out[0],
                                                                        reinterpret_cast<int32_t*>(c.workspace));
    Launched(c, cudaGetLastError(), "MaxPoolForwardKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    if (!c.din[0] || !c.dout[0]) return;
    const PoolGeometry g = Geometry(*c.in_dims[0]);
    const int64_t n = g.planes() * g.in_pix();
    LaunchConfig l;
    if (n == 0 || g.out_pix() == 0 || !Begin(c, &l)) return;
    MaxPoolBackwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(
        c.dout[0], reinterpret_cast<const int32_t*>(c.workspace), Geo2Of(g), c.din[0]);
    Launched(c, cudaGetLastError(), "MaxPoolBackwardKernel");
  }
};

class CudaAveragePool final : public CudaWindowPool {
 public:
  CudaAveragePool(std::unique_ptr<OpKernel> cpu, const Node& n, PoolAttrs a)
      : CudaWindowPool(std::move(cpu), n, std::move(a)), include_pad_(n.Int("count_include_pad", 0) != 0) {}

  Status Forward(const KernelCall& c) override {
    const PoolGeometry g = Geometry(*c.in_dims[0]);
    const int64_t n = g.planes() * g.out_pix();
    LaunchConfig l;
    if (n == 0 || !Begin(c, &l)) return Status::OK();
    AveragePoolForwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(c.in[0], Geo2Of(g), include_pad_,
                                                                            c.out[0]);
    Launched(c, cudaGetLastError(), "AveragePoolForwardKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    if (!c.din[0] || !c.dout[0]) return;
    const PoolGeometry g = Geometry(*c.in_dims[0]);
    const int64_t n = g.planes() * g.in_pix();
    LaunchConfig l;
    if (n == 0 || g.out_pix() == 0 || !Begin(c, &l)) return;
    AveragePoolBackwardKernel<<<Blocks(l, n), kBlockThreads, 0, l.stream>>>(c.dout[0], Geo2Of(g), include_pad_,
                                                                             c.din[0]);
    Launched(c, cudaGetLastError(), "AveragePoolBackwardKernel");
  }

 private:
  bool include_pad_;
};

class CudaGlobalAveragePool final : public CudaOpKernel {
 public:
  explicit CudaGlobalAveragePool(std::unique_ptr<OpKernel> cpu) : CudaOpKernel(std::move(cpu)) {}

  Status Forward(const KernelCall& c) override {
    int64_t planes, pix;
    Extents(*c.in_dims[0], &planes, &pix);
    LaunchConfig l;
    if (planes == 0 || !Begin(c, &l)) return Status::OK();
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(planes, l.max_blocks));
    PlaneMeanKernel<<<blocks, kBlockThreads, 0, l.stream>>>(c.in[0], planes, pix, c.out[0]);
    Launched(c, cudaGetLastError(), "PlaneMeanKernel");
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    if (!c.din[0] || !c.dout[0]) return;
    int64_t planes, pix;
    Extents(*c.in_dims[0], &planes, &pix);
    LaunchConfig l;
    if (planes * pix == 0 || !Begin(c, &l)) return;
    PlaneSpreadKernel<<<Blocks(l, planes * pix), kBlockThreads, 0, l.stream>>>(c.dout[0], planes, pix, c.din[0]);
    Launched(c, cudaGetLastError(), "PlaneSpreadKernel");
  }

 private:
  // As the CPU kernel: [N, C] planes of the remaining dims.
  static void Extents(const Dims& x, int64_t* planes, int64_t* pix) {
    *planes = x[0] * x[1];
    *pix = NumElements(x) / std::max<int64_t>(1, *planes);
  }
};

}  // namespace

CudaKernelResult MakeCudaMaxPool(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  const Node& n = *ctx.node;
  // The CPU factory refused an Indices output and dilations other than 1.
  FM_ASSIGN_OR_RETURN(PoolAttrs a, ops::ParsePoolAttrs(n));
  return std::unique_ptr<OpKernel>(new CudaMaxPool(std::move(cpu), n, std::move(a)));
}

CudaKernelResult MakeCudaAveragePool(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  const Node& n = *ctx.node;
  FM_ASSIGN_OR_RETURN(PoolAttrs a, ops::ParsePoolAttrs(n));
  return std::unique_ptr<OpKernel>(new CudaAveragePool(std::move(cpu), n, std::move(a)));
}

CudaKernelResult MakeCudaGlobalAveragePool(const KernelContext&, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaGlobalAveragePool(std::move(cpu)));
}

}  // namespace fedmesh::graph::cuda_ops
