// OnExceptionCheckpoint: when fit fails with an error (a hook or step that throws, a data loader that fails, a
// checkpoint that cannot be written), saves a checkpoint of where the run stood before the error reaches the
// caller (Lightning's OnExceptionCheckpoint, with its arguments and default filename).
//
//   trainer_options.callbacks.push_back(std::make_shared<kiln::OnExceptionCheckpoint>(
//       kiln::OnExceptionCheckpointOptions{.dirpath = "runs/crash"}));  // runs/crash/on_exception.ckpt
//
// The file is the full training checkpoint (Trainer::save_checkpoint), written atomically: fit returns once it is
// on disk, then returns the run's error unchanged. `ckpt_path` resumes from it. A stop for a non-finite training
// loss (on_nonfinite_loss="stop") is not an exception in Lightning, where such a loss raises nothing: no file is
// written then (the state after it is not one to resume). Nor outside fit (validate, test and predict keep no
// training state), nor when the error came before the run had a model to save (bad options, a refused input).
// Every rank of a distributed run takes part (only rank zero writes), as in any save; a rank that fails alone
// cannot save (its peers are not there to meet), and the run's error stands.
// A fit that succeeds removes the file this callback would write, as Lightning's teardown does, so that an old
// crash's checkpoint is not mistaken for this run's.
#ifndef KILN_TRAINER_CALLBACKS_ON_EXCEPTION_CHECKPOINT_H_
#define KILN_TRAINER_CALLBACKS_ON_EXCEPTION_CHECKPOINT_H_

#include <string>

#include "absl/status/status.h"
#include "trainer/core/callback.h"

namespace kiln {

struct OnExceptionCheckpointOptions {
  std::string dirpath;                  // Required: where the file goes (an exception may come before any folder).
  std::string filename = "on_exception";  // Without the extension.
};

class OnExceptionCheckpoint final : public Callback {
 public:
  explicit OnExceptionCheckpoint(OnExceptionCheckpointOptions options);

  // Lightning's: "OnExceptionCheckpoint" (one state key for the class).
  std::string state_key() const override { return "OnExceptionCheckpoint"; }
  // An empty dirpath or filename is refused before anything runs.
  absl::Status validate_config(const Trainer& trainer) const override;
  void setup(Trainer& trainer, LightningModule& module, Stage stage) override;
  void on_exception(Trainer& trainer, LightningModule& module, const absl::Status& error) override;
  void teardown(Trainer& trainer, LightningModule& module, Stage stage) override;

  // dirpath/filename.ckpt.
  std::string ckpt_path() const;

 private:
  OnExceptionCheckpointOptions options_;
  bool fitting_ = false;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_ON_EXCEPTION_CHECKPOINT_H_
