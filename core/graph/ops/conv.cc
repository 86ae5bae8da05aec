// Conv (ONNX, NCHW): 2-D, and 1-D on [N,C,L] as a 2-D convolution with H = 1. Per image
// and per group, the input patch is unrolled into a column matrix (im2col, [Cg*kH*kW,
// OH*OW]) in the thread's slice of the workspace and multiplied by the group's weights
// [Mg, Cg*kH*kW] in one single-threaded GEMM; the OpenMP team splits the (image, group)
// pairs. A 1x1 stride-1 unpadded convolution multiplies the input directly. Backward
// recomputes the columns; each thread sums its dW and dB in its own slice and the slices
// are added in thread order at the end, so results are deterministic for a thread count.
// Where fedmesh links oneDNN, 2-D and 1-D convolutions run through it instead (conv_dnnl.h:
// its JIT kernels in blocked layouts, 3-5x the im2col path on the resnet's 3x3 layers);
// im2col stays for builds without it, for shapes it declines, and on request.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>

#include "core/check.h"
#include "core/graph/ops/conv_dnnl.h"
#include "core/graph/ops/lane_sums.h"
#include "core/graph/ops/ops.h"
#include "core/graph/ops/window_geometry.h"

namespace fedmesh::graph::ops {
namespace {

// The shared geometry plus what the CPU strategy derives from it: the direct and
// transposed-dX paths and the workspace layout.
struct Geo : ConvGeometry {
  Geo() = default;
  explicit Geo(const ConvGeometry& g) : ConvGeometry(g) {}
  // 1x1, stride 1, no padding: the input plane already is the column matrix.
  bool direct() const {
    return h.k == 1 && w.k == 1 && h.stride == 1 && w.stride == 1 && h.pad0 == 0 && h.pad1 == 0 &&
           w.pad0 == 0 && w.pad1 == 0;
  }
  // dX computed as a convolution of dY with the flipped, transposed kernel (stride 1, the
  // padding at most the dilated kernel's reach): a GEMM with inner dimension mg*kH*kW over
  // dY's columns, instead of W^T dY (inner dimension mg, often 16) and a scatter back.
  bool transposed_dx() const {
    return !direct() && h.stride == 1 && w.stride == 1 && h.pad0 <= (h.k - 1) * h.dil &&
           h.pad1 <= (h.k - 1) * h.dil && w.pad0 <= (w.k - 1) * w.dil && w.pad1 <= (w.k - 1) * w.dil &&
           mg() * h.k * w.k * in_pix() <= INT_MAX;
  }
  // That convolution's geometry: dY [N, M, OH, OW] in, dX [N, C, H, W] out.
  Geo Transposed() const {
    Geo t = *this;
    t.c = m;
    t.m = c;
    for (ConvAxis* a : {&t.h, &t.w}) {
      std::swap(a->in, a->out);
      const int64_t reach = (a->k - 1) * a->dil;
      a->pad0 = reach - a->pad0;
      a->pad1 = reach - a->pad1;
    }
    return t;
  }
  static size_t Round16(size_t n) { return (n + 15) / 16 * 16; }
  size_t cols_floats() const {
    if (direct()) return 0;
    size_t n = static_cast<size_t>(kdim()) * pix();
    if (transposed_dx()) n = std::max(n, static_cast<size_t>(mg() * h.k * w.k) * in_pix());
    return Round16(n);
  }
  // dW then dB, per thread.
  size_t grad_floats() const { return Round16(static_cast<size_t>(m) * (kdim() + 1)); }
  size_t thread_floats() const { return cols_floats() + grad_floats(); }
  // Shared by the threads, before their slices: the transposed kernel for transposed_dx.
  size_t shared_floats() const { return transposed_dx() ? Round16(static_cast<size_t>(m) * kdim()) : 0; }
  float* ThreadSlice(float* workspace, int t) const { return workspace + shared_floats() + thread_floats() * t; }
};

// The output columns [lo, hi) whose input column ow*stride + off lies inside [0, in):
// the loops below copy that span without a bounds check per element.
void ValidSpan(int64_t off, int64_t stride, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
  *lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  *hi = in - 1 - off < 0 ? 0 : std::min(out, (in - 1 - off) / stride + 1);
  if (*lo > *hi) *lo = *hi;
}

// cols[(ci*kH + kh)*kW + kw, oh*OW + ow] = x[ci, oh*sH - pT + kh*dH, ow*sW - pL + kw*dW],
// zero outside the image. x is one group's [Cg, H, W] planes.
void Im2Col(const float* x, const Geo& g, float* cols) {
  const ConvAxis& H = g.h;
  const ConvAxis& W = g.w;
  // A "same" convolution (stride 1, undilated rows as wide out as in): one kernel offset
  // reads a contiguous run of the plane, copied as one block (not a call per row of a few
  // dozen floats); the columns that ran into the next row are zeroed after.
  const bool rows_line_up = H.stride == 1 && W.stride == 1 && W.dil == 1 && W.in == W.out;
  float* row = cols;
  for (int64_t ci = 0; ci < g.cg(); ++ci) {
    const float* plane = x + ci * g.in_pix();
    for (int64_t kh = 0; kh < H.k; ++kh)
      for (int64_t kw = 0; kw < W.k; ++kw) {
        const int64_t off = kw * W.dil - W.pad0;
        int64_t lo, hi;
        ValidSpan(off, W.stride, W.in, W.out, &lo, &hi);
        if (rows_line_up && hi > lo) {
          // Output rows whose input row exists: ih = oh - pad0 + kh * dil in [0, H.in).
          const int64_t shift = kh * H.dil - H.pad0;
          const int64_t oh0 = std::clamp<int64_t>(-shift, 0, H.out);
          const int64_t oh1 = std::clamp<int64_t>(H.in - shift, oh0, H.out);
          std::fill(row, row + oh0 * W.out, 0.0f);
          std::fill(row + oh1 * W.out, row + H.out * W.out, 0.0f);
          if (oh1 > oh0) {
            float* dst = row + oh0 * W.out;
            const int64_t first = (oh0 + shift) * W.in + off + lo;  // >= 0: lo skips the padding
            std::memcpy(dst + lo, plane + first, static_cast<size_t>((oh1 - oh0 - 1) * W.out + hi - lo) * sizeof(float));
            // Column by column (a pad or two wide): strided stores, not a memset per row.
            for (int64_t j = 0; j < lo; ++j)
              for (int64_t r = 0; r < oh1 - oh0; ++r) dst[r * W.out + j] = 0.0f;
            for (int64_t j = hi; j < W.out; ++j)
              for (int64_t r = 0; r < oh1 - oh0; ++r) dst[r * W.out + j] = 0.0f;
          }
          row += g.pix();
          continue;
        }
        for (int64_t oh = 0; oh < H.out; ++oh) {
          const int64_t ih = oh * H.stride - H.pad0 + kh * H.dil;
          float* dst = row + oh * W.out;
          if (ih < 0 || ih >= H.in) {
            std::fill(dst, dst + W.out, 0.0f);
            continue;
          }
          const float* src = plane + ih * W.in + off;
          std::fill(dst, dst + lo, 0.0f);
          if (W.stride == 1) {
            std::copy(src + lo, src + hi, dst + lo);
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * W.stride];
          }
          std::fill(dst + hi, dst + W.out, 0.0f);
        }
        row += g.pix();
      }
  }
}

// A Relu fused into the Conv (KernelCall::relu_epilogue): y = max(0, y) in place, NaN to 0
// as the Relu kernel. Split over the team past kParallelRelu elements (memory-bound); inside
// the im2col path's parallel region it runs on the calling thread.
constexpr int64_t kParallelRelu = 1 << 17;
void ReluInPlace(float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelRelu)
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

// Its backward: dy = 0 where the Relu's output y is not positive.
void MaskByRelu(float* dy, const float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelRelu)
  for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// The adjoint of Im2Col: dx += every column entry at the pixel it was read from.
void Col2ImAdd(const float* cols, const Geo& g, float* dx) {
  const ConvAxis& H = g.h;
  const ConvAxis& W = g.w;
  const float* row = cols;
  for (int64_t ci = 0; ci < g.cg(); ++ci) {
    float* plane = dx + ci * g.in_pix();
    for (int64_t kh = 0; kh < H.k; ++kh)
      for (int64_t kw = 0; kw < W.k; ++kw) {
        const int64_t off = kw * W.dil - W.pad0;
        int64_t lo, hi;
        ValidSpan(off, W.stride, W.in, W.out, &lo, &hi);
        for (int64_t oh = 0; oh < H.out; ++oh) {
          const int64_t ih = oh * H.stride - H.pad0 + kh * H.dil;
          if (ih < 0 || ih >= H.in) continue;
          const float* src = row + oh * W.out;
          float* dst = plane + ih * W.in + off;
          if (W.stride == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] += src[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow * W.stride] += src[ow];
          }
        }
        row += g.pix();
      }
  }
}

