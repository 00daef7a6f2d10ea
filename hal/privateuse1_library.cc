#include "hal/privateuse1_library.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/detail/PrivateUse1HooksInterface.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "c10/core/Allocator.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "glog/logging.h"
#include "hal/c10d_creators.h"
#include "hal/compat/autocast.h"
#include "hal/compat/error_message.h"
#include "hal/compat/privateuse1.h"
#include "hal/device_kit/device_kit.h"
#include "hal/staged_collectives.h"

namespace kiln {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// The device guard the library registered (null before it is loaded, or when it registered none).
const c10::impl::DeviceGuardImplInterface* Guard() {
  return c10::impl::hasDeviceGuardImpl(kType) ? c10::impl::getDeviceGuardImpl(kType) : nullptr;
}

// What a library that registered its device lacks of what Kiln uses, in words; empty when nothing.
std::vector<std::string> Lacking(int devices) {
  std::vector<std::string> lacking;
  if (!at::isPrivateUse1HooksRegistered()) lacking.push_back("runtime hooks (at::manual_seed's generators)");
  c10::Allocator* allocator = nullptr;
  try {
    allocator = c10::GetAllocator(kType);
  } catch (const std::exception&) {
  }
  if (allocator == nullptr) {
    lacking.push_back("an allocator");
  } else if (!compat::PrivateUse1AllocatorHasStats()) {
    lacking.push_back("memory statistics (its allocator is not a c10::DeviceAllocator)");
  }
  if (devices > 0) {
    const c10::impl::DeviceGuardImplInterface* guard = Guard();
    try {
      (void)guard->getStream(c10::Device(kType, 0));
    } catch (const std::exception&) {
      lacking.push_back("streams");
    }
    try {
      guard->synchronizeDevice(0);
    } catch (const std::exception&) {
      lacking.push_back("device synchronisation");
    }
  }
  return lacking;
}

class PrivateUse1Library final : public Accelerator {
 public:
  PrivateUse1Library(std::string path, std::string name) : path_(std::move(path)), name_(std::move(name)) {}

  std::string name() const override { return name_; }

  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override {
    // Chosen: the library is loaded now, before the plan names devices.
    if (absl::Status loaded = Load(); !loaded.ok()) return loaded;
    return ParseDeviceIndices(devices, Count(), name_, "");
  }

  // Counts only once the library is loaded: "auto" never loads a library.
  int AutoDeviceCount() const override { return IsLoaded() ? Count() : 0; }

