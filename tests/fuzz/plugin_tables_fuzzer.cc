// Fuzz target: everything Kiln reads from an accelerator plugin (hal/plugin): the checks of its function table, then
// Plugin_Info's answers and every later answer, through a real shared library opened by the real loader.
//
// Input: the first byte chooses the mode.
//   't'    table: a byte (int8_t), the minimum minor version the Kiln under test needs; then the bytes of a
//          KILN_Plugin_Api from its struct_size on (zeros past the input's end). The table lies in a heap buffer of
//          exactly the size it claims (struct_size, clamped to [sizeof(size_t), sizeof(KILN_Plugin_Api) + 64]), so
//          that AddressSanitizer reports any read beyond what the "plugin" said it has, and goes through
//          internal::CheckPluginApi. Its function pointers are garbage, which Kiln may only compare with NULL.
//   other  plugin: the next sizeof(KILN_FUZZ_Script) bytes are the script of the scripted plugin (scripted_plugin.h:
//          every answer that fake gives); then a byte choosing the precision asked of Precision_Substitute; then the
//          user's `devices` value: 'i' an int (4 bytes), 'l' up to 8 ints, 's' the rest as a string, anything else
//          "auto". The fake (libscripted_plugin.so) is opened and initialised once, in LLVMFuzzerInitialize, with a
//          script whose Plugin_Initialize succeeds, so that no input's answer poisons the loader's cache for the
//          next ones. Each input sets its script, opens the library again (the loader's cached record), reads
//          Plugin_Info with ReadPluginInfo and, when that succeeds, uses the plugin as a PluginAccelerator
//          (ParseDevices, AutoDeviceCount, CheckAvailable, ParallelDevices, SetupDevice and TeardownDevice on a
//          parsed device, GetDeviceStats, SubstitutePrecision) and registers it in a fresh registry.
//
// What must hold, each derived here from the table or the script and the rules of kiln_plugin_c_api.h, never from
// the loader's code:
//   - a table is accepted exactly when struct_size covers the whole table of the minor version it reports (at most
//     the header's) and of the minimum, the major version is Kiln's, the minor version is at least the minimum, no
//     1.0 function is NULL, and a 1.1 table's eight collectives are all set or all NULL; a refusal is
//     InvalidArgument naming the path (and the missing function, when that is the only fault);
//   - ReadPluginInfo succeeds exactly when the answers are valid (strings present, every alias present, a known
//     device type and numbering but not CPU with indexed devices, at least one precision, all known, none twice, a
//     visibility hint when one is said to be set), and then holds exactly the plugin's answers;
//   - a plugin's error reaches the caller with the plugin's code when it is one of the header's (1 to 16), Unknown
//     otherwise, and with its message up to the first NUL within message_size; every error the plugin causes names
//     its path;
//   - ParseDevices gives indices within the plugin's count and none twice (indexed devices) or 0..n-1 (devices that
//     are processes), and "auto" gives AutoDeviceCount() of them (for indexed devices, an error when that is 0);
//     AutoDeviceCount is the plugin's auto_count or count when they are valid (for indexed devices, no more than
//     c10::DeviceIndex can number; for processes, no more than kMaxDeviceCount), 0 otherwise;
//   - ParallelDevices gives one device per index, of the plugin's type, with exactly that index (indexed) or none
//     (processes); SetupDevice and TeardownDevice reach the plugin with that index (0 for processes), and never for
//     a device of another type;
//   - GetDeviceStats returns only statistics the plugin reported, with their values, all finite; a small report
//     that does not change between calls comes back whole (less the values that are not finite) when every name is
//     present, and is an error naming the path otherwise;
//   - SubstitutePrecision offers the plugin's substitute exactly when it is set, known and one the plugin declared;
//   - registration succeeds exactly when the name and every alias follow the registry's rules, and the registered
//     accelerator answers to its lower-case name;
//   - no crash, exception, leak or undefined behaviour (the sanitizers).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/core/Device.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "hal/devices.h"
#include "hal/plugin/kiln_plugin_c_api.h"
#include "hal/plugin/plugin_accelerator.h"
#include "hal/plugin/plugin_library.h"
#include "hal/plugin/plugin_loader.h"
#include "hal/precision.h"
#include "hal/registry.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/scripted_plugin.h"

