#include "core/backend.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdlib>

#include "core/cuda/cuda_backend.h"
#include "core/cuda/device_info.h"

namespace fedmesh {

Result<CudaConv> CudaConvFromEnvironment() {
  const char* env = std::getenv("FEDMESH_CUDA_CONV");
  const std::string_view v = env == nullptr ? "" : env;
  if (v.empty()) return CudaConv::kAuto;
  if (v == "cudnn") return CudaConv::kCudnn;
  if (v == "im2col") return CudaConv::kIm2col;
  return Status::InvalidArgument("environment variable FEDMESH_CUDA_CONV = '" + std::string(v) +
                                 "': expected cudnn or im2col (or unset: whichever is measured "
                                 "faster per layer)");
}

Status CheckDeviceName(std::string_view device) {
  if (device == "cpu" || device == "auto" || device == "cuda") return Status::OK();
  if (device.starts_with("cuda:")) {
    int index = 0;
    const auto sv = device.substr(5);  // "cuda:" with nothing after it fails below
    const auto [p, ec] = std::from_chars(sv.data(), sv.data() + sv.size(), index);
    if (ec != std::errc() || p != sv.data() + sv.size() || index < 0) {
      return Status::InvalidArgument("device '" + std::string(device) + "': expected cuda:N with N >= 0");
    }
    return Status::OK();
  }
  return Status::InvalidArgument("unknown device '" + std::string(device) +
                                 "'; expected auto, cpu, cuda or cuda:N");
}

Result<std::unique_ptr<Backend>> MakeBackend(std::string_view device, int threads) {
  FM_RETURN_IF_ERROR(CheckDeviceName(device));
  if (device == "cpu") return MakeCpuBackend(threads);
  if (device == "auto") {
    if (CudaDeviceCount() == 0) {
      spdlog::info("device auto: no CUDA device ({}); using CPU", CudaUnavailableReason());
      return MakeCpuBackend(threads);
    }
    auto cuda = MakeCudaBackend(0);
    if (!cuda.ok()) {
      // A present but unusable GPU (driver mismatch, device busy in exclusive mode, out of
      // memory) should not stop a run that asked for "whatever works".
      spdlog::warn("device auto: CUDA device 0 present but unusable ({}); using CPU",
                   cuda.status().ToString());
      return MakeCpuBackend(threads);
    }
    spdlog::info("device auto: using {}", (*cuda)->name());
    return cuda;
  }
  // "cuda" or "cuda:N", N checked above.
  int index = 0;
  if (device != "cuda") (void)std::from_chars(device.data() + 5, device.data() + device.size(), index);
  const int gpus = CudaDeviceCount();
  if (index >= gpus) {
    const std::string why = gpus == 0 ? " (" + CudaUnavailableReason() + ")" : "";
    return Status::Unavailable("device '" + std::string(device) + "' requested but " +
                               std::to_string(gpus) + " CUDA device(s) available" + why +
                               "; use --device cpu or auto");
  }
  return MakeCudaBackend(index);
}

}  // namespace fedmesh
