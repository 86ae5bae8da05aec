#include "core/builtin_graph.h"

#include <map>
#include <sstream>

namespace fedmesh {
namespace {

using graph::Attribute;
using graph::DType;
using graph::Node;
using graph::Tensor;

Attribute Ints(std::vector<int64_t> v) { return Attribute::OfInts(std::move(v)); }
Attribute Int(int64_t v) { return Attribute::OfInt(v); }

class Builder {
 public:
  Builder(std::span<const float> params) : params_(params) {}

  // Takes the next `n` floats of the flat vector.
  Result<std::vector<float>> Take(size_t n) {
    if (at_ + n > params_.size())
      return Status::InvalidArgument("the flat vector has " + std::to_string(params_.size()) +
                                     " values, fewer than the model needs");
    std::vector<float> v(params_.begin() + at_, params_.begin() + at_ + n);
    at_ += n;
    return v;
  }
  std::string Init(const std::string& name, graph::Dims dims, std::vector<float> v) {
    g.initializers.push_back(Tensor{name, DType::kFloat32, std::move(dims), std::move(v), {}});
    return name;
  }
  std::string Add(const std::string& op, std::vector<std::string> in,
                  std::map<std::string, Attribute> attrs = {}) {
    const std::string out = op + "_" + std::to_string(next_++);
    g.nodes.push_back(Node{out, op, std::move(in), {out}, std::move(attrs)});
    return out;
  }
  // Dense(in -> out): Gemm with W [out, in] (the layer's layout), columns reordered by
  // `column_of` (ONNX column -> built-in column) when not empty.
  Result<std::string> Dense(const std::string& x, int in, int out, const std::string& name,
                            const std::vector<int64_t>& column_of = {}) {
    FM_ASSIGN_OR_RETURN(std::vector<float> w, Take(static_cast<size_t>(in) * out));
    FM_ASSIGN_OR_RETURN(std::vector<float> b, Take(out));
    if (!column_of.empty()) {
      std::vector<float> p(w.size());
      for (int o = 0; o < out; ++o)
        for (int j = 0; j < in; ++j) p[int64_t{o} * in + j] = w[int64_t{o} * in + column_of[j]];
      w = std::move(p);
    }
    const std::string wn = Init(name + ".weight", {out, in}, std::move(w));
    const std::string bn = Init(name + ".bias", {out}, std::move(b));
    return Add("Gemm", {x, wn, bn}, {{"transB", Int(1)}});
  }
  // Conv2d(kernel k, stride 1, padding p) from OHWI weights: transposed to OIHW here, or
  // (layer_layout) kept OHWI in the initializer and transposed by a Transpose node, so the
  // graph's parameters stay in the layer's order and layout.
  Result<std::string> Conv(const std::string& x, int c, int out, int k, int pad,
                           const std::string& name, bool layer_layout) {
    FM_ASSIGN_OR_RETURN(std::vector<float> w, Take(static_cast<size_t>(out) * k * k * c));
    FM_ASSIGN_OR_RETURN(std::vector<float> b, Take(out));
    std::string wn;
    if (layer_layout) {
      wn = Add("Transpose", {Init(name + ".weight", {out, k, k, c}, std::move(w))},
               {{"perm", Ints({0, 3, 1, 2})}});
    } else {
      std::vector<float> oihw(w.size());
      for (int o = 0; o < out; ++o)
        for (int kh = 0; kh < k; ++kh)
          for (int kw = 0; kw < k; ++kw)
            for (int ci = 0; ci < c; ++ci)
              oihw[((int64_t{o} * c + ci) * k + kh) * k + kw] = w[((int64_t{o} * k + kh) * k + kw) * c + ci];
      wn = Init(name + ".weight", {out, c, k, k}, std::move(oihw));
    }
    const std::string bn = Init(name + ".bias", {out}, std::move(b));
    return Add("Conv", {x, wn, bn},
               {{"kernel_shape", Ints({k, k})}, {"pads", Ints({pad, pad, pad, pad})},
                {"strides", Ints({1, 1})}});
  }
  // Dropout with its ratio as a Constant input (opset >= 12); nothing when ratio is 0.
  std::string Dropout(const std::string& x, float ratio) {
    if (ratio <= 0.0f) return x;
    const std::string r = "dropout_ratio_" + std::to_string(next_++);
    Attribute a;
    a.kind = Attribute::Kind::kTensor;
    a.t = Tensor{r, DType::kFloat32, {}, {ratio}, {}};
    g.nodes.push_back(Node{r, "Constant", {}, {r}, {{"value", std::move(a)}}});
    return Add("Dropout", {x, r});
  }
  bool used_all() const { return at_ == params_.size(); }

  graph::Graph g;

