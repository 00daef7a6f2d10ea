// Deliberately broken accelerators: "conformance_broken" breaks one rule of the contract for every check of the
// conformance suite (its collective backend sums wrongly and waits for peers past any timeout), "conformance_meta"
// keeps every rule but cannot compute, and "conformance_scatter" keeps every rule but its flat reduce-scatter adds
// one (what the kit's fsdp training must catch). Each of the others has one fault a vendor's stack has had:
// "conformance_gather" all-gathers in the wrong rank order, "conformance_hang" never returns from rank 1's broadcast,
// "conformance_liar" counts 4 devices of which 2 cannot hold a tensor; "conformance_lacking" is right, but declares
// that its backend has no reduce-scatter (and has none). conformance_kit_test runs the suite against them and expects
// the checks to fail (or, for the declared lack, to skip saying so), so a suite that stopped checking something would
// not pass silently. Test support only.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "hal/accelerator.h"
#include "hal/collectives.h"
#include "hal/devices.h"
#include "hal/registry.h"

namespace kiln::testing {
namespace {

// A collective backend with faults a vendor's could have. kSumAndWait: it waits for its peers with no bound
// (ignoring CollectiveOptions::timeout), and its all-reduce adds one to the sum. kScatter: its flat reduce-scatter
// adds one. kGatherOrder: its all-gathers put the ranks' parts in reverse order. kHang: rank 1's broadcast never
// returns. kNoScatter: it has no reduce-scatter (c10d's default, which refuses). Everything else is Gloo's.
enum class Fault { kSumAndWait, kScatter, kGatherOrder, kHang, kNoScatter };

std::string NameOf(Fault fault) {
  switch (fault) {
    case Fault::kSumAndWait:
      return "wrong";
    case Fault::kScatter:
      return "scatter";
    case Fault::kGatherOrder:
      return "gather";
    case Fault::kHang:
      return "hang";
    case Fault::kNoScatter:
      return "lacking";
  }
  return "wrong";
}

class WrongCollectives final : public c10d::Backend {
 public:
  static absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> Create(const CollectiveOptions& options, Fault fault) {
    if (fault == Fault::kSumAndWait) {
      options.store->set(absl::StrCat("here_", options.rank), std::vector<uint8_t>{1});
      for (int peer = 0; peer < options.world_size; ++peer) {
        while (!options.store->check({absl::StrCat("here_", peer)})) ::usleep(100 * 1000);  // No bound: the fault.
      }
    }
    absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> gloo = MakeGlooCollectiveBackend(options);
    if (!gloo.ok()) return gloo.status();
    return c10::intrusive_ptr<c10d::Backend>(
        c10::make_intrusive<WrongCollectives>(options.rank, options.world_size, *gloo, fault));
  }
  WrongCollectives(int rank, int size, c10::intrusive_ptr<c10d::Backend> gloo, Fault fault)
      : c10d::Backend(rank, size), gloo_(std::move(gloo)), fault_(fault) {}
  const std::string getBackendName() const override { return NameOf(fault_); }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (fault_ != Fault::kSumAndWait) return gloo_->allreduce(tensors, opts);
    gloo_->allreduce(tensors, opts)->wait();
    for (at::Tensor& tensor : tensors) tensor.add_(1);  // The fault.
    return gloo_->barrier();
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    if (fault_ == Fault::kHang && getRank() == 1) {
      while (true) ::sleep(60);  // The fault: never returns, whatever the timeout.
    }
    return gloo_->broadcast(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    if (fault_ != Fault::kGatherOrder) return gloo_->allgather(outputs, inputs, opts);
    gloo_->allgather(outputs, inputs, opts)->wait();
    for (auto& parts : outputs) std::reverse(parts.begin(), parts.end());  // The fault (the same shapes).
    return gloo_->barrier();
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    if (fault_ != Fault::kGatherOrder) return gloo_->_allgather_base(output, input, opts);
    gloo_->_allgather_base(output, input, opts)->wait();
    // The fault: rank r's part where rank world - 1 - r's belongs.
    output.copy_(output.view({getSize(), -1}).flip(0).reshape(output.sizes()));
    return gloo_->barrier();
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    if (fault_ == Fault::kNoScatter) return c10d::Backend::_reduce_scatter_base(output, input, opts);
    if (fault_ != Fault::kScatter) return gloo_->_reduce_scatter_base(output, input, opts);
    gloo_->_reduce_scatter_base(output, input, opts)->wait();
    output.add_(1);  // The fault.
    return gloo_->barrier();
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override { return gloo_->barrier(opts); }

 private:
  c10::intrusive_ptr<c10d::Backend> gloo_;
  Fault fault_;
};

class BrokenAccelerator final : public Accelerator {
 public:
  // Not the registered name (and not lower case).
  std::string name() const override { return "Conformance_Broken"; }

