#include "trainer/trainer_options.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "trainer/profilers/profiler.h"
#include "trainer/strategies/fsdp_options.h"
#include "trainer/strategies/model_parallel_options.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

constexpr char kBatchLimit[] =
    "pass an int number of batches >= 0 (e.g. 10) or a fraction in [0.0, 1.0] written with a '.' (e.g. 0.25)";
constexpr char kValCheckInterval[] =
    "pass a fraction of an epoch in (0.0, 1.0] (e.g. 0.25) or a number of training batches >= 1";
constexpr char kMaxTime[] =
    "pass a positive time as DD:HH:MM:SS (e.g. 00:01:30:00) or a duration such as 90s, 5m or 1h30m";

OptionCheck Refuse(std::string value, std::string accepted) {
  return OptionError{std::move(value), std::move(accepted)};
}

OptionCheck AtLeast(int64_t value, int64_t minimum, absl::string_view meaning = "") {
  if (value >= minimum) return std::nullopt;
  return Refuse(absl::StrCat(value), absl::StrCat("pass an int >= ", minimum, meaning));
}

OptionCheck OneOf(const std::string& value, absl::string_view a, absl::string_view b, absl::string_view accepted) {
  if (value == a || value == b) return std::nullopt;
  return Refuse(value, std::string(accepted));
}

// A BatchLimit as fit writes it: a fraction has a '.' (or an exponent), a count has none.
std::optional<BatchLimit> ParseBatchLimit(const std::string& value) {
  if (value.find_first_of(".eE") != std::string::npos) {
    double fraction = 0;
    if (absl::SimpleAtod(value, &fraction)) return BatchLimit(fraction);
  } else {
    int64_t count = 0;
    if (absl::SimpleAtoi(value, &count)) return BatchLimit(count);
  }
  return std::nullopt;
}

OptionCheck SetBatchLimit(BatchLimit& limit, const std::string& value, const char* accepted) {
  std::optional<BatchLimit> parsed = ParseBatchLimit(value);
  if (!parsed.has_value()) return Refuse(value, accepted);
  limit = *parsed;
  return std::nullopt;
}

// >= 0 batches, or a fraction in [0, 1].
OptionCheck CheckBatchLimit(const BatchLimit& limit) {
  if (limit.Resolve(0, "").ok()) return std::nullopt;
  return Refuse(limit.ToString(), kBatchLimit);
}

// Lightning's DD:HH:MM:SS, or an Abseil duration (90s, 1h30m).
std::optional<absl::Duration> ParseMaxTime(const std::string& value) {
  if (absl::StrContains(value, ':')) {
    std::vector<absl::string_view> parts = absl::StrSplit(value, ':');
    int64_t numbers[4];
    bool ok = parts.size() == 4;
    // Each part below 10^9 keeps the sum far from overflow (10^9 days is 2.7 million years).
    for (size_t i = 0; ok && i < 4; ++i) {
      ok = absl::SimpleAtoi(parts[i], &numbers[i]) && numbers[i] >= 0 && numbers[i] < 1000000000;
    }
    if (!ok) return std::nullopt;
    return absl::Hours(24 * numbers[0]) + absl::Hours(numbers[1]) + absl::Minutes(numbers[2]) +
           absl::Seconds(numbers[3]);
  }
  absl::Duration duration;
  if (!absl::ParseDuration(value, &duration)) return std::nullopt;
  return duration;
}

}  // namespace

