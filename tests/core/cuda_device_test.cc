// CUDA device discovery and backend selection work in every build: without CUDA (or
// without a GPU) they report zero devices, a reason, and fall back to the CPU for "auto";
// with a GPU, "auto" and "cuda:N" give the CUDA backend.
#include <stdlib.h>

#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/cuda/cuda_backend.h"
#include "core/cuda/device_info.h"
#include "tests/core/status_assertions.h"

namespace fedmesh {
namespace {

using testing::HasCode;

TEST(CudaDevice, NoDeviceMeansAReasonAndCpuFallback) {
  if (CudaDeviceCount() > 0)
    GTEST_SKIP() << "a CUDA device is present: " << CudaDeviceDescription(0);
  EXPECT_FALSE(CudaUnavailableReason().empty());
  auto cuda = MakeBackend("cuda", 1);
  ASSERT_FALSE(cuda.ok());
  EXPECT_TRUE(HasCode(cuda.status(), StatusCode::kUnavailable, "use --device cpu or auto"));
  EXPECT_NE(cuda.status().message().find(CudaUnavailableReason()), std::string::npos)
      << cuda.status().ToString();
  // The factory itself refuses too (the build-without-CUDA stub or the device check).
  auto direct = MakeCudaBackend(0);
  ASSERT_FALSE(direct.ok());
  EXPECT_TRUE(HasCode(direct.status(), StatusCode::kUnavailable, "use --device cpu or auto"));
  auto autod = MakeBackend("auto", 1);
  ASSERT_TRUE(autod.ok());
  EXPECT_EQ((*autod)->kind(), BackendKind::kCpu);
}

// Runs in every build: the variable that picks the GPU convolution path takes two values
// (or none); anything else is refused naming it.
TEST(CudaDevice, ConvolutionPathVariableTakesItsValuesAndRefusesOthers) {
  const char* old = getenv("FEDMESH_CUDA_CONV");
  const std::string saved = old == nullptr ? "" : old;
  unsetenv("FEDMESH_CUDA_CONV");
  auto unset = CudaConvFromEnvironment();
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(*unset, CudaConv::kAuto);
  const std::pair<const char*, CudaConv> good[] = {
      {"", CudaConv::kAuto}, {"cudnn", CudaConv::kCudnn}, {"im2col", CudaConv::kIm2col}};
  for (const auto& [value, want] : good) {
    setenv("FEDMESH_CUDA_CONV", value, 1);
    auto got = CudaConvFromEnvironment();
    ASSERT_TRUE(got.ok()) << value;
    EXPECT_EQ(*got, want) << value;
  }
  for (const char* bad : {"CUDNN", "gemm", "cudnn ", "1"}) {
    setenv("FEDMESH_CUDA_CONV", bad, 1);
    auto got = CudaConvFromEnvironment();
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_TRUE(HasCode(got.status(), StatusCode::kInvalidArgument, "FEDMESH_CUDA_CONV")) << bad;
    EXPECT_NE(got.status().message().find("expected cudnn or im2col"), std::string::npos);
    if (CudaDeviceCount() > 0) {  // and a backend is not made with it
      EXPECT_EQ(MakeCudaBackend(0).status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  if (old == nullptr) {
    unsetenv("FEDMESH_CUDA_CONV");
  } else {
    setenv("FEDMESH_CUDA_CONV", saved.c_str(), 1);
  }
}

TEST(CudaDevice, MalformedDeviceIndexIsInvalidArgument) {
  for (const char* name : {"cuda:", "cuda:-1", "cuda:1x", "cuda:x"}) {
    auto be = MakeBackend(name, 1);
    ASSERT_FALSE(be.ok()) << name;
    EXPECT_TRUE(HasCode(be.status(), StatusCode::kInvalidArgument, "expected cuda:N")) << name;
  }
}

TEST(CudaDevice, PresentDeviceIsDescribedAndChosen) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason();
  const std::string d = CudaDeviceDescription(0);
  EXPECT_NE(d.find("SMs"), std::string::npos) << d;

  auto autod = MakeBackend("auto", 1);
  ASSERT_TRUE(autod.ok()) << autod.status().ToString();
  EXPECT_EQ((*autod)->kind(), BackendKind::kCuda);
  // "cuda:0 (<description>; conv <how convolutions run>)".
  EXPECT_EQ((*autod)->name().rfind("cuda:0 (" + d + "; conv ", 0), 0u) << (*autod)->name();
  EXPECT_EQ((*autod)->name().back(), ')') << (*autod)->name();

  auto cuda = MakeBackend("cuda", 1);
  ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
  EXPECT_EQ((*cuda)->kind(), BackendKind::kCuda);
  auto last = MakeBackend("cuda:" + std::to_string(CudaDeviceCount() - 1), 1);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_TRUE((*last)->Synchronize().ok());

  auto absent = MakeBackend("cuda:99", 1);
  ASSERT_FALSE(absent.ok());
  EXPECT_TRUE(HasCode(absent.status(), StatusCode::kUnavailable, "use --device cpu or auto"));
  EXPECT_TRUE(HasCode(MakeCudaBackend(99).status(), StatusCode::kUnavailable));
}

}  // namespace
}  // namespace fedmesh
