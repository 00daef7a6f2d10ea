// Fuzz target: `//trainer:fit`'s command line, as fit_main.cc reads it: the expansion of flag files and variables
// (ExpandCommandLine), the command-line check that runs before Abseil's parser (trainer/cli/command_line.h), then every
// flag value that is parsed or checked by hand (trainer/cli/fit_config.h: batch limits, --max_time, layer sizes,
// loggers, paths, the learning-rate schedule, ...), and the precision flag (connector.h: ParsePrecisionFlag, shared by
// fit, resolve and the Trainer). `--devices` has a target of its own (devices_fuzzer.cc).
//
// Input: the arguments after the program name, one per line ("--max_time=00:01:00:00\n--hidden_sizes=8,8"); or,
// when the first line is "#flagfile", a flag file's text, written to a file that fit is given as --flagfile.
//
// What must hold: no crash and no undefined behaviour; the expansion, the check and the configuration fail only with
// InvalidArgument, and the configuration's errors name a flag ("--..."); a configuration that is accepted holds only
// values the trainer can run with (see CheckConfig). Every input starts from the flags' defaults.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "connector/connector.h"
#include "hal/precision.h"
#include "tests/fuzz/fuzz_support.h"
#include "torch/optim/sgd.h"
#include "trainer/cli/command_line.h"
#include "trainer/cli/fit_config.h"
#include "trainer/optim/lr_scheduler_options.h"

namespace kiln {
namespace {

void CheckBatchLimit(const BatchLimit& limit, bool may_be_zero, const std::string& what) {
  // Any accepted limit resolves against any number of batches, to at most that number.
  for (int64_t available : {int64_t{0}, int64_t{1}, int64_t{1000}}) {
    const absl::StatusOr<int64_t> batches = limit.Resolve(available, what);
    KILN_FUZZ_CHECK(batches.ok(), what + "=" + limit.ToString() + ": " + batches.status().ToString());
    KILN_FUZZ_CHECK(*batches >= 0 && *batches <= std::max<int64_t>(available, 0), what + "=" + limit.ToString());
  }
  KILN_FUZZ_CHECK(may_be_zero || !limit.is_zero(), what + "=" + limit.ToString());
}

void CheckSizes(const std::vector<int64_t>& sizes, const std::string& what) {
  for (int64_t size : sizes) KILN_FUZZ_CHECK(size >= 1 && size <= kMaxLayerSize, what);
}

// What an accepted configuration must hold: values the trainer and the factories can run with.
void CheckConfig(const FitConfig& config) {
  KILN_FUZZ_CHECK(config.mode == "fit" || config.mode == "validate" || config.mode == "test" || config.mode == "predict",
                  config.mode);
  const TrainerOptions& trainer = config.trainer;
  CheckBatchLimit(trainer.limit_train_batches, true, "limit_train_batches");
  CheckBatchLimit(trainer.limit_val_batches, true, "limit_val_batches");
  CheckBatchLimit(trainer.limit_predict_batches, true, "limit_predict_batches");
  CheckBatchLimit(trainer.overfit_batches, true, "overfit_batches");
  CheckBatchLimit(trainer.val_check_interval, false, "val_check_interval");
  if (trainer.max_time.has_value()) {
    KILN_FUZZ_CHECK(*trainer.max_time > absl::ZeroDuration() && *trainer.max_time != absl::InfiniteDuration(),
                    "max_time");
  }
  KILN_FUZZ_CHECK(trainer.process_group_timeout > absl::ZeroDuration(), "process_group_timeout");
  KILN_FUZZ_CHECK(trainer.accumulate_grad_batches >= 1, "accumulate_grad_batches");
  if (trainer.gradient_clip_val.has_value()) {
    KILN_FUZZ_CHECK(std::isfinite(*trainer.gradient_clip_val) && *trainer.gradient_clip_val > 0, "gradient_clip_val");
  }
  KILN_FUZZ_CHECK(!trainer.default_root_dir.empty(), "default_root_dir");

  const DataSpec& data = config.data;
  KILN_FUZZ_CHECK(data.val_fraction >= 0.0 && data.val_fraction < 1.0, "val_fraction");
  KILN_FUZZ_CHECK(data.batch_size >= 1 && !data.label_column.empty(), "batch_size, label_column");
  KILN_FUZZ_CHECK(data.num_workers >= 0 && data.num_workers <= kMaxNumWorkers, "num_workers");

  const ModelSpec& model = config.model;
  CheckSizes(model.hidden_sizes, "hidden_sizes");
  CheckSizes(model.channels, "channels");
  CheckSizes(model.input_shape, "input_shape");
  KILN_FUZZ_CHECK(!model.channels.empty(), "channels");
  KILN_FUZZ_CHECK(model.input_shape.empty() || model.input_shape.size() == 3, "input_shape");
  KILN_FUZZ_CHECK(model.kernel_size >= 1 && model.kernel_size % 2 == 1, "kernel_size");
  KILN_FUZZ_CHECK(model.optimizer == "adam" || model.optimizer == "sgd", model.optimizer);
  KILN_FUZZ_CHECK(std::isfinite(model.learning_rate) && model.learning_rate > 0, "learning_rate");

  const OutputSpec& outputs = config.outputs;
  for (size_t i = 0; i < outputs.loggers.size(); ++i) {
    KILN_FUZZ_CHECK(outputs.loggers[i] == "csv" || outputs.loggers[i] == "tensorboard", outputs.loggers[i]);
    for (size_t j = 0; j < i; ++j) KILN_FUZZ_CHECK(outputs.loggers[i] != outputs.loggers[j], "logger twice");
  }
  KILN_FUZZ_CHECK(!absl::StrContains(outputs.log_dir.name, '/'), outputs.log_dir.name);
  KILN_FUZZ_CHECK(outputs.checkpoint.every_n_train_steps >= 0, "every_n_train_steps");
  KILN_FUZZ_CHECK(outputs.checkpoint.save_top_k >= -1, "save_top_k");
  KILN_FUZZ_CHECK(outputs.checkpoint.mode == "min" || outputs.checkpoint.mode == "max", outputs.checkpoint.mode);
  KILN_FUZZ_CHECK(outputs.checkpoint.every_n_epochs.value_or(0) >= 0, "every_n_epochs");
  if (outputs.early_stopping.has_value()) {
    KILN_FUZZ_CHECK(!outputs.early_stopping->monitor.empty(), "early_stopping_monitor");
    KILN_FUZZ_CHECK(outputs.early_stopping->patience >= 0, "patience");
    KILN_FUZZ_CHECK(outputs.early_stopping->min_delta >= 0, "min_delta");
    KILN_FUZZ_CHECK(outputs.early_stopping->mode == "min" || outputs.early_stopping->mode == "max", "mode");
  }
  KILN_FUZZ_CHECK(config.trainer.fast_dev_run >= 0, "fast_dev_run");

  // An accepted schedule builds: every setting the scheduler flags let through is one the schedulers take. A step
  // schedule's length comes from the run (estimated_stepping_batches); any length past the warm-up will do here.
  const LRSchedulerOptions& schedule = model.lr_scheduler;
  KILN_FUZZ_CHECK(schedule.frequency >= 1, "lr_scheduler_frequency");
  KILN_FUZZ_CHECK(schedule.name != "plateau" || !schedule.monitor.empty(), "lr_scheduler_monitor");
  if (schedule.warmup_iters < (int64_t{1} << 40)) {
    at::Tensor weight = at::zeros({1}, at::TensorOptions().requires_grad(true));
    torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(model.learning_rate));
    try {
      MakeLRSchedulers(optimizer, schedule, schedule.warmup_iters + 1000);
    } catch (const c10::Error& e) {
      KILN_FUZZ_CHECK(false, e.what_without_backtrace());
    }
  }

