// PluginLibrary: one accelerator plugin's shared library, opened, version-checked and initialised, and the one way
// Kiln calls into it (kiln_plugin_c_api.h).
//
// A library is opened once per process and never closed: tensors the plugin made, and kernels it registered with
// LibTorch, may outlive any accelerator object, so the code they point into must stay mapped until exit. Opening
// the same file again returns the same PluginLibrary (Plugin_Initialize runs once).
//
// A PrivateUse1 plugin of API 1.2 declares its device and Kiln registers it, through RegisterDevice, when the
// plugin's accelerator is chosen: the library keeps the outcome, so that Device_Register runs at most once per
// process however many accelerator objects share the library.
//
// Thread-safety: Open may be called from any thread; a PluginLibrary is immutable but for its device's registration,
// and every method may be used from any thread (the plugin's own thread rules are in the C header).
#ifndef KILN_HAL_PLUGIN_PLUGIN_LIBRARY_H_
#define KILN_HAL_PLUGIN_PLUGIN_LIBRARY_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/string_view.h"
#include "hal/plugin/kiln_plugin_c_api.h"

namespace kiln {

// The oldest minor version of the plugin C API whose functions this Kiln calls (see CHANGELOG.md).
inline constexpr int kPluginApiMinimumMinor = 0;

// The number a plugin stored in one of the C API's enum fields (KILN_Error_Code, KILN_Device_Type, ...), which may be
// any int: in C an enum field holds any value of its integer type, but in C++ reading a value outside the enumerators'
// range through the enum type is undefined behaviour (a load UBSan reports). Kiln reads every enum a plugin wrote
// through this, as the field's bits, and checks the number itself.
template <typename Enum>
int32_t PluginEnumValue(const Enum& field) {
  static_assert(std::is_enum_v<Enum> && sizeof(Enum) == sizeof(int32_t), "the plugin C API's enums are 32-bit");
  int32_t value;
  std::memcpy(&value, &field, sizeof(value));
  return value;
}

class PluginLibrary {
 public:
  // Loads the plugin at `path` and checks its C API. `path` must contain a '/': a bare file name is refused rather
  // than searched for (dlopen would look in the library path). Errors name `path` and the problem: no such file
  // (NotFound), not a loadable shared library, no KILN_GetPluginApi, a major version other than Kiln's, a minor
  // version below `minimum_minor`, a function table shorter than the version it reports (or `minimum_minor`'s),
  // a missing required function, or an optional group (the collectives) set in part (InvalidArgument), or
  // Plugin_Initialize's own error (with the plugin's code). `minimum_minor` is kPluginApiMinimumMinor outside tests.
  // Never throws, never crashes on a malformed plugin that keeps to C.
  static absl::StatusOr<std::shared_ptr<const PluginLibrary>> Open(const std::string& path,
                                                                   int minimum_minor = kPluginApiMinimumMinor);

  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  // The path the library was first opened with.
  const std::string& path() const { return path_; }
  const KILN_Plugin_Api& api() const { return *api_; }
  // "1.0": the version the plugin was built against.
  std::string version() const;
  // Whether the plugin offers collectives (plugin API 1.1, optional): it reports 1.1 or later and sets all eight
  // Collectives_* functions (Open refuses a plugin that sets only some).
  bool has_collectives() const;
  // Whether the plugin sets Device_Register (plugin API 1.2, optional): it reports 1.2 or later and sets it.
  bool has_device_register() const;
  // Whether the process already had a PrivateUse1 device (a LibTorch device guard for it) before this library was
  // loaded: then a plugin that registers its device when it is loaded (API 1.1 and older) cannot own that device type
  // (LibTorch has one PrivateUse1 slot per process).
  bool privateuse1_taken_before_load() const { return privateuse1_taken_before_load_; }
  // Whether loading the library registered a PrivateUse1 device (PrivateUse1 had no device guard before dlopen, and
  // had one after): the way of API 1.1 and older, which a plugin of 1.2 or later must not take. Kiln's device kit
  // then knows who holds PrivateUse1 (Open records it), so that the next device refused names this library.
  bool privateuse1_registered_at_load() const { return privateuse1_registered_at_load_; }

