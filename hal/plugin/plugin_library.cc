#include "hal/plugin/plugin_library.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "c10/core/DeviceType.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "hal/device_kit/device_kit.h"

namespace kiln {
namespace {

std::string Quoted(absl::string_view path) { return absl::StrCat("'", path, "'"); }

std::string Version(int major, int minor) { return absl::StrCat(major, ".", minor); }

constexpr c10::DeviceType kPrivateUse1 = c10::DeviceType::PrivateUse1;

// The name LibTorch gives PrivateUse1 devices now, quoted, or "unnamed" before a library names it.
std::string PrivateUse1Name() {
  return c10::is_privateuse1_backend_registered() ? Quoted(c10::get_privateuse1_backend()) : "unnamed";
}

}  // namespace

namespace internal {

size_t PluginApiSizeAtMinor(int minor) {
  // Add a case per minor version as it is released.
  if (minor <= 0) return KILN_STRUCT_SIZE(KILN_Plugin_Api, Precision_Substitute);
  if (minor == 1) return KILN_STRUCT_SIZE(KILN_Plugin_Api, Collectives_Barrier);
  return KILN_STRUCT_SIZE(KILN_Plugin_Api, Device_Register);
}

bool PluginApiHasCollectives(const KILN_Plugin_Api& api) {
  return api.minor_version >= 1 && api.struct_size >= PluginApiSizeAtMinor(1) && api.Collectives_GetUniqueId != nullptr;
}

bool PluginApiHasDeviceRegister(const KILN_Plugin_Api& api) {
  return api.minor_version >= 2 && api.struct_size >= PluginApiSizeAtMinor(2) && api.Device_Register != nullptr;
}

absl::Status CheckPluginApi(const std::string& path, const KILN_Plugin_Api& api, int minimum_minor) {
  const size_t version_size = KILN_STRUCT_SIZE(KILN_Plugin_Api, minor_version);
  if (api.struct_size < version_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("accelerator plugin ", Quoted(path), " returned a function table whose struct_size is ",
                     api.struct_size, " bytes, too small to hold even its version (", version_size,
                     " bytes): it sets struct_size wrongly; set it to KILN_Plugin_Api_STRUCT_SIZE"));
  }
  const std::string kiln_version = Version(KILN_PLUGIN_API_MAJOR, KILN_PLUGIN_API_MINOR);
  const std::string plugin_version = Version(api.major_version, api.minor_version);
  if (api.major_version != KILN_PLUGIN_API_MAJOR) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accelerator plugin ", Quoted(path), " was built for plugin API version ", plugin_version,
        ", but this Kiln implements ", kiln_version, ": major versions must be equal; use a build of the plugin for ",
        "API ", KILN_PLUGIN_API_MAJOR, ".x (kiln_plugin_c_api.h ", kiln_version, ")"));
  }
  if (api.minor_version < minimum_minor) {
    return absl::InvalidArgumentError(
        absl::StrCat("accelerator plugin ", Quoted(path), " was built for plugin API version ", plugin_version,
                     ", but this Kiln needs ", Version(KILN_PLUGIN_API_MAJOR, minimum_minor),
                     " or later (it calls functions added since); rebuild the plugin against kiln_plugin_c_api.h ",
                     Version(KILN_PLUGIN_API_MAJOR, minimum_minor), " or newer"));
  }
  // The table of the version the plugin reports (of Kiln's own when it is newer), and at least that of the version
  // Kiln needs: a 1.0 plugin's table ends after Precision_Substitute, and Kiln reads nothing beyond it.
  const size_t needed = std::max(PluginApiSizeAtMinor(std::min(api.minor_version, KILN_PLUGIN_API_MINOR)),
                                 PluginApiSizeAtMinor(minimum_minor));
  if (api.struct_size < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accelerator plugin ", Quoted(path), " reports plugin API version ", plugin_version,
        " but its function table is ", api.struct_size, " bytes (struct_size), shorter than the ", needed,
        " bytes this Kiln reads: it was built against a modified header or sets struct_size wrongly; rebuild it ",
        "against kiln_plugin_c_api.h and set struct_size = KILN_Plugin_Api_STRUCT_SIZE"));
  }
  const std::vector<std::pair<const char*, bool>> functions = {
      {"Error_Destroy", api.Error_Destroy != nullptr},
      {"Error_Message", api.Error_Message != nullptr},
      {"Error_GetCode", api.Error_GetCode != nullptr},
      {"Plugin_Initialize", api.Plugin_Initialize != nullptr},
      {"Plugin_Info", api.Plugin_Info != nullptr},
      {"Devices_Count", api.Devices_Count != nullptr},
      {"Devices_CheckAvailable", api.Devices_CheckAvailable != nullptr},
      {"Device_Setup", api.Device_Setup != nullptr},
      {"Device_Teardown", api.Device_Teardown != nullptr},
      {"Device_Stats", api.Device_Stats != nullptr},
      {"Precision_Substitute", api.Precision_Substitute != nullptr},
  };
  for (const auto& [name, present] : functions) {
    if (!present) {
      return absl::InvalidArgumentError(absl::StrCat("accelerator plugin ", Quoted(path), " has no ", name,
                                                     " (NULL in its function table), which plugin API ", plugin_version,
                                                     " requires; the plugin must implement it"));
    }
  }
  if (api.minor_version < 1 || api.struct_size < PluginApiSizeAtMinor(1)) return absl::OkStatus();
  // 1.1's collectives: optional, all or nothing.
  const std::vector<std::pair<const char*, bool>> collectives = {
      {"Collectives_GetUniqueId", api.Collectives_GetUniqueId != nullptr},
      {"Collectives_CommInit", api.Collectives_CommInit != nullptr},
      {"Collectives_CommDestroy", api.Collectives_CommDestroy != nullptr},
      {"Collectives_AllReduce", api.Collectives_AllReduce != nullptr},
      {"Collectives_Broadcast", api.Collectives_Broadcast != nullptr},
      {"Collectives_AllGather", api.Collectives_AllGather != nullptr},
      {"Collectives_ReduceScatter", api.Collectives_ReduceScatter != nullptr},
      {"Collectives_Barrier", api.Collectives_Barrier != nullptr},
  };
  std::vector<std::string> missing;
  for (const auto& [name, present] : collectives) {
    if (!present) missing.push_back(name);
  }
  if (!missing.empty() && missing.size() < collectives.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accelerator plugin ", Quoted(path), " sets some of plugin API 1.1's collectives but not ",
        absl::StrJoin(missing, ", "), " (NULL in its function table); the collectives are all or nothing: implement ",
        missing.size() == 1 ? "it" : "them", ", or set all eight to NULL to offer none"));
  }
  // 1.2's Device_Register is a group of one, so it cannot be set in part; whether the plugin needs it depends on its
  // device type, which Plugin_Info says (ReadPluginInfo checks it).
  return absl::OkStatus();
}

}  // namespace internal

