// `fit --version` and the version fields of the run summary: Kiln's version (hal/version.h), which LibTorch (and
// CUDA) the program was built against, which LibTorch it runs with (hal/compat/version.h), and the plugin C API's
// version (hal/plugin/kiln_plugin_c_api.h). fit refuses to train when the two differ in
// major.minor, before it reads any data.
#ifndef KILN_TRAINER_CLI_VERSIONS_H_
#define KILN_TRAINER_CLI_VERSIONS_H_

#include <string>

#include "trainer/cli/run_summary.h"

namespace kiln {

// True when an argument is --version (before a "--" separator).
bool WantsVersion(int argc, char** argv);

// What `fit --version` prints, one line each: "Kiln: 0.2.0", the built and loaded LibTorch versions, the plugin C
// API's version, the LibTorch Kiln needs, and the CUDA version (or "none").
std::string VersionText();

// Adds "libtorch_version" (the loaded LibTorch's), "libtorch_build_version" (the headers') and, in a CUDA build,
// "cuda_version" to a summary.
void AddVersions(JsonObject& json);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_VERSIONS_H_
