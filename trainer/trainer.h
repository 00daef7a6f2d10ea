// kiln::Trainer: Lightning's Trainer in C++.
//
//   kiln::Trainer trainer({.accelerator = "auto", .devices = "auto", .max_epochs = 10});
//   absl::Status status = trainer.fit(model, data);
//
// The accelerator may also be an instance of a class registered nowhere:
//   kiln::Trainer trainer({.accelerator = std::make_shared<NewSotaAccelerator>(), .devices = "4"});
//
// Hardware questions go through the connector (ResolvePlan) to the accelerator; the trainer itself knows no
// hardware. Bad options are reported by fit/validate/test/predict as an InvalidArgument or FailedPrecondition
// Status before any device is touched. The hook order is documented in callback.h.
//
// Checkpoints (save_checkpoint, ModelCheckpoint) hold everything needed to continue exactly, in the file format
// Python's torch.save writes and with Lightning's keys (state_dict, epoch, global_step, optimizer_states,
// lr_schedulers, callbacks, hyper_parameters, loops, plus Kiln's own section "kiln"): the full list is in
// trainer/checkpoint/lightning/checkpoint_connector.h. In Python, torch.load(path)["state_dict"] goes into an
// equivalent torch.nn module with load_state_dict. Kiln resumes from checkpoints Lightning wrote, and from those earlier Kiln
// versions wrote (format 1).
// Loading checks the whole file (and that every parameter exists with the right shape) before it changes
// anything, so a damaged, truncated or foreign file is refused with the model untouched.
//
// Thread-safety: one Trainer runs one loop at a time, on the calling thread.
#ifndef KILN_TRAINER_TRAINER_H_
#define KILN_TRAINER_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "connector/options.h"
#include "connector/plan.h"
#include "hal/registry.h"
#include "trainer/core/callback.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/lightning_module.h"
#include "trainer/core/logger.h"
#include "trainer/core/meta_device.h"
#include "trainer/core/metrics.h"
#include "trainer/trainer_options.h"  // IWYU pragma: export (TrainerOptions, BatchLimit: defined here until 0.2.0)

