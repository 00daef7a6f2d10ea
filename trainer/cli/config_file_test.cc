#include "trainer/cli/config_file.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/io/peak_memory.h"

namespace kiln {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Puts the config table's flags back as they were, so that tests do not see each other's values (absl::FlagSaver
// would log a line for every flag it restores).
class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const ConfigKey& entry : ConfigKeys())
      saved_[entry.flag] = absl::FindCommandLineFlag(entry.flag)->CurrentValue();
  }
  void TearDown() override {
    std::string error;
    for (const auto& [name, value] : saved_) absl::FindCommandLineFlag(name)->ParseFrom(value, &error);
  }

 private:
  std::map<std::string, std::string> saved_;
};

void Set(const std::string& name, const std::string& value) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  ASSERT_NE(flag, nullptr) << name;
  std::string error;
  ASSERT_TRUE(flag->ParseFrom(value, &error)) << name << "=" << value << ": " << error;
}

std::string Value(const std::string& name) { return absl::FindCommandLineFlag(name)->CurrentValue(); }

// The flags `args` (as ConfigFileArguments returns them) set, applied.
void Apply(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    ASSERT_TRUE(absl::StartsWith(arg, "--")) << arg;
    const size_t equals = arg.find('=');
    ASSERT_NE(equals, std::string::npos) << arg;
    Set(arg.substr(2, equals - 2), arg.substr(equals + 1));
  }
}

TEST_F(ConfigFileTest, EveryFlagOfFitHasAKeyAndEveryKeyAFlag) {
  std::set<std::string> keyed;
  std::set<std::pair<int, std::string>> keys;
  for (const ConfigKey& entry : ConfigKeys()) {
    EXPECT_NE(absl::FindCommandLineFlag(entry.flag), nullptr) << "config key " << entry.key << " names no flag";
    EXPECT_TRUE(keyed.insert(entry.flag).second) << "--" << entry.flag << " has two keys";
    EXPECT_TRUE(keys.insert({static_cast<int>(entry.section), entry.key}).second) << "key " << entry.key << " twice";
  }
  int fit_flags = 0;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file = flag->Filename();
    const bool fit_flag = (absl::StrContains(file, "trainer/cli/") && absl::EndsWith(file, "_flags.cc")) ||
                          absl::EndsWith(file, "trainer/trainer_options.inc") ||
                          absl::EndsWith(file, "trainer/accelerator_plugins.cc");
    if (!fit_flag) continue;
    ++fit_flags;
    EXPECT_TRUE(keyed.count(std::string(name)) == 1 || IsCommandLineOnlyFlag(name))
        << "--" << name << " (" << file << ") has no config key: add it to ConfigKeys()";
  }
  EXPECT_GT(fit_flags, 50);  // The test saw fit's flags at all.
}

TEST_F(ConfigFileTest, NullIsTheDefaultAsInLightningCli) {
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(
      "trainer:\n  limit_train_batches: null\n  val_check_interval: null\n  gradient_clip_algorithm: null\n"
      "  default_root_dir: null\n  logger: null\n  max_epochs: null\n",
      "nulls.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  for (const char* expected : {"--limit_train_batches=1.0", "--val_check_interval=1.0", "--gradient_clip_algorithm=norm",
                               "--default_root_dir=.", "--logger=csv,tensorboard", "--max_epochs=1000"}) {
    EXPECT_THAT(*args, ::testing::Contains(std::string(expected)));
  }
  // Lightning's max_epochs=None with max_steps: no epoch limit.
  args = ConfigFileArguments("trainer:\n  max_epochs: null\n  max_steps: 50\n", "steps.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ::testing::Contains(std::string("--max_epochs=-1")));
}

TEST_F(ConfigFileTest, EveryUnknownKeyIsNamedInOneError) {
  const absl::Status status =
      ConfigFileArguments("trainer:\n  max_epoch: 3\n  gpus: 2\nmodel:\n  max_epochs: 1\n", "run.yaml").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--config=run.yaml: unknown key trainer.max_epoch; did you mean "
                                          "trainer.max_epochs?"));
  EXPECT_THAT(status.message(), HasSubstr("; also unknown key trainer.gpus"));
  EXPECT_THAT(status.message(), HasSubstr("; also unknown key model.max_epochs; max_epochs is written "
                                          "trainer.max_epochs"));
}

