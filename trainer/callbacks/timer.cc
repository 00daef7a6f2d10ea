#include "trainer/callbacks/timer.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "trainer/trainer.h"

namespace kiln {

Timer::Timer(TimerOptions options) : options_(std::move(options)) {}

absl::Status Timer::validate_config(const Trainer& trainer) const {
  (void)trainer;
  if (options_.interval != "step" && options_.interval != "epoch") {
    return absl::InvalidArgumentError(absl::StrCat("Unsupported parameter value Timer(interval=", options_.interval,
                                                   "). Possible choices are: step, epoch"));
  }
  return absl::OkStatus();
}

void Timer::on_fit_start(Trainer& trainer, LightningModule& module) {
  start_ = absl::Now();
  end_.reset();
}

void Timer::on_fit_end(Trainer& trainer, LightningModule& module) { end_ = absl::Now(); }

absl::Duration Timer::time_elapsed() const {
  if (!start_.has_value()) return offset_;
  return offset_ + (end_.value_or(absl::Now()) - *start_);
}

std::optional<absl::Duration> Timer::time_remaining() const {
  if (!options_.duration.has_value()) return std::nullopt;
  return *options_.duration - time_elapsed();
}

void Timer::on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                               int64_t batch_idx) {
  if (options_.interval == "step") Check(trainer);
}

void Timer::on_train_epoch_end(Trainer& trainer, LightningModule& module) {
  if (options_.interval == "epoch") Check(trainer);
}

void Timer::Check(Trainer& trainer) {
  if (!options_.duration.has_value() || time_elapsed() < *options_.duration || trainer.should_stop()) return;
  LOG(INFO) << "Time limit reached. Elapsed time is " << absl::FormatDuration(time_elapsed())
            << ". Signaling Trainer to stop.";
  trainer.set_should_stop();
}

CallbackState Timer::state_dict() const {
  return {{"time_elapsed_seconds", absl::StrCat(absl::ToDoubleSeconds(time_elapsed()))}};
}

absl::Status Timer::load_state_dict(const CallbackState& state) {
  auto found = state.find("time_elapsed_seconds");
  double seconds = 0;
  if (found == state.end() || !absl::SimpleAtod(found->second, &seconds) || seconds < 0) {
    return absl::InvalidArgumentError("malformed Timer state (time_elapsed_seconds)");
  }
  offset_ = absl::Seconds(seconds);
  return absl::OkStatus();
}

}  // namespace kiln
