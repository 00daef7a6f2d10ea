#include "trainer/accelerator_plugins.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "hal/plugin/plugin_loader.h"
#include "hal/registry.h"
#include "trainer/io/user_path.h"

ABSL_FLAG(std::string, accelerator_plugin, "",
          "Load an accelerator plugin (a shared library implementing hal/plugin/kiln_plugin_c_api.h) from this path "
          "before resolving --accelerator; it registers under its own name. Repeat the flag for several. The path "
          "must contain a '/' (./libacme.so, not libacme.so): no directory is searched. KILN_ACCELERATOR_PLUGINS "
          "lists more, separated by ':'.");

namespace kiln {
namespace {

constexpr absl::string_view kFlagName = "accelerator_plugin";

}  // namespace

std::vector<std::string> AcceleratorPluginFlagValues(int argc, char* const* argv) {
  std::vector<std::string> values;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;  // Everything after it is positional.
    if (!absl::ConsumePrefix(&arg, "--")) {
      if (!absl::ConsumePrefix(&arg, "-")) continue;
    }
    if (!absl::ConsumePrefix(&arg, kFlagName)) continue;
    if (absl::ConsumePrefix(&arg, "=")) {
      values.emplace_back(arg);
    } else if (arg.empty() && i + 1 < argc) {
      values.emplace_back(argv[++i]);
    }
  }
  const std::string parsed = absl::GetFlag(FLAGS_accelerator_plugin);
  if (!parsed.empty() && (values.empty() || values.back() != parsed)) values.push_back(parsed);
  return values;
}

absl::Status LoadAcceleratorPluginsFromCommandLine(int argc, char* const* argv) {
  std::vector<std::string> paths;
  for (const std::string& path : AcceleratorPluginFlagValues(argc, argv)) {
    paths.push_back(UserPathKeepingBareNames(path));
  }
  for (const std::string& path : AcceleratorPluginPathsFromEnvironment()) {
    paths.push_back(UserPathKeepingBareNames(path));
  }
  absl::StatusOr<std::vector<PluginInfo>> loaded = LoadAcceleratorPlugins(paths, AcceleratorRegistry::Default());
  return loaded.status();
}

}  // namespace kiln
