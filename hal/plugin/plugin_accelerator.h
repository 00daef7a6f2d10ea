// PluginAccelerator: an accelerator plugin (kiln_plugin_c_api.h) as an ordinary HAL accelerator.
//
// Everything static about the plugin (name, device type, numbering, precisions, ...) is read once, by
// ReadPluginInfo, and validated; the accelerator then calls the plugin only for what changes (device counts,
// availability, set-up, statistics, substitutes). Kiln, not the plugin, parses the user's `devices` value, with the
// HAL's Lightning rules (devices.h) over the plugin's device count: ParseDeviceIndices for indexed devices,
// ParseDeviceCount for devices that are processes.
//
// A PrivateUse1 plugin of API 1.2 or later has its device registered with LibTorch by Kiln (PluginLibrary's
// RegisterDevice, which calls the plugin's Device_Register) when the accelerator is chosen: ParseDevices,
// ParallelDevices, SetupDevice and MakeCollectiveBackend register it first; counting, CheckAvailable, statistics and
// the declarations never do.
//
// Thread-safety: as the Accelerator contract requires; the plugin's own rules are in the C header.
#ifndef KILN_HAL_PLUGIN_PLUGIN_ACCELERATOR_H_
#define KILN_HAL_PLUGIN_PLUGIN_ACCELERATOR_H_

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "c10/core/DeviceType.h"
#include "hal/accelerator.h"
#include "hal/plugin/plugin_library.h"

namespace kiln {

// The most statistics Kiln takes from one Device_Stats call. A plugin has a few dozen; a larger count is a bug in it,
// and honouring it would allocate in proportion (the plugin_tables fuzzer's plugin reported 10^12 of them: the
// buffer's allocation aborted the process).
inline constexpr size_t kMaxPluginDeviceStats = 4096;

// The longest string Kiln takes from a plugin's tables (a name, an alias, a description, a hint, a statistic's name),
// and the most aliases: every string is copied, so without them a table of a few pointers could cost any amount (4096
// aliases or statistic names, each pointing into one 64 KiB string, were 256 MiB of copies). A longer string, or more
// aliases, is an error naming the plugin; a longer Precision_Substitute warning is cut.
inline constexpr size_t kMaxPluginStringBytes = 4096;
inline constexpr size_t kMaxPluginAliases = 64;

// The most devices a plugin with indexed devices may count: LibTorch indexes a device type's devices with
// c10::DeviceIndex, an int8_t, so device 128 would wrap to -128 (a fuzzer's plugin counting 300 devices made
// ParallelDevices throw for device 200), and honouring a count of millions allocated in proportion.
inline constexpr int kMaxPluginIndexedDevices = std::numeric_limits<c10::DeviceIndex>::max() + 1;

// What a plugin's Plugin_Info said, copied into Kiln's types.
struct PluginInfo {
  std::string path;         // The library's path, as given to the loader.
  std::string api_version;  // The plugin API version it was built against, "1.0".
  std::string name;         // In lower case, as the registry registers it (names are case-insensitive).
  std::string description;
  std::vector<std::string> aliases;  // In lower case too.
  int priority = 0;
  c10::DeviceType device_type = c10::DeviceType::CPU;
  bool devices_are_processes = false;  // KILN_DEVICE_NUMBERING_PROCESSES; otherwise indexed.
  std::string process_group_backend;
  // The plugin brings its own collectives (plugin API 1.1): process_group_backend names them, and
  // MakeCollectiveBackend makes a PluginCollectives. Otherwise data-parallel training uses Kiln's default.
  bool has_collectives = false;
  std::vector<Precision> precisions;
  std::string visibility_hint;  // Empty when the plugin gave none.
  // Plugin API 1.2, a PrivateUse1 device: the name LibTorch gives it (Plugin_Info's device_name), which Kiln registers
  // through the plugin's Device_Register when the accelerator is chosen. Empty for other device types, and for a
  // PrivateUse1 plugin of API 1.1 or older (it registered its device itself when it was loaded).
  std::string device_name;
  // Plugin API 1.3: the collectives its Collectives_* lack (Plugin_Info's collectives_lacking); all there otherwise.
  CollectiveSupport collectives;
};

// Calls Plugin_Info and checks every answer: strings present, a known device type and numbering (indexed devices
// need a type with device indices, so not CPU), a process_group_backend other than "gloo" when the plugin brings
// its own collectives, at least one precision and only known ones. A PrivateUse1 plugin of API 1.2 or later must give
// a device_name LibTorch accepts and set Device_Register, and must not have registered a device when it was loaded
// (InvalidArgument otherwise); one of 1.1 or older is refused (FailedPrecondition) when another PrivateUse1 device was
// registered before it was loaded. Errors name the plugin's path, the bad value and what the header expects. Name
// rules are the registry's (it checks them); the name and aliases are lower-cased as the registry lower-cases them, so
// that the accelerator's name() is its registered name.
absl::StatusOr<PluginInfo> ReadPluginInfo(const PluginLibrary& library);

class PluginAccelerator final : public Accelerator {
 public:
  PluginAccelerator(std::shared_ptr<const PluginLibrary> library, PluginInfo info)
      : library_(std::move(library)), info_(std::move(info)) {}

