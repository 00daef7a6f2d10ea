// What the user asks the connector for: Lightning's Trainer flags that choose hardware and scale.
//
// Thread-safety: value types. Instances held by the flags are shared, not copied.
#ifndef KILN_CONNECTOR_OPTIONS_H_
#define KILN_CONNECTOR_OPTIONS_H_

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "connector/cluster_environment.h"
#include "connector/strategy_descriptor.h"
#include "hal/accelerator.h"
#include "hal/devices.h"

namespace kiln {

// The `accelerator` flag: a registered name or alias, "auto", or an accelerator instance that need not be
// registered anywhere. Implicit constructors let users write `.accelerator = "cuda"` or
// `.accelerator = std::make_shared<NewSotaAccelerator>()`.
class AcceleratorFlag {
 public:
  AcceleratorFlag() : name_("auto") {}
  AcceleratorFlag(const char* name) : name_(name) {}             // NOLINT(google-explicit-constructor)
  AcceleratorFlag(std::string name) : name_(std::move(name)) {}  // NOLINT(google-explicit-constructor)
  template <typename T, typename = std::enable_if_t<std::is_base_of_v<Accelerator, T>>>
  AcceleratorFlag(std::shared_ptr<T> instance)  // NOLINT(google-explicit-constructor)
      : instance_(std::move(instance)) {}

  // The instance, when one was given (then name() is empty).
  const std::shared_ptr<Accelerator>& instance() const { return instance_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<Accelerator> instance_;
};

// The `strategy` flag: "auto", a registered strategy name (case-insensitive; see strategy_registry.h), or a
// strategy instance that describes itself (StrategyDescriptor). Implicit constructors let users write
// `.strategy = "ddp"` or `.strategy = std::make_shared<MyStrategy>()`.
class StrategyFlag {
 public:
  StrategyFlag() : name_("auto") {}
  StrategyFlag(const char* name) : name_(name) {}             // NOLINT(google-explicit-constructor)
  StrategyFlag(std::string name) : name_(std::move(name)) {}  // NOLINT(google-explicit-constructor)
  template <typename T, typename = std::enable_if_t<std::is_base_of_v<StrategyDescriptor, T>>>
  StrategyFlag(std::shared_ptr<T> instance)  // NOLINT(google-explicit-constructor)
      : instance_(std::move(instance)) {}

  // The instance, when one was given (then name() is empty).
  const std::shared_ptr<StrategyDescriptor>& instance() const { return instance_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<StrategyDescriptor> instance_;
};

struct ConnectorOptions {
  AcceleratorFlag accelerator;        // Default "auto".
  Devices devices;                    // Default "auto".
  StrategyFlag strategy;              // Default "auto".
  // The collective backend of a distributed strategy (Lightning's DDPStrategy(process_group_backend=...)). Empty:
  // the strategy instance's, else the accelerator's. Set, it is the plan's; an instance insisting on another one is
  // an error. Which backends can carry which devices is the strategy's to check, not the connector's.
  std::string process_group_backend;
  std::string precision = "32-true";  // Lightning's names, and its legacy "32", "64", "16", "bf16".
  int num_nodes = 1;
  // Lightning's `plugins=[SomeClusterEnvironment()]`: used instead of detection when set. The connector calls its
  // SetWorldSize/SetGlobalRank, as Lightning's strategies do.
  std::shared_ptr<ClusterEnvironment> cluster_environment;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_OPTIONS_H_