  // Accepts anything, even "many".
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override { return std::vector<int>{0}; }

  // Changes between calls.
  int AutoDeviceCount() const override { return 1 + (calls_++ % 2); }

  absl::Status CheckAvailable() const override { return absl::OkStatus(); }

  // One device too many.
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    return std::vector<c10::Device>(indices.size() + 1, c10::Device(c10::DeviceType::CPU));
  }

  // Works once only.
  absl::Status SetupDevice(const LogicalDevice&) override {
    if (setups_++ > 0) return absl::InternalError("set up twice");
    return absl::OkStatus();
  }

  absl::Status TeardownDevice(const LogicalDevice&) override { return absl::OkStatus(); }

  // A bad key with a value that is not a number, for any device at all.
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice&) const override {
    return DeviceStats{{"Bad Key", std::numeric_limits<double>::quiet_NaN()}};
  }

  std::string ProcessGroupBackend() const override { return "wrong"; }

  // Sums wrongly, and waits for missing peers forever.
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(const LogicalDevice&,
                                                                          const CollectiveOptions& options) override {
    return WrongCollectives::Create(options, Fault::kSumAndWait);
  }

  // Lists a precision twice.
  std::vector<Precision> SupportedPrecisions() const override { return {Precision::k32True, Precision::k32True}; }

  // A peak that is no FLOP/s figure.
  std::optional<double> PeakFlops(const LogicalDevice&, c10::ScalarType) const override { return -1.0; }

 private:
  mutable std::atomic<int> calls_{0};
  std::atomic<int> setups_{0};
};

// Keeps every rule but one: its devices are meta devices, which hold no data, so nothing trains on them.
class MetaAccelerator final : public Accelerator {
 public:
  std::string name() const override { return "conformance_meta"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override {
    return ParseDeviceCount(devices, 1, name());
  }
  int AutoDeviceCount() const override { return 1; }
  absl::Status CheckAvailable() const override { return absl::OkStatus(); }
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    return std::vector<c10::Device>(indices.size(), c10::Device(c10::DeviceType::Meta));
  }
  absl::Status SetupDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::Status TeardownDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice& device) const override {
    if (device.compute.type() != c10::DeviceType::Meta) return absl::InvalidArgumentError("not a meta device");
    return DeviceStats{{"devices", 1.0}};
  }
  std::string ProcessGroupBackend() const override { return "gloo"; }
  std::vector<Precision> SupportedPrecisions() const override { return {Precision::k32True}; }
};

