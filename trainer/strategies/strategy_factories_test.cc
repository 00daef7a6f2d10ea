// The built-in strategy names' factories (strategy_factories.h), set in a registry of the test's own: each name
// makes its strategy, and fsdp's take the options already parsed (StrategyArguments::options), not text.
#include "trainer/strategies/strategy_factories.h"

#include <memory>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "trainer/strategies/ddp_strategy.h"
#include "trainer/strategies/fsdp_strategy.h"
#include "trainer/strategies/strategy.h"

namespace kiln {
namespace {

std::shared_ptr<StrategyDescriptor> Make(StrategyRegistry& registry, const char* name,
                                         const StrategyArguments& arguments) {
  absl::StatusOr<StrategySpec> spec = registry.Find(name);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok() || !spec->factory) return nullptr;
  return spec->factory(arguments);
}

TEST(StrategyFactoriesTest, EachBuiltInNameMakesItsStrategy) {
  StrategyRegistry registry;
  ASSERT_TRUE(SetBuiltinStrategyFactories(registry).ok());
  StrategyArguments arguments;
  arguments.process_group_timeout = absl::Seconds(42);

  EXPECT_NE(std::dynamic_pointer_cast<SingleDeviceStrategy>(Make(registry, kSingleDeviceStrategy, arguments)),
            nullptr);
  for (const auto& [name, find_unused] : {std::pair{kDdpStrategy, false}, std::pair{kDdpFindUnusedFalseStrategy, false},
                                          std::pair{kDdpFindUnusedTrueStrategy, true}}) {
    auto ddp = std::dynamic_pointer_cast<DDPStrategy>(Make(registry, name, arguments));
    ASSERT_NE(ddp, nullptr) << name;
    EXPECT_EQ(ddp->options().find_unused_parameters, find_unused) << name;
    EXPECT_EQ(ddp->options().timeout, absl::Seconds(42)) << name;
  }
  for (const auto& [name, offload] : {std::pair{kFsdpStrategy, false}, std::pair{kFsdpCpuOffloadStrategy, true}}) {
    auto fsdp = std::dynamic_pointer_cast<FSDPStrategy>(Make(registry, name, arguments));
    ASSERT_NE(fsdp, nullptr) << name;
    EXPECT_EQ(fsdp->options().cpu_offload, offload) << name;
    EXPECT_EQ(fsdp->options().timeout, absl::Seconds(42)) << name;
    EXPECT_EQ(fsdp->name(), name);
  }
  // A second call finds the factories set: the first name's error, not a replacement.
  EXPECT_EQ(SetBuiltinStrategyFactories(registry).code(), absl::StatusCode::kAlreadyExists);
}

// The options struct comes through whole (fields no flag sets included); the name decides cpu_offload and the
// trainer's process_group_timeout the timeout.
TEST(StrategyFactoriesTest, FsdpTakesItsParsedOptions) {
  StrategyRegistry registry;
  ASSERT_TRUE(SetBuiltinStrategyFactories(registry).ok());
  FSDPOptions given;
  given.timeout = absl::Minutes(1);
  given.cpu_offload = true;
  given.sharding_strategy = ShardingStrategy::kShardGradOp;
  given.auto_wrap_policy = {.module_types = {"Linear", "Conv2d"}, .min_num_params = 1000};
  given.activation_checkpointing_policy = {"Block"};
  given.state_dict_type = StateDictType::kSharded;
  given.forward_prefetch = true;
  StrategyArguments arguments;
  arguments.process_group_timeout = absl::Seconds(7);
  arguments.options = given;

  auto fsdp = std::dynamic_pointer_cast<FSDPStrategy>(Make(registry, kFsdpStrategy, arguments));
  ASSERT_NE(fsdp, nullptr);
  const FSDPOptions& made = fsdp->options();
  EXPECT_EQ(made.sharding_strategy, ShardingStrategy::kShardGradOp);
  EXPECT_EQ(made.auto_wrap_policy.module_types, (std::vector<std::string>{"Linear", "Conv2d"}));
  EXPECT_EQ(made.auto_wrap_policy.min_num_params, 1000);
  EXPECT_EQ(made.activation_checkpointing_policy, std::vector<std::string>{"Block"});
  EXPECT_EQ(made.state_dict_type, StateDictType::kSharded);
  EXPECT_TRUE(made.forward_prefetch);
  EXPECT_TRUE(fsdp->SavesShardedCheckpoints());
  EXPECT_FALSE(made.cpu_offload);  // The name "fsdp".
  EXPECT_EQ(made.timeout, absl::Seconds(7));

  // Options of another type, or none: fsdp's defaults.
  arguments.options = DDPOptions{};
  fsdp = std::dynamic_pointer_cast<FSDPStrategy>(Make(registry, kFsdpCpuOffloadStrategy, arguments));
  ASSERT_NE(fsdp, nullptr);
  EXPECT_EQ(fsdp->options().sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_TRUE(fsdp->options().auto_wrap_policy.module_types.empty());
  EXPECT_TRUE(fsdp->options().cpu_offload);
}

}  // namespace
}  // namespace kiln
