// What reading an accelerator plugin's tables may take at its peak (docs/reliability.md, "Memory", plugins' tables):
// a real plugin library (hal/plugin/testing/test_plugin.c, "large_tables") whose tables are as large as a plugin may
// make them with a few pointers. Every string Kiln copies is at most kMaxPluginStringBytes, Plugin_Info gives at most
// kMaxPluginAliases aliases and Device_Stats at most kMaxPluginDeviceStats statistics, so that reading them takes
// at most 4096 statistics × (4 KiB + 256 bytes) + 8 MiB, whatever the plugin points to.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/plugin/plugin_accelerator.h"
#include "hal/plugin/plugin_loader.h"
#include "hal/registry.h"
#include "trainer/io/peak_memory.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

constexpr char kPlugin[] = "hal/plugin/libtest_plugin_large_tables.so";
constexpr uint64_t kMiB = uint64_t{1} << 20;

// docs/reliability.md: a plugin's tables, read once.
uint64_t PluginTablesBound() {
  return SanitizerMemoryFactor() * (kMaxPluginDeviceStats * (kMaxPluginStringBytes + 256) + 8 * kMiB);
}

// 4096 aliases that all point to one 64 KiB string: refused by their count before any is copied (seen failing
// before the count and the lengths were bounded: each alias was copied, 769 MiB).
TEST(PluginTablesMemoryTest, AliasesThatShareOneLongStringAreNotCopiedEach) {
  setenv("TEST_PLUGIN_TABLES", "aliases", 1);
  AcceleratorRegistry registry;
  absl::StatusOr<PluginInfo> info;
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { info = LoadAcceleratorPlugin(kPlugin, registry); });
  unsetenv("TEST_PLUGIN_TABLES");
  ASSERT_TRUE(peak.ok()) << peak.status();
  EXPECT_LE(*peak, PluginTablesBound()) << "reading Plugin_Info took " << *peak / kMiB << " MiB at its peak";
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(info.status().message(), HasSubstr("says it has 4096 aliases, more than the 64 Kiln reads"));
}

std::shared_ptr<PluginAccelerator> Loaded(AcceleratorRegistry& registry) {
  absl::StatusOr<PluginInfo> info = LoadAcceleratorPlugin(kPlugin, registry);
  EXPECT_TRUE(info.ok()) << info.status();
  if (!info.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(info->name);
  EXPECT_TRUE(accelerator.ok()) << accelerator.status();
  return accelerator.ok() ? std::dynamic_pointer_cast<PluginAccelerator>(*accelerator) : nullptr;
}

// One Device_Stats call of the plugin, its tables as TEST_PLUGIN_TABLES=`tables` makes them, and its peak memory.
struct StatsRead {
  absl::StatusOr<DeviceStats> stats;
  uint64_t peak = 0;
};
StatsRead ReadStats(const char* tables) {
  AcceleratorRegistry registry;
  std::shared_ptr<PluginAccelerator> plugin = Loaded(registry);
  if (plugin == nullptr) return {absl::InternalError("the plugin did not load")};
  const LogicalDevice device = LogicalDeviceOf(*plugin, c10::Device(c10::DeviceType::PrivateUse1, 0));
  setenv("TEST_PLUGIN_TABLES", tables, 1);
  StatsRead read;
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { read.stats = plugin->GetDeviceStats(device); });
  unsetenv("TEST_PLUGIN_TABLES");
  EXPECT_TRUE(peak.ok()) << peak.status();
  read.peak = peak.value_or(0);
  EXPECT_LE(read.peak, PluginTablesBound()) << "reading Device_Stats took " << read.peak / kMiB << " MiB at its peak";
  return read;
}

// 4096 statistics named by distinct suffixes of one 68 KiB string: refused at the first name past 4 KiB (seen
// failing before names were bounded: 4096 names of over 64 KiB each were copied, 264 MiB).
TEST(PluginTablesMemoryTest, StatisticNamesPointingIntoOneLongStringAreRefused) {
  const StatsRead read = ReadStats("long_names");
  ASSERT_FALSE(read.stats.ok());
  EXPECT_THAT(read.stats.status().message(), HasSubstr("Device_Stats named statistic 0 with more than 4096 bytes"));
}

// The largest table Kiln reads: 4096 statistics with distinct names of up to 4096 bytes (8 MiB of names).
TEST(PluginTablesMemoryTest, TheLargestStatisticsTableStaysWithinItsBound) {
  const StatsRead read = ReadStats("names");
  ASSERT_TRUE(read.stats.ok()) << read.stats.status();
  EXPECT_EQ(read.stats->size(), kMaxPluginDeviceStats);
  std::printf("4096 statistics: peak %llu bytes, bound %llu\n", static_cast<unsigned long long>(read.peak),
              static_cast<unsigned long long>(PluginTablesBound()));
}

}  // namespace
}  // namespace kiln
