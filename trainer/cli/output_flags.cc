// What a run writes and shows: loggers, progress, the model summary, report.html and the JSON summary.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

ABSL_FLAG(std::string, logger, "csv,tensorboard",
          "Loggers, comma-separated: \"csv\" (metrics.csv, hparams.yaml), \"tensorboard\" (event files TensorBoard "
          "reads), or \"none\". They share <default_root_dir>/<log_name>/version_<N>.");
// Lightning's logger arguments `name` and `version`; Abseil itself owns --version.
ABSL_FLAG(std::string, log_name, "lightning_logs", "The loggers' experiment folder under --default_root_dir.");
ABSL_FLAG(int64_t, log_version, -1, "The loggers' version folder number (-1: the next free one).");
ABSL_FLAG(int64_t, log_every_n_steps, 50,
          "Log step metrics (and device statistics for the report, and progress lines when not on a terminal) every "
          "N steps.");
ABSL_FLAG(bool, enable_progress_bar, true, "Show a progress bar on a terminal, progress lines otherwise.");
ABSL_FLAG(bool, verbose, false,
          "Show glog's INFO lines (the connector's choices, what a checkpoint restored) on a terminal too; when "
          "standard error is not a terminal they are always written.");
ABSL_FLAG(bool, enable_model_summary, true, "Print the model summary (layers, parameters, size) when fit starts.");
ABSL_FLAG(bool, report, true,
          "Write report.html into the run folder: metric curves, device statistics over time, the plan, the summary.");
ABSL_FLAG(std::string, summary_json, "",
          "Write a JSON summary here at the end: final metrics, epochs and steps, wall time, the resolved plan and "
          "params_sha256 (SHA-256 over every parameter's bytes, in registration order).");