TEST_F(ConfigFileTest, AnEmptyListIsNotTheDefault) {
  Set("hidden_sizes", "");  // A linear model; the default is 64,64.
  const std::string yaml = ConfigYaml();
  EXPECT_THAT(yaml, HasSubstr("  hidden_sizes: []\n"));
  Set("hidden_sizes", absl::FindCommandLineFlag("hidden_sizes")->DefaultValue());
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(yaml, "printed.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ::testing::Contains(std::string("--hidden_sizes=")));
}

TEST_F(ConfigFileTest, WhatItWritesReadsBackToTheSameFlags) {
  const std::map<std::string, std::string> set = {
      {"max_epochs", "3"},
      {"seed", "7"},
      {"hidden_sizes", "8,4"},
      {"logger", "none"},
      {"learning_rate", "0.025"},
      {"shuffle", "false"},
      {"checkpoint_monitor", "val_loss"},
      {"save_top_k", "2"},
      {"early_stopping_monitor", "val_acc"},
      {"early_stopping_mode", "max"},
      {"patience", "5"},
      {"data", "my data: \"x\" #1.csv"},  // YAML's ': ', quotes and '#' in a value.
      {"label_column", "-1"},
      {"limit_train_batches", "0.5"},
      {"max_time", "00:00:01:00"},
      {"ckpt_path", "yes"},  // A word PyYAML would read as true.
      {"lr_scheduler", "plateau"},
      {"lr_scheduler_interval", "step"},
      {"plateau_patience", "4"},
      {"warmup_start_factor", "0.125"},
  };
  for (const auto& [name, value] : set) Set(name, value);
  std::map<std::string, std::string> before;
  for (const ConfigKey& entry : ConfigKeys()) before[entry.flag] = Value(entry.flag);
  const std::string yaml = ConfigYaml();
  EXPECT_THAT(yaml, HasSubstr("\ntrainer:\n"));
  EXPECT_THAT(yaml, HasSubstr("seed_everything: 7\n"));
  EXPECT_THAT(yaml, HasSubstr("  logger: false\n"));
  EXPECT_THAT(yaml, HasSubstr("  hidden_sizes: [8, 4]\n"));
  EXPECT_THAT(yaml, HasSubstr("class_path: lightning.pytorch.callbacks.EarlyStopping"));
  EXPECT_THAT(yaml, HasSubstr("\nlr_scheduler:\n  class_path: lightning.pytorch.cli.ReduceLROnPlateau\n"));
  EXPECT_THAT(yaml, HasSubstr("\n  interval: step\n"));  // fit's own, beside LightningCLI's class.
  EXPECT_THAT(yaml, HasSubstr("\noptimizer:\n  class_path: torch.optim.Adam\n  init_args:\n    lr: 0.025\n"));

  // Back to every default, then the file's flags.
  for (const ConfigKey& entry : ConfigKeys()) Set(entry.flag, absl::FindCommandLineFlag(entry.flag)->DefaultValue());
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(yaml, "printed.yaml");
  ASSERT_TRUE(args.ok()) << args.status() << "\n" << yaml;
  Apply(*args);
  for (const auto& [name, value] : before) EXPECT_EQ(Value(name), value) << "--" << name << " in\n" << yaml;
}

TEST_F(ConfigFileTest, EarlyStoppingIsWrittenOnlyWhenItWatchesAMetric) {
  EXPECT_THAT(ConfigYaml(), Not(HasSubstr("EarlyStopping")));
  EXPECT_THAT(ConfigYaml(), HasSubstr("class_path: lightning.pytorch.callbacks.ModelCheckpoint"));
}

// The weight-averaging callbacks are written as LightningCLI writes them (every init argument, Lightning's defaults
// where fit has no flag), only when they are on, and read back to the same flags.
TEST_F(ConfigFileTest, WeightAveragingCallbacksAreWrittenAsLightningCliWritesThem) {
  EXPECT_THAT(ConfigYaml(), Not(HasSubstr("WeightAveraging")));
  Set("swa_lrs", "0.05");
  Set("swa_epoch_start", "2");
  Set("annealing_strategy", "linear");
  Set("ema_weight_averaging", "true");
  Set("ema_decay", "0.9");
  Set("ema_update_starting_at_epoch", "1");
  std::map<std::string, std::string> before;
  for (const ConfigKey& entry : ConfigKeys()) before[entry.flag] = Value(entry.flag);
  const std::string yaml = ConfigYaml();
  EXPECT_THAT(yaml, HasSubstr("    - class_path: lightning.pytorch.callbacks.StochasticWeightAveraging\n"
                              "      init_args:\n"
                              "        swa_lrs: 0.05\n"
                              "        swa_epoch_start: 2\n"
                              "        annealing_epochs: 10\n"
                              "        annealing_strategy: linear\n"
                              "        avg_fn: null\n"
                              "        device: cpu\n"));
  EXPECT_THAT(yaml, HasSubstr("    - class_path: lightning.pytorch.callbacks.EMAWeightAveraging\n"
                              "      init_args:\n"
                              "        device: null\n"
                              "        use_buffers: true\n"
                              "        decay: 0.9\n"
                              "        update_every_n_steps: 1\n"
                              "        update_starting_at_step: null\n"
                              "        update_starting_at_epoch: 1\n"
                              "        multi_avg_fn: null\n"));
  for (const ConfigKey& entry : ConfigKeys()) Set(entry.flag, absl::FindCommandLineFlag(entry.flag)->DefaultValue());
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(yaml, "printed.yaml");
  ASSERT_TRUE(args.ok()) << args.status() << "\n" << yaml;
  Apply(*args);
  for (const auto& [name, value] : before) EXPECT_EQ(Value(name), value) << "--" << name << " in\n" << yaml;
}

// LightningCLI's forms: swa_lrs as a float or a list of one, arguments left out at Lightning's defaults (which are
// fit's flags' defaults), and EMAWeightAveraging named alone.
TEST_F(ConfigFileTest, ReadsLightningsWeightAveragingCallbacks) {
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(R"(trainer:
  callbacks:
  - class_path: lightning.pytorch.callbacks.StochasticWeightAveraging
    init_args: {swa_lrs: [0.01], swa_epoch_start: 0.5}
  - class_path: EMAWeightAveraging
)",
                                                                      "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("--swa_lrs=0.01", "--swa_epoch_start=0.5", "--annealing_epochs=10",
                                 "--annealing_strategy=cos", "--ema_weight_averaging=true", "--ema_use_buffers=true",
                                 "--ema_decay=0.999", "--ema_update_every_n_steps=1"));
  args = ConfigFileArguments("trainer: {callbacks: [{class_path: StochasticWeightAveraging, init_args: {swa_lrs: 0.02, "
                             "avg_fn: null, device: cpu}}]}",
                             "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, Contains("--swa_lrs=0.02"));
}

