#include "connector/connector.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace kiln {
namespace {

constexpr char kStrategyAuto[] = "auto";
constexpr char kStrategySingleDevice[] = "single_device";
constexpr char kStrategyDdp[] = "ddp";

std::vector<std::string> AvailableNames(const AcceleratorRegistry& registry) {
  std::vector<std::string> names;
  for (const AcceleratorSpec& spec : registry.List()) {
    absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(spec.name);
    if (accelerator.ok() && (*accelerator)->IsAvailable()) names.push_back(spec.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string AvailableList(const AcceleratorRegistry& registry) {
  std::vector<std::string> names = AvailableNames(registry);
  return names.empty() ? "(none)" : absl::StrJoin(names, ", ");
}

absl::StatusOr<std::shared_ptr<Accelerator>> ChooseAuto(const AcceleratorRegistry& registry) {
  for (const AcceleratorSpec& spec : registry.List()) {  // Highest priority first.
    absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(spec.name);
    if (!accelerator.ok()) {
      LOG(INFO) << "accelerator=auto skips '" << spec.name << "': " << accelerator.status().message();
      continue;
    }
    if (absl::Status available = (*accelerator)->CheckAvailable(); !available.ok()) {
      LOG(INFO) << "accelerator=auto skips '" << spec.name << "': " << available.message();
      continue;
    }
    if ((*accelerator)->AutoDeviceCount() <= 0) {
      LOG(INFO) << "accelerator=auto skips '" << spec.name << "': it counts no devices";
      continue;
    }
    return *accelerator;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "accelerator=\"auto\" found no available accelerator among the registered ones (", registry.NameList(),
      "); link a backend or pass accelerator=<name>"));
}

absl::StatusOr<std::shared_ptr<Accelerator>> ChooseAccelerator(const AcceleratorFlag& flag,
                                                                const AcceleratorRegistry& registry) {
  if (flag.instance() != nullptr) return flag.instance();
  if (absl::AsciiStrToLower(flag.name()) == "auto") return ChooseAuto(registry);
  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(flag.name());
  if (!accelerator.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("accelerator: ", accelerator.status().message()));
  }
  return accelerator;
}

absl::Status CheckAvailable(const Accelerator& accelerator, const AcceleratorRegistry& registry) {
  absl::Status available = accelerator.CheckAvailable();
  if (available.ok()) return available;
  return absl::FailedPreconditionError(absl::StrCat(
      "accelerator '", accelerator.name(), "' can not run on your system since the accelerator is not available (",
      available.message(), "). The following accelerator(s) is available and can be passed into `accelerator` "
      "argument of `Trainer`: ", AvailableList(registry), "."));
}

absl::StatusOr<std::string> ChooseStrategy(absl::string_view flag, int num_devices, int num_nodes) {
  const std::string strategy = absl::AsciiStrToLower(flag);
  if (strategy == kStrategyAuto) {
    return num_devices == 1 && num_nodes == 1 ? kStrategySingleDevice : kStrategyDdp;
  }
  if (strategy == kStrategySingleDevice) {
    if (num_devices != 1 || num_nodes != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy='single_device' runs on one device, but ", num_devices, " device(s) on ", num_nodes,
          " node(s) were requested; pass devices=1, or strategy='ddp'"));
    }
    return strategy;
  }
  if (strategy == kStrategyDdp) return strategy;
  return absl::InvalidArgumentError(absl::StrCat("strategy '", flag, "' is not registered; registered: ",
                                                 kStrategyDdp, ", ", kStrategySingleDevice,
                                                 ". Pick one of these, or \"auto\"."));
}

