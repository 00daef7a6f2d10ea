// LibTorch's autocast: one switch that takes the device type, for cpu, cuda, xpu, hpu, the out-of-tree device
// (PrivateUse1), mps and a few more (the list differs between 2.x versions; LibTorch's own list is read), with
// bfloat16 and float16 on each.
//
// The switches are thread-local, as autocast's are. Nothing here throws.
#ifndef KILN_HAL_COMPAT_AUTOCAST_H_
#define KILN_HAL_COMPAT_AUTOCAST_H_

#include <string>

#include "c10/core/DeviceType.h"
#include "c10/core/ScalarType.h"

namespace kiln::compat {

// Whether this LibTorch has autocast for `device_type` devices at all.
bool HasAutocast(c10::DeviceType device_type);

// Whether it can autocast to `dtype` (bfloat16 or float16) on `device_type` devices.
bool HasAutocastType(c10::DeviceType device_type, c10::ScalarType dtype);

// The device types HasAutocast accepts, for messages: "cpu, cuda and xpu".
std::string AutocastDeviceTypes();

// One device type's autocast switch: whether it is on and the type it casts to.
struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::kBFloat16;
};

// The switch of `device_type`; HasAutocast(device_type) must hold.
AutocastState GetAutocast(c10::DeviceType device_type);
void SetAutocast(c10::DeviceType device_type, const AutocastState& state);

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_AUTOCAST_H_
