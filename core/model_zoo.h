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
  std::string name = "mlp";       // logreg | mlp | cnn
  SampleShape input_shape = {28, 28, 1};
  int num_classes = 10;
  std::vector<int> hidden = {256};  // mlp hidden layer sizes (ignored by logreg and cnn)
  float dropout = 0.0f;             // dropout before each hidden Dense of mlp/cnn; 0 = none
};

// The names BuildModel accepts, for error messages and --help.
const std::vector<std::string>& KnownModelNames();

// OK if BuildModel knows `name`; otherwise the error lists the known names.
Status ValidateModelName(const std::string& name);

// Builds (but does not initialise) the model; unknown names or shapes that do not fit
// (e.g. cnn on tabular data) fail with a sentence naming the problem.
Result<std::unique_ptr<Model>> BuildModel(const ModelSpec& spec, Backend* backend);

}  // namespace fedmesh
