#include "core/graph/ops/conv_dnnl.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#ifdef FEDMESH_HAVE_DNNL
#include <spdlog/spdlog.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#endif

namespace fedmesh::graph::ops {
namespace {

CpuConvEngine DefaultEngine() {
  auto e = CpuConvEngineFromEnvironment();
  return e.ok() ? *e : CpuConvEngine::kDnnl;  // a bad value is refused at model creation
}

std::atomic<CpuConvEngine>& EngineSetting() {
  static std::atomic<CpuConvEngine> engine{DefaultEngine()};
  return engine;
}

}  // namespace

Result<CpuConvEngine> CpuConvEngineFromEnvironment() {
  const char* env = std::getenv("FEDMESH_CPU_CONV");
  const std::string_view v = env == nullptr ? "" : env;
  if (v.empty() || v == "dnnl") return CpuConvEngine::kDnnl;
  if (v == "im2col") return CpuConvEngine::kIm2col;
  return Status::InvalidArgument("environment variable FEDMESH_CPU_CONV = '" + std::string(v) +
                                 "': expected dnnl or im2col (or unset: oneDNN where built)");
}

void SetCpuConvEngine(CpuConvEngine engine) { EngineSetting().store(engine); }
CpuConvEngine GetCpuConvEngine() { return EngineSetting().load(); }

#ifndef FEDMESH_HAVE_DNNL

bool DnnlConvBuilt() { return false; }
std::unique_ptr<DnnlConv> DnnlConv::Create(const ConvGeometry&, bool) { return nullptr; }

#else

bool DnnlConvBuilt() { return true; }

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A run of floats in the workspace, from its 64-byte aligned base.
struct Region {
  size_t offset = 0, floats = 0;
  float* In(float* base) const { return base + offset; }
};

// Regions taken one after another from `start`.
class Layout {
 public:
  explicit Layout(size_t start = 0) : floats_(start) {}
  Region Take(const memory::desc& d) {
    Region r{floats_, (d.get_size() + sizeof(float) - 1) / sizeof(float)};
    floats_ += (r.floats + 15) / 16 * 16;
    return r;
  }
  size_t floats() const { return floats_; }

 private:
  size_t floats_ = 0;
};

// A tensor as the caller holds it (plain layout) and as a primitive wants it: the same
// memory when the layouts agree, else a workspace region and a reorder between the two.
struct Staged {
  memory user, inner;
  std::optional<dnnl::reorder> reorder;  // user -> inner (an input) or inner -> user (an output)
  std::optional<Region> region;

  void Init(const memory::desc& plain, const memory::desc& want, bool output, Layout* layout,
            bool accumulate = false, bool force_region = false) {
    user = memory(plain, Engine(), DNNL_MEMORY_NONE);
    if (!(plain == want) || accumulate || force_region) {
      region = layout->Take(want);
      inner = memory(want, Engine(), DNNL_MEMORY_NONE);
      dnnl::primitive_attr attr;
      if (accumulate) {
        dnnl::post_ops po;
        po.append_sum(1.0f);
        attr.set_post_ops(po);
      }
      reorder = output ? dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), want, Engine(), plain, attr))
                       : dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), plain, Engine(), want, attr));
    } else {
      inner = user;
    }
  }
  // Points both at this call's memory; returns what the primitive reads or writes.
  const memory& Bind(const float* data, float* base) {
    user.set_data_handle(const_cast<float*>(data));
    if (region) inner.set_data_handle(region->In(base));
    return inner;
  }
};

bool Run(const dnnl::primitive& p, dnnl::stream& s, std::initializer_list<dnnl_exec_arg_t> args) {
  // The C entry point: no argument map allocated per call, no exception to catch.
  return dnnl_primitive_execute(p.get(), s.get(), static_cast<int>(args.size()), args.begin()) ==
         dnnl_success;
}

