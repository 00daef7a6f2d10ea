// Timer: tracks training time and stops fit when `duration` is spent (Lightning's Timer; the Trainer adds one for
// `max_time`). The elapsed training time is checkpointed, so a resumed run keeps counting.
#ifndef KILN_TRAINER_CALLBACKS_TIMER_H_
#define KILN_TRAINER_CALLBACKS_TIMER_H_

#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "trainer/core/callback.h"

namespace kiln {

struct TimerOptions {
  std::optional<absl::Duration> duration;  // Unset: only measure.
  std::string interval = "step";           // Check after every "step" or every "epoch".
};

class Timer final : public Callback {
 public:
  explicit Timer(TimerOptions options = {});

  std::string state_key() const override { return "Timer"; }
  absl::Status validate_config(const Trainer& trainer) const override;
  void on_fit_start(Trainer& trainer, LightningModule& module) override;
  void on_fit_end(Trainer& trainer, LightningModule& module) override;
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;
  CallbackState state_dict() const override;
  absl::Status load_state_dict(const CallbackState& state) override;

  // Training time so far, including what earlier runs of a resumed fit spent.
  absl::Duration time_elapsed() const;
  std::optional<absl::Duration> time_remaining() const;

 private:
  void Check(Trainer& trainer);

  TimerOptions options_;
  absl::Duration offset_ = absl::ZeroDuration();  // From checkpoints.
  std::optional<absl::Time> start_;
  std::optional<absl::Time> end_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_TIMER_H_
