// Callbacks: code that runs at fixed points of the loops, like Lightning's Callback.
//
// Hook order in `Trainer::fit`, Lightning's (tests/lightning/hook_order_test compares the two call for call). Each
// callback hook runs for the callbacks in the order given, then the module's hook of the same name (the module's
// hooks are in lightning_module.h; [module] marks those only the module has), except where noted:
//   setup(kFit): the data module's, the callbacks', the module's
//   [module] configure_optimizers; when resuming, [module] on_load_checkpoint, then the checkpoint is restored
//   on_fit_start
//   [sanity check: on_sanity_check_start, then the validation hooks below with sanity_checking() true,
//    on_sanity_check_end]
//   on_train_start
//   for each epoch:
//     on_train_epoch_start
//     for each batch: [module] on_before_batch_transfer, transfer_batch_to_device, on_after_batch_transfer,
//                     on_train_batch_start, training_step,
//                     [on_before_zero_grad, zero_grad] (on the first batch of each accumulation window),
//                     on_before_backward, backward, on_after_backward,
//                     [per optimizer: on_before_optimizer_step, [module] configure_gradient_clipping, the step]
//                         (on the last batch of each accumulation window),
//                     on_train_batch_end (with training_step's loss as `outputs`),
//                     [validation when val_check_interval says so]
//     on_train_epoch_end: non-monitoring callbacks, then the module's hook, then monitoring callbacks
//                         (ModelCheckpoint, EarlyStopping), so that they see what the module logged; a checkpoint
//                         saved then calls the module's on_save_checkpoint
//   on_train_end
//   on_fit_end
//   teardown(kFit)
// Validation (and test): [module] on_validation_model_eval, on_validation_start, on_validation_epoch_start, for each
// batch the three transfer hooks, on_validation_batch_start, validation_step, on_validation_batch_end;
// on_validation_epoch_end (the callbacks', then the module's, whose log() calls count; the epoch's metrics are
// reduced after both), on_validation_end, [module] on_validation_model_train.
// validate and test run setup, [module] on_load_checkpoint with a ckpt_path, those hooks, teardown; predict runs
// setup(kPredict), [module] on_predict_model_eval, on_predict_start, on_predict_epoch_start, for each batch the
// transfer hooks, on_predict_batch_start, predict_step, on_predict_batch_end (with the prediction as `outputs`);
// on_predict_epoch_end, on_predict_end, teardown(kPredict).
// Under manual optimization (LightningModule::automatic_optimization() false), training_step calls
// manual_backward (on_before_backward, backward, on_after_backward) and each optimizer's step
// (on_before_optimizer_step, the step) itself.
// When a run fails after setup (a hook or step throws, the loss is not finite, a checkpoint cannot be written),
// on_exception gets the error, then teardown runs, and fit/validate/test/predict return the error.
//
// Not offered on callbacks: Lightning's on_save_checkpoint and on_load_checkpoint, which edit the checkpoint's
// dictionary (the module has them): a Kiln callback keeps its state through state_dict and load_state_dict, which
// the checkpoint stores under state_key(). Validation and test steps return nothing in Kiln, so their batch-end
// hooks have no `outputs`.
//
// A hook that throws stops the run: the trainer tears the device down and returns the error as a Status. To stop
// training gracefully, call `trainer.set_should_stop()`.
//
// Thread-safety: hooks run on the loop thread.
#ifndef KILN_TRAINER_CORE_CALLBACK_H_
#define KILN_TRAINER_CORE_CALLBACK_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ATen/core/ivalue.h"
#include "absl/status/status.h"
#include "trainer/core/batch.h"
#include "trainer/core/data_loader.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace kiln {

class LightningModule;
class Trainer;

// What a callback keeps in checkpoints: text keys and values.
using CallbackState = std::map<std::string, std::string>;
// What a callback keeps in checkpoints that is not text (Callback::value_state_dict): tensors, numbers, and lists
// and dictionaries of them, by key.
using CallbackValues = std::map<std::string, c10::IValue>;

// A logged metric a callback reads during fit (ModelCheckpoint's and EarlyStopping's `monitor`), for the check fit
// makes before the run folder exists: a metric that validation logs while validation never runs, or that is read at
// steps before validation first logs it, stops fit with an error naming `option` before anything is written.
struct MonitoredMetric {
  std::string name;    // "val_loss".
  std::string option;  // How the user set it, for the error: "ModelCheckpoint(monitor='val_loss')".
  // Read every this many optimizer steps (ModelCheckpoint's every_n_train_steps); 0: after validation or at an
  // epoch's end, when a value can be there.
  int64_t every_n_train_steps = 0;
  // Whether a value that is not there stops fit (EarlyStopping's and ModelCheckpoint's strictness): a lenient reader
  // is not refused.
  bool strict = true;
};

class Callback {
 public:
  virtual ~Callback() = default;

  // Identifies this callback's state in checkpoints; two callbacks of one class with different settings must differ.
  virtual std::string state_key() const = 0;
  // Monitoring callbacks run after the module's on_train_epoch_end (see the order above).
  virtual bool is_monitoring() const { return false; }
  // The logged metrics this callback reads during fit, for fit's check before the run starts (MonitoredMetric).
  virtual std::vector<MonitoredMetric> monitored_metrics() const { return {}; }

