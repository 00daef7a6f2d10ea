#include "connector/connector.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/testing/fake_accelerator.h"

namespace kiln {
namespace {

using ::kiln::testing::FakeAccelerator;
using ::kiln::testing::FakeAcceleratorOptions;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void Register(AcceleratorRegistry& registry, FakeAcceleratorOptions options, int priority) {
  AcceleratorSpec spec;
  spec.name = options.name;
  spec.priority = priority;
  spec.factory = [options] { return std::make_shared<FakeAccelerator>(options); };
  ASSERT_TRUE(registry.Register(spec).ok());
}

FakeAcceleratorOptions Fake(std::string name, int devices, std::string unavailable = "") {
  FakeAcceleratorOptions options;
  options.name = std::move(name);
  options.device_count = devices;
  options.unavailable_reason = std::move(unavailable);
  options.precisions = {Precision::k32True, Precision::kBf16Mixed};
  return options;
}

class ConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("LOCAL_RANK");
    unsetenv("NODE_RANK");
    Register(registry_, Fake("host", 1), 0);
    Register(registry_, Fake("npu", 4), 5);
    Register(registry_, Fake("absent", 8, "no absent device on this machine"), 50);
  }
  void TearDown() override {
    unsetenv("LOCAL_RANK");
    unsetenv("NODE_RANK");
  }
  absl::StatusOr<Plan> Resolve(ConnectorOptions options) { return ResolvePlan(options, registry_); }

  AcceleratorRegistry registry_;
};

TEST_F(ConnectorTest, AutoPicksTheAvailableAcceleratorWithHighestPriority) {
  absl::StatusOr<Plan> plan = Resolve({});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->accelerator->name(), "npu");
  EXPECT_EQ(plan->num_devices(), 4);
  EXPECT_EQ(plan->strategy, "ddp");
  EXPECT_EQ(plan->process_group_backend, "gloo");
  EXPECT_EQ(plan->world_size, 4);
}

struct FlagCase {
  std::string accelerator;
  Devices devices;
  std::string strategy;
  int num_nodes;
  std::string expected_accelerator;
  std::vector<int> expected_indices;
  std::string expected_strategy;
  int expected_world_size;
};

TEST_F(ConnectorTest, ResolvesFlagCombinations) {
  const std::vector<FlagCase> cases = {
      {"host", "auto", "auto", 1, "host", {0}, "single_device", 1},
      {"HOST", 1, "auto", 1, "host", {0}, "single_device", 1},
      {"npu", "2", "auto", 1, "npu", {0, 1}, "ddp", 2},
      {"npu", "3,", "auto", 1, "npu", {3}, "single_device", 1},
      {"npu", "[1, 2]", "DDP", 1, "npu", {1, 2}, "ddp", 2},
      {"npu", 1, "auto", 2, "npu", {0}, "ddp", 2},
      {"npu", -1, "auto", 3, "npu", {0, 1, 2, 3}, "ddp", 12},
      {"npu", 1, "ddp", 1, "npu", {0}, "ddp", 1},
      {"auto", 1, "single_device", 1, "npu", {0}, "single_device", 1},
  };
  for (const FlagCase& c : cases) {
    SCOPED_TRACE(c.accelerator + " " + c.devices.ToString() + " " + c.strategy);
    absl::StatusOr<Plan> plan = Resolve({c.accelerator, c.devices, c.strategy, "32-true", c.num_nodes});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->accelerator->name(), c.expected_accelerator);
    EXPECT_EQ(plan->device_indices, c.expected_indices);
    EXPECT_EQ(plan->strategy, c.expected_strategy);
    EXPECT_EQ(plan->world_size, c.expected_world_size);
    EXPECT_EQ(plan->process_group_backend.has_value(), c.expected_strategy == "ddp");
  }
}

struct ErrorCase {
  ConnectorOptions options;
  std::string message_part;
};

