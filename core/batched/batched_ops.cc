#include "core/batched/batched_ops.h"

#include <spdlog/spdlog.h>

#include <charconv>

#include "core/cuda/cuda_batched_ops.h"
#include "core/cuda/device_info.h"

namespace fedmesh {
namespace {

// The CUDA device index of "cuda" / "cuda:N"; -1 for "cpu" and "auto".
Result<int> DeviceIndex(std::string_view device) {
  if (device == "cpu" || device == "auto") return -1;
  if (device == "cuda") return 0;
  if (device.substr(0, 5) == "cuda:" && device.size() > 5) {
    const std::string_view digits = device.substr(5);
    int index = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && p == digits.data() + digits.size() && index >= 0) return index;
  }
  return Status::InvalidArgument("unknown device '" + std::string(device) +
                                 "'; expected cpu, auto, cuda or cuda:N (N >= 0)");
}

}  // namespace

Status ValidateDeviceName(std::string_view device) { return DeviceIndex(device).status(); }

Result<std::unique_ptr<BatchedOps>> MakeBatchedOps(std::string_view device, int threads) {
  FM_ASSIGN_OR_RETURN(const int index, DeviceIndex(device));
  if (device == "cpu") return MakeCpuBatchedOps(threads);
  const int gpus = CudaDeviceCount();
  if (device == "auto") {
    if (gpus > 0) {
      auto cuda = MakeCudaBatchedOps(0);
      if (cuda.ok()) return cuda;
      spdlog::warn("device auto: CUDA device 0 is present but unusable ({}); using CPU",
                   cuda.status().message());
    } else {
      spdlog::info("device auto: no CUDA device ({}); using CPU", CudaUnavailableReason());
    }
    return MakeCpuBatchedOps(threads);
  }
  if (index >= gpus) {
    return Status::Unavailable("device '" + std::string(device) + "' requested but " +
                               std::to_string(gpus) + " CUDA device(s) available (" +
                               CudaUnavailableReason() + "); use device cpu or auto");
  }
  return MakeCudaBatchedOps(index);
}

}  // namespace fedmesh
