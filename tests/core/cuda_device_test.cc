// CUDA device discovery works in every build: without CUDA (or without a GPU) it reports
// zero devices and a reason; with a GPU it describes it.
#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/cuda/device_info.h"

namespace fedmesh {
namespace {

TEST(CudaDevice, NoDeviceMeansAReasonAndCpuFallback) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present: " << CudaDeviceDescription(0);
  EXPECT_FALSE(CudaUnavailableReason().empty());
  auto cuda = MakeBackend("cuda", 1);
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(cuda.status().message().find("use --device cpu or auto"), std::string::npos);
  auto autod = MakeBackend("auto", 1);
  ASSERT_TRUE(autod.ok());
  EXPECT_EQ((*autod)->kind(), BackendKind::kCpu);
}

TEST(CudaDevice, PresentDeviceIsDescribed) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason();
  const std::string d = CudaDeviceDescription(0);
  EXPECT_NE(d.find("SMs"), std::string::npos) << d;
}

}  // namespace
}  // namespace fedmesh