namespace {

// Every library opened so far, by dlopen handle (the same file gives the same handle, whatever the path's
// spelling), with the outcome of its checks and Plugin_Initialize. Never destroyed, like the libraries.
struct OpenedLibraries {
  absl::Mutex mutex;
  std::map<void*, absl::StatusOr<std::shared_ptr<const PluginLibrary>>> by_handle ABSL_GUARDED_BY(mutex);
};

OpenedLibraries& Opened() {
  static auto* const opened = new OpenedLibraries();
  return *opened;
}

}  // namespace

bool PluginLibrary::has_collectives() const { return internal::PluginApiHasCollectives(*api_); }

bool PluginLibrary::has_device_register() const { return internal::PluginApiHasDeviceRegister(*api_); }

std::string PluginLibrary::version() const { return Version(api_->major_version, api_->minor_version); }

absl::StatusOr<std::shared_ptr<const PluginLibrary>> PluginLibrary::Open(const std::string& path, int minimum_minor) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "accelerator plugin path is empty; pass the path of the plugin's shared library, such as "
        "./libacme_plugin.so");
  }
  if (!absl::StrContains(path, '/')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accelerator plugin ", Quoted(path), " is a bare file name: Kiln loads plugins only from the paths it is ",
        "given and never searches the library path or the working directory; write ./", path, " or an absolute path"));
  }
  struct stat file;
  if (::stat(path.c_str(), &file) != 0) {
    return absl::NotFoundError(absl::StrCat("accelerator plugin ", Quoted(path), ": ", std::strerror(errno),
                                            "; pass the path of the plugin's shared library file"));
  }
  if (!S_ISREG(file.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("accelerator plugin ", Quoted(path),
                                                   " is not a regular file; pass the path of the plugin's shared "
                                                   "library file"));
  }

  OpenedLibraries& opened = Opened();
  absl::MutexLock lock(&opened.mutex);
  const bool privateuse1_taken = c10::impl::hasDeviceGuardImpl(c10::DeviceType::PrivateUse1);
  // RTLD_NOW: a symbol the plugin needs but the process lacks (another LibTorch, another libstdc++) fails here,
  // with its name, instead of crashing at its first call. RTLD_LOCAL: the plugin's own symbols stay out of the
  // global scope, so two plugins (which all define KILN_GetPluginApi, and may share helper names) cannot bind to
  // each other's; the libraries it depends on (LibTorch) are still the process's own copies. RTLD_NODELETE: the
  // library stays mapped even if something closed the handle, since tensors and kernels may point into it.
  void* const handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  // A library that registered a PrivateUse1 device from its static initialisers (plugin API 1.1 and older): Kiln's
  // device kit is told who holds PrivateUse1 now, so that the next device it refuses names this file.
  const bool registered_at_load = !privateuse1_taken && c10::impl::hasDeviceGuardImpl(kPrivateUse1);
  if (registered_at_load) {
    device_kit::RecordRegistration(
        c10::is_privateuse1_backend_registered() ? c10::get_privateuse1_backend() : "privateuseone",
        absl::StrCat("accelerator plugin ", path, ", registered when it was loaded"));
  }
  if (handle == nullptr) {
    const char* reason = ::dlerror();
    return absl::InvalidArgumentError(
        absl::StrCat("accelerator plugin ", Quoted(path),
                     " cannot be loaded as a shared library: ", reason != nullptr ? reason : "dlopen failed",
                     "; pass a plugin built for this machine and linked against the same LibTorch as Kiln"));
  }
  if (auto found = opened.by_handle.find(handle); found != opened.by_handle.end()) {
    if (!found->second.ok()) return found->second.status();
    if (absl::Status api = internal::CheckPluginApi(path, (*found->second)->api(), minimum_minor); !api.ok()) {
      return api;
    }
    return found->second;
  }

  // What comes before Plugin_Initialize depends only on the file and `minimum_minor`, and is checked on every open
  // until the library is initialised (a refusal for one minimum must not stick to a later, lower one); the outcome
  // of Plugin_Initialize is kept, since it runs once.
  ::dlerror();
  void* const entry = ::dlsym(handle, KILN_PLUGIN_ENTRY_SYMBOL);
  if (entry == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accelerator plugin ", Quoted(path), " does not export ", KILN_PLUGIN_ENTRY_SYMBOL,
        ": it is not a Kiln accelerator plugin, or it was built without exporting the entry point (declare it "
        "with KILN_PLUGIN_EXPORT, unmangled, as kiln_plugin_c_api.h does)"));
  }
  const KILN_Plugin_Api* api = nullptr;
  try {
    api = reinterpret_cast<KILN_GetPluginApi_Fn*>(entry)();
  } catch (...) {
    return absl::InternalError(absl::StrCat("accelerator plugin ", Quoted(path), ": ", KILN_PLUGIN_ENTRY_SYMBOL,
                                            " threw a C++ exception across the C API"));
  }
  if (api == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("accelerator plugin ", Quoted(path), ": ", KILN_PLUGIN_ENTRY_SYMBOL,
                                                   " returned NULL; it must return the plugin's function table"));
  }
  if (absl::Status checked = internal::CheckPluginApi(path, *api, minimum_minor); !checked.ok()) return checked;
  std::shared_ptr<const PluginLibrary> library(new PluginLibrary(path, api, privateuse1_taken, registered_at_load));
  KILN_Plugin_Initialize_Args args{};
  args.struct_size = KILN_Plugin_Initialize_Args_STRUCT_SIZE;
  absl::StatusOr<std::shared_ptr<const PluginLibrary>>& result = opened.by_handle[handle];
  if (absl::Status initialized = library->Call("Plugin_Initialize", api->Plugin_Initialize, &args); !initialized.ok()) {
    result = initialized;
  } else {
    result = library;
  }
  return result;
}