  // The precision is checked by the connector when the run starts; its parser must agree with itself.
  std::vector<std::string> warnings;
  const absl::StatusOr<Precision> precision = ParsePrecisionFlag(trainer.precision, &warnings);
  if (!precision.ok()) {
    KILN_FUZZ_CHECK(precision.status().code() == absl::StatusCode::kInvalidArgument, trainer.precision);
    KILN_FUZZ_CHECK(warnings.empty(), trainer.precision);
    return;
  }
  // The canonical name reads back as itself, silently.
  const std::string canonical(PrecisionName(*precision));
  std::vector<std::string> none;
  const absl::StatusOr<Precision> again = ParsePrecisionFlag(canonical, &none);
  KILN_FUZZ_CHECK(again.ok() && *again == *precision && none.empty(), canonical);
  KILN_FUZZ_CHECK(PrecisionFromName(canonical) == *precision, canonical);
}

// Sets every flag back to its value before the first input. (absl::FlagSaver does the same but logs a line per flag
// in Debian's Abseil, which would slow fuzzing down tenfold.)
class FlagRestorer {
 public:
  FlagRestorer() {
    for (const auto& [name, flag] : absl::GetAllFlags()) initial_.emplace_back(flag, flag->CurrentValue());
  }

  void Restore() const {
    for (const auto& [flag, value] : initial_) {
      if (flag->CurrentValue() == value) continue;
      std::string error;
      KILN_FUZZ_CHECK(flag->ParseFrom(value, &error), "cannot restore --" + std::string(flag->Name()) + ": " + error);
    }
  }

 private:
  std::vector<std::pair<absl::CommandLineFlag*, std::string>> initial_;
};

}  // namespace
}  // namespace kiln

static std::string FlagFilePath() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/flag_values_fuzz." + std::to_string(getpid()) + ".flags";
}

static std::string SamePath(const std::string& path) { return path; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> given = {"fit"};
  if (absl::StartsWith(text, "#flagfile")) {
    const size_t newline = text.find('\n');
    const std::string path = FlagFilePath();
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        << (newline == std::string::npos ? "" : text.substr(newline + 1));
    given.push_back("--flagfile=" + path);
  } else if (!text.empty()) {
    for (absl::string_view line : absl::StrSplit(text, '\n')) given.emplace_back(line);
  }
  const absl::StatusOr<std::vector<std::string>> expanded = kiln::ExpandCommandLine(given, SamePath);
  if (!expanded.ok()) {
    KILN_FUZZ_CHECK(expanded.status().code() == absl::StatusCode::kInvalidArgument, expanded.status().ToString());
    return 0;
  }
  std::vector<std::string> arguments = *expanded;
  std::vector<char*> argv = kiln::ArgvOf(arguments);
  const int argc = static_cast<int>(arguments.size());

  static const kiln::FlagRestorer* const flags = new kiln::FlagRestorer();
  flags->Restore();
  if (kiln::WantsHelp(argc, argv.data())) return 0;  // fit prints --help and exits; nothing is parsed.
  const absl::Status checked = kiln::CheckCommandLine(argc, argv.data());
  if (!checked.ok()) {
    KILN_FUZZ_CHECK(checked.code() == absl::StatusCode::kInvalidArgument, checked.ToString());
    return 0;
  }
  const absl::StatusOr<kiln::FitConfig> config = kiln::FitConfigFromFlags();
  if (!config.ok()) {
    KILN_FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument, config.status().ToString());
    KILN_FUZZ_CHECK(absl::StartsWith(config.status().message(), "--"), config.status().ToString());
    return 0;
  }
  kiln::CheckConfig(*config);
  return 0;
}