  absl::Status CheckAvailable() const override {
    struct stat info;
    if (::stat(path_.c_str(), &info) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("the PrivateUse1 library ", path_, " of accelerator '", name_,
                                                        "' does not exist; give the path of the vendor's library"));
    }
    if (std::string taken = device_kit::CheckCanRegister(name_); !taken.empty()) {
      return absl::FailedPreconditionError(taken);
    }
    if (IsLoaded()) {
      if (absl::Status loaded = Load(); !loaded.ok()) return absl::FailedPreconditionError(loaded.message());
      if (Count() == 0) {
        return absl::FailedPreconditionError(absl::StrCat(path_, " counts no ", name_, " device on this machine"));
      }
    }
    return absl::OkStatus();
  }

  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    std::vector<c10::Device> devices;
    devices.reserve(indices.size());
    for (int index : indices) devices.emplace_back(kType, static_cast<c10::DeviceIndex>(index));
    return devices;
  }

  absl::Status SetupDevice(const LogicalDevice& device) override {
    if (absl::Status loaded = Load(); !loaded.ok()) return loaded;
    if (absl::Status status = CheckDevice(device); !status.ok()) return status;
    try {
      Guard()->setDevice(device.compute);
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat(path_, " could not make ", device.ToString(),
                                              " current: ", compat::ExceptionMessage(e)));
    }
    return absl::OkStatus();
  }

  absl::Status TeardownDevice(const LogicalDevice& device) override {
    if (absl::Status status = CheckDevice(device); !status.ok()) return status;
    try {
      Guard()->synchronizeDevice(device.compute.index());
    } catch (const std::exception&) {
      // A library without device synchronisation (said when it loaded): nothing to wait for that Kiln can see.
    }
    return absl::OkStatus();
  }

  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice& device) const override {
    if (absl::Status status = CheckDevice(device); !status.ok()) return status;
    return PrivateUse1DeviceStats(device.compute.index());
  }

  // The library's own c10d backend when it brings exactly one (found by its creator, hal/c10d_creators.h), else
  // Kiln's staged collectives (Gloo over host copies), which work for any device whose tensors copy to the host.
  std::string ProcessGroupBackend() const override {
    const std::vector<C10dCreator> creators = Creators();
    return creators.size() == 1 ? creators[0].backend : StagedName();
  }

  std::vector<std::string> ProcessGroupBackends() const override {
    std::vector<std::string> names;
    for (const C10dCreator& creator : Creators()) names.push_back(creator.backend);
    names.push_back(StagedName());
    if (names.size() == 2) return names;  // The library's one is its own, first.
    std::rotate(names.begin(), names.end() - 1, names.end());  // Several: staged is the default, first.
    return names;
  }

  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(const LogicalDevice& device,
                                                                          const CollectiveOptions& options) override {
    if (absl::Status status = CheckDevice(device); !status.ok()) return status;
    const std::string backend = options.backend.empty() ? ProcessGroupBackend() : options.backend;
    if (backend == StagedName()) return StagedCollectives::Create(options, backend, kType);
    for (const C10dCreator& creator : Creators()) {
      if (creator.backend == backend) return CreateC10dBackend(creator, options);
    }
    return absl::InvalidArgumentError(absl::StrCat("accelerator '", name_, "' (", path_, ") has no c10d backend '",
                                                   backend, "'; it has '",
                                                   absl::StrJoin(ProcessGroupBackends(), "', '"), "'"));
  }

  std::vector<Precision> SupportedPrecisions() const override {
    std::vector<Precision> precisions = {Precision::k32True, Precision::k64True};
    // bf16-mixed where the library registered autocast's casts for its device.
    if (IsLoaded() && compat::HasAutocast(kType)) precisions.push_back(Precision::kBf16Mixed);
    return precisions;
  }

 private:
  std::string StagedName() const { return name_ + "_staged"; }

  // The library's c10d creators with a backend name (empty before it is loaded).
  std::vector<C10dCreator> Creators() const {
    absl::MutexLock lock(&mutex_);
    return creators_;
  }

  bool IsLoaded() const {
    absl::MutexLock lock(&mutex_);
    return attempted_ && loaded_.ok();
  }

  int Count() const {
    const c10::impl::DeviceGuardImplInterface* guard = Guard();
    return guard != nullptr ? guard->deviceCount() : 0;
  }

  absl::Status CheckDevice(const LogicalDevice& device) const {
    if (absl::Status status = CheckIndexIsCompute(device); !status.ok()) return status;
    if (device.compute.type() != kType || device.index < 0 || device.index >= Count()) {
      return absl::InvalidArgumentError(absl::StrCat(device.ToString(), " is not one of accelerator '", name_,
                                                     "''s devices (", Count(), " counted)"));
    }
    return absl::OkStatus();
  }

  // Loads the library once; every later call returns the first outcome.
  absl::Status Load() const {
    absl::MutexLock lock(&mutex_);
    if (!attempted_) {
      attempted_ = true;
      loaded_ = LoadOnce();
    }
    return loaded_;
  }

  absl::Status LoadOnce() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    // One PrivateUse1 device per process: another's is refused before this library runs anything.
    if (std::string taken = device_kit::CheckCanRegister(name_); !taken.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(taken, "; ", path_, " was not loaded"));
    }
    if (::dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) == nullptr) {
      const char* error = ::dlerror();
      return absl::FailedPreconditionError(absl::StrCat("accelerator '", name_, "': cannot load the PrivateUse1 "
                                                        "library ", path_, ": ", error != nullptr ? error : "?"));
    }
    if (Guard() == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "accelerator '", name_, "': loading ", path_, " registered no PrivateUse1 device (c10 has no device guard "
          "for it): give the library that registers its device when it is loaded (its static initialisers), as a "
          "vendor's LibTorch extension does"));
    }
    if (c10::is_privateuse1_backend_registered()) {
      if (c10::get_privateuse1_backend() != name_) {
        return absl::FailedPreconditionError(absl::StrCat(
            path_, " names its device '", c10::get_privateuse1_backend(), "', not '", name_, "': adopt it as '",
            c10::get_privateuse1_backend(), "' (the name given with the library: --accelerator_library=",
            c10::get_privateuse1_backend(), "=PATH, kiln_backends' libraries key, AdoptPrivateUse1Library's name)"));
      }
    } else if (absl::Status named = compat::NamePrivateUse1Backend(name_); !named.ok()) {
      return named;
    }
    device_kit::RecordRegistration(name_, absl::StrCat("PrivateUse1 library ", path_));
    const int devices = Count();
    if (devices > 0) {
      // The backward pass device_kit::Register would have run, now that the loader's lock is free (a library that
      // registers while it loads cannot run it itself): LibTorch's autograd engine must know this device.
      if (std::string failed = device_kit::ProbeAutograd(); !failed.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "accelerator '", name_, "' (", path_, "): one backward pass on ", name_, ":0 failed: ", failed,
            failed.find("device_ready_queues_") != std::string::npos
                ? "; the library was loaded after this process's first backward pass, and LibTorch's autograd engine "
                  "knows only the devices registered before it: choose the accelerator before training anything else"
                : ""));
      }
    }
    std::vector<std::string> lacking = Lacking(devices);
    absl::StatusOr<std::vector<C10dCreator>> creators = FindC10dCreators(path_);
    std::vector<std::string> unnamed;
    if (!creators.ok()) {
      lacking.push_back(absl::StrCat("a c10d backend Kiln could read (", creators.status().message(), ")"));
    } else {
      for (C10dCreator& creator : *creators) {
        if (creator.backend.empty()) {
          unnamed.push_back(creator.function);
        } else {
          creators_.push_back(std::move(creator));
        }
      }
      if (creators_.empty()) lacking.push_back("a c10d backend (collectives run on Gloo over host copies)");
    }
    if (!unnamed.empty()) {
      LOG(WARNING) << name_ << " (" << path_ << "): c10d creator(s) " << absl::StrJoin(unnamed, ", ")
                   << " follow no naming convention (ProcessGroupNAME::create..., createProcessGroupNAME, "
                      "createBackendNAME), so no process_group_backend can name them";
    }
    std::vector<std::string> backends;
    for (const C10dCreator& creator : creators_) backends.push_back(absl::StrCat(creator.backend, " (", creator.function, ")"));
    if (!backends.empty()) {
      LOG(INFO) << name_ << " (" << path_ << "): c10d backend(s) " << absl::StrJoin(backends, ", ");
    }
    if (lacking.empty()) {
      LOG(INFO) << name_ << " (" << path_ << "): PrivateUse1 '" << name_ << "', " << devices
                << " device(s); it registered everything Kiln uses";
    } else {
      LOG(WARNING) << name_ << " (" << path_ << ", " << devices << " device(s)) lacks: " << absl::StrJoin(lacking, "; ");
    }
    return absl::OkStatus();
  }

  const std::string path_;
  const std::string name_;
  mutable absl::Mutex mutex_;
  mutable bool attempted_ ABSL_GUARDED_BY(mutex_) = false;
  mutable absl::Status loaded_ ABSL_GUARDED_BY(mutex_);
  mutable std::vector<C10dCreator> creators_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace

