// fsdp's options by name (fsdp_options.h and its table, fsdp_options.inc): each row parses its text into its typed
// field once, refuses what it cannot take with what it accepts, and names itself for messages and LightningCLI.
#include "trainer/strategies/fsdp_options.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;

TEST(FsdpOptionsTest, SetsEachRowsFieldFromItsText) {
  FSDPOptions options;
  EXPECT_EQ(SetFsdpField(options.sharding_strategy, "shard_grad_op"), std::nullopt);  // Case-insensitive.
  EXPECT_EQ(options.sharding_strategy, ShardingStrategy::kShardGradOp);
  EXPECT_EQ(SetFsdpField(options.state_dict_type, "sharded"), std::nullopt);
  EXPECT_EQ(options.state_dict_type, StateDictType::kSharded);
  EXPECT_EQ(SetFsdpField(options.auto_wrap_policy.module_types, " Linear, torch::nn::Conv2d ,,"), std::nullopt);
  EXPECT_THAT(options.auto_wrap_policy.module_types, ElementsAre("Linear", "torch::nn::Conv2d"));
  EXPECT_EQ(SetFsdpField(options.auto_wrap_policy.min_num_params, int64_t{500}), std::nullopt);
  EXPECT_EQ(options.auto_wrap_policy.min_num_params, 500);
}

// A refused value leaves the field as it was, and says what is accepted.
TEST(FsdpOptionsTest, RefusesTextItCannotTakeSayingWhatItAccepts) {
  FSDPOptions options;
  EXPECT_EQ(SetFsdpField(options.sharding_strategy, "HALF_SHARD"),
            "pass FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
  EXPECT_EQ(options.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(SetFsdpField(options.state_dict_type, "Full"), "pass full or sharded");  // Lightning's spelling only.
  EXPECT_EQ(SetFsdpField(options.auto_wrap_policy.module_types, "Linear;ReLU"),
            "pass module type names separated by commas, as LibTorch spells the classes (e.g. Linear)");
  EXPECT_TRUE(options.auto_wrap_policy.module_types.empty());
  EXPECT_EQ(SetFsdpField(options.auto_wrap_policy.min_num_params, int64_t{-1}), "pass an int >= 0 (0: off)");
  EXPECT_EQ(options.auto_wrap_policy.min_num_params, 0);

  // A program's typed values are checked the same way.
  EXPECT_EQ(CheckFsdpField(std::vector<std::string>{"Linear", "Re LU"}),
            "pass module type names separated by commas, as LibTorch spells the classes (e.g. Linear)");
  EXPECT_EQ(CheckFsdpField(static_cast<ShardingStrategy>(9)), "pass FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
  EXPECT_EQ(CheckFsdpField(int64_t{-5}), "pass an int >= 0 (0: off)");
  EXPECT_EQ(CheckFsdpField(StateDictType::kSharded), std::nullopt);
}

TEST(FsdpOptionsTest, WritesEachFieldAsItsFlagTakesIt) {
  EXPECT_EQ(FsdpFieldText(ShardingStrategy::kHybridShard), "HYBRID_SHARD");
  EXPECT_EQ(FsdpFieldText(StateDictType::kFull), "full");
  EXPECT_EQ(FsdpFieldText(std::vector<std::string>{"Linear", "Block"}), "Linear,Block");
  EXPECT_EQ(FsdpFieldText(int64_t{12}), "12");
  for (const char* name : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"}) {
    ShardingStrategy parsed = ShardingStrategy::kFullShard;
    ASSERT_EQ(SetFsdpField(parsed, name), std::nullopt) << name;
    EXPECT_EQ(FsdpFieldText(parsed), name);
  }
}

// The table's rows, by name: which differ from their defaults, the list messages give, LightningCLI's arguments.
TEST(FsdpOptionsTest, TheTableNamesItsRows) {
  EXPECT_TRUE(FsdpOptionsSet(FSDPOptions{}).empty());
  FSDPOptions options;
  options.state_dict_type = StateDictType::kSharded;
  options.auto_wrap_policy.min_num_params = 10;
  options.cpu_offload = true;  // Not a row: set by the strategy's name.
  EXPECT_THAT(FsdpOptionsSet(options), ElementsAre("auto_wrap_min_num_params", "state_dict_type"));
  EXPECT_EQ(FsdpOptionNames(),
            "sharding_strategy, auto_wrap_policy, auto_wrap_min_num_params, activation_checkpointing_policy and "
            "state_dict_type");
  EXPECT_STREQ(FsdpOptionForInitArg("sharding_strategy"), "sharding_strategy");
  EXPECT_STREQ(FsdpOptionForInitArg("state_dict_type"), "state_dict_type");
  // Lightning's auto_wrap_policy is a Python set of classes or a callable: no row reads it.
  EXPECT_EQ(FsdpOptionForInitArg("auto_wrap_policy"), nullptr);
  EXPECT_EQ(FsdpOptionForInitArg("device_mesh"), nullptr);
}

}  // namespace
}  // namespace kiln
