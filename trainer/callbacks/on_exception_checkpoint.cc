#include "trainer/callbacks/on_exception_checkpoint.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/loops/loss_check.h"
#include "trainer/trainer.h"

namespace kiln {

OnExceptionCheckpoint::OnExceptionCheckpoint(OnExceptionCheckpointOptions options) : options_(std::move(options)) {}

absl::Status OnExceptionCheckpoint::validate_config(const Trainer& trainer) const {
  (void)trainer;
  if (options_.filename.empty()) {
    return absl::InvalidArgumentError(
        "OnExceptionCheckpoint(filename='') is not valid: the filename cannot be empty; pass a name without the "
        "extension, e.g. \"on_exception\" (the default)");
  }
  if (options_.dirpath.empty()) {
    return absl::InvalidArgumentError(
        "OnExceptionCheckpoint(dirpath='') is not valid: pass the folder the checkpoint goes to (it is required, as "
        "an error may come before the run has a folder)");
  }
  return absl::OkStatus();
}

std::string OnExceptionCheckpoint::ckpt_path() const {
  return absl::StrCat(options_.dirpath, "/", options_.filename, kCheckpointExtension);
}

void OnExceptionCheckpoint::setup(Trainer& trainer, LightningModule& module, Stage stage) {
  fitting_ = stage == Stage::kFit;
}

void OnExceptionCheckpoint::on_exception(Trainer& trainer, LightningModule& module, const absl::Status& error) {
  if (!fitting_ || IsNonFiniteLossError(error)) return;
  if (trainer.is_global_zero()) {
    std::error_code made;
    std::filesystem::create_directories(options_.dirpath, made);
  }
  // The run's error is what the caller gets; a save that fails too is said here.
  if (absl::Status saved = trainer.save_checkpoint(ckpt_path()); !saved.ok()) {
    LOG(WARNING) << "OnExceptionCheckpoint could not save " << ckpt_path() << ": " << saved;
    return;
  }
  if (trainer.is_global_zero()) LOG(INFO) << "fit failed with an error; saved a checkpoint to " << ckpt_path();
}

void OnExceptionCheckpoint::teardown(Trainer& trainer, LightningModule& module, Stage stage) {
  // Called after a fit that succeeded (a failed one does not tear the callbacks down).
  if (stage != Stage::kFit) return;
  std::error_code error;
  if (trainer.is_global_zero() && std::filesystem::exists(ckpt_path(), error)) {
    trainer.remove_checkpoint(ckpt_path()).IgnoreError();
  }
}

}  // namespace kiln