// d[i] = (assign ? 0 : d[i]) + w.scale * part[i] for i < n: a W or B gradient written as
// KernelCall::Write says, assigned (not scaled by zero: the old value may be anything, NaN
// included) where the executor let the kernel overwrite it.
void AddPart(float* d, const float* part, int64_t n, KernelCall::GradWrite w, bool assign) {
  for (int64_t i = 0; i < n; ++i) d[i] = (assign ? 0.0f : d[i]) + w.scale * part[i];
}

class Conv final : public OpKernel {
 public:
  Conv(const Node& n, ConvAttrs a)
      : label_(n.Label()), a_(std::move(a)), use_dnnl_(GetCpuConvEngine() == CpuConvEngine::kDnnl) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    FM_ASSIGN_OR_RETURN(const Geo g, Geometry(in));
    *out = {in[0].size() == 3 ? Dims{g.n, g.m, g.w.out} : Dims{g.n, g.m, g.h.out, g.w.out}};
    return Status::OK();
  }

  size_t WorkspaceFloats(const std::vector<Dims>& in, const std::vector<Dims>&) const override {
    const Geo g = *Geometry(in);
    // Every plan gets a slice for as many threads as the smallest plan's: the thread count
    // may change between plans, and a call does not learn its workspace size.
    const int t = std::max(1, omp_get_max_threads());
    slots_ = slots_ == 0 ? t : std::min(slots_, t);
    size_t floats = g.shared_floats() + g.thread_floats() * t;
    // Room for batch 1 too: DP-SGD's per-example pass calls Backward with one example in the
    // batch's workspace (core/graph/graph_model_dp.cc), without a plan of its own.
    Geo one = g;
    one.n = 1;
    for (const Geo& each : {g, one})
      if (const Dnnl* d = FindDnnl(each)) floats = std::max(floats, d->conv->workspace_floats());
    return floats;
  }

  Status Forward(const KernelCall& c) override {
    const Geo g = Call(c);
    const float* x = c.in[0];
    const float* wt = c.in[1];
    const float* bias = a_.has_bias ? c.in[2] : nullptr;
    float* y = c.out[0];
    if (Dnnl* d = FindDnnl(g)) {
      const OmpThreads team(std::min(d->threads, c.be ? c.be->threads() : 1));
      last_forward_ = {};
      if (!d->conv->Forward(x, wt, bias, y, c.workspace))
        return Status::Internal(label_ + ": oneDNN's convolution failed (FEDMESH_CPU_CONV=im2col avoids it)");
      last_forward_ = {d, x, c.workspace};
      if (c.relu_epilogue) ReluInPlace(y, g.n * g.m * g.pix());
      return Status::OK();
    }
    last_forward_ = {};
    const int64_t items = g.n * g.group;
    const int64_t mg = g.mg(), kd = g.kdim(), pix = g.pix();
#pragma omp parallel num_threads(Teams(c, items))
    {
      float* cols = g.ThreadSlice(c.workspace, omp_get_thread_num());
#pragma omp for schedule(static)
      for (int64_t it = 0; it < items; ++it) {
        const int64_t n = it / g.group, gr = it % g.group;
        const float* xg = x + (n * g.c + gr * g.cg()) * g.in_pix();
        float* yg = y + (n * g.m + gr * mg) * pix;
        const float* b = xg;
        if (!g.direct()) {
          Im2Col(xg, g, cols);
          b = cols;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(mg), int(pix), int(kd), 1.0f,
                    wt + gr * mg * kd, int(kd), b, int(pix), 0.0f, yg, int(pix));
        if (bias)
          for (int64_t o = 0; o < mg; ++o) {
            float* row = yg + o * pix;
            const float bo = bias[gr * mg + o];
            for (int64_t p = 0; p < pix; ++p) row[p] += bo;
          }
        if (c.relu_epilogue) ReluInPlace(yg, mg * pix);  // while this item's rows are in cache
      }
    }
    return Status::OK();
  }

  // A Relu reading the output alone runs here (KernelCall::relu_epilogue): the output and
  // its gradient are not kept twice, and inference-form ONNX exports (BatchNorm folded into
  // the Conv) are Conv -> Relu throughout.
  bool CanFuseRelu(const std::vector<Dims>&, const std::vector<Dims>&) const override { return true; }

  // W and B: their gradients are summed from per-thread partials after dX is done.
  bool CanStepInput(size_t i) const override { return i == 1 || i == 2; }
  bool CanOverwriteInputGradient(size_t i) const override { return i == 0; }

  void Backward(const KernelCall& c) override {
    const Geo g = Call(c);
    const float* x = c.in[0];
    const float* wt = c.in[1];
    const float* dy = c.dout[0];
    float* dx = c.din[0];
    float* dw = c.din.size() > 1 ? c.din[1] : nullptr;
    float* db = a_.has_bias && c.din.size() > 2 ? c.din[2] : nullptr;
    // A fused Relu: its output's gradient is masked where it is (KernelCall::relu_epilogue
    // allows it), so every pass below reads the Conv output's gradient.
    if (c.relu_epilogue) MaskByRelu(const_cast<float*>(dy), c.out[0], g.n * g.m * g.pix());
    if (Dnnl* d = FindDnnl(g)) {
      {
        const OmpThreads team(std::min(d->threads, c.be ? c.be->threads() : 1));
        const bool staged = last_forward_.conv == d && last_forward_.x == x && last_forward_.workspace == c.workspace;
        if (!staged) last_forward_ = {};  // another instance's regions overlap the forward's
        FM_CHECK(d->conv->Backward(x, wt, dy, dx, c.Write(0).keep == 0.0f, dw != nullptr || db != nullptr, staged,
                                   c.workspace));
      }
      const KernelCall::GradWrite ww = c.Write(1), wb = c.Write(2);
      if (dw) AddPart(dw, d->conv->weight_grad(c.workspace), g.m * g.kdim(), ww, ww.keep == 0.0f);
      if (db) AddPart(db, d->conv->bias_grad(c.workspace), g.m, wb, wb.keep == 0.0f);
      return;
    }
    last_forward_ = {};  // the im2col path below writes over the workspace
    // An overwritten dX (CanOverwriteInputGradient) starts from zero: the GEMMs below add.
    if (dx && c.Write(0).keep == 0.0f) std::fill(dx, dx + g.n * g.c * g.in_pix(), 0.0f);
    const int64_t items = g.n * g.group;
    const int64_t mg = g.mg(), kd = g.kdim(), pix = g.pix();
    const size_t nw = static_cast<size_t>(g.m) * kd;
    // transposed_dx: Wt[gr][ci][m] = W[gr*mg + m][ci] flipped in both axes, made once.
    const bool tdx = dx != nullptr && g.transposed_dx();
    const Geo gt = g.Transposed();
    const int64_t kk = g.h.k * g.w.k, tkd = mg * kk;  // the transposed GEMM's inner dimension
    float* wflip = c.workspace;
    if (tdx) {
      for (int64_t gr = 0; gr < g.group; ++gr)
        for (int64_t ci = 0; ci < g.cg(); ++ci)
          for (int64_t mo = 0; mo < mg; ++mo) {
            const float* kernel = wt + ((gr * mg + mo) * g.cg() + ci) * kk;
            float* flipped = wflip + ((gr * g.cg() + ci) * mg + mo) * kk;
            for (int64_t j = 0; j < kk; ++j) flipped[j] = kernel[kk - 1 - j];
          }
    }
    int team = 1;  // the team actually formed (1 when called inside another region)
#pragma omp parallel num_threads(Teams(c, items))
    {
#pragma omp single
      team = omp_get_num_threads();
      float* cols = g.ThreadSlice(c.workspace, omp_get_thread_num());
      float* my_dw = cols + g.cols_floats();  // dW^T [kd, M] then [M] bias
      if (dw || db) std::fill(my_dw, my_dw + nw + g.m, 0.0f);
#pragma omp for schedule(static)
      for (int64_t it = 0; it < items; ++it) {
        const int64_t n = it / g.group, gr = it % g.group;
        const float* xg = x + (n * g.c + gr * g.cg()) * g.in_pix();
        const float* dyg = dy + (n * g.m + gr * mg) * pix;
        const float* wg = wt + gr * mg * kd;
        if (dw) {  // dW_g += dY_g cols^T
          const float* b = xg;
          if (!g.direct()) {
            Im2Col(xg, g, cols);
            b = cols;
          }
          // Accumulated transposed, dW^T [kd, M] += cols dY_g^T: the long side (kd) is the
          // GEMM's rows, which OpenBLAS blocks better than 16 rows of a long reduction.
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(kd), int(mg), int(pix), 1.0f,
                      b, int(pix), dyg, int(pix), 1.0f, my_dw + gr * mg, int(g.m));
        }
        if (db)
          for (int64_t o = 0; o < mg; ++o) {
            my_dw[nw + gr * mg + o] += LaneSum(dyg + o * pix, pix);
          }
        if (dx) {  // dcols = W_g^T dY_g, scattered back into dX
          float* dxg = dx + (n * g.c + gr * g.cg()) * g.in_pix();
          if (g.direct()) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(kd), int(pix), int(mg), 1.0f,
                        wg, int(kd), dyg, int(pix), 1.0f, dxg, int(pix));
          } else if (tdx) {  // dX_g += Wt_g cols(dY_g)
            Im2Col(dyg, gt, cols);
            const int in_pix = static_cast<int>(g.in_pix());
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(g.cg()), in_pix, int(tkd), 1.0f,
                        wflip + gr * g.cg() * tkd, int(tkd), cols, in_pix, 1.0f, dxg, in_pix);
          } else {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(kd), int(pix), int(mg), 1.0f,
                        wg, int(kd), dyg, int(pix), 0.0f, cols, int(pix));
            Col2ImAdd(cols, g, dxg);
          }
        }
      }
    }
    // Add the per-thread partial sums in thread order (small: M * (kd + 1) floats each);
    // a stepped W or B (BackwardSgd) gets -lr times them, now that dX no longer reads W.
    // An overwritten W or B (KernelCall::overwrite_input) keeps nothing of its old value.
    const KernelCall::GradWrite ww = c.Write(1), wb = c.Write(2);
    for (int t = 0; t < team; ++t) {
      const float* part = g.ThreadSlice(c.workspace, t) + g.cols_floats();
      // Assigned, not scaled by zero: the old value may be anything, NaN included.
      const bool set_w = t == 0 && ww.keep == 0.0f, set_b = t == 0 && wb.keep == 0.0f;
      if (dw)  // part holds dW^T [kd, M]
        for (int64_t o = 0; o < g.m; ++o)
          for (int64_t i = 0; i < kd; ++i) {
            float& d = dw[o * kd + i];
            d = (set_w ? 0.0f : d) + ww.scale * part[i * g.m + o];
          }
      if (db) AddPart(db, part + nw, g.m, wb, set_b);
    }
  }

 private:
  Result<Geo> Geometry(const std::vector<Dims>& in) const {
    FM_ASSIGN_OR_RETURN(const ConvGeometry g, ResolveConv(label_, a_, in));
    return Geo(g);
  }

  Geo Call(const KernelCall& c) const {
    std::vector<Dims> in = {*c.in_dims[0], *c.in_dims[1]};
    if (a_.has_bias) in.push_back(*c.in_dims[2]);
    Result<Geo> g = Geometry(in);
    FM_CHECK(g.ok());
    FM_CHECK(c.workspace != nullptr || g->thread_floats() + g->shared_floats() == 0);
    return *g;
  }

  int Teams(const KernelCall& c, int64_t items) const {
    FM_CHECK_GT(slots_, 0);  // WorkspaceFloats() planned this call's workspace
    int64_t t = std::min<int64_t>({slots_, c.be ? c.be->threads() : 1, items});
    return static_cast<int>(std::max<int64_t>(1, t));
  }

  // oneDNN's convolution for one input shape, and the OpenMP team it was planned for (its
  // scratchpad holds per-thread partial sums: a call may use fewer threads, never more).
  struct Dnnl {
    std::unique_ptr<DnnlConv> conv;
    int threads = 1;
  };

  // The oneDNN convolution for g (made on first use; null when declined or off).
  Dnnl* FindDnnl(const Geo& g) const {
    if (!use_dnnl_) return nullptr;
    const std::vector<int64_t> key = {g.n, g.c, g.h.in, g.w.in};
    auto it = dnnl_.find(key);
    if (it == dnnl_.end()) {
      Dnnl d{DnnlConv::Create(g, a_.has_bias), std::max(1, omp_get_max_threads())};
      it = dnnl_.emplace(key, std::move(d)).first;
    }
    return it->second.conv != nullptr ? &it->second : nullptr;
  }

  // The calling thread's OpenMP team size for one call (oneDNN forms its team from it).
  class OmpThreads {
   public:
    explicit OmpThreads(int n) : saved_(omp_get_max_threads()) {
      if (n != saved_) omp_set_num_threads(std::max(1, n));
    }
    ~OmpThreads() {
      if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
    }
    OmpThreads(const OmpThreads&) = delete;
    OmpThreads& operator=(const OmpThreads&) = delete;

   private:
    int saved_;
  };

  // The last call that wrote this kernel's workspace, when it was a oneDNN Forward: its
  // Backward of the same x in the same workspace finds the reordered X still there. Any
  // other call (DP-SGD's per-example passes, another plan) clears it.
  struct ForwardMark {
    const Dnnl* conv = nullptr;
    const float* x = nullptr;
    const float* workspace = nullptr;
  };

  std::string label_;
  ConvAttrs a_;
  bool use_dnnl_;
  ForwardMark last_forward_;
  mutable int slots_ = 0;  // threads every planned workspace has room for
  mutable std::map<std::vector<int64_t>, Dnnl> dnnl_;  // by input shape
};

}  // namespace

