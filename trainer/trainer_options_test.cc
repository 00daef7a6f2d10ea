// The Trainer's option table's strategy rows (trainer_options.inc's, from trainer/strategies/fsdp_options.inc): fit's
// flag text parsed into TrainerOptions::fsdp, the typed fields a program sets checked as the flags are, and the
// deprecated text fields parsed over them.
#include "trainer/trainer_options.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/strategies/fsdp_options.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

TEST(TrainerOptionsTest, FsdpFlagsSetTheTypedOptions) {
  TrainerOptions options;
  EXPECT_FALSE(SetTrainerOption_sharding_strategy(options, "HYBRID_SHARD").has_value());
  EXPECT_FALSE(SetTrainerOption_auto_wrap_policy(options, "Linear, Block").has_value());
  EXPECT_FALSE(SetTrainerOption_auto_wrap_min_num_params(options, 64).has_value());
  EXPECT_FALSE(SetTrainerOption_activation_checkpointing_policy(options, "Block").has_value());
  EXPECT_FALSE(SetTrainerOption_state_dict_type(options, "sharded").has_value());
  EXPECT_EQ(options.fsdp.sharding_strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(options.fsdp.auto_wrap_policy.module_types, (std::vector<std::string>{"Linear", "Block"}));
  EXPECT_EQ(options.fsdp.auto_wrap_policy.min_num_params, 64);
  EXPECT_EQ(options.fsdp.activation_checkpointing_policy, std::vector<std::string>{"Block"});
  EXPECT_EQ(options.fsdp.state_dict_type, StateDictType::kSharded);
  EXPECT_TRUE(CheckTrainerOptions(options).ok());

  const OptionCheck refused = SetTrainerOption_state_dict_type(options, "halves");
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->value, "halves");
  EXPECT_EQ(refused->accepted, "pass full or sharded");
  EXPECT_EQ(options.fsdp.state_dict_type, StateDictType::kSharded);  // Unchanged.
}

TEST(TrainerOptionsTest, TypedFsdpOptionsAreCheckedAsTheirFlagsAre) {
  TrainerOptions options;
  options.fsdp.auto_wrap_policy.module_types = {"Linear", "Re LU"};
  EXPECT_EQ(CheckTrainerOptions(options).message(),
            "auto_wrap_policy=Linear,Re LU is not valid; pass module type names separated by commas, as LibTorch "
            "spells the classes (e.g. Linear)");
  options.fsdp.auto_wrap_policy.module_types = {"Linear"};
  options.fsdp.auto_wrap_policy.min_num_params = -3;
  EXPECT_EQ(CheckTrainerOptions(options).message(),
            "auto_wrap_min_num_params=-3 is not valid; pass an int >= 0 (0: off)");
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
// The deprecated text fields still work: each one that differs from its default is parsed over `fsdp`; one that does
// not parse is refused naming it, as its flag is.
TEST(TrainerOptionsTest, DeprecatedTextFieldsAreParsedOverTheTypedOptions) {
  TrainerOptions options;
  options.fsdp.state_dict_type = StateDictType::kSharded;
  options.fsdp.sharding_strategy = ShardingStrategy::kShardGradOp;
  options.auto_wrap_policy = "Linear";
  options.activation_checkpointing_policy = "Block";
  absl::StatusOr<FSDPOptions> fsdp = EffectiveFsdpOptions(options);
  ASSERT_TRUE(fsdp.ok()) << fsdp.status();
  EXPECT_EQ(fsdp->sharding_strategy, ShardingStrategy::kShardGradOp);  // The text field is at its default.
  EXPECT_EQ(fsdp->state_dict_type, StateDictType::kSharded);
  EXPECT_EQ(fsdp->auto_wrap_policy.module_types, std::vector<std::string>{"Linear"});
  EXPECT_EQ(fsdp->activation_checkpointing_policy, std::vector<std::string>{"Block"});

  options.sharding_strategy = "no_shard";
  options.auto_wrap_min_num_params = 10;
  fsdp = EffectiveFsdpOptions(options);
  ASSERT_TRUE(fsdp.ok()) << fsdp.status();
  EXPECT_EQ(fsdp->sharding_strategy, ShardingStrategy::kNoShard);
  EXPECT_EQ(fsdp->auto_wrap_policy.min_num_params, 10);
  EXPECT_EQ(FsdpOptionsSet(*fsdp).size(), 5u);

  options.state_dict_type = "halves";
  EXPECT_EQ(EffectiveFsdpOptions(options).status().message(),
            "state_dict_type=halves is not valid; pass full or sharded");
  EXPECT_EQ(CheckTrainerOptions(options).message(), "state_dict_type=halves is not valid; pass full or sharded");
}
#pragma GCC diagnostic pop

}  // namespace
}  // namespace kiln
