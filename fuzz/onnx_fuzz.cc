// libFuzzer entry for the ONNX reader and graph executor target; see fuzz/onnx_fuzz_target.h
// and fuzz/README.md.
#include <cstddef>
#include <cstdint>

#include "fuzz/onnx_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fedmesh::fuzz::FuzzOnnxModel(data, size);
}