std::shared_ptr<Accelerator> AdoptPrivateUse1Library(const std::string& path, const std::string& name) {
  return std::make_shared<PrivateUse1Library>(path, name);
}

absl::Status RegisterPrivateUse1Library(AcceleratorRegistry& registry, const std::string& path,
                                        const std::string& name) {
  bool valid = !name.empty() && name[0] >= 'a' && name[0] <= 'z';
  for (char c : name) valid = valid && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the PrivateUse1 library's accelerator name '", name, "' is not a device name LibTorch takes: a lower-case "
        "letter, then lower-case letters, digits and '_' (\"acme_npu\")"));
  }
  if (path.find('/') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("the PrivateUse1 library '", path, "' is a bare file name: Kiln "
                                                   "loads libraries only from the paths it is given; write ./", path,
                                                   " or its full path"));
  }
  // The same file under the same name, registered twice (kiln_backends' libraries and a conformance test's library,
  // by two paths): one accelerator.
  if (absl::StatusOr<AcceleratorSpec> registered = registry.Find(name); registered.ok()) {
    constexpr absl::string_view kPrefix = "PrivateUse1 library ";
    std::error_code error;  // A file that is gone is not the same file.
    if (absl::StartsWith(registered->origin, kPrefix) &&
        std::filesystem::equivalent(registered->origin.substr(kPrefix.size()), path, error) && !error) {
      return absl::OkStatus();
    }
  }
  return registry.Register({.name = name,
                            .description = absl::StrCat("A PrivateUse1 device from ", path, " (loaded when chosen)."),
                            .aliases = {},
                            .priority = -100,
                            .factory = [path, name] { return AdoptPrivateUse1Library(path, name); },
                            .origin = absl::StrCat("PrivateUse1 library ", path)});
}

absl::Status RegisterPrivateUse1LibrarySpec(AcceleratorRegistry& registry, const std::string& spec) {
  const size_t equals = spec.find('=');
  if (equals == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("the PrivateUse1 library '", spec, "' needs its accelerator's "
                                                   "name: NAME=PATH, such as acme_npu=/opt/acme/lib/libacme_torch.so"));
  }
  std::string path = spec.substr(equals + 1);
  if (path.find('/') == std::string::npos) path = "./" + path;  // A path here (Bazel's rootpath), never a name.
  return RegisterPrivateUse1Library(registry, path, spec.substr(0, equals));
}

namespace internal {

bool RegisterPrivateUse1LibraryAtStartup(const char* name, const char* path) {
  AcceleratorRegistry& registry = AcceleratorRegistry::Default();
  if (absl::Status status = RegisterPrivateUse1Library(registry, path, name); !status.ok()) {
    registry.AddStartupError(std::move(status));
    return false;
  }
  return true;
}

}  // namespace internal

DeviceStats PrivateUse1DeviceStats(int index) {
  std::optional<std::map<std::string, double>> read = compat::PrivateUse1AllocatorStats(index);
  DeviceStats stats;
  if (read.has_value()) {
    for (const auto& [key, value] : *read) stats[key] = value;
  }
  stats["memory_stats_available"] = read.has_value() ? 1 : 0;
  return stats;
}

}  // namespace kiln
