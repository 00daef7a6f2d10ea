// CUDA_VISIBLE_DEVICES, read the way the CUDA runtime reads it, and the NVML device behind each CUDA device index.
//
// With CUDA_VISIBLE_DEVICES set, CUDA's device i is not NVML's device i: CUDA numbers only the visible devices, in
// the order listed, while NVML (which ignores the variable) numbers every GPU on the machine. Statistics read
// through NVML must therefore go through this mapping. The parsing rules follow the CUDA runtime's behaviour as
// PyTorch documents and reproduces it (torch/cuda/__init__.py, `_parse_visible_devices`):
//   - unset: every device, CUDA index i is NVML index i;
//   - a comma-separated list of ordinals ("2,0"): each entry is read like strtoul (leading digits; "1gpu" is 1);
//     the first entry that is not a non-negative number ends the list (so "" and "-1" hide every device);
//     an ordinal repeated makes the whole list empty; ordinals are kept up to the first one beyond the devices
//     present;
//   - GPU UUIDs ("GPU-8f6c...", full or a unique prefix): matched against NVML's UUIDs in the same way; an unknown
//     UUID ends the list, an ambiguous prefix or a repeated device makes it empty;
//   - MIG instance UUIDs ("MIG-..."): not mapped (limitation: NVML exposes MIG instances through other calls).
//
// Limitation: without CUDA_VISIBLE_DEVICES, CUDA's default order (CUDA_DEVICE_ORDER=FASTEST_FIRST) can differ from
// NVML's PCI bus order on machines that mix GPU models; set CUDA_DEVICE_ORDER=PCI_BUS_ID there so both agree.
//
// Thread-safety: pure functions, except CudaVisibleDevicesFromEnvironment, which reads the environment.
#ifndef KILN_BACKENDS_CUDA_VISIBLE_DEVICES_H_
#define KILN_BACKENDS_CUDA_VISIBLE_DEVICES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::cuda {

struct VisibleDevices {
  enum class Kind {
    kAll,       // The variable is unset.
    kOrdinals,  // Physical device ordinals, in CUDA order (possibly none).
    kGpuUuids,  // "GPU-..." UUIDs or prefixes, in CUDA order.
    kMigUuids,  // "MIG-..." instance UUIDs; not mapped to NVML devices.
  };
  Kind kind = Kind::kAll;
  std::vector<int> ordinals;       // For kOrdinals.
  std::vector<std::string> uuids;  // For kGpuUuids and kMigUuids.

  friend bool operator==(const VisibleDevices& a, const VisibleDevices& b) {
    return a.kind == b.kind && a.ordinals == b.ordinals && a.uuids == b.uuids;
  }
};

// Parses the variable's value; nullopt means unset. Never fails: what CUDA would ignore is ignored.
VisibleDevices ParseCudaVisibleDevices(std::optional<absl::string_view> value);

// The NVML index of each CUDA device index 0, 1, ...; the result's size is the number of devices CUDA would see.
// `nvml_uuids` holds the UUID of every NVML device, in NVML order (its size is the number of GPUs present; the
// UUIDs are only read for kGpuUuids). Unimplemented for kMigUuids, naming the limitation. Never throws.
absl::StatusOr<std::vector<int>> NvmlIndicesOfCudaDevices(const VisibleDevices& visible,
                                                          const std::vector<std::string>& nvml_uuids);

// The variable's value from the environment; nullopt when unset.
std::optional<std::string> CudaVisibleDevicesFromEnvironment();

// For messages: "CUDA_VISIBLE_DEVICES=0,2", "CUDA_VISIBLE_DEVICES=''" or "CUDA_VISIBLE_DEVICES is unset".
std::string VisibilityHint(std::optional<absl::string_view> value);

}  // namespace kiln::cuda

#endif  // KILN_BACKENDS_CUDA_VISIBLE_DEVICES_H_
