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
          "reads), \"mlflow\" (an MLflow tracking server or file store: the --mlflow_* flags), \"wandb\" (an offline "
          "W&B run, for `wandb sync`: the --wandb_* flags), or \"none\". csv "
          "and tensorboard write to <default_root_dir>/<log_name>/version_<N>.");
// Lightning's logger arguments `name` and `version`; Abseil itself owns --version.
ABSL_FLAG(std::string, log_name, "lightning_logs", "The loggers' experiment folder under --default_root_dir.");
ABSL_FLAG(int64_t, log_version, -1, "The loggers' version folder number (-1: the next free one).");
// Lightning's MLFlowLogger arguments, for --logger=mlflow.
ABSL_FLAG(std::string, mlflow_experiment_name, "lightning_logs",
          "MLflow's experiment, found by name or created (MLFlowLogger's experiment_name).");
ABSL_FLAG(std::string, mlflow_run_name, "",
          "The MLflow run's name (run_name; the tag mlflow.runName); empty: MLflow "
          "names it.");
ABSL_FLAG(std::string, mlflow_tracking_uri, "",
          "Where MLflow runs go: http://host:port (a tracking server, `mlflow server`; https is not supported) or "
          "file:<folder> (MLflow's file store). Empty: $MLFLOW_TRACKING_URI, else file:<--mlflow_save_dir>.");
ABSL_FLAG(std::string, mlflow_tags, "", "The run's tags, key=value,key=value (tags).");
ABSL_FLAG(std::string, mlflow_save_dir, "./mlruns",
          "MLflow's file store when no tracking URI is given (save_dir). MLflow 3 reads a file store only with "
          "MLFLOW_ALLOW_FILE_STORE=true.");
ABSL_FLAG(std::string, mlflow_log_model, "false",
          "Upload ModelCheckpoint's checkpoints as run artifacts (log_model): false, true (at the end of the run; "
          "with every save when --save_top_k=-1) or all (with every save).");
ABSL_FLAG(std::string, mlflow_prefix, "", "Put before every metric name, with \"-\" (prefix).");
ABSL_FLAG(std::string, mlflow_artifact_location, "",
          "Where an experiment fit creates keeps its artifacts (artifact_location); empty: the server's choice.");
ABSL_FLAG(std::string, mlflow_run_id, "", "Log into this existing run instead of starting one (run_id).");
// Lightning's WandbLogger arguments, for --logger=wandb. Kiln writes offline runs only.
ABSL_FLAG(std::string, wandb_name, "", "The W&B run's display name (name); empty: W&B names it when synced.");
ABSL_FLAG(std::string, wandb_save_dir, ".", "The run goes to <save_dir>/wandb/offline-run-<time>-<id> (save_dir).");
ABSL_FLAG(std::string, wandb_version, "", "The run's id (version; the same as --wandb_id); empty: a random one.");
ABSL_FLAG(bool, wandb_offline, false,
          "Write an offline run, which `wandb sync` uploads later (offline). Must be true (or $WANDB_MODE offline): "
          "Kiln does not stream runs to W&B's servers, Lightning's default.");
ABSL_FLAG(std::string, wandb_dir, "", "Same as --wandb_save_dir, used when that is empty (dir).");
ABSL_FLAG(std::string, wandb_id, "", "Same as --wandb_version (id).");
ABSL_FLAG(std::string, wandb_project, "",
          "The run's W&B project (project); empty: $WANDB_PROJECT, else lightning_logs.");
ABSL_FLAG(std::string, wandb_log_model, "false",
          "Keep ModelCheckpoint's checkpoints as files of the run (log_model): false, true (at the end of the run; "
          "with every save when --save_top_k=-1) or all (with every save).");
ABSL_FLAG(std::string, wandb_prefix, "", "Put before every metric name, with \"-\" (prefix).");
ABSL_FLAG(std::string, wandb_checkpoint_name, "",
          "The name the checkpoints are kept under, files/<name>/v<N>/model.ckpt (checkpoint_name); empty: "
          "model-<run id>.");
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
