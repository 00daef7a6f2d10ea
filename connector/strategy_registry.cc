#include "connector/strategy_registry.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln {

StrategyRegistry::StrategyRegistry() {
  for (StrategySpec spec : {
           StrategySpec{kSingleDeviceStrategy, "Everything in one process, on one device of the accelerator.", false},
           StrategySpec{kDdpStrategy,
                        "Distributed data parallel: one process per device on every node, gradients averaged by the "
                        "accelerator's collective backend.",
                        true},
           StrategySpec{kDdpFindUnusedTrueStrategy,
                        "ddp that finds the parameters a step leaves without a gradient and reduces them as zeros.",
                        true},
           StrategySpec{kDdpFindUnusedFalseStrategy,
                        "ddp; a parameter that takes no part in a step is an error (the default).", true},
           StrategySpec{kFsdpStrategy,
                        "Fully sharded data parallel: each rank keeps 1/N of the parameters, gradients and optimizer "
                        "state, gathering each unit's parameters while it computes.",
                        true},
           StrategySpec{kFsdpCpuOffloadStrategy, "fsdp with the shards kept in host memory (cpu_offload).", true},
           StrategySpec{kModelParallelStrategy,
                        "Tensor parallelism on a data_parallel x tensor_parallel device mesh: the layers' weights "
                        "split within each tensor-parallel group, gradients averaged across the data-parallel one.",
                        true},
       }) {
    if (absl::Status status = Register(std::move(spec)); !status.ok()) {
      std::cerr << "kiln: cannot register a built-in strategy: " << status.message() << std::endl;
      std::abort();
    }
  }
}

StrategyRegistry& StrategyRegistry::Default() {
  static auto* const registry = new StrategyRegistry();
  return *registry;
}

absl::Status StrategyRegistry::Register(StrategySpec spec) {
  spec.name = absl::AsciiStrToLower(spec.name);
  const bool valid = !spec.name.empty() && std::all_of(spec.name.begin(), spec.name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_' || c == '-';
  });
  if (!valid) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid strategy name '", spec.name, "': use lower-case letters, digits, '_' and '-'"));
  }
  if (spec.name == "auto") {
    return absl::InvalidArgumentError("strategy name 'auto' is reserved: it asks Kiln to choose; pick another name");
  }
  absl::MutexLock lock(&mutex_);
  if (specs_.count(spec.name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("strategy '", spec.name, "' is already registered"));
  }
  std::string name = spec.name;
  specs_.emplace(std::move(name), std::move(spec));
  return absl::OkStatus();
}

absl::StatusOr<StrategySpec> StrategyRegistry::Find(absl::string_view name) const {
  absl::MutexLock lock(&mutex_);
  auto found = specs_.find(absl::AsciiStrToLower(name));
  if (found == specs_.end()) {
    return absl::NotFoundError(absl::StrCat("strategy '", name, "' is not registered"));
  }
  return found->second;
}

absl::Status StrategyRegistry::SetFactory(absl::string_view name, StrategyFactory factory) {
  absl::MutexLock lock(&mutex_);
  auto found = specs_.find(absl::AsciiStrToLower(name));
  if (found == specs_.end()) return absl::NotFoundError(absl::StrCat("strategy '", name, "' is not registered"));
  if (found->second.factory) {
    return absl::AlreadyExistsError(absl::StrCat("strategy '", name, "' has a factory already"));
  }
  found->second.factory = std::move(factory);
  return absl::OkStatus();
}

std::string StrategyRegistry::NameList() const {
  absl::MutexLock lock(&mutex_);
  std::vector<absl::string_view> names;
  for (const auto& [name, spec] : specs_) names.push_back(name);
  return absl::StrJoin(names, ", ");
}

}  // namespace kiln