  const PluginInfo& info() const { return info_; }

  std::string name() const override { return info_.name; }
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const override;
  // The plugin's count for "auto" (its auto_count when it sets one); 0 when Devices_Count fails or answers out of
  // the header's bounds (a negative count, more than kMaxPluginIndexedDevices indexed devices or kMaxDeviceCount
  // processes, an auto_count outside [0, count]).
  int AutoDeviceCount() const override;
  // The plugin's Devices_CheckAvailable, then whether the plugin's device can be used in this process: for a
  // PrivateUse1 plugin of API 1.2, that its registration succeeded, or, before it was tried, that it can still be
  // registered (PluginLibrary::CheckCanRegisterDevice: unavailable while another device holds PrivateUse1, saying
  // which); for another device type other than CPU, that LibTorch has that device (a device guard registered for it).
  // Registers nothing.
  absl::Status CheckAvailable() const override;
  // Indexed: <type>:<index> for each index. Processes: the unindexed device type, once per process. Registers the
  // device first where Kiln does (see above), so that the devices print under its name; SetupDevice reports a
  // failure.
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override;
  absl::Status SetupDevice(const LogicalDevice& device) override;
  absl::Status TeardownDevice(const LogicalDevice& device) override;
  // The plugin's Device_Stats, copied through a buffer that grows when the plugin has more. More than
  // kMaxPluginDeviceStats statistics, a NULL name, or a plugin that keeps asking for more is Internal, naming the
  // plugin.
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice& device) const override;
  std::string ProcessGroupBackend() const override { return info_.process_group_backend; }
  CollectiveSupport SupportedCollectives() const override { return info_.collectives; }
  // With collectives: a PluginCollectives over the plugin's communicator, on the plugin's index for `device`.
  // Without, for a PrivateUse1 device Kiln registered: StagedCollectives (Gloo on host copies of the tensors), named
  // process_group_backend. Otherwise the Accelerator default (Gloo for a plugin that computes on the CPU).
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(const LogicalDevice& device,
                                                                          const CollectiveOptions& options) override;
  std::vector<Precision> SupportedPrecisions() const override { return info_.precisions; }
  // The plugin's Precision_Substitute; none when it errs or offers something it did not declare.
  std::optional<PrecisionSubstitute> SubstitutePrecision(Precision requested) const override;

 private:
  struct Count {
    int count = 0;
    std::optional<int> auto_count;
  };
  absl::StatusOr<Count> CountDevices() const;
  // Registers the plugin's device (PluginLibrary::RegisterDevice) when Kiln registers it (info_.device_name is set);
  // OK otherwise.
  absl::Status RegisterDevice() const;
  // The plugin's index for `device`: InvalidArgument when the device is not one of this plugin's.
  absl::StatusOr<int32_t> PluginIndex(const LogicalDevice& device) const;

  const std::shared_ptr<const PluginLibrary> library_;  // Keeps the library's record alive; it is never unloaded.
  const PluginInfo info_;
};

}  // namespace kiln

#endif  // KILN_HAL_PLUGIN_PLUGIN_ACCELERATOR_H_
