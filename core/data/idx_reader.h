// IDX reader: loads the big-endian IDX array format that MNIST and Fashion-MNIST ship in,
// gzip-compressed or plain (zlib's gzread passes uncompressed files through unchanged).
// Only unsigned-byte arrays (type code 0x08) are supported, which is what image and label
// files use. Every header field is validated before anything is allocated, so a damaged or
// hostile file yields a Status, never a huge allocation or a crash.
// Thread-safety: the functions are stateless; concurrent calls are safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/status.h"

namespace fedmesh {

// Largest array, in elements (= bytes for uint8), that the reader accepts. Real IDX
// datasets are far smaller (Fashion-MNIST train is 47 MB); the cap exists so that a
// corrupt header cannot make us allocate gigabytes of floats.
inline constexpr uint64_t kMaxIdxElements = uint64_t{1} << 30;  // 1 GiB

// One IDX array of unsigned bytes.
struct IdxArray {
  std::vector<uint32_t> dims;  // e.g. {60000, 28, 28}; every entry > 0
  std::vector<uint8_t> data;   // product(dims) bytes, row-major
};

// Reads an IDX file whose element type is uint8 and which has exactly `expected_ndims`
// dimensions. Errors: NotFound (no such file), InvalidArgument (not a regular file,
// expected_ndims outside 1..255), IOError (the OS refused to read), Corruption (bad magic,
// other element type, other number of dimensions, zero or oversized dimensions, truncated
// or trailing data, damaged gzip stream). Every message names the path.
Result<IdxArray> ReadIdxUint8(const std::string& path, int expected_ndims);

// Reads an image file (magic 0x00000803: count x rows x cols) and its label file (magic
// 0x00000801: count) into a Dataset with sample_shape {rows, cols, 1}, features x/255 in
// [0, 1] and int32 labels. Errors as ReadIdxUint8, plus InvalidArgument when num_classes
// is outside 1..256 and Corruption when the two counts differ or a label >= num_classes.
Result<Dataset> ReadIdxImagesAndLabels(const std::string& images_path,
                                       const std::string& labels_path, int num_classes);

}  // namespace fedmesh
