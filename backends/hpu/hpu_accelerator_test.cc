#include "backends/hpu/hpu_accelerator.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/hpu/bridge.h"
#include "backends/hpu/testing/fake_device_tree.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/collectives.h"
#include "hal/registry.h"
#include "torch/csrc/distributed/c10d/HashStore.hpp"

namespace kiln {
namespace {

using hpu::testing::FakeDeviceTree;
using ::testing::HasSubstr;

constexpr char kBridge[] = "libhabana_pytorch_plugin.so";

std::string TestFile(const std::string& name) {
  char cwd[4096];
  EXPECT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  return std::string(cwd) + "/backends/hpu/" + name;
}

// An accelerator reading `tree`, with a bridge path that does not exist.
HpuAccelerator WithoutBridge(const FakeDeviceTree& tree) {
  return HpuAccelerator(HpuOptions{.root = tree.root(), .bridge_library = TestFile(kBridge)});
}

TEST(HpuAcceleratorTest, RegistersAsHpuAndIsHonestAboutThisMachine) {
  absl::StatusOr<AcceleratorSpec> spec = AcceleratorRegistry::Default().Find("HPU");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "hpu");
  EXPECT_EQ(spec->priority, 10);
  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = AcceleratorRegistry::Default().Get("hpu");
  ASSERT_TRUE(accelerator.ok());
  EXPECT_EQ((*accelerator)->ProcessGroupBackend(), "hccl");
  EXPECT_TRUE(HpuOptions{}.bridge_library.empty()) << "the default picks the bridge by PT_HPU_LAZY_MODE";
  EXPECT_EQ(HpuOptions{}.root, "/");

  const hpu::Discovery here = hpu::DiscoverDevices("/");
  EXPECT_EQ((*accelerator)->AutoDeviceCount(), here.count());
  if (here.count() == 0) {
    const absl::Status available = (*accelerator)->CheckAvailable();
    EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(available.message(), here.Summary());
  }
}

struct ParseCase {
  Devices devices;
  std::vector<int> indices;  // Expected when `error` is empty.
  std::string error;
};

TEST(HpuAcceleratorTest, ParsesDevicesWithLightningsHpuRules) {
  const std::vector<ParseCase> cases = {
      {"auto", {0, 1}, ""},
      {1, {0}, ""},
      {2, {0, 1}, ""},
      {"2", {0, 1}, ""},
      {3, {}, "3 HPU devices requested, but only 2 are present"},
      {-1, {}, "should be an int > 0 (how many HPUs to use), got -1"},
      {"0,1", {}, "got '0,1'; the Habana runtime assigns a device to each process"},
      {std::vector<int>{1}, {}, "got [1]"},
      {"many", {}, "invalid devices value 'many'"},
  };
  for (const ParseCase& c : cases) {
    SCOPED_TRACE(c.devices.ToString());
    absl::StatusOr<std::vector<int>> indices = ParseHpuDevices(c.devices, 2);
    if (c.error.empty()) {
      ASSERT_TRUE(indices.ok()) << indices.status();
      EXPECT_EQ(*indices, c.indices);
    } else {
      ASSERT_FALSE(indices.ok());
      EXPECT_THAT(indices.status().message(), HasSubstr(c.error));
    }
  }
  EXPECT_EQ(ParseHpuDevices("auto", 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ParseHpuDevices(2, 1).status().message(), HasSubstr("but only 1 is present"));
}

TEST(HpuAcceleratorTest, WithoutDevicesItIsUnavailableAndSaysWhatItLookedFor) {
  FakeDeviceTree tree("accelerator_no_devices");
  HpuAccelerator hpu = WithoutBridge(tree);
  EXPECT_EQ(hpu.AutoDeviceCount(), 0);
  const absl::Status available = hpu.CheckAvailable();
  EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(available.message(), HasSubstr(tree.Path("dev/accel")));
  const absl::Status setup = hpu.SetupDevice(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::HPU)));
  EXPECT_EQ(setup.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(setup.message(), available.message());
}

TEST(HpuAcceleratorTest, DevicesWithoutTheBridgeStopWithAnErrorNamingIt) {
  FakeDeviceTree tree("accelerator_no_bridge");
  tree.AddAccelGaudi(0);
  tree.AddAccelGaudi(1);
  HpuAccelerator hpu = WithoutBridge(tree);
  EXPECT_EQ(hpu.AutoDeviceCount(), 2);
  EXPECT_EQ(*hpu.ParseDevices("auto"), (std::vector<int>{0, 1}));
  for (const absl::Status& status :
       {hpu.CheckAvailable(), hpu.SetupDevice(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::HPU)))}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("Habana's PyTorch bridge ", TestFile(kBridge), " cannot be loaded")));
  }
  EXPECT_EQ(hpu.SetupDevice(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::CPU))).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(hpu.TeardownDevice(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::HPU))).ok());
  EXPECT_EQ(hpu.TeardownDevice(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::CPU))).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HpuAcceleratorTest, ABridgeThatRegistersNoHpuDeviceIsNamedToo) {
  if (c10::impl::hasDeviceGuardImpl(c10::DeviceType::HPU)) {
    GTEST_SKIP() << "this process's LibTorch already has an 'hpu' device (a real bridge is loaded)";
  }
  FakeDeviceTree tree("accelerator_fake_bridge");
  tree.AddAccelGaudi(0);
  const std::string bridge = TestFile("libfake_habana_bridge.so");
  HpuAccelerator hpu(HpuOptions{.root = tree.root(), .bridge_library = bridge});
  EXPECT_TRUE(hpu.CheckAvailable().ok()) << hpu.CheckAvailable();
  const absl::Status setup = hpu.SetupDevice(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::HPU)));
  EXPECT_EQ(setup.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(setup.message(), HasSubstr(absl::StrCat(bridge, " was loaded, but LibTorch has no 'hpu' device")));
}

