// A user's program that logs a fit to MLflow (and, with --wandb, W&B offline) beside Kiln's CSV logger, for
// tests/loggers: the test reads both back with MLflow's and W&B's own Python and compares them with metrics.csv.
//
//   logger_program --root=DIR [--tracking_uri=http://127.0.0.1:PORT | file:DIR] [--log_model=true]
//                  [--run_name=NAME] [--wandb]
//
// Prints "csv=<metrics.csv>" and "mlflow_run=<run id>" (and "wandb_dir=<run folder>") on standard output.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "trainer/classifier.h"
#include "trainer/kiln.h"
#include "trainer/synthetic_data.h"

ABSL_FLAG(std::string, root, ".", "Where the CSV logger and the checkpoints go.");
ABSL_FLAG(std::string, tracking_uri, "", "MLflow's tracking URI; empty: MLflow's default (file:./mlruns).");
ABSL_FLAG(std::string, log_model, "false", "MLflow's log_model.");
ABSL_FLAG(std::string, run_name, "", "MLflow's run name.");
ABSL_FLAG(bool, wandb, false, "Also log to W&B, offline, under --root.");
ABSL_FLAG(int64_t, devices, 1, "CPU processes.");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string root = absl::GetFlag(FLAGS_root);
  kiln::MLFlowLoggerOptions mlflow_options{.experiment_name = "kiln_test", .tags = {{"team", "kiln"}}};
  if (!absl::GetFlag(FLAGS_tracking_uri).empty()) mlflow_options.tracking_uri = absl::GetFlag(FLAGS_tracking_uri);
  if (!absl::GetFlag(FLAGS_run_name).empty()) mlflow_options.run_name = absl::GetFlag(FLAGS_run_name);
  absl::StatusOr<kiln::LogModel> log_model = kiln::ParseLogModel(absl::GetFlag(FLAGS_log_model));
  if (!log_model.ok()) {
    std::cerr << log_model.status() << std::endl;
    return 2;
  }
  mlflow_options.log_model = *log_model;
  auto csv = std::make_shared<kiln::CsvLogger>(kiln::LogDirOptions{.save_dir = root});
  auto mlflow = std::make_shared<kiln::MLFlowLogger>(mlflow_options);
  kiln::TrainerOptions options;
  options.accelerator = "cpu";
  options.devices = std::to_string(absl::GetFlag(FLAGS_devices));
  options.max_epochs = 2;
  options.log_every_n_steps = 5;
  options.default_root_dir = root;
  options.enable_progress_bar = false;
  // CSV first: its folder holds the checkpoints (MLflow's file store would too, as Lightning's first logger does).
  options.loggers = {csv, mlflow};
  options.callbacks = {std::make_shared<kiln::ModelCheckpoint>(
      kiln::ModelCheckpointOptions{.monitor = "val_loss", .save_top_k = 2, .save_last = true})};
  kiln::SyntheticClusters data(kiln::SyntheticOptions{.num_train = 512, .num_val = 128, .batch_size = 32});
  kiln::MlpClassifier model(kiln::MlpOptions{});
  model.save_hyperparameters({{"learning_rate", "0.001"}, {"hidden_sizes", "[64, 64]"}, {"batch_size", "32"}});
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "fit failed: " << status << std::endl;
    return 1;
  }
  if (!trainer.is_global_zero()) return 0;
  std::cout << "csv=" << csv->metrics_file() << "\nmlflow_run=" << mlflow->run_id() << std::endl;
  for (const auto& logger : options.loggers) {
    if (logger->name() == "wandb") std::cout << "wandb_dir=" << logger->log_dir() << std::endl;
  }
  return 0;
}
