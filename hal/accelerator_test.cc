#include "hal/accelerator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/testing/fake_accelerator.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(LogicalDeviceTest, NamesTheAcceleratorsIndexAndTheComputeDeviceWhenItDiffers) {
  EXPECT_EQ((LogicalDevice{.accelerator = "sim", .index = 2, .compute = c10::Device(c10::DeviceType::CPU)}).ToString(),
            "sim:2 (on cpu)");
  EXPECT_EQ(
      (LogicalDevice{.accelerator = "cuda", .index = 1, .compute = c10::Device(c10::DeviceType::CUDA, 1)}).ToString(),
      "cuda:1");
}

TEST(LogicalDeviceTest, LogicalDevicesKeepEachParsedIndex) {
  testing::FakeAccelerator sim(testing::FakeAcceleratorOptions{.name = "sim", .device_count = 3});
  const std::vector<LogicalDevice> devices = LogicalDevices(sim, {0, 2});
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].index, 2);
  EXPECT_EQ(devices[1].accelerator, "sim");
  EXPECT_TRUE(devices[1].compute.is_cpu());
  EXPECT_EQ(LogicalDeviceOf(sim, c10::Device(c10::DeviceType::CPU)).index, 0);
}

TEST(LogicalDeviceTest, AnIndexThatIsNotTheComputeDevicesIsRefused) {
  EXPECT_TRUE(
      CheckIndexIsCompute({.accelerator = "npu", .index = 1, .compute = c10::Device(c10::DeviceType::PrivateUse1, 1)})
          .ok());
  EXPECT_TRUE(
      CheckIndexIsCompute({.accelerator = "hpu", .index = 3, .compute = c10::Device(c10::DeviceType::HPU)}).ok());
  const absl::Status wrong =
      CheckIndexIsCompute({.accelerator = "npu", .index = 2, .compute = c10::Device(c10::DeviceType::PrivateUse1, 1)});
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.message(), HasSubstr("device npu:2 (on privateuseone:1) is not one of npu's devices"));
}

// An accelerator that declares nothing has no known peak (MFU is then not reported); one that declares a figure per
// dtype is asked with the dtype of the run's precision.
TEST(PeakFlopsTest, UnknownByDefaultAndPerDtypeWhereDeclared) {
  testing::FakeAccelerator silent;
  const LogicalDevice device = LogicalDevices(silent, {0})[0];
  EXPECT_EQ(silent.PeakFlops(device, c10::kFloat), std::nullopt);
  testing::FakeAccelerator declared(
      testing::FakeAcceleratorOptions{.peak_flops = {{c10::kFloat, 2.0e12}, {c10::kBFloat16, 8.0e12}}});
  EXPECT_EQ(declared.PeakFlops(device, ComputeDtype(Precision::k32True)), 2.0e12);
  EXPECT_EQ(declared.PeakFlops(device, ComputeDtype(Precision::kBf16Mixed)), 8.0e12);
  EXPECT_EQ(declared.PeakFlops(device, ComputeDtype(Precision::k16Mixed)), std::nullopt);
}

}  // namespace
}  // namespace kiln
