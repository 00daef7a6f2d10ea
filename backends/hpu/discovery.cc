#include "backends/hpu/discovery.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace kiln::hpu {
namespace {

std::string UnderRoot(const std::string& root, absl::string_view relative) {
  absl::string_view base = root;
  while (absl::ConsumeSuffix(&base, "/")) {
  }
  return absl::StrCat(base, "/", relative);
}

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool Exists(const std::string& path) {
  struct stat info;
  return lstat(path.c_str(), &info) == 0;
}

// Reads a small sysfs attribute, without its trailing newline. The error names the path and the system's reason.
absl::StatusOr<std::string> ReadAttribute(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  char buffer[4096];
  std::string contents;
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", std::strerror(error)));
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
    if (contents.size() > 65536) break;  // Attributes are short; never read a huge file whole.
  }
  close(fd);
  return std::string(absl::StripAsciiWhitespace(contents));
}

std::optional<double> ReadNumber(const std::string& path) {
  absl::StatusOr<std::string> text = ReadAttribute(path);
  double value = 0;
  if (!text.ok() || !absl::SimpleAtod(*text, &value)) return std::nullopt;
  return value;
}

// Entries of `dir` named <prefix><digits>, by number. A missing folder has none; other failures are errors.
absl::StatusOr<std::vector<std::pair<int, std::string>>> ListNumbered(const std::string& dir,
                                                                      absl::string_view prefix) {
  std::vector<std::pair<int, std::string>> entries;
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return entries;
    return absl::UnavailableError(absl::StrCat("cannot list ", dir, ": ", std::strerror(errno)));
  }
  while (const dirent* entry = readdir(handle)) {
    absl::string_view name = entry->d_name;
    if (!absl::ConsumePrefix(&name, prefix) || name.empty()) continue;
    if (!std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); })) continue;
    int number = 0;
    if (!absl::SimpleAtoi(name, &number)) continue;
    entries.emplace_back(number, entry->d_name);
  }
  closedir(handle);
  std::sort(entries.begin(), entries.end());
  return entries;
}

std::optional<std::string> RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return std::nullopt;
  return std::string(resolved);
}

// Runs every check on `device`; sets `counted`, or `reason` for the first that fails.
void Check(HabanaDevice& device) {
  if (!IsDirectory(device.attributes_dir)) {
    device.reason = absl::StrCat("no sysfs entry ", device.attributes_dir,
                                 ": the node has no device behind it (a stale node, or the habanalabs driver is not "
                                 "loaded)");
    return;
  }
  absl::StatusOr<std::string> vendor = ReadAttribute(absl::StrCat(device.pci_dir, "/vendor"));
  if (!vendor.ok()) {
    device.reason = std::string(vendor.status().message());
    return;
  }
  if (absl::AsciiStrToLower(*vendor) != kHabanaVendorId) {
    device.reason = absl::StrCat("PCI vendor ", *vendor, " (", device.pci_dir, "/vendor) is not Habana Labs (",
                                 kHabanaVendorId, ")");
    return;
  }
  absl::StatusOr<std::string> type = ReadAttribute(absl::StrCat(device.attributes_dir, "/device_type"));
  if (!type.ok()) {
    device.reason = std::string(type.status().message());
    return;
  }
  device.device_type = *type;
  if (!absl::StartsWith(absl::AsciiStrToUpper(*type), "GAUDI")) {
    device.reason = absl::StrCat("device type '", *type, "' is not a Gaudi training accelerator");
    return;
  }
  const std::string status_path = absl::StrCat(device.attributes_dir, "/status");
  if (Exists(status_path)) {
    absl::StatusOr<std::string> status = ReadAttribute(status_path);
    if (!status.ok()) {
      device.reason = std::string(status.status().message());
      return;
    }
    if (absl::AsciiStrToLower(*status) != "operational") {
      device.reason = absl::StrCat("status is '", *status, "', not 'operational' (", status_path, ")");
      return;
    }
  }
  // access() checks the permission without opening the node, which would take the device from other processes.
  if (access(device.node.c_str(), R_OK | W_OK) != 0) {
    const int error = errno;
    device.reason = absl::StrCat("cannot open ", device.node, " for reading and writing: ", std::strerror(error));
    if (error == EACCES || error == EPERM) {
      absl::StrAppend(&device.reason,
                      "; give this user access to it (usually membership of the group that owns it, "
                      "see `ls -l ",
                      device.node, "`)");
    }
    return;
  }
  device.counted = true;
}

}  // namespace

std::vector<HabanaDevice> Discovery::counted() const {
  std::vector<HabanaDevice> result;
  for (const HabanaDevice& device : devices) {
    if (device.counted) result.push_back(device);
  }
  return result;
}

