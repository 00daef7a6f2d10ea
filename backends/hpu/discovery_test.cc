#include "backends/hpu/discovery.h"

#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/hpu/testing/fake_device_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::hpu {
namespace {

using testing::FakeDeviceTree;
using ::testing::HasSubstr;

struct DiscoveryCase {
  std::string name;
  std::function<void(const FakeDeviceTree&)> build;
  std::vector<std::string> counted_nodes;  // Relative to the root, in order.
  std::vector<std::string> counted_types;  // device_type of each counted node.
  std::vector<std::string> reasons;        // Fragments of the summary: why the others were not counted.
};

TEST(DiscoveryTest, CountsOnlyDevicesThatAreReallyThere) {
  const std::vector<DiscoveryCase> cases = {
      {"absent", [](const FakeDeviceTree&) {}, {}, {}, {"no Habana Gaudi device: no accel<N> node in"}},
      {"two_gaudi2",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(1);
         tree.AddAccelGaudi(0);
       },
       {"dev/accel/accel0", "dev/accel/accel1"},
       {"GAUDI2", "GAUDI2"},
       {}},
      {"older_driver", [](const FakeDeviceTree& tree) { tree.AddHlGaudi(0); }, {"dev/hl0"}, {"GAUDI"}, {}},
      {"numbers_sort_as_numbers",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(10, "GAUDI3");
         tree.AddAccelGaudi(2);
       },
       {"dev/accel/accel2", "dev/accel/accel10"},
       {"GAUDI2", "GAUDI3"},
       {}},
      {"node_without_sysfs",
       [](const FakeDeviceTree& tree) { tree.WriteFile("dev/accel/accel0", ""); },
       {},
       {},
       {"no usable Habana Gaudi device among 1 device node(s)", "no sysfs entry", "sys/class/accel/accel0/device"}},
      {"sysfs_without_node",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(0);
         tree.Remove("dev/accel/accel0");
       },
       {},
       {},
       {"no Habana Gaudi device: no accel<N> node"}},
      {"another_vendors_accel_device",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(0);
         tree.WriteFile(FakeDeviceTree::PciDir(0) + "/vendor", "0x8086\n");  // Intel's NPU uses /dev/accel too.
       },
       {},
       {},
       {"PCI vendor 0x8086", "is not Habana Labs (0x1da3)"}},
      {"unreadable_vendor",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(0);
         // A folder where the file should be: reading it fails for every user, root included.
         tree.Remove(FakeDeviceTree::PciDir(0) + "/vendor");
         tree.MakeDirectory(FakeDeviceTree::PciDir(0) + "/vendor");
       },
       {},
       {},
       {"cannot read", "/vendor: Is a directory"}},
      {"missing_device_type",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(0);
         tree.Remove(FakeDeviceTree::PciDir(0) + "/device_type");
       },
       {},
       {},
       {"cannot read", "/device_type: No such file or directory"}},
      {"inference_card",
       [](const FakeDeviceTree& tree) { tree.AddAccelGaudi(0, "GOYA"); },
       {},
       {},
       {"device type 'GOYA' is not a Gaudi training accelerator"}},
      {"needs_reset",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(0);
         tree.WriteFile(FakeDeviceTree::PciDir(0) + "/status", "needs reset\n");
       },
       {},
       {},
       {"status is 'needs reset', not 'operational'"}},
      {"dangling_node",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(0);
         tree.Symlink("/nonexistent/accel0", "dev/accel/accel0");
       },
       {},
       {},
       {"cannot open", "dev/accel/accel0 for reading and writing: No such file or directory"}},
      {"partly_broken",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(0);
         tree.AddAccelGaudi(1);
         tree.WriteFile(FakeDeviceTree::PciDir(1) + "/vendor", "0x10de\n");
         tree.WriteFile("dev/accel/accel2", "");
       },
       {"dev/accel/accel0"},
       {"GAUDI2"},
       {"1 Habana Gaudi device(s)", "not counted", "accel1: PCI vendor 0x10de", "accel2: no sysfs entry"}},
      {"one_device_seen_through_both_kinds_of_node",
       [](const FakeDeviceTree& tree) {
         tree.AddAccelGaudi(0);
         tree.WriteFile("sys/class/habanalabs/hl0/device_type", "GAUDI2\n");
         tree.Symlink(tree.Path(FakeDeviceTree::PciDir(0)), "sys/class/habanalabs/hl0/device");
         tree.WriteFile("dev/hl0", "");
       },
       {"dev/accel/accel0"},
       {"GAUDI2"},
       {}},
      {"control_nodes_and_lookalikes_are_not_devices",
       [](const FakeDeviceTree& tree) {
         tree.WriteFile("dev/accel/accel_controlD0", "");
         tree.WriteFile("dev/hl_controlD0", "");
         tree.WriteFile("dev/hlx", "");
         tree.WriteFile("dev/accel/accel", "");
       },
       {},
       {},
       {"no Habana Gaudi device: no accel<N> node"}},
  };
  for (const DiscoveryCase& c : cases) {
    SCOPED_TRACE(c.name);
    FakeDeviceTree tree(c.name);
    c.build(tree);
    const Discovery discovery = DiscoverDevices(tree.root());
    std::vector<std::string> nodes;
    std::vector<std::string> types;
    for (const HabanaDevice& device : discovery.counted()) {
      nodes.push_back(device.node);
      types.push_back(device.device_type);
      EXPECT_TRUE(device.reason.empty()) << device.reason;
    }
    std::vector<std::string> expected_nodes;
    for (const std::string& node : c.counted_nodes) expected_nodes.push_back(tree.Path(node));
    EXPECT_EQ(nodes, expected_nodes);
    EXPECT_EQ(types, c.counted_types);
    EXPECT_EQ(discovery.count(), static_cast<int>(c.counted_nodes.size()));
    const std::string summary = discovery.Summary();
    for (const std::string& reason : c.reasons) EXPECT_THAT(summary, HasSubstr(reason));
    for (const HabanaDevice& device : discovery.devices) {
      if (!device.counted) {
        EXPECT_FALSE(device.reason.empty()) << device.node;
      }
    }
  }
}

