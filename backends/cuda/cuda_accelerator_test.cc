#include "backends/cuda/cuda_accelerator.h"

#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "ATen/detail/CUDAHooksInterface.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/caching_allocator.h"
#include "backends/cuda/testing/fake_nvml_values.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/registry.h"
#include "torch/cuda.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
namespace fake_nvml = cuda::fake_nvml;

// Sets an environment variable for one scope and restores what was there before.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string TestLibrary(const std::string& name) {
  char cwd[4096];
  EXPECT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  return std::string(cwd) + "/backends/cuda/" + name;
}

int LibTorchCount() { return static_cast<int>(torch::cuda::device_count()); }

TEST(CudaAcceleratorTest, RegistersAsCudaWithTheAliasGpu) {
  absl::StatusOr<AcceleratorSpec> spec = AcceleratorRegistry::Default().Find("GPU");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "cuda");
  EXPECT_EQ(spec->priority, 20);
  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = AcceleratorRegistry::Default().Get("cuda");
  ASSERT_TRUE(accelerator.ok());
  EXPECT_EQ((*accelerator)->name(), "cuda");
  EXPECT_EQ((*accelerator)->ProcessGroupBackend(), "nccl");
}

TEST(CudaAcceleratorTest, AvailabilityFollowsLibTorchAndSaysWhyNot) {
  CudaAccelerator cuda;
  EXPECT_EQ(cuda.AutoDeviceCount(), LibTorchCount());
  const absl::Status available = cuda.CheckAvailable();
  if (!at::detail::getCUDAHooks().hasCUDART()) {
    EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(available.message(), HasSubstr("this build of Kiln links LibTorch's CPU libraries alone"));
    EXPECT_THAT(available.message(), HasSubstr("--config=cuda"));
  } else if (LibTorchCount() == 0) {
    EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(available.message(), HasSubstr("no CUDA device visible (CUDA_VISIBLE_DEVICES"));
  } else {
    EXPECT_TRUE(available.ok()) << available;
  }
}

struct ParseCase {
  Devices devices;
  std::vector<int> indices;  // Expected when `error` is empty.
  std::string error;         // A fragment of the expected error.
};

TEST(CudaAcceleratorTest, ParsesDevicesWithLightningsGpuRules) {
  const std::string hint = "(CUDA_VISIBLE_DEVICES=4,6)";
  const std::vector<ParseCase> cases = {
      {"auto", {0, 1}, ""},
      {-1, {0, 1}, ""},
      {"-1", {0, 1}, ""},
      {1, {0}, ""},
      {"2", {0, 1}, ""},
      {"1,", {1}, ""},
      {"1,0", {1, 0}, ""},
      {"[0, 1]", {0, 1}, ""},
      {std::vector<int>{1}, {1}, ""},
      {3, {}, "3 CUDA devices requested, but only 2 are visible " + hint},
      {"0,3", {}, "CUDA device 3 requested, but only 2 are visible " + hint},
      {std::vector<int>{2}, {}, "CUDA device 2 requested, but only 2 are visible " + hint},
      {"0,0", {}, "device index 0 appears twice"},
      {-2, {}, "a negative count other than -1"},
      {"0,-1", {}, "device index -1 is negative"},
      {"gpus", {}, "invalid devices value 'gpus'"},
  };
  for (const ParseCase& c : cases) {
    SCOPED_TRACE(c.devices.ToString());
    absl::StatusOr<std::vector<int>> indices = ParseCudaDevices(c.devices, 2, "4,6");
    if (c.error.empty()) {
      ASSERT_TRUE(indices.ok()) << indices.status();
      EXPECT_EQ(*indices, c.indices);
    } else {
      ASSERT_FALSE(indices.ok());
      EXPECT_THAT(indices.status().message(), HasSubstr(c.error));
    }
  }
  absl::StatusOr<std::vector<int>> none = ParseCudaDevices("auto", 0, std::nullopt);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("none is visible (CUDA_VISIBLE_DEVICES is unset)"));
}

