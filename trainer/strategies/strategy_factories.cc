#include "trainer/strategies/strategy_factories.h"

#include <any>
#include <memory>
#include <mutex>
#include <utility>

#include "glog/logging.h"
#include "trainer/strategies/ddp_strategy.h"
#include "trainer/strategies/fsdp_strategy.h"
#include "trainer/strategies/model_parallel_strategy.h"
#include "trainer/strategies/strategy.h"

namespace kiln {
namespace {

StrategyFactory Ddp(bool find_unused_parameters) {
  return [find_unused_parameters](const StrategyArguments& arguments) -> std::shared_ptr<StrategyDescriptor> {
    return std::make_shared<DDPStrategy>(DDPOptions{.timeout = arguments.process_group_timeout,
                                                    .find_unused_parameters = find_unused_parameters});
  };
}

StrategyFactory Fsdp(bool cpu_offload) {
  return [cpu_offload](const StrategyArguments& arguments) -> std::shared_ptr<StrategyDescriptor> {
    // The options parsed where they came in (the trainer's TrainerOptions::fsdp); the defaults where none came.
    const FSDPOptions* given = std::any_cast<FSDPOptions>(&arguments.options);
    FSDPOptions options = given != nullptr ? *given : FSDPOptions{};
    options.timeout = arguments.process_group_timeout;
    options.cpu_offload = cpu_offload;
    return std::make_shared<FSDPStrategy>(std::move(options));
  };
}

std::shared_ptr<StrategyDescriptor> ModelParallel(const StrategyArguments& arguments) {
  // The sizes parsed where they came in (TrainerOptions' data_parallel_size and tensor_parallel_size); "auto" else.
  const ModelParallelOptions* given = std::any_cast<ModelParallelOptions>(&arguments.options);
  ModelParallelOptions options = given != nullptr ? *given : ModelParallelOptions{};
  options.timeout = arguments.process_group_timeout;
  return std::make_shared<ModelParallelStrategy>(std::move(options));
}

}  // namespace

absl::Status SetBuiltinStrategyFactories(StrategyRegistry& registry) {
  const std::pair<const char*, StrategyFactory> factories[] = {
      {kSingleDeviceStrategy,
       [](const StrategyArguments&) -> std::shared_ptr<StrategyDescriptor> {
         return std::make_shared<SingleDeviceStrategy>();
       }},
      {kDdpStrategy, Ddp(false)},
      {kDdpFindUnusedFalseStrategy, Ddp(false)},
      {kDdpFindUnusedTrueStrategy, Ddp(true)},
      {kFsdpStrategy, Fsdp(false)},
      {kFsdpCpuOffloadStrategy, Fsdp(true)},
      {kModelParallelStrategy, ModelParallel},
  };
  for (const auto& [name, factory] : factories) {
    if (absl::Status status = registry.SetFactory(name, factory); !status.ok()) return status;
  }
  return absl::OkStatus();
}

void SetBuiltinStrategyFactories() {
  static std::once_flag once;
  std::call_once(once, [] {
    const absl::Status status = SetBuiltinStrategyFactories(StrategyRegistry::Default());
    // Only a program that set one of these names' factories itself gets here; Kiln's own then cannot be used.
    LOG_IF(WARNING, !status.ok()) << "kiln: the built-in strategies' factories: " << status;
  });
}

}  // namespace kiln
