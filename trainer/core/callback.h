// Callbacks: code that runs at fixed points of the loops, like Lightning's Callback.
//
// Hook order in `Trainer::fit` (callbacks run in the order given, before the module's hook of the same name, except
// where noted):
//   setup(kFit)
//   on_fit_start
//   [sanity check: on_validation_start, on_validation_epoch_end, on_validation_end with sanity_checking() true]
//   for each epoch:
//     on_train_epoch_start
//     for each batch: on_train_batch_start, training_step + backward,
//                     [on_before_optimizer_step, optimizer step]  (every accumulate_grad_batches batches)
//                     on_train_batch_end,
//                     [validation when val_check_interval says so:
//                      on_validation_start, validation_step x M, on_validation_epoch_end, on_validation_end]
//     on_train_epoch_end: non-monitoring callbacks, then the module's hook, then monitoring callbacks
//                         (ModelCheckpoint, EarlyStopping), so that they see what the module logged
//   on_fit_end
//   teardown(kFit)
// validate/test run setup, on_{validation,test}_start, ..._epoch_end, ..._end, teardown.
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

class Callback {
 public:
  virtual ~Callback() = default;

  // Identifies this callback's state in checkpoints; two callbacks of one class with different settings must differ.
  virtual std::string state_key() const = 0;
  // Monitoring callbacks run after the module's on_train_epoch_end (see the order above).
  virtual bool is_monitoring() const { return false; }

  // Checks the configuration before anything runs; an error stops fit/validate/test before the device is touched.
  virtual absl::Status validate_config(const Trainer& trainer) const {
    (void)trainer;
    return absl::OkStatus();
  }

  virtual void setup(Trainer& trainer, LightningModule& module, Stage stage) {}
  virtual void teardown(Trainer& trainer, LightningModule& module, Stage stage) {}
  virtual void on_fit_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_fit_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_train_epoch_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_train_epoch_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                    int64_t batch_idx) {}
  virtual void on_train_batch_end(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) {}
  virtual void on_before_optimizer_step(Trainer& trainer, LightningModule& module,
                                        torch::optim::Optimizer& optimizer) {}
  virtual void on_validation_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_validation_epoch_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_validation_end(Trainer& trainer, LightningModule& module) {}
  virtual void on_test_start(Trainer& trainer, LightningModule& module) {}
  virtual void on_test_end(Trainer& trainer, LightningModule& module) {}

  // Checkpointed state. load_state_dict gets exactly what state_dict returned; a malformed value is an error.
  virtual CallbackState state_dict() const { return {}; }
  virtual absl::Status load_state_dict(const CallbackState& state) {
    (void)state;
    return absl::OkStatus();
  }
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_CALLBACK_H_
