// kiln::TrainerOptions, the options of kiln::Trainer (Lightning's Trainer arguments), and the table they are written
// in (trainer_options.inc): each option's setter from fit's flag value and its one check, which the library (Trainer,
// before any device is touched) and `fit` (FitConfigFromFlags) both run. trainer/trainer.h includes this file.
#ifndef KILN_TRAINER_TRAINER_OPTIONS_H_
#define KILN_TRAINER_TRAINER_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "connector/options.h"
#include "hal/registry.h"
#include "trainer/core/callback.h"
#include "trainer/core/logger.h"
#include "trainer/profilers/profiler.h"
#include "trainer/strategies/fsdp_options.h"

namespace kiln {

class PrecisionPlugin;

// Lightning's `limit_*_batches`, `val_check_interval` and `overfit_batches`: an int is a number of batches, a
// double a fraction of the loader.
class BatchLimit {
 public:
  BatchLimit(int count) : value_(static_cast<int64_t>(count)) {}  // NOLINT(google-explicit-constructor)
  BatchLimit(int64_t count) : value_(count) {}                    // NOLINT(google-explicit-constructor)
  BatchLimit(double fraction) : value_(fraction) {}               // NOLINT(google-explicit-constructor)

  // The number of batches out of `available`, or an error naming `flag` for negative values and fractions above 1.
  absl::StatusOr<int64_t> Resolve(int64_t available, absl::string_view flag) const;
  bool is_fraction() const { return std::holds_alternative<double>(value_); }
  // The fraction 1.0: everything there is.
  bool is_whole() const { return is_fraction() && std::get<double>(value_) == 1.0; }
  bool is_zero() const;
  std::string ToString() const;

 private:
  std::variant<int64_t, double> value_;
};

// The deprecated fields' warnings are for programs that name them, not for every TrainerOptions made or copied (GCC
// reports the implicit constructors' use of them here).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct TrainerOptions {
  // Hardware and scale, resolved by the connector.
  AcceleratorFlag accelerator;  // "auto"
  Devices devices;              // "auto"
  StrategyFlag strategy;        // "auto", "single_device", "ddp", or a Strategy instance (e.g. a DDPStrategy).
  // ddp by name: how long joining and each collective may take before the run fails (PyTorch's default).
  absl::Duration process_group_timeout = absl::Minutes(30);
  // A distributed strategy's collective backend, as Lightning's DDPStrategy(process_group_backend=...): empty for
  // the accelerator's own (Accelerator::ProcessGroupBackend()); "gloo" runs the device's collectives over Gloo (a
  // CUDA device's tensors, or several processes sharing one GPU). The strategy refuses, before training, a backend
  // that cannot carry the device's tensors.
  std::string process_group_backend;
  // Deprecated after 0.2.0 (CHANGELOG.md's rule): fsdp's options as text. Set `fsdp` instead; where one of these
  // differs from its default it is parsed into `fsdp` (over what `fsdp` holds), and refused as its flag would be.
  [[deprecated("set TrainerOptions::fsdp.sharding_strategy")]] std::string sharding_strategy = "FULL_SHARD";
  [[deprecated("set TrainerOptions::fsdp.auto_wrap_policy.module_types")]] std::string auto_wrap_policy;
  [[deprecated("set TrainerOptions::fsdp.auto_wrap_policy.min_num_params")]] int64_t auto_wrap_min_num_params = 0;
  [[deprecated("set TrainerOptions::fsdp.activation_checkpointing_policy")]] std::string
      activation_checkpointing_policy;
  [[deprecated("set TrainerOptions::fsdp.state_dict_type")]] std::string state_dict_type = "full";
  // fsdp by name ("fsdp", "fsdp_cpu_offload"): its options (trainer/strategies/fsdp_options.h), which fit's flags,
  // config keys and a LightningCLI FSDPStrategy's init_args set. Refused with any other strategy when a row of
  // fsdp_options.inc differs from its default. Its timeout, process_group_backend and cpu_offload are not read: they
  // come from process_group_timeout, process_group_backend and the strategy's name. For an FSDPStrategy instance,
  // set its own FSDPOptions.
  FSDPOptions fsdp;
  // model_parallel by name: Lightning's ModelParallelStrategy(data_parallel_size, tensor_parallel_size), the device
  // mesh's shape, each "auto" or a positive count ("auto": the number of nodes, and the devices per node); their
  // product must be the world size. Refused with any other strategy when not "auto". For a ModelParallelStrategy
  // instance, set its own ModelParallelOptions.
  std::string data_parallel_size = "auto";
  std::string tensor_parallel_size = "auto";
  // model_parallel by name: Lightning's save_distributed_checkpoint (ModelParallelOptions'). Refused with any other
  // strategy when false.
  bool save_distributed_checkpoint = true;
  std::string precision = "32-true";
  int num_nodes = 1;
  // Lightning's sync_batchnorm: under a strategy of several processes (ddp, fsdp), fit converts every
  // torch::nn::BatchNorm{1,2,3}d registered in the module's tree into a kiln::SyncBatchNorm sharing its tensors
  // (trainer/core/sync_batch_norm.h), whose batch statistics are the whole global batch's, and puts them back when
  // fit ends. One process: nothing is converted. A BatchNorm called through a member rather than the registered
  // child would bypass it: fit stops after the first training batch naming it.
  bool sync_batchnorm = false;

