// What the connector needs to know about a strategy instance the user passes (`.strategy = my_strategy`).
//
// The connector does not depend on the trainer, so it cannot see the trainer's Strategy class. A trainer-side (or
// user) strategy implements this small interface; the connector reads it, checks it against the devices and nodes,
// and carries the instance to Plan::strategy_instance untouched, for the trainer to use.
//
// Contract for implementers: the methods are cheap, must not throw, and may be called from any thread.
#ifndef KILN_CONNECTOR_STRATEGY_DESCRIPTOR_H_
#define KILN_CONNECTOR_STRATEGY_DESCRIPTOR_H_

#include <optional>
#include <string>

namespace kiln {

class StrategyDescriptor {
 public:
  virtual ~StrategyDescriptor() = default;

  // The name the plan reports ("ddp", "my_pipeline"). Lower case, never empty.
  virtual std::string name() const = 0;

  // True when it runs one process per device on every node and needs a collective backend (DDP and its kin);
  // false when it runs in one process on one device.
  virtual bool IsDistributed() const = 0;

  // The collective backend it insists on, as Lightning's `DDPStrategy(process_group_backend=...)`. nullopt (the
  // default) takes the accelerator's preference (Accelerator::ProcessGroupBackend). Ignored when not distributed.
  virtual std::optional<std::string> ProcessGroupBackend() const { return std::nullopt; }
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_STRATEGY_DESCRIPTOR_H_
