// `bazel run //trainer:fit`: trains a model with Kiln from the command line.
//
// Exit status: 0 after training, 2 for a bad flag or a plan the connector rejects (nothing is written), 1 when
// training itself fails.
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/classifier.h"
#include "trainer/flag_parsing.h"
#include "trainer/sha256.h"
#include "trainer/synthetic_data.h"
#include "torch/utils.h"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, accelerator, "auto",
          "Accelerator name or alias (see `bazel run //tools:accelerators`), or \"auto\" for the available one with "
          "the highest priority.");
ABSL_FLAG(std::string, devices, "auto",
          "Devices to use: \"auto\", a count N, -1 for all, or indices such as \"0,1\" or \"[0, 1]\". For cpu, N "
          "processes.");
ABSL_FLAG(std::string, strategy, "auto", "\"auto\", \"single_device\" or \"ddp\".");
ABSL_FLAG(std::string, precision, "32-true",
          "32-true, 64-true, bf16-mixed, 16-mixed, bf16-true, 16-true (or the legacy 32, 64, 16, bf16), as the "
          "accelerator declares them: cpu runs 32-true, 64-true, bf16-mixed and bf16-true, and 16-mixed as "
          "bf16-mixed (with Lightning's warning).");
ABSL_FLAG(int, num_nodes, 1, "Number of machines.");
ABSL_FLAG(double, process_group_timeout, 1800,
          "ddp: seconds that joining the other processes, and each collective, may take before the run fails.");
ABSL_FLAG(int64_t, max_epochs, 10, "Stop after this many epochs (-1: no epoch limit).");
ABSL_FLAG(int64_t, max_steps, -1, "Stop after this many optimizer steps (-1: no step limit).");
ABSL_FLAG(std::string, limit_train_batches, "1.0",
          "Training batches per epoch: an int count, or a fraction in [0.0, 1.0] (with a '.').");
ABSL_FLAG(std::string, limit_val_batches, "1.0",
          "Validation batches per epoch: an int count, or a fraction in [0.0, 1.0] (with a '.').");
ABSL_FLAG(int64_t, check_val_every_n_epoch, 1, "Validate every N epochs.");
ABSL_FLAG(int64_t, log_every_n_steps, 50, "Record step metrics (and log progress when not on a terminal) every N steps.");
ABSL_FLAG(bool, enable_progress_bar, true, "Show a progress bar on a terminal, progress lines otherwise.");
ABSL_FLAG(std::string, default_root_dir, ".",
          "Where checkpoints (<dir>/checkpoints) go; relative paths are taken from the directory bazel run was "
          "started in.");
ABSL_FLAG(std::string, ckpt_path, "",
          "Resume from a checkpoint: a .ckpt path, or \"last\" for the newest complete checkpoint under "
          "--default_root_dir.");
ABSL_FLAG(bool, enable_checkpointing, true, "Save checkpoints (by default, the last epoch's) under --default_root_dir.");
ABSL_FLAG(int64_t, every_n_train_steps, 0, "Also save a checkpoint every N optimizer steps (0: only at epoch ends).");
ABSL_FLAG(bool, save_last, true, "Keep <checkpoint dir>/last.ckpt up to date with every save.");
ABSL_FLAG(int64_t, accumulate_grad_batches, 1, "Accumulate gradients over N batches per optimizer step.");
ABSL_FLAG(double, gradient_clip_val, 0.0, "Clip gradients at this value (0: no clipping).");
ABSL_FLAG(std::string, gradient_clip_algorithm, "norm", "\"norm\" or \"value\".");
ABSL_FLAG(int64_t, num_sanity_val_steps, 2, "Validation batches to run before training (-1: all).");
ABSL_FLAG(int64_t, fast_dev_run, 0, "Run N batches of training and validation only, to check that everything runs.");
ABSL_FLAG(std::string, summary_json, "",
          "Write a JSON summary here at the end: final metrics, epochs and steps, wall time, the resolved plan, "
          "the precision used (after any substitution by the accelerator) and params_sha256 (SHA-256 over every "
          "parameter's bytes, in registration order).");
ABSL_FLAG(int64_t, seed, 42, "Seeds LibTorch's generators, the synthetic data and shuffling.");
ABSL_FLAG(int64_t, batch_size, 64, "Examples per batch.");
ABSL_FLAG(double, learning_rate, 1e-3, "Adam's learning rate.");
ABSL_FLAG(std::string, on_nonfinite_loss, "stop", "A NaN or infinite training loss: \"stop\" (naming the batch) or \"skip\" its batch.");
ABSL_FLAG(std::string, hidden_sizes, "64,64", "Hidden layer widths of the MLP, comma-separated.");
ABSL_FLAG(int64_t, num_features, 16, "Synthetic data: input features.");
ABSL_FLAG(int64_t, num_classes, 4, "Synthetic data: classes.");
ABSL_FLAG(int64_t, num_train, 4096, "Synthetic data: training examples.");
ABSL_FLAG(int64_t, num_val, 1024, "Synthetic data: validation examples.");

