// A sample device plugin: an accelerator plugin (hal/plugin/kiln_plugin_c_api.h, API 1.2) whose device is an
// out-of-tree LibTorch device (PrivateUse1) made with Kiln's device kit (hal/device_kit). It is built outside Bazel
// (build.sh) from this file, the C header and the kit's sources, against LibTorch alone.
//
//   name          DEVICE_PLUGIN_NAME, a compile-time define ("alpha_npu"): the accelerator's name and its device's,
//                 so that one source builds several plugins (build.sh builds alpha_npu and beta_npu)
//   devices       2, PrivateUse1, indexed ("alpha_npu:0", "alpha_npu:1"); every operator computes through LibTorch's
//                 CPU kernels (the kit's CPU fallback), so training on it gives the CPU's numbers bit for bit
//   registration  Device_Register calls kiln::device_kit::Register; Kiln calls it when the device is first chosen,
//                 after checking that no other device holds PrivateUse1. Nothing registers when the library loads.
//   collectives   none of its own: Kiln exchanges the tensors through host memory over Gloo ("<name>_staged")
//   precisions    32-true, bf16-mixed (the kit registers autocast's casts)
//   statistics    the kit's memory counters for the device, cpu_fallback_calls, device_to_host_copies, and
//                 register_calls (how often Kiln called Device_Register: at most once, and never for a refused device)
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hal/device_kit/device_kit.h"
#include "hal/plugin/kiln_plugin_c_api.h"

#ifndef DEVICE_PLUGIN_NAME
#error "build with -DDEVICE_PLUGIN_NAME=<name>, such as alpha_npu (build.sh does)"
#endif
#define DEVICE_PLUGIN_STRING(name) #name
#define DEVICE_PLUGIN_QUOTE(name) DEVICE_PLUGIN_STRING(name)
#define DEVICE_PLUGIN_NAME_STRING DEVICE_PLUGIN_QUOTE(DEVICE_PLUGIN_NAME)

// The plugin's error: a code and a message, owned by Kiln until it calls Error_Destroy.
struct KILN_Error {
  KILN_Error_Code code;
  std::string message;
};

namespace {

constexpr char kName[] = DEVICE_PLUGIN_NAME_STRING;
constexpr int kDevices = 2;
constexpr KILN_Precision kPrecisions[] = {KILN_PRECISION_32_TRUE, KILN_PRECISION_BF16_MIXED};

std::atomic<int> register_calls{0};

// A FAKE device runtime: this machine has no such hardware, so "device memory" is host memory and copies are memmove.
// This class is where a vendor calls its runtime (its device count, its allocator, its copy engine); the kit turns it
// into the rest of a LibTorch device.
class FakeDevice final : public kiln::device_kit::Device {
 public:
  std::string Name() const override { return kName; }
  int Count() const noexcept override { return kDevices; }
  void* Allocate(int index, size_t bytes) override { return std::malloc(bytes); }
  void Free(int index, void* data) noexcept override { std::free(data); }
  void Copy(void* dst, const void* src, size_t bytes, kiln::device_kit::CopyKind kind, int index) override {
    std::memmove(dst, src, bytes);
  }
};

// Every function below is noexcept: an exception (only std::bad_alloc can arise) ends the process rather than unwind
// through Kiln's C caller, which the header forbids.
KILN_Error* MakeError(KILN_Error_Code code, std::string message) noexcept {
  return new KILN_Error{code, std::string(kName) + ": " + std::move(message)};
}

// INVALID_ARGUMENT when Kiln's struct is smaller than the fields this plugin uses (the header's rule for callees).
template <typename Args>
KILN_Error* CheckArgs(const Args* args, size_t needed, const char* type) noexcept {
  if (args->struct_size >= needed) return nullptr;
  const std::string version = std::to_string(KILN_PLUGIN_API_MAJOR) + "." + std::to_string(KILN_PLUGIN_API_MINOR);
  return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                   std::string(type) + " is " + std::to_string(args->struct_size) + " bytes, but plugin API " + version +
                       " defines " + std::to_string(needed) + "; load it with a Kiln of plugin API " + version +
                       " or later");
}
#define CHECK_ARGS(args, type)                                                            \
  if (KILN_Error* error = CheckArgs(args, type##_STRUCT_SIZE, #type); error != nullptr) { \
    return error;                                                                         \
  }

KILN_Error* CheckIndex(int32_t index) noexcept {
  if (index >= 0 && index < kDevices) return nullptr;
  return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                   "has no device " + std::to_string(index) + "; it has devices 0 to " + std::to_string(kDevices - 1));
}