TEST(CudaAcceleratorTest, ParseDevicesUsesLibTorchsCountAndTheEnvironment) {
  ScopedEnv env("CUDA_VISIBLE_DEVICES", "0");
  CudaAccelerator cuda;
  const int count = LibTorchCount();
  absl::StatusOr<std::vector<int>> beyond = cuda.ParseDevices(std::vector<int>{count});
  ASSERT_FALSE(beyond.ok());
  EXPECT_THAT(beyond.status().message(),
              HasSubstr(absl::StrCat("CUDA device ", count, " requested, but only ", count)));
  EXPECT_THAT(beyond.status().message(), HasSubstr("(CUDA_VISIBLE_DEVICES=0)"));
}

TEST(CudaAcceleratorTest, ParallelDevicesAreTheParsedCudaIndices) {
  CudaAccelerator cuda;
  std::vector<c10::Device> devices = cuda.ParallelDevices({0, 2});
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0], c10::Device(c10::DeviceType::CUDA, 0));
  EXPECT_EQ(devices[1], c10::Device(c10::DeviceType::CUDA, 2));
}

TEST(CudaAcceleratorTest, SetupRefusesOtherDevicesAndUnavailableCuda) {
  CudaAccelerator cuda;
  const c10::Device cpu(c10::DeviceType::CPU);
  EXPECT_EQ(cuda.SetupDevice(LogicalDeviceOf(cuda, cpu)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cuda.SetupDevice(LogicalDeviceOf(cuda, cpu)).message(), HasSubstr("got device 'cpu'"));
  EXPECT_EQ(cuda.TeardownDevice(LogicalDeviceOf(cuda, cpu)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda.GetDeviceStats(LogicalDeviceOf(cuda, cpu)).status().code(), absl::StatusCode::kInvalidArgument);

  const absl::Status available = cuda.CheckAvailable();
  if (available.ok()) GTEST_SKIP() << "CUDA is available here; set-up on a real GPU is not what this test checks";
  const c10::Device gpu(c10::DeviceType::CUDA, 0);
  const absl::Status setup = cuda.SetupDevice(LogicalDeviceOf(cuda, gpu));
  EXPECT_EQ(setup.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(setup.message(), available.message());
  // Tear-down after a failed set-up has nothing to release, and must not fail.
  EXPECT_TRUE(cuda.TeardownDevice(LogicalDeviceOf(cuda, gpu)).ok());
}

TEST(CudaAcceleratorTest, StatisticsWithoutNvmlSaySoOrRefuseDevicesThatAreNotThere) {
  const std::string missing = TestLibrary("libno_such_nvml.so.1");
  CudaAccelerator cuda(CudaOptions{.nvml_library = missing});
  const absl::Status nvml = cuda.NvmlStatus();
  EXPECT_EQ(nvml.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(nvml.message(), HasSubstr(missing));

  absl::StatusOr<DeviceStats> stats = cuda.GetDeviceStats(LogicalDeviceOf(cuda, c10::Device(c10::DeviceType::CUDA, 0)));
  if (LibTorchCount() == 0) {
    // Neither LibTorch nor NVML can see a device 0: it is not this accelerator's.
    EXPECT_EQ(stats.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(stats.status().message(), HasSubstr("CUDA device 0 requested, but no CUDA device is visible"));
  } else {
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->at("nvml_available"), 0);
    EXPECT_EQ(stats->count("memory_used_bytes"), 0u);
  }
}

// Expected NVML readings of fake device `i`, as CudaAccelerator reports them.
DeviceStats FakeReadings(int i) {
  DeviceStats stats = {
      {"nvml_available", 1},
      {"utilization_gpu_percent", fake_nvml::UtilizationGpuPercent(i)},
      {"utilization_memory_percent", fake_nvml::UtilizationMemoryPercent(i)},
      {"memory_total_bytes", static_cast<double>(fake_nvml::MemoryTotalBytes(i))},
      {"memory_used_bytes", static_cast<double>(fake_nvml::MemoryUsedBytes(i))},
      {"memory_free_bytes", static_cast<double>(fake_nvml::MemoryFreeBytes(i))},
      {"temperature_celsius", fake_nvml::TemperatureCelsius(i)},
      {"clock_graphics_mhz", fake_nvml::ClockGraphicsMhz(i)},
      {"clock_sm_mhz", fake_nvml::ClockSmMhz(i)},
      {"clock_memory_mhz", fake_nvml::ClockMemoryMhz(i)},
      // The caching allocator is only read for devices LibTorch sees (none, where this test runs).
      {"allocator_available", 0},
  };
  if (i != fake_nvml::kDeviceWithoutPower) stats["power_watts"] = fake_nvml::PowerMilliwatts(i) / 1000.0;
  return stats;
}

struct StatsCase {
  std::optional<std::string> cuda_visible_devices;
  std::vector<int> nvml_index_of_cuda_index;  // Which fake device each CUDA index must report.
};

TEST(CudaAcceleratorTest, StatisticsComeFromTheNvmlDeviceBehindEachCudaIndex) {
  if (LibTorchCount() > 0) {
    GTEST_SKIP() << "LibTorch sees " << LibTorchCount() << " real CUDA device(s) here; this test maps a fake NVML's "
                 << "devices and needs a LibTorch that sees none (nvml_test covers the readings everywhere)";
  }
  const std::vector<StatsCase> cases = {
      {std::nullopt, {0, 1, 2}},
      {"2,0", {2, 0}},
      {"1", {1}},
      {fake_nvml::Uuid(2) + "," + fake_nvml::Uuid(1), {2, 1}},
      {"", {}},
  };
  for (const StatsCase& c : cases) {
    SCOPED_TRACE(c.cuda_visible_devices.value_or("<unset>"));
    ScopedEnv env("CUDA_VISIBLE_DEVICES", c.cuda_visible_devices);
    CudaAccelerator cuda(CudaOptions{.nvml_library = TestLibrary("libfake_nvml.so")});
    ASSERT_TRUE(cuda.NvmlStatus().ok()) << cuda.NvmlStatus();
    const int visible = static_cast<int>(c.nvml_index_of_cuda_index.size());
    for (int cuda_index = 0; cuda_index < visible; ++cuda_index) {
      SCOPED_TRACE(cuda_index);
      absl::StatusOr<DeviceStats> stats =
          cuda.GetDeviceStats(LogicalDeviceOf(cuda, c10::Device(c10::DeviceType::CUDA, cuda_index)));
      ASSERT_TRUE(stats.ok()) << stats.status();
      EXPECT_EQ(*stats, FakeReadings(c.nvml_index_of_cuda_index[cuda_index]));
    }
    absl::StatusOr<DeviceStats> beyond =
        cuda.GetDeviceStats(LogicalDeviceOf(cuda, c10::Device(c10::DeviceType::CUDA, visible)));
    ASSERT_FALSE(beyond.ok());
    EXPECT_THAT(beyond.status().message(), HasSubstr(absl::StrCat("CUDA device ", visible, " requested")));
  }
}

TEST(CudaAcceleratorTest, BareCudaDeviceMeansTheCurrentOne) {
  if (LibTorchCount() > 0) {
    GTEST_SKIP() << "LibTorch sees real CUDA devices here; the fake NVML mapping needs a LibTorch that sees none";
  }
  ScopedEnv env("CUDA_VISIBLE_DEVICES", "2");
  CudaAccelerator cuda(CudaOptions{.nvml_library = TestLibrary("libfake_nvml.so")});
  absl::StatusOr<DeviceStats> stats = cuda.GetDeviceStats(LogicalDeviceOf(cuda, c10::Device(c10::DeviceType::CUDA)));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(*stats, FakeReadings(2));
}

TEST(CudaAcceleratorTest, DeclaresPrecisions) {
  CudaAccelerator cuda;
  const std::vector<Precision> precisions = cuda.SupportedPrecisions();
  for (Precision precision : AllPrecisions()) {
    EXPECT_THAT(precisions, ::testing::Contains(precision)) << PrecisionName(precision);
  }
  EXPECT_FALSE(cuda.SubstitutePrecision(Precision::k16Mixed).has_value());
}

}  // namespace
}  // namespace kiln
