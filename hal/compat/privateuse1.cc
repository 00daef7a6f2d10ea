#include "hal/compat/privateuse1.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "c10/core/DeviceType.h"
#include "hal/device_kit/device_kit.h"

namespace kiln::compat {

void RegisterPrivateUse1Runtime(PrivateUse1Runtime runtime) {
  device_kit::RegisterRuntimeHooks(std::move(runtime.device_count));
}

absl::Status CheckPrivateUse1Name(absl::string_view name) {
  if (!c10::is_privateuse1_backend_registered()) return absl::OkStatus();
  const std::string current = c10::get_privateuse1_backend();
  if (current == name) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("cannot name LibTorch's out-of-tree device (PrivateUse1) '", name,
                                                    "': it is '", current,
                                                    "' already, and one process has one PrivateUse1 device"));
}

absl::Status NamePrivateUse1Backend(absl::string_view name) {
  const std::string error = device_kit::NamePrivateUse1(std::string(name));
  if (error.empty()) return absl::OkStatus();
  return c10::is_privateuse1_backend_registered() ? absl::FailedPreconditionError(error)
                                                   : absl::InvalidArgumentError(error);
}

std::string PrivateUse1Name() { return device_kit::PrivateUse1Name(); }

c10::IntArrayRef AsIntArrayRef(c10::SymIntArrayRef sizes) { return c10::asIntArrayRefSlow(sizes, __FILE__, __LINE__); }

}  // namespace kiln::compat
