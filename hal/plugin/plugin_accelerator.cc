#include "hal/plugin/plugin_accelerator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "hal/plugin/plugin_collectives.h"
#include "hal/staged_collectives.h"

namespace kiln {
namespace {

std::optional<c10::DeviceType> DeviceTypeFromC(int value) {
  switch (value) {
    case KILN_DEVICE_TYPE_CPU:
      return c10::DeviceType::CPU;
    case KILN_DEVICE_TYPE_CUDA:
      return c10::DeviceType::CUDA;
    case KILN_DEVICE_TYPE_PRIVATEUSE1:
      return c10::DeviceType::PrivateUse1;
  }
  return std::nullopt;
}

std::optional<Precision> PrecisionFromC(int value) {
  switch (value) {
    case KILN_PRECISION_32_TRUE:
      return Precision::k32True;
    case KILN_PRECISION_64_TRUE:
      return Precision::k64True;
    case KILN_PRECISION_16_MIXED:
      return Precision::k16Mixed;
    case KILN_PRECISION_BF16_MIXED:
      return Precision::kBf16Mixed;
    case KILN_PRECISION_16_TRUE:
      return Precision::k16True;
    case KILN_PRECISION_BF16_TRUE:
      return Precision::kBf16True;
  }
  return std::nullopt;
}

KILN_Precision PrecisionToC(Precision precision) {
  switch (precision) {
    case Precision::k32True:
      return KILN_PRECISION_32_TRUE;
    case Precision::k64True:
      return KILN_PRECISION_64_TRUE;
    case Precision::k16Mixed:
      return KILN_PRECISION_16_MIXED;
    case Precision::kBf16Mixed:
      return KILN_PRECISION_BF16_MIXED;
    case Precision::k16True:
      return KILN_PRECISION_16_TRUE;
    case Precision::kBf16True:
      return KILN_PRECISION_BF16_TRUE;
  }
  return KILN_PRECISION_32_TRUE;  // Unreachable: the switch covers every Precision.
}

std::string LowerCaseName(c10::DeviceType type) { return c10::DeviceTypeName(type, /*lower_case=*/true); }

// What LibTorch accepts as a device's name, and more: a lower-case letter, then lower-case letters, digits and '_'.
bool IsDeviceName(absl::string_view name) {
  if (name.empty() || !absl::ascii_islower(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') return false;
  }
  return true;
}

// Whether a string the plugin returned is longer than Kiln reads (kMaxPluginStringBytes), found without reading more
// than one byte past that limit.
bool TooLong(const char* text) {
  return text != nullptr && ::strnlen(text, kMaxPluginStringBytes + 1) > kMaxPluginStringBytes;
}

// A Plugin_Info error: names the plugin and the bad answer.
absl::Status BadInfo(const PluginLibrary& library, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("accelerator plugin '", library.path(), "': Plugin_Info ", problem,
                                                 " (see kiln_plugin_c_api.h, KILN_Plugin_Info_Args)"));
}

}  // namespace

absl::StatusOr<PluginInfo> ReadPluginInfo(const PluginLibrary& library) {
  KILN_Plugin_Info_Args args{};
  args.struct_size = KILN_Plugin_Info_Args_STRUCT_SIZE;
  if (absl::Status status = library.Call("Plugin_Info", library.api().Plugin_Info, &args); !status.ok()) {
    return status;
  }
  // Every string is checked for length, and the aliases counted, before any is copied.
  const std::pair<const char*, const char*> strings[] = {
      {"name", args.name},
      {"description", args.description},
      {"process_group_backend", args.process_group_backend},
      {"visibility_hint", args.visibility_hint_is_set ? args.visibility_hint : nullptr},
      {"device_name", args.device_name},
  };
  for (const auto& [what, text] : strings) {
    if (TooLong(text)) {
      return BadInfo(library, absl::StrCat("gave a ", what, " longer than ", kMaxPluginStringBytes,
                                           " bytes, the most Kiln reads"));
    }
  }
  if (args.num_aliases > kMaxPluginAliases) {
    return BadInfo(library, absl::StrCat("says it has ", args.num_aliases, " aliases, more than the ",
                                         kMaxPluginAliases, " Kiln reads"));
  }
  PluginInfo info;
  info.path = library.path();
  info.api_version = library.version();
  if (args.name == nullptr || *args.name == '\0') return BadInfo(library, "gave no name");
  // Names are case-insensitive and registered in lower case; the accelerator must answer to its registered name.
  info.name = absl::AsciiStrToLower(args.name);
  if (args.description == nullptr || *args.description == '\0') {
    return BadInfo(library, absl::StrCat("gave no description for '", info.name, "'"));
  }
  info.description = args.description;
  if (args.num_aliases > 0 && args.aliases == nullptr) {
    return BadInfo(library, absl::StrCat("says it has ", args.num_aliases, " aliases but gave none"));
  }
  for (size_t i = 0; i < args.num_aliases; ++i) {
    if (args.aliases[i] == nullptr) return BadInfo(library, absl::StrCat("gave NULL as alias ", i));
    if (TooLong(args.aliases[i])) {
      return BadInfo(library, absl::StrCat("gave alias ", i, " longer than ", kMaxPluginStringBytes,
                                           " bytes, the most Kiln reads"));
    }
    info.aliases.push_back(absl::AsciiStrToLower(args.aliases[i]));
  }
  info.priority = args.priority;

  const int32_t device_type_value = PluginEnumValue(args.device_type);
  const std::optional<c10::DeviceType> device_type = DeviceTypeFromC(device_type_value);
  if (!device_type.has_value()) {
    return BadInfo(library, absl::StrCat("gave device_type ", device_type_value, ", which is not one of this Kiln's (",
                                         KILN_DEVICE_TYPE_CPU, " CPU, ", KILN_DEVICE_TYPE_CUDA, " CUDA, ",
                                         KILN_DEVICE_TYPE_PRIVATEUSE1, " PRIVATEUSE1; 0 means it was not set)"));
  }
  info.device_type = *device_type;
  const int32_t device_numbering = PluginEnumValue(args.device_numbering);
  switch (device_numbering) {
    case KILN_DEVICE_NUMBERING_INDEXED:
      info.devices_are_processes = false;
      break;
    case KILN_DEVICE_NUMBERING_PROCESSES:
      info.devices_are_processes = true;
      break;
    default:
      return BadInfo(library, absl::StrCat("gave device_numbering ", device_numbering, ", which is neither ",
                                           KILN_DEVICE_NUMBERING_INDEXED, " (INDEXED) nor ",
                                           KILN_DEVICE_NUMBERING_PROCESSES, " (PROCESSES; 0 means it was not set)"));
  }
  if (info.device_type == c10::DeviceType::CPU && !info.devices_are_processes) {
    return BadInfo(library,
                   "gave device type CPU with INDEXED devices, but LibTorch's CPU device has no indices; "
                   "use KILN_DEVICE_NUMBERING_PROCESSES for a plugin that computes on the CPU");
  }

  if (args.process_group_backend == nullptr || *args.process_group_backend == '\0') {
    return BadInfo(library, "gave no process_group_backend (\"gloo\" for host memory)");
  }
  info.process_group_backend = args.process_group_backend;
  info.has_collectives = library.has_collectives();
  if (info.has_collectives && info.process_group_backend == "gloo") {
    return BadInfo(library,
                   "names its own collectives (Collectives_*) \"gloo\", which is Kiln's host transport; name them "
                   "after the plugin's collective library (\"acme_ccl\")");
  }
  if (args.num_precisions == 0 || args.precisions == nullptr) {
    return BadInfo(library, "gave no precisions; list at least one, such as KILN_PRECISION_32_TRUE");
  }
  for (size_t i = 0; i < args.num_precisions; ++i) {
    const int32_t precision_value = PluginEnumValue(args.precisions[i]);
    const std::optional<Precision> precision = PrecisionFromC(precision_value);
    if (!precision.has_value()) {
      return BadInfo(library, absl::StrCat("gave precision ", precision_value,
                                           ", which is not a KILN_Precision value this Kiln knows (1 to 6)"));
    }
    if (std::find(info.precisions.begin(), info.precisions.end(), *precision) != info.precisions.end()) {
      return BadInfo(library, absl::StrCat("lists precision ", PrecisionName(*precision), " twice"));
    }
    info.precisions.push_back(*precision);
  }
  if (args.visibility_hint_is_set) {
    if (args.visibility_hint == nullptr) return BadInfo(library, "set visibility_hint_is_set but gave NULL");
    info.visibility_hint = args.visibility_hint;
  }

  if (library.api().minor_version >= 3 && args.collectives_lacking != 0) {
    // Plugin API 1.3: the collectives a plugin's CCL lacks, declared.
    constexpr uint32_t kKnown = KILN_COLLECTIVE_ALL_GATHER | KILN_COLLECTIVE_REDUCE_SCATTER;
    if ((args.collectives_lacking & ~kKnown) != 0 || !info.has_collectives) {
      return BadInfo(library, absl::StrCat("gave collectives_lacking ", args.collectives_lacking, "; it takes "
                                           "KILN_COLLECTIVE_ALL_GATHER and KILN_COLLECTIVE_REDUCE_SCATTER, and only "
                                           "from a plugin with collectives"));
    }
    info.collectives.allgather = (args.collectives_lacking & KILN_COLLECTIVE_ALL_GATHER) == 0;
    info.collectives.reduce_scatter = (args.collectives_lacking & KILN_COLLECTIVE_REDUCE_SCATTER) == 0;
  }
  if (info.device_type == c10::DeviceType::PrivateUse1 && library.api().minor_version >= 2) {
    // Plugin API 1.2: the plugin declares its device and Kiln registers it when it is chosen.
    if (!library.has_device_register()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "accelerator plugin '", library.path(), "' (", info.name, ") reports plugin API ", library.version(),
          " and device type PRIVATEUSE1 but has no Device_Register (NULL in its function table): since 1.2 Kiln "
          "registers a PrivateUse1 plugin's device by calling it when the device is chosen; implement it (with Kiln's "
          "device kit, it calls kiln::device_kit::Register), or build the plugin against kiln_plugin_c_api.h 1.1"));
    }
    if (args.device_name == nullptr || !IsDeviceName(args.device_name)) {
      const std::string given = args.device_name == nullptr ? std::string("gave no device_name")
                                                            : absl::StrCat("gave device_name '", args.device_name, "'");
      return BadInfo(library, absl::StrCat(given, "; a PRIVATEUSE1 plugin of API 1.2 must give the name LibTorch gives "
                                                  "its device: a lower-case letter, then lower-case letters, digits "
                                                  "and '_' (\"acme_npu\")"));
    }
    if (library.privateuse1_registered_at_load()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "accelerator plugin '", library.path(), "' (", info.name, ") reports plugin API ", library.version(),
          " but registered a PrivateUse1 device with LibTorch when it was loaded; since 1.2 a plugin registers its "
          "device in Device_Register alone, which Kiln calls when the device is chosen: remove the registration "
          "from its static initialisers"));
    }
    if (!info.has_collectives && info.process_group_backend == "gloo") {
      return BadInfo(library,
                     "names the collective backend of its PRIVATEUSE1 device \"gloo\", which is Kiln's host transport "
                     "(a process group files its backends by name, and carries CPU values on \"gloo\"); without "
                     "collectives of its own the device trains data-parallel on Kiln's staged collectives (Gloo "
                     "through host copies) under the name process_group_backend gives: name them after the device "
                     "(\"acme_npu_staged\")");
    }
    info.device_name = args.device_name;
  } else if (info.device_type == c10::DeviceType::PrivateUse1 && library.privateuse1_taken_before_load()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "accelerator plugin '", library.path(), "' (", info.name,
        ") computes on PrivateUse1 devices, but this process already had a PrivateUse1 device registered before "
        "the plugin was loaded, and LibTorch has one PrivateUse1 slot per process; use a Kiln program that "
        "links no other PrivateUse1 backend (see the WORKSPACE's kiln_backends), or a build of the plugin for plugin "
        "API 1.2, whose device Kiln registers when it is chosen"));
  }
  return info;
}

