#include "core/data/fashion_mnist.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "core/data/idx_reader.h"

namespace fedmesh {

std::string DefaultFashionMnistDir() {
  const char* env = std::getenv("FEDMESH_DATA_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  return kFashionMnistDefaultDir;
}

Result<Dataset> LoadFashionMnist(DataSplit split, const std::string& dir) {
  const std::string base = dir.empty() ? DefaultFashionMnistDir() : dir;
  const std::string prefix = split == DataSplit::kTrain ? "train" : "t10k";
  const std::string images = base + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels = base + "/" + prefix + "-labels-idx1-ubyte.gz";

  // Checked here rather than left to the IDX reader so that the message can say how to
  // get the data, which only this layer knows.
  for (const std::string& path : {images, labels}) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && !ec) {
      return Status::NotFound("Fashion-MNIST not found at " + path +
                              ": install the Debian package dataset-fashion-mnist "
                              "(scripts/setup.sh does) or set FEDMESH_DATA_DIR");
    }
  }
  FM_ASSIGN_OR_RETURN(Dataset ds, ReadIdxImagesAndLabels(images, labels, kFashionMnistClasses));
  // Every fedmesh model for this dataset assumes 28x28 inputs; a directory holding other
  // IDX images would otherwise fail much later with a confusing shape error.
  if (ds.sample_shape[0] != 28 || ds.sample_shape[1] != 28) {
    return Status::Corruption(
        "Fashion-MNIST images in " + images + " are " + std::to_string(ds.sample_shape[0]) + "x" +
        std::to_string(ds.sample_shape[1]) +
        ", expected 28x28; point FEDMESH_DATA_DIR at the Fashion-MNIST files");
  }
  return ds;
}

}  // namespace fedmesh
