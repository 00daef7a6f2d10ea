// A backend that registers the built-in name "cpu", linked beside the built-in backends: the mistake a vendor makes
// by copying the CPU backend. conformance_kit_test expects the suite to fail it, naming both source files, and the
// program to keep running (no abort before main). Test support only.
#include <memory>

#include "hal/registry.h"
#include "hal/testing/fake_accelerator.h"

namespace kiln::testing {
namespace {

KILN_REGISTER_ACCELERATOR({
    .name = "cpu",
    .description = "A vendor's backend that took the built-in CPU's name.",
    .aliases = {},
    .priority = -100,
    .factory = [] { return std::make_shared<FakeAccelerator>(FakeAcceleratorOptions{.name = "cpu"}); },
});

}  // namespace
}  // namespace kiln::testing
