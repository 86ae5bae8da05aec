#include "core/backend.h"

#include <spdlog/spdlog.h>

#include <charconv>

#include "core/cuda/device_info.h"

namespace fedmesh {

Result<std::unique_ptr<Backend>> MakeBackend(std::string_view device, int threads) {
  if (device == "cpu") return MakeCpuBackend(threads);
  if (device == "auto") {
    const int gpus = CudaDeviceCount();
    if (gpus > 0) {
      // The CUDA backend itself lands with the GPU issue; until then a present GPU is
      // reported but not used.
      spdlog::info("device auto: {} CUDA device(s) present but this build has no CUDA training backend; using CPU", gpus);
    } else {
      spdlog::info("device auto: no CUDA device ({}); using CPU", CudaUnavailableReason());
    }
    return MakeCpuBackend(threads);
  }
  if (device == "cuda" || device.starts_with("cuda:")) {
    int index = 0;
    if (device.size() > 5) {
      auto sv = device.substr(5);
      auto [p, ec] = std::from_chars(sv.data(), sv.data() + sv.size(), index);
      if (ec != std::errc() || p != sv.data() + sv.size() || index < 0) {
        return Status::InvalidArgument("device '" + std::string(device) + "': expected cuda:N with N >= 0");
      }
    }
    const int gpus = CudaDeviceCount();
    if (index >= gpus) {
      return Status::Unavailable("device '" + std::string(device) + "' requested but " +
                                 std::to_string(gpus) + " CUDA device(s) available (" +
                                 CudaUnavailableReason() + "); use --device cpu or auto");
    }
    return Status::Unimplemented("the CUDA training backend is not built yet; use --device cpu or auto");
  }
  return Status::InvalidArgument("unknown device '" + std::string(device) +
                                 "'; expected auto, cpu, cuda or cuda:N");
}

}  // namespace fedmesh
