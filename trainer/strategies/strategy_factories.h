// The factories of Kiln's built-in strategy names (connector/strategy_registry.h): single_device, ddp,
// ddp_find_unused_parameters_true, ddp_find_unused_parameters_false, fsdp, fsdp_cpu_offload and
// model_parallel. The connector knows the names; the trainer
// makes every strategy through the registry, so a strategy of one's own, registered with its factory, is made the same
// way.
//
// Thread-safe: the first call sets them, later calls do nothing.
#ifndef KILN_TRAINER_STRATEGIES_STRATEGY_FACTORIES_H_
#define KILN_TRAINER_STRATEGIES_STRATEGY_FACTORIES_H_

#include "connector/strategy_registry.h"

namespace kiln {

// Sets the built-in names' factories in StrategyRegistry::Default(), once per process. The trainer calls it before it
// makes a strategy; a program that makes strategies from the registry itself calls it too.
void SetBuiltinStrategyFactories();

// The same for `registry` (a test's own). Returns what SetFactory returned for the first name that failed.
absl::Status SetBuiltinStrategyFactories(StrategyRegistry& registry);

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_STRATEGY_FACTORIES_H_