// The default bridge is the execution mode's (bridge.h), the build for Habana's PyTorch first, then the upstream one.
TEST(HpuAcceleratorTest, TheBridgeOfTheExecutionModeIsLoaded) {
  if (c10::impl::hasDeviceGuardImpl(c10::DeviceType::HPU)) {
    GTEST_SKIP() << "this process's LibTorch already has an 'hpu' device (a real bridge is loaded)";
  }
  FakeDeviceTree tree("accelerator_mode_bridge");
  tree.AddAccelGaudi(0);
  // Only the eager mode's upstream build is there (a copy of the stand-in bridge under that name).
  const std::string folder = tree.root() + "/habana_frameworks/torch/lib";
  std::filesystem::create_directories(folder);
  std::filesystem::copy_file(TestFile("libfake_habana_bridge.so"), folder + "/libhabana_pytorch2_plugin.upstream.so");

  setenv(hpu::kLazyModeVariable, "1", 1);
  const absl::Status lazy = HpuAccelerator(HpuOptions{.root = tree.root(), .bridge_folder = folder}).CheckAvailable();
  EXPECT_EQ(lazy.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lazy.message(), HasSubstr(absl::StrCat("Habana's PyTorch bridge ", folder,
                                                     "/libhabana_pytorch_plugin.so or ", folder,
                                                     "/libhabana_pytorch_plugin.upstream.so cannot be loaded")));
  setenv(hpu::kLazyModeVariable, "lazy", 1);
  EXPECT_THAT(HpuAccelerator(HpuOptions{.root = tree.root(), .bridge_folder = folder}).CheckAvailable().message(),
              HasSubstr("PT_HPU_LAZY_MODE='lazy' is not a mode; set it to 1 (lazy) or 0 (eager)"));

  setenv(hpu::kLazyModeVariable, "0", 1);
  HpuAccelerator eager(HpuOptions{.root = tree.root(), .bridge_folder = folder});
  EXPECT_TRUE(eager.CheckAvailable().ok()) << eager.CheckAvailable();
  EXPECT_THAT(eager.SetupDevice(LogicalDeviceOf(eager, c10::Device(c10::DeviceType::HPU))).message(),
              HasSubstr(folder + "/libhabana_pytorch2_plugin.upstream.so was loaded, but LibTorch has no 'hpu'"));
  unsetenv(hpu::kLazyModeVariable);
}