absl::Status PluginLibrary::CheckCanRegisterDevice(const std::string& device_name) const {
  const std::string taken = device_kit::CheckCanRegister(device_name);
  if (taken.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("accelerator plugin ", Quoted(path_), ": ", taken));
}

std::optional<absl::Status> PluginLibrary::device_registration() const {
  absl::MutexLock lock(&mutex_);
  return device_registration_;
}

absl::Status PluginLibrary::RegisterDevice(const std::string& device_name) const {
  // One plugin registers at a time: a check that PrivateUse1 is free holds until its Device_Register has run.
  static absl::Mutex* const registering = new absl::Mutex();
  absl::MutexLock serialised(registering);
  if (std::optional<absl::Status> done = device_registration(); done.has_value()) return *done;
  absl::Status outcome = CallDeviceRegister(device_name);
  absl::MutexLock lock(&mutex_);
  device_registration_ = outcome;
  return outcome;
}

absl::Status PluginLibrary::CallDeviceRegister(const std::string& device_name) const {
  if (!has_device_register()) {
    return absl::InternalError(absl::StrCat("accelerator plugin ", Quoted(path_),
                                            " has no Device_Register, so Kiln cannot register its device"));
  }
  if (absl::Status can = CheckCanRegisterDevice(device_name); !can.ok()) return can;
  KILN_Device_Register_Args args{};
  args.struct_size = KILN_Device_Register_Args_STRUCT_SIZE;
  if (absl::Status registered = Call("Device_Register", api_->Device_Register, &args); !registered.ok()) {
    return registered;
  }
  const bool named = c10::is_privateuse1_backend_registered() && c10::get_privateuse1_backend() == device_name;
  const bool guarded = c10::impl::hasDeviceGuardImpl(kPrivateUse1);
  if (!named || !guarded) {
    return absl::InternalError(absl::StrCat(
        "accelerator plugin ", Quoted(path_), ": Device_Register succeeded, but LibTorch's PrivateUse1 device is ",
        PrivateUse1Name(), guarded ? " with" : " without", " a device guard, where '", device_name,
        "' (Plugin_Info's device_name) with a device guard was expected; the plugin must register its device, under "
        "that name, in Device_Register (a plugin built with Kiln's device kit returns kiln::device_kit::Register's "
        "refusal as an error)"));
  }
  device_kit::RecordRegistration(device_name, absl::StrCat("accelerator plugin ", path_));
  return absl::OkStatus();
}

