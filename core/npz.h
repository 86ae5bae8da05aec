// NumPy's .npy and .npz files: named arrays in a ZIP archive, the exchange format of
// the Python ecosystem (np.savez / np.load). fedmesh writes trained models as .npz of
// named float32 arrays and reads .npz datasets. Writing stores members uncompressed (as
// np.savez does); reading accepts stored and deflated members (np.savez_compressed).
// Every size the archive claims is checked against the bytes it holds and against
// NpzLimits before anything is allocated for it.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/graph/graph.h"
#include "core/status.h"

namespace fedmesh {

struct NpzLimits {
  size_t max_file_bytes = size_t{4} << 30;     // 4 GiB
  size_t max_array_bytes = size_t{2} << 30;    // one decoded array
  size_t max_members = 10000;
};

// One array: float32 data for float16/32/64 arrays, int64 for integer and bool arrays.
using NpzArray = graph::Tensor;

// Serialized .npz of `arrays` (names without ".npy"; float32 or int64 each).
std::string EncodeNpz(const std::vector<NpzArray>& arrays);
Status WriteNpzFile(const std::string& path, const std::vector<NpzArray>& arrays);

// The arrays of an .npz archive, in archive order. Errors name the member.
Result<std::vector<NpzArray>> DecodeNpz(std::string_view bytes, const NpzLimits& limits = {});
Result<std::vector<NpzArray>> ReadNpzFile(const std::string& path, const NpzLimits& limits = {});
// One .npy array (`name` is used for errors and the result's name).
Result<NpzArray> DecodeNpy(std::string_view bytes, const std::string& name,
                           const NpzLimits& limits = {});

}  // namespace fedmesh