TEST_F(ConfigFileTest, ReadsLightningsSpellings) {
  const std::string yaml = R"(# lightning.pytorch==2.2.5
seed_everything: 3
trainer:
  max_epochs: null
  logger: true
  devices: 1
  callbacks:
  - class_path: lightning.pytorch.callbacks.ModelCheckpoint
    init_args:
      monitor: val_acc
      mode: max
  - class_path: EarlyStopping
    init_args: {monitor: val_loss, patience: 2}
model:
  hidden_sizes: [16]
data:
ckpt_path: null
)";
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(yaml, "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  const std::string default_logger = absl::FindCommandLineFlag("logger")->DefaultValue();
  // max_epochs: null is Lightning's default, 1000 epochs (fit's own default is 10); the callbacks' arguments left out
  // are Lightning's defaults (ModelCheckpoint's save_last: no last.ckpt).
  EXPECT_THAT(*args,
              ElementsAre("--seed=3", "--logger=" + default_logger, "--devices=1", "--checkpoint_monitor=val_acc",
                          "--checkpoint_mode=max", "--save_last=false", "--save_top_k=1", "--save_weights_only=false",
                          "--enable_version_counter=true", "--early_stopping_monitor=val_loss", "--patience=2", "--min_delta=0.0",
                          "--early_stopping_mode=min", "--hidden_sizes=16", "--ckpt_path=", "--max_epochs=1000"));
}

