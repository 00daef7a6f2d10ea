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
  options.mixed_precision.reduce_dtype = FsdpDtype::kFloat32;
  EXPECT_THAT(FsdpOptionsSet(options), ElementsAre("auto_wrap_min_num_params", "state_dict_type", "reduce_dtype"));
  EXPECT_EQ(FsdpOptionNames(),
            "sharding_strategy, auto_wrap_policy, auto_wrap_min_num_params, activation_checkpointing_policy, "
            "state_dict_type, param_dtype, reduce_dtype and buffer_dtype");
  EXPECT_STREQ(FsdpOptionForInitArg("sharding_strategy"), "sharding_strategy");
  EXPECT_STREQ(FsdpOptionForInitArg("state_dict_type"), "state_dict_type");
  // Lightning's auto_wrap_policy is a Python set of classes or a callable: no row reads it.
  EXPECT_EQ(FsdpOptionForInitArg("auto_wrap_policy"), nullptr);
  EXPECT_EQ(FsdpOptionForInitArg("device_mesh"), nullptr);
  // Lightning's mixed_precision is a MixedPrecision object: no row reads it either.
  EXPECT_EQ(FsdpOptionForInitArg("mixed_precision"), nullptr);
}

// The mixed-precision types as PyTorch and the usual short forms name them; empty or "none": unset (no cast).
TEST(FsdpOptionsTest, ParsesMixedPrecisionTypes) {
  const std::vector<std::pair<std::string, std::optional<FsdpDtype>>> table = {
      {"bf16", FsdpDtype::kBFloat16},     {"torch.bfloat16", FsdpDtype::kBFloat16}, {"BFloat16", FsdpDtype::kBFloat16},
      {"fp16", FsdpDtype::kFloat16},      {"float16", FsdpDtype::kFloat16},         {"half", FsdpDtype::kFloat16},
      {"fp32", FsdpDtype::kFloat32},      {"torch.float32", FsdpDtype::kFloat32},   {"32", FsdpDtype::kFloat32},
      {"", std::nullopt},                 {"none", std::nullopt}};
  for (const auto& [text, want] : table) {
    std::optional<FsdpDtype> dtype = FsdpDtype::kFloat16;
    EXPECT_EQ(SetFsdpField(dtype, text), std::nullopt) << text;
    EXPECT_EQ(dtype, want) << text;
  }
  std::optional<FsdpDtype> dtype;
  EXPECT_EQ(SetFsdpField(dtype, "float8"),
            "pass float32 (fp32), bfloat16 (bf16), float16 (fp16), or nothing (no cast)");
  EXPECT_EQ(dtype, std::nullopt);
  EXPECT_EQ(FsdpFieldText(std::optional<FsdpDtype>(FsdpDtype::kBFloat16)), "bfloat16");
  EXPECT_EQ(FsdpFieldText(std::optional<FsdpDtype>()), "");
  EXPECT_EQ(CheckFsdpField(std::optional<FsdpDtype>(static_cast<FsdpDtype>(7))),
            "pass float32 (fp32), bfloat16 (bf16), float16 (fp16), or nothing (no cast)");
}

// Lightning's FSDPPrecision.mixed_precision_config, by precision (lightning/pytorch/plugins/precision/fsdp.py).
TEST(FsdpOptionsTest, ThePrecisionImpliesLightningsMixedPrecision) {
  const std::vector<std::pair<std::string, std::optional<FsdpDtype>>> table = {
      {"bf16-mixed", FsdpDtype::kBFloat16}, {"bf16-true", FsdpDtype::kBFloat16}, {"16-mixed", FsdpDtype::kFloat16},
      {"16-true", FsdpDtype::kFloat16},     {"32-true", FsdpDtype::kFloat32},    {"64-true", std::nullopt}};
  for (const auto& [precision, dtype] : table) {
    const FsdpMixedPrecision mixed = FsdpMixedPrecisionFor(precision);
    EXPECT_EQ(mixed.param_dtype, dtype) << precision;
    EXPECT_EQ(mixed.reduce_dtype, dtype) << precision;
    EXPECT_EQ(mixed.buffer_dtype, dtype) << precision;
  }
}

}  // namespace
}  // namespace kiln
