// What the trainer keeps in a checkpoint and how it comes back (Lightning's checkpoint connector). The file format
// and its checks are checkpoint_io.h's. A checkpoint is a dictionary with Lightning's keys:
//   epoch                      the epoch the loop was in (Lightning's trainer.current_epoch)
//   global_step                optimizer steps so far
//   pytorch-lightning_version  kLightningLayoutVersion (lightning_layout.h): the oldest Lightning release whose layout
//                              this is, labelled as Kiln's (Lightning's load_from_checkpoint needs the key)
//   state_dict                 every parameter and buffer of the module, by its full name
//   loops                      Lightning's loop progress: the fit loop's epochs, batches, optimizer and scheduler steps
//                              and its validation, and the validate, test and predict loops (lightning_layout.h)
//   optimizer_states           each optimizer's state, as PyTorch lays it out (optimizer_state_dict.h)
//   lr_schedulers              each scheduler's {"last_epoch", "_step_count"}, PyTorch's names for how often it
//                              stepped (replayed on load); a MetricScheduler's (ReduceLROnPlateau's) whole
//                              state_dict() instead, with PyTorch's keys (best, num_bad_epochs, cooldown_counter,
//                              last_epoch, ...), loaded as it is
//   callbacks                  each callback's non-empty state, under its state_key: text, with Lightning's types
//                              for the callbacks Lightning also has (lightning_layout.h)
//   hyper_parameters           the module's hyper-parameters (numbers and booleans as such), hparams_name "kwargs"
//   <the data's state_key()>   the data module's state_dict(), as Lightning keeps a datamodule's (the built-in
//                              tables': "TabularData", their columns, classes and feature statistics)
//   kiln                       Kiln's own: the format records, "loop" (the exact place to resume: epoch,
//                              batch_in_epoch, global_step), "train_loader" (a stream's position there, when
//                              the training loader is one), "rng_cpu" (LibTorch's default CPU generator) and
//                              "precision_plugin" (for 16-mixed the gradient scaler's scale, growth tracker and
//                              settings; empty otherwise)
// A checkpoint Kiln did not write (Lightning's, or a PyTorch program's dictionary in that layout) resumes from its
// state_dict, optimizer_states, lr_schedulers, epoch, global_step and loops; its callbacks' states, written by other
// callbacks, are not applied, and the generator and precision plugin keep their state.
//
// Thread-safety: call from the loop thread, while nothing else uses the state's objects.
#ifndef KILN_TRAINER_CHECKPOINT_LIGHTNING_CHECKPOINT_CONNECTOR_H_
#define KILN_TRAINER_CHECKPOINT_LIGHTNING_CHECKPOINT_CONNECTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ATen/core/Dict.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/lightning/lightning_layout.h"
#include "trainer/core/callback.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/lightning_module.h"
#include "trainer/plugins/precision/precision_plugin.h"

namespace kiln {

// Where the loops stand: what a checkpoint resumes.
struct LoopProgress {
  int64_t epoch = 0;           // The epoch to resume in.
  int64_t batch_in_epoch = 0;  // The next batch to run in it.
  int64_t global_step = 0;     // Optimizer steps so far.
  // What Lightning's fields say (written, and read from checkpoints Kiln did not write): the epoch the loop is in
  // and the batches it has finished in it. At the end of an epoch `epoch` is already the next one.
  int64_t current_epoch = 0;
  int64_t batches_done = 0;
  // Lightning's other counters, for its resume (written), and as the checkpoint held them (read).
  LightningCounters lightning;
  // A stream training loader's position (DataLoader::state_dict) at batch_in_epoch, written under
  // kiln.train_loader; None when the loader is not a stream or the checkpoint is at an epoch's start.
  c10::IValue train_loader;
};

// The live objects a checkpoint captures and restores; the trainer owns them.
struct TrainingState {
  LightningModule& model;
  OptimizerConfig& optimizers;
  std::vector<int64_t>& scheduler_steps;  // How often each of optimizers.schedulers has stepped.
  const std::vector<std::shared_ptr<Callback>>& callbacks;
  PrecisionPlugin& precision;
  DataModule* data = nullptr;  // Its state_dict() is saved under its state_key(); null or an empty key: none.
  // Saving: Lightning's weights-only checkpoint (ModelCheckpoint's save_weights_only): no optimizer_states,
  // lr_schedulers or callbacks, and of Kiln's section only the loop's place and the format records. Restoring it
  // with restore_training is refused (it cannot continue a run); without, it loads as any checkpoint.
  bool weights_only = false;
};

// A checkpoint of `state` at `progress`, taken but not yet a dictionary (checkpoint_io.h's CheckpointSnapshot);
// `path` names the file in errors. What the checkpoint holds of this step is taken here: a CPU copy of its own of
// every tensor (parameters, buffers, optimizer state, the generator's state; the data's and a plateau scheduler's
// state_dict() as plain copies), never one the loop goes on updating in place, and the plain values (the counters,
// the hyper-parameters, the precision plugin's state, and each callback's state_dict() as it returned it). The
// callbacks' state_dict() runs here, on the calling thread, as Lightning calls it at save time: read later, a
// callback's state could be a later step's, and a callback need not be thread-safe. The snapshot's build makes the
// dictionary SnapshotTrainingState returns, from those copies only, on whichever thread runs it
// (CheckpointWriter::SubmitSnapshot: the writer's); it hands the copies over to the dictionary, so it builds once (a
// second call is FailedPrecondition). Costs the copies; no dictionary is made and nothing is pickled.
absl::StatusOr<CheckpointSnapshot> TakeCheckpointSnapshot(const std::string& path, const TrainingState& state,
                                                          const LoopProgress& progress);

// What a rank that writes no file does when a checkpoint is saved (Lightning calls the checkpoint hooks on every rank):
// each callback's state_dict() and the module's on_save_checkpoint, whose additions are checked as
// TakeCheckpointSnapshot checks them (the same error on every rank) and then dropped. Copies nothing.
absl::Status CallSaveCheckpointHooks(const std::string& path, const TrainingState& state);

// A checkpoint of `state` at `progress`, as the dictionary SerializeCheckpoint (checkpoint_io.h) writes:
// TakeCheckpointSnapshot's build, run on this thread. Every tensor in it is a copy of its own, so the dictionary stays
// this step's state while it is serialised on another thread; every container in it is Any-typed (snapshot_dict.h).
absl::StatusOr<c10::impl::GenericDict> SnapshotTrainingState(const std::string& path, const TrainingState& state,
                                                             const LoopProgress& progress);

// The bytes of a checkpoint of `state` at `progress`: SerializeCheckpoint of SnapshotTrainingState, on this thread.
absl::StatusOr<std::string> DumpTrainingState(const std::string& path, const TrainingState& state,
                                              const LoopProgress& progress);

// Reads the checkpoint at `path` into `state`: the module's parameters and buffers and, with `restore_training`, the
// optimizers (their state moved to `device`, where the parameters are), the schedulers, the callbacks' and the
// precision plugin's state and the CPU generator. Everything is read and checked before anything changes, so a
// damaged, truncated or foreign file, or one that does not fit this model and configuration, is refused with the
// state untouched. Returns where the loops stood; without `restore_training`, only the epoch and global step the
// checkpoint was saved at (current_epoch, global_step), for messages, or zeros for a format-1 file.
absl::StatusOr<LoopProgress> RestoreTrainingState(const std::string& path, const TrainingState& state,
                                                  const c10::Device& device, bool restore_training);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_LIGHTNING_CHECKPOINT_CONNECTOR_H_