// A logger's save_dir becomes --default_root_dir as the YAML text says it: a quoted scalar without its quotes, and a
// plain one whole, an apostrophe at its end too.
TEST_F(ConfigFileTest, ALoggersSaveDirIsTheFolderTheYamlNames) {
  for (const auto& [text, folder] : std::vector<std::pair<std::string, std::string>>{
           {"runs", "runs"}, {"'runs'", "runs"}, {"\"it's\"", "it's"}, {"bob's", "bob's"}, {"runs'", "runs'"},
           {"'runs'''", "runs'"}, {"\"'runs'\"", "'runs'"}}) {
    absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(
        "trainer:\n  logger:\n    class_path: CSVLogger\n    init_args:\n      save_dir: " + text + "\n", "run.yaml");
    ASSERT_TRUE(args.ok()) << text << ": " << args.status();
    EXPECT_THAT(*args, Contains("--default_root_dir=" + folder)) << "save_dir: " << text;
  }
}

// trainer.strategy as LightningCLI writes a strategy object: its class is fit's strategy name, its arguments fit's
// flags, and a switch that fit spells as a strategy name picks that name.
TEST_F(ConfigFileTest, ReadsLightningsStrategyObjects) {
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(R"(trainer:
  strategy:
    class_path: lightning.pytorch.strategies.FSDPStrategy
    init_args:
      sharding_strategy: SHARD_GRAD_OP
      state_dict_type: sharded
      cpu_offload: true
      timeout: 0:30:00
)",
                                                                      "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("--strategy=fsdp", "--strategy=fsdp_cpu_offload", "--sharding_strategy=SHARD_GRAD_OP",
                                 "--state_dict_type=sharded"));
  args = ConfigFileArguments("trainer: {strategy: {class_path: DDPStrategy, init_args: {find_unused_parameters: true, "
                             "process_group_backend: gloo}}}",
                             "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("--strategy=ddp", "--strategy=ddp_find_unused_parameters_true",
                                 "--process_group_backend=gloo"));
  // Lightning's sync_batchnorm is the Trainer's option of that name (it was accepted at false alone).
  args = ConfigFileArguments("trainer: {strategy: ddp, sync_batchnorm: true}", "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("--strategy=ddp", "--sync_batchnorm=true"));
  // Arguments left out are Lightning's defaults.
  args = ConfigFileArguments("trainer: {strategy: {class_path: FSDPStrategy}}", "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("--strategy=fsdp", "--sharding_strategy=FULL_SHARD", "--state_dict_type=full"));
}

// trainer.profiler as LightningCLI writes a profiler object, or its class's name alone: the class is fit's profiler
// name, dirpath and filename its flags; an argument Kiln has only at one value is refused at another.
TEST_F(ConfigFileTest, ReadsLightningsProfilerObjects) {
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(R"(trainer:
  profiler:
    class_path: lightning.pytorch.profilers.SimpleProfiler
    init_args:
      dirpath: prof
      filename: perf
      extended: true
)",
                                                                      "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("--profiler=simple", "--profiler_dirpath=prof", "--profiler_filename=perf"));
  args = ConfigFileArguments("trainer: {profiler: {class_path: AdvancedProfiler, init_args: {filename: a, dirpath: "
                             "null, dump_stats: false}}}",
                             "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("--profiler=advanced", "--profiler_filename=a", "--profiler_dirpath="));
  args = ConfigFileArguments("trainer: {profiler: {class_path: PyTorchProfiler, init_args: {row_limit: -1}}}",
                             "run.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("--profiler=pytorch"));
  // The class's name alone (short or with its module), and fit's own names, as the key's value.
  for (const auto& [yaml, flag] : std::vector<std::pair<std::string, std::string>>{
           {"SimpleProfiler", "--profiler=simple"},
           {"lightning.pytorch.profilers.AdvancedProfiler", "--profiler=advanced"},
           {"PyTorchProfiler", "--profiler=pytorch"},
           {"simple", "--profiler=simple"},
           {"null", "--profiler="}}) {
    args = ConfigFileArguments("trainer: {profiler: " + yaml + "}", "run.yaml");
    ASSERT_TRUE(args.ok()) << yaml << ": " << args.status();
    EXPECT_THAT(*args, ElementsAre(flag)) << yaml;
  }
  for (const auto& [yaml, expected] : std::vector<std::pair<std::string, std::string>>{
           {"trainer: {profiler: {class_path: XLAProfiler}}",
            "trainer.profiler: class_path 'XLAProfiler' is not one fit has; it has SimpleProfiler, AdvancedProfiler, "
            "PyTorchProfiler"},
           {"trainer: {profiler: {class_path: PyTorchProfiler, init_args: {record_module_names: true}}}",
            "trainer.profiler.init_args.record_module_names: true is not supported: Kiln's PyTorchProfiler runs as "
            "record_module_names=false; write false or leave it out"},
           {"trainer: {profiler: {class_path: SimpleProfiler, init_args: {dir_path: x}}}",
            "unknown key trainer.profiler.init_args.dir_path; did you mean trainer.profiler.init_args.dirpath?"},
           {"trainer: {profiler: {class_path: SimpleProfiler, args: {}}}", "unknown key 'args' in an entry"}}) {
    args = ConfigFileArguments(yaml, "run.yaml");
    ASSERT_FALSE(args.ok()) << yaml;
    EXPECT_THAT(std::string(args.status().message()), HasSubstr(expected)) << yaml;
  }
}

// --print_config writes the profiler as LightningCLI's class, holding its dirpath and filename, and reads it back.
TEST_F(ConfigFileTest, WritesTheProfilerAsLightningsClass) {
  EXPECT_THAT(ConfigYaml(), HasSubstr("\n  profiler: null\n"));
  EXPECT_THAT(ConfigYaml(), Not(HasSubstr("profiler_dirpath")));
  Set("profiler", "pytorch");
  Set("profiler_filename", "perf");
  const std::string yaml = ConfigYaml();
  EXPECT_THAT(yaml, HasSubstr("\n  profiler:\n    class_path: lightning.pytorch.profilers.PyTorchProfiler\n"
                              "    init_args:\n      dirpath: null\n      filename: perf\n"));
  EXPECT_THAT(yaml, HasSubstr("      row_limit: -1\n"));
  EXPECT_THAT(yaml, Not(HasSubstr("profiler_filename")));
  Set("profiler", "");
  Set("profiler_filename", "");
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(yaml, "printed.yaml");
  ASSERT_TRUE(args.ok()) << args.status() << "\n" << yaml;
  EXPECT_THAT(*args, Contains("--profiler=pytorch"));
  EXPECT_THAT(*args, Contains("--profiler_filename=perf"));
}

TEST_F(ConfigFileTest, ReadingChangesNoFlag) {
  const std::string before = Value("max_epochs");
  ASSERT_TRUE(ConfigFileArguments("trainer: {max_epochs: 99}", "run.yaml").ok());
  EXPECT_EQ(Value("max_epochs"), before);
  EXPECT_NE(before, "99");
}

TEST_F(ConfigFileTest, MistakesNameTheKeyAndTheFix) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"trainer: {max_epoch: 3}", "--config=run.yaml: unknown key trainer.max_epoch; did you mean trainer.max_epochs?"},
      {"max_epochs: 3", "unknown key max_epochs; max_epochs is written trainer.max_epochs"},
      {"model: {batch_size: 3}", "unknown key model.batch_size; batch_size is written data.batch_size"},
      {"trainer: {checkpoint_monitor: val_loss}",
       "the flag --checkpoint_monitor is written trainer.callbacks[ModelCheckpoint].init_args.monitor"},
      {"trainr: {max_epochs: 3}", "unknown key trainr; did you mean trainer?"},
      {"lr_scheduler: {schedular: step}", "unknown key lr_scheduler.schedular; did you mean lr_scheduler.scheduler?"},
      {"step_size: 3", "unknown key step_size; step_size is written lr_scheduler.step_size"},
      {"zzzzzzzz: 1", "unknown key zzzzzzzz; fit --print_config shows every key"},
      {"trainer: {max_epochs: ten}", "trainer.max_epochs: 'ten' is not valid; write an integer"},
      {"trainer: {deterministic: maybe}", "trainer.deterministic: 'maybe' is not valid; write true or false"},
      {"trainer: {max_epochs: [1, 2]}", "trainer.max_epochs: expected one value, not a list"},
      {"model: {hidden_sizes: [[1], 2]}", "model.hidden_sizes: a list of single values is expected"},
      {"trainer: {max_epochs: {a: 1}}", "trainer.max_epochs: expected one value, not a mapping"},
      {"trainer: 5", "trainer: must be a mapping of trainer keys"},
      {"[1, 2]", "the file must be a mapping of keys"},
      {"trainer: {max_epochs: 1}\ntrainer: {max_steps: 1}", "trainer: given twice; keep one"},
      {"trainer: {max_epochs: 1, max_epochs: 2}", "trainer.max_epochs: given twice; keep one"},
      {"trainer: [", "--config=run.yaml: line 1: not valid YAML"},
      {"a: 1\n---\nb: 2\n", "holds 2 YAML documents; a config file holds one"},
      {"trainer: {callbacks: [{class_path: BackboneFinetuning}]}",
       "class_path 'BackboneFinetuning' is not one fit has; it has ModelCheckpoint, EarlyStopping, "
       "StochasticWeightAveraging, EMAWeightAveraging"},
      {"trainer: {callbacks: [{class_path: StochasticWeightAveraging}]}", "StochasticWeightAveraging needs swa_lrs"},
      {"trainer: {callbacks: [{class_path: StochasticWeightAveraging, init_args: {swa_lrs: 0.1, device: cuda}}]}",
       "trainer.callbacks[StochasticWeightAveraging].init_args.device: cuda is not supported: Kiln's "
       "StochasticWeightAveraging runs as device=cpu; write cpu or leave it out"},
      {"trainer: {callbacks: [{class_path: EMAWeightAveraging, init_args: {decay: high}}]}",
       "trainer.callbacks[EMAWeightAveraging].init_args.decay: 'high' is not valid; write a number"},
      {"trainer: {callbacks: [{class_path: EMAWeightAveraging, init_args: {decai: 0.9}}]}",
       "did you mean trainer.callbacks[EMAWeightAveraging].init_args.decay?"},
      {"trainer: {callbacks: [{class_path: EarlyStopping, init_args: {patience: 1}}]}", "EarlyStopping needs monitor"},
      {"trainer: {strategy: {class_path: DeepSpeedStrategy}}",
       "trainer.strategy: class_path 'DeepSpeedStrategy' is not one fit has; it has DDPStrategy, FSDPStrategy"},
      {"trainer: {strategy: {class_path: FSDPStrategy, init_args: {cpu_offload: sometimes}}}",
       "trainer.strategy.init_args.cpu_offload: sometimes is not read; write true or false"},
      {"trainer: {strategy: {class_path: FSDPStrategy, init_args: {mixed_precision: {param_dtype: bf16}}}}",
       "trainer.strategy.init_args.mixed_precision: {param_dtype: bf16} is not supported"},
      {"trainer: {callbacks: [{class_path: ModelCheckpoint}, {class_path: ModelCheckpoint}]}",
       "ModelCheckpoint is listed twice"},
      {"trainer: {callbacks: [{class_path: ModelCheckpoint, init_args: {monitr: x}}]}",
       "unknown key trainer.callbacks[ModelCheckpoint].init_args.monitr; did you mean "
       "trainer.callbacks[ModelCheckpoint].init_args.monitor?"},
      {"trainer: {callbacks: [{class_path: ModelCheckpoint, args: {}}]}", "unknown key 'args' in an entry"},
      {"trainer: {callbacks: ModelCheckpoint}", "trainer.callbacks: must be a list"},
      {std::string(20000, '[') + std::string(20000, ']'), "line 1: it nests deeper than the 499 levels YAML may nest"},
      // A Latin-1 byte: config.yaml could not write the value back as it was read.
      {"data: {data: caf\xe9.csv}\n",
       "--config=run.yaml:1: byte 17 of the line (0xE9) is not UTF-8"},  // Nesting past yaml-cpp's guard.
  };
  // kMaxYamlDepth is yaml-cpp's: that many levels are read (then refused: not a mapping), one more is refused.
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']') + "\n"; };
  EXPECT_THAT(std::string(ConfigFileArguments(nested(kMaxYamlDepth + 1), "run.yaml").status().message()),
              HasSubstr("nests deeper"));
  EXPECT_THAT(std::string(ConfigFileArguments(nested(kMaxYamlDepth), "run.yaml").status().message()),
              HasSubstr("the file must be a mapping"));
  for (const auto& [yaml, expected] : cases) {
    absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(yaml, "run.yaml");
    ASSERT_FALSE(args.ok()) << yaml;
    EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_THAT(std::string(args.status().message()), HasSubstr(expected)) << yaml.substr(0, 80);
  }
}

