// Gemm (Y = alpha op(A) op(B) + beta C, what torch exports for nn.Linear on 2-D input)
// and MatMul (batched, what it exports for nn.Linear on N-D input), through the
// backend's GEMM. Backward is two more GEMMs per input; the bias gradient sums dY over
// the broadcast dims.
#include <algorithm>
#include <cstring>

#include "core/graph/ops/broadcast.h"
#include "core/graph/ops/ops.h"

namespace fedmesh::graph::ops {
namespace {

// C of shape [n] or [1, n]: the same bias added to every row of Y.
bool IsRowBias(const Dims& cd, int64_t n) { return cd == Dims{n} || cd == Dims{1, n}; }

class Gemm final : public OpKernel {
 public:
  Gemm(const Node& n)
      : label_(n.Label()),
        alpha_(n.Float("alpha", 1.0f)),
        beta_(n.Float("beta", 1.0f)),
        trans_a_(n.Int("transA", 0) != 0),
        trans_b_(n.Int("transB", 0) != 0),
        has_c_(n.inputs.size() > 2 && !n.inputs[2].empty()) {}

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    const Dims& a = in[0];
    const Dims& b = in[1];
    if (a.size() != 2 || b.size() != 2)
      return Status::InvalidArgument(label_ + " needs 2-D A and B, got " + DimsToString(a) +
                                     " and " + DimsToString(b));
    const int64_t m = trans_a_ ? a[1] : a[0], k = trans_a_ ? a[0] : a[1];
    const int64_t kb = trans_b_ ? b[1] : b[0], n = trans_b_ ? b[0] : b[1];
    if (k != kb)
      return Status::InvalidArgument(label_ + ": inner dimensions differ, A " + DimsToString(a) +
                                     (trans_a_ ? "^T" : "") + " and B " + DimsToString(b) +
                                     (trans_b_ ? "^T" : ""));
    if (has_c_) {
      auto d = BroadcastDims(in[2], {m, n});
      if (!d.ok() || *d != Dims{m, n})
        return Status::InvalidArgument(label_ + ": C " + DimsToString(in[2]) +
                                       " does not broadcast to " + DimsToString({m, n}));
    }
    *out = {{m, n}};
    return Status::OK();
  }

  // B and C: their gradients are GEMM / sum outputs that can land in the parameter
  // directly, once dA (which reads B) has been computed.
  bool CanStepInput(size_t i) const override { return i == 1 || i == 2; }

  size_t WorkspaceFloats(const std::vector<Dims>&, const std::vector<Dims>& out) const override {
    return static_cast<size_t>(out[0][1]);  // the bias gradient's column sums
  }

  Status Forward(const KernelCall& c) override {
    const Dims& a = *c.in_dims[0];
    const Dims& y = *c.out_dims[0];
    const int m = static_cast<int>(y[0]), n = static_cast<int>(y[1]);
    const int k = static_cast<int>(trans_a_ ? a[0] : a[1]);
    float* out = c.out[0];
    // nn.Linear's bias: one row per sample, beta 1.
    const bool row_bias = has_c_ && beta_ == 1.0f && IsRowBias(*c.in_dims[2], n);
    float beta = 0.0f;
    if (has_c_ && !row_bias) {  // C broadcast into Y first, the product added onto it
      const BroadcastIndex bc(*c.in_dims[2], y);
      for (int64_t i = 0; i < int64_t{m} * n; ++i) out[i] = beta_ * c.in[2][bc.At(i)];
      beta = 1.0f;
    }
    // A row bias is added after a beta = 0 product, as the Dense layer does: the backend's
    // GEMM has a faster form for few rows times a large B^T only when it need not read Y.
    c.be->Gemm(trans_a_, trans_b_, m, n, k, alpha_, c.in[0], trans_a_ ? m : k, c.in[1],
               trans_b_ ? k : n, beta, out, n);
    if (row_bias) c.be->AddBias(out, c.in[2], m, n);
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    const Dims& a = *c.in_dims[0];
    const Dims& y = *c.out_dims[0];
    const int m = static_cast<int>(y[0]), n = static_cast<int>(y[1]);
    const int k = static_cast<int>(trans_a_ ? a[0] : a[1]);
    const float* A = c.in[0];
    const float* B = c.in[1];
    const float* dY = c.dout[0];
    const int lda = trans_a_ ? m : k, ldb = trans_b_ ? k : n;
    if (float* dA = c.din[0]) {
      if (!trans_a_)  // dA[m,k] += alpha dY op(B)^T
        c.be->Gemm(false, !trans_b_, m, k, n, alpha_, dY, n, B, ldb, 1.0f, dA, k);
      else  // dA[k,m] += alpha op(B) dY^T
        c.be->Gemm(trans_b_, true, k, m, n, alpha_, B, ldb, dY, n, 1.0f, dA, m);
    }
    if (float* dB = c.din[1]) {
      const KernelCall::GradWrite w = c.Write(1);
      const float s = alpha_ * w.scale;
      if (!trans_b_)  // dB[k,n] = keep dB + alpha op(A)^T dY
        c.be->Gemm(!trans_a_, false, k, n, m, s, A, lda, dY, n, w.keep, dB, n);
      else  // dB[n,k] = keep dB + alpha dY^T op(A)
        c.be->Gemm(true, trans_a_, n, k, m, s, dY, n, A, lda, w.keep, dB, k);
    }
    if (has_c_ && c.din[2]) {
      const Dims& cd = *c.in_dims[2];
      float* dC = c.din[2];
      const KernelCall::GradWrite w = c.Write(2);
      const float s = beta_ * w.scale;
      const int64_t nc = NumElements(cd);
      // Assigned, not scaled by zero, when overwritten: the old value may be NaN.
      if (w.keep == 0.0f) std::fill(dC, dC + nc, 0.0f);
      if (cd == y) {
        for (int64_t i = 0; i < int64_t{m} * n; ++i) dC[i] += s * dY[i];
      } else if (IsRowBias(cd, n)) {
        // Column sums first, so a stepped bias is written once.
        float* tmp = c.workspace;
        std::fill(tmp, tmp + n, 0.0f);
        for (int r = 0; r < m; ++r)
          for (int j = 0; j < n; ++j) tmp[j] += dY[int64_t{r} * n + j];
        for (int j = 0; j < n; ++j) dC[j] += s * tmp[j];
      } else {
        const BroadcastIndex bc(cd, y);
        for (int64_t i = 0; i < int64_t{m} * n; ++i) dC[bc.At(i)] += s * dY[i];
      }
    }
  }