std::string Discovery::Summary() const {
  std::vector<std::string> found;
  std::vector<std::string> not_counted;
  for (const HabanaDevice& device : devices) {
    if (device.counted) {
      found.push_back(absl::StrCat(device.node, " (", device.device_type, ")"));
    } else {
      not_counted.push_back(absl::StrCat(device.node, ": ", device.reason));
    }
  }
  std::string summary;
  if (devices.empty()) {
    summary = absl::StrCat("no Habana Gaudi device: no accel<N> node in ", UnderRoot(root, "dev/accel"),
                           " and no hl<N> node in ", UnderRoot(root, "dev"),
                           " (is the habanalabs driver loaded, on a host with Gaudi accelerators?)");
  } else if (found.empty()) {
    summary = absl::StrCat("no usable Habana Gaudi device among ", devices.size(),
                           " device node(s): ", absl::StrJoin(not_counted, "; "));
  } else {
    summary = absl::StrCat(found.size(), " Habana Gaudi device(s): ", absl::StrJoin(found, ", "));
    if (!not_counted.empty()) absl::StrAppend(&summary, "; not counted: ", absl::StrJoin(not_counted, "; "));
  }
  if (!problems.empty()) absl::StrAppend(&summary, "; ", absl::StrJoin(problems, "; "));
  return summary;
}

Discovery DiscoverDevices(const std::string& root) {
  Discovery discovery;
  discovery.root = root;
  std::set<std::string> seen_pci_devices;
  const auto add = [&](std::string node, std::string attributes_dir, std::string pci_dir) {
    HabanaDevice device{std::move(node), std::move(attributes_dir), std::move(pci_dir)};
    // A device reachable both ways (accel and hl nodes for one PCI device) is one device.
    if (std::optional<std::string> real = RealPath(device.pci_dir); real && !seen_pci_devices.insert(*real).second) {
      return;
    }
    Check(device);
    discovery.devices.push_back(std::move(device));
  };

  const std::string accel_dir = UnderRoot(root, "dev/accel");
  absl::StatusOr<std::vector<std::pair<int, std::string>>> accel = ListNumbered(accel_dir, "accel");
  if (!accel.ok()) discovery.problems.emplace_back(accel.status().message());
  for (const auto& [number, name] : accel.value_or(std::vector<std::pair<int, std::string>>{})) {
    const std::string sysfs = UnderRoot(root, absl::StrCat("sys/class/accel/", name, "/device"));
    add(absl::StrCat(accel_dir, "/", name), sysfs, sysfs);
  }

  const std::string dev_dir = UnderRoot(root, "dev");
  absl::StatusOr<std::vector<std::pair<int, std::string>>> hl = ListNumbered(dev_dir, "hl");
  if (!hl.ok()) discovery.problems.emplace_back(hl.status().message());
  for (const auto& [number, name] : hl.value_or(std::vector<std::pair<int, std::string>>{})) {
    const std::string sysfs = UnderRoot(root, absl::StrCat("sys/class/habanalabs/", name));
    add(absl::StrCat(dev_dir, "/", name), sysfs, absl::StrCat(sysfs, "/device"));
  }
  return discovery;
}

DeviceStats ReadDeviceStats(const HabanaDevice& device) {
  DeviceStats stats;
  if (absl::StatusOr<std::string> status = ReadAttribute(absl::StrCat(device.attributes_dir, "/status")); status.ok()) {
    stats["device_operational"] = absl::AsciiStrToLower(*status) == "operational" ? 1 : 0;
  }
  const std::pair<const char*, const char*> plain[] = {
      {"clk_cur_freq_mhz", "clock_current_mhz"},
      {"clk_max_freq_mhz", "clock_max_mhz"},
      {"hard_reset_cnt", "hard_reset_count"},
      {"soft_reset_cnt", "soft_reset_count"},
  };
  for (const auto& [file, key] : plain) {
    if (std::optional<double> value = ReadNumber(absl::StrCat(device.attributes_dir, "/", file))) stats[key] = *value;
  }
  if (std::optional<double> milliwatts = ReadNumber(absl::StrCat(device.attributes_dir, "/max_power"))) {
    stats["power_limit_watts"] = *milliwatts / 1000.0;
  }
  // The driver's hardware monitor (Linux's hwmon ABI): millidegrees Celsius and microwatts.
  const std::string hwmon_dir = absl::StrCat(device.pci_dir, "/hwmon");
  absl::StatusOr<std::vector<std::pair<int, std::string>>> hwmons = ListNumbered(hwmon_dir, "hwmon");
  if (hwmons.ok() && !hwmons->empty()) {
    const std::string hwmon = absl::StrCat(hwmon_dir, "/", hwmons->front().second);
    if (std::optional<double> millidegrees = ReadNumber(absl::StrCat(hwmon, "/temp1_input"))) {
      stats["temperature_celsius"] = *millidegrees / 1000.0;
    }
    if (std::optional<double> microwatts = ReadNumber(absl::StrCat(hwmon, "/power1_input"))) {
      stats["power_watts"] = *microwatts / 1e6;
    }
  }
  return stats;
}

}  // namespace kiln::hpu