  // OK when the plugin's device, `device_name` (its Plugin_Info's), can still be registered with LibTorch in this
  // process, as Kiln's own copy of the device kit sees it (kiln::device_kit::CheckCanRegister): PrivateUse1 is free,
  // or is `device_name`'s already. Otherwise FailedPrecondition naming this plugin, both devices, where the other came
  // from, and the fix. Registers nothing: a probe for CheckAvailable. Never throws.
  absl::Status CheckCanRegisterDevice(const std::string& device_name) const;
  // Registers the plugin's PrivateUse1 device, named `device_name`, through its Device_Register (plugin API 1.2), on
  // the first call in the process; later calls return the first call's outcome. First CheckCanRegisterDevice: a
  // refusal is returned and Device_Register never runs. After the plugin's success, LibTorch's PrivateUse1 device
  // must be `device_name` with a device guard (Internal otherwise, naming what LibTorch has), and the registration is
  // recorded in Kiln's device kit (kiln::device_kit::RecordRegistration), so that the next device refused names this
  // plugin. The plugin's own error comes back as Call returns it. Registrations of all plugins are serialised, so two
  // plugins chosen at once cannot both pass the check. Requires has_device_register(). Never throws.
  absl::Status RegisterDevice(const std::string& device_name) const;
  // RegisterDevice's outcome, or nullopt before its first call.
  std::optional<absl::Status> device_registration() const;

  // Calls `function` (a member of api()) with `args`, whose struct_size the caller has set, and turns a returned
  // error into a Status with the plugin's code and message, prefixed by "accelerator plugin <path>: <name>: ".
  // The error object is destroyed here. A C++ exception escaping the plugin (which the contract forbids) becomes
  // Internal instead of unwinding through Kiln.
  template <typename Args>
  absl::Status Call(absl::string_view name, KILN_Error* (*function)(Args*), Args* args) const {
    KILN_Error* error = nullptr;
    try {
      error = function(args);
    } catch (...) {
      return ThrewError(name);
    }
    return error == nullptr ? absl::OkStatus() : ConsumeError(name, error);
  }

 private:
  PluginLibrary(std::string path, const KILN_Plugin_Api* api, bool privateuse1_taken_before_load,
                bool privateuse1_registered_at_load)
      : path_(std::move(path)),
        api_(api),
        privateuse1_taken_before_load_(privateuse1_taken_before_load),
        privateuse1_registered_at_load_(privateuse1_registered_at_load) {}

  absl::Status ConsumeError(absl::string_view function, KILN_Error* error) const;
  absl::Status ThrewError(absl::string_view function) const;
  // RegisterDevice's work, the first time.
  absl::Status CallDeviceRegister(const std::string& device_name) const;

  const std::string path_;
  const KILN_Plugin_Api* const api_;  // Owned by the plugin; valid until the process exits.
  const bool privateuse1_taken_before_load_;
  const bool privateuse1_registered_at_load_;
  mutable absl::Mutex mutex_;
  mutable std::optional<absl::Status> device_registration_ ABSL_GUARDED_BY(mutex_);
};

namespace internal {
// The checks Open makes of a plugin's function table, on their own: how tests and the fuzzer check tables that no
// real library holds. Reads `api.struct_size` first, and nothing beyond it: the version fields only when struct_size
// covers them, the function pointers only when it covers the whole table of the minor version the plugin reports
// (at most Kiln's own) and of `minimum_minor`, and those only to compare them with NULL. OK when the table is usable
// by a Kiln needing `minimum_minor`, otherwise InvalidArgument naming `path`, the problem and the fix: a 1.0 function
// that is NULL is named alone; collectives set in part name every missing one. Never throws.
absl::Status CheckPluginApi(const std::string& path, const KILN_Plugin_Api& api, int minimum_minor);

// Whether a table that passed CheckPluginApi offers collectives: it reports minor version 1 or later, its struct_size
// covers them, and they are set (all of them, as CheckPluginApi made sure).
bool PluginApiHasCollectives(const KILN_Plugin_Api& api);

// Whether a table that passed CheckPluginApi sets Device_Register: it reports minor version 2 or later, its
// struct_size covers it, and it is not NULL.
bool PluginApiHasDeviceRegister(const KILN_Plugin_Api& api);

// The size of the function table up to the last function of minor version `minor` (of Kiln's major version); a
// minor version newer than Kiln's gives Kiln's whole table.
size_t PluginApiSizeAtMinor(int minor);
}  // namespace internal

}  // namespace kiln

#endif  // KILN_HAL_PLUGIN_PLUGIN_LIBRARY_H_