absl::StatusOr<PluginAccelerator::Count> PluginAccelerator::CountDevices() const {
  KILN_Devices_Count_Args args{};
  args.struct_size = KILN_Devices_Count_Args_STRUCT_SIZE;
  if (absl::Status status = library_->Call("Devices_Count", library_->api().Devices_Count, &args); !status.ok()) {
    return status;
  }
  if (args.count < 0) {
    return absl::InternalError(absl::StrCat("accelerator plugin '", info_.path, "': Devices_Count reported ",
                                            args.count, " devices; a count is 0 or more"));
  }
  if (!info_.devices_are_processes && args.count > kMaxPluginIndexedDevices) {
    return absl::InternalError(absl::StrCat("accelerator plugin '", info_.path, "': Devices_Count reported ",
                                            args.count, " devices, more than the ", kMaxPluginIndexedDevices,
                                            " of one type that LibTorch can index (c10::DeviceIndex is 8 bits)"));
  }
  if (info_.devices_are_processes && args.count > kMaxDeviceCount) {
    return absl::InternalError(absl::StrCat("accelerator plugin '", info_.path, "': Devices_Count reported ",
                                            args.count, " processes for \"auto\", more than the ", kMaxDeviceCount,
                                            " devices Kiln runs"));
  }
  Count count{.count = args.count};
  if (args.auto_count_is_set && !info_.devices_are_processes) {
    if (args.auto_count < 0 || args.auto_count > args.count) {
      return absl::InternalError(absl::StrCat("accelerator plugin '", info_.path, "': Devices_Count reported ",
                                              "auto_count ", args.auto_count, " with ", args.count,
                                              " devices; it must be between 0 and the count"));
    }
    count.auto_count = args.auto_count;
  }
  return count;
}

