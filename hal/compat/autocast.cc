#include "hal/compat/autocast.h"

#include <vector>

#include "ATen/autocast_mode.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::compat {
namespace {

// The device types, in the order messages list them.
std::vector<c10::DeviceType> AutocastTypes() {
  std::vector<c10::DeviceType> types;
  for (c10::DeviceType type : at::autocast::_AUTOCAST_SUPPORTED_DEVICES) types.push_back(type);
  return types;
}

}  // namespace

bool HasAutocast(c10::DeviceType device_type) {
  for (c10::DeviceType type : AutocastTypes()) {
    if (type == device_type) return true;
  }
  return false;
}

bool HasAutocastType(c10::DeviceType device_type, c10::ScalarType dtype) {
  return HasAutocast(device_type) && (dtype == c10::kBFloat16 || dtype == c10::kHalf);
}

std::string AutocastDeviceTypes() {
  std::vector<std::string> names;
  for (c10::DeviceType type : AutocastTypes()) names.push_back(c10::DeviceTypeName(type, /*lower_case=*/true));
  if (names.size() < 2) return absl::StrJoin(names, "");
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " and ", last);
}

AutocastState GetAutocast(c10::DeviceType device_type) {
  return {at::autocast::is_autocast_enabled(device_type), at::autocast::get_autocast_dtype(device_type)};
}

void SetAutocast(c10::DeviceType device_type, const AutocastState& state) {
  at::autocast::set_autocast_dtype(device_type, state.dtype);
  at::autocast::set_autocast_enabled(device_type, state.enabled);
}

}  // namespace kiln::compat
