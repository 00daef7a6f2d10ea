// Throughput: Lightning's Throughput (lightning.fabric.utilities.throughput), the arithmetic ThroughputMonitor logs.
// Fed the running totals after each batch (seconds since the start, batches, samples, optionally items and the
// batch's FLOPs), it gives rates over the last `window_size` updates, per device and, with several devices, for all
// of them, under Lightning's keys:
//
//   time, batches, samples, lengths      the totals of the last update (lengths: when items were given)
//   device/batches_per_sec, device/samples_per_sec, device/items_per_sec
//                                        this device's rate over the window (once the window is full)
//   batches_per_sec, samples_per_sec, items_per_sec
//                                        the same times the world size (world size > 1 only)
//   device/flops_per_sec                 FLOPs over the window's time, per device (once `window_size` FLOP figures
//                                        were given)
//   flops_per_sec                        all devices' (world size > 1 only)
//   device/mfu                           device/flops_per_sec / available_flops (when that is known and not 0)
//
// ("/" is `separator`.) As in Lightning, every device is taken to compute as fast and to hold as many samples as
// this one, and the first update of the window only marks its start.
//
// Thread-safety: none; one owner.
#ifndef KILN_TRAINER_CALLBACKS_THROUGHPUT_H_
#define KILN_TRAINER_CALLBACKS_THROUGHPUT_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "trainer/core/metrics.h"

namespace kiln {

class Throughput {
 public:
  // `available_flops`: one device's peak FLOP/s (unset: no MFU). `world_size` >= 1, `window_size` >= 2 (checked by
  // ThroughputMonitorOptions' check; here they are clamped).
  Throughput(std::optional<double> available_flops, int64_t world_size, int64_t window_size = 100,
             std::string separator = "/");

  // The totals after one more batch: `time` seconds since the start, `batches`, `samples` and `lengths` (items) seen
  // on this device so far, and `flops` this batch cost on this device. InvalidArgument, naming the values, where
  // Lightning raises: a total that does not increase, fewer samples than batches, fewer items than samples, or items
  // given for some updates and not others.
  absl::Status Update(double time, int64_t batches, int64_t samples, std::optional<int64_t> lengths = std::nullopt,
                      std::optional<double> flops = std::nullopt);
  // The metrics above, for the updates so far (empty before the first).
  MetricMap Compute() const;
  void Reset();

  const std::string& separator() const { return separator_; }
  // The last update's time (0 before any): what ThroughputMonitor keeps to leave validation out of training's clock.
  double last_time() const { return time_.empty() ? 0.0 : time_.back(); }

 private:
  std::optional<double> available_flops_;
  int64_t world_size_;
  size_t window_size_;
  std::string separator_;
  std::deque<double> time_;
  std::deque<int64_t> batches_, samples_, lengths_;
  std::deque<double> flops_;  // Each update's FLOPs times the world size.
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_THROUGHPUT_H_