absl::StatusOr<std::vector<int>> PluginAccelerator::ParseDevices(const Devices& devices) const {
  absl::StatusOr<DeviceSelection> selection = ParseDevicesSyntax(devices);
  if (!selection.ok()) return selection.status();
  absl::StatusOr<Count> count = CountDevices();
  if (!count.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot use devices=", devices.ToString(), " with '", info_.name,
                                                      "': ", count.status().message()));
  }
  absl::StatusOr<std::vector<int>> parsed;
  if (info_.devices_are_processes) {
    parsed = ParseDeviceCount(devices, count->count, info_.name);
  } else if (selection->kind == DeviceSelection::Kind::kAuto && count->auto_count.has_value()) {
    if (*count->auto_count == 0) {
      return absl::FailedPreconditionError(absl::StrCat("devices=auto asks for the ", info_.name,
                                                        " devices to use by default, but the plugin offers none (",
                                                        count->count, " visible); pass device indices explicitly"));
    }
    std::vector<int> first(*count->auto_count);
    for (int i = 0; i < *count->auto_count; ++i) first[i] = i;
    parsed = std::move(first);
  } else {
    parsed = ParseDeviceIndices(devices, count->count, info_.name, info_.visibility_hint);
  }
  // Chosen, with devices that exist: the device is registered now, before the plan names its devices.
  if (!parsed.ok()) return parsed;
  if (absl::Status registered = RegisterDevice(); !registered.ok()) return registered;
  return parsed;
}