TEST_F(ConnectorTest, RejectsBadInputWithClearErrors) {
  const std::vector<ErrorCase> cases = {
      {{"tpu"}, "unknown accelerator 'tpu'; registered: absent, host, npu"},
      {{"absent"}, "accelerator 'absent' can not run on your system since the accelerator is not available (no "
                   "absent device on this machine). The following accelerator(s) is available and can be passed "
                   "into `accelerator` argument of `Trainer`: host, npu."},
      {{"absent", 0}, "`Trainer(devices=0)` value is not a valid input using absent accelerator"},
      {{"npu", "0"}, "`Trainer(devices='0')` value is not a valid input using npu accelerator"},
      {{"npu", std::vector<int>{}}, "`Trainer(devices=[])` value is not a valid input"},
      {{"npu", 9}, "devices: 9 npu devices requested, but only 4 are visible"},
      {{"npu", "7,"}, "npu device 7 requested, but only 4 are visible"},
      {{"npu", "x"}, "invalid devices value 'x'"},
      {{"npu", 2, "single_device"}, "strategy='single_device' runs on one device, but 2 device(s)"},
      {{"npu", 1, "fsdp_v9"}, "strategy 'fsdp_v9' is not registered; registered: ddp, single_device"},
      {{"npu", 1, "auto", "8-true"}, "precision '8-true' is not supported; expected one of 32-true"},
      {{"npu", 1, "auto", "16-true"}, "precision '16-true' is not supported by the npu accelerator; it supports "
                                      "32-true, bf16-mixed"},
      {{"npu", 1, "auto", "32", 0}, "num_nodes=0 is not valid"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.message_part);
    absl::StatusOr<Plan> plan = Resolve(c.options);
    ASSERT_FALSE(plan.ok());
    EXPECT_THAT(plan.status().message(), HasSubstr(c.message_part));
  }
}

TEST_F(ConnectorTest, AutoWithNothingAvailableSaysSo) {
  AcceleratorRegistry empty;
  absl::StatusOr<Plan> plan = ResolvePlan({}, empty);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("found no available accelerator"));
}

TEST_F(ConnectorTest, InstancesNeedNoRegistration) {
  auto instance = std::make_shared<FakeAccelerator>(Fake("unregistered", 3));
  absl::StatusOr<Plan> plan = Resolve({instance, "2"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->accelerator.get(), instance.get());
  EXPECT_EQ(plan->num_devices(), 2);
}

TEST_F(ConnectorTest, PrecisionSpellingsAndSubstitutes) {
  std::vector<std::string> warnings;
  EXPECT_EQ(*ParsePrecisionFlag("32", &warnings), Precision::k32True);
  EXPECT_EQ(*ParsePrecisionFlag("64", &warnings), Precision::k64True);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(*ParsePrecisionFlag("16", &warnings), Precision::k16Mixed);
  EXPECT_EQ(*ParsePrecisionFlag("bf16", &warnings), Precision::kBf16Mixed);
  EXPECT_THAT(warnings, ElementsAre(HasSubstr("'16' is supported for historical reasons"),
                                    HasSubstr("Please set your precision to 'bf16-mixed' instead!")));

  FakeAcceleratorOptions options = Fake("subst", 1);
  options.substitute = PrecisionSubstitute{Precision::kBf16Mixed, "fp16 runs as bf16 here"};
  absl::StatusOr<Plan> plan = Resolve({std::make_shared<FakeAccelerator>(options), 1, "auto", "16-mixed"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->precision, Precision::kBf16Mixed);
  EXPECT_THAT(plan->warnings, ElementsAre("fp16 runs as bf16 here"));
}

TEST_F(ConnectorTest, RanksComeFromTheEnvironment) {
  setenv("LOCAL_RANK", "1", 1);
  setenv("NODE_RANK", "1", 1);
  absl::StatusOr<Plan> plan = Resolve({"npu", 2, "ddp", "32-true", 2});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->global_rank, 3);
  EXPECT_EQ(plan->world_size, 4);
  EXPECT_EQ(plan->root_device(), plan->devices[1]);

  setenv("LOCAL_RANK", "2", 1);
  EXPECT_THAT(Resolve({"npu", 2, "ddp", "32-true", 2}).status().message(), HasSubstr("LOCAL_RANK=2 but only 2"));
  setenv("LOCAL_RANK", "one", 1);
  EXPECT_THAT(Resolve({"npu", 2}).status().message(), HasSubstr("LOCAL_RANK='one' is not a non-negative"));
}

TEST_F(ConnectorTest, PlanAsJson) {
  absl::StatusOr<Plan> plan = Resolve({"npu", "0,1"});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->ToJson(),
            "{\"accelerator\": \"npu\", \"devices\": [\"cpu\", \"cpu\"], \"num_devices\": 2, \"strategy\": \"ddp\", "
            "\"process_group_backend\": \"gloo\", \"precision\": \"32-true\", \"num_nodes\": 1, \"world_size\": 2, "
            "\"global_rank\": 0, \"local_rank\": 0, \"node_rank\": 0, \"cluster_environment\": \"lightning\"}");
}

}  // namespace
}  // namespace kiln
