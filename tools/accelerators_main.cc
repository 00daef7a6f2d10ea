// `bazel run //tools:accelerators`: lists every registered accelerator, whether it is available here, how many
// devices "auto" uses and (with --stats) the statistics of each device --devices names (every device by default).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "hal/registry.h"
#include "trainer/accelerator_plugins.h"

ABSL_FLAG(bool, stats, false, "Also print the device statistics of every available accelerator's devices.");
ABSL_FLAG(std::string, devices, "-1",
          "With --stats: which devices of each accelerator, as the Trainer's devices takes them (-1: every device "
          "it has, or those \"auto\" would use where it counts none, as the CPU; auto; 0,1: those two).");

namespace kiln {
namespace {

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Lists the accelerators this build of Kiln knows. Usage: accelerators [--stats [--devices=-1|auto|N|0,1]] "
      "[--accelerator_plugin=PATH]...");
  absl::ParseCommandLine(argc, argv);
  // Plugins register their accelerators as fit loads them (--accelerator_plugin, KILN_ACCELERATOR_PLUGINS).
  if (absl::Status loaded = LoadAcceleratorPluginsFromCommandLine(argc, argv); !loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(loaded.message()).c_str());
    return 2;
  }
  const AcceleratorRegistry& registry = AcceleratorRegistry::Default();
  if (absl::Status startup = registry.StartupStatus(); !startup.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(startup.message()).c_str());
    return 2;
  }
  std::printf("%-12s %-12s %8s  %-9s %7s  %s\n", "NAME", "ALIASES", "PRIORITY", "AVAILABLE", "DEVICES",
              "DESCRIPTION");
  for (const AcceleratorSpec& spec : registry.List()) {
    absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(spec.name);
    const std::string aliases = spec.aliases.empty() ? "-" : absl::StrJoin(spec.aliases, ",");
    if (!accelerator.ok()) {
      std::printf("%-12s %-12s %8d  %-9s %7s  %s (cannot be created: %s)\n", spec.name.c_str(), aliases.c_str(),
                  spec.priority, "no", "-", spec.description.c_str(),
                  std::string(accelerator.status().message()).c_str());
      continue;
    }
    const absl::Status available = (*accelerator)->CheckAvailable();
    std::printf("%-12s %-12s %8d  %-9s %7d  %s\n", spec.name.c_str(), aliases.c_str(), spec.priority,
                available.ok() ? "yes" : "no", (*accelerator)->AutoDeviceCount(), spec.description.c_str());
    if (!available.ok()) {
      std::printf("%-12s why not: %s\n", "", std::string(available.message()).c_str());
      continue;
    }
    if (!absl::GetFlag(FLAGS_stats)) continue;
    const std::string devices = absl::GetFlag(FLAGS_devices);
    absl::StatusOr<std::vector<int>> indices = (*accelerator)->ParseDevices(Devices(devices));
    // An accelerator whose devices are not counted (the CPU's are processes) takes "auto" for "every device".
    if (!indices.ok() && devices == "-1") indices = (*accelerator)->ParseDevices("auto");
    if (!indices.ok()) {
      std::printf("%-12s devices: %s\n", "", std::string(indices.status().message()).c_str());
      continue;
    }
    for (const LogicalDevice& device : LogicalDevices(**accelerator, *indices)) {
      absl::StatusOr<DeviceStats> stats = (*accelerator)->GetDeviceStats(device);
      std::printf("%-12s device %s:\n", "", device.ToString().c_str());
      if (!stats.ok()) {
        std::printf("%-14s error: %s\n", "", std::string(stats.status().message()).c_str());
        continue;
      }
      for (const auto& [key, value] : *stats) {
        // Counts and byte sizes print whole (67108864, not 6.71089e+07); other values with 6 significant digits.
        const bool whole = std::abs(value) < 9.0e15 && value == std::floor(value);
        std::printf(whole ? "%-14s %-34s %.0f\n" : "%-14s %-34s %.6g\n", "", key.c_str(), value);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::Main(argc, argv); }