absl::Status PluginAccelerator::RegisterDevice() const {
  if (info_.device_name.empty()) return absl::OkStatus();
  return library_->RegisterDevice(info_.device_name);
}

int PluginAccelerator::AutoDeviceCount() const {
  absl::StatusOr<Count> count = CountDevices();
  if (!count.ok()) return 0;
  return count->auto_count.value_or(count->count);
}

absl::Status PluginAccelerator::CheckAvailable() const {
  KILN_Devices_CheckAvailable_Args args{};
  args.struct_size = KILN_Devices_CheckAvailable_Args_STRUCT_SIZE;
  absl::Status status = library_->Call("Devices_CheckAvailable", library_->api().Devices_CheckAvailable, &args);
  if (!status.ok()) {
    return status.code() == absl::StatusCode::kUnavailable ? status : absl::FailedPreconditionError(status.message());
  }
  if (!info_.device_name.empty()) {
    // Kiln registers the device: available while it can, or once it did.
    const std::optional<absl::Status> registration = library_->device_registration();
    if (!registration.has_value()) return library_->CheckCanRegisterDevice(info_.device_name);
    if (registration->ok() || registration->code() == absl::StatusCode::kUnavailable) return *registration;
    return absl::FailedPreconditionError(registration->message());
  }
  if (info_.device_type != c10::DeviceType::CPU && !c10::impl::hasDeviceGuardImpl(info_.device_type)) {
    const std::string type = LowerCaseName(info_.device_type);
    return absl::FailedPreconditionError(absl::StrCat(
        "accelerator plugin '", info_.path, "' computes on ", type, " devices, but LibTorch in this process has no ",
        type, " device (no device guard is registered for it): the plugin must register its device with the ",
        "LibTorch Kiln runs on when it is loaded (plugin API 1.1 and older; since 1.2, Kiln registers a PrivateUse1 "
        "plugin's device through its Device_Register)"));
  }
  return absl::OkStatus();
}

