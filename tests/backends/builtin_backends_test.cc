// The built-in backends as the connector sees them through the default registry: the order "auto" tries them in,
// what it picks on this machine, and Lightning's message for an accelerator that is registered but unavailable.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "connector/connector.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/registry.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Accelerator> Get(absl::string_view name) {
  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = AcceleratorRegistry::Default().Get(name);
  EXPECT_TRUE(accelerator.ok()) << accelerator.status();
  return accelerator.ok() ? *accelerator : nullptr;
}

// Registered names whose accelerator is available here, sorted (as the connector lists them).
std::string AvailableNames() {
  std::vector<std::string> names;
  for (const AcceleratorSpec& spec : AcceleratorRegistry::Default().List()) {
    if (Get(spec.name)->IsAvailable()) names.push_back(spec.name);
  }
  std::sort(names.begin(), names.end());
  return absl::StrJoin(names, ", ");
}

TEST(BuiltinBackendsTest, AutoTriesCudaThenHpuThenCpu) {
  std::vector<std::string> order;
  for (const AcceleratorSpec& spec : AcceleratorRegistry::Default().List()) order.push_back(spec.name);
  EXPECT_EQ(order, (std::vector<std::string>{"cuda", "hpu", "cpu"}));
  EXPECT_EQ(AcceleratorRegistry::Default().Find("gpu")->name, "cuda");
}

TEST(BuiltinBackendsTest, AutoPicksTheFirstAvailableAcceleratorWithDevices) {
  std::string expected;
  for (const AcceleratorSpec& spec : AcceleratorRegistry::Default().List()) {
    std::shared_ptr<Accelerator> accelerator = Get(spec.name);
    if (accelerator->IsAvailable() && accelerator->AutoDeviceCount() > 0) {
      expected = spec.name;
      break;
    }
  }
  ASSERT_FALSE(expected.empty()) << "cpu is always available";
  absl::StatusOr<Plan> plan = ResolvePlan(ConnectorOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->accelerator->name(), expected);
}

TEST(BuiltinBackendsTest, AskingForMissingHardwareListsWhatIsAvailable) {
  int checked = 0;
  for (const std::string flag : {"cuda", "gpu", "hpu"}) {
    SCOPED_TRACE(flag);
    std::shared_ptr<Accelerator> accelerator = Get(flag);
    const absl::Status available = accelerator->CheckAvailable();
    if (available.ok()) {
      std::cout << "'" << flag << "' is available on this machine; its unavailable message is not checked\n";
      continue;
    }
    ++checked;
    absl::StatusOr<Plan> plan = ResolvePlan(ConnectorOptions{.accelerator = flag, .devices = 1});
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(plan.status().message(),
                HasSubstr(absl::StrCat("accelerator '", accelerator->name(),
                                       "' can not run on your system since the accelerator is not available (",
                                       available.message(), ")")));
    EXPECT_THAT(plan.status().message(),
                HasSubstr(absl::StrCat("can be passed into `accelerator` argument of `Trainer`: ", AvailableNames(),
                                       ".")));
  }
  if (checked == 0) GTEST_SKIP() << "cuda and hpu are both available here";
}

}  // namespace
}  // namespace kiln