// Hardware: the connector checks these (ResolvePlan), so that fit, the library and //tools:resolve refuse a value
// with the same words.
OptionCheck SetTrainerOption_accelerator(TrainerOptions& options, const std::string& value) {
  options.accelerator = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_accelerator(const TrainerOptions&) { return std::nullopt; }

OptionCheck SetTrainerOption_devices(TrainerOptions& options, const std::string& value) {
  options.devices = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_devices(const TrainerOptions&) { return std::nullopt; }

OptionCheck SetTrainerOption_strategy(TrainerOptions& options, const std::string& value) {
  options.strategy = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_strategy(const TrainerOptions&) { return std::nullopt; }

OptionCheck SetTrainerOption_precision(TrainerOptions& options, const std::string& value) {
  options.precision = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_precision(const TrainerOptions&) { return std::nullopt; }

OptionCheck SetTrainerOption_num_nodes(TrainerOptions& options, const int& value) {
  options.num_nodes = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_num_nodes(const TrainerOptions&) { return std::nullopt; }

OptionCheck SetTrainerOption_process_group_timeout(TrainerOptions& options, const double& seconds) {
  if (!(seconds > 0)) return Refuse(absl::StrCat(seconds), "pass a number of seconds > 0");
  options.process_group_timeout = absl::Seconds(seconds);
  return std::nullopt;
}
OptionCheck CheckTrainerOption_process_group_timeout(const TrainerOptions& options) {
  if (options.process_group_timeout > absl::ZeroDuration()) return std::nullopt;
  return Refuse(absl::FormatDuration(options.process_group_timeout), "pass a positive time");
}

OptionCheck SetTrainerOption_process_group_backend(TrainerOptions& options, const std::string& value) {
  options.process_group_backend = value;
  return std::nullopt;
}
// The strategy checks it against the device (a backend that cannot carry its tensors is refused there).
OptionCheck CheckTrainerOption_process_group_backend(const TrainerOptions&) { return std::nullopt; }

OptionCheck SetTrainerOption_sync_batchnorm(TrainerOptions& options, const bool& value) {
  options.sync_batchnorm = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_sync_batchnorm(const TrainerOptions&) { return std::nullopt; }

// model_parallel's sizes: "auto" or a positive count (ParseParallelSize's words).
OptionCheck CheckParallelSize(const char* name, const std::string& value) {
  absl::StatusOr<std::optional<int>> parsed = ParseParallelSize(name, value);
  if (parsed.ok()) return std::nullopt;
  return Refuse(value, "pass \"auto\" or a positive number of devices");
}
OptionCheck SetTrainerOption_data_parallel_size(TrainerOptions& options, const std::string& value) {
  options.data_parallel_size = value;
  return CheckParallelSize("data_parallel_size", value);
}
OptionCheck CheckTrainerOption_data_parallel_size(const TrainerOptions& options) {
  return CheckParallelSize("data_parallel_size", options.data_parallel_size);
}
OptionCheck SetTrainerOption_tensor_parallel_size(TrainerOptions& options, const std::string& value) {
  options.tensor_parallel_size = value;
  return CheckParallelSize("tensor_parallel_size", value);
}
OptionCheck CheckTrainerOption_tensor_parallel_size(const TrainerOptions& options) {
  return CheckParallelSize("tensor_parallel_size", options.tensor_parallel_size);
}
OptionCheck SetTrainerOption_save_distributed_checkpoint(TrainerOptions& options, const bool& value) {
  options.save_distributed_checkpoint = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_save_distributed_checkpoint(const TrainerOptions&) { return std::nullopt; }

// The strategy's own options: each row of trainer/strategies/fsdp_options.inc sets and checks its field of
// TrainerOptions::fsdp, by the field's type (SetFsdpField, CheckFsdpField).
#define KILN_FSDP_OPTION(type, name, field, fit_default, init_arg, help)                                   \
  OptionCheck SetTrainerOption_##name(TrainerOptions& options, const type& value) {                       \
    std::optional<std::string> accepted = SetFsdpField(options.fsdp.field, value);                          \
    if (!accepted.has_value()) return std::nullopt;                                                         \
    return Refuse(absl::StrCat(value), *std::move(accepted));                                                \
  }                                                                                                         \
  OptionCheck CheckTrainerOption_##name(const TrainerOptions& options) {                                  \
    std::optional<std::string> accepted = CheckFsdpField(options.fsdp.field);                               \
    if (!accepted.has_value()) return std::nullopt;                                                         \
    return Refuse(FsdpFieldText(options.fsdp.field), *std::move(accepted));                                  \
  }
#include "trainer/strategies/fsdp_options.inc"

// The loop.
OptionCheck SetTrainerOption_seed(TrainerOptions& options, const int64_t& value) {
  if (value < 0) return AtLeast(value, 0);
  options.seed = static_cast<uint64_t>(value);
  return std::nullopt;
}
OptionCheck CheckTrainerOption_seed(const TrainerOptions&) { return std::nullopt; }  // Every uint64 seeds.

OptionCheck SetTrainerOption_max_epochs(TrainerOptions& options, const int64_t& value) {
  options.max_epochs = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_max_epochs(const TrainerOptions& options) {
  return options.max_epochs.has_value() ? AtLeast(*options.max_epochs, -1, " (-1: no limit)") : std::nullopt;
}

// fit's 0 is the library's unset: no minimum.
OptionCheck SetTrainerOption_min_epochs(TrainerOptions& options, const int64_t& value) {
  options.min_epochs = value == 0 ? std::nullopt : std::optional<int64_t>(value);
  return std::nullopt;
}
OptionCheck CheckTrainerOption_min_epochs(const TrainerOptions& options) {
  return options.min_epochs.has_value() ? AtLeast(*options.min_epochs, 0) : std::nullopt;
}

OptionCheck SetTrainerOption_max_steps(TrainerOptions& options, const int64_t& value) {
  options.max_steps = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_max_steps(const TrainerOptions& options) {
  return AtLeast(options.max_steps, -1, " (-1: no limit)");
}

// fit's empty text is the library's unset: no limit.
OptionCheck SetTrainerOption_max_time(TrainerOptions& options, const std::string& value) {
  if (value.empty()) {
    options.max_time.reset();
    return std::nullopt;
  }
  std::optional<absl::Duration> duration = ParseMaxTime(value);
  if (!duration.has_value()) return Refuse(value, kMaxTime);
  options.max_time = *duration;
  return CheckTrainerOption_max_time(options).has_value() ? Refuse(value, kMaxTime) : std::nullopt;
}
OptionCheck CheckTrainerOption_max_time(const TrainerOptions& options) {
  if (!options.max_time.has_value() ||
      (*options.max_time > absl::ZeroDuration() && *options.max_time != absl::InfiniteDuration())) {
    return std::nullopt;
  }
  return Refuse(absl::FormatDuration(*options.max_time), kMaxTime);
}

OptionCheck SetTrainerOption_limit_train_batches(TrainerOptions& options, const std::string& value) {
  return SetBatchLimit(options.limit_train_batches, value, kBatchLimit);
}
OptionCheck CheckTrainerOption_limit_train_batches(const TrainerOptions& options) {
  return CheckBatchLimit(options.limit_train_batches);
}
OptionCheck SetTrainerOption_limit_val_batches(TrainerOptions& options, const std::string& value) {
  return SetBatchLimit(options.limit_val_batches, value, kBatchLimit);
}
OptionCheck CheckTrainerOption_limit_val_batches(const TrainerOptions& options) {
  return CheckBatchLimit(options.limit_val_batches);
}
OptionCheck SetTrainerOption_limit_test_batches(TrainerOptions& options, const std::string& value) {
  return SetBatchLimit(options.limit_test_batches, value, kBatchLimit);
}
OptionCheck CheckTrainerOption_limit_test_batches(const TrainerOptions& options) {
  return CheckBatchLimit(options.limit_test_batches);
}
OptionCheck SetTrainerOption_limit_predict_batches(TrainerOptions& options, const std::string& value) {
  return SetBatchLimit(options.limit_predict_batches, value, kBatchLimit);
}
OptionCheck CheckTrainerOption_limit_predict_batches(const TrainerOptions& options) {
  return CheckBatchLimit(options.limit_predict_batches);
}
OptionCheck SetTrainerOption_overfit_batches(TrainerOptions& options, const std::string& value) {
  return SetBatchLimit(options.overfit_batches, value, kBatchLimit);
}
OptionCheck CheckTrainerOption_overfit_batches(const TrainerOptions& options) {
  return CheckBatchLimit(options.overfit_batches);
}

OptionCheck SetTrainerOption_val_check_interval(TrainerOptions& options, const std::string& value) {
  return SetBatchLimit(options.val_check_interval, value, kValCheckInterval);
}
OptionCheck CheckTrainerOption_val_check_interval(const TrainerOptions& options) {
  if (!options.val_check_interval.is_zero() && options.val_check_interval.Resolve(0, "").ok()) return std::nullopt;
  return Refuse(options.val_check_interval.ToString(), kValCheckInterval);
}

OptionCheck SetTrainerOption_check_val_every_n_epoch(TrainerOptions& options, const int64_t& value) {
  options.check_val_every_n_epoch = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_check_val_every_n_epoch(const TrainerOptions& options) {
  return AtLeast(options.check_val_every_n_epoch, 1);
}

OptionCheck SetTrainerOption_num_sanity_val_steps(TrainerOptions& options, const int64_t& value) {
  options.num_sanity_val_steps = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_num_sanity_val_steps(const TrainerOptions& options) {
  return AtLeast(options.num_sanity_val_steps, -1, " (-1: all)");
}

OptionCheck SetTrainerOption_accumulate_grad_batches(TrainerOptions& options, const int64_t& value) {
  options.accumulate_grad_batches = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_accumulate_grad_batches(const TrainerOptions& options) {
  return AtLeast(options.accumulate_grad_batches, 1);
}

// fit's 0 is the library's unset: no clipping.
OptionCheck SetTrainerOption_gradient_clip_val(TrainerOptions& options, const double& value) {
  options.gradient_clip_val = value == 0.0 ? std::nullopt : std::optional<double>(value);
  return std::nullopt;
}
OptionCheck CheckTrainerOption_gradient_clip_val(const TrainerOptions& options) {
  if (!options.gradient_clip_val.has_value()) return std::nullopt;
  const double value = *options.gradient_clip_val;
  if (value >= 0 && std::isfinite(value)) return std::nullopt;
  return Refuse(absl::StrCat(value), "pass a finite value > 0 (0: no clipping)");
}

OptionCheck SetTrainerOption_gradient_clip_algorithm(TrainerOptions& options, const std::string& value) {
  options.gradient_clip_algorithm = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_gradient_clip_algorithm(const TrainerOptions& options) {
  return OneOf(options.gradient_clip_algorithm, "norm", "value", "pass norm or value");
}

OptionCheck SetTrainerOption_on_nonfinite_loss(TrainerOptions& options, const std::string& value) {
  options.on_nonfinite_loss = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_on_nonfinite_loss(const TrainerOptions& options) {
  return OneOf(options.on_nonfinite_loss, "stop", "skip", "pass 'stop' or 'skip'");
}

// Lightning's fast_dev_run is a bool or an int: true is one batch.
OptionCheck SetTrainerOption_fast_dev_run(TrainerOptions& options, const std::string& value) {
  if (value == "true" || value == "True") {
    options.fast_dev_run = 1;
  } else if (value == "false" || value == "False") {
    options.fast_dev_run = 0;
  } else if (!absl::SimpleAtoi(value, &options.fast_dev_run) || options.fast_dev_run < 0) {
    return Refuse(value, "pass true, false or an int N >= 0 (N batches; 0: off)");
  }
  return std::nullopt;
}
OptionCheck CheckTrainerOption_fast_dev_run(const TrainerOptions& options) {
  if (options.fast_dev_run >= 0) return std::nullopt;
  return Refuse(absl::StrCat(options.fast_dev_run), "pass true, false or an int N >= 0 (N batches; 0: off)");
}

OptionCheck SetTrainerOption_deterministic(TrainerOptions& options, const bool& value) {
  options.deterministic = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_deterministic(const TrainerOptions&) { return std::nullopt; }

// Checkpoints.
OptionCheck SetTrainerOption_default_root_dir(TrainerOptions& options, const std::string& value) {
  options.default_root_dir = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_default_root_dir(const TrainerOptions& options) {
  if (!options.default_root_dir.empty()) return std::nullopt;
  return Refuse("", "pass a folder (it is created when needed), e.g. . or runs");
}

OptionCheck SetTrainerOption_enable_checkpointing(TrainerOptions& options, const bool& value) {
  options.enable_checkpointing = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_enable_checkpointing(const TrainerOptions&) { return std::nullopt; }

// Outputs.
OptionCheck SetTrainerOption_log_every_n_steps(TrainerOptions& options, const int64_t& value) {
  options.log_every_n_steps = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_log_every_n_steps(const TrainerOptions& options) {
  return AtLeast(options.log_every_n_steps, 0, " (0: only epoch metrics)");
}

OptionCheck SetTrainerOption_enable_progress_bar(TrainerOptions& options, const bool& value) {
  options.enable_progress_bar = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_enable_progress_bar(const TrainerOptions&) { return std::nullopt; }

OptionCheck SetTrainerOption_enable_model_summary(TrainerOptions& options, const bool& value) {
  options.enable_model_summary = value;
  return std::nullopt;
}
OptionCheck CheckTrainerOption_enable_model_summary(const TrainerOptions&) { return std::nullopt; }

OptionCheck SetTrainerOption_profiler(TrainerOptions& options, const std::string& value) {
  options.profiler = value;
  return CheckTrainerOption_profiler(options);
}
OptionCheck CheckTrainerOption_profiler(const TrainerOptions& options) {
  const std::string& name = options.profiler.name();
  if (name.empty()) return std::nullopt;
  for (const std::string& known : ProfilerNames()) {
    if (name == known) return std::nullopt;
  }
  return Refuse(name, absl::StrCat("pass ", absl::StrJoin(ProfilerNames(), ", "),
                                   " (Lightning's names; its xla has no Kiln counterpart), a profiler object of your "
                                   "own (kiln::Profiler), or nothing for no profiler"));
}

namespace {

// A profiler object has its own dirpath and filename (Profiler's constructor): these two are a named profiler's.
OptionCheck RefuseBesideProfilerObject(const TrainerOptions& options, const std::string& value) {
  if (options.profiler.instance() == nullptr || value.empty()) return std::nullopt;
  return Refuse(value, "leave it empty when profiler is a profiler object: give the object its dirpath and filename "
                       "(kiln::Profiler(dirpath, filename)), or name the profiler (simple, advanced, pytorch)");
}

}  // namespace

OptionCheck SetTrainerOption_profiler_dirpath(TrainerOptions& options, const std::string& value) {
  options.profiler_dirpath = value;
  return CheckTrainerOption_profiler_dirpath(options);
}
OptionCheck CheckTrainerOption_profiler_dirpath(const TrainerOptions& options) {
  return RefuseBesideProfilerObject(options, options.profiler_dirpath);
}

OptionCheck SetTrainerOption_profiler_filename(TrainerOptions& options, const std::string& value) {
  options.profiler_filename = value;
  return CheckTrainerOption_profiler_filename(options);
}
OptionCheck CheckTrainerOption_profiler_filename(const TrainerOptions& options) {
  return RefuseBesideProfilerObject(options, options.profiler_filename);
}

const std::vector<TrainerOptionSpec>& TrainerOptionSpecs() {
  static const std::vector<TrainerOptionSpec>* specs = new std::vector<TrainerOptionSpec>{
#define KILN_TRAINER_OPTION(group, type, name, fit_default, section, key, help) {#name, &CheckTrainerOption_##name},
#include "trainer/trainer_options.inc"
  };
  return *specs;
}

// TrainerOptions' deprecated text fields of fsdp's options (remove with them): each one that differs from its default
// goes through its row's setter, as fit's flag would.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
absl::StatusOr<FSDPOptions> EffectiveFsdpOptions(const TrainerOptions& options) {
  static const TrainerOptions* const defaults = new TrainerOptions();
  TrainerOptions parsed;
  parsed.fsdp = options.fsdp;
#define KILN_DEPRECATED_FSDP_TEXT(name)                                                                         \
  if (options.name != defaults->name) {                                                                         \
    if (OptionCheck refused = SetTrainerOption_##name(parsed, options.name)) {                                  \
      return absl::InvalidArgumentError(absl::StrCat(#name, "=", refused->value, " is not valid; ", refused->accepted)); \
    }                                                                                                           \
  }
  KILN_DEPRECATED_FSDP_TEXT(sharding_strategy)
  KILN_DEPRECATED_FSDP_TEXT(auto_wrap_policy)
  KILN_DEPRECATED_FSDP_TEXT(auto_wrap_min_num_params)
  KILN_DEPRECATED_FSDP_TEXT(activation_checkpointing_policy)
  KILN_DEPRECATED_FSDP_TEXT(state_dict_type)
#undef KILN_DEPRECATED_FSDP_TEXT
  return parsed.fsdp;
}
#pragma GCC diagnostic pop

absl::Status CheckTrainerOptions(const TrainerOptions& options) {
  for (const TrainerOptionSpec& spec : TrainerOptionSpecs()) {
    if (spec.check == &CheckTrainerOption_strategy) {
      // fsdp's deprecated text fields, where their rows (after `strategy`) are checked.
      if (absl::StatusOr<FSDPOptions> fsdp = EffectiveFsdpOptions(options); !fsdp.ok()) return fsdp.status();
    }
    if (OptionCheck refused = spec.check(options); refused.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.name, "=", refused->value, " is not valid; ", refused->accepted));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> ModuleTypeNames(absl::string_view list) { return SplitModuleTypes(list); }

}  // namespace kiln
