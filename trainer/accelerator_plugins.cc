#include "trainer/accelerator_plugins.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "hal/plugin/plugin_loader.h"
#include "hal/privateuse1_library.h"
#include "hal/registry.h"
#include "trainer/io/user_path.h"

ABSL_FLAG(std::string, accelerator_plugin, "",
          "Load an accelerator plugin (a shared library implementing hal/plugin/kiln_plugin_c_api.h) from this path "
          "before resolving --accelerator; it registers under its own name. Repeat the flag for several. The path "
          "must contain a '/' (./libacme.so, not libacme.so): no directory is searched. KILN_ACCELERATOR_PLUGINS "
          "lists more, separated by ':'.");

ABSL_FLAG(std::string, accelerator_library, "",
          "Adopt a vendor's LibTorch PrivateUse1 library (one that registers its device when it is loaded, as "
          "torch_npu's does) as an accelerator: NAME=PATH, or PATH with NAME taken from --accelerator. Kiln loads it "
          "when that accelerator is chosen, never before, and takes the device count, guard, memory statistics and "
          "random numbers from what it registered with c10. Data-parallel training runs on the c10d backend the "
          "library exports a creator for (its name, such as accl, in the plan; --process_group_backend chooses among "
          "several), or on Gloo over host copies (NAME_staged) when it exports none (docs/collectives.md). The path "
          "must contain a '/'.");

namespace kiln {
namespace {

constexpr absl::string_view kFlagName = "accelerator_plugin";

// The last value the command line gives flag `name` (exactly that flag: --name=V or --name V), or "".
std::string LastFlagValue(int argc, char* const* argv, absl::string_view name) {
  std::string value;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    if (!absl::ConsumePrefix(&arg, name)) continue;
    if (absl::ConsumePrefix(&arg, "=")) {
      value = std::string(arg);
    } else if (arg.empty() && i + 1 < argc) {
      value = argv[++i];
    }
  }
  return value;
}

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
  if (!loaded.ok()) return loaded.status();
  const std::string library = absl::GetFlag(FLAGS_accelerator_library);
  if (library.empty()) return absl::OkStatus();
  // NAME=PATH, or PATH with the name --accelerator gives.
  std::string name = LastFlagValue(argc, argv, "accelerator");
  std::string path = library;
  if (const size_t equals = library.find('='); equals != std::string::npos) {
    name = library.substr(0, equals);
    path = library.substr(equals + 1);
  }
  if (name.empty() || name == "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--accelerator_library=", library, " needs the accelerator's name: --accelerator_library=NAME=", path,
        ", or --accelerator=NAME beside it (the name its device gets, such as acme_npu)"));
  }
  return RegisterPrivateUse1Library(AcceleratorRegistry::Default(), UserPathKeepingBareNames(path), name);
}

}  // namespace kiln