std::vector<c10::Device> PluginAccelerator::ParallelDevices(const std::vector<int>& indices) const {
  (void)RegisterDevice();  // Named, where it can be, before the devices are printed; SetupDevice reports a failure.
  std::vector<c10::Device> devices;
  devices.reserve(indices.size());
  for (int index : indices) {
    if (info_.devices_are_processes) {
      devices.emplace_back(info_.device_type);
    } else {
      devices.emplace_back(info_.device_type, static_cast<c10::DeviceIndex>(index));
    }
  }
  return devices;
}

absl::StatusOr<int32_t> PluginAccelerator::PluginIndex(const LogicalDevice& logical) const {
  const c10::Device& device = logical.compute;
  if (device.type() != info_.device_type) {
    return absl::InvalidArgumentError(absl::StrCat("accelerator '", info_.name, "' has no device ", logical.ToString(),
                                                   "; its devices are ", LowerCaseName(info_.device_type), " devices"));
  }
  if (info_.devices_are_processes) {
    if (device.has_index() && device.index() != 0) {
      return absl::InvalidArgumentError(absl::StrCat("accelerator '", info_.name, "' has no device ", device.str(),
                                                     "; each of its processes uses ",
                                                     LowerCaseName(info_.device_type)));
    }
    return 0;  // The C API's index for devices that are processes.
  }
  // The plugin numbers its devices itself: its index is the logical one, whatever c10 device they compute on.
  if (logical.index < 0 || (device.has_index() && device.index() != logical.index)) {
    return absl::InvalidArgumentError(absl::StrCat("accelerator '", info_.name, "' has no device ", logical.ToString(),
                                                   "; use the devices ParallelDevices gives"));
  }
  return static_cast<int32_t>(logical.index);
}

absl::Status PluginAccelerator::SetupDevice(const LogicalDevice& device) {
  absl::StatusOr<int32_t> index = PluginIndex(device);
  if (!index.ok()) return index.status();
  if (absl::Status registered = RegisterDevice(); !registered.ok()) return registered;
  KILN_Device_Setup_Args args{};
  args.struct_size = KILN_Device_Setup_Args_STRUCT_SIZE;
  args.device_index = *index;
  return library_->Call("Device_Setup", library_->api().Device_Setup, &args);
}

absl::Status PluginAccelerator::TeardownDevice(const LogicalDevice& device) {
  absl::StatusOr<int32_t> index = PluginIndex(device);
  if (!index.ok()) return index.status();
  KILN_Device_Teardown_Args args{};
  args.struct_size = KILN_Device_Teardown_Args_STRUCT_SIZE;
  args.device_index = *index;
  return library_->Call("Device_Teardown", library_->api().Device_Teardown, &args);
}

