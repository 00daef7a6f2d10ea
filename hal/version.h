// Kiln's version: the one place the number is written. CHANGELOG.md's newest released heading names the same
// number (//hal:version_test checks it), and `fit --version` prints it.
//
// Kiln is versioned 0.MINOR.PATCH (semantic versioning before 1.0): a release that adds or deprecates anything bumps
// MINOR, a release of fixes alone bumps PATCH. What deprecation promises is CHANGELOG.md's rule. The plugin C ABI has
// a version of its own (KILN_PLUGIN_API_MAJOR/MINOR, hal/plugin/kiln_plugin_c_api.h).
//
// The macros are the version of the headers a program was compiled with; kiln::Version() is the version of the
// library it linked. Thread-safe; nothing here throws.
#ifndef KILN_HAL_VERSION_H_
#define KILN_HAL_VERSION_H_

#include <string_view>

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 2
#define KILN_VERSION_PATCH 0

namespace kiln {

// "0.2.0": KILN_VERSION_MAJOR.MINOR.PATCH as the linked library was built.
std::string_view Version();

}  // namespace kiln

#endif  // KILN_HAL_VERSION_H_