// A config of `levels` anchors, each a list of ten aliases of the one before (the first of ten scalars), in the value
// of a callback's argument (which the reader writes out whole, to compare it with Lightning's default): 10^levels
// nodes in about 60 bytes a level.
std::string Laughs(int levels) {
  std::string yaml =
      "trainer:\n  callbacks:\n  - class_path: ModelCheckpoint\n    init_args:\n      dirpath:\n"
      "      - &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i < levels; ++i) {
    const std::string alias = absl::StrCat("*l", i - 1);
    yaml += absl::StrCat("      - &l", i, " [", alias);
    for (int j = 1; j < 10; ++j) yaml += absl::StrCat(", ", alias);
    yaml += "]\n";
  }
  return yaml;
}

// docs/reliability.md, "Memory", config files: at most 256 times the file, plus 16 MiB.
constexpr uint64_t kYamlBytesPerByte = 256;
constexpr uint64_t kYamlMargin = uint64_t{16} << 20;

// YAML aliases are references: a file of 600 bytes stands for 10^9 nodes. The document is refused, naming the file,
// the line where its expansion passes a limit, and the limit, before any node is built; memory stays within the
// bound. (Seen failing before the budget: Laughs(6), 390 bytes, was written out whole, 92 MiB at its peak
// against a bound of 16 MiB.)
TEST_F(ConfigFileTest, AliasesExpandWithinABudgetForTheWholeDocument) {
  for (int levels : {6, 10}) {
    const std::string yaml = Laughs(levels);
    absl::StatusOr<std::vector<std::string>> args;
    absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { args = ConfigFileArguments(yaml, "laughs.yaml"); });
    ASSERT_TRUE(peak.ok()) << peak.status();
    ASSERT_FALSE(args.ok()) << levels << " levels were accepted";
    EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument);
    // Line 10: the fifth level (10^5 values) takes the document past 100,000 nodes.
    EXPECT_THAT(std::string(args.status().message()),
                HasSubstr("--config=laughs.yaml: line 10: its aliases expand it past 100000 nodes, the most a config "
                          "file may hold (kMaxYamlNodes); write the values out, or alias less"));
    EXPECT_LE(*peak, SanitizerMemoryFactor() * (kYamlBytesPerByte * yaml.size() + kYamlMargin))
        << levels << " levels: " << *peak << " bytes";
  }
  // Bytes of values: one long scalar, aliased.
  std::string yaml = absl::StrCat("long: &s ", std::string(300000, 'x'), "\nlist: [*s, *s, *s, *s]\n");
  EXPECT_THAT(std::string(ConfigFileArguments(yaml, "long.yaml").status().message()),
              HasSubstr("--config=long.yaml: line 2: its aliases expand it past 1048576 bytes of values, the most a "
                        "config file may hold (kMaxYamlScalarBytes)"));
  // Depth: each anchor holds the one before 100 levels down (and the top mapping is a level).
  yaml = "d0: &d0 x\n";
  for (int i = 1; i <= 6; ++i) {
    yaml += absl::StrCat("d", i, ": &d", i, " ", std::string(100, '['), "*d", i - 1, std::string(100, ']'), "\n");
  }
  EXPECT_THAT(std::string(ConfigFileArguments(yaml, "deep.yaml").status().message()),
              HasSubstr("--config=deep.yaml: line 6: its aliases nest it 501 levels deep, past the 499 a config file "
                        "may nest (kMaxYamlDepth)"));
  // Without aliases the node limit holds too: a list of 100,001 values.
  std::string many = "model: {hidden_sizes: [1";
  for (int i = 0; i < 100000; ++i) many += ", 1";
  many += "]}\n";
  EXPECT_THAT(std::string(ConfigFileArguments(many, "many.yaml").status().message()),
              HasSubstr("expand it past 100000 nodes"));
}

