#include "backends/hpu/hpu_accelerator.h"

#include <dlfcn.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/hpu/bridge.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "c10/util/Exception.h"
#include "hal/c10d_creators.h"
#include "hal/registry.h"
#include "torch/version.h"

namespace kiln {
namespace {

// Names the library that exports Habana's ProcessGroupHCCL creator (hal/c10d_creators.h).
constexpr char kHcclLibraryVariable[] = "KILN_HCCL_LIBRARY";

absl::Status CheckHpuType(const c10::Device& device) {
  if (device.type() == c10::DeviceType::HPU) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the hpu accelerator got device '", device.str(), "'; it runs only on 'hpu' devices"));
}

absl::Status NoDevice(const hpu::Discovery& discovery) { return absl::FailedPreconditionError(discovery.Summary()); }

}  // namespace

absl::StatusOr<std::vector<int>> ParseHpuDevices(const Devices& devices, int present) {
  absl::StatusOr<DeviceSelection> selection = ParseDevicesSyntax(devices);
  if (!selection.ok()) return selection.status();
  int count = 0;
  switch (selection->kind) {
    case DeviceSelection::Kind::kAuto:
      if (present <= 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("devices=", devices.ToString(), " asks for every HPU, but none is present"));
      }
      count = present;
      break;
    case DeviceSelection::Kind::kCount:
      count = selection->count;
      break;
    case DeviceSelection::Kind::kAll:
    case DeviceSelection::Kind::kIndices:
      return absl::InvalidArgumentError(
          absl::StrCat("`devices` selected with the hpu accelerator should be an int > 0 (how many HPUs to use), got ",
                       devices.ToString(),
                       "; the Habana runtime assigns a device to each process, so pass a count such as "
                       "devices=2, or \"auto\""));
  }
  if (count <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("`devices` selected with the hpu accelerator should be an int > 0, "
                     "got ",
                     devices.ToString()));
  }
  if (count > present) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " HPU devices requested, but only ", present, present == 1 ? " is" : " are", " present"));
  }
  std::vector<int> indices(count);
  for (int i = 0; i < count; ++i) indices[i] = i;
  return indices;
}

HpuAccelerator::HpuAccelerator(HpuOptions options) : options_(std::move(options)) {}

hpu::Discovery HpuAccelerator::Discover() const { return hpu::DiscoverDevices(options_.root); }

absl::StatusOr<std::vector<int>> HpuAccelerator::ParseDevices(const Devices& devices) const {
  return ParseHpuDevices(devices, AutoDeviceCount());
}

int HpuAccelerator::AutoDeviceCount() const { return Discover().count(); }

absl::Status HpuAccelerator::LoadBridge() const {
  absl::MutexLock lock(&mutex_);
  if (bridge_tried_) return bridge_status_;
  bridge_tried_ = true;
  std::vector<std::string> candidates = {options_.bridge_library};
  if (options_.bridge_library.empty()) {
    const char* mode = std::getenv(hpu::kLazyModeVariable);
    absl::StatusOr<std::vector<std::string>> chosen =
        hpu::BridgeCandidates(mode ? std::optional<absl::string_view>(mode) : std::nullopt, TORCH_VERSION_MAJOR);
    if (!chosen.ok()) {
      bridge_status_ = absl::FailedPreconditionError(chosen.status().message());
      return bridge_status_;
    }
    candidates = *std::move(chosen);
    if (!options_.bridge_folder.empty()) {
      for (std::string& library : candidates) library = absl::StrCat(options_.bridge_folder, "/", library);
    }
  }
  std::vector<std::string> failures;
  for (const std::string& library : candidates) {
    dlerror();
    // RTLD_GLOBAL, as Habana's own loader does: the bridge's kernels register themselves with the LibTorch already
    // in the process, and other Habana libraries resolve symbols against it. It is never unloaded.
    if (dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) {
      bridge_library_ = library;
      return bridge_status_;
    }
    const char* reason = dlerror();
    failures.push_back(absl::StrCat(library, ": ", reason == nullptr ? "unknown reason" : reason));
  }
  bridge_status_ = absl::FailedPreconditionError(absl::StrCat(
      "Habana's PyTorch bridge ", absl::StrJoin(candidates, " or "), " cannot be loaded (",
      absl::StrJoin(failures, "; "),
      "); it gives LibTorch's 'hpu' device its kernels: install Intel Gaudi's PyTorch bridge built for LibTorch ",
      TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, " and add its folder (habana_frameworks/torch/lib) to "
      "LD_LIBRARY_PATH"));
  return bridge_status_;
}

std::string HpuAccelerator::BridgeLibrary() const {
  absl::MutexLock lock(&mutex_);
  return bridge_library_.empty() ? options_.bridge_library : bridge_library_;
}

absl::Status HpuAccelerator::CheckAvailable() const {
  const hpu::Discovery discovery = Discover();
  if (discovery.count() == 0) return NoDevice(discovery);
  return LoadBridge();
}

