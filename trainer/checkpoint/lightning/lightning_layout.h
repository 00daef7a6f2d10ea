// The parts of a checkpoint that Lightning reads as its own, in the layout and with the types Lightning 2.x writes,
// so that Lightning's Trainer resumes a Kiln checkpoint (fit, validate, test, predict) where Kiln left it, with no
// warnings; and the same parts read back, from Kiln's files and Lightning's.
//
//   loops      Lightning's progress counters for the fit loop (its epochs, the epoch loop's batches, optimizer
//              steps and zero_grad calls, scheduler steps, the validation run inside fit) and the validate, test and
//              predict loops. Lightning decides how to resume from how these counters relate to each other, so they
//              are written as Lightning writes them at the same point: at the end of an epoch (the next one starts
//              fresh), after a batch's on_train_batch_end hooks have begun (that batch counts as not completed, so
//              Lightning completes it rather than running it again) or after they returned (a validation run at a
//              batch's end). Kiln resumes from its own record (the checkpoint's "kiln.loop"); these counters come
//              back as LightningCounters, so that a file Lightning wrote and Kiln resumed is written on as it was.
//   callbacks  The states of the callbacks Lightning also has, with Lightning's types: ModelCheckpoint's scores as
//              tensors and best_k_models as {path: score}, EarlyStopping's counts as integers and its best score
//              as a tensor, Timer's elapsed time under Lightning's "time_elapsed" too. Kiln's other keys stay beside
//              them (Lightning ignores keys it does not read). A callback with an empty state is left out, as
//              Lightning leaves it out, so that Lightning does not warn about callbacks it was not given.
#ifndef KILN_TRAINER_CHECKPOINT_LIGHTNING_LIGHTNING_LAYOUT_H_
#define KILN_TRAINER_CHECKPOINT_LIGHTNING_LIGHTNING_LAYOUT_H_

#include <cstdint>
#include <string>

#include "ATen/core/Dict.h"
#include "ATen/core/ivalue.h"
#include "trainer/checkpoint/format/pickle_writer.h"
#include "trainer/checkpoint/format/snapshot_dict.h"
#include "trainer/core/callback.h"

namespace kiln {

// The version written under "pytorch-lightning_version": the oldest Lightning release whose checkpoint layout this
// is, with Kiln's local label (PEP 440), so that no reader takes the file for one a Lightning release wrote.
// Lightning runs no migration on it (its last is 2.0.0's) and does not warn (it is older than every 2.x release
// with these loops); a Lightning before 2.0 warns that the file is newer.
inline constexpr char kLightningLayoutVersion[] = "2.0.0+kiln";

// Loop counters at or above this, in any checkpoint, are taken for damage: 2^40 steps is decades of training at a
// microsecond a step.
inline constexpr int64_t kMaxCheckpointCounter = int64_t{1} << 40;

// Lightning's loop counters that Kiln's own resume does not need (LoopProgress has those). The trainer keeps them
// as it runs and restores them from a checkpoint's "loops".
struct LightningCounters {
  int64_t batches_total = 0;         // Training batches started in every epoch so far.
  int64_t batches_completed = 0;     // Batches of the current epoch whose on_train_batch_end hooks have returned.
  // Lightning's logging step: optimizer steps counted once a batch is done. Written only: a resumed run's is its
  // global step (Trainer::RestoreCheckpoint), whatever format the file has.
  int64_t batches_that_stepped = 0;
  int64_t steps_in_epoch = 0;        // Optimizer steps in the current epoch.
  int64_t scheduler_steps_in_epoch = 0;  // Every scheduler's steps in the current epoch.
  int64_t val_batches_in_epoch = 0;  // Validation batches run inside fit in the current epoch.
  int64_t val_batches_last_run = 0;  // Validation batches of the last validation run.
};

// Where the loops stand, in Lightning's terms.
struct LightningLoopPosition {
  int64_t current_epoch = 0;   // The epoch the loop is in (Lightning's trainer.current_epoch).
  bool epoch_ended = false;    // Its last batch and on_train_epoch_end have run: the next epoch starts fresh.
  int64_t batches_done = 0;    // Batches of current_epoch started (and trained).
  int64_t global_step = 0;     // Optimizer steps so far.
};

// The "loops" entry Lightning writes at `position`; `scheduler_steps`: every scheduler's steps in all epochs. The
// first two write it into a pickle or a value being built, without a dictionary made for it (snapshot_dict.h).
void LightningLoops(PickleWriter& out, const LightningLoopPosition& position, const LightningCounters& counters,
                    int64_t scheduler_steps);
void LightningLoops(ValueBuilder& out, const LightningLoopPosition& position, const LightningCounters& counters,
                    int64_t scheduler_steps);
c10::impl::GenericDict LightningLoops(const LightningLoopPosition& position, const LightningCounters& counters,
                                      int64_t scheduler_steps);

// The counters a checkpoint's "loops" entry holds; what it lacks (an older Kiln file) is derived from `position`
// as a run without gradient accumulation would have it. Never throws: counters are bookkeeping, not state to
// refuse a file over.
LightningCounters ReadLightningCounters(const c10::impl::GenericDict& checkpoint,
                                        const LightningLoopPosition& position);

// A callback's state as a checkpoint holds it (see the file comment), and back. KilnCallbackState throws c10::Error
// naming the key for a value Kiln cannot read back as text.
c10::impl::GenericDict LightningCallbackState(const std::string& state_key, const CallbackState& state);
void LightningCallbackState(PickleWriter& out, const std::string& state_key, const CallbackState& state);
void LightningCallbackState(ValueBuilder& out, const std::string& state_key, const CallbackState& state);
CallbackState KilnCallbackState(const std::string& state_key, const c10::IValue& value);

// Kiln's earlier name for a ModelCheckpoint's state key (before Lightning 2.x's train_time_interval was part of it)
// in its current form; any other key unchanged.
std::string CurrentStateKey(const std::string& state_key);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_LIGHTNING_LIGHTNING_LAYOUT_H_