namespace kiln {
namespace {

using fuzzing::FuzzInput;

std::string Quoted(absl::string_view path) { return absl::StrCat("'", path, "'"); }

// ---------------------------------------------------------------------------------------------------------------
// The function table.
// ---------------------------------------------------------------------------------------------------------------

constexpr char kTablePath[] = "/fuzz/plugin_tables/libtable.so";

struct Function {
  const char* name;
  size_t offset;
};

// The functions of version 1.0, in the table's order.
constexpr Function kFunctions[] = {
    {"Error_Destroy", offsetof(KILN_Plugin_Api, Error_Destroy)},
    {"Error_Message", offsetof(KILN_Plugin_Api, Error_Message)},
    {"Error_GetCode", offsetof(KILN_Plugin_Api, Error_GetCode)},
    {"Plugin_Initialize", offsetof(KILN_Plugin_Api, Plugin_Initialize)},
    {"Plugin_Info", offsetof(KILN_Plugin_Api, Plugin_Info)},
    {"Devices_Count", offsetof(KILN_Plugin_Api, Devices_Count)},
    {"Devices_CheckAvailable", offsetof(KILN_Plugin_Api, Devices_CheckAvailable)},
    {"Device_Setup", offsetof(KILN_Plugin_Api, Device_Setup)},
    {"Device_Teardown", offsetof(KILN_Plugin_Api, Device_Teardown)},
    {"Device_Stats", offsetof(KILN_Plugin_Api, Device_Stats)},
    {"Precision_Substitute", offsetof(KILN_Plugin_Api, Precision_Substitute)},
};

// The functions of version 1.1: optional, all or nothing.
constexpr Function kCollectives[] = {
    {"Collectives_GetUniqueId", offsetof(KILN_Plugin_Api, Collectives_GetUniqueId)},
    {"Collectives_CommInit", offsetof(KILN_Plugin_Api, Collectives_CommInit)},
    {"Collectives_CommDestroy", offsetof(KILN_Plugin_Api, Collectives_CommDestroy)},
    {"Collectives_AllReduce", offsetof(KILN_Plugin_Api, Collectives_AllReduce)},
    {"Collectives_Broadcast", offsetof(KILN_Plugin_Api, Collectives_Broadcast)},
    {"Collectives_AllGather", offsetof(KILN_Plugin_Api, Collectives_AllGather)},
    {"Collectives_ReduceScatter", offsetof(KILN_Plugin_Api, Collectives_ReduceScatter)},
    {"Collectives_Barrier", offsetof(KILN_Plugin_Api, Collectives_Barrier)},
};

// The table's size at each minor version, from the header: 1.0 ends with Precision_Substitute, 1.1 with
// Collectives_Barrier, 1.2 with Device_Register.
size_t TableSizeAtMinor(int minor) {
  if (minor <= 0) return KILN_STRUCT_SIZE(KILN_Plugin_Api, Precision_Substitute);
  if (minor == 1) return KILN_STRUCT_SIZE(KILN_Plugin_Api, Collectives_Barrier);
  return KILN_STRUCT_SIZE(KILN_Plugin_Api, Device_Register);
}

template <typename T>
T Field(const uint8_t* bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes + offset, sizeof(value));
  return value;
}

void FuzzTable(FuzzInput& input) {
  const int minimum_minor = static_cast<int8_t>(input.Byte());
  // The table as the plugin wrote it (zeros past the input), of which the buffer Kiln reads holds the claimed size.
  uint8_t bytes[sizeof(KILN_Plugin_Api) + 64] = {};
  const std::string rest = input.Rest();
  std::memcpy(bytes, rest.data(), std::min(rest.size(), sizeof(bytes)));
  const size_t claimed = Field<size_t>(bytes, offsetof(KILN_Plugin_Api, struct_size));
  const size_t size = std::clamp(claimed, sizeof(size_t), sizeof(bytes));
  const std::unique_ptr<uint8_t[]> buffer(new uint8_t[size]);
  std::memcpy(buffer.get(), bytes, size);
  const absl::Status status =
      internal::CheckPluginApi(kTablePath, *reinterpret_cast<const KILN_Plugin_Api*>(buffer.get()), minimum_minor);

  // The header's verdict.
  const int32_t major = Field<int32_t>(bytes, offsetof(KILN_Plugin_Api, major_version));
  const int32_t minor = Field<int32_t>(bytes, offsetof(KILN_Plugin_Api, minor_version));
  const char* missing = nullptr;
  for (const Function& function : kFunctions) {
    if (Field<uintptr_t>(bytes, function.offset) == 0) {
      missing = function.name;
      break;
    }
  }
  const bool has_versions = claimed >= offsetof(KILN_Plugin_Api, minor_version) + sizeof(int32_t);
  const bool versions_fit = has_versions && major == KILN_PLUGIN_API_MAJOR && minor >= minimum_minor;
  // The table of the version the plugin reports (at most this header's) and of the version Kiln needs.
  const bool whole =
      claimed >= std::max(TableSizeAtMinor(std::min(minor, KILN_PLUGIN_API_MINOR)), TableSizeAtMinor(minimum_minor));
  // A 1.1 table sets its collectives all or none.
  const char* missing_collective = nullptr;
  int collectives_set = 0;
  if (minor >= 1) {
    for (const Function& function : kCollectives) {
      if (Field<uintptr_t>(bytes, function.offset) != 0) {
        ++collectives_set;
      } else if (missing_collective == nullptr) {
        missing_collective = function.name;
      }
    }
  }
  const bool partial = collectives_set > 0 && missing_collective != nullptr;
  const bool expected_ok = versions_fit && whole && missing == nullptr && !partial;
  const auto shown = [&] {
    return absl::StrCat("struct_size ", claimed, ", version ", major, ".", minor, ", minimum minor ", minimum_minor,
                        ", first NULL function ", missing != nullptr ? missing : "none", ", collectives set ",
                        collectives_set, ": ", status.ToString());
  };
  KILN_FUZZ_CHECK(status.ok() == expected_ok, shown());
  if (status.ok()) return;
  KILN_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument, shown());
  KILN_FUZZ_CHECK(absl::StrContains(status.message(), Quoted(kTablePath)), shown());
  if (versions_fit && whole && missing != nullptr)
    KILN_FUZZ_CHECK(absl::StrContains(status.message(), missing), shown());
  if (versions_fit && whole && missing == nullptr) {
    KILN_FUZZ_CHECK(absl::StrContains(status.message(), missing_collective), shown());
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The scripted plugin: what its answers are, read from the script as the header defines them.
// ---------------------------------------------------------------------------------------------------------------

struct ScriptedPlugin {
  std::string path;
  KILN_FUZZ_SetScript_Fn* set_script = nullptr;
  KILN_FUZZ_GetCalls_Fn* get_calls = nullptr;
  std::shared_ptr<const PluginLibrary> library;  // From the first open, which initialised it.
};

ScriptedPlugin& Scripted() {
  static auto* const plugin = new ScriptedPlugin;
  return *plugin;
}

KILN_FUZZ_Calls Calls() {
  KILN_FUZZ_Calls calls;
  Scripted().get_calls(&calls);
  return calls;
}

std::optional<std::string> Text(const KILN_FUZZ_Text& text) {
  if (text.is_null & 1) return std::nullopt;
  return std::string(text.text, strnlen(text.text, KILN_FUZZ_TEXT_SIZE));
}

bool Present(const std::optional<std::string>& text) { return text.has_value() && !text->empty(); }

// A function's scripted error: what the caller must see of it.
struct PluginError {
  int32_t code;
  std::string message;  // Up to the first NUL within message_size.
};

std::optional<PluginError> ErrorOf(const KILN_FUZZ_Error& error) {
  if (!(error.fails & 1)) return std::nullopt;
  const size_t size = error.message_size % (KILN_FUZZ_MESSAGE_SIZE + 1);
  return PluginError{error.code, std::string(error.message, strnlen(error.message, size))};
}

// KILN_Error_Code has absl::StatusCode's numbering; any other number is Unknown.
absl::StatusCode StatusCodeOf(int32_t code) {
  return code >= KILN_ERROR_CODE_CANCELLED && code <= KILN_ERROR_CODE_UNAUTHENTICATED
             ? static_cast<absl::StatusCode>(code)
             : absl::StatusCode::kUnknown;
}

// `status` is the plugin's `error` from `function`, with `code`, naming the plugin's path.
void CheckPluginError(const absl::Status& status, const PluginError& error, absl::string_view function,
                      absl::StatusCode code) {
  const auto shown = [&] {
    return absl::StrCat(function, " failed with code ", error.code, " and '", error.message, "': ", status.ToString());
  };
  KILN_FUZZ_CHECK(!status.ok(), shown());
  KILN_FUZZ_CHECK(status.code() == code, shown());
  KILN_FUZZ_CHECK(absl::StrContains(status.message(), Quoted(Scripted().path)), shown());
  KILN_FUZZ_CHECK(absl::StrContains(status.message(), function), shown());
  KILN_FUZZ_CHECK(absl::StrContains(status.message(), error.message), shown());
}

// The plugin's error when the script has one for `function`, OK otherwise.
void CheckPluginAnswer(const absl::Status& status, const KILN_FUZZ_Error& scripted, absl::string_view function) {
  if (const std::optional<PluginError> error = ErrorOf(scripted)) {
    CheckPluginError(status, *error, function, StatusCodeOf(error->code));
  } else {
    KILN_FUZZ_CHECK(status.ok(), absl::StrCat(function, " succeeded: ", status.ToString()));
  }
}

// An error Kiln makes of a bad answer: names the path. `shown()` describes the case, only when the check fails.
template <typename Describe>
void CheckNamesPath(const absl::Status& status, const Describe& shown) {
  KILN_FUZZ_CHECK(!status.ok() && absl::StrContains(status.message(), Quoted(Scripted().path)),
                  absl::StrCat(shown(), ": ", status.ToString()));
}

std::vector<std::optional<std::string>> Aliases(const KILN_FUZZ_Script& script) {
  std::vector<std::optional<std::string>> aliases;
  if (script.aliases_null & 1) return aliases;
  for (uint64_t i = 0; i < script.num_aliases % (KILN_FUZZ_MAX_ALIASES + 1); ++i) {
    aliases.push_back(Text(script.aliases[i]));
  }
  return aliases;
}

std::vector<int32_t> Precisions(const KILN_FUZZ_Script& script) {
  if (script.precisions_null & 1) return {};
  const uint64_t count = script.num_precisions % (KILN_FUZZ_MAX_PRECISIONS + 1);
  return std::vector<int32_t>(script.precisions, script.precisions + count);
}

// KILN_Precision's values, by the names the header gives them.
std::optional<Precision> PrecisionOf(int32_t value) {
  static const char* const kNames[] = {"32-true", "64-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"};
  if (value < KILN_PRECISION_32_TRUE || value > KILN_PRECISION_BF16_TRUE) return std::nullopt;
  return PrecisionFromName(kNames[value - KILN_PRECISION_32_TRUE]);
}

std::optional<c10::DeviceType> DeviceTypeOf(int32_t value) {
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

// What is wrong with Plugin_Info's answers by the header's rules (and ReadPluginInfo's: strings not empty); empty
// when nothing is.
std::string InfoProblem(const KILN_FUZZ_Script& script, bool privateuse1_taken) {
  if (!Present(Text(script.name))) return "no name";
  if (!Present(Text(script.description))) return "no description";
  if ((script.aliases_null & 1) && script.num_aliases > 0) return "aliases NULL with num_aliases > 0";
  for (const std::optional<std::string>& alias : Aliases(script)) {
    if (!alias.has_value()) return "a NULL alias";
  }
  if (!DeviceTypeOf(script.device_type).has_value()) return "an unknown device type";
  if (script.device_numbering != KILN_DEVICE_NUMBERING_INDEXED &&
      script.device_numbering != KILN_DEVICE_NUMBERING_PROCESSES) {
    return "an unknown device numbering";
  }
  if (script.device_type == KILN_DEVICE_TYPE_CPU && script.device_numbering == KILN_DEVICE_NUMBERING_INDEXED) {
    return "indexed CPU devices";
  }
  if (!Present(Text(script.process_group_backend))) return "no process group backend";
  const std::vector<int32_t> precisions = Precisions(script);
  if (precisions.empty()) return "no precision";
  std::set<int32_t> seen;
  for (int32_t precision : precisions) {
    if (!PrecisionOf(precision).has_value()) return "an unknown precision";
    if (!seen.insert(precision).second) return "a precision twice";
  }
  if ((script.visibility_hint_is_set & 1) && !Text(script.visibility_hint).has_value()) return "a NULL hint";
  if (script.device_type == KILN_DEVICE_TYPE_PRIVATEUSE1 && privateuse1_taken) return "PrivateUse1 taken";
  return "";
}

void CheckInfo(const PluginInfo& info, const KILN_FUZZ_Script& script) {
  const std::string& path = Scripted().path;
  KILN_FUZZ_CHECK(info.path == path, info.path);
  KILN_FUZZ_CHECK(info.api_version == absl::StrCat(KILN_PLUGIN_API_MAJOR, ".1"), info.api_version);  // A 1.1 table.
  // Names are case-insensitive: Kiln holds them in lower case, as the registry registers them.
  KILN_FUZZ_CHECK(info.name == absl::AsciiStrToLower(*Text(script.name)), info.name);
  KILN_FUZZ_CHECK(info.description == *Text(script.description), info.description);
  std::vector<std::string> aliases;
  for (const std::optional<std::string>& alias : Aliases(script)) aliases.push_back(absl::AsciiStrToLower(*alias));
  KILN_FUZZ_CHECK(info.aliases == aliases, absl::StrJoin(info.aliases, ","));
  KILN_FUZZ_CHECK(info.priority == script.priority, absl::StrCat(info.priority));
  KILN_FUZZ_CHECK(info.device_type == *DeviceTypeOf(script.device_type), c10::DeviceTypeName(info.device_type));
  KILN_FUZZ_CHECK(info.devices_are_processes == (script.device_numbering == KILN_DEVICE_NUMBERING_PROCESSES),
                  "numbering");
  KILN_FUZZ_CHECK(info.process_group_backend == *Text(script.process_group_backend), info.process_group_backend);
  std::vector<Precision> precisions;
  for (int32_t precision : Precisions(script)) precisions.push_back(*PrecisionOf(precision));
  KILN_FUZZ_CHECK(info.precisions == precisions, PrecisionNames(info.precisions));
  const std::string hint = (script.visibility_hint_is_set & 1) ? *Text(script.visibility_hint) : "";
  KILN_FUZZ_CHECK(info.visibility_hint == hint, info.visibility_hint);
}

// Devices_Count's answers, as the header says to read them.
struct ExpectedCount {
  std::optional<PluginError> error;
  bool valid = false;  // No error, and the numbers are within the header's rules.
  int count = 0;
  std::optional<int> auto_count;  // INDEXED only.
};

ExpectedCount CountOf(const KILN_FUZZ_Script& script, bool processes) {
  ExpectedCount expected;
  expected.error = ErrorOf(script.count_error);
  if (expected.error.has_value() || script.count < 0) return expected;
  // Indexed devices become c10::Devices, whose index type bounds how many of them LibTorch can tell apart.
  if (!processes && script.count > std::numeric_limits<c10::DeviceIndex>::max() + 1) return expected;
  if (processes && script.count > kMaxDeviceCount) return expected;  // More than any devices value may ask for.
  expected.count = script.count;
  if (!processes && (script.auto_count_is_set & 1)) {
    if (script.auto_count < 0 || script.auto_count > script.count) return expected;
    expected.auto_count = script.auto_count;
  }
  expected.valid = true;
  return expected;
}

std::string IndicesText(const absl::StatusOr<std::vector<int>>& indices) {
  return indices.ok() ? absl::StrCat("[", absl::StrJoin(*indices, ","), "]") : indices.status().ToString();
}

// ParseDevices, AutoDeviceCount and ParallelDevices; returns the devices parsed (empty on an error).
std::vector<c10::Device> CheckDevices(const PluginAccelerator& accelerator, const KILN_FUZZ_Script& script,
                                      const Devices& devices) {
  const PluginInfo& info = accelerator.info();
  const bool processes = info.devices_are_processes;
  const ExpectedCount count = CountOf(script, processes);
  const int expected_auto = count.valid ? count.auto_count.value_or(count.count) : 0;
  const int auto_count = accelerator.AutoDeviceCount();
  KILN_FUZZ_CHECK(auto_count == expected_auto, absl::StrCat("AutoDeviceCount ", auto_count, ", expected ",
                                                            expected_auto, " (count ", script.count, ")"));

  const absl::StatusOr<DeviceSelection> syntax = ParseDevicesSyntax(devices);
  const absl::StatusOr<std::vector<int>> parsed = accelerator.ParseDevices(devices);
  const auto shown = [&] {
    return absl::StrCat("devices=", devices.ToString(), " with count ", script.count,
                        processes ? " processes" : " indexed", ": ", IndicesText(parsed));
  };
  if (!syntax.ok()) {
    KILN_FUZZ_CHECK(!parsed.ok() && parsed.status().code() == absl::StatusCode::kInvalidArgument, shown());
    return {};
  }
  if (!count.valid) {
    KILN_FUZZ_CHECK(!parsed.ok() && parsed.status().code() == absl::StatusCode::kFailedPrecondition, shown());
    CheckNamesPath(parsed.status(), shown);
    if (count.error.has_value()) {
      KILN_FUZZ_CHECK(absl::StrContains(parsed.status().message(), count.error->message), shown());
    }
    return {};
  }
  if (!processes && syntax->kind == DeviceSelection::Kind::kAuto && auto_count == 0) {
    KILN_FUZZ_CHECK(!parsed.ok() && parsed.status().code() == absl::StatusCode::kFailedPrecondition, shown());
  }
  if (!parsed.ok()) {
    const absl::StatusCode code = parsed.status().code();
    KILN_FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kFailedPrecondition,
                    shown());
    return {};
  }
  const std::vector<int>& indices = *parsed;
  if (processes) {
    for (size_t i = 0; i < indices.size(); ++i) KILN_FUZZ_CHECK(indices[i] == static_cast<int>(i), shown());
    KILN_FUZZ_CHECK(!indices.empty(), shown());
  } else {
    std::set<int> seen;
    for (int index : indices) {
      KILN_FUZZ_CHECK(index >= 0 && index < count.count, shown());
      KILN_FUZZ_CHECK(seen.insert(index).second, shown());
    }
  }
  if (syntax->kind == DeviceSelection::Kind::kAuto) {
    KILN_FUZZ_CHECK(static_cast<int>(indices.size()) == auto_count, absl::StrCat(shown(), " for auto ", auto_count));
  }

  std::vector<c10::Device> parallel;
  try {
    parallel = accelerator.ParallelDevices(indices);
  } catch (const std::exception& e) {
    KILN_FUZZ_CHECK(false, absl::StrCat(shown(), ": ParallelDevices threw ", e.what()));
  }
  KILN_FUZZ_CHECK(parallel.size() == indices.size(), shown());
  for (size_t i = 0; i < parallel.size(); ++i) {
    const auto device = [&] { return absl::StrCat(shown(), ": device ", i, " is ", parallel[i].str()); };
    KILN_FUZZ_CHECK(parallel[i].type() == info.device_type, device());
    if (processes) {
      KILN_FUZZ_CHECK(!parallel[i].has_index(), device());
    } else {
      KILN_FUZZ_CHECK(parallel[i].has_index() && static_cast<int>(parallel[i].index()) == indices[i], device());
    }
  }
  return parallel;
}

// SetupDevice and TeardownDevice reach the plugin with the device's index, and only for its own devices.
void CheckSetupAndTeardown(PluginAccelerator& accelerator, const KILN_FUZZ_Script& script, const LogicalDevice& device,
                           int32_t plugin_index) {
  const auto shown = [&] { return absl::StrCat(device.ToString(), " as plugin index ", plugin_index); };
  KILN_FUZZ_Calls before = Calls();
  const absl::Status setup = accelerator.SetupDevice(device);
  KILN_FUZZ_Calls after = Calls();
  KILN_FUZZ_CHECK(after.setup_calls == before.setup_calls + 1, shown());
  KILN_FUZZ_CHECK(after.last_device_index == plugin_index, absl::StrCat(shown(), ": got ", after.last_device_index));
  CheckPluginAnswer(setup, script.setup_error, "Device_Setup");

  before = after;
  const absl::Status teardown = accelerator.TeardownDevice(device);
  after = Calls();
  KILN_FUZZ_CHECK(after.teardown_calls == before.teardown_calls + 1, shown());
  KILN_FUZZ_CHECK(after.last_device_index == plugin_index, absl::StrCat(shown(), ": got ", after.last_device_index));
  CheckPluginAnswer(teardown, script.teardown_error, "Device_Teardown");

  before = after;
  const LogicalDevice other{
      .accelerator = device.accelerator, .index = 0, .compute = c10::Device(c10::DeviceType::Meta)};
  KILN_FUZZ_CHECK(accelerator.SetupDevice(other).code() == absl::StatusCode::kInvalidArgument, "meta");
  KILN_FUZZ_CHECK(accelerator.TeardownDevice(other).code() == absl::StatusCode::kInvalidArgument, "meta");
  after = Calls();
  KILN_FUZZ_CHECK(after.setup_calls == before.setup_calls && after.teardown_calls == before.teardown_calls,
                  "a device of another type reached the plugin");
}

void CheckStats(const PluginAccelerator& accelerator, const KILN_FUZZ_Script& script, const LogicalDevice& device,
                int32_t plugin_index) {
  const KILN_FUZZ_Calls before = Calls();
  const absl::StatusOr<DeviceStats> stats = accelerator.GetDeviceStats(device);
  const KILN_FUZZ_Calls after = Calls();
  const auto shown = [&] {
    return absl::StrCat(device.ToString(), " with ", script.num_stats[0], " then ", script.num_stats[1],
                        " statistics: ", stats.ok() ? "OK" : stats.status().ToString());
  };
  KILN_FUZZ_CHECK(after.stats_calls > before.stats_calls && after.last_device_index == plugin_index, shown());
  if (const std::optional<PluginError> error = ErrorOf(script.stats_error)) {
    CheckPluginError(stats.status(), *error, "Device_Stats", StatusCodeOf(error->code));
    return;
  }
  if (!stats.ok()) {
    CheckNamesPath(stats.status(), shown);
  } else {
    // Only what the plugin reported: each name one of its entries', with that entry's value.
    for (const auto& [name, value] : *stats) {
      bool found = false;
      for (const KILN_FUZZ_Stat& entry : script.stats) {
        found = found || (Text(entry.name) == name && entry.value == value);
      }
      KILN_FUZZ_CHECK(found, absl::StrCat(shown(), ": ", name, " = ", value));
    }
  }
  // A small report that stays the same: all of it, or an error when a name is missing.
  const uint64_t reported = script.num_stats[0];
  if (reported != script.num_stats[1] || reported > KILN_FUZZ_STAT_ENTRIES) return;
  std::set<std::string> names;
  bool name_missing = false;
  for (uint64_t i = 0; i < reported; ++i) {
    const std::optional<std::string> name = Text(script.stats[i].name);
    name_missing = name_missing || !name.has_value();
    // A value that is not finite counts as unreadable: left out.
    if (name.has_value() && std::isfinite(script.stats[i].value)) names.insert(*name);
  }
  KILN_FUZZ_CHECK(stats.ok() == !name_missing, shown());
  if (!stats.ok()) return;
  std::set<std::string> got;
  for (const auto& [name, value] : *stats) got.insert(name);
  KILN_FUZZ_CHECK(got == names, shown());
}

void CheckSubstitute(const PluginAccelerator& accelerator, const KILN_FUZZ_Script& script, Precision requested) {
  const std::optional<PrecisionSubstitute> substitute = accelerator.SubstitutePrecision(requested);
  const std::optional<Precision> offered = PrecisionOf(script.substitute);
  const std::vector<Precision>& declared = accelerator.info().precisions;
  const bool expected = !ErrorOf(script.substitute_error).has_value() && (script.substitute_is_set & 1) &&
                        offered.has_value() && std::count(declared.begin(), declared.end(), *offered) > 0;
  const auto shown = [&] {
    return absl::StrCat("substitute ", script.substitute, " for ", PrecisionName(requested), ": ",
                        substitute.has_value() ? PrecisionName(substitute->precision) : "none");
  };
  KILN_FUZZ_CHECK(substitute.has_value() == expected, shown());
  if (!expected) return;
  KILN_FUZZ_CHECK(substitute->precision == *offered, shown());
  KILN_FUZZ_CHECK(substitute->warning == Text(script.warning).value_or(""), shown());
}

bool ValidName(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return !lower.empty() && lower != "auto" && std::all_of(lower.begin(), lower.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_' || c == '-';
  });
}

// Registration in a fresh registry: the registry's name rules, and the accelerator answers to its registered name.
void CheckRegistration(const PluginInfo& info) {
  bool expected = ValidName(info.name);
  for (const std::string& alias : info.aliases) expected = expected && ValidName(alias);
  AcceleratorRegistry registry;
  const absl::StatusOr<PluginInfo> loaded = LoadAcceleratorPlugin(Scripted().path, registry);
  const auto shown = [&] {
    return absl::StrCat("name '", info.name, "', aliases '", absl::StrJoin(info.aliases, "', '"),
                        "': ", loaded.status().ToString());
  };
  KILN_FUZZ_CHECK(loaded.ok() == expected, shown());
  if (!loaded.ok()) {
    KILN_FUZZ_CHECK(loaded.status().code() == absl::StatusCode::kInvalidArgument, shown());
    CheckNamesPath(loaded.status(), shown);
    return;
  }
  const std::string name = absl::AsciiStrToLower(info.name);
  const absl::StatusOr<std::shared_ptr<Accelerator>> accelerator = registry.Get(name);
  KILN_FUZZ_CHECK(accelerator.ok(), shown());
  KILN_FUZZ_CHECK((*accelerator)->name() == name, absl::StrCat(shown(), ": name() is '", (*accelerator)->name(), "'"));
  for (const std::string& alias : info.aliases) {
    const absl::StatusOr<AcceleratorSpec> spec = registry.Find(alias);
    KILN_FUZZ_CHECK(spec.ok() && spec->name == name, absl::StrCat(shown(), ": alias ", alias));
  }
}

Devices MakeDevices(FuzzInput& input) {
  switch (input.Byte()) {
    case 'i':
      return Devices(input.Integer<int32_t>());
    case 'l': {
      std::vector<int> indices;
      while (!input.empty() && indices.size() < 8) indices.push_back(input.Integer<int32_t>());
      return Devices(std::move(indices));
    }
    case 's':
      return Devices(input.Rest());
    default:
      return Devices();
  }
}

void FuzzPlugin(FuzzInput& input) {
  ScriptedPlugin& plugin = Scripted();
  uint8_t raw[sizeof(KILN_FUZZ_Script)];
  for (uint8_t& byte : raw) byte = input.Byte();
  KILN_FUZZ_Script script;
  std::memcpy(&script, raw, sizeof(script));
  plugin.set_script(raw, sizeof(raw));
  const Precision requested = AllPrecisions()[input.Byte() % AllPrecisions().size()];
  const Devices devices = MakeDevices(input);

  const absl::StatusOr<std::shared_ptr<const PluginLibrary>> library = PluginLibrary::Open(plugin.path);
  KILN_FUZZ_CHECK(library.ok() && *library == plugin.library, library.status().ToString());
  const absl::StatusOr<PluginInfo> info = ReadPluginInfo(**library);
  if (const std::optional<PluginError> error = ErrorOf(script.info_error)) {
    CheckPluginError(info.status(), *error, "Plugin_Info", StatusCodeOf(error->code));
    return;
  }
  const std::string problem = InfoProblem(script, (*library)->privateuse1_taken_before_load());
  KILN_FUZZ_CHECK(info.ok() == problem.empty(),
                  absl::StrCat("expected ", problem.empty() ? "no problem" : problem, ": ", info.status().ToString()));
  if (!info.ok()) {
    KILN_FUZZ_CHECK(info.status().code() == (problem == "PrivateUse1 taken" ? absl::StatusCode::kFailedPrecondition
                                                                            : absl::StatusCode::kInvalidArgument),
                    info.status().ToString());
    CheckNamesPath(info.status(), [&] { return problem; });
    return;
  }
  CheckInfo(*info, script);

  PluginAccelerator accelerator(*library, *info);
  const std::vector<c10::Device> parsed = CheckDevices(accelerator, script, devices);

  const absl::Status available = accelerator.CheckAvailable();
  if (const std::optional<PluginError> error = ErrorOf(script.check_available_error)) {
    CheckPluginError(available, *error, "Devices_CheckAvailable",
                     error->code == KILN_ERROR_CODE_UNAVAILABLE ? absl::StatusCode::kUnavailable
                                                                : absl::StatusCode::kFailedPrecondition);
  } else {
    // LibTorch must have the device: always for the CPU, otherwise when a device guard is registered for the type.
    const bool has_device =
        info->device_type == c10::DeviceType::CPU || c10::impl::hasDeviceGuardImpl(info->device_type);
    KILN_FUZZ_CHECK(available.ok() == has_device, available.ToString());
    if (!available.ok()) {
      KILN_FUZZ_CHECK(available.code() == absl::StatusCode::kFailedPrecondition, available.ToString());
      CheckNamesPath(available, [] { return "CheckAvailable"; });
    }
  }

  // A parsed device when there is one, else device 0 (or the process's device), which Kiln passes on unchecked.
  const bool processes = info->devices_are_processes;
  const c10::Device compute = !parsed.empty() ? parsed.front()
                              : processes     ? c10::Device(info->device_type)
                                              : c10::Device(info->device_type, 0);
  const LogicalDevice device{
      .accelerator = info->name, .index = compute.has_index() ? compute.index() : 0, .compute = compute};
  const int32_t plugin_index = processes ? 0 : compute.index();
  CheckSetupAndTeardown(accelerator, script, device, plugin_index);
  CheckStats(accelerator, script, device, plugin_index);
  CheckSubstitute(accelerator, script, requested);
  CheckRegistration(*info);
}

// Where libscripted_plugin.so is: in the runfiles under `bazel test` (whose working directory is the runfiles root,
// as for the loader's own tests); otherwise next to this program, which is where Bazel puts it (tools/fuzz.sh runs
// bazel-bin/tests/fuzz/plugin_tables_fuzzer with the repository as the working directory).
std::string PluginPath() {
  constexpr char kName[] = "libscripted_plugin.so";
  if (std::getenv("TEST_SRCDIR") != nullptr) return absl::StrCat("tests/fuzz/", kName);
  char self[PATH_MAX];
  const ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) return absl::StrCat("./", kName);
  std::string program(self, length);
  return absl::StrCat(program.substr(0, program.rfind('/')), "/", kName);
}

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "plugin_tables fuzzer: %s\n", why.c_str());
  std::abort();
}

}  // namespace
}  // namespace kiln

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  kiln::ScriptedPlugin& plugin = kiln::Scripted();
  plugin.path = kiln::PluginPath();
  // The same handle the loader gets (dlopen gives one handle per file), for the fake's two extra exports.
  void* const handle = ::dlopen(plugin.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) kiln::Fail(absl::StrCat("cannot open ", plugin.path, ": ", ::dlerror()));
  plugin.set_script = reinterpret_cast<KILN_FUZZ_SetScript_Fn*>(::dlsym(handle, KILN_FUZZ_SET_SCRIPT_SYMBOL));
  plugin.get_calls = reinterpret_cast<KILN_FUZZ_GetCalls_Fn*>(::dlsym(handle, KILN_FUZZ_GET_CALLS_SYMBOL));
  if (plugin.set_script == nullptr || plugin.get_calls == nullptr) {
    kiln::Fail(absl::StrCat(plugin.path, " lacks the scripted plugin's exports"));
  }
  // A zeroed script: Plugin_Initialize succeeds, once, for every input to come.
  const uint8_t none[1] = {0};
  plugin.set_script(none, 0);
  absl::StatusOr<std::shared_ptr<const kiln::PluginLibrary>> library = kiln::PluginLibrary::Open(plugin.path);
  if (!library.ok()) kiln::Fail(library.status().ToString());
  plugin.library = *std::move(library);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzzing::FuzzInput input(data, size);
  if (input.Byte() == 't') {
    kiln::FuzzTable(input);
  } else {
    kiln::FuzzPlugin(input);
  }
  return 0;
}