// Aliases within the budget read as written; and a file at the node limit stays within the memory bound.
TEST_F(ConfigFileTest, AliasesWithinTheBudgetAreRead) {
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(
      "trainer:\n  callbacks:\n  - class_path: ModelCheckpoint\n    init_args: {monitor: &m val_acc, mode: max}\n"
      "  - class_path: EarlyStopping\n    init_args: {monitor: *m, mode: max}\n",
      "aliases.yaml");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, Contains("--checkpoint_monitor=val_acc"));
  EXPECT_THAT(*args, Contains("--early_stopping_monitor=val_acc"));
  std::string many = "model: {hidden_sizes: [1";
  for (int i = 0; i < 99990; ++i) many += ", 1";
  many += "]}\n";
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { args = ConfigFileArguments(many, "many.yaml"); });
  ASSERT_TRUE(peak.ok()) << peak.status();
  EXPECT_LE(*peak, SanitizerMemoryFactor() * (kYamlBytesPerByte * many.size() + kYamlMargin))
      << *peak << " bytes for " << many.size();
  std::printf("many.yaml: %zu bytes, peak %llu bytes (%.1f per byte)\n", many.size(),
              static_cast<unsigned long long>(*peak), static_cast<double>(*peak) / many.size());
}

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path) << text;
  return path;
}

