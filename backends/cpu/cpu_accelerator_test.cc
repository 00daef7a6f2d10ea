#include "backends/cpu/cpu_accelerator.h"

#include <ctime>
#include <vector>

#include "ATen/ATen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/registry.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(CpuAcceleratorTest, RegistersItselfInTheDefaultRegistry) {
  absl::StatusOr<AcceleratorSpec> spec = AcceleratorRegistry::Default().Find("CPU");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "cpu");
  EXPECT_EQ(spec->priority, 0);
  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = AcceleratorRegistry::Default().Get("cpu");
  ASSERT_TRUE(accelerator.ok());
  EXPECT_EQ((*accelerator)->name(), "cpu");
  EXPECT_TRUE((*accelerator)->IsAvailable());
}

TEST(CpuAcceleratorTest, DevicesAreProcessesOnThisMachine) {
  CpuAccelerator cpu;
  EXPECT_EQ(cpu.AutoDeviceCount(), 1);
  EXPECT_EQ(*cpu.ParseDevices("auto"), (std::vector<int>{0}));
  EXPECT_EQ(*cpu.ParseDevices(4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*cpu.ParseDevices("2"), (std::vector<int>{0, 1}));
  for (const Devices& bad : {Devices(-1), Devices("0,1"), Devices({1}), Devices("many")}) {
    SCOPED_TRACE(bad.ToString());
    EXPECT_FALSE(cpu.ParseDevices(bad).ok());
  }
  EXPECT_THAT(cpu.ParseDevices(-1).status().message(), HasSubstr("should be an int > 0, got -1"));

  std::vector<c10::Device> devices = cpu.ParallelDevices(*cpu.ParseDevices(3));
  ASSERT_EQ(devices.size(), 3u);
  for (const c10::Device& device : devices) EXPECT_TRUE(device.is_cpu());
}

TEST(CpuAcceleratorTest, SetupAndTeardownRepeatAndRefuseOtherDevices) {
  CpuAccelerator cpu;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(cpu.SetupDevice(LogicalDeviceOf(cpu, c10::Device(c10::DeviceType::CPU))).ok());
    EXPECT_TRUE(cpu.TeardownDevice(LogicalDeviceOf(cpu, c10::Device(c10::DeviceType::CPU))).ok());
  }
  absl::Status wrong = cpu.SetupDevice(LogicalDeviceOf(cpu, c10::Device(c10::DeviceType::CUDA, 0)));
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.message(), HasSubstr("got device 'cuda:0'"));
  EXPECT_FALSE(cpu.GetDeviceStats(LogicalDeviceOf(cpu, c10::Device(c10::DeviceType::CUDA, 0))).ok());
}

TEST(CpuAcceleratorTest, StatisticsAreRealReadings) {
  CpuAccelerator cpu;
  const c10::Device device(c10::DeviceType::CPU);
  absl::StatusOr<DeviceStats> before = cpu.GetDeviceStats(LogicalDeviceOf(cpu, device));
  ASSERT_TRUE(before.ok()) << before.status();
  for (const char* key : {"process_rss_bytes", "machine_memory_total_bytes", "machine_memory_available_bytes",
                          "machine_memory_used_percent", "machine_cpu_count", "process_cpu_percent"}) {
    EXPECT_EQ(before->count(key), 1u) << key;
  }
  EXPECT_GT(before->at("machine_memory_total_bytes"), before->at("process_rss_bytes"));
  EXPECT_GE(before->at("machine_cpu_count"), 1);

  // Touch 256 MiB: the resident size must grow by most of it.
  at::Tensor big = at::ones({64, 1024, 1024}, at::kFloat);
  // Burn at least 0.2 s of CPU time so that utilisation since the last reading is above zero.
  const std::clock_t start = std::clock();
  volatile double sink = 0;
  while (std::clock() - start < CLOCKS_PER_SEC / 5) sink = sink + 1;
  absl::StatusOr<DeviceStats> after = cpu.GetDeviceStats(LogicalDeviceOf(cpu, device));
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->at("process_rss_bytes") - before->at("process_rss_bytes"), 200.0 * 1024 * 1024);
  EXPECT_GT(after->at("process_cpu_percent"), 0.0);
  EXPECT_EQ(big.sum().item<float>(), 64.0f * 1024 * 1024);
}

TEST(CpuAcceleratorTest, DeclaresPrecisionsAndSubstitutesFp16Mixed) {
  CpuAccelerator cpu;
  EXPECT_EQ(cpu.ProcessGroupBackend(), "gloo");
  std::vector<Precision> precisions = cpu.SupportedPrecisions();
  EXPECT_THAT(precisions, ::testing::Contains(Precision::kBf16Mixed));
  EXPECT_THAT(precisions, ::testing::Not(::testing::Contains(Precision::k16Mixed)));
  std::optional<PrecisionSubstitute> substitute = cpu.SubstitutePrecision(Precision::k16Mixed);
  ASSERT_TRUE(substitute.has_value());
  EXPECT_EQ(substitute->precision, Precision::kBf16Mixed);
  EXPECT_THAT(substitute->warning, HasSubstr("AMP with fp16 is not supported on CPU"));
  EXPECT_FALSE(cpu.SubstitutePrecision(Precision::k16True).has_value());
}

}  // namespace
}  // namespace kiln
