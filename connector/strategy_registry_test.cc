#include "connector/strategy_registry.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(StrategyRegistryTest, EveryRegistryKnowsTheBuiltInStrategies) {
  StrategyRegistry registry;
  EXPECT_EQ(registry.NameList(),
            "ddp, ddp_find_unused_parameters_false, ddp_find_unused_parameters_true, fsdp, fsdp_cpu_offload, "
            "model_parallel, single_device");
  EXPECT_TRUE(registry.Find("DDP")->distributed);
  EXPECT_TRUE(registry.Find("ddp_find_unused_parameters_true")->distributed);
  // The connector knows the names; their factories are the trainer's, set later (strategy_factories.h).
  EXPECT_FALSE(registry.Find("ddp")->factory);
  EXPECT_FALSE(registry.Find("Single_Device")->distributed);
  EXPECT_TRUE(registry.Find("FSDP")->distributed);
  EXPECT_TRUE(registry.Find("model_parallel")->distributed);
  EXPECT_EQ(registry.Find("deepspeed").status().code(), absl::StatusCode::kNotFound);
}

TEST(StrategyRegistryTest, RegistersNewNames) {
  StrategyRegistry registry;
  ASSERT_TRUE(registry.Register({"DDP_Spawn", "spawned ddp", true}).ok());
  EXPECT_EQ(registry.Find("ddp_spawn")->name, "ddp_spawn");
  EXPECT_EQ(registry.NameList(),
            "ddp, ddp_find_unused_parameters_false, ddp_find_unused_parameters_true, ddp_spawn, fsdp, fsdp_cpu_offload, "
            "model_parallel, single_device");
  // The default registry is another one.
  EXPECT_FALSE(StrategyRegistry::Default().Find("ddp_spawn").ok());
}

TEST(StrategyRegistryTest, AFactoryIsSetOnceOnANameThatExists) {
  StrategyRegistry registry;
  const StrategyFactory factory = [](const StrategyArguments&) { return std::shared_ptr<StrategyDescriptor>(); };
  ASSERT_TRUE(registry.SetFactory("DDP", factory).ok());
  EXPECT_TRUE(registry.Find("ddp")->factory);
  EXPECT_EQ(registry.SetFactory("ddp", factory).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.SetFactory("deepspeed", factory).code(), absl::StatusCode::kNotFound);
}

struct BadCase {
  std::string name;
  absl::StatusCode code;
  std::string message_part;
};

TEST(StrategyRegistryTest, RejectsBadNames) {
  const std::vector<BadCase> cases = {
      {"", absl::StatusCode::kInvalidArgument, "invalid strategy name ''"},
      {"my strategy", absl::StatusCode::kInvalidArgument, "invalid strategy name 'my strategy'"},
      {"auto", absl::StatusCode::kInvalidArgument, "'auto' is reserved"},
      {"ddp", absl::StatusCode::kAlreadyExists, "strategy 'ddp' is already registered"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    StrategyRegistry registry;
    absl::Status status = registry.Register({c.name, "", false});
    EXPECT_EQ(status.code(), c.code);
    EXPECT_THAT(status.message(), HasSubstr(c.message_part));
  }
}

}  // namespace
}  // namespace kiln
