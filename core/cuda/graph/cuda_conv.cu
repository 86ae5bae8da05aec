// Conv on the GPU (CPU: core/graph/ops/conv.cc), with the CPU kernel's window geometry
// (core/graph/ops/window_geometry.h): 1-D and 2-D, strides, asymmetric pads, dilations,
// groups, auto_pad. The batch goes in chunks of images whose column matrix fits a fixed
// budget, so one cuBLAS GEMM per group covers many images: im2col writes the chunk's
// columns [C*kH*kW, B*OH*OW] (every group's rows, images side by side), the GEMMs write
// [M, B*OH*OW], and a scatter moves that into Y's [B, M, OH*OW] adding the bias. Backward
// gathers dY the other way, accumulates dW with beta = 1 chunk after chunk, and turns the
// column gradient into dX with one thread per input element summing the columns that read
// it in a fixed order; the bias gradient is one block per channel. No float atomics, so
// the gradients are the same on every run.
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
using ops::ConvAttrs;
using ops::ConvGeometry;

// Column matrix plus GEMM output per chunk, in floats (32 MiB): enough for the GEMMs to
// fill the GPU, small enough that a deep network's workspaces stay modest.
constexpr int64_t kChunkFloats = int64_t{1} << 23;

// The geometry as kernels read it (plain fields, passed by value).
struct Win {
  int64_t c, m, h, w, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;
};

Win WinOf(const ConvGeometry& g) {
  return {g.c,       g.m,        g.h.in,     g.w.in,  g.h.out, g.w.out, g.h.k,
          g.w.k,     g.h.stride, g.w.stride, g.h.dil, g.w.dil, g.h.pad0, g.w.pad0};
}

// Images per chunk: as many as the budget holds, at least one.
int64_t ChunkImages(const ConvGeometry& g) {
  const int64_t per_image = (g.c * g.h.k * g.w.k + g.m) * g.pix();
  const int64_t b = per_image > 0 ? kChunkFloats / per_image : g.n;
  return std::clamp<int64_t>(b, 1, std::max<int64_t>(g.n, 1));
}

// cols[((ch*kH + i)*kW + j), b*pix + oh*OW + ow] = x[b0 + b, ch, oh*sH - pT + i*dH,
// ow*sW - pL + j*dW], zero in the padding; nb images from image b0.
__global__ void Im2ColKernel(const float* __restrict__ x, Win g, int64_t b0, int64_t nb,
                             float* __restrict__ cols) {
  const int64_t pix = g.oh * g.ow, width = nb * pix;
  const int64_t total = g.c * g.kh * g.kw * width;
  FM_GRID_STRIDE(e, total) {
    const int64_t row = e / width, col = e % width;
    const int64_t b = col / pix, p = col % pix;
    const int64_t oh = p / g.ow, ow = p % g.ow;
    const int64_t j = row % g.kw, t = row / g.kw;
    const int64_t i = t % g.kh, ch = t / g.kh;
    const int64_t ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
    float v = 0.0f;
    if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) v = x[(((b0 + b) * g.c + ch) * g.h + ih) * g.w + iw];
    cols[e] = v;
  }
}

// y[b0 + b, m, p] = t[m, b*pix + p] + bias[m] (bias may be null).
__global__ void ScatterKernel(const float* __restrict__ t, const float* __restrict__ bias, int64_t m_count,
                              int64_t pix, int64_t b0, int64_t nb, float* __restrict__ y) {
  const int64_t total = nb * m_count * pix;
  FM_GRID_STRIDE(e, total) {
    const int64_t p = e % pix, r = e / pix;
    const int64_t m = r % m_count, b = r / m_count;
    const float v = t[m * nb * pix + b * pix + p];
    y[(b0 * m_count) * pix + e] = bias ? v + bias[m] : v;
  }
}

