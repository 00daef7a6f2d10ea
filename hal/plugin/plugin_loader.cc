#include "hal/plugin/plugin_loader.h"

#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "hal/plugin/plugin_library.h"

namespace kiln {

namespace internal {

absl::StatusOr<PluginInfo> LoadAcceleratorPluginRequiringMinor(const std::string& path, AcceleratorRegistry& registry,
                                                               int minimum_minor) {
  absl::StatusOr<std::shared_ptr<const PluginLibrary>> library = PluginLibrary::Open(path, minimum_minor);
  if (!library.ok()) return library.status();
  absl::StatusOr<PluginInfo> info = ReadPluginInfo(**library);
  if (!info.ok()) return info.status();
  AcceleratorSpec spec{
      .name = info->name,
      .description = absl::StrCat(info->description, " [plugin ", path, ", API ", info->api_version, "]"),
      .aliases = info->aliases,
      .priority = info->priority,
      .factory = [library = *library, info = *info] { return std::make_shared<PluginAccelerator>(library, info); },
      .origin = absl::StrCat("the plugin ", path),
  };
  if (absl::Status registered = registry.Register(std::move(spec)); !registered.ok()) {
    std::string advice;
    if (registered.code() == absl::StatusCode::kAlreadyExists) {
      advice = absl::StrCat(" (registered: ", registry.NameList(),
                            "); a plugin's name and aliases (its Plugin_Info) must differ from every registered "
                            "accelerator's, and each plugin is loaded once");
    }
    return absl::Status(registered.code(), absl::StrCat("accelerator plugin '", path,
                                                        "' cannot be registered: ", registered.message(), advice));
  }
  return info;
}

}  // namespace internal

absl::StatusOr<PluginInfo> LoadAcceleratorPlugin(const std::string& path, AcceleratorRegistry& registry) {
  return internal::LoadAcceleratorPluginRequiringMinor(path, registry, kPluginApiMinimumMinor);
}

absl::StatusOr<std::vector<PluginInfo>> LoadAcceleratorPlugins(const std::vector<std::string>& paths,
                                                               AcceleratorRegistry& registry) {
  std::vector<PluginInfo> loaded;
  std::set<std::pair<dev_t, ino_t>> files;  // The files loaded so far, however their paths are spelled.
  for (const std::string& path : paths) {
    struct stat file;
    if (!path.empty() && ::stat(path.c_str(), &file) == 0 && !files.insert({file.st_dev, file.st_ino}).second) {
      continue;
    }
    absl::StatusOr<PluginInfo> info = LoadAcceleratorPlugin(path, registry);
    if (!info.ok()) return info.status();
    loaded.push_back(*std::move(info));
  }
  return loaded;
}

std::vector<std::string> AcceleratorPluginPathsFromEnvironment() {
  const char* value = std::getenv(kAcceleratorPluginsVariable);
  if (value == nullptr) return {};
  return absl::StrSplit(value, ':', absl::SkipEmpty());
}

}  // namespace kiln
