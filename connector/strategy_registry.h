// The strategy names the connector accepts for `strategy`, and what each one is.
//
// Every registry starts with Kiln's two built-in strategies, and later ones add theirs with Register:
//   single_device  everything in one process on one device (not distributed)
//   ddp            one process per device on every node, gradients averaged by a collective backend
// `StrategyRegistry::Default()` is the process-wide registry; tests create their own.
//
// Thread-safety: every method may be called from any thread; a mutex guards the table.
#ifndef KILN_CONNECTOR_STRATEGY_REGISTRY_H_
#define KILN_CONNECTOR_STRATEGY_REGISTRY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kiln {

inline constexpr char kSingleDeviceStrategy[] = "single_device";
inline constexpr char kDdpStrategy[] = "ddp";

struct StrategySpec {
  std::string name;         // Lower-case letters, digits, '_' and '-'; not "auto". Case-insensitive on lookup.
  std::string description;  // One line.
  // True when it runs one process per device on every node (see StrategyDescriptor::IsDistributed).
  bool distributed = false;
};

class StrategyRegistry {
 public:
  // A registry holding the built-in strategies.
  StrategyRegistry();
  StrategyRegistry(const StrategyRegistry&) = delete;
  StrategyRegistry& operator=(const StrategyRegistry&) = delete;

  // The process-wide registry. Never destroyed.
  static StrategyRegistry& Default();

  // Adds `spec`. InvalidArgument for a bad or reserved name, AlreadyExists for a name already registered.
  absl::Status Register(StrategySpec spec);

  // The spec registered as `name` (case-insensitive); NotFound otherwise.
  absl::StatusOr<StrategySpec> Find(absl::string_view name) const;

  // Registered names, sorted, comma-separated: for error messages.
  std::string NameList() const;

 private:
  mutable absl::Mutex mutex_;
  std::map<std::string, StrategySpec> specs_ ABSL_GUARDED_BY(mutex_);  // By lower-case name.
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_STRATEGY_REGISTRY_H_