// t[m, b*pix + p] = dy[b0 + b, m, p]: the adjoint's layout.
__global__ void GatherKernel(const float* __restrict__ dy, int64_t m_count, int64_t pix, int64_t b0, int64_t nb,
                             float* __restrict__ t) {
  const int64_t total = nb * m_count * pix;
  FM_GRID_STRIDE(e, total) {
    const int64_t p = e % pix, r = e / pix;
    const int64_t m = r % m_count, b = r / m_count;
    t[m * nb * pix + b * pix + p] = dy[(b0 * m_count) * pix + e];
  }
}

// dx[b0 + b, ch, ih, iw] += the column entries Im2ColKernel read from that pixel, summed
// in increasing (i, j) order.
__global__ void Col2ImKernel(const float* __restrict__ cols, Win g, int64_t b0, int64_t nb,
                             float* __restrict__ dx) {
  const int64_t pix = g.oh * g.ow, width = nb * pix, in_pix = g.h * g.w;
  const int64_t total = nb * g.c * in_pix;
  FM_GRID_STRIDE(e, total) {
    const int64_t q = e % in_pix, r = e / in_pix;
    const int64_t ch = r % g.c, b = r / g.c;
    const int64_t ih = q / g.w, iw = q % g.w;
    float acc = 0.0f;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t th = ih + g.ph - i * g.dh;  // = oh * sH
      if (th < 0 || th % g.sh != 0 || th / g.sh >= g.oh) continue;
      const int64_t oh = th / g.sh;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t tw = iw + g.pw - j * g.dw;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.ow) continue;
        const int64_t ow = tw / g.sw;
        acc += cols[((ch * g.kh + i) * g.kw + j) * width + b * pix + oh * g.ow + ow];
      }
    }
    dx[b0 * g.c * in_pix + e] += acc;
  }
}


// db[m] += sum over images and pixels of dy[n, m, :]: one block per channel.
__global__ void BiasGradKernel(const float* __restrict__ dy, int64_t n, int64_t m_count, int64_t pix,
                               float* __restrict__ db) {
  for (int64_t m = blockIdx.x; m < m_count; m += gridDim.x) {
    double acc = 0.0;
    for (int64_t j = threadIdx.x; j < n * pix; j += blockDim.x)
      acc += dy[((j / pix) * m_count + m) * pix + j % pix];
    const double s = BlockSum(acc);
    if (threadIdx.x == 0) db[m] += static_cast<float>(s);
  }
}

class CudaConv final : public CudaOpKernel {
 public:
  CudaConv(std::unique_ptr<OpKernel> cpu, const Node& n)
      : CudaOpKernel(std::move(cpu)), label_(n.Label()), a_(ops::ReadConvAttrs(n)) {}

