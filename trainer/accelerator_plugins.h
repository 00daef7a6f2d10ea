// Accelerator plugins for Kiln's programs: `--accelerator_plugin=PATH` (repeatable) and the KILN_ACCELERATOR_PLUGINS
// environment variable (paths separated by ':'), loaded into the default accelerator registry before anything
// resolves `--accelerator`. The loading itself is the HAL's (hal/plugin/plugin_loader.h).
//
// Thread-safety: call from main(), once, after absl::ParseCommandLine.
#ifndef KILN_TRAINER_ACCELERATOR_PLUGINS_H_
#define KILN_TRAINER_ACCELERATOR_PLUGINS_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"

ABSL_DECLARE_FLAG(std::string, accelerator_plugin);
ABSL_DECLARE_FLAG(std::string, accelerator_library);

namespace kiln {

// Every value of --accelerator_plugin on the command line, in order (Abseil's flag keeps only the last one): the
// forms --accelerator_plugin=PATH and --accelerator_plugin PATH, with one or two dashes, up to a bare "--". A value
// the flag got otherwise (--flagfile) is added at the end.
std::vector<std::string> AcceleratorPluginFlagValues(int argc, char* const* argv);

// Loads the plugins of every --accelerator_plugin, then those KILN_ACCELERATOR_PLUGINS lists, into
// AcceleratorRegistry::Default(), each file once. A relative path that contains a '/' is taken from the directory
// `bazel run` was started in (BUILD_WORKING_DIRECTORY) when there is one; a bare file name is refused by the
// loader. The first failure is returned with the loader's message (it names the path and the problem). Then
// registers --accelerator_library's PrivateUse1 library (hal/privateuse1_library.h) under its name, loading nothing.
absl::Status LoadAcceleratorPluginsFromCommandLine(int argc, char* const* argv);

}  // namespace kiln

#endif  // KILN_TRAINER_ACCELERATOR_PLUGINS_H_
