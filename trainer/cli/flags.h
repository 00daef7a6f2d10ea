// The flags of `//trainer:fit`, declared for the code that reads them. Each group is defined in its own file, and
// --help (help.h) prints the groups in this order:
//   hardware_flags.cc    where to run: accelerator, devices, strategy, precision, num_nodes
//   loop_flags.cc        the training loop: epochs, steps, batch limits, accumulation, clipping, seed
//   checkpoint_flags.cc  checkpoints and resuming
//   weight_averaging_flags.cc  StochasticWeightAveraging and EMAWeightAveraging
//   model_flags.cc       which model, and its sizes
//   scheduler_flags.cc   the learning-rate scheduler and its settings
//   data_flags.cc        which data, and how it is read
//   output_flags.cc      loggers, progress, the model summary, report.html, --summary_json
//   mode_flags.cc        fit, validate or predict
//   tuner_flags.cc       tuning before training: --auto_lr_find, --auto_scale_batch_size
//   config_flags.cc      --config files and --print_config (config_file.h)
// The Trainer's options (hardware, loop, checkpoint and output groups) are rows of trainer/trainer_options.inc, which
// defines each once; the files above define their flags from it. Names and defaults follow Lightning's Trainer
// arguments where Lightning has them.
#ifndef KILN_TRAINER_CLI_FLAGS_H_
#define KILN_TRAINER_CLI_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

// The Trainer's options (trainer/trainer_options.inc).
#define KILN_TRAINER_OPTION(group, type, name, fit_default, section, key, help) ABSL_DECLARE_FLAG(type, name);
#include "trainer/trainer_options.inc"

// Checkpoints.
ABSL_DECLARE_FLAG(std::string, ckpt_path);
ABSL_DECLARE_FLAG(std::string, checkpoint_monitor);
ABSL_DECLARE_FLAG(std::string, checkpoint_mode);
ABSL_DECLARE_FLAG(int64_t, save_top_k);
ABSL_DECLARE_FLAG(std::string, checkpoint_filename);
ABSL_DECLARE_FLAG(int64_t, every_n_epochs);
ABSL_DECLARE_FLAG(std::string, early_stopping_monitor);
ABSL_DECLARE_FLAG(std::string, early_stopping_mode);
ABSL_DECLARE_FLAG(int64_t, patience);
ABSL_DECLARE_FLAG(double, min_delta);
ABSL_DECLARE_FLAG(int64_t, every_n_train_steps);
ABSL_DECLARE_FLAG(bool, save_last);
ABSL_DECLARE_FLAG(bool, save_weights_only);
ABSL_DECLARE_FLAG(std::string, train_time_interval);
ABSL_DECLARE_FLAG(std::string, save_on_train_epoch_end);
ABSL_DECLARE_FLAG(bool, enable_version_counter);
ABSL_DECLARE_FLAG(std::string, on_exception_dirpath);
ABSL_DECLARE_FLAG(std::string, on_exception_filename);

// Weight averaging.
ABSL_DECLARE_FLAG(std::string, swa_lrs);
ABSL_DECLARE_FLAG(std::string, swa_epoch_start);
ABSL_DECLARE_FLAG(int64_t, annealing_epochs);
ABSL_DECLARE_FLAG(std::string, annealing_strategy);
ABSL_DECLARE_FLAG(bool, ema_weight_averaging);
ABSL_DECLARE_FLAG(double, ema_decay);
ABSL_DECLARE_FLAG(int64_t, ema_update_every_n_steps);
ABSL_DECLARE_FLAG(std::string, ema_update_starting_at_step);
ABSL_DECLARE_FLAG(std::string, ema_update_starting_at_epoch);
ABSL_DECLARE_FLAG(bool, ema_use_buffers);

// Model.
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, hidden_sizes);
ABSL_DECLARE_FLAG(std::string, channels);
ABSL_DECLARE_FLAG(int64_t, kernel_size);
ABSL_DECLARE_FLAG(std::string, input_shape);
ABSL_DECLARE_FLAG(std::string, optimizer);
ABSL_DECLARE_FLAG(bool, fused_optimizer);
ABSL_DECLARE_FLAG(double, learning_rate);
ABSL_DECLARE_FLAG(double, momentum);
ABSL_DECLARE_FLAG(bool, device_stats_monitor);
ABSL_DECLARE_FLAG(bool, throughput_monitor);
ABSL_DECLARE_FLAG(int64_t, throughput_window_size);
ABSL_DECLARE_FLAG(double, throughput_available_flops);
ABSL_DECLARE_FLAG(double, weight_decay);