namespace kiln {

class FitLoop;
class LayerSync;
struct LoopContext;
class ModelCheckpoint;
class PrecisionPlugin;
class Profiler;
class ProgressReporter;
class Strategy;

class Trainer {
 public:
  explicit Trainer(TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains `model` on `data`'s train loader, validating on its val loader (when it has one). `ckpt_path`: "" to
  // start fresh, "last" for the newest complete checkpoint under default_root_dir, "best" for the best one this
  // trainer's ModelCheckpoint saved, or a path.
  absl::Status fit(LightningModule& model, DataModule& data, const std::string& ckpt_path = "");
  // One pass over the val (test) loader; returns the epoch metrics.
  absl::StatusOr<MetricMap> validate(LightningModule& model, DataModule& data, const std::string& ckpt_path = "");
  absl::StatusOr<MetricMap> test(LightningModule& model, DataModule& data, const std::string& ckpt_path = "");
  // predict_step over the predict loader, one tensor per batch (on the CPU). With several processes, each predicts
  // its shard and every rank gets one tensor with every process's predictions, in the data's order (one row per
  // example when the loader shards each example once, as TensorDataLoader's evaluation loaders do).
  absl::StatusOr<std::vector<at::Tensor>> predict(LightningModule& model, DataModule& data,
                                                  const std::string& ckpt_path = "");

  // Lightning's init_module(empty_init=True), for a model built outside configure_model: while the scope returned
  // lives, the modules built on this thread get no memory and no values (the meta device; trainer/core/meta_device.h),
  // and the entry point that sets the model up gives them theirs (fsdp one unit at a time, each sharded before the
  // next is made; every other strategy the whole model, on the host, before its setup). The values are the ones a
  // normal construction would have drawn at the same place in the CPU generator's sequence, which is where it
  // stands when the entry point starts: seed before building, and draw nothing between. `empty_init` false: null,
  // and modules are built as always. Destroy the scope on the thread that made it, before the entry point.
  std::unique_ptr<MetaDeviceScope> init_module(bool empty_init) const;

  // Writes a checkpoint of the running fit (see the contents above), atomically. The state is captured now; the
  // file is written by a background writer, in order, so training does not wait for the disk; fit waits for it
  // before it returns, and a failed write is returned by the next save_checkpoint or by fit. Only rank zero writes;
  // other ranks wait at a barrier. Valid from callbacks and hooks during fit.
  absl::Status save_checkpoint(const std::string& path);
  // The same; with `weights_only`, Lightning's weights-only checkpoint (ModelCheckpoint's save_weights_only): the
  // model's weights, the loops' progress, the hyper-parameters, the data's state and what the module's
  // on_save_checkpoint adds, without optimizer_states, lr_schedulers, callbacks and the random generator's and
  // precision plugin's state. validate, test and predict load it; fit refuses to resume from it (as Lightning does).
  absl::Status save_checkpoint(const std::string& path, bool weights_only);
  // Deletes a checkpoint file once every save queued before it is on disk (rank zero only).
  absl::Status remove_checkpoint(const std::string& path);

  // State for callbacks and users.
  const TrainerOptions& options() const { return options_; }
  const std::optional<Plan>& plan() const { return plan_; }
  // Reading brings in the latest step metrics of a running epoch (which stay tensors until read).
  const MetricMap& callback_metrics() const;
  // The counters below are the loops' (trainer/loops/progress.h), read where the loops keep them.
  int64_t current_epoch() const;
  int64_t global_step() const;
  // The step loggers get, as Lightning numbers its rows (its epoch loop's _batches_that_stepped): during a training
  // batch, the optimizer steps before this batch's (so with log_every_n_steps=50 the rows are at steps 49, 99, ...,
  // and validation and the epoch's metrics share the step of the batch they follow); otherwise global_step().
  // Batches skipped for a non-finite loss (on_nonfinite_loss="skip") in the last fit.
  int64_t skipped_batches() const;
  int64_t num_training_batches() const;
  // The batches one validation run of fit validates on, all loaders together (0: fit does not validate), as
  // Lightning's sum(trainer.num_val_batches); known from on_fit_start.
  int64_t num_val_batches() const;
  bool sanity_checking() const;
  bool should_stop() const;
  void set_should_stop();
  // Lightning's rank API: this process's place among the processes of the run (rank 0 of 1 on one process). The
  // global rank counts every process of every node, the local rank those of this node, the node rank the nodes;
  // world_size() = num_nodes() x num_devices() processes. Before the first entry point, as the options and the
  // environment this process was started with say (a program's started processes know their ranks from the start);
  // afterwards, as the last entry point ran. Options that cannot be resolved answer as one process (fit says why).
  // A program on several processes runs whole on every rank (docs/library.md, "Several processes"): use these to do
  // rank-zero work, such as printing results, once.
  int global_rank() const;
  int local_rank() const;
  int node_rank() const;
  int world_size() const;
  int num_nodes() const;
  int num_devices() const;  // Processes (devices) per node.
  bool is_global_zero() const;  // global_rank() == 0.
  int64_t max_epochs() const;
  const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers() const { return optimizers_.optimizers; }
  // The running fit's schedulers, as configure_optimizers returned them (Lightning's trainer.lr_scheduler_configs). A
  // callback may replace a config's scheduler from on_train_epoch_start on (StochasticWeightAveraging swaps in its
  // own); adding or removing configs during a fit is not supported (checkpoints count each one's steps).
  std::vector<SchedulerConfig>& lr_scheduler_configs() { return optimizers_.schedulers; }
  // The running fit's training loader, this process's shard of it (Lightning's trainer.train_dataloader); null
  // outside a fit. Its batches go through EvaluationLoop::TransferBatch as the loop's do.
  DataLoader* train_dataloader() const;
  const std::vector<std::shared_ptr<Logger>>& loggers() const { return options_.loggers; }
  // Sends `metrics`, with the current epoch added as "epoch" unless given, to every logger at `step` (rank zero
  // only). Taken by value: a caller done with its map moves it in, and nothing is copied.
  void log_metrics(MetricMap metrics, int64_t step);
  int64_t logged_step() const;
  // Where ModelCheckpoint writes by default: <first logger's log_dir>/checkpoints, else <default_root_dir>/checkpoints.
  std::string checkpoint_dir() const;
  // The first ModelCheckpoint among the callbacks (null if none).
  ModelCheckpoint* checkpoint_callback() const;
  // The path fit resumed from ("" when it started fresh).
  const std::string& resumed_from() const { return resumed_from_; }
  Strategy* strategy() const { return strategy_.get(); }
  // Lightning's trainer.profiler: the program's own object TrainerOptions::profiler holds, or the one it names, made
  // by the first entry point and kept for the Trainer's life (its report covers every entry point run so far, as
  // Lightning's does); null without one.
  Profiler* profiler() const { return profiler_.get(); }
  // The precision plugin of the last set-up (null before the first fit/validate/test/predict).
  PrecisionPlugin* precision_plugin() const { return precision_.get(); }

  // Internal to Kiln, not part of the API (it may change in any release): runs `body` on this trainer's loops
  // (trainer/loops/fit_loop.h, which hands out the others and their LoopContext) inside the set-up every entry point
  // shares, as fit runs them. trainer/loops/loops_test.cc runs one loop alone this way.
  absl::Status RunLoopsInternal(Stage stage, LightningModule& model, absl::FunctionRef<absl::Status(FitLoop&)> body);

 private:

  // The one wrapper around every entry point (fit, validate, test, predict): checks the options and resolves the
  // plan (Prepare), starts the other local processes and sets the strategy up, runs `body`, gives a failure to the
  // callbacks (on_exception), waits for the checkpoints written, tears the device down however `body` ends, waits
  // for (or, after a failure, stops) the other processes, and, after fit, finalizes the loggers.
  absl::Status RunEntryPoint(Stage stage, LightningModule& model, absl::FunctionRef<absl::Status()> body);
  absl::Status Prepare(Stage stage);
  // The connector's plan for the options (no side effects: nothing starts, no device is touched).
  absl::StatusOr<Plan> ResolveOptions() const;
  // The plan the rank API reads: the last entry point's, or before any, ResolveOptions' (cached).
  const Plan& RankPlan() const;
  // The options' own checks, before anything is resolved.
  absl::Status CheckOptions() const;
  // The strategy the plan names: its instance, or one made by its registry entry's factory.
  absl::StatusOr<std::shared_ptr<Strategy>> MakeStrategy(const Plan& plan) const;
  // The user's callbacks and those the trainer adds for `stage` (ModelCheckpoint, Timer, ModelSummaryCallback).
  absl::Status AddCallbacks(Stage stage);
  // Gives every callback the error that ends a run (on_exception); a callback that throws is logged, not raised.
  void CallOnException(LightningModule& model, const absl::Status& error);
  // Starts the other local processes when this one launches a distributed run (once per program:
  // DistributedProgram), then sets the strategy up for `stage`.
  absl::Status SetupStrategy(Stage stage, LightningModule& model);
  // After a failed distributed entry point: stops the processes this one started, naming those that ended first.
  absl::Status FinishStrategy(absl::Status status);
  // Logger::setup on global rank zero (the loggers claim their folders), unless fast_dev_run.
  absl::Status SetupLoggers();
  // Logger::finalize_with_status on global rank zero, every logger's ("success" or "failed"): the first failure (what
  // a logger could not write), naming the logger. After fit, validate and test alike.
  absl::Status FinalizeLoggers(bool succeeded);
  // `data` (with restore_training) gets its state back from the checkpoint.
  absl::Status RestoreCheckpoint(LightningModule& model, const std::string& ckpt_path, bool restore_training,
                                 DataModule* data = nullptr);
  absl::StatusOr<std::string> ResolveCheckpointPath(const std::string& ckpt_path) const;

  TrainerOptions options_;
  std::optional<Plan> plan_;
  mutable std::optional<Plan> rank_plan_;  // RankPlan() before the first entry point.
  std::shared_ptr<Strategy> strategy_;
  std::unique_ptr<class CheckpointWriter> checkpoint_writer_;
  std::shared_ptr<PrecisionPlugin> precision_;
  // The running entry point's synchronised layers (sync_batchnorm's conversion, kiln::SyncBatchNorm's group).
  std::unique_ptr<LayerSync> layer_sync_;
  std::unique_ptr<ProgressReporter> progress_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  LightningModule* model_ = nullptr;  // The module of the running fit, for save_checkpoint.
  DataModule* data_ = nullptr;        // Its data, for save_checkpoint.
  OptimizerConfig optimizers_;
  std::vector<std::vector<at::Tensor>> optimizer_parameters_;  // The module's parameters of each, as configured.
  mutable MetricMap callback_metrics_;
  MetricCollector* live_step_metrics_ = nullptr;  // The running training epoch's metrics.
  // The ModelCheckpoint the last fit added (enable_checkpointing without one of the user's), kept for later stages.
  std::shared_ptr<ModelCheckpoint> default_checkpoint_;
  std::string resumed_from_;
  // What the loops get of the members above (trainer/loops/loop_context.h), and the loops, which keep their own
  // progress: the fit loop, and through it the training epoch loop, its optimization and its validation loop. Made
  // with the Trainer, and destroyed (the loops first) with it.
  std::unique_ptr<LoopContext> loop_context_;
  std::unique_ptr<FitLoop> fit_loop_;
  std::shared_ptr<Profiler> profiler_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_TRAINER_H_
