// The connector: turns the user's flags (accelerator, devices, strategy, precision, num_nodes, and optionally a
// cluster environment) into a Plan.
//
// It asks accelerators and cluster environments every hardware question and answers none itself: no backend is
// named anywhere in this package, and it depends on no backend (tests/layering:layering_test enforces both).
//
// Resolution order (each step may fail; the first failure is returned, before any process, device or file is
// touched; only an LSF rank file may be read):
//   1. num_nodes: an int >= 1.
//   2. precision: Lightning's spelling. The legacy "32" and "64" map to 32-true and 64-true silently; "16" and
//      "bf16" map to 16-mixed and bf16-mixed with Lightning's "supported for historical reasons" warning.
//   3. strategy: "auto", a name registered in the StrategyRegistry (case-insensitive), or an instance.
//   4. accelerator: an instance, a registered name or alias (case-insensitive), or "auto". An unknown name lists
//      the registered ones.
//   5. devices: 0, "0" and [] are rejected for every accelerator, as Lightning does, before any availability probe.
//   6. accelerator choice: "auto" takes the available accelerator with the highest registry priority that counts
//      at least one device; there is no hard-coded list, so a third-party backend can win. An accelerator whose
//      probe fails (or throws, against its contract) is skipped, and why is logged and kept in Plan::notes. A named
//      or given accelerator that is not available is an error naming it and listing the available ones, sorted.
//   7. devices: the accelerator's own parser (Accelerator::ParseDevices), then its ParallelDevices.
//   8. cluster environment: the given instance, or the detected one (detect_cluster_environment.h). Its
//      ValidateSettings(devices, num_nodes) runs, then the connector proposes world size devices x num_nodes and
//      global rank node_rank x devices + local_rank (Lightning's set_world_size/set_global_rank), reads the ranks
//      back, and checks them: local rank < devices, node rank < num_nodes, global rank < world size, and world
//      size == devices x num_nodes.
//   9. strategy choice: "auto" gives single_device for one device on one node, on that accelerator's own device
//      (Lightning's connector falls back to a CPU device for a custom accelerator; Kiln does not), and ddp
//      otherwise. A named or given strategy is never replaced: ddp on one device stays ddp, and a strategy that is
//      not distributed on more than one device (or node) is an error. A distributed strategy gets its own
//      collective backend if its instance names one, else the accelerator's preferred one.
//  10. precision choice: one the accelerator declares (SupportedPrecisions) is kept; otherwise the accelerator's
//      substitute, if it offers one, with its warning (a host accelerator turns 16-mixed into bf16-mixed this
//      way); otherwise an error listing the precisions it declares.
//
// Errors are InvalidArgument, FailedPrecondition or NotFound with a message that names the bad value, the accepted
// ones and the fix, in Lightning's words where Lightning has them.
//
// Thread-safety: ResolvePlan may be called from any thread. It calls SetWorldSize/SetGlobalRank on the cluster
// environment it uses (which may be the caller's instance).
#ifndef KILN_CONNECTOR_CONNECTOR_H_
#define KILN_CONNECTOR_CONNECTOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "connector/options.h"
#include "connector/plan.h"
#include "connector/process_environment.h"
#include "connector/strategy_registry.h"
#include "hal/registry.h"

namespace kiln {

// Resolves `options` with the default strategy registry and this process's environment.
absl::StatusOr<Plan> ResolvePlan(const ConnectorOptions& options,
                                 const AcceleratorRegistry& registry = AcceleratorRegistry::Default());

// Resolves `options` with the given registries, reading cluster variables from `environment` only.
absl::StatusOr<Plan> ResolvePlan(const ConnectorOptions& options, const AcceleratorRegistry& registry,
                                 const StrategyRegistry& strategies, const ProcessEnvironment& environment);

// Maps Lightning's precision spellings (canonical and legacy, case-insensitive) to a Precision. A legacy spelling
// that Lightning warns about appends its warning to `warnings`. Unknown values are InvalidArgument listing the
// accepted ones.
absl::StatusOr<Precision> ParsePrecisionFlag(absl::string_view value, std::vector<std::string>* warnings);

}  // namespace kiln

#endif  // KILN_CONNECTOR_CONNECTOR_H_
