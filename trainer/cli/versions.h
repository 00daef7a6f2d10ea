// `fit --version` and the version fields of the run summary: which LibTorch (and CUDA) the program was built
// against, and which LibTorch it runs with (hal/compat/version.h). fit refuses to train when the two differ in
// major.minor, before it reads any data.
#ifndef KILN_TRAINER_CLI_VERSIONS_H_
#define KILN_TRAINER_CLI_VERSIONS_H_

#include <string>

#include "trainer/cli/run_summary.h"

namespace kiln {

// True when an argument is --version (before a "--" separator).
bool WantsVersion(int argc, char** argv);

// What `fit --version` prints: the built and loaded LibTorch versions and, in a CUDA build, the CUDA version.
std::string VersionText();

// Adds "libtorch_version" (the loaded LibTorch's), "libtorch_build_version" (the headers') and, in a CUDA build,
// "cuda_version" to a summary.
void AddVersions(JsonObject& json);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_VERSIONS_H_
