#include "backends/cuda/nvml.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/testing/fake_nvml_values.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::cuda {
namespace {

using ::testing::HasSubstr;

// A library built by this test's BUILD rule, by absolute path (dlopen would search the library path otherwise).
std::string TestLibrary(const std::string& name) {
  char cwd[4096];
  EXPECT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  return std::string(cwd) + "/backends/cuda/" + name;
}

TEST(NvmlTest, AbsentLibraryIsNotFoundAndNamed) {
  const std::string missing = TestLibrary("libno_such_nvml.so.1");
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load(missing);
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(nvml.status().message(), HasSubstr(missing));
  EXPECT_THAT(nvml.status().message(), HasSubstr("NVIDIA's driver"));
}

TEST(NvmlTest, LibraryWithoutTheNeededFunctionsIsNamedWithTheFirstMissingOne) {
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load(TestLibrary("libincomplete_nvml.so"));
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(nvml.status().message(), HasSubstr("has no function nvmlShutdown"));
}

TEST(NvmlTest, FailingInitialisationCarriesNvmlsErrorString) {
  setenv(fake_nvml::kFailInitVariable, "1", 1);
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load(TestLibrary("libfake_nvml.so"));
  unsetenv(fake_nvml::kFailInitVariable);
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(nvml.status().message(), HasSubstr(fake_nvml::kDriverNotLoadedText));
  EXPECT_THAT(nvml.status().message(), HasSubstr("nvmlInit_v2"));
}

TEST(NvmlTest, ReadsEveryStatisticOfTheFakeDevices) {
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load(TestLibrary("libfake_nvml.so"));
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  ASSERT_EQ(*(*nvml)->DeviceCount(), fake_nvml::kDeviceCount);

  absl::StatusOr<std::vector<std::string>> uuids = (*nvml)->DeviceUuids();
  ASSERT_TRUE(uuids.ok()) << uuids.status();
  ASSERT_EQ(uuids->size(), static_cast<size_t>(fake_nvml::kDeviceCount));

  for (int i = 0; i < fake_nvml::kDeviceCount; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ((*uuids)[i], fake_nvml::Uuid(i));
    absl::StatusOr<DeviceStats> stats = (*nvml)->ReadDevice(i);
    ASSERT_TRUE(stats.ok()) << stats.status();
    const DeviceStats expected_without_power = {
        {"utilization_gpu_percent", fake_nvml::UtilizationGpuPercent(i)},
        {"utilization_memory_percent", fake_nvml::UtilizationMemoryPercent(i)},
        {"memory_total_bytes", static_cast<double>(fake_nvml::MemoryTotalBytes(i))},
        {"memory_used_bytes", static_cast<double>(fake_nvml::MemoryUsedBytes(i))},
        {"memory_free_bytes", static_cast<double>(fake_nvml::MemoryFreeBytes(i))},
        {"temperature_celsius", fake_nvml::TemperatureCelsius(i)},
        {"clock_graphics_mhz", fake_nvml::ClockGraphicsMhz(i)},
        {"clock_sm_mhz", fake_nvml::ClockSmMhz(i)},
        {"clock_memory_mhz", fake_nvml::ClockMemoryMhz(i)},
    };
    DeviceStats expected = expected_without_power;
    // NVML reports milliwatts; Kiln reports watts. A reading the device refuses is left out.
    if (i != fake_nvml::kDeviceWithoutPower) expected["power_watts"] = fake_nvml::PowerMilliwatts(i) / 1000.0;
    EXPECT_EQ(*stats, expected);
  }

  absl::StatusOr<DeviceStats> beyond = (*nvml)->ReadDevice(fake_nvml::kDeviceCount);
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(beyond.status().message(),
              HasSubstr(absl::StrCat("NVML reports ", fake_nvml::kDeviceCount, " device(s)")));
}

}  // namespace
}  // namespace kiln::cuda
