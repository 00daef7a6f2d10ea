#include "connector/connector.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "connector/detect_cluster_environment.h"
#include "glog/logging.h"
#include "hal/compat/error_message.h"

namespace kiln {
namespace {

constexpr char kAuto[] = "auto";

bool IsAuto(absl::string_view flag) { return absl::AsciiStrToLower(absl::StripAsciiWhitespace(flag)) == kAuto; }

// Probes go through these so that an accelerator that throws, against its contract, is reported like one that
// answers "no" instead of ending the process.
absl::Status ProbeAvailable(const Accelerator& accelerator) {
  try {
    return accelerator.CheckAvailable();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("CheckAvailable threw: ", compat::ExceptionMessage(e)));
  } catch (...) {
    return absl::InternalError("CheckAvailable threw");
  }
}

absl::StatusOr<int> ProbeDeviceCount(const Accelerator& accelerator) {
  try {
    return accelerator.AutoDeviceCount();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("AutoDeviceCount threw: ", compat::ExceptionMessage(e)));
  } catch (...) {
    return absl::InternalError("AutoDeviceCount threw");
  }
}

std::string AvailableList(const AcceleratorRegistry& registry) {
  std::vector<std::string> names;
  for (const AcceleratorSpec& spec : registry.List()) {
    absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(spec.name);
    if (accelerator.ok() && ProbeAvailable(**accelerator).ok()) names.push_back(spec.name);
  }
  std::sort(names.begin(), names.end());
  return names.empty() ? "(none)" : absl::StrJoin(names, ", ");
}

// One resolution: the steps of connector.h, in order, filling `plan_`.
class Resolver {
 public:
  Resolver(const ConnectorOptions& options, const AcceleratorRegistry& registry, const StrategyRegistry& strategies,
           const ProcessEnvironment& environment)
      : options_(options), registry_(registry), strategies_(strategies), environment_(environment) {}

  absl::StatusOr<Plan> Resolve() {
    for (absl::Status (Resolver::*step)() :
         {&Resolver::CheckRegistrations, &Resolver::CheckNumNodes, &Resolver::ParsePrecision, &Resolver::ParseStrategyFlag,
          &Resolver::ParseAcceleratorFlag, &Resolver::RejectZeroDevices, &Resolver::ChooseAccelerator,
          &Resolver::ParseDevices, &Resolver::ResolveClusterEnvironment, &Resolver::ChooseStrategy,
          &Resolver::ChoosePrecision}) {
      if (absl::Status status = (this->*step)(); !status.ok()) return status;
    }
    return std::move(plan_);
  }

 private:
  // A backend whose registration failed before main() (a taken name) makes every answer about names doubtful.
  absl::Status CheckRegistrations() { return registry_.StartupStatus(); }

  absl::Status CheckNumNodes() {
    if (options_.num_nodes < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_nodes=", options_.num_nodes, " is not valid; pass an int >= 1 (1 for a single machine)"));
    }
    plan_.num_nodes = options_.num_nodes;
    return absl::OkStatus();
  }

  absl::Status ParsePrecision() {
    absl::StatusOr<Precision> precision = ParsePrecisionFlag(options_.precision, &plan_.warnings);
    if (!precision.ok()) return precision.status();
    requested_precision_ = *precision;
    return absl::OkStatus();
  }

