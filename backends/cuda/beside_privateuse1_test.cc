// A process where an out-of-tree device (PrivateUse1) has been named cannot run CUDA's autograd under LibTorch 2.x
// (pytorch/pytorch#161129): the CUDA accelerator refuses to set a device up there, naming the device and the fix,
// instead of letting the first backward fail inside LibTorch. Its own binary: a name, once given, stays for the
// process. The refusal comes before any CUDA call, so this runs on a machine without a GPU too.
#include "backends/cuda/cuda_accelerator.h"
#include "c10/core/DeviceType.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(CudaBesidePrivateUse1Test, RefusesToSetUpOnceAnOutOfTreeDeviceIsNamed) {
  CudaAccelerator cuda;
  const LogicalDevice gpu = LogicalDeviceOf(cuda, c10::Device(c10::DeviceType::CUDA, 0));
  const absl::Status before = cuda.SetupDevice(gpu);
  EXPECT_THAT(before.message(), ::testing::Not(HasSubstr("PrivateUse1"))) << "nothing is named yet";

  c10::register_privateuse1_backend("acme_npu");
  const absl::Status after = cuda.SetupDevice(gpu);
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(after.message(), HasSubstr("the out-of-tree device 'acme_npu' (LibTorch's PrivateUse1)"));
  EXPECT_THAT(after.message(), HasSubstr("pytorch/pytorch#161129"));
  EXPECT_THAT(after.message(), HasSubstr("--accelerator_plugin"));
}

}  // namespace
}  // namespace kiln
