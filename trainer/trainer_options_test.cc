// The Trainer's option table's strategy rows (trainer_options.inc's, from trainer/strategies/fsdp_options.inc): fit's
// flag text parsed into TrainerOptions::fsdp, the typed fields a program sets checked as the flags are, and the
// deprecated text fields parsed over them; and, from a Trainer, the typed options reaching the fsdp its name makes.
#include "trainer/trainer_options.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "trainer/classifier.h"
#include "trainer/strategies/fsdp_options.h"
#include "trainer/strategies/fsdp_strategy.h"
#include "trainer/synthetic_data.h"
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

// From a program that links the library: the typed options refused with a strategy that does not read them, and
// handed whole to the fsdp its name makes.
TEST(TrainerOptionsTest, TheTrainerRefusesFsdpOptionsForAnotherStrategy) {
  MlpClassifier model(MlpOptions{});
  SyntheticClusters data(SyntheticOptions{.num_train = 64, .num_val = 16});
  TrainerOptions options{.accelerator = "cpu", .devices = 1, .strategy = "ddp", .max_epochs = 1};
  options.fsdp.state_dict_type = StateDictType::kSharded;
  options.enable_progress_bar = false;
  options.default_root_dir = ::testing::TempDir();
  Trainer trainer(options);
  const absl::Status status = trainer.fit(model, data);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "sharding_strategy, auto_wrap_policy, auto_wrap_min_num_params, activation_checkpointing_policy and "
            "state_dict_type are fsdp's options, but the strategy is 'ddp': use strategy fsdp, or leave them unset");
}

TEST(TrainerOptionsTest, FsdpByNameIsMadeWithTheTypedOptions) {
  MlpClassifier model(MlpOptions{});
  SyntheticClusters data(SyntheticOptions{.num_train = 64, .num_val = 16});
  TrainerOptions options{.accelerator = "cpu",
                         .devices = 1,
                         .strategy = "fsdp",
                         .process_group_timeout = absl::Seconds(90),
                         .max_epochs = 1,
                         .logger = false,
                         .enable_checkpointing = false,
                         .enable_progress_bar = false,
                         .enable_model_summary = false};
  options.fsdp.sharding_strategy = ShardingStrategy::kShardGradOp;
  options.fsdp.auto_wrap_policy.module_types = {"Linear"};
  options.fsdp.forward_prefetch = true;           // Not a row: the struct goes whole.
  options.fsdp.timeout = absl::Hours(5);          // Not read: process_group_timeout is.
  options.fsdp.cpu_offload = true;                // Not read: the name says.
  options.default_root_dir = ::testing::TempDir();
  Trainer trainer(options);
  ASSERT_TRUE(trainer.fit(model, data).ok());
  const auto* fsdp = dynamic_cast<const FSDPStrategy*>(trainer.strategy());
  ASSERT_NE(fsdp, nullptr);
  EXPECT_EQ(fsdp->options().sharding_strategy, ShardingStrategy::kShardGradOp);
  EXPECT_EQ(fsdp->options().auto_wrap_policy.module_types, std::vector<std::string>{"Linear"});
  EXPECT_TRUE(fsdp->options().forward_prefetch);
  EXPECT_EQ(fsdp->options().timeout, absl::Seconds(90));
  EXPECT_FALSE(fsdp->options().cpu_offload);
  EXPECT_EQ(fsdp->name(), "fsdp");
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
