#include "hal/compat/autocast.h"

#include <vector>

#include "ATen/autocast_mode.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torch/version.h"

namespace kiln::compat {
namespace {

// The device types, in the order messages list them.
std::vector<c10::DeviceType> AutocastTypes() {
#if TORCH_VERSION_MAJOR >= 2
  std::vector<c10::DeviceType> types;
  for (c10::DeviceType type : at::autocast::_AUTOCAST_SUPPORTED_DEVICES) types.push_back(type);
  return types;
#else
  return {c10::DeviceType::CPU, c10::DeviceType::CUDA, c10::DeviceType::XPU};
#endif
}

}  // namespace

bool HasAutocast(c10::DeviceType device_type) {
  for (c10::DeviceType type : AutocastTypes()) {
    if (type == device_type) return true;
  }
  return false;
}

bool HasAutocastType(c10::DeviceType device_type, c10::ScalarType dtype) {
  if (!HasAutocast(device_type) || (dtype != c10::kBFloat16 && dtype != c10::kHalf)) return false;
  // LibTorch 1.13's CPU autocast casts to bfloat16 only; 2.x has float16 CPU kernels for it too.
  return TORCH_VERSION_MAJOR >= 2 || device_type != c10::DeviceType::CPU || dtype == c10::kBFloat16;
}

std::string AutocastDeviceTypes() {
  std::vector<std::string> names;
  for (c10::DeviceType type : AutocastTypes()) names.push_back(c10::DeviceTypeName(type, /*lower_case=*/true));
  if (names.size() < 2) return absl::StrJoin(names, "");
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " and ", last);
}

#if TORCH_VERSION_MAJOR >= 2

AutocastState GetAutocast(c10::DeviceType device_type) {
  return {at::autocast::is_autocast_enabled(device_type), at::autocast::get_autocast_dtype(device_type)};
}

void SetAutocast(c10::DeviceType device_type, const AutocastState& state) {
  at::autocast::set_autocast_dtype(device_type, state.dtype);
  at::autocast::set_autocast_enabled(device_type, state.enabled);
}

#else

AutocastState GetAutocast(c10::DeviceType device_type) {
  switch (device_type) {
    case c10::DeviceType::CUDA:
      return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
    case c10::DeviceType::XPU:
      return {at::autocast::is_xpu_enabled(), at::autocast::get_autocast_xpu_dtype()};
    default:
      return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
  }
}

void SetAutocast(c10::DeviceType device_type, const AutocastState& state) {
  switch (device_type) {
    case c10::DeviceType::CUDA:
      at::autocast::set_autocast_gpu_dtype(state.dtype);
      at::autocast::set_enabled(state.enabled);
      break;
    case c10::DeviceType::XPU:
      at::autocast::set_autocast_xpu_dtype(state.dtype);
      at::autocast::set_xpu_enabled(state.enabled);
      break;
    default:
      at::autocast::set_autocast_cpu_dtype(state.dtype);
      at::autocast::set_cpu_enabled(state.enabled);
      break;
  }
}

#endif  // TORCH_VERSION_MAJOR

}  // namespace kiln::compat