  absl::Status ParseStrategyFlag() {
    const StrategyFlag& flag = options_.strategy;
    if (flag.instance() != nullptr) {
      if (flag.instance()->name().empty()) {
        return absl::InvalidArgumentError(
            "the strategy instance passed as `strategy` has an empty name(); StrategyDescriptor::name() must name it");
      }
      return absl::OkStatus();
    }
    if (IsAuto(flag.name())) return absl::OkStatus();
    absl::StatusOr<StrategySpec> spec = strategies_.Find(absl::StripAsciiWhitespace(flag.name()));
    if (!spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("You selected an invalid strategy name: `strategy='", flag.name(),
                                                     "'`. It must be \"auto\", a registered "
                                                     "strategy name (",
                                                     strategies_.NameList(),
                                                     ") or a strategy instance (kiln::StrategyDescriptor)."));
    }
    named_strategy_ = *spec;
    return absl::OkStatus();
  }

  absl::Status ParseAcceleratorFlag() {
    const AcceleratorFlag& flag = options_.accelerator;
    if (flag.instance() != nullptr) {
      plan_.accelerator = flag.instance();
      accelerator_display_name_ = plan_.accelerator->name();
      return absl::OkStatus();
    }
    accelerator_display_name_ = flag.name();
    if (IsAuto(flag.name())) return absl::OkStatus();
    absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry_.Get(absl::StripAsciiWhitespace(flag.name()));
    if (!accelerator.ok()) {
      return absl::Status(accelerator.status().code() == absl::StatusCode::kNotFound
                              ? absl::StatusCode::kInvalidArgument
                              : accelerator.status().code(),
                          absl::StrCat("accelerator: ", accelerator.status().message()));
    }
    plan_.accelerator = *accelerator;
    return absl::OkStatus();
  }

  // Lightning rejects "no devices" for every accelerator before it asks about availability.
  absl::Status RejectZeroDevices() {
    if (!IsZeroDevices(options_.devices)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("`Trainer(devices=", options_.devices.ToString(), ")` value is not a valid input using ",
                     accelerator_display_name_, " accelerator. Pass a positive count, a list of indices or \"auto\"."));
  }

  absl::Status ChooseAccelerator() {
    if (plan_.accelerator != nullptr) {
      absl::Status available = ProbeAvailable(*plan_.accelerator);
      if (available.ok()) return available;
      return absl::FailedPreconditionError(
          absl::StrCat("accelerator '", plan_.accelerator->name(),
                       "' can not run on your system since the accelerator is not "
                       "available (",
                       available.message(),
                       "). The following accelerator(s) is available and can be passed into "
                       "`accelerator` argument of `Trainer`: ",
                       AvailableList(registry_), "."));
    }
    for (const AcceleratorSpec& spec : registry_.List()) {  // Highest priority first.
      absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry_.Get(spec.name);
      absl::Status why_not = accelerator.status();
      if (why_not.ok()) why_not = ProbeAvailable(**accelerator);
      if (why_not.ok()) {
        absl::StatusOr<int> count = ProbeDeviceCount(**accelerator);
        if (!count.ok()) {
          why_not = count.status();
        } else if (*count <= 0) {
          why_not = absl::FailedPreconditionError("it counts no devices");
        }
      }
      if (why_not.ok()) {
        plan_.accelerator = *accelerator;
        return absl::OkStatus();
      }
      Note(absl::StrCat("accelerator=\"auto\" skips '", spec.name, "': ", why_not.message()));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("accelerator=\"auto\" found no available accelerator among the registered ones (",
                     registry_.NameList(), "); link a backend or pass accelerator=<name>"));
  }

  absl::Status ParseDevices() {
    absl::StatusOr<std::vector<int>> indices = plan_.accelerator->ParseDevices(options_.devices);
    if (!indices.ok()) {
      return absl::Status(indices.status().code(), absl::StrCat("devices: ", indices.status().message()));
    }
    if (indices->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "devices: the ", plan_.accelerator->name(),
          " accelerator selected no device for devices=", options_.devices.ToString(), "; pass a positive count"));
    }
    plan_.device_indices = *std::move(indices);
    plan_.devices = plan_.accelerator->ParallelDevices(plan_.device_indices);
    if (plan_.devices.size() != plan_.device_indices.size()) {
      return absl::InternalError(absl::StrCat("the ", plan_.accelerator->name(), " accelerator returned ",
                                              plan_.devices.size(), " parallel devices for ",
                                              plan_.device_indices.size(), " device indices; it must return one each"));
    }
    return absl::OkStatus();
  }

  absl::Status ResolveClusterEnvironment() {
    std::shared_ptr<ClusterEnvironment> cluster =
        options_.cluster_environment != nullptr ? options_.cluster_environment : DetectClusterEnvironment(environment_);
    plan_.cluster_environment = cluster->name();
    plan_.cluster_environment_instance = cluster;
    const int devices = plan_.num_devices();
    const int nodes = plan_.num_nodes;
    const auto in_context = [&](const absl::Status& status) {
      return absl::Status(status.code(), absl::StrCat(cluster->name(), " cluster environment: ", status.message()));
    };

    if (absl::Status status = cluster->ValidateSettings(devices, nodes); !status.ok()) return in_context(status);
    absl::StatusOr<int> local_rank = cluster->LocalRank();
    if (!local_rank.ok()) return in_context(local_rank.status());
    absl::StatusOr<int> node_rank = cluster->NodeRank();
    if (!node_rank.ok()) return in_context(node_rank.status());
    cluster->SetWorldSize(devices * nodes);
    cluster->SetGlobalRank(*node_rank * devices + *local_rank);
    absl::StatusOr<int> world_size = cluster->WorldSize();
    if (!world_size.ok()) return in_context(world_size.status());
    absl::StatusOr<int> global_rank = cluster->GlobalRank();
    if (!global_rank.ok()) return in_context(global_rank.status());

    if (*local_rank < 0 || *local_rank >= devices) {
      return in_context(absl::InvalidArgumentError(
          absl::StrCat("this process has local rank ", *local_rank, ", but devices=", options_.devices.ToString(),
                       " runs ", devices, " process(es) per node (local ranks 0..", devices - 1,
                       "); set devices to the number of processes started on each node")));
    }
    if (*node_rank < 0 || *node_rank >= nodes) {
      return in_context(absl::InvalidArgumentError(
          absl::StrCat("this process runs on node rank ", *node_rank, ", but num_nodes=", nodes, " (node ranks 0..",
                       nodes - 1, "); set num_nodes to the number of nodes in the job")));
    }
    if (absl::Status status = CheckWorldSizeMatches(
            *world_size, absl::StrCat("the ", cluster->name(), " cluster environment"), devices, nodes);
        !status.ok()) {
      return in_context(status);
    }
    if (*global_rank < 0 || *global_rank >= *world_size) {
      return in_context(absl::InvalidArgumentError(absl::StrCat(
          "this process has global rank ", *global_rank, ", outside the world of ", *world_size,
          " process(es) (ranks 0..", *world_size - 1, "); the launcher's variables disagree with each other")));
    }

    absl::StatusOr<std::string> main_address = cluster->MainAddress();
    if (!main_address.ok()) return in_context(main_address.status());
    absl::StatusOr<std::optional<int>> main_port = cluster->MainPort();
    if (!main_port.ok()) return in_context(main_port.status());
    absl::StatusOr<std::optional<std::string>> store_prefix = cluster->LauncherStorePrefix();
    if (!store_prefix.ok()) return in_context(store_prefix.status());

    plan_.local_rank = *local_rank;
    plan_.node_rank = *node_rank;
    plan_.world_size = *world_size;
    plan_.global_rank = *global_rank;
    plan_.main_address = *std::move(main_address);
    plan_.main_port = *main_port;
    plan_.launcher_store_prefix = *std::move(store_prefix);
    plan_.creates_processes_externally = cluster->CreatesProcessesExternally();
    for (std::string& warning : cluster->Warnings()) plan_.warnings.push_back(std::move(warning));
    return absl::OkStatus();
  }

  absl::Status ChooseStrategy() {
    const int devices = plan_.num_devices();
    const bool one_device = devices == 1 && plan_.num_nodes == 1;
    bool distributed = false;
    std::optional<std::string> backend;
    if (const std::shared_ptr<StrategyDescriptor>& instance = options_.strategy.instance(); instance != nullptr) {
      plan_.strategy = instance->name();
      plan_.strategy_instance = instance;
      distributed = instance->IsDistributed();
      backend = instance->ProcessGroupBackend();
    } else if (named_strategy_.has_value()) {
      plan_.strategy = named_strategy_->name;
      distributed = named_strategy_->distributed;
    } else {
      plan_.strategy = one_device ? kSingleDeviceStrategy : kDdpStrategy;
      distributed = !one_device;
    }
    if (!distributed) {
      if (!one_device) {
        return absl::InvalidArgumentError(absl::StrCat(
            "strategy='", plan_.strategy, "' runs on one device, but ", devices, " device(s) on ", plan_.num_nodes,
            " node(s) were requested; pass devices=1 and num_nodes=1, or a distributed strategy such as "
            "strategy='ddp'"));
      }
      return absl::OkStatus();
    }
    if (!options_.process_group_backend.empty()) {
      if (backend.has_value() && !backend->empty() && *backend != options_.process_group_backend) {
        return absl::InvalidArgumentError(absl::StrCat(
            "process_group_backend='", options_.process_group_backend, "' conflicts with strategy '", plan_.strategy,
            "', which insists on '", *backend, "'; drop process_group_backend or give the strategy '",
            options_.process_group_backend, "'"));
      }
      backend = options_.process_group_backend;
    }
    if (!backend.has_value() || backend->empty()) backend = plan_.accelerator->ProcessGroupBackend();
    if (backend->empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "strategy='", plan_.strategy, "' needs a collective backend, but the ", plan_.accelerator->name(),
          " accelerator names none (its ProcessGroupBackend() is empty); use devices=1 and num_nodes=1, or an "
          "accelerator that supports distributed training"));
    }
    plan_.process_group_backend = std::move(backend);
    return absl::OkStatus();
  }

  absl::Status ChoosePrecision() {
    const std::string name = plan_.accelerator->name();
    const std::vector<Precision> supported = plan_.accelerator->SupportedPrecisions();
    const auto is_supported = [&](Precision precision) {
      return std::find(supported.begin(), supported.end(), precision) != supported.end();
    };
    if (is_supported(requested_precision_)) {
      plan_.precision = requested_precision_;
    } else if (std::optional<PrecisionSubstitute> substitute =
                   plan_.accelerator->SubstitutePrecision(requested_precision_);
               substitute.has_value() && is_supported(substitute->precision)) {
      plan_.precision = substitute->precision;
      plan_.warnings.push_back(substitute->warning);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("precision '", PrecisionName(requested_precision_),
                                                     "' is not supported by the ", name, " accelerator; it supports ",
                                                     PrecisionNames(supported), ". Pass one of these."));
    }
    if (plan_.precision == Precision::k16Mixed) Note("Using 16-bit Automatic Mixed Precision (AMP)");
    if (plan_.precision == Precision::kBf16Mixed) Note("Using bfloat16 Automatic Mixed Precision (AMP)");
    return absl::OkStatus();
  }

  void Note(std::string line) {
    LOG(INFO) << line;
    plan_.notes.push_back(std::move(line));
  }

  const ConnectorOptions& options_;
  const AcceleratorRegistry& registry_;
  const StrategyRegistry& strategies_;
  const ProcessEnvironment& environment_;
  Plan plan_;
  Precision requested_precision_ = Precision::k32True;
  std::optional<StrategySpec> named_strategy_;
  std::string accelerator_display_name_;
};

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
  return ResolvePlan(options, registry, StrategyRegistry::Default(), ProcessEnvironment::Current());
}

absl::StatusOr<Plan> ResolvePlan(const ConnectorOptions& options, const AcceleratorRegistry& registry,
                                 const StrategyRegistry& strategies, const ProcessEnvironment& environment) {
  return Resolver(options, registry, strategies, environment).Resolve();
}

}  // namespace kiln