absl::Status PluginLibrary::ConsumeError(absl::string_view function, KILN_Error* error) const {
  KILN_Error_Message_Args message_args{};
  message_args.struct_size = KILN_Error_Message_Args_STRUCT_SIZE;
  message_args.error = error;
  KILN_Error_GetCode_Args code_args{};
  code_args.struct_size = KILN_Error_GetCode_Args_STRUCT_SIZE;
  code_args.error = error;
  std::string message;
  try {
    api_->Error_Message(&message_args);
    api_->Error_GetCode(&code_args);
    if (message_args.message != nullptr) {
      message.assign(message_args.message, ::strnlen(message_args.message, message_args.message_size));
    }
    KILN_Error_Destroy_Args destroy_args{};
    destroy_args.struct_size = KILN_Error_Destroy_Args_STRUCT_SIZE;
    destroy_args.error = error;
    api_->Error_Destroy(&destroy_args);
  } catch (...) {
    return ThrewError(function);
  }
  if (message.empty()) message = "(the plugin's error has no message)";
  const int32_t code = PluginEnumValue(code_args.code);
  const absl::StatusCode status_code = code >= KILN_ERROR_CODE_CANCELLED && code <= KILN_ERROR_CODE_UNAUTHENTICATED
                                           ? static_cast<absl::StatusCode>(code)
                                           : absl::StatusCode::kUnknown;
  return absl::Status(status_code, absl::StrCat("accelerator plugin ", Quoted(path_), ": ", function, ": ", message));
}

absl::Status PluginLibrary::ThrewError(absl::string_view function) const {
  return absl::InternalError(absl::StrCat("accelerator plugin ", Quoted(path_), ": ", function,
                                          " threw a C++ exception across the C API, which the contract forbids"));
}

}  // namespace kiln
