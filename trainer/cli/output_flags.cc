// What a run writes and shows: loggers, progress, the model summary, report.html and the JSON summary.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

// The Trainer's options of this group, from trainer/trainer_options.inc.
#define KILN_FLAG_GROUP_output(...) __VA_ARGS__
#include "trainer/cli/trainer_option_flags.h"

ABSL_FLAG(std::string, logger, "csv,tensorboard",
          "Loggers, comma-separated: \"csv\" (metrics.csv, hparams.yaml), \"tensorboard\" (event files TensorBoard "
          "reads), or \"none\". They share <default_root_dir>/<log_name>/version_<N>.");
// Lightning's logger arguments `name` and `version`; Abseil itself owns --version.
ABSL_FLAG(std::string, log_name, "lightning_logs", "The loggers' experiment folder under --default_root_dir.");
ABSL_FLAG(int64_t, log_version, -1, "The loggers' version folder number (-1: the next free one).");
ABSL_FLAG(bool, device_stats_monitor, false,
          "Log the accelerator's device statistics around every logged training batch (Lightning's "
          "DeviceStatsMonitor callback), into the loggers; report.html charts them either way.");
ABSL_FLAG(bool, throughput_monitor, false,
          "Log batches, samples and FLOPs per second, per device and in all, and MFU where the accelerator declares "
          "its peak FLOP/s (Lightning's ThroughputMonitor callback: train/device/samples_per_sec, train/device/mfu, "
          "...), into the loggers; report.html charts them. FLOPs are counted on the first batch of each stage.");
ABSL_FLAG(int64_t, throughput_window_size, 100,
          "The batches --throughput_monitor averages its rates over (ThroughputMonitor's window_size; 2 or more).");
ABSL_FLAG(double, throughput_available_flops, 0,
          "The device's peak FLOP/s that --throughput_monitor's MFU divides by, instead of the accelerator's "
          "declaration (the CPU declares none; 0: the accelerator's).");
ABSL_FLAG(bool, verbose, false,
          "Show glog's INFO lines (the connector's choices, what a checkpoint restored) on a terminal too; when "
          "standard error is not a terminal they are always written.");
ABSL_FLAG(bool, save_config_overwrite, false,
          "Replace the run folder's config.yaml when it exists already (a --log_version naming an earlier run's "
          "folder), as LightningCLI's save_config_kwargs={\"overwrite\": True}; without it fit refuses before "
          "writing anything. The file --config names is never replaced.");
ABSL_FLAG(bool, report, true,
          "Write report.html into the run folder: metric curves, device statistics over time, the plan, the summary.");
ABSL_FLAG(std::string, summary_json, "",
          "Write a JSON summary here at the end: final metrics, epochs and steps, wall time, the resolved plan and "
          "params_sha256 (SHA-256 over every parameter's bytes, in registration order).");