TEST(DiscoveryTest, PermissionDeniedIsRecordedNotGuessed) {
  FakeDeviceTree tree("permission_denied");
  tree.AddAccelGaudi(0);
  tree.AddAccelGaudi(1);
  ASSERT_EQ(chmod(tree.Path("dev/accel/accel0").c_str(), 0), 0);
  ASSERT_EQ(chmod(tree.Path(FakeDeviceTree::PciDir(1) + "/vendor").c_str(), 0), 0);
  if (access(tree.Path("dev/accel/accel0").c_str(), R_OK) == 0) {
    // Root (as in this project's CI) passes every permission check, so mode 000 blocks nothing. The failing-read
    // and failing-access branches are covered for every user by `unreadable_vendor` and `dangling_node` above.
    GTEST_SKIP() << "running with permission to read mode-000 files (uid " << geteuid()
                 << "), so a permission-denied tree cannot be built here";
  }
  const Discovery discovery = DiscoverDevices(tree.root());
  EXPECT_EQ(discovery.count(), 0);
  const std::string summary = discovery.Summary();
  EXPECT_THAT(summary, HasSubstr("accel0 for reading and writing: Permission denied; give this user access"));
  EXPECT_THAT(summary, HasSubstr("/vendor: Permission denied"));
}

TEST(DiscoveryTest, StatisticsAreTheDriversValuesInKilnsUnits) {
  FakeDeviceTree tree("statistics");
  tree.AddAccelGaudi(0);
  const std::string pci = FakeDeviceTree::PciDir(0);
  // What the driver writes (integers, in its units).
  const int64_t clock_mhz = 1650, max_clock_mhz = 1800, max_power_milliwatts = 600000;
  const int64_t hard_resets = 2, soft_resets = 5, millidegrees = 47500, microwatts = 312250000;
  const auto write = [&](const std::string& file, int64_t value) { tree.WriteFile(file, absl::StrCat(value, "\n")); };
  write(pci + "/clk_cur_freq_mhz", clock_mhz);
  write(pci + "/clk_max_freq_mhz", max_clock_mhz);
  write(pci + "/max_power", max_power_milliwatts);
  write(pci + "/hard_reset_cnt", hard_resets);
  write(pci + "/soft_reset_cnt", soft_resets);
  write(pci + "/hwmon/hwmon3/temp1_input", millidegrees);
  write(pci + "/hwmon/hwmon3/power1_input", microwatts);

  const Discovery discovery = DiscoverDevices(tree.root());
  ASSERT_EQ(discovery.count(), 1) << discovery.Summary();
  const DeviceStats expected = {
      {"device_operational", 1},
      {"clock_current_mhz", static_cast<double>(clock_mhz)},
      {"clock_max_mhz", static_cast<double>(max_clock_mhz)},
      {"power_limit_watts", max_power_milliwatts / 1000.0},
      {"hard_reset_count", static_cast<double>(hard_resets)},
      {"soft_reset_count", static_cast<double>(soft_resets)},
      {"temperature_celsius", millidegrees / 1000.0},
      {"power_watts", microwatts / 1e6},
  };
  EXPECT_EQ(ReadDeviceStats(discovery.counted()[0]), expected);

  // What the driver does not expose, or exposes unreadably, is left out rather than invented.
  tree.Remove(pci + "/hwmon");
  tree.WriteFile(pci + "/max_power", "n/a\n");
  tree.WriteFile(pci + "/status", "in reset\n");
  const DeviceStats partial = ReadDeviceStats(discovery.counted()[0]);
  EXPECT_EQ(partial.count("temperature_celsius"), 0u);
  EXPECT_EQ(partial.count("power_watts"), 0u);
  EXPECT_EQ(partial.count("power_limit_watts"), 0u);
  EXPECT_EQ(partial.at("device_operational"), 0);
  EXPECT_EQ(partial.at("clock_current_mhz"), static_cast<double>(clock_mhz));
}

TEST(DiscoveryTest, ReadsTheRealHostWithoutFailing) {
  // Whatever this machine has, discovery of "/" must answer, and a count of zero must come with a reason.
  const Discovery discovery = DiscoverDevices("/");
  if (discovery.count() == 0) {
    EXPECT_THAT(discovery.Summary(), HasSubstr("no"));
  }
  for (const HabanaDevice& device : discovery.devices) {
    EXPECT_NE(device.counted, !device.reason.empty()) << device.node;
  }
}

}  // namespace
}  // namespace kiln::hpu
