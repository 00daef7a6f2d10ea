// The sample accelerator plugin: a shared library (libkiln_sample_plugin.so) that implements Kiln's plugin C API
// (hal/plugin/kiln_plugin_c_api.h) and nothing else. It is written as a vendor would write one in C++, with the C
// header as its only contact with Kiln: it links neither Kiln nor LibTorch, and exports one symbol.
//
//   name          "sample_plugin" (alias "sample")
//   devices       LibTorch's CPU device; its devices are processes on this host, like Kiln's cpu accelerator
//                 ("auto" = 1 process, N = N processes). Training on it therefore computes exactly what the CPU
//                 computes, bit for bit.
//   priority      SAMPLE_PLUGIN_PRIORITY (default -20, below cpu's 0, so "auto" keeps the CPU unless it is raised).
//                 Read by Plugin_Initialize: a value that is not an integer fails the load, saying so.
//   collective    "sample_ccl": its own collective library over TCP (sample_ccl.h), through the C API's optional
//                 collectives (1.1); data-parallel training exchanges tensors through it.
//   precisions    32-true, 64-true, bf16-mixed, bf16-true; 16-mixed runs as bf16-mixed with a warning (LibTorch's
//                 CPU autocast is bfloat16 only).
//   statistics    setup_calls, teardown_calls (since the plugin was loaded), devices_set_up (set up and not yet
//                 torn down), process_rss_bytes (the process's resident memory, from /proc/self/statm; left out
//                 when it cannot be read).
//
// Why the CPU device type and not a PrivateUse1 device of its own: it shows a plugin that needs nothing of LibTorch,
// not even to link it. A plugin for its own hardware reports KILN_DEVICE_TYPE_PRIVATEUSE1, and Kiln registers its
// device with LibTorch by calling its Device_Register when the device is chosen (plugin API 1.2; examples/device_plugin
// is one, made with Kiln's device kit).
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "examples/sample_plugin/errors.h"
#include "examples/sample_plugin/sample_ccl.h"
#include "hal/plugin/kiln_plugin_c_api.h"

namespace sample_plugin {
namespace {

constexpr char kPriorityVariable[] = "SAMPLE_PLUGIN_PRIORITY";
constexpr int32_t kDefaultPriority = -20;

struct State {
  int32_t priority = kDefaultPriority;
  std::atomic<int64_t> setup_calls{0};
  std::atomic<int64_t> teardown_calls{0};
  std::atomic<int64_t> devices_set_up{0};
};

State& GetState() {
  static State* const state = new State();  // Never destroyed: the plugin is never unloaded.
  return *state;
}

// Processes numbering: the only device index is 0, "the device of the calling process".
KILN_Error* CheckDevice(int32_t index) {
  if (index == 0) return nullptr;
  return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                   "has no device " + std::to_string(index) + "; each process has one device, index 0");
}

void ErrorDestroy(KILN_Error_Destroy_Args* args) { DestroyError(args->error); }

void ErrorMessage(KILN_Error_Message_Args* args) {
  args->message = args->error->message.c_str();
  args->message_size = args->error->message.size();
}

void ErrorGetCode(KILN_Error_GetCode_Args* args) { args->code = args->error->code; }

KILN_Error* PluginInitialize(KILN_Plugin_Initialize_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Plugin_Initialize_Args, "1.0");
  (void)OutOfMemoryError();  // Made now, while memory is plentiful.
  const char* value = std::getenv(kPriorityVariable);
  if (value != nullptr && *value != '\0') {
    char* end = nullptr;
    errno = 0;
    const long priority = std::strtol(value, &end, 10);
    if (errno != 0 || *end != '\0' || priority < INT32_MIN || priority > INT32_MAX) {
      return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                       std::string(kPriorityVariable) + "='" + value +
                           "' is not an integer; set it to a priority such as 100 (above every built-in "
                           "accelerator), or unset it for " +
                           std::to_string(kDefaultPriority));
    }
    GetState().priority = static_cast<int32_t>(priority);
  }
  return nullptr;
}

constexpr const char* kAliases[] = {"sample"};
constexpr KILN_Precision kPrecisions[] = {KILN_PRECISION_32_TRUE, KILN_PRECISION_64_TRUE, KILN_PRECISION_BF16_MIXED,
                                          KILN_PRECISION_BF16_TRUE};

KILN_Error* PluginInfo(KILN_Plugin_Info_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Plugin_Info_Args, "1.0");
  args->name = kName;
  args->description =
      "The sample accelerator plugin (examples/sample_plugin): LibTorch's CPU device, loaded at run "
      "time through the plugin C API.";
  args->aliases = kAliases;
  args->num_aliases = 1;
  args->priority = GetState().priority;
  args->device_type = KILN_DEVICE_TYPE_CPU;
  args->device_numbering = KILN_DEVICE_NUMBERING_PROCESSES;
  args->process_group_backend = kCclName;  // Its own collectives (sample_ccl.h).
  args->precisions = kPrecisions;
  args->num_precisions = sizeof(kPrecisions) / sizeof(kPrecisions[0]);
  args->visibility_hint_is_set = false;
  return nullptr;
}

