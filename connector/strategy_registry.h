// The strategy names the connector accepts for `strategy`, and what each one is.
//
// Every registry starts with Kiln's built-in strategies, and later ones add theirs with Register:
//   single_device                      everything in one process on one device (not distributed)
//   ddp                                one process per device on every node, gradients averaged by the accelerator's
//                                      collective backend
//   ddp_find_unused_parameters_true    ddp that finds the parameters a step leaves without a gradient (Lightning's)
//   ddp_find_unused_parameters_false   ddp, said explicitly (Lightning's)
//   fsdp                               fully sharded data parallel: parameters, gradients and optimizer state split
//                                      across the ranks (Lightning's)
//   fsdp_cpu_offload                   fsdp with the shards in host memory (Lightning's name)
//   model_parallel                     tensor parallelism on a data x tensor device mesh (Lightning's ModelParallelStrategy)
// Each entry carries a factory that makes the strategy: the connector never calls it (it cannot see the trainer's
// Strategy class); the trainer makes every strategy, built-in or not, through it. The built-in names' factories are
// the trainer's (trainer/strategies/strategy_factories.h sets them); a strategy of one's own registers with its
// factory, and is then reachable from `fit --strategy=NAME` and config files like the built-in ones.
// `StrategyRegistry::Default()` is the process-wide registry; tests create their own.
//
// Thread-safety: every method may be called from any thread; a mutex guards the table.
#ifndef KILN_CONNECTOR_STRATEGY_REGISTRY_H_
#define KILN_CONNECTOR_STRATEGY_REGISTRY_H_

#include <any>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "connector/strategy_descriptor.h"

namespace kiln {

inline constexpr char kSingleDeviceStrategy[] = "single_device";
inline constexpr char kDdpStrategy[] = "ddp";
inline constexpr char kDdpFindUnusedTrueStrategy[] = "ddp_find_unused_parameters_true";
inline constexpr char kDdpFindUnusedFalseStrategy[] = "ddp_find_unused_parameters_false";
inline constexpr char kFsdpStrategy[] = "fsdp";
inline constexpr char kFsdpCpuOffloadStrategy[] = "fsdp_cpu_offload";
inline constexpr char kModelParallelStrategy[] = "model_parallel";

// What the trainer hands a strategy factory: the Trainer's options that strategies read. (The deprecated fields warn
// where a program names them, not where GCC places the implicit constructors' use of them: here.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct StrategyArguments {
  absl::Duration process_group_timeout = absl::Minutes(30);  // TrainerOptions::process_group_timeout.
  // Deprecated (0.x; removed in the next release): fsdp's options as text. fsdp's factory reads `options`.
  [[deprecated("read StrategyArguments::options (a kiln::FSDPOptions)")]] std::string sharding_strategy = "FULL_SHARD";
  [[deprecated("read StrategyArguments::options (a kiln::FSDPOptions)")]] std::vector<std::string> auto_wrap_policy;
  [[deprecated("read StrategyArguments::options (a kiln::FSDPOptions)")]] int64_t auto_wrap_min_num_params = 0;
  [[deprecated("read StrategyArguments::options (a kiln::FSDPOptions)")]] std::vector<std::string>
      activation_checkpointing_policy;
  [[deprecated("read StrategyArguments::options (a kiln::FSDPOptions)")]] std::string state_dict_type = "full";
  // The strategy's own options struct, already parsed (the trainer's TrainerOptions::fsdp, a kiln::FSDPOptions, for
  // the built-in fsdp names), or empty where the trainer holds none for the name. The connector never looks inside:
  // a factory takes its own type with std::any_cast, and keeps its defaults when it finds none.
  std::any options;
};
#pragma GCC diagnostic pop

// Makes a strategy for one trainer. It returns a kiln::Strategy (trainer/strategies/strategy.h) as its
// StrategyDescriptor; the trainer refuses anything else. Called on the trainer's thread; may throw nothing.
using StrategyFactory = std::function<std::shared_ptr<StrategyDescriptor>(const StrategyArguments&)>;

struct StrategySpec {
  std::string name;         // Lower-case letters, digits, '_' and '-'; not "auto". Case-insensitive on lookup.
  std::string description;  // One line.
  // True when it runs one process per device on every node (see StrategyDescriptor::IsDistributed).
  bool distributed = false;
  // Makes it (see StrategyFactory). Empty only for a built-in name whose factory the trainer has not set yet.
  StrategyFactory factory;
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

  // Sets the factory of the registered `name` (the trainer's for the built-in names). NotFound for a name not
  // registered, AlreadyExists when it has one (a second call with the same name is a mistake, not a replacement).
  absl::Status SetFactory(absl::string_view name, StrategyFactory factory);

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
