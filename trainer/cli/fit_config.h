// FitConfig: everything `//trainer:fit` was asked to do, read from its flags (flags.h) and checked before anything
// is loaded or written. Every error is InvalidArgument and names the flag, the bad value and what is accepted;
// the caller prints it as one `error: ` line and exits 2.
//
// Checks that need the data or the model (a CSV file's cells, a TorchScript module's outputs, --input_shape against
// the feature count) happen when those are loaded (data_factory.h, model_factory.h).
#ifndef KILN_TRAINER_CLI_FIT_CONFIG_H_
#define KILN_TRAINER_CLI_FIT_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ATen/core/ivalue.h"
#include "absl/status/statusor.h"
#include "trainer/callbacks/early_stopping.h"
#include "trainer/callbacks/on_exception_checkpoint.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/callbacks/stochastic_weight_averaging.h"
#include "trainer/callbacks/weight_averaging.h"
#include "trainer/data/task.h"
#include "trainer/io/user_path.h"  // UserPath, which fit applies to every path flag.
#include "trainer/loggers/log_dir.h"
#include "trainer/loggers/mlflow_logger.h"
#include "trainer/loggers/wandb_logger.h"
#include "trainer/optim/lr_scheduler_options.h"
#include "trainer/synthetic_data.h"
#include "trainer/trainer.h"

namespace kiln {

// The largest layer width, channel count or input size the flags accept (2^26), so that sizes and their products
// stay far from int64 overflow. Whether a model of accepted sizes fits in memory is found when it is built.
inline constexpr int64_t kMaxLayerSize = int64_t{1} << 26;
// The most --num_workers: each worker is a thread and two batches in flight, and past a few per core they only cost.
inline constexpr int kMaxNumWorkers = 256;

struct DataSpec {
  std::string data = "synthetic";  // "synthetic", "digits", or the path of a CSV file.
  Task task = Task::kClassification;
  std::string label_column = "-1";
  double val_fraction = 0.2;
  int64_t batch_size = 64;
  bool shuffle = true;
  bool normalize = true;
  bool streaming = false;  // The training rows of the CSV file `data` as a stream (csv_stream.h).
  std::string val_data;    // --streaming: the validation rows' CSV file; empty: none.
  int num_workers = 2;
  uint64_t seed = 42;
  std::string digits_path;
  SyntheticOptions synthetic;
  std::string predict_data;  // A CSV file to predict on; empty: the validation rows.
  // --mode=validate/predict: the checkpoint's "TabularData" (saved_run.h), or None. With it, a table uses the
  // checkpoint's classes and feature statistics, and rows to predict on need no training file.
  c10::IValue saved_state;
};

struct ModelSpec {
  std::string model = "mlp";  // "mlp", "cnn", or the path of a TorchScript module.
  std::vector<int64_t> hidden_sizes = {64, 64};
  std::vector<int64_t> channels = {16, 32};
  int64_t kernel_size = 3;
  std::vector<int64_t> input_shape;  // Empty: as the data gives it (cnn: a square image when it can).
  std::string optimizer = "adam";
  bool fused_optimizer = true;  // LibTorch's fused kernels where it has them (trainer/optim/fused_optimizers.h).
  double learning_rate = 1e-3;
  double momentum = 0.9;                // sgd.
  std::optional<double> weight_decay;  // Unset: PyTorch's default.
  // The --lr_scheduler flags; a schedule over epochs has T_max and total_steps filled from --max_epochs.
  LRSchedulerOptions lr_scheduler;
};

struct OutputSpec {
  std::vector<std::string> loggers;  // "csv", "tensorboard", "mlflow", "wandb"; empty for --logger=none.
  LogDirOptions log_dir;             // save_dir is the default_root_dir.
  MLFlowLoggerOptions mlflow;        // The --mlflow_* flags, for "mlflow".
  WandbLoggerOptions wandb;          // The --wandb_* flags, for "wandb".
  bool report = true;
  bool save_config_overwrite = false;                  // Replace an existing config.yaml in the run folder.
  std::string summary_json;                            // Empty: none.
  std::string predictions;                             // --mode=predict's output file.
  ModelCheckpointOptions checkpoint;                   // With enable_checkpointing.
  std::optional<EarlyStoppingOptions> early_stopping;  // With --early_stopping_monitor.
  std::optional<OnExceptionCheckpointOptions> on_exception;  // With --on_exception_dirpath.
  std::optional<StochasticWeightAveragingOptions> swa;  // With --swa_lrs.
  std::optional<EMAWeightAveragingOptions> ema;         // With --ema_weight_averaging.
};

// --auto_lr_find, --auto_scale_batch_size and their settings (tuner_flags.cc): what fit tunes before it trains.
struct TuneSpec {
  bool auto_lr_find = false;
  std::string auto_scale_batch_size = "none";  // "none", "power" or "binsearch".
  double lr_find_min_lr = 1e-8;
  double lr_find_max_lr = 1.0;
  int64_t lr_find_num_training = 100;
  std::string lr_find_mode = "exponential";
};

struct FitConfig {
  std::string mode = "fit";  // "fit", "validate" or "predict".
  TrainerOptions trainer;    // Without loggers (logger=false) and callbacks: the caller adds them.
  // The --config files the flags came from, as opened (UserPath): inputs, which no output may overwrite.
  std::vector<std::string> config_files;
  std::string ckpt_path;     // "", "last", "best" or a path.
  DataSpec data;
  ModelSpec model;
  OutputSpec outputs;
  TuneSpec tune;
};

// Reads and checks the current flag values. Relative paths are taken from $BUILD_WORKING_DIRECTORY when set (the
// folder `bazel run` was started in).
absl::StatusOr<FitConfig> FitConfigFromFlags();

// Applies --max_inflated_mib (SetMaxInflatedBytes, trainer/io/memory_budget.h), before any input is read; an
// error names the value and the range. At most 2^20 MiB (1 TiB).
inline constexpr int64_t kMaxInflatedMib = int64_t{1} << 20;
absl::Status ApplyInputLimitFlags();

// The Trainer's options (trainer/trainer_options.inc) from their flags into `options`, each checked by its one check
// as it is set; the first refused is an InvalidArgument FlagError.
absl::Status TrainerOptionsFromFlags(TrainerOptions& options);

// "--flag='value' is not valid; <accepted>" as an InvalidArgument error.
absl::Status FlagError(absl::string_view flag, absl::string_view value, absl::string_view accepted);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_FIT_CONFIG_H_