 private:
  std::string label_;
  float alpha_, beta_;
  bool trans_a_, trans_b_, has_c_;
};

// A [..., M, K] x B [..., K, N]; B may be 2-D (shared by every leading index of A) or have
// A's leading dims. 1-D operands follow numpy (a vector is [1,K] or [K,1], the dim dropped).
class MatMul final : public OpKernel {
 public:
  explicit MatMul(std::string label) : label_(std::move(label)) {}

  struct Geo {
    int64_t batch = 1, m = 1, k = 1, n = 1;
    bool b_shared = true;  // B is 2-D: one matrix for every batch index
  };

  Result<Geo> Geometry(const Dims& a0, const Dims& b0) const {
    Dims a = a0.size() == 1 ? Dims{1, a0[0]} : a0;
    Dims b = b0.size() == 1 ? Dims{b0[0], 1} : b0;
    if (a.empty() || b.empty()) return Status::InvalidArgument(label_ + ": scalar operand");
    Geo g;
    g.m = a[a.size() - 2];
    g.k = a.back();
    g.n = b.back();
    if (b[b.size() - 2] != g.k)
      return Status::InvalidArgument(label_ + ": inner dimensions differ, " + DimsToString(a0) +
                                     " x " + DimsToString(b0));
    if (b.size() == 2) {
      for (size_t d = 0; d + 2 < a.size(); ++d) g.m *= a[d];  // fold A's leading dims into M
      g.b_shared = true;
    } else {
      if (a.size() != b.size() || !std::equal(a.begin(), a.end() - 2, b.begin()))
        return Status::InvalidArgument(label_ + ": batched MatMul needs equal leading dims, got " +
                                       DimsToString(a0) + " x " + DimsToString(b0));
      for (size_t d = 0; d + 2 < a.size(); ++d) g.batch *= a[d];
      g.b_shared = false;
    }
    return g;
  }

  Status InferShapes(const std::vector<Dims>& in, std::vector<Dims>* out) const override {
    auto g = Geometry(in[0], in[1]);
    if (!g.ok()) return g.status();
    Dims y;
    if (in[0].size() >= 2) {
      y.assign(in[0].begin(), in[0].end() - 1);
    } else if (in[1].size() > 2) {
      y.assign(in[1].begin(), in[1].end() - 2);
    }
    if (in[1].size() >= 2) y.push_back(in[1].back());
    *out = {y};
    return Status::OK();
  }

  Status Forward(const KernelCall& c) override {
    const Geo g = *Geometry(*c.in_dims[0], *c.in_dims[1]);
    for (int64_t t = 0; t < g.batch; ++t)
      c.be->Gemm(false, false, int(g.m), int(g.n), int(g.k), 1.0f, c.in[0] + t * g.m * g.k,
                 int(g.k), c.in[1] + (g.b_shared ? 0 : t * g.k * g.n), int(g.n), 0.0f,
                 c.out[0] + t * g.m * g.n, int(g.n));
    return Status::OK();
  }

  void Backward(const KernelCall& c) override {
    const Geo g = *Geometry(*c.in_dims[0], *c.in_dims[1]);
    for (int64_t t = 0; t < g.batch; ++t) {
      const float* A = c.in[0] + t * g.m * g.k;
      const float* B = c.in[1] + (g.b_shared ? 0 : t * g.k * g.n);
      const float* dY = c.dout[0] + t * g.m * g.n;
      if (c.din[0])  // dA += dY B^T
        c.be->Gemm(false, true, int(g.m), int(g.k), int(g.n), 1.0f, dY, int(g.n), B, int(g.n),
                   1.0f, c.din[0] + t * g.m * g.k, int(g.k));
      if (c.din[1])  // dB += A^T dY
        c.be->Gemm(true, false, int(g.k), int(g.n), int(g.m), 1.0f, A, int(g.k), dY, int(g.n),
                   1.0f, c.din[1] + (g.b_shared ? 0 : t * g.k * g.n), int(g.n));
    }
  }

 private:
  std::string label_;
};

}  // namespace

KernelResult MakeGemm(const KernelContext& ctx) {
  if (ctx.node->inputs.size() < 2)
    return Status::InvalidArgument(ctx.node->Label() + " needs inputs A and B");
  return std::unique_ptr<OpKernel>(new Gemm(*ctx.node));
}

KernelResult MakeMatMul(const KernelContext& ctx) {
  if (ctx.node->inputs.size() != 2)
    return Status::InvalidArgument(ctx.node->Label() + " needs inputs A and B");
  return std::unique_ptr<OpKernel>(new MatMul(ctx.node->Label()));
}

}  // namespace fedmesh::graph::ops