TEST(HpuAcceleratorTest, EveryProcessRunsOnHpuAsInLightning) {
  FakeDeviceTree tree("accelerator_parallel");
  HpuAccelerator hpu = WithoutBridge(tree);
  const std::vector<c10::Device> devices = hpu.ParallelDevices({0, 1, 2});
  ASSERT_EQ(devices.size(), 3u);
  for (const c10::Device& device : devices) EXPECT_EQ(device, c10::Device(c10::DeviceType::HPU));
  EXPECT_EQ(hpu.SupportedPrecisions(), (std::vector<Precision>{Precision::k32True, Precision::kBf16Mixed}));
}

TEST(HpuAcceleratorTest, StatisticsAreReadPerDeviceAndOnlyForDevicesPresent) {
  FakeDeviceTree tree("accelerator_stats");
  tree.AddAccelGaudi(0);
  tree.AddAccelGaudi(1);
  tree.AddAccelGaudi(2, "GOYA");  // Not counted: HPU index 2 does not exist.
  const int64_t clocks_mhz[] = {1500, 1600};
  for (int i = 0; i < 2; ++i) {
    tree.WriteFile(FakeDeviceTree::PciDir(i) + "/clk_cur_freq_mhz", absl::StrCat(clocks_mhz[i], "\n"));
  }
  HpuAccelerator hpu = WithoutBridge(tree);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<DeviceStats> stats = hpu.GetDeviceStats(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::HPU, i)));
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->at("clock_current_mhz"), static_cast<double>(clocks_mhz[i]));
    EXPECT_EQ(stats->at("device_operational"), 1);
  }
  absl::StatusOr<DeviceStats> bare = hpu.GetDeviceStats(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::HPU)));
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->at("clock_current_mhz"), static_cast<double>(clocks_mhz[0]));
  absl::StatusOr<DeviceStats> beyond = hpu.GetDeviceStats(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::HPU, 2)));
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(beyond.status().message(), HasSubstr("HPU device 2 requested, but 2 HPU device(s) are present"));
  EXPECT_EQ(hpu.GetDeviceStats(LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::CPU))).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HpuAcceleratorTest, HcclIsMadeByTheCreatorALibraryExports) {
  FakeDeviceTree tree("hccl");
  tree.AddAccelGaudi(0);
  HpuAccelerator hpu = WithoutBridge(tree);
  const LogicalDevice device = LogicalDeviceOf(hpu, c10::Device(c10::DeviceType::HPU, 0));
  CollectiveOptions options;
  options.rank = 1;
  options.world_size = 2;
  options.store = c10::make_intrusive<c10d::HashStore>();

  unsetenv("KILN_HCCL_LIBRARY");
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> none = hpu.MakeCollectiveBackend(device, options);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("no bridge loaded and no KILN_HCCL_LIBRARY"));
  EXPECT_THAT(none.status().message(), HasSubstr("habana_frameworks.torch.distributed.hccl"));

  // A library without the creator is named among those searched.
  const std::string bridge = TestFile("libfake_habana_bridge.so");
  setenv("KILN_HCCL_LIBRARY", bridge.c_str(), 1);
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> without = hpu.MakeCollectiveBackend(device, options);
  EXPECT_EQ(without.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(without.status().message(), HasSubstr("searched: " + bridge));

  // The one that exports it: Kiln calls it with its rank and world size.
  setenv("KILN_HCCL_LIBRARY", TestFile("libfake_hccl.so").c_str(), 1);
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> made = hpu.MakeCollectiveBackend(device, options);
  unsetenv("KILN_HCCL_LIBRARY");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->getBackendName(), "hccl");
  EXPECT_EQ((*made)->getRank(), 1);
  EXPECT_EQ((*made)->getSize(), 2);
}

}  // namespace
}  // namespace kiln