KernelResult MakeConv(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  const std::string label = n.Label();
  if (n.inputs.size() < 2 || n.inputs.size() > 3 || n.inputs[0].empty() || n.inputs[1].empty())
    return Status::InvalidArgument(label + " needs inputs X, W and an optional B");
  ConvAttrs a = ReadConvAttrs(n);
  const std::string& auto_pad = a.auto_pad;
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" &&
      auto_pad != "SAME_LOWER")
    return Status::InvalidArgument(label + ": unknown auto_pad '" + auto_pad +
                                   "' (expected NOTSET, VALID, SAME_UPPER or SAME_LOWER)");
  const int64_t group = a.group;
  if (group < 1)
    return Status::InvalidArgument(label + ": group must be >= 1, got " + std::to_string(group));
  const std::vector<int64_t>& kernel_shape = a.kernel_shape;
  const std::vector<int64_t>& strides = a.strides;
  const std::vector<int64_t>& dilations = a.dilations;
  const std::vector<int64_t>& pads = a.pads;  // empty under auto_pad (ReadConvAttrs)
  // Bounded by INT_MAX too, so that the window arithmetic cannot overflow int64.
  for (int64_t v : strides)
    if (v < 1 || v > INT_MAX)
      return Status::InvalidArgument(label + ": strides " + IntsToString(strides) +
                                     " must be in [1, " + std::to_string(INT_MAX) + "]");
  for (int64_t v : dilations)
    if (v < 1 || v > INT_MAX)
      return Status::InvalidArgument(label + ": dilations " + IntsToString(dilations) +
                                     " must be in [1, " + std::to_string(INT_MAX) + "]");
  for (int64_t v : pads)
    if (v < 0 || v > INT_MAX)
      return Status::InvalidArgument(label + ": pads " + IntsToString(pads) + " must be in [0, " +
                                     std::to_string(INT_MAX) + "]");
  if (pads.size() % 2 != 0)
    return Status::InvalidArgument(label + ": pads " + IntsToString(pads) +
                                   " needs a begin and an end value per axis");
  // Any attribute fixes the spatial rank; only 1-D and 2-D are implemented.
  size_t sp = 0;
  for (size_t len : {kernel_shape.size(), strides.size(), dilations.size(), pads.size() / 2}) {
    if (len == 0) continue;
    if (sp != 0 && len != sp)
      return Status::InvalidArgument(label +
                                     ": kernel_shape, strides, dilations and pads "
                                     "disagree on the number of spatial axes");
    sp = len;
  }
  if (sp > 2)
    return Status::Unimplemented(label +
                                 ": only 1-D and 2-D convolution are supported, the "
                                 "attributes describe " +
                                 std::to_string(sp) + "-D");
  return std::unique_ptr<OpKernel>(new Conv(n, std::move(a)));
}

}  // namespace fedmesh::graph::ops
