// A user's program that logs a fit to MLflow or W&B (offline) beside Kiln's CSV logger, for tests/loggers: the test
// reads them back with MLflow's and W&B's own Python and compares them with metrics.csv.
//
//   logger_program --root=DIR [--tracking_uri=http://127.0.0.1:PORT | file:DIR] [--log_model=true]
//                  [--run_name=NAME] [--wandb] [--big_hparam=N] [--test] [--devices=N]
//
// Prints "csv=<metrics.csv>" and "mlflow_run=<run id>" (with --wandb instead: "wandb_dir=<run folder>" and
// "wandb_id=<run id>") on standard output, from global rank zero.
#include <cstdlib>
#include <iostream>
#include <map>
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
ABSL_FLAG(bool, wandb, false, "Log to W&B, offline, under --root (project kiln_test), instead of MLflow.");
ABSL_FLAG(int64_t, big_hparam, 0, "Add a hyper-parameter of this many characters (a record over W&B's blocks).");
ABSL_FLAG(bool, test, false, "Test after fitting, with the same loggers.");
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
  std::shared_ptr<kiln::MLFlowLogger> mlflow;
  std::shared_ptr<kiln::WandbLogger> wandb;
  if (absl::GetFlag(FLAGS_wandb)) {
    kiln::WandbLoggerOptions wandb_options{.save_dir = root, .offline = true, .project = "kiln_test",
                                           .log_model = *log_model, .tags = {"kiln", "test"}};
    if (!absl::GetFlag(FLAGS_run_name).empty()) wandb_options.name = absl::GetFlag(FLAGS_run_name);
    wandb = std::make_shared<kiln::WandbLogger>(wandb_options);
  } else {
    mlflow = std::make_shared<kiln::MLFlowLogger>(mlflow_options);
  }
  kiln::TrainerOptions options;
  options.accelerator = "cpu";
  options.devices = std::to_string(absl::GetFlag(FLAGS_devices));
  options.max_epochs = 2;
  options.log_every_n_steps = 5;
  options.default_root_dir = root;
  options.enable_progress_bar = false;
  // CSV first: its folder holds the checkpoints (MLflow's file store would too, as Lightning's first logger does).
  options.loggers = {csv};
  if (mlflow != nullptr) options.loggers.push_back(mlflow);
  if (wandb != nullptr) options.loggers.push_back(wandb);
  options.callbacks = {std::make_shared<kiln::ModelCheckpoint>(
      kiln::ModelCheckpointOptions{.monitor = "val_loss", .save_top_k = 2, .save_last = true})};
  kiln::SyntheticClusters data(kiln::SyntheticOptions{.num_train = 512, .num_val = 128, .batch_size = 32});
  kiln::MlpClassifier model(kiln::MlpOptions{});
  std::map<std::string, std::string> hparams = {
      {"learning_rate", "0.001"}, {"hidden_sizes", "[64, 64]"}, {"batch_size", "32"}};
  if (const int64_t size = absl::GetFlag(FLAGS_big_hparam); size > 0) {
    std::string big;
    for (int64_t i = 0; i < size; ++i) big.push_back("abcdefghijklmnopqrstuvwxyz"[i % 26]);
    hparams["big"] = big;
  }
  model.save_hyperparameters(hparams);
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "fit failed: " << status << std::endl;
    return 1;
  }
  if (absl::GetFlag(FLAGS_test)) {
    if (absl::StatusOr<kiln::MetricMap> tested = trainer.test(model, data); !tested.ok()) {
      std::cerr << "test failed: " << tested.status() << std::endl;
      return 1;
    }
  }
  if (!trainer.is_global_zero()) return 0;
  std::cout << "csv=" << csv->metrics_file() << std::endl;
  if (mlflow != nullptr) std::cout << "mlflow_run=" << mlflow->run_id() << std::endl;
  if (wandb != nullptr) std::cout << "wandb_dir=" << wandb->run_dir() << "\nwandb_id=" << wandb->id() << std::endl;
  return 0;
}
