// The accelerator registry: names (and aliases) -> accelerators, with a priority for "auto".
//
// A registry can be created on its own, which is what tests do so that nothing leaks into the process-wide one.
// `AcceleratorRegistry::Default()` is the registry that built-in and linked backends add themselves to, with one
// line beside their implementation:
//
//   KILN_REGISTER_ACCELERATOR({.name = "cpu", .description = "...", .priority = 0,
//                              .factory = [] { return std::make_shared<CpuAccelerator>(); }});
//
// The line runs during static initialisation, so the backend's cc_library must set `alwayslink = True`; otherwise
// the linker drops the object file (nothing refers to it) and the registration with it. A registration that fails
// there (a name another linked backend has taken) cannot stop the program cleanly, so it is kept:
// `StartupStatus()` reports it, naming both source files, and the connector refuses to resolve a plan while it
// stands.
//
// Thread-safety: every method may be called from any thread; a mutex guards the table.
#ifndef KILN_HAL_REGISTRY_H_
#define KILN_HAL_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "hal/accelerator.h"

namespace kiln {

struct AcceleratorSpec {
  std::string name;                  // Lower-case letters, digits, '_' and '-'; not "auto".
  std::string description;           // One line, shown by `bazel run //tools:accelerators`.
  std::vector<std::string> aliases;  // Other names that select it ("gpu" for "cuda"). Same rules as `name`.
  int priority = 0;                  // "auto" picks the available accelerator with the highest priority.
  // Makes the accelerator. Called at most once per registration, on first use; the instance is then shared.
  std::function<std::shared_ptr<Accelerator>()> factory;
  // Where the registration comes from, for error messages: KILN_REGISTER_ACCELERATOR sets the source file, the
  // plugin loader the plugin's path. Empty when the caller does not say.
  std::string origin = {};
};

struct RegisterOptions {
  // Replace an accelerator already registered under the same name instead of failing.
  bool override_existing = false;
};

class AcceleratorRegistry {
 public:
  AcceleratorRegistry() = default;
  AcceleratorRegistry(const AcceleratorRegistry&) = delete;
  AcceleratorRegistry& operator=(const AcceleratorRegistry&) = delete;

  // The process-wide registry that backends register into. Never destroyed.
  static AcceleratorRegistry& Default();

  // Adds `spec`. Names and aliases are case-insensitive; an alias given twice, or equal to the name, is kept once
  // or dropped (Find shows the aliases as stored). Errors (InvalidArgument / AlreadyExists): an invalid or
  // reserved name, no factory, or a name or alias already taken, unless `override_existing` is set and the same
  // name is being replaced.
  absl::Status Register(AcceleratorSpec spec, RegisterOptions options = {});

  // The spec registered under `name_or_alias` (case-insensitive). NotFound lists the registered names.
  absl::StatusOr<AcceleratorSpec> Find(absl::string_view name_or_alias) const;

  // The shared instance for `name_or_alias`, created on first use. NotFound lists the registered names; a factory
  // that returns null or throws gives Internal naming the accelerator.
  absl::StatusOr<std::shared_ptr<Accelerator>> Get(absl::string_view name_or_alias) const;

  // Every registered spec, highest priority first, then by name.
  std::vector<AcceleratorSpec> List() const;

  // Registered names (not aliases), sorted, comma-separated: for error messages.
  std::string NameList() const;

  // OK, or FailedPrecondition listing every KILN_REGISTER_ACCELERATOR registration that failed while the program
  // started (a taken name or alias, an invalid name), each naming its source file and the one it collided with,
  // and saying what to change.
  absl::Status StartupStatus() const;

  // Records a registration that failed during static initialisation (internal::RegisterAtStartup).
  void AddStartupError(absl::Status error);

 private:
  struct Entry {
    AcceleratorSpec spec;
    mutable std::shared_ptr<Accelerator> instance;
  };
  absl::StatusOr<const Entry*> FindLocked(absl::string_view name_or_alias) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::string NameListLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex mutex_;
  std::vector<absl::Status> startup_errors_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mutex_);       // By lower-case name.
  std::map<std::string, std::string> aliases_ ABSL_GUARDED_BY(mutex_);  // Lower-case alias -> name.
};

namespace internal {
// Registers into the default registry from static initialisation, with `origin` (the registering source file). A
// failure is kept for StartupStatus(), not thrown or aborted on: nothing can catch it before main() runs. Returns
// whether it registered, so that the macro can keep the result in a static.
bool RegisterAtStartup(AcceleratorSpec spec, const char* origin);
}  // namespace internal

}  // namespace kiln

#define KILN_REGISTER_ACCELERATOR_CONCAT_(a, b) a##b
#define KILN_REGISTER_ACCELERATOR_NAME_(line) KILN_REGISTER_ACCELERATOR_CONCAT_(kiln_registered_accelerator_, line)
// Registers an AcceleratorSpec in AcceleratorRegistry::Default() at static-initialisation time.
#define KILN_REGISTER_ACCELERATOR(...)                                    \
  [[maybe_unused]] static const bool KILN_REGISTER_ACCELERATOR_NAME_(__LINE__) = \
      ::kiln::internal::RegisterAtStartup(::kiln::AcceleratorSpec __VA_ARGS__, __FILE__)

#endif  // KILN_HAL_REGISTRY_H_
