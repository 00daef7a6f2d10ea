// FakeAccelerator: a test double for the HAL boundary, for hardware that is not on this machine.
//
// Tests choose its name, device count, availability, preferred collective backend and precisions, and can read back
// what the trainer asked of it (set-up and tear-down calls). Its devices are CPU devices, so a model "on" a fake
// device really computes. It is test support only: production code never links it (see hal/BUILD's visibility).
#ifndef KILN_HAL_TESTING_FAKE_ACCELERATOR_H_
#define KILN_HAL_TESTING_FAKE_ACCELERATOR_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "hal/accelerator.h"
#include "hal/devices.h"

namespace kiln::testing {

struct FakeAcceleratorOptions {
  std::string name = "fake";
  int device_count = 2;
  // Empty when available; otherwise the reason CheckAvailable gives.
  std::string unavailable_reason;
  std::string process_group_backend = "gloo";
  std::vector<Precision> precisions = {Precision::k32True};
  std::optional<PrecisionSubstitute> substitute;  // Offered for every unsupported precision when set.
  // PeakFlops' answer per dtype, for every device; a dtype not listed is unknown.
  std::map<c10::ScalarType, double> peak_flops;
};

class FakeAccelerator final : public Accelerator {
 public:
  explicit FakeAccelerator(FakeAcceleratorOptions options = {}) : options_(std::move(options)) {}

  std::string name() const override { return options_.name; }

  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override {
    return ParseDeviceIndices(devices, options_.device_count, options_.name);
  }

  int AutoDeviceCount() const override { return options_.device_count; }

  absl::Status CheckAvailable() const override {
    if (options_.unavailable_reason.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(options_.unavailable_reason);
  }

  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    return std::vector<c10::Device>(indices.size(), c10::Device(c10::DeviceType::CPU));
  }

  absl::Status SetupDevice(const LogicalDevice&) override {
    absl::MutexLock lock(&mutex_);
    ++setup_calls_;
    return absl::OkStatus();
  }

  absl::Status TeardownDevice(const LogicalDevice&) override {
    absl::MutexLock lock(&mutex_);
    ++teardown_calls_;
    return absl::OkStatus();
  }

  // Its devices all compute on the CPU; the statistics tell them apart by the logical index.
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice& device) const override {
    if (!device.compute.is_cpu() || device.index < 0 || device.index >= options_.device_count) {
      return absl::InvalidArgumentError(absl::StrCat(options_.name, " has no device ", device.ToString()));
    }
    return DeviceStats{{"fake_counter", 1.0}, {"device_index", static_cast<double>(device.index)}};
  }

  std::string ProcessGroupBackend() const override { return options_.process_group_backend; }

  std::vector<Precision> SupportedPrecisions() const override { return options_.precisions; }

  std::optional<PrecisionSubstitute> SubstitutePrecision(Precision requested) const override {
    return options_.substitute;
  }

  std::optional<double> PeakFlops(const LogicalDevice&, c10::ScalarType dtype) const override {
    const auto found = options_.peak_flops.find(dtype);
    if (found == options_.peak_flops.end()) return std::nullopt;
    return found->second;
  }

  int setup_calls() const {
    absl::MutexLock lock(&mutex_);
    return setup_calls_;
  }
  int teardown_calls() const {
    absl::MutexLock lock(&mutex_);
    return teardown_calls_;
  }

 private:
  const FakeAcceleratorOptions options_;
  mutable absl::Mutex mutex_;
  int setup_calls_ ABSL_GUARDED_BY(mutex_) = 0;
  int teardown_calls_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace kiln::testing

#endif  // KILN_HAL_TESTING_FAKE_ACCELERATOR_H_
