// "Never train on a non-finite loss" without a host read per step (the training epoch loop's, internal to
// //trainer): the device flags a non-finite loss (found_inf, a float32 scalar on the loss's device that turns 1 at
// the first such loss and stays 1), the fused optimizers (DeviceSkipOptimizer) skip their update on the device when
// it is set, and the host reads the flag only where it reads something anyway (a log row, validation, a
// checkpoint, the epoch's end) or every kMaxPending steps. The losses since the last read are kept to name the
// batch.
#ifndef KILN_TRAINER_LOOPS_LOSS_CHECK_H_
#define KILN_TRAINER_LOOPS_LOSS_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "torch/optim/optimizer.h"
#include "trainer/core/device_skip_optimizer.h"

namespace kiln {

// The error that stops fit at a non-finite training loss (Aborted: a training failure, fit exits 1, not bad input).
absl::Status NonFiniteLossError(const std::string& loss, int64_t epoch, int64_t batch, int64_t global_step);
// Whether `status` is that error (it carries a payload saying so; OnExceptionCheckpoint saves nothing for it).
bool IsNonFiniteLossError(const absl::Status& status);

class DeviceLossCheck {
 public:
  // Losses kept for naming a non-finite one, at most: reaching it reads the flag (one host read per this many steps).
  static constexpr size_t kMaxPending = 4096;

  // Where a training loss was computed: the loop's counters before its batch.
  struct Loss {
    int64_t epoch = 0;
    int64_t batch = 0;
    int64_t global_step = 0;
    at::Tensor loss;
  };

  // Starts an epoch, forgetting the last one's flag, losses and failure. With `on_device`, the optimizers that are
  // DeviceSkipOptimizers get the flag once it exists; without, every one of them gets none (they step as usual).
  void Start(bool on_device, const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers);
  bool on_device() const { return on_device_; }
  // Flags `loss` on its device when it is not finite (on_device() only). The flag is made on the first loss's
  // device and follows the loss should it move.
  void Add(const at::Tensor& loss, int64_t epoch, int64_t batch, int64_t global_step);
  bool full() const { return pending_.size() >= kMaxPending; }
  // Reads the flag when losses are pending. OK when none of them was non-finite; else the error that stops fit,
  // with `*failed` set to the first non-finite loss (the first time it is found; the same error is returned on
  // every later call until the next Start).
  absl::Status Check(std::optional<Loss>* failed);
  // The failure Check found, OK if none.
  const absl::Status& failure() const { return failure_; }
  // The epoch is over: Add is no longer expected.
  void Stop() { on_device_ = false; }

 private:
  bool on_device_ = false;
  at::Tensor found_inf_;
  std::vector<DeviceSkipOptimizer*> optimizers_;
  std::vector<Loss> pending_;
  absl::Status failure_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_LOSS_CHECK_H_