  // Checks the configuration before anything runs; an error stops fit/validate/test before the device is touched.
  virtual absl::Status validate_config(const Trainer& trainer) const {
    (void)trainer;
    return absl::OkStatus();
  }

  // Runs before the inputs are checked (a checkpoint to resume, the data) and before the loggers claim the run's
  // folder: a callback must not write files here, nor take the run folder's name (do both from on_fit_start, or
  // the stage's start hook, as ModelCheckpoint does).
  virtual void setup(Trainer& trainer, LightningModule& module, Stage stage) {}
  virtual void teardown(Trainer& trainer, LightningModule& module, Stage stage) {}
  virtual void on_fit_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_fit_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_sanity_check_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_sanity_check_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_train_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_train_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_train_epoch_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_train_epoch_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) {}
  // `outputs`: the loss training_step returned, detached (before any division for accumulate_grad_batches), on
  // the device. Reading its value on the host waits for the device; a callback that does not read it costs nothing.
  virtual void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs,
                                  const Batch& batch, int64_t batch_idx) {
    // Until the deprecated form below goes, a callback that overrides only that one is still called.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    on_train_batch_end(trainer, module, batch, batch_idx);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
  }
  // Deprecated (2026-12-02, kept for one release): the form before `outputs` was passed. Override the one above.
  [[deprecated("override on_train_batch_end(trainer, module, outputs, batch, batch_idx), which also receives the "
               "step's loss")]] virtual void
  on_train_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) {}
  // `loss`: what backward runs on (divided for accumulate_grad_batches, scaled by a 16-mixed precision plugin).
  virtual void on_before_backward(Trainer& trainer, LightningModule& module, const at::Tensor& loss) {}
  virtual void on_after_backward(Trainer& trainer, LightningModule& module) {}
  virtual void on_before_optimizer_step(Trainer& trainer, LightningModule& module, torch::optim::Optimizer& optimizer) {
  }
  virtual void on_before_zero_grad(Trainer& trainer, LightningModule& module, torch::optim::Optimizer& optimizer) {}
  virtual void on_validation_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_validation_epoch_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_validation_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                         int64_t batch_idx) {}
  virtual void on_validation_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch,
                                       int64_t batch_idx) {}
  virtual void on_validation_epoch_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_validation_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_test_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_test_epoch_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_test_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) {}
  virtual void on_test_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) {}
  virtual void on_test_epoch_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_test_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_predict_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_predict_epoch_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_predict_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                      int64_t batch_idx) {}
  // `outputs`: what predict_step returned for the batch, on the device.
  virtual void on_predict_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs,
                                    const Batch& batch, int64_t batch_idx) {}
  virtual void on_predict_epoch_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_predict_end(Trainer& trainer, LightningModule& module) {}

  // The batch hooks with the index of the stage's loader (DataModule::val_dataloaders() and the like; 0 with one),
  // which the loops call, as Lightning's take dataloader_idx. By default they call the forms above (which callbacks
  // written before several loaders override), so override whichever form the callback needs.
  virtual void on_validation_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                         int64_t batch_idx, int64_t dataloader_idx) {
    on_validation_batch_start(trainer, module, batch, batch_idx);
  }
  virtual void on_validation_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch,
                                       int64_t batch_idx, int64_t dataloader_idx) {
    on_validation_batch_end(trainer, module, batch, batch_idx);
  }
  virtual void on_test_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx,
                                   int64_t dataloader_idx) {
    on_test_batch_start(trainer, module, batch, batch_idx);
  }
  virtual void on_test_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx,
                                 int64_t dataloader_idx) {
    on_test_batch_end(trainer, module, batch, batch_idx);
  }
  virtual void on_predict_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                      int64_t batch_idx, int64_t dataloader_idx) {
    on_predict_batch_start(trainer, module, batch, batch_idx);
  }
  virtual void on_predict_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs,
                                    const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
    on_predict_batch_end(trainer, module, outputs, batch, batch_idx);
  }
  // The error that ends a run (see above). It must not throw; the run's error is what the caller gets.
  virtual void on_exception(Trainer& trainer, LightningModule& module, const absl::Status& error) {}

  // Checkpointed state. load_state_dict gets exactly what state_dict returned; a malformed value is an error.
  virtual CallbackState state_dict() const { return {}; }
  virtual absl::Status load_state_dict(const CallbackState& state) {
    (void)state;
    return absl::OkStatus();
  }
  // Checkpointed state that is not text (StochasticWeightAveraging's averaged weights, as a {name: tensor}
  // dictionary), written with its types beside state_dict()'s entries, in the same dictionary under state_key(), so
  // that torch.load and Lightning read it as they read their own; its keys must differ from state_dict()'s. Called
  // at save time, right after state_dict(), on every rank; the checkpoint takes a copy of every tensor then, so the
  // callback may go on updating its own in place. load_value_state_dict runs after load_state_dict, when the
  // checkpoint holds this callback's dictionary, and gets every entry of it as read (the text ones too, with the
  // types the file has); a value that does not fit is an error, which stops the resume.
  virtual CallbackValues value_state_dict() const { return {}; }
  virtual absl::Status load_value_state_dict(const CallbackValues& state) {
    (void)state;
    return absl::OkStatus();
  }
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_CALLBACK_H_
