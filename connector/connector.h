// The connector: turns the user's flags (accelerator, devices, strategy, precision, num_nodes) into a Plan.
//
// It asks accelerators every hardware question and answers none itself: there is no backend name anywhere in this
// package, and it depends on no backend (tests/layering_test enforces both). "auto" picks the available accelerator
// with the highest registry priority, so a third-party backend competes exactly like a built-in one.
//
// All checks happen here, before any process, device or file is touched. Errors are InvalidArgument or
// FailedPrecondition with a message that names the bad value, the accepted ones and the fix.
//
// Thread-safety: ResolvePlan may be called from any thread; it reads the process environment.
#ifndef KILN_CONNECTOR_CONNECTOR_H_
#define KILN_CONNECTOR_CONNECTOR_H_

#include "absl/status/statusor.h"
#include "connector/options.h"
#include "connector/plan.h"
#include "hal/registry.h"

namespace kiln {

absl::StatusOr<Plan> ResolvePlan(const ConnectorOptions& options,
                                 const AcceleratorRegistry& registry = AcceleratorRegistry::Default());

// Maps Lightning's precision spellings (canonical and legacy) to a Precision. A legacy spelling that Lightning
// warns about appends its warning to `warnings`. Unknown values are InvalidArgument listing the accepted ones.
absl::StatusOr<Precision> ParsePrecisionFlag(absl::string_view value, std::vector<std::string>* warnings);

}  // namespace kiln

#endif  // KILN_CONNECTOR_CONNECTOR_H_
