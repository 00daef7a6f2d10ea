// Loads accelerator plugins (shared libraries implementing kiln_plugin_c_api.h) at run time and registers each as an
// ordinary accelerator, under the plugin's own name, aliases and priority.
//
//   absl::StatusOr<PluginInfo> info = LoadAcceleratorPlugin("/opt/acme/libacme_kiln.so",
//                                                           AcceleratorRegistry::Default());
//
// Kiln loads only the paths it is given: a path must contain a '/' (write ./libacme.so for one in the working
// directory), and no directory is ever searched. Every failure is an error naming the path and the problem (no such
// file, not a shared library, no entry point, an incompatible version, a short function table, a bad
// Plugin_Info, the plugin's own error, a name already registered); a malformed plugin never crashes the loader.
// Plugins are never unloaded: tensors they made, and kernels they registered, may live until the process exits.
//
// Thread-safety: every function may be called from any thread.
#ifndef KILN_HAL_PLUGIN_PLUGIN_LOADER_H_
#define KILN_HAL_PLUGIN_PLUGIN_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hal/plugin/plugin_accelerator.h"
#include "hal/registry.h"

namespace kiln {

// The environment variable that lists plugins to load: paths separated by ':'. Empty entries are skipped (never
// read as the working directory, as an empty PATH entry would be).
inline constexpr char kAcceleratorPluginsVariable[] = "KILN_ACCELERATOR_PLUGINS";

// Loads the plugin at `path` (see above) and registers it in `registry`. Returns what the plugin declared. Loading
// a plugin a second time into the same registry is AlreadyExists, as for any name registered twice.
absl::StatusOr<PluginInfo> LoadAcceleratorPlugin(const std::string& path, AcceleratorRegistry& registry);

// Loads each of `paths` in order, skipping a path that names a file already loaded by this call (the same plugin
// given twice, for example on the command line and in the environment). Stops at the first error.
absl::StatusOr<std::vector<PluginInfo>> LoadAcceleratorPlugins(const std::vector<std::string>& paths,
                                                               AcceleratorRegistry& registry);

// The paths KILN_ACCELERATOR_PLUGINS lists, in order; empty when it is unset.
std::vector<std::string> AcceleratorPluginPathsFromEnvironment();

namespace internal {
// LoadAcceleratorPlugin as a Kiln that needs plugin API minor version `minimum_minor` would run it: how tests load a
// real plugin built for an older minor version than the loader requires.
absl::StatusOr<PluginInfo> LoadAcceleratorPluginRequiringMinor(const std::string& path, AcceleratorRegistry& registry,
                                                               int minimum_minor);
}  // namespace internal

}  // namespace kiln

#endif  // KILN_HAL_PLUGIN_PLUGIN_LOADER_H_