// Learning-rate scheduler.
ABSL_DECLARE_FLAG(std::string, lr_scheduler);
ABSL_DECLARE_FLAG(std::string, lr_scheduler_interval);
ABSL_DECLARE_FLAG(int64_t, lr_scheduler_frequency);
ABSL_DECLARE_FLAG(std::string, lr_scheduler_monitor);
ABSL_DECLARE_FLAG(int64_t, warmup_iters);
ABSL_DECLARE_FLAG(double, warmup_start_factor);
ABSL_DECLARE_FLAG(int64_t, step_size);
ABSL_DECLARE_FLAG(double, gamma);
ABSL_DECLARE_FLAG(int64_t, T_max);  // NOLINT
ABSL_DECLARE_FLAG(double, eta_min);
ABSL_DECLARE_FLAG(double, max_lr);
ABSL_DECLARE_FLAG(int64_t, total_steps);
ABSL_DECLARE_FLAG(double, pct_start);
ABSL_DECLARE_FLAG(std::string, anneal_strategy);
ABSL_DECLARE_FLAG(double, div_factor);
ABSL_DECLARE_FLAG(double, final_div_factor);
ABSL_DECLARE_FLAG(bool, three_phase);
ABSL_DECLARE_FLAG(std::string, plateau_mode);
ABSL_DECLARE_FLAG(double, plateau_factor);
ABSL_DECLARE_FLAG(int64_t, plateau_patience);
ABSL_DECLARE_FLAG(double, plateau_threshold);
ABSL_DECLARE_FLAG(std::string, plateau_threshold_mode);
ABSL_DECLARE_FLAG(int64_t, plateau_cooldown);
ABSL_DECLARE_FLAG(double, min_lr);

// Data.
ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(std::string, task);
ABSL_DECLARE_FLAG(std::string, label_column);
ABSL_DECLARE_FLAG(double, val_fraction);
ABSL_DECLARE_FLAG(int64_t, batch_size);
ABSL_DECLARE_FLAG(bool, shuffle);
ABSL_DECLARE_FLAG(bool, normalize);
ABSL_DECLARE_FLAG(bool, streaming);
ABSL_DECLARE_FLAG(std::string, val_data);
ABSL_DECLARE_FLAG(int, num_workers);
ABSL_DECLARE_FLAG(int64_t, max_inflated_mib);
ABSL_DECLARE_FLAG(std::string, digits_path);
ABSL_DECLARE_FLAG(int64_t, num_features);
ABSL_DECLARE_FLAG(int64_t, num_classes);
ABSL_DECLARE_FLAG(int64_t, num_train);
ABSL_DECLARE_FLAG(int64_t, num_val);

// Outputs.
ABSL_DECLARE_FLAG(std::string, logger);
ABSL_DECLARE_FLAG(std::string, log_name);
ABSL_DECLARE_FLAG(std::string, mlflow_experiment_name);
ABSL_DECLARE_FLAG(std::string, mlflow_run_name);
ABSL_DECLARE_FLAG(std::string, mlflow_tracking_uri);
ABSL_DECLARE_FLAG(std::string, mlflow_tags);
ABSL_DECLARE_FLAG(std::string, mlflow_save_dir);
ABSL_DECLARE_FLAG(std::string, mlflow_log_model);
ABSL_DECLARE_FLAG(std::string, mlflow_prefix);
ABSL_DECLARE_FLAG(std::string, mlflow_artifact_location);
ABSL_DECLARE_FLAG(std::string, mlflow_run_id);
ABSL_DECLARE_FLAG(std::string, wandb_name);
ABSL_DECLARE_FLAG(std::string, wandb_save_dir);
ABSL_DECLARE_FLAG(std::string, wandb_version);
ABSL_DECLARE_FLAG(bool, wandb_offline);
ABSL_DECLARE_FLAG(std::string, wandb_dir);
ABSL_DECLARE_FLAG(std::string, wandb_id);
ABSL_DECLARE_FLAG(std::string, wandb_project);
ABSL_DECLARE_FLAG(std::string, wandb_log_model);
ABSL_DECLARE_FLAG(std::string, wandb_prefix);
ABSL_DECLARE_FLAG(std::string, wandb_checkpoint_name);
ABSL_DECLARE_FLAG(int64_t, log_version);
ABSL_DECLARE_FLAG(bool, verbose);
ABSL_DECLARE_FLAG(bool, report);
ABSL_DECLARE_FLAG(bool, save_config_overwrite);
ABSL_DECLARE_FLAG(std::string, summary_json);

// Mode.
ABSL_DECLARE_FLAG(std::string, mode);
ABSL_DECLARE_FLAG(std::string, predict_data);
ABSL_DECLARE_FLAG(std::string, predictions);

// Tuning before training.
ABSL_DECLARE_FLAG(bool, auto_lr_find);
ABSL_DECLARE_FLAG(std::string, auto_scale_batch_size);
ABSL_DECLARE_FLAG(double, lr_find_min_lr);
ABSL_DECLARE_FLAG(double, lr_find_max_lr);
ABSL_DECLARE_FLAG(int64_t, lr_find_num_training);
ABSL_DECLARE_FLAG(std::string, lr_find_mode);

// Config files.
ABSL_DECLARE_FLAG(std::string, config);
ABSL_DECLARE_FLAG(bool, print_config);

#endif  // KILN_TRAINER_CLI_FLAGS_H_