 private:
  std::span<const float> params_;
  size_t at_ = 0;
  int next_ = 0;
};

// ONNX column j of a flattened [C, H, W] map -> the built-in's column of the same value in
// its [H, W, C] flattening. Empty when the order is the same (C == 1).
std::vector<int64_t> ChwToHwc(int h, int w, int c) {
  if (c == 1) return {};
  std::vector<int64_t> col(static_cast<size_t>(h) * w * c);
  for (int ci = 0; ci < c; ++ci)
    for (int hi = 0; hi < h; ++hi)
      for (int wi = 0; wi < w; ++wi)
        col[(int64_t{ci} * h + hi) * w + wi] = (int64_t{hi} * w + wi) * c + ci;
  return col;
}

// The built-in `spec` as a graph. layer_layout false: ONNX's layout (input [N, C, H, W],
// OIHW convolution weights, fc1's columns in CHW order). true: the layer code's (input
// [N, H, W, C] and the flat vector's own layout, the convolutions reading their inputs and
// weights through Transpose nodes and fc1 reading an HWC flattening).
Result<graph::Graph> BuildGraph(const ModelSpec& spec, std::span<const float> params, float dropout,
                                bool layer_layout) {
  if (IsOnnxModelName(spec.name)) return Status::InvalidArgument("not a built-in model");
  FM_RETURN_IF_ERROR(ValidateModelName(spec.name));
  Builder b(params);
  b.g.name = "fedmesh-" + spec.name + (layer_layout ? "-layers" : "");
  b.g.opset = 17;
  const bool image = spec.input_shape.size() == 3;
  const int H = image ? spec.input_shape[0] : 1, W = image ? spec.input_shape[1] : 1,
            C = image ? spec.input_shape[2] : 1;
  graph::Dims in_dims = {-1};
  if (image && !layer_layout) {
    in_dims.insert(in_dims.end(), {C, H, W});
  } else {
    for (int d : spec.input_shape) in_dims.push_back(d);
  }
  int features = 1;
  for (int d : spec.input_shape) features *= d;
  b.g.inputs = {{"x", DType::kFloat32, in_dims}};
  std::string x = "x";
  if (spec.name == "cnn") {
    if (!image) return Status::InvalidArgument("cnn needs image input");
    if (layer_layout) x = b.Add("Transpose", {x}, {{"perm", Ints({0, 3, 1, 2})}});
    FM_ASSIGN_OR_RETURN(x, b.Conv(x, C, 32, 5, 2, "conv1", layer_layout));
    x = b.Add("Relu", {x});
    x = b.Add("MaxPool", {x}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}});
    FM_ASSIGN_OR_RETURN(x, b.Conv(x, 32, 64, 5, 2, "conv2", layer_layout));
    x = b.Add("Relu", {x});
    x = b.Add("MaxPool", {x}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}});
    const int h = H / 2 / 2, w = W / 2 / 2;
    if (layer_layout) x = b.Add("Transpose", {x}, {{"perm", Ints({0, 2, 3, 1})}});
    x = b.Add("Flatten", {x}, {{"axis", Int(1)}});
    FM_ASSIGN_OR_RETURN(x, b.Dense(x, 64 * h * w, 512, "fc1",
                                   layer_layout ? std::vector<int64_t>{} : ChwToHwc(h, w, 64)));
    x = b.Add("Relu", {x});
    x = b.Dropout(x, dropout);
    FM_ASSIGN_OR_RETURN(x, b.Dense(x, 512, spec.num_classes, "fc2"));
  } else {
    x = b.Add("Flatten", {x}, {{"axis", Int(1)}});
    std::vector<int64_t> columns = image && !layer_layout ? ChwToHwc(H, W, C) : std::vector<int64_t>{};
    int in = features, layer = 1;
    if (spec.name == "mlp") {
      for (int h : spec.hidden) {
        FM_ASSIGN_OR_RETURN(x, b.Dense(x, in, h, "fc" + std::to_string(layer++), columns));
        x = b.Add("Relu", {x});
        x = b.Dropout(x, dropout);
        columns.clear();
        in = h;
      }
    }
    FM_ASSIGN_OR_RETURN(x, b.Dense(x, in, spec.num_classes, "fc" + std::to_string(layer), columns));
  }
  if (!b.used_all())
    return Status::InvalidArgument("the flat vector has " + std::to_string(params.size()) +
                                   " values, more than the built-in " + spec.name + " needs");
  // The last node's output is the graph's output, named y.
  b.g.nodes.back().outputs[0] = "y";
  b.g.outputs = {{"y", DType::kFloat32, {-1, spec.num_classes}}};
  FM_RETURN_IF_ERROR(graph::Finalize(&b.g));
  return std::move(b.g);
}

}  // namespace

Result<graph::Graph> BuiltinModelGraph(const ModelSpec& spec, std::span<const float> params,
                                       const BuiltinGraphOptions& options) {
  return BuildGraph(spec, params, options.training_dropout ? spec.dropout : 0.0f,
                    /*layer_layout=*/false);
}

Result<graph::Graph> BuiltinTrainingGraph(const ModelSpec& spec, std::span<const float> params) {
  return BuildGraph(spec, params, spec.dropout, /*layer_layout=*/true);
}

std::string SpecToText(const ModelSpec& spec) {
  std::ostringstream s;
  s << "name=" << spec.name << ";input=";
  for (size_t i = 0; i < spec.input_shape.size(); ++i) s << (i ? "," : "") << spec.input_shape[i];
  s << ";classes=" << spec.num_classes << ";hidden=";
  for (size_t i = 0; i < spec.hidden.size(); ++i) s << (i ? "," : "") << spec.hidden[i];
  s << ";dropout=" << spec.dropout;
  return s.str();
}

Result<ModelSpec> SpecFromText(const std::string& text) {
  ModelSpec spec;
  spec.input_shape.clear();
  spec.hidden.clear();
  auto ints = [](const std::string& v) {
    std::vector<int> out;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) out.push_back(std::stoi(item));
    return out;
  };
  std::stringstream ss(text);
  std::string field;
  try {
    while (std::getline(ss, field, ';')) {
      const size_t eq = field.find('=');
      if (eq == std::string::npos) return Status::Corruption("model spec '" + text + "' is malformed");
      const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
      if (k == "name") spec.name = v;
      else if (k == "input") spec.input_shape = ints(v);
      else if (k == "classes") spec.num_classes = std::stoi(v);
      else if (k == "hidden") spec.hidden = ints(v);
      else if (k == "dropout") spec.dropout = std::stof(v);
    }
  } catch (const std::exception&) {
    return Status::Corruption("model spec '" + text + "' is malformed");
  }
  FM_RETURN_IF_ERROR(ValidateModelName(spec.name));
  return spec;
}

}  // namespace fedmesh