absl::StatusOr<int> EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", value, "' is not a non-negative integer; unset it or fix it"));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<Precision> ParsePrecisionFlag(absl::string_view value, std::vector<std::string>* warnings) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (std::optional<Precision> canonical = PrecisionFromName(lower)) return *canonical;
  if (lower == "32") return Precision::k32True;
  if (lower == "64") return Precision::k64True;
  const auto legacy = [&](Precision precision) {
    warnings->push_back(absl::StrCat("'", lower, "' is supported for historical reasons but its usage is discouraged. ",
                                     "Please set your precision to '", PrecisionName(precision), "' instead!"));
    return precision;
  };
  if (lower == "16") return legacy(Precision::k16Mixed);
  if (lower == "bf16") return legacy(Precision::kBf16Mixed);
  return absl::InvalidArgumentError(absl::StrCat("precision '", value, "' is not supported; expected one of ",
                                                 PrecisionNames(AllPrecisions()), " (or the legacy 32, 64, 16, bf16)"));
}

absl::StatusOr<Plan> ResolvePlan(const ConnectorOptions& options, const AcceleratorRegistry& registry) {
  Plan plan;
  if (options.num_nodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_nodes=", options.num_nodes, " is not valid; pass an int >= 1 (1 for a single machine)"));
  }
  plan.num_nodes = options.num_nodes;

  absl::StatusOr<Precision> precision = ParsePrecisionFlag(options.precision, &plan.warnings);
  if (!precision.ok()) return precision.status();

  absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = ChooseAccelerator(options.accelerator, registry);
  if (!accelerator.ok()) return accelerator.status();
  plan.accelerator = *accelerator;
  const std::string name = plan.accelerator->name();

  // Lightning rejects "no devices" for every accelerator before it asks about availability.
  if (IsZeroDevices(options.devices)) {
    return absl::InvalidArgumentError(absl::StrCat("`Trainer(devices=", options.devices.ToString(),
                                                   ")` value is not a valid input using ", name,
                                                   " accelerator. Pass a positive count, a list of indices or \"auto\"."));
  }
  if (absl::Status available = CheckAvailable(*plan.accelerator, registry); !available.ok()) return available;

  absl::StatusOr<std::vector<int>> indices = plan.accelerator->ParseDevices(options.devices);
  if (!indices.ok()) return absl::InvalidArgumentError(absl::StrCat("devices: ", indices.status().message()));
  plan.device_indices = *indices;
  plan.devices = plan.accelerator->ParallelDevices(plan.device_indices);

  absl::StatusOr<std::string> strategy = ChooseStrategy(options.strategy, plan.num_devices(), plan.num_nodes);
  if (!strategy.ok()) return strategy.status();
  plan.strategy = *strategy;
  if (plan.strategy != kStrategySingleDevice) plan.process_group_backend = plan.accelerator->ProcessGroupBackend();

  const std::vector<Precision> supported = plan.accelerator->SupportedPrecisions();
  if (std::find(supported.begin(), supported.end(), *precision) != supported.end()) {
    plan.precision = *precision;
  } else if (std::optional<PrecisionSubstitute> substitute = plan.accelerator->SubstitutePrecision(*precision)) {
    plan.precision = substitute->precision;
    plan.warnings.push_back(substitute->warning);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("precision '", PrecisionName(*precision),
                                                   "' is not supported by the ", name, " accelerator; it supports ",
                                                   PrecisionNames(supported)));
  }

  // Kiln's own cluster environment: ranks from LOCAL_RANK and NODE_RANK, defaulting to a single process.
  plan.cluster_environment = "lightning";
  absl::StatusOr<int> local_rank = EnvInt("LOCAL_RANK", 0);
  if (!local_rank.ok()) return local_rank.status();
  absl::StatusOr<int> node_rank = EnvInt("NODE_RANK", 0);
  if (!node_rank.ok()) return node_rank.status();
  if (*local_rank >= plan.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat("LOCAL_RANK=", *local_rank, " but only ", plan.num_devices(),
                                                   " device(s) per node were requested"));
  }
  if (*node_rank >= plan.num_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("NODE_RANK=", *node_rank, " but num_nodes=", plan.num_nodes, "; node ranks run 0..num_nodes-1"));
  }
  plan.local_rank = *local_rank;
  plan.node_rank = *node_rank;
  plan.world_size = plan.num_devices() * plan.num_nodes;
  plan.global_rank = plan.node_rank * plan.num_devices() + plan.local_rank;
  return plan;
}

}  // namespace kiln