  // Loops, with Lightning's defaults.
  std::optional<int64_t> max_epochs;       // Unset and max_steps == -1: 1000 epochs, with Lightning's warning.
  std::optional<int64_t> min_epochs;       // Early stopping cannot stop before this many epochs.
  int64_t max_steps = -1;                  // -1: no limit.
  std::optional<absl::Duration> max_time;  // Stops (through a Timer callback) after this much training time.
  BatchLimit limit_train_batches = 1.0;
  BatchLimit limit_val_batches = 1.0;
  BatchLimit limit_test_batches = 1.0;
  BatchLimit limit_predict_batches = 1.0;
  BatchLimit val_check_interval = 1.0;  // Fraction of an epoch, or every N training batches.
  int64_t check_val_every_n_epoch = 1;
  int64_t num_sanity_val_steps = 2;  // Validation batches run before training; -1 all.
  int64_t accumulate_grad_batches = 1;
  std::optional<double> gradient_clip_val;
  std::string gradient_clip_algorithm = "norm";  // "norm" or "value".
  int64_t log_every_n_steps = 50;
  int64_t fast_dev_run = 0;          // N > 0 (true = 1): N batches of everything, one epoch, no checkpoints.
  BatchLimit overfit_batches = 0.0;  // > 0: the same first batches every epoch, unshuffled.
  bool deterministic = false;        // LibTorch's deterministic algorithms.
  // A training loss that is NaN or infinite: "stop" fails fit naming the batch, before anything is applied;
  // "skip" drops that batch's accumulation window (no optimizer step) and goes on. Kiln never trains on it.
  std::string on_nonfinite_loss = "stop";
  std::optional<uint64_t> seed;  // Seeds LibTorch's generators when set.
  std::string default_root_dir = ".";

  // Extras, with Lightning's defaults (and fit's): logs, a checkpoint per epoch, the progress bar, the summary.
  std::vector<std::shared_ptr<Callback>> callbacks;
  std::vector<std::shared_ptr<Logger>> loggers;
  // Lightning's logger=True: with no `loggers` given, a CsvLogger and a TensorBoardLogger that share
  // <default_root_dir>/lightning_logs/version_<N> (fit's --logger=csv,tensorboard). false: no logger. fast_dev_run
  // logs nothing either way.
  bool logger = true;
  bool enable_checkpointing = true;  // Adds a ModelCheckpoint (last epoch) unless one is given.
  bool enable_progress_bar = true;   // On a terminal; rank zero only.
  bool enable_model_summary = true;  // Adds a ModelSummaryCallback (printed when fit starts) unless one is given.
  // Lightning's `profiler`: "simple", "advanced" or "pytorch" (trainer/profilers/profiler.h), or a profiler object
  // of the program's own (`std::make_shared<MyProfiler>(...)`, a class derived from kiln::Profiler); empty for none
  // (which costs the loops one null test per hook). `profiler_dirpath` and `profiler_filename` are a named
  // profiler's dirpath and filename (an object has its own; they are refused beside one): with a filename the report
  // goes to <dirpath>/<stage>-<filename>[-<local_rank>].txt, else to standard error (rank zero); dirpath defaults to
  // the run folder.
  ProfilerFlag profiler;
  std::string profiler_dirpath;
  std::string profiler_filename;
  // Replaces the plugin chosen from `precision` (precision_plugin.h), as a precision plugin in Lightning's
  // `plugins` does. Its precision must be one the accelerator declares; `precision` must then be left at its
  // default or name the same precision.
  std::shared_ptr<PrecisionPlugin> precision_plugin;

  // Where names are looked up; the default registry when null. Tests pass their own.
  const AcceleratorRegistry* registry = nullptr;
};
#pragma GCC diagnostic pop

// Why an option's value is refused: the value as written, and what is accepted ("pass an int >= 1"). The library
// writes it as `name=value is not valid; accepted`, fit as `--name='value' is not valid; accepted`.
struct OptionError {
  std::string value;
  std::string accepted;
};
using OptionCheck = std::optional<OptionError>;

// Per option <name> of trainer_options.inc:
//   SetTrainerOption_<name>(options, value): fit's flag value into TrainerOptions (a value that cannot be represented,
//     such as max_time's text that is no time, is refused here);
//   CheckTrainerOption_<name>(options): the option's one check of the value TrainerOptions holds.
#define KILN_TRAINER_OPTION(group, type, name, fit_default, section, key, help) \
  OptionCheck SetTrainerOption_##name(TrainerOptions& options, const type& value); \
  OptionCheck CheckTrainerOption_##name(const TrainerOptions& options);
#include "trainer/trainer_options.inc"

// One row of the table, for code that goes through every option.
struct TrainerOptionSpec {
  const char* name;
  OptionCheck (*check)(const TrainerOptions& options);
};

// Every option, in the table's order.
const std::vector<TrainerOptionSpec>& TrainerOptionSpecs();

// Every option's check, in the table's order: the first refused, as the library words it
// (InvalidArgument "name=value is not valid; accepted"), or OK.
absl::Status CheckTrainerOptions(const TrainerOptions& options);

// The fsdp options `options` asks for: TrainerOptions::fsdp, with each deprecated text field (sharding_strategy,
// auto_wrap_policy, ...) that differs from its default parsed over it; InvalidArgument as CheckTrainerOptions words it
// for text that does not parse (CheckTrainerOptions runs this too).
absl::StatusOr<FSDPOptions> EffectiveFsdpOptions(const TrainerOptions& options);

// The module type names of a comma-separated option (auto_wrap_policy, activation_checkpointing_policy), each without
// the spaces around it; empty entries dropped. Deprecated after 0.2.0 (CHANGELOG.md's rule): the same as
// SplitModuleTypes, beside the fsdp options it splits.
[[deprecated("use kiln::SplitModuleTypes (trainer/strategies/fsdp_options.h)")]]
std::vector<std::string> ModuleTypeNames(absl::string_view list);

}  // namespace kiln

#endif  // KILN_TRAINER_TRAINER_OPTIONS_H_
