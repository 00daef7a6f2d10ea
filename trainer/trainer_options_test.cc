// The Trainer's option table's strategy rows (trainer_options.inc's, from trainer/strategies/fsdp_options.inc): fit's
// flag text parsed into TrainerOptions::fsdp, the typed fields a program sets checked as the flags are, and the
// deprecated text fields parsed over them; and, from a Trainer, the typed options reaching the fsdp its name makes.
// The profiler option's object form: a program's own profiler, and what is refused beside it.
#include "trainer/trainer_options.h"

#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "trainer/classifier.h"
#include "trainer/profilers/profiler.h"
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
            "sharding_strategy, auto_wrap_policy, auto_wrap_min_num_params, activation_checkpointing_policy, "
            "state_dict_type, param_dtype, reduce_dtype and buffer_dtype are fsdp's options, but the strategy is 'ddp': "
            "use strategy fsdp, or leave them unset");
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

// Lightning's Trainer(profiler=MyProfiler()): a program's own profiler object is the Trainer's profiler, called for
// every action (each stop matching its start) and set up and described with the run's stage; a name beside it, or
// the named profilers' dirpath and filename, are refused naming the option.
class RecordingProfiler final : public Profiler {
 public:
  using Profiler::Profiler;
  void start(absl::string_view action) override {
    running.emplace_back(action);
    ++starts[std::string(action)];
  }
  void stop(absl::string_view action) override {
    if (running.empty() || running.back() != action) ++unmatched;
    if (!running.empty()) running.pop_back();
  }
  std::string summary() override { return "recorded " + std::to_string(starts.size()) + " actions\n"; }
  absl::Status teardown() override {
    ++teardowns;
    return absl::OkStatus();
  }
  std::map<std::string, int> starts;
  std::vector<std::string> running;
  int unmatched = 0;
  int teardowns = 0;
};

TEST(TrainerOptionsTest, AProgramsOwnProfilerObjectTimesTheRun) {
  const std::string dir = ::testing::TempDir() + "/own_profiler";
  auto profiler = std::make_shared<RecordingProfiler>(dir, "mine");
  MlpClassifier model(MlpOptions{});
  SyntheticClusters data(SyntheticOptions{.num_train = 64, .num_val = 16, .batch_size = 16});
  Trainer trainer({.accelerator = "cpu",
                   .devices = 1,
                   .max_epochs = 2,
                   .num_sanity_val_steps = 0,
                   .default_root_dir = ::testing::TempDir(),
                   .logger = false,
                   .enable_checkpointing = false,
                   .enable_progress_bar = false,
                   .enable_model_summary = false,
                   .profiler = profiler});
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(trainer.profiler(), profiler.get());
  // 64 rows in batches of 16, two epochs: the counts the run itself reports.
  const int64_t steps = trainer.global_step();
  EXPECT_EQ(steps, 2 * (64 / 16));
  EXPECT_EQ(profiler->starts["run_training_batch"], steps);
  EXPECT_EQ(profiler->starts["[Strategy]SingleDeviceStrategy.training_step"], steps);
  EXPECT_EQ(profiler->starts["[Strategy]SingleDeviceStrategy.backward"], steps);
  EXPECT_EQ(profiler->starts["run_training_epoch"], trainer.current_epoch());
  EXPECT_EQ(profiler->starts["[LightningModule]MlpClassifier.configure_optimizers"], 1);
  EXPECT_EQ(profiler->unmatched, 0);
  EXPECT_TRUE(profiler->running.empty());
  EXPECT_EQ(profiler->stage(), "fit");
  EXPECT_EQ(profiler->teardowns, 1);
  // Its report, written by Profiler::describe where its own dirpath and filename say.
  std::ifstream report(dir + "/fit-mine.txt");
  std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "recorded " + std::to_string(profiler->starts.size()) + " actions\n");
}

TEST(TrainerOptionsTest, AProfilerObjectRefusesTheNamedProfilersOptions) {
  TrainerOptions options;
  options.profiler = std::make_shared<RecordingProfiler>();
  EXPECT_TRUE(CheckTrainerOptions(options).ok());
  options.profiler_dirpath = "/tmp/prof";
  EXPECT_EQ(CheckTrainerOptions(options).message(),
            "profiler_dirpath=/tmp/prof is not valid; leave it empty when profiler is a profiler object: give the "
            "object its dirpath and filename (kiln::Profiler(dirpath, filename)), or name the profiler (simple, "
            "advanced, pytorch)");
  options.profiler_dirpath.clear();
  options.profiler_filename = "perf";
  EXPECT_EQ(CheckTrainerOptions(options).code(), absl::StatusCode::kInvalidArgument);
  // A name and no object: the named profiler's options are its own.
  options.profiler = "simple";
  EXPECT_TRUE(CheckTrainerOptions(options).ok());
  options.profiler = "xla";
  EXPECT_EQ(CheckTrainerOptions(options).message(),
            "profiler=xla is not valid; pass simple, advanced, pytorch (Lightning's names; its xla has no Kiln "
            "counterpart), a profiler object of your own (kiln::Profiler), or nothing for no profiler");
}

}  // namespace
}  // namespace kiln
