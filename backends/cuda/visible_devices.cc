#include "backends/cuda/visible_devices.h"

#include <algorithm>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::cuda {
namespace {

// Like strtoul as CUDA applies it to each entry: the leading digits (an optional sign first), or -1 when there are
// none. A value too large for an int can never name a device, so it reads as the end of the list too.
int LeadingOrdinal(absl::string_view entry) {
  size_t end = 0;
  if (end < entry.size() && (entry[end] == '+' || entry[end] == '-')) ++end;
  while (end < entry.size() && absl::ascii_isdigit(static_cast<unsigned char>(entry[end]))) ++end;
  int value = -1;
  if (!absl::SimpleAtoi(entry.substr(0, end), &value)) return -1;
  return value;
}

std::vector<std::string> PrefixedList(absl::string_view value, absl::string_view prefix) {
  std::vector<std::string> entries;
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (!absl::StartsWith(entry, prefix)) break;                                       // Anything else ends the list.
    if (std::find(entries.begin(), entries.end(), entry) != entries.end()) return {};  // A repeat hides all.
    entries.emplace_back(entry);
  }
  return entries;
}

}  // namespace

VisibleDevices ParseCudaVisibleDevices(std::optional<absl::string_view> value) {
  VisibleDevices visible;
  if (!value.has_value()) return visible;
  const absl::string_view text = absl::StripAsciiWhitespace(*value);
  if (absl::StartsWith(text, "GPU-")) {
    visible.kind = VisibleDevices::Kind::kGpuUuids;
    visible.uuids = PrefixedList(text, "GPU-");
    return visible;
  }
  if (absl::StartsWith(text, "MIG-")) {
    visible.kind = VisibleDevices::Kind::kMigUuids;
    visible.uuids = PrefixedList(text, "MIG-");
    return visible;
  }
  visible.kind = VisibleDevices::Kind::kOrdinals;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    const int ordinal = LeadingOrdinal(absl::StripAsciiWhitespace(entry));
    if (std::find(visible.ordinals.begin(), visible.ordinals.end(), ordinal) != visible.ordinals.end()) {
      visible.ordinals.clear();  // A repeated ordinal hides every device.
      return visible;
    }
    if (ordinal < 0) break;
    visible.ordinals.push_back(ordinal);
  }
  return visible;
}

absl::StatusOr<std::vector<int>> NvmlIndicesOfCudaDevices(const VisibleDevices& visible,
                                                          const std::vector<std::string>& nvml_uuids) {
  const int present = static_cast<int>(nvml_uuids.size());
  std::vector<int> indices;
  switch (visible.kind) {
    case VisibleDevices::Kind::kAll:
      for (int i = 0; i < present; ++i) indices.push_back(i);
      return indices;
    case VisibleDevices::Kind::kOrdinals:
      for (int ordinal : visible.ordinals) {
        if (ordinal >= present) break;  // CUDA stops at the first ordinal beyond the devices present.
        indices.push_back(ordinal);
      }
      return indices;
    case VisibleDevices::Kind::kGpuUuids:
      for (const std::string& candidate : visible.uuids) {
        int match = -1;
        for (int i = 0; i < present; ++i) {
          if (!absl::StartsWith(nvml_uuids[i], candidate)) continue;
          if (match >= 0) return std::vector<int>();  // An ambiguous prefix hides every device.
          match = i;
        }
        if (match < 0) break;  // An unknown UUID ends the list.
        if (std::find(indices.begin(), indices.end(), match) != indices.end()) return std::vector<int>();
        indices.push_back(match);
      }
      return indices;
    case VisibleDevices::Kind::kMigUuids:
      break;
  }
  return absl::UnimplementedError(
      "CUDA_VISIBLE_DEVICES names MIG instances (MIG-...); Kiln does not map MIG instances to NVML devices, so "
      "NVML statistics are not reported for them");
}

std::optional<std::string> CudaVisibleDevicesFromEnvironment() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string VisibilityHint(std::optional<absl::string_view> value) {
  if (!value.has_value()) return "CUDA_VISIBLE_DEVICES is unset";
  if (value->empty()) return "CUDA_VISIBLE_DEVICES=''";
  return absl::StrCat("CUDA_VISIBLE_DEVICES=", *value);
}

}  // namespace kiln::cuda
