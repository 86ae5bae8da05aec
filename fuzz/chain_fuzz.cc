// libFuzzer entry for the chain codec target; see fuzz/codec_fuzz_targets.h and fuzz/README.md.
#include <cstddef>
#include <cstdint>

#include "fuzz/codec_fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fedmesh::fuzz::FuzzChain(data, size);
}