absl::StatusOr<DeviceStats> PluginAccelerator::GetDeviceStats(const LogicalDevice& device) const {
  absl::StatusOr<int32_t> index = PluginIndex(device);
  if (!index.ok()) return index.status();
  // The plugin copies into Kiln's buffer and says how many it has; a larger buffer is offered when it has more.
  // Statistics may come and go between calls, hence a few rounds.
  size_t capacity = 32;
  for (int round = 0; round < 4; ++round) {
    std::vector<KILN_Device_Stat> buffer(capacity, KILN_Device_Stat{nullptr, 0.0});
    KILN_Device_Stats_Args args{};
    args.struct_size = KILN_Device_Stats_Args_STRUCT_SIZE;
    args.device_index = *index;
    args.stats = buffer.data();
    args.stats_capacity = buffer.size();
    if (absl::Status status = library_->Call("Device_Stats", library_->api().Device_Stats, &args); !status.ok()) {
      return status;
    }
    if (args.num_stats > kMaxPluginDeviceStats) {
      return absl::InternalError(absl::StrCat("accelerator plugin '", info_.path, "': Device_Stats reported ",
                                              args.num_stats, " statistics, more than the ", kMaxPluginDeviceStats,
                                              " Kiln reads; a plugin reports a few dozen"));
    }
    if (args.num_stats > capacity) {
      capacity = args.num_stats;
      continue;
    }
    DeviceStats stats;
    for (size_t i = 0; i < args.num_stats; ++i) {
      if (buffer[i].name == nullptr) {
        return absl::InternalError(absl::StrCat("accelerator plugin '", info_.path, "': Device_Stats reported ",
                                                args.num_stats, " statistics but left the name of number ", i,
                                                " unset"));
      }
      const size_t length = ::strnlen(buffer[i].name, kMaxPluginStringBytes + 1);
      if (length > kMaxPluginStringBytes) {
        return absl::InternalError(absl::StrCat("accelerator plugin '", info_.path, "': Device_Stats named statistic ",
                                                i, " with more than ", kMaxPluginStringBytes,
                                                " bytes, the most Kiln reads; a statistic's name is a few words"));
      }
      // The header asks for finite values; one that is not could not be read, and is left out like one.
      if (std::isfinite(buffer[i].value)) stats[std::string(buffer[i].name, length)] = buffer[i].value;
    }
    return stats;
  }
  return absl::InternalError(absl::StrCat("accelerator plugin '", info_.path,
                                          "': Device_Stats asked for a larger buffer four times in a row"));
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> PluginAccelerator::MakeCollectiveBackend(
    const LogicalDevice& device, const CollectiveOptions& options) {
  if (!info_.has_collectives && info_.device_name.empty()) return Accelerator::MakeCollectiveBackend(device, options);
  absl::StatusOr<int32_t> index = PluginIndex(device);
  if (!index.ok()) return index.status();
  if (absl::Status registered = RegisterDevice(); !registered.ok()) return registered;
  if (!info_.has_collectives) {
    // A device Kiln registered, whose plugin offers no CCL (yet): Gloo on host copies of its tensors.
    return StagedCollectives::Create(options, info_.process_group_backend, info_.device_type);
  }
  CollectiveOptions plugin_options = options;
  plugin_options.device_index = *index;  // The plugin's own numbering, as in Device_Setup.
  return PluginCollectives::Create(library_, info_.process_group_backend, info_.device_type, plugin_options);
}

std::optional<PrecisionSubstitute> PluginAccelerator::SubstitutePrecision(Precision requested) const {
  KILN_Precision_Substitute_Args args{};
  args.struct_size = KILN_Precision_Substitute_Args_STRUCT_SIZE;
  args.requested = PrecisionToC(requested);
  if (!library_->Call("Precision_Substitute", library_->api().Precision_Substitute, &args).ok()) {
    return std::nullopt;
  }
  if (!args.substitute_is_set) return std::nullopt;
  const std::optional<Precision> substitute = PrecisionFromC(PluginEnumValue(args.substitute));
  if (!substitute.has_value() ||
      std::find(info_.precisions.begin(), info_.precisions.end(), *substitute) == info_.precisions.end()) {
    return std::nullopt;
  }
  return PrecisionSubstitute{.precision = *substitute,
                             .warning = args.warning != nullptr
                                            ? std::string(args.warning, ::strnlen(args.warning, kMaxPluginStringBytes))
                                            : std::string()};
}

}  // namespace kiln