std::string Unchanged(const std::string& path) { return path; }

TEST_F(ConfigFileTest, CommandLineFlagsOverrideEveryConfigFileAndLaterFilesOverrideEarlierOnes) {
  const std::string first = TempFile("first.yaml", "trainer: {max_epochs: 1, max_steps: 5}\n");
  const std::string second = TempFile("second.yaml", "trainer: {max_epochs: 2}\n");
  absl::StatusOr<std::vector<std::string>> args =
      ApplyConfigFiles({"fit", "--max_epochs=9", "--config=" + first, "--config", second}, Unchanged);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(*args, ElementsAre("fit", "--max_epochs=1", "--max_steps=5", "--max_epochs=2", "--max_epochs=9",
                                 "--config=" + first, "--config", second));
}

TEST_F(ConfigFileTest, FilesThatCannotBeReadAreNamed) {
  EXPECT_THAT(std::string(ApplyConfigFiles({"fit", "--config=/no/such.yaml"}, Unchanged).status().message()),
              HasSubstr("--config=/no/such.yaml: No such file or directory; pass an existing config file"));
  EXPECT_THAT(std::string(ApplyConfigFiles({"fit", "--config=/dev/zero"}, Unchanged).status().message()),
              HasSubstr("--config=/dev/zero is not a regular file"));
  EXPECT_THAT(std::string(ApplyConfigFiles({"fit", "--config"}, Unchanged).status().message()),
              HasSubstr("--config needs a value"));
  const std::string bad = TempFile("bad.yaml", "trainer:\n  max_epochs: 1\n  devices: [\n");
  EXPECT_THAT(std::string(ApplyConfigFiles({"fit", "--config=" + bad}, Unchanged).status().message()),
              HasSubstr("--config=" + bad + ": line "));
  // After "--", nothing is a flag.
  absl::StatusOr<std::vector<std::string>> args = ApplyConfigFiles({"fit", "--", "--config=/no/such.yaml"}, Unchanged);
  ASSERT_TRUE(args.ok());
  EXPECT_THAT(*args, ElementsAre("fit", "--", "--config=/no/such.yaml"));
}

}  // namespace
}  // namespace kiln
