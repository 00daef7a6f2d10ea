#include "hal/compat/privateuse1.h"

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "c10/core/DeviceType.h"
#include "ATen/CPUGeneratorImpl.h"
#include "ATen/detail/PrivateUse1HooksInterface.h"
#include "c10/util/Exception.h"

namespace kiln::compat {
namespace {

class RuntimeHooks final : public at::PrivateUse1HooksInterface {
 public:
  explicit RuntimeHooks(PrivateUse1Runtime runtime) : runtime_(std::move(runtime)) {}

  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return runtime_.device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(runtime_.device_count()); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    const int count = runtime_.device_count();
    TORCH_CHECK(device_index >= -1 && device_index < count, PrivateUse1Name(), " has no device ",
                static_cast<int>(device_index), " (", count, " devices)");
    std::lock_guard<std::mutex> lock(mutex_);
    // Grown, never shrunk: a reference handed out stays valid for the process's life.
    while (static_cast<int>(generators_.size()) < count) {
      generators_.push_back(std::make_unique<at::Generator>(at::make_generator<at::CPUGeneratorImpl>()));
    }
    return *generators_[device_index < 0 ? 0 : device_index];
  }

 private:
  const PrivateUse1Runtime runtime_;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<at::Generator>> generators_;
};

}  // namespace

void RegisterPrivateUse1Runtime(PrivateUse1Runtime runtime) {
  at::RegisterPrivateUse1HooksInterface(new RuntimeHooks(std::move(runtime)));  // Lives as long as the process.
}

absl::Status CheckPrivateUse1Name(absl::string_view name) {
  if (!c10::is_privateuse1_backend_registered()) return absl::OkStatus();
  const std::string current = c10::get_privateuse1_backend();
  if (current == name) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("cannot name LibTorch's out-of-tree device (PrivateUse1) '", name,
                                                    "': it is '", current,
                                                    "' already, and one process has one PrivateUse1 backend"));
}

absl::Status NamePrivateUse1Backend(absl::string_view name) {
  if (c10::is_privateuse1_backend_registered()) return CheckPrivateUse1Name(name);
  try {
    c10::register_privateuse1_backend(std::string(name));
  } catch (const c10::Error& error) {
    return absl::InvalidArgumentError(absl::StrCat("cannot name LibTorch's out-of-tree device (PrivateUse1) '", name,
                                                   "': ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

std::string PrivateUse1Name() { return c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/true); }

c10::IntArrayRef AsIntArrayRef(c10::SymIntArrayRef sizes) { return c10::asIntArrayRefSlow(sizes, __FILE__, __LINE__); }

}  // namespace kiln::compat