// Keeps every rule, on 2 CPU devices, but for its collective backend's one fault (Fault).
class FaultyAccelerator final : public Accelerator {
 public:
  explicit FaultyAccelerator(Fault fault) : fault_(fault) {}
  std::string name() const override { return "conformance_" + NameOf(fault_); }
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override {
    return ParseDeviceCount(devices, 2, name());
  }
  int AutoDeviceCount() const override { return 2; }
  absl::Status CheckAvailable() const override { return absl::OkStatus(); }
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    return std::vector<c10::Device>(indices.size(), c10::Device(c10::DeviceType::CPU));
  }
  absl::Status SetupDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::Status TeardownDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice&) const override {
    return DeviceStats{{"devices", 2.0}};
  }
  std::string ProcessGroupBackend() const override { return NameOf(fault_); }
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(const LogicalDevice&,
                                                                          const CollectiveOptions& options) override {
    return WrongCollectives::Create(options, fault_);
  }
  // Only the accelerator without a reduce-scatter says so; the others claim everything.
  CollectiveSupport SupportedCollectives() const override {
    return {.reduce_scatter = fault_ != Fault::kNoScatter};
  }
  std::vector<Precision> SupportedPrecisions() const override { return {Precision::k32True}; }

 private:
  Fault fault_;
};

// Counts 4 devices, but only the first two (host memory) can hold anything: the others are meta devices, as a runtime
// that counts a board's slots rather than its working chips would give.
class LiarAccelerator final : public Accelerator {
 public:
  std::string name() const override { return "conformance_liar"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override {
    return ParseDeviceCount(devices, 4, name());
  }
  int AutoDeviceCount() const override { return 4; }
  absl::Status CheckAvailable() const override { return absl::OkStatus(); }
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    std::vector<c10::Device> devices;
    for (int index : indices) devices.emplace_back(index < 2 ? c10::DeviceType::CPU : c10::DeviceType::Meta);
    return devices;
  }
  absl::Status SetupDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::Status TeardownDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice&) const override {
    return DeviceStats{{"devices", 4.0}};
  }
  std::string ProcessGroupBackend() const override { return "gloo"; }
  std::vector<Precision> SupportedPrecisions() const override { return {Precision::k32True}; }
};

KILN_REGISTER_ACCELERATOR({
    .name = "conformance_gather",
    .description = "Its all-gathers put the ranks' parts in reverse order (tests/conformance only).",
    .aliases = {},
    .priority = -1000,
    .factory = [] { return std::make_shared<FaultyAccelerator>(Fault::kGatherOrder); },
});

KILN_REGISTER_ACCELERATOR({
    .name = "conformance_hang",
    .description = "Rank 1's broadcast never returns (tests/conformance only).",
    .aliases = {},
    .priority = -1000,
    .factory = [] { return std::make_shared<FaultyAccelerator>(Fault::kHang); },
});

KILN_REGISTER_ACCELERATOR({
    .name = "conformance_lacking",
    .description = "Declares, rightly, that its backend has no reduce-scatter (tests/conformance only).",
    .aliases = {},
    .priority = -1000,
    .factory = [] { return std::make_shared<FaultyAccelerator>(Fault::kNoScatter); },
});

KILN_REGISTER_ACCELERATOR({
    .name = "conformance_liar",
    .description = "Counts 4 devices, 2 of which cannot hold a tensor (tests/conformance only).",
    .aliases = {},
    .priority = -1000,
    .factory = [] { return std::make_shared<LiarAccelerator>(); },
});

KILN_REGISTER_ACCELERATOR({
    .name = "conformance_scatter",
    .description = "Its flat reduce-scatter adds one (tests/conformance only).",
    .aliases = {},
    .priority = -1000,
    .factory = [] { return std::make_shared<FaultyAccelerator>(Fault::kScatter); },
});

KILN_REGISTER_ACCELERATOR({
    .name = "conformance_meta",
    .description = "Runs on meta devices, which cannot compute (tests/conformance only).",
    .aliases = {},
    .priority = -1000,
    .factory = [] { return std::make_shared<MetaAccelerator>(); },
});

KILN_REGISTER_ACCELERATOR({
    .name = "conformance_broken",
    .description = "Breaks every rule the conformance suite checks (tests/conformance only).",
    .aliases = {},
    .priority = -1000,
    .factory = [] { return std::make_shared<BrokenAccelerator>(); },
});

}  // namespace
}  // namespace kiln::testing
