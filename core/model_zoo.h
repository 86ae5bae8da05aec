// The models fedmesh knows by name: "logreg", "mlp" and "cnn" (LeNet-class). Every site
// in a federation builds the same architecture from the same ModelSpec, so their flat
// parameter vectors line up element for element.
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/model.h"

namespace fedmesh {

struct ModelSpec {
  // logreg | mlp | cnn, or the path of an ONNX file (a name ending in ".onnx"): the
  // model torch.onnx.export wrote, with its initializers as the initial weights.
  std::string name = "mlp";
  SampleShape input_shape = {28, 28, 1};
  int num_classes = 10;
  std::vector<int> hidden = {256};  // mlp hidden layer sizes (ignored by logreg and cnn)
  float dropout = 0.0f;             // dropout before each hidden Dense of mlp/cnn; 0 = none
};

// The most trainable parameters a built-in model may have: 2^28 float32 = 1 GiB, which every
// copy of the model (optimizer state, the round's updates, the store) multiplies.
inline constexpr uint64_t kMaxBuiltinModelParams = uint64_t{1} << 28;
// The trainable parameters the built-in model `spec` names would have, counted without
// building it (in double: a hostile shape's products overflow 64 bits); 0 for ONNX models
// and for shapes BuildModel refuses anyway.
double BuiltinModelParams(const ModelSpec& spec);
// For a built-in model: InvalidArgument when it would have more than kMaxBuiltinModelParams
// parameters, so a huge shape is refused instead of exhausting memory. OK for ONNX models
// (the file's size is bounded when it is read).
Status CheckModelSize(const ModelSpec& spec);

// The names BuildModel accepts, for error messages and --help.
const std::vector<std::string>& KnownModelNames();

// OK if BuildModel knows `name` or it names an .onnx file; otherwise the error lists the
// known names. Does not open the file.
Status ValidateModelName(const std::string& name);
// True when `name` is an ONNX model path rather than a built-in name.
bool IsOnnxModelName(const std::string& name);
// OK for an empty path; otherwise reads and checks the ONNX file (parse, supported ops,
// finite weights, shapes for one sample) so a bad model fails at config load, not later.
Status CheckOnnxModelFile(const std::string& path);

// How a built-in model (logreg, mlp, cnn) runs; ONNX models always run on the graph executor.
enum class BuiltinEngine {
  kAuto,    // kGraph on a backend with host memory (the CPU), kLayers on a device (CUDA)
  kGraph,   // the graph executor, on the layer-layout graph (core/builtin_graph.h)
  kLayers,  // the layer code (core/layers/)
};
// "auto" | "graph" | "layers" ([train] engine); InvalidArgument naming the choices otherwise.
Result<BuiltinEngine> ParseBuiltinEngine(const std::string& text);

struct BuildModelOptions {
  // Default kAuto. On the CPU the graph executor trains the built-in cnn 1.6-1.8x faster
  // than the layer code (bench/RESULTS.md) and the mlp as fast; on a GPU the layer code's
  // cuDNN path is the one measured, so kAuto keeps it there; kGraph on a GPU is an explicit
  // choice (the graph's CUDA Conv, pooling and Gemm kernels are tested against the CPU by
  // tests that have not run on a GPU yet; the device-memory paths run in CI on
  // tests/core/staged_cpu_backend.h). Both give the same flat vector (layout and initial
  // values for a seed), so sites may differ; outputs and steps agree up to rounding, except
  // that dropout draws its masks differently.
  BuiltinEngine builtin_engine = BuiltinEngine::kAuto;
};

// Builds (but does not initialise) the model; unknown names or shapes that do not fit
// (e.g. cnn on tabular data) fail with a sentence naming the problem. An ONNX model is
// read from its file (spec.input_shape / num_classes are ignored: the file declares
// them) and fails with InvalidArgument naming the file and node for bad content.
Result<std::unique_ptr<Model>> BuildModel(const ModelSpec& spec, Backend* backend,
                                          const BuildModelOptions& options = {});

}  // namespace fedmesh
