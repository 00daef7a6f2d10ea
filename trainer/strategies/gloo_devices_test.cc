#include "trainer/strategies/gloo_devices.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

std::vector<std::string> Names(const absl::StatusOr<std::vector<GlooDevice>>& devices) {
  std::vector<std::string> names;
  if (!devices.ok()) return {devices.status().ToString()};
  for (const GlooDevice& device : *devices) names.push_back((device.is_interface ? "if:" : "") + device.name);
  return names;
}

TEST(GlooDevicesTest, ChoosesAsTheRulesSay) {
  const HostFacts debian{.hostname = "node-b", .hostname_addresses = {"127.0.1.1"}, .route_address = "10.0.0.2"};
  const HostFacts resolvable{.hostname = "node-b", .hostname_addresses = {"10.0.0.2"}, .route_address = "10.0.0.2"};
  using Names_ = std::vector<std::string>;
  // GLOO_SOCKET_IFNAME wins, as a list, whatever else holds.
  EXPECT_EQ(Names(ChooseGlooDevices("10.0.0.1", "eth0, eth1,", debian)), (Names_{"if:eth0", "if:eth1"}));
  // One machine: loopback.
  EXPECT_EQ(Names(ChooseGlooDevices("127.0.0.1", "", debian)), Names_{"127.0.0.1"});
  EXPECT_EQ(Names(ChooseGlooDevices("localhost", "", resolvable)), Names_{"127.0.0.1"});
  // A host name that resolves to loopback (SLURM's node list on a default install) is one machine too.
  HostFacts single = debian;
  single.main_addresses = {"127.0.1.1"};
  EXPECT_EQ(Names(ChooseGlooDevices("node-b", "", single)), Names_{"127.0.0.1"});
  // A host name that resolves elsewhere: PyTorch's default.
  EXPECT_EQ(Names(ChooseGlooDevices("10.0.0.1", "", resolvable)), Names_{"node-b"});
  // A default Debian install: the host name is loopback; the route to MASTER_ADDR gives the address.
  EXPECT_EQ(Names(ChooseGlooDevices("10.0.0.1", "", debian)), Names_{"10.0.0.2"});
  EXPECT_EQ(Names(ChooseGlooDevices("10.0.0.1", "", {.hostname = "x", .route_address = "10.0.0.2"})),
            Names_{"10.0.0.2"});
}

TEST(GlooDevicesTest, NoWayToReachTheOthersSaysWhatToSet) {
  const absl::StatusOr<std::vector<GlooDevice>> devices = ChooseGlooDevices(
      "10.0.0.1", "", {.hostname = "node-b", .hostname_addresses = {"127.0.1.1"}, .route_address = std::nullopt});
  ASSERT_FALSE(devices.ok());
  EXPECT_NE(devices.status().message().find("this host's name 'node-b' resolves to 127.0.1.1, and no interface "
                                            "routes to MASTER_ADDR=10.0.0.1"),
            std::string::npos)
      << devices.status();
  EXPECT_NE(devices.status().message().find("set GLOO_SOCKET_IFNAME"), std::string::npos);
}

TEST(GlooDevicesTest, ProbesThisMachine) {
  // Loopback routes to loopback on any machine, network or none; "localhost" resolves to it.
  const HostFacts facts = HostFacts::Probe("localhost");
  EXPECT_FALSE(facts.hostname.empty());
  ASSERT_TRUE(facts.route_address.has_value());
  EXPECT_TRUE(IsLoopbackAddress(*facts.route_address)) << *facts.route_address;
  ASSERT_FALSE(facts.main_addresses.empty());
  for (const std::string& address : facts.main_addresses) EXPECT_TRUE(IsLoopbackAddress(address)) << address;
}

}  // namespace
}  // namespace kiln