  size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>&) const override {
    const ConvGeometry g = Geometry(in);
    return static_cast<size_t>((g.c * g.h.k * g.w.k + g.m) * ChunkImages(g) * g.pix());
  }

  Status Forward(const KernelCall& c) override {
    const ConvGeometry g = Geometry(InDims(c));
    LaunchConfig l;
    if (g.n == 0 || !Begin(c, &l)) return Status::OK();
    const Win win = WinOf(g);
    const int64_t chunk = ChunkImages(g), pix = g.pix(), mg = g.mg(), kd = g.kdim();
    float* cols = c.workspace;
    float* t = cols + g.c * g.h.k * g.w.k * chunk * pix;
    const float* bias = a_.has_bias ? c.in[2] : nullptr;
    for (int64_t b0 = 0; b0 < g.n; b0 += chunk) {
      const int64_t nb = std::min(chunk, g.n - b0), width = nb * pix;
      Im2ColKernel<<<Blocks(l, g.c * g.h.k * g.w.k * width), kBlockThreads, 0, l.stream>>>(c.in[0], win, b0, nb,
                                                                                           cols);
      Launched(c, cudaGetLastError(), "Im2ColKernel");
      for (int64_t gr = 0; gr < g.group; ++gr)
        c.be->Gemm(false, false, int(mg), int(width), int(kd), 1.0f, c.in[1] + gr * mg * kd, int(kd),
                   cols + gr * kd * width, int(width), 0.0f, t + gr * mg * width, int(width));
      ScatterKernel<<<Blocks(l, g.m * width), kBlockThreads, 0, l.stream>>>(t, bias, g.m, pix, b0, nb, c.out[0]);
      Launched(c, cudaGetLastError(), "ScatterKernel");
    }
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    const float* dy = c.dout[0];
    float* dx = c.din[0];
    float* dw = c.din.size() > 1 ? c.din[1] : nullptr;
    float* db = a_.has_bias && c.din.size() > 2 ? c.din[2] : nullptr;
    const ConvGeometry g = Geometry(InDims(c));
    LaunchConfig l;
    if (!dy || g.n == 0 || !Begin(c, &l)) return;
    const int64_t pix = g.pix(), mg = g.mg(), kd = g.kdim();
    if (db) {
      BiasGradKernel<<<std::min<unsigned>(unsigned(std::min<int64_t>(g.m, INT32_MAX)), l.max_blocks), kBlockThreads,
                       0, l.stream>>>(dy, g.n, g.m, pix, db);
      Launched(c, cudaGetLastError(), "BiasGradKernel");
    }
    if (!dx && !dw) return;
    const Win win = WinOf(g);
    const int64_t chunk = ChunkImages(g);
    float* cols = c.workspace;
    float* t = cols + g.c * g.h.k * g.w.k * chunk * pix;
    const float* wt = c.in[1];
    for (int64_t b0 = 0; b0 < g.n; b0 += chunk) {
      const int64_t nb = std::min(chunk, g.n - b0), width = nb * pix;
      GatherKernel<<<Blocks(l, g.m * width), kBlockThreads, 0, l.stream>>>(dy, g.m, pix, b0, nb, t);
      Launched(c, cudaGetLastError(), "GatherKernel");
      if (dw) {  // dW_g += dY_g cols_g^T
        Im2ColKernel<<<Blocks(l, g.c * g.h.k * g.w.k * width), kBlockThreads, 0, l.stream>>>(c.in[0], win, b0,
                                                                                             nb, cols);
        Launched(c, cudaGetLastError(), "Im2ColKernel");
        for (int64_t gr = 0; gr < g.group; ++gr)
          c.be->Gemm(false, true, int(mg), int(kd), int(width), 1.0f, t + gr * mg * width, int(width),
                     cols + gr * kd * width, int(width), 1.0f, dw + gr * mg * kd, int(kd));
      }
      if (dx) {  // dcols_g = W_g^T dY_g (over the columns, which dW no longer needs), then dX
        for (int64_t gr = 0; gr < g.group; ++gr)
          c.be->Gemm(true, false, int(kd), int(width), int(mg), 1.0f, wt + gr * mg * kd, int(kd),
                     t + gr * mg * width, int(width), 0.0f, cols + gr * kd * width, int(width));
        Col2ImKernel<<<Blocks(l, nb * g.c * g.in_pix()), kBlockThreads, 0, l.stream>>>(cols, win, b0, nb, dx);
        Launched(c, cudaGetLastError(), "Col2ImKernel");
      }
    }
  }

 private:
  static std::vector<Dims> InDims(const KernelCall& c) {
    std::vector<Dims> in;
    for (const Dims* d : c.in_dims) in.push_back(*d);
    return in;
  }
  ConvGeometry Geometry(const std::vector<Dims>& in) const {
    Result<ConvGeometry> g = ops::ResolveConv(label_, a_, in);
    FM_CHECK(g.ok());  // InferShapes succeeded on these dims
    return *g;
  }

  std::string label_;
  ConvAttrs a_;
};

}  // namespace

CudaKernelResult MakeCudaConv(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu) {
  return std::unique_ptr<OpKernel>(new CudaConv(std::move(cpu), *ctx.node));
}

}  // namespace fedmesh::graph::cuda_ops
