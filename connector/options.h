// What the user asks the connector for: Lightning's Trainer flags that choose hardware and scale.
//
// Thread-safety: value types.
#ifndef KILN_CONNECTOR_OPTIONS_H_
#define KILN_CONNECTOR_OPTIONS_H_

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "hal/accelerator.h"
#include "hal/devices.h"

namespace kiln {

// The `accelerator` flag: a registered name or alias, "auto", or an accelerator instance that need not be
// registered anywhere. Implicit constructors let users write `.accelerator = "cuda"` or
// `.accelerator = std::make_shared<NewSotaAccelerator>()`.
class AcceleratorFlag {
 public:
  AcceleratorFlag() : name_("auto") {}
  AcceleratorFlag(const char* name) : name_(name) {}     // NOLINT(google-explicit-constructor)
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

struct ConnectorOptions {
  AcceleratorFlag accelerator;        // Default "auto".
  Devices devices;                    // Default "auto".
  std::string strategy = "auto";      // "auto", "single_device" or "ddp" (case-insensitive).
  std::string precision = "32-true";  // Lightning's names, and its legacy "32", "64", "16", "bf16".
  int num_nodes = 1;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_OPTIONS_H_