namespace kiln {
namespace {

constexpr int kExitUsage = 2;

// A flag error: exits 2 with one line that names the flag, the bad value and what is accepted.
[[noreturn]] void UsageError(const std::string& message) {
  std::cerr << "error: " << message << std::endl;
  std::exit(kExitUsage);
}

BatchLimit ParseBatchLimit(const std::string& flag, const std::string& value) {
  absl::StatusOr<std::variant<int64_t, double>> limit = ParseBatchLimitFlag(flag, value);
  if (!limit.ok()) UsageError(std::string(limit.status().message()));
  return std::visit([](auto parsed) { return BatchLimit(parsed); }, *limit);
}

std::vector<int64_t> ParseSizes(const std::string& flag, const std::string& value) {
  absl::StatusOr<std::vector<int64_t>> sizes = ParseLayerSizesFlag(flag, value);
  if (!sizes.ok()) UsageError(std::string(sizes.status().message()));
  return *sizes;
}

void RequirePositive(const std::string& flag, int64_t value) {
  if (value <= 0) UsageError(absl::StrCat("--", flag, "=", value, " is not valid; pass an int > 0"));
}

// A path as the user meant it: relative to the directory `bazel run` was started in, when there is one.
std::string UserPath(const std::string& path) {
  const char* base = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || base == nullptr || *base == '\0') return path;
  return absl::StrCat(base, "/", path);
}

std::string JsonMetrics(const MetricMap& metrics) {
  std::vector<std::string> fields;
  for (const auto& [name, value] : metrics) {
    fields.push_back(std::isfinite(value) ? absl::StrFormat("\"%s\": %.17g", name, value)
                                          : absl::StrFormat("\"%s\": null", name));
  }
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
}

std::string ParamsSha256(torch::nn::Module& model) {
  Sha256 sha;
  for (const at::Tensor& parameter : model.parameters()) {
    const at::Tensor bytes = parameter.detach().to(at::kCPU).contiguous();
    sha.Update(bytes.data_ptr(), bytes.numel() * bytes.element_size());
  }
  return sha.HexDigest();
}

// Writes `text` to `path` through a temporary file and a rename, so readers never see half a file.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string temporary = absl::StrCat(path, ".tmp-", getpid());
  {
    std::ofstream file(temporary, std::ios::trunc);
    file << text;
    file.flush();
    if (!file) return absl::InternalError(absl::StrCat("cannot write ", temporary));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return absl::InternalError(absl::StrCat("cannot move ", temporary, " to ", path));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::signal(SIGXFSZ, SIG_IGN);  // A file-size limit makes writes fail with EFBIG (a clear error), not kill fit.
  absl::SetProgramUsageMessage(
      "Trains a model with Kiln.\n\n"
      "  bazel run //trainer:fit                       # the default MLP on the built-in synthetic task\n"
      "  bazel run //trainer:fit -- --max_epochs=3 --devices=1 --accelerator=cpu\n\n"
      "Flags are named after Lightning's Trainer arguments. Exit status: 0 trained, 2 bad flags (nothing written), "
      "1 training failed.");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    UsageError(absl::StrCat("unexpected argument '", positional[1], "'; flags are written --name=value (see --help)"));
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  for (const auto& [name, value] : std::vector<std::pair<std::string, int64_t>>{
           {"batch_size", absl::GetFlag(FLAGS_batch_size)},
           {"num_features", absl::GetFlag(FLAGS_num_features)},
           {"num_classes", absl::GetFlag(FLAGS_num_classes)},
           {"num_train", absl::GetFlag(FLAGS_num_train)},
           {"num_val", absl::GetFlag(FLAGS_num_val)}}) {
    RequirePositive(name, value);
  }
  if (!(absl::GetFlag(FLAGS_learning_rate) > 0)) {
    UsageError(absl::StrCat("--learning_rate=", absl::GetFlag(FLAGS_learning_rate), " is not valid; pass a value > 0"));
  }

  TrainerOptions options;
  options.accelerator = absl::GetFlag(FLAGS_accelerator);
  options.devices = absl::GetFlag(FLAGS_devices);
  options.strategy = absl::GetFlag(FLAGS_strategy);
  options.precision = absl::GetFlag(FLAGS_precision);
  options.num_nodes = absl::GetFlag(FLAGS_num_nodes);
  if (!(absl::GetFlag(FLAGS_process_group_timeout) > 0)) {
    UsageError(absl::StrCat("--process_group_timeout=", absl::GetFlag(FLAGS_process_group_timeout),
                            " is not valid; pass a number of seconds > 0"));
  }
  options.process_group_timeout = absl::Seconds(absl::GetFlag(FLAGS_process_group_timeout));
  options.max_epochs = absl::GetFlag(FLAGS_max_epochs);
  options.max_steps = absl::GetFlag(FLAGS_max_steps);
  options.limit_train_batches = ParseBatchLimit("limit_train_batches", absl::GetFlag(FLAGS_limit_train_batches));
  options.limit_val_batches = ParseBatchLimit("limit_val_batches", absl::GetFlag(FLAGS_limit_val_batches));
  options.check_val_every_n_epoch = absl::GetFlag(FLAGS_check_val_every_n_epoch);
  options.log_every_n_steps = absl::GetFlag(FLAGS_log_every_n_steps);
  options.enable_progress_bar = absl::GetFlag(FLAGS_enable_progress_bar);
  options.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  options.default_root_dir = UserPath(absl::GetFlag(FLAGS_default_root_dir));
  options.enable_checkpointing = absl::GetFlag(FLAGS_enable_checkpointing);
  options.accumulate_grad_batches = absl::GetFlag(FLAGS_accumulate_grad_batches);
  if (absl::GetFlag(FLAGS_gradient_clip_val) != 0.0) options.gradient_clip_val = absl::GetFlag(FLAGS_gradient_clip_val);
  options.gradient_clip_algorithm = absl::GetFlag(FLAGS_gradient_clip_algorithm);
  options.num_sanity_val_steps = absl::GetFlag(FLAGS_num_sanity_val_steps);
  options.fast_dev_run = absl::GetFlag(FLAGS_fast_dev_run);
  options.on_nonfinite_loss = absl::GetFlag(FLAGS_on_nonfinite_loss);
  if (options.enable_checkpointing) {
    if (absl::GetFlag(FLAGS_every_n_train_steps) < 0) {
      UsageError(absl::StrCat("--every_n_train_steps=", absl::GetFlag(FLAGS_every_n_train_steps),
                              " is not valid; pass 0 (off) or a number of steps"));
    }
    options.callbacks.push_back(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
        .save_last = absl::GetFlag(FLAGS_save_last),
        .every_n_train_steps = absl::GetFlag(FLAGS_every_n_train_steps),
        .every_n_epochs = int64_t{1}}));
  }
  std::string ckpt_path = absl::GetFlag(FLAGS_ckpt_path);
  if (ckpt_path != "last" && ckpt_path != "best") ckpt_path = UserPath(ckpt_path);
  const std::string summary_path = UserPath(absl::GetFlag(FLAGS_summary_json));

  SyntheticOptions data_options;
  data_options.num_train = absl::GetFlag(FLAGS_num_train);
  data_options.num_val = absl::GetFlag(FLAGS_num_val);
  data_options.num_features = absl::GetFlag(FLAGS_num_features);
  data_options.num_classes = absl::GetFlag(FLAGS_num_classes);
  data_options.batch_size = absl::GetFlag(FLAGS_batch_size);
  data_options.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));

  MlpOptions model_options;
  model_options.input_size = data_options.num_features;
  model_options.num_classes = data_options.num_classes;
  model_options.hidden_sizes = ParseSizes("hidden_sizes", absl::GetFlag(FLAGS_hidden_sizes));
  model_options.learning_rate = absl::GetFlag(FLAGS_learning_rate);

  Trainer trainer(options);
  // Seed before building the model, so that its initial parameters depend on --seed alone.
  torch::manual_seed(static_cast<uint64_t>(absl::GetFlag(FLAGS_seed)));
  auto model = std::make_shared<MlpClassifier>(model_options);
  SyntheticClusters data(data_options);
  const absl::Time start = absl::Now();
  absl::Status status = trainer.fit(*model, data, ckpt_path);
  if (!status.ok()) {
    std::cerr << "error: " << status.message() << std::endl;
    const bool bad_input = status.code() == absl::StatusCode::kInvalidArgument ||
                           status.code() == absl::StatusCode::kFailedPrecondition ||
                           status.code() == absl::StatusCode::kNotFound ||
                           status.code() == absl::StatusCode::kUnimplemented;
    return bad_input ? kExitUsage : 1;
  }
  const Plan& plan = *trainer.plan();
  if (!trainer.is_global_zero()) return 0;  // Rank zero reports for everyone.
  std::printf("Trained on %s (%s, %s) for %lld epochs, %lld steps.\n", plan.accelerator->name().c_str(),
              plan.strategy.c_str(), std::string(PrecisionName(plan.precision)).c_str(),
              static_cast<long long>(trainer.current_epoch()), static_cast<long long>(trainer.global_step()));
  if (!summary_path.empty()) {
    const std::string summary = absl::StrCat(
        "{\"final_metrics\": ", JsonMetrics(trainer.callback_metrics()), ", \"epochs\": ", trainer.current_epoch(),
        ", \"global_step\": ", trainer.global_step(), ", \"wall_time_seconds\": ",
        absl::ToDoubleSeconds(absl::Now() - start), ", \"plan\": ", plan.ToJson(), ", \"precision\": \"",
        PrecisionName(plan.precision), "\", \"resumed_from\": \"", trainer.resumed_from(),
        "\", \"params_sha256\": \"", ParamsSha256(*model), "\"}\n");
    if (absl::Status written = WriteFileAtomically(summary_path, summary); !written.ok()) {
      std::cerr << "error: --summary_json: " << written.message() << std::endl;
      return 1;
    }
  }
  std::printf("Final metrics:\n");
  for (const char* name : {"train_loss_epoch", "train_acc", "val_loss", "val_acc"}) {
    auto found = trainer.callback_metrics().find(name);
    if (found != trainer.callback_metrics().end()) std::printf("  %-16s %.4f\n", name, found->second);
  }
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::Main(argc, argv); }