void ErrorDestroy(KILN_Error_Destroy_Args* args) noexcept { delete args->error; }

void ErrorMessage(KILN_Error_Message_Args* args) noexcept {
  args->message = args->error->message.c_str();
  args->message_size = args->error->message.size();
}

void ErrorGetCode(KILN_Error_GetCode_Args* args) noexcept { args->code = args->error->code; }

KILN_Error* PluginInitialize(KILN_Plugin_Initialize_Args* args) noexcept {
  CHECK_ARGS(args, KILN_Plugin_Initialize_Args);
  return nullptr;  // A vendor loads its driver here; nothing touches LibTorch before Device_Register.
}

KILN_Error* PluginInfo(KILN_Plugin_Info_Args* args) noexcept {
  CHECK_ARGS(args, KILN_Plugin_Info_Args);
  args->name = kName;
  args->description = "A sample device plugin on Kiln's device kit (examples/device_plugin): " DEVICE_PLUGIN_NAME_STRING
                      ", a FAKE device in host memory, computing through LibTorch's CPU kernels.";
  args->priority = -10;  // Below the CPU's 0: "auto" keeps choosing the CPU unless the user asks for this device.
  args->device_type = KILN_DEVICE_TYPE_PRIVATEUSE1;
  args->device_numbering = KILN_DEVICE_NUMBERING_INDEXED;
  args->process_group_backend = DEVICE_PLUGIN_NAME_STRING "_staged";  // Kiln's staged collectives, by this name.
  args->precisions = kPrecisions;
  args->num_precisions = sizeof(kPrecisions) / sizeof(kPrecisions[0]);
  args->device_name = kName;
  return nullptr;
}

KILN_Error* DevicesCount(KILN_Devices_Count_Args* args) noexcept {
  CHECK_ARGS(args, KILN_Devices_Count_Args);
  args->count = kDevices;
  return nullptr;
}

KILN_Error* DevicesCheckAvailable(KILN_Devices_CheckAvailable_Args* args) noexcept {
  CHECK_ARGS(args, KILN_Devices_CheckAvailable_Args);
  return nullptr;  // A vendor asks its driver here; Kiln adds whether the device can be registered in the process.
}

KILN_Error* DeviceSetup(KILN_Device_Setup_Args* args) noexcept {
  CHECK_ARGS(args, KILN_Device_Setup_Args);
  if (KILN_Error* error = CheckIndex(args->device_index); error != nullptr) return error;
  kiln::device_kit::SetCurrentDevice(args->device_index);
  kiln::device_kit::ResetPeakMemoryStats(args->device_index);
  return nullptr;
}

KILN_Error* DeviceTeardown(KILN_Device_Teardown_Args* args) noexcept {
  CHECK_ARGS(args, KILN_Device_Teardown_Args);
  return CheckIndex(args->device_index);
}

KILN_Error* DeviceStats(KILN_Device_Stats_Args* args) noexcept {
  CHECK_ARGS(args, KILN_Device_Stats_Args);
  if (KILN_Error* error = CheckIndex(args->device_index); error != nullptr) return error;
  std::vector<kiln::device_kit::Statistic> stats = kiln::device_kit::DeviceStatistics(args->device_index);
  stats.push_back({"register_calls", static_cast<double>(register_calls.load())});
  args->num_stats = stats.size();
  for (size_t i = 0; i < args->num_stats && i < args->stats_capacity; ++i) {
    args->stats[i] = KILN_Device_Stat{stats[i].name, stats[i].value};
  }
  return nullptr;
}

KILN_Error* PrecisionSubstitute(KILN_Precision_Substitute_Args* args) noexcept {
  CHECK_ARGS(args, KILN_Precision_Substitute_Args);
  args->substitute_is_set = false;
  return nullptr;
}

KILN_Error* DeviceRegister(KILN_Device_Register_Args* args) noexcept {
  CHECK_ARGS(args, KILN_Device_Register_Args);
  register_calls.fetch_add(1);
  // The kit refuses, registering nothing, when another device holds PrivateUse1 (Kiln has checked already; this is
  // the plugin's own guard), and says why.
  const std::string refused = kiln::device_kit::Register(std::make_shared<FakeDevice>());
  if (!refused.empty()) return MakeError(KILN_ERROR_CODE_FAILED_PRECONDITION, refused);
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
    // 1.1's collectives: none (NULL).
    .Device_Register = DeviceRegister,
};

}  // namespace

const KILN_Plugin_Api* KILN_GetPluginApi(void) { return &kApi; }
