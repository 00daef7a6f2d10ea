#include "trainer/callbacks/throughput.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

// Appends `value` to a window of at most `size` values that must increase (Lightning's _MonotonicWindow).
template <typename T>
absl::Status AppendIncreasing(std::deque<T>& window, T value, size_t size, const char* what) {
  if (!window.empty() && window.back() >= value) {
    return absl::InvalidArgumentError(absl::StrCat("Throughput: expected ", what, " to increase, last: ",
                                                   window.back(), ", current: ", value));
  }
  window.push_back(value);
  if (window.size() > size) window.pop_front();
  return absl::OkStatus();
}

}  // namespace

Throughput::Throughput(std::optional<double> available_flops, int64_t world_size, int64_t window_size,
                       std::string separator)
    : available_flops_(available_flops),
      world_size_(std::max<int64_t>(1, world_size)),
      window_size_(static_cast<size_t>(std::max<int64_t>(2, window_size))),
      separator_(std::move(separator)) {}

absl::Status Throughput::Update(double time, int64_t batches, int64_t samples, std::optional<int64_t> lengths,
                                std::optional<double> flops) {
  if (samples < batches) {
    return absl::InvalidArgumentError(
        absl::StrCat("Throughput: expected samples (", samples, ") to be greater or equal than batches (", batches,
                     "); a batch_size_fn that gives 0 for a batch makes this"));
  }
  if (lengths.has_value() && *lengths < samples) {
    return absl::InvalidArgumentError(absl::StrCat("Throughput: expected lengths (", *lengths,
                                                   ") to be greater or equal than samples (", samples, ")"));
  }
  if (absl::Status s = AppendIncreasing(time_, time, window_size_, "the time"); !s.ok()) return s;
  if (absl::Status s = AppendIncreasing(batches_, batches, window_size_, "batches"); !s.ok()) return s;
  if (absl::Status s = AppendIncreasing(samples_, samples, window_size_, "samples"); !s.ok()) return s;
  if (lengths.has_value()) {
    if (absl::Status s = AppendIncreasing(lengths_, *lengths, window_size_, "lengths"); !s.ok()) return s;
    if (lengths_.size() != samples_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Throughput: lengths were given for ", lengths_.size(),
                                                     " updates but samples for ", samples_.size(),
                                                     "; give lengths with every update or with none"));
    }
  }
  if (flops.has_value()) {
    flops_.push_back(*flops * static_cast<double>(world_size_));
    if (flops_.size() > window_size_) flops_.pop_front();
  }
  return absl::OkStatus();
}

MetricMap Throughput::Compute() const {
  MetricMap metrics;
  if (time_.empty()) return metrics;
  const std::string device = absl::StrCat("device", separator_);
  const bool global = world_size_ > 1;
  const double world = static_cast<double>(world_size_);
  metrics["time"] = time_.back();
  metrics["batches"] = static_cast<double>(batches_.back());
  metrics["samples"] = static_cast<double>(samples_.back());
  if (!lengths_.empty()) metrics["lengths"] = static_cast<double>(lengths_.back());
  const double elapsed = time_.back() - time_.front();
  if (time_.size() == window_size_) {
    const double batches_per_sec = static_cast<double>(batches_.back() - batches_.front()) / elapsed;
    const double samples_per_sec = static_cast<double>(samples_.back() - samples_.front()) / elapsed;
    metrics[device + "batches_per_sec"] = batches_per_sec;
    metrics[device + "samples_per_sec"] = samples_per_sec;
    if (global) {
      metrics["batches_per_sec"] = batches_per_sec * world;
      metrics["samples_per_sec"] = samples_per_sec * world;
    }
    if (lengths_.size() == window_size_) {
      const double items_per_sec = static_cast<double>(lengths_.back() - lengths_.front()) / elapsed;
      metrics[device + "items_per_sec"] = items_per_sec;
      if (global) metrics["items_per_sec"] = items_per_sec * world;
    }
  }
  if (flops_.size() == window_size_) {
    // The window's FLOPs are those of every update but its first, which only marks where the window's time starts.
    const double window_flops = std::accumulate(flops_.begin(), flops_.end(), 0.0) - flops_.front();
    const double flops_per_sec = window_flops / elapsed;
    const double device_flops_per_sec = flops_per_sec / world;
    if (global) metrics["flops_per_sec"] = flops_per_sec;
    metrics[device + "flops_per_sec"] = device_flops_per_sec;
    if (available_flops_.has_value() && *available_flops_ != 0) {
      metrics[device + "mfu"] = device_flops_per_sec / *available_flops_;
    }
  }
  return metrics;
}

void Throughput::Reset() {
  time_.clear();
  batches_.clear();
  samples_.clear();
  lengths_.clear();
  flops_.clear();
}

}  // namespace kiln