bool Copy(Staged& t, dnnl::stream& s, bool to_inner) {
  if (!t.reorder) return true;
  return to_inner ? Run(*t.reorder, s, {{DNNL_ARG_FROM, t.user.get()}, {DNNL_ARG_TO, t.inner.get()}})
                  : Run(*t.reorder, s, {{DNNL_ARG_FROM, t.inner.get()}, {DNNL_ARG_TO, t.user.get()}});
}

class Impl final : public DnnlConv {
 public:
  // Builds the primitives; throws dnnl::error where oneDNN cannot (Create catches it).
  Impl(const ConvGeometry& g, bool has_bias) : has_bias_(has_bias), stream_(Engine()) {
    const memory::dims src = {g.n, g.c, g.h.in, g.w.in}, dst = {g.n, g.m, g.h.out, g.w.out};
    const memory::dims wei = g.group > 1 ? memory::dims{g.group, g.mg(), g.cg(), g.h.k, g.w.k}
                                         : memory::dims{g.m, g.c, g.h.k, g.w.k};
    const memory::desc src_plain(src, Dt::f32, Tag::nchw), dst_plain(dst, Dt::f32, Tag::nchw);
    const memory::desc wei_plain(wei, Dt::f32, g.group > 1 ? Tag::goihw : Tag::oihw);
    const memory::desc bias_plain({g.m}, Dt::f32, Tag::x);
    const memory::desc src_any(src, Dt::f32, Tag::any), dst_any(dst, Dt::f32, Tag::any);
    const memory::desc wei_any(wei, Dt::f32, Tag::any);
    const memory::dims strides = {g.h.stride, g.w.stride};
    const memory::dims dil = {g.h.dil - 1, g.w.dil - 1};  // oneDNN counts the gaps
    const memory::dims pad_l = {g.h.pad0, g.w.pad0}, pad_r = {g.h.pad1, g.w.pad1};
    const auto algo = dnnl::algorithm::convolution_direct;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

    using Fwd = dnnl::convolution_forward;
    using BwdData = dnnl::convolution_backward_data;
    using BwdWeights = dnnl::convolution_backward_weights;
    const Fwd::desc fd = has_bias ? Fwd::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any,
                                              bias_plain, dst_any, strides, dil, pad_l, pad_r)
                                  : Fwd::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any,
                                              dst_any, strides, dil, pad_l, pad_r);
    const Fwd::primitive_desc fpd(fd, attr, Engine());
    const BwdData::primitive_desc bdpd(BwdData::desc(algo, src_any, wei_any, dst_any, strides, dil, pad_l, pad_r),
                                       attr, Engine(), fpd);
    const BwdWeights::desc bwd =
        has_bias ? BwdWeights::desc(algo, src_any, wei_any, bias_plain, dst_any, strides, dil, pad_l, pad_r)
                 : BwdWeights::desc(algo, src_any, wei_any, dst_any, strides, dil, pad_l, pad_r);
    const BwdWeights::primitive_desc bwpd(bwd, attr, Engine(), fpd);
    fwd_ = Fwd(fpd);
    bwd_data_ = BwdData(bdpd);
    bwd_weights_ = BwdWeights(bwpd);
    impl_ = std::string(fpd.impl_info_str()) + " / " + bdpd.impl_info_str() + " / " + bwpd.impl_info_str();

    // The workspace: the forward's reordered X (kept for the weight pass) and the
    // scratchpad, then the forward's other buffers and the backward's over the same floats
    // (the forward's are dead once Y is written back): three activation-sized buffers, not
    // six, which matters for large evaluation batches.
    Layout kept;
    f_src_.Init(src_plain, fpd.src_desc(), false, &kept);
    size_t scratch = 0;
    for (const memory::desc& d : {fpd.scratchpad_desc(), bdpd.scratchpad_desc(), bwpd.scratchpad_desc()})
      scratch = std::max(scratch, d.get_size());
    const memory::desc scratch_md({static_cast<memory::dim>(scratch)}, Dt::u8, Tag::x);
    scratch_ = kept.Take(scratch_md);
    scratch_mem_ = memory(scratch_md, Engine(), DNNL_MEMORY_NONE);
    Layout fwd(kept.floats()), back(kept.floats());
    f_wei_.Init(wei_plain, fpd.weights_desc(), false, &fwd);
    f_dst_.Init(dst_plain, fpd.dst_desc(), true, &fwd);
    bias_ = memory(bias_plain, Engine(), DNNL_MEMORY_NONE);
    d_dst_.Init(dst_plain, bdpd.diff_dst_desc(), false, &back);
    d_wei_.Init(wei_plain, bdpd.weights_desc(), false, &back);
    d_src_.Init(src_plain, bdpd.diff_src_desc(), true, &back, /*accumulate=*/true);
    d_src_assign_ = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), bdpd.diff_src_desc(), Engine(), src_plain));
    // The weight pass reads X and dY in the layouts the other passes staged them in, as a
    // rule; where it wants others, it has its own.
    if (bwpd.src_desc() == fpd.src_desc()) {
      w_src_ = &f_src_;
    } else {
      w_src_own_.Init(src_plain, bwpd.src_desc(), false, &back);
      w_src_ = &w_src_own_;
    }
    if (bwpd.diff_dst_desc() == bdpd.diff_dst_desc()) {
      w_ddst_ = &d_dst_;
    } else {
      w_ddst_own_.Init(dst_plain, bwpd.diff_dst_desc(), false, &back);
      w_ddst_ = &w_ddst_own_;
    }
    // The weight gradient always lands in the workspace (plain), for the caller to combine.
    w_dwei_.Init(wei_plain, bwpd.diff_weights_desc(), true, &back, false, /*force_region=*/true);
    dw_plain_ = back.Take(wei_plain);
    db_ = back.Take(bias_plain);
    floats_ = std::max(fwd.floats(), back.floats()) + 16;  // 64-byte alignment of the base
  }

  const std::string& impl() const { return impl_; }
  size_t workspace_floats() const override { return floats_; }

  bool Forward(const float* x, const float* w, const float* b, float* y, float* workspace) override {
    float* base = Base(workspace);
    const memory& src = f_src_.Bind(x, base);
    const memory& wei = f_wei_.Bind(w, base);
    const memory& dst = f_dst_.Bind(y, base);
    scratch_mem_.set_data_handle(scratch_.In(base));
    if (!Copy(f_src_, stream_, true) || !Copy(f_wei_, stream_, true)) return false;
    bool ok;
    if (has_bias_) {
      bias_.set_data_handle(const_cast<float*>(b));
      ok = Run(fwd_, stream_, {{DNNL_ARG_SRC, src.get()}, {DNNL_ARG_WEIGHTS, wei.get()}, {DNNL_ARG_BIAS, bias_.get()},
                               {DNNL_ARG_DST, dst.get()}, {DNNL_ARG_SCRATCHPAD, scratch_mem_.get()}});
    } else {
      ok = Run(fwd_, stream_, {{DNNL_ARG_SRC, src.get()}, {DNNL_ARG_WEIGHTS, wei.get()}, {DNNL_ARG_DST, dst.get()},
                               {DNNL_ARG_SCRATCHPAD, scratch_mem_.get()}});
    }
    return ok && Copy(f_dst_, stream_, false);
  }

  bool Backward(const float* x, const float* w, const float* dy, float* dx, bool assign_dx, bool want_weights,
                bool forward_src_staged, float* workspace) override {
    float* base = Base(workspace);
    scratch_mem_.set_data_handle(scratch_.In(base));
    if (dx != nullptr) {
      const memory& ddst = d_dst_.Bind(dy, base);
      const memory& wei = d_wei_.Bind(w, base);
      const memory& dsrc = d_src_.Bind(dx, base);
      if (!Copy(d_dst_, stream_, true) || !Copy(d_wei_, stream_, true)) return false;
      if (!Run(bwd_data_, stream_, {{DNNL_ARG_DIFF_DST, ddst.get()}, {DNNL_ARG_WEIGHTS, wei.get()},
                                    {DNNL_ARG_DIFF_SRC, dsrc.get()}, {DNNL_ARG_SCRATCHPAD, scratch_mem_.get()}}))
        return false;
      if (assign_dx) {
        if (!Run(d_src_assign_, stream_, {{DNNL_ARG_FROM, d_src_.inner.get()}, {DNNL_ARG_TO, d_src_.user.get()}}))
          return false;
      } else if (!Copy(d_src_, stream_, false)) {  // dx += dX (the reorder's sum post-op)
        return false;
      }
    }
    if (!want_weights) return true;
    // The forward's reordered X and the data pass's reordered dY serve again (w_src_ and
    // w_ddst_ are those stagings where the weight pass wants the same layouts): two
    // activation-sized reorders fewer per call.
    const bool src_ready = forward_src_staged && w_src_ == &f_src_;
    const bool ddst_ready = dx != nullptr && w_ddst_ == &d_dst_;
    const memory& src = w_src_->Bind(x, base);
    const memory& ddst = w_ddst_->Bind(dy, base);
    const memory& dwei = w_dwei_.Bind(dw_plain_.In(base), base);
    if ((!src_ready && !Copy(*w_src_, stream_, true)) || (!ddst_ready && !Copy(*w_ddst_, stream_, true)))
      return false;
    bool ok;
    if (has_bias_) {
      bias_.set_data_handle(db_.In(base));
      ok = Run(bwd_weights_, stream_, {{DNNL_ARG_SRC, src.get()}, {DNNL_ARG_DIFF_DST, ddst.get()},
                                       {DNNL_ARG_DIFF_WEIGHTS, dwei.get()}, {DNNL_ARG_DIFF_BIAS, bias_.get()},
                                       {DNNL_ARG_SCRATCHPAD, scratch_mem_.get()}});
    } else {
      ok = Run(bwd_weights_, stream_, {{DNNL_ARG_SRC, src.get()}, {DNNL_ARG_DIFF_DST, ddst.get()},
                                       {DNNL_ARG_DIFF_WEIGHTS, dwei.get()}, {DNNL_ARG_SCRATCHPAD, scratch_mem_.get()}});
    }
    return ok && Copy(w_dwei_, stream_, false);
  }

  const float* weight_grad(const float* workspace) const override {
    return dw_plain_.In(Base(const_cast<float*>(workspace)));
  }
  const float* bias_grad(const float* workspace) const override {
    return db_.In(Base(const_cast<float*>(workspace)));
  }

 private:
  static float* Base(float* workspace) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(workspace);
    return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
  }

  bool has_bias_;
  dnnl::stream stream_;
  dnnl::primitive fwd_, bwd_data_, bwd_weights_, d_src_assign_;
  std::string impl_;
  Staged f_src_, f_wei_, f_dst_, d_dst_, d_wei_, d_src_, w_src_own_, w_ddst_own_, w_dwei_;
  Staged* w_src_ = nullptr;   // &f_src_ or &w_src_own_
  Staged* w_ddst_ = nullptr;  // &d_dst_ or &w_ddst_own_
  memory bias_, scratch_mem_;
  Region dw_plain_, db_, scratch_;
  size_t floats_ = 0;
};

}  // namespace

std::unique_ptr<DnnlConv> DnnlConv::Create(const ConvGeometry& g, bool has_bias) {
  try {
    auto impl = std::make_unique<Impl>(g, has_bias);
    spdlog::debug("Conv [{}, {}, {}x{}] -> {} channels: oneDNN {}", g.n, g.c, g.h.in, g.w.in, g.m, impl->impl());
    return impl;
  } catch (const dnnl::error& e) {
    spdlog::debug("Conv [{}, {}, {}x{}] -> {} channels: no oneDNN primitive ({}); im2col", g.n, g.c, g.h.in,
                  g.w.in, g.m, e.what());
    return nullptr;
  }
}

#endif  // FEDMESH_HAVE_DNNL

}  // namespace fedmesh::graph::ops