std::vector<c10::Device> HpuAccelerator::ParallelDevices(const std::vector<int>& indices) const {
  return std::vector<c10::Device>(indices.size(), c10::Device(c10::DeviceType::HPU));
}

absl::Status HpuAccelerator::SetupDevice(const LogicalDevice& logical) {
  const c10::Device& device = logical.compute;
  if (absl::Status status = CheckIndexIsCompute(logical); !status.ok()) return status;
  if (absl::Status status = CheckHpuType(device); !status.ok()) return status;
  const hpu::Discovery discovery = Discover();
  if (discovery.count() == 0) return NoDevice(discovery);
  if (absl::Status bridge = LoadBridge(); !bridge.ok()) return bridge;
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::HPU)) {
    return absl::FailedPreconditionError(
        absl::StrCat(BridgeLibrary(),
                     " was loaded, but LibTorch has no 'hpu' device implementation registered; the "
                     "bridge must be built for the LibTorch this program links (",
                     TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ")"));
  }
  try {
    c10::impl::getDeviceGuardImpl(c10::DeviceType::HPU)
        ->setDevice(c10::Device(c10::DeviceType::HPU, device.has_index() ? device.index() : 0));
  } catch (const c10::Error& error) {
    return absl::InternalError(
        absl::StrCat("selecting device '", device.str(), "' failed: ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status HpuAccelerator::TeardownDevice(const LogicalDevice& logical) {
  const c10::Device& device = logical.compute;
  if (absl::Status status = CheckIndexIsCompute(logical); !status.ok()) return status;
  // The Habana runtime releases the device's memory when the process lets it go; LibTorch 1.13's device-neutral
  // interface has nothing to call before that.
  return CheckHpuType(device);
}

absl::StatusOr<DeviceStats> HpuAccelerator::GetDeviceStats(const LogicalDevice& logical) const {
  const c10::Device& device = logical.compute;
  if (absl::Status status = CheckIndexIsCompute(logical); !status.ok()) return status;
  if (absl::Status status = CheckHpuType(device); !status.ok()) return status;
  const int index = device.has_index() ? device.index() : 0;
  const std::vector<hpu::HabanaDevice> counted = Discover().counted();
  if (index >= static_cast<int>(counted.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("HPU device ", index, " requested, but ", counted.size(), " HPU device(s) are present"));
  }
  return hpu::ReadDeviceStats(counted[index]);
}

// What was checked (2026-12-03, from public sources; no Gaudi machine was at hand): Habana's c10d backend for HPU
// tensors, ProcessGroupHCCL, is created by its Python package (habana_frameworks.torch.distributed.hccl registers
// "hccl" with torch.distributed.Backend.register_backend, with a creator its library exports). LibTorch's C++ has no
// registry of backends by name, so Kiln reads the creator from the library, as it does for any vendor's
// (hal/c10d_creators.h): the one KILN_HCCL_LIBRARY names, then the bridge Kiln loaded. Without one it says so before
// training instead of failing in the first all-reduce.
absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> HpuAccelerator::MakeCollectiveBackend(
    const LogicalDevice& device, const CollectiveOptions& options) {
  (void)device;
  std::vector<std::string> searched;
  std::vector<std::string> libraries;
  const char* named = std::getenv(kHcclLibraryVariable);
  if (named != nullptr && *named != '\0') {
    if (dlopen(named, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* error = dlerror();
      return absl::FailedPreconditionError(absl::StrCat("hccl: ", kHcclLibraryVariable, "=", named,
                                                        " cannot be loaded: ", error != nullptr ? error : "?"));
    }
    libraries.push_back(named);
  }
  if (LoadBridge().ok()) libraries.push_back(BridgeLibrary());
  for (const std::string& library : libraries) {
    absl::StatusOr<std::vector<C10dCreator>> creators = FindC10dCreators(library);
    if (!creators.ok()) {
      searched.push_back(absl::StrCat(library, " (", creators.status().message(), ")"));
      continue;
    }
    for (const C10dCreator& creator : *creators) {
      if (creator.backend == "hccl") return CreateC10dBackend(creator, options);
    }
    searched.push_back(library);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "hccl: no library exports Habana's ProcessGroupHCCL creator with c10d's signature (searched: ",
      searched.empty() ? std::string("nothing: no bridge loaded and no ") + kHcclLibraryVariable
                       : absl::StrJoin(searched, ", "),
      "); Habana creates it from its Python package (habana_frameworks.torch.distributed.hccl); set ",
      kHcclLibraryVariable, "=PATH to the library that exports it (docs/collectives.md), or train on one HPU "
      "(devices=1), or on the CPU with strategy=ddp"));
}

std::vector<Precision> HpuAccelerator::SupportedPrecisions() const {
  return {Precision::k32True, Precision::kBf16Mixed};
}

KILN_REGISTER_ACCELERATOR({
    .name = "hpu",
    .description = "Habana (Intel Gaudi) HPUs, found through the habanalabs driver; needs Habana's PyTorch bridge.",
    .aliases = {},
    .priority = 10,
    .factory = [] { return std::make_shared<HpuAccelerator>(); },
});

}  // namespace kiln