KILN_Error* DevicesCount(KILN_Devices_Count_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Devices_Count_Args, "1.0");
  args->count = 1;  // "auto": one process.
  args->auto_count_is_set = false;
  return nullptr;
}

KILN_Error* DevicesCheckAvailable(KILN_Devices_CheckAvailable_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Devices_CheckAvailable_Args, "1.0");
  return nullptr;  // The host is always there.
}

KILN_Error* DeviceSetup(KILN_Device_Setup_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Device_Setup_Args, "1.0");
  if (KILN_Error* error = CheckDevice(args->device_index); error != nullptr) return error;
  GetState().setup_calls.fetch_add(1);
  GetState().devices_set_up.fetch_add(1);
  return nullptr;
}

KILN_Error* DeviceTeardown(KILN_Device_Teardown_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Device_Teardown_Args, "1.0");
  if (KILN_Error* error = CheckDevice(args->device_index); error != nullptr) return error;
  GetState().teardown_calls.fetch_add(1);
  int64_t set_up = GetState().devices_set_up.load();
  while (set_up > 0 && !GetState().devices_set_up.compare_exchange_weak(set_up, set_up - 1)) {
  }
  return nullptr;
}

// The process's resident memory in bytes, or -1 when /proc cannot be read.
double ResidentBytes() {
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return -1;
  long long total_pages = 0;
  long long resident_pages = 0;
  const int read = std::fscanf(file, "%lld %lld", &total_pages, &resident_pages);
  std::fclose(file);
  if (read != 2) return -1;
  return static_cast<double>(resident_pages) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

KILN_Error* DeviceStats(KILN_Device_Stats_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Device_Stats_Args, "1.0");
  if (KILN_Error* error = CheckDevice(args->device_index); error != nullptr) return error;
  const State& state = GetState();
  KILN_Device_Stat stats[4] = {
      {"setup_calls", static_cast<double>(state.setup_calls.load())},
      {"teardown_calls", static_cast<double>(state.teardown_calls.load())},
      {"devices_set_up", static_cast<double>(state.devices_set_up.load())},
  };
  size_t count = 3;
  if (const double resident = ResidentBytes(); resident >= 0) stats[count++] = {"process_rss_bytes", resident};
  args->num_stats = count;
  for (size_t i = 0; i < count && i < args->stats_capacity; ++i) args->stats[i] = stats[i];
  return nullptr;
}

KILN_Error* PrecisionSubstitute(KILN_Precision_Substitute_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Precision_Substitute_Args, "1.0");
  args->substitute_is_set = false;
  if (args->requested == KILN_PRECISION_16_MIXED) {
    args->substitute_is_set = true;
    args->substitute = KILN_PRECISION_BF16_MIXED;
    args->warning =
        "You passed `Trainer(accelerator='sample_plugin', precision='16-mixed')` but sample_plugin computes on the "
        "CPU, whose autocast is bfloat16 only. Using `precision='bf16-mixed'` instead.";
  }
  return nullptr;
}

constexpr KILN_Plugin_Api kApi = {
    .struct_size = KILN_Plugin_Api_STRUCT_SIZE,
    .major_version = KILN_PLUGIN_API_MAJOR,
    .minor_version = KILN_PLUGIN_API_MINOR,
    .Error_Destroy = ErrorDestroy,
    .Error_Message = ErrorMessage,
    .Error_GetCode = ErrorGetCode,
    .Plugin_Initialize = PluginInitialize,
    .Plugin_Info = PluginInfo,
    .Devices_Count = DevicesCount,
    .Devices_CheckAvailable = DevicesCheckAvailable,
    .Device_Setup = DeviceSetup,
    .Device_Teardown = DeviceTeardown,
    .Device_Stats = DeviceStats,
    .Precision_Substitute = PrecisionSubstitute,
    // 1.1: collectives, all eight (sample_ccl.h).
    .Collectives_GetUniqueId = CollectivesGetUniqueId,
    .Collectives_CommInit = CollectivesCommInit,
    .Collectives_CommDestroy = CollectivesCommDestroy,
    .Collectives_AllReduce = CollectivesAllReduce,
    .Collectives_Broadcast = CollectivesBroadcast,
    .Collectives_AllGather = CollectivesAllGather,
    .Collectives_ReduceScatter = CollectivesReduceScatter,
    .Collectives_Barrier = CollectivesBarrier,
};

}  // namespace
}  // namespace sample_plugin

extern "C" KILN_PLUGIN_EXPORT const KILN_Plugin_Api* KILN_GetPluginApi(void) { return &sample_plugin::kApi; }
