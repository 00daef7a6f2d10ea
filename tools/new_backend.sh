#!/usr/bin/env bash
# `bazel run //tools:new_backend -- --name=acme --out=DIR [--device]`: writes a new accelerator backend for Kiln, as a
# Bazel repository of its own, that builds and passes Kiln's conformance suite as generated.
#
# DIR gets:
#   WORKSPACE               workspace(name = "<name>")
#   BUILD                   the backend's cc_library (alwayslink) and its conformance test
#   <name>_accelerator.h    the Accelerator implementation and its one registration line; without --device a working
#   <name>_accelerator.cc   skeleton that computes on the host CPU, with a TODO wherever the real hardware goes
#   <name>_device.h         with --device: a real out-of-tree LibTorch device "<name>:N" made with Kiln's device kit
#   <name>_device.cc        (hal/device_kit): the device's runtime, in one marked DEVICE-SPECIFIC block (count,
#                           memory, copies), is a fake in host memory until the vendor's driver calls replace it
#   WORKSPACE.snippet       the lines that link it into Kiln's programs, for the WORKSPACE that builds Kiln
#   README.md               what to do next
#
# Flags:
#   --name=NAME             the accelerator's name: lower-case letters, digits and '_', starting with a letter;
#                           not one of Kiln's own names (auto, cpu, cuda, gpu, hpu). The C++ code goes in the
#                           namespace NAME_backend (a bare NAME could clash with the C library: gamma, time, ...).
#   --out=DIR               where to write; it must not exist or be empty. A relative path is taken from the
#                           directory `bazel run` was started in.
#   --kiln_repository=NAME  the name the workspace gives Kiln's repository (default: kiln).
#   --device                write an out-of-tree LibTorch device (PrivateUse1) with its allocator, guard, kernels,
#                           runtime hooks, name, autocast and statistics per device (the device kit's), and a
#                           collective backend for `--devices=2 --strategy=ddp` (StagedCollectives, until the
#                           vendor's CCL replaces it). NAME then must not be one of LibTorch's device types.
#
# Exit status: 0 written, 2 bad flags (nothing written).
set -euo pipefail

usage_error() {
  echo "error: $1" >&2
  echo "usage: bazel run //tools:new_backend -- --name=NAME --out=DIR [--device] [--kiln_repository=kiln]" >&2
  exit 2
}

name=""
out=""
kiln="kiln"
device=0
for arg in "$@"; do
  case "$arg" in
    --name=*) name=${arg#--name=} ;;
    --out=*) out=${arg#--out=} ;;
    --kiln_repository=*) kiln=${arg#--kiln_repository=} ;;
    --device) device=1 ;;
    -h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$arg'" ;;
  esac
done

[[ -n "$name" ]] || usage_error "--name is required: the accelerator's name, such as --name=acme"
[[ -n "$out" ]] || usage_error "--out is required: the folder to write the backend's repository to"
if ! [[ "$name" =~ ^[a-z][a-z0-9_]{0,39}$ ]]; then
  usage_error "--name='$name' is not valid; use 1 to 40 lower-case letters, digits and '_', starting with a letter (e.g. acme or my_npu)"
fi
case "$name" in
  auto | cpu | cuda | gpu | hpu)
    usage_error "--name='$name' is taken by Kiln ('auto' chooses, and cpu, cuda (gpu) and hpu are built in); pick your accelerator's own name" ;;
esac
if [[ $device == 1 ]]; then
  case "$name" in
    mkldnn | opengl | opencl | ideep | hip | fpga | maia | xla | vulkan | metal | xpu | mps | meta | ve | lazy | ipu | \
      mtia | privateuseone)
      usage_error "--name='$name' is one of LibTorch's own device types, which an out-of-tree device cannot take; pick your device's own name (e.g. ${name}_npu)" ;;
  esac
fi
if ! [[ "$kiln" =~ ^[A-Za-z][A-Za-z0-9_.-]*$ ]]; then
  usage_error "--kiln_repository='$kiln' is not a repository name; pass the name your WORKSPACE gives Kiln (e.g. kiln)"
fi

if [[ "$out" != /* ]]; then out="${BUILD_WORKING_DIRECTORY:-$PWD}/$out"; fi
if [[ -e "$out" && ! -d "$out" ]]; then usage_error "--out='$out' is a file; pass a new or empty folder"; fi
if [[ -d "$out" && -n "$(ls -A "$out")" ]]; then
  usage_error "--out='$out' is not empty; pass a new or empty folder (nothing is overwritten)"
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# acme -> Acme, my_npu -> MyNpu.
class=""
IFS=_ read -r -a words <<<"$name"
for word in "${words[@]}"; do class+="$(tr '[:lower:]' '[:upper:]' <<<"${word:0:1}")${word:1}"; done
device_class="${class}Device"
class+="Accelerator"
name_upper=$(tr '[:lower:]' '[:upper:]' <<<"$name")
guard="$(tr '[:lower:]' '[:upper:]' <<<"$name")_$(tr '[:lower:]' '[:upper:]' <<<"$name")_ACCELERATOR_H_"

# Writes stdin to $out/$1, replacing the placeholders. Only the folder can hold characters special to sed.
out_for_sed=$(printf '%s' "$out" | sed 's/[&|\\]/\\&/g')
emit() {
  sed -e "s|@NAME@|$name|g" -e "s|@NAME_UPPER@|$name_upper|g" -e "s|@CLASS@|$class|g" \
    -e "s|@DEVICE_CLASS@|$device_class|g" -e "s|@GUARD@|$guard|g" -e "s|@KILN@|$kiln|g" \
    -e "s|@OUT@|$out_for_sed|g" >"$out/$1"
}

emit WORKSPACE <<'EOF'
# The @NAME@ accelerator backend for Kiln. Build it from a workspace that also brings in Kiln (as @@KILN@); see
# README.md.
workspace(name = "@NAME@")
EOF

if [[ $device == 0 ]]; then
emit BUILD <<'EOF'
# The @NAME@ accelerator for Kiln. Generated by @@KILN@//tools:new_backend; yours to edit from here on.
# A backend depends on Kiln's HAL alone (@@KILN@//hal), never on its connector or trainer.
load("@@KILN@//tools:conformance.bzl", "kiln_accelerator_conformance_test")

cc_library(
    name = "@NAME@",
    srcs = ["@NAME@_accelerator.cc"],
    hdrs = ["@NAME@_accelerator.h"],
    # The KILN_REGISTER_ACCELERATOR line runs from a static initialiser that nothing refers to: without alwayslink
    # the linker drops it, and Kiln's programs would not know "@NAME@". kiln_backends refuses such a library.
    alwayslink = True,
    visibility = ["//visibility:public"],
    deps = [
        "@abseil//:base",
        "@@KILN@//hal",
    ],
)

# Kiln's conformance suite against "@NAME@": `bazel test @@NAME@//:all`. Where the hardware is missing, its hardware
# checks skip and print CheckAvailable()'s reason.
kiln_accelerator_conformance_test(
    name = "@NAME@_conformance_test",
    accelerator = "@NAME@",
    deps = [":@NAME@"],
)
EOF

emit "${name}_accelerator.h" <<'EOF'
// The @NAME@ accelerator for Kiln, registered as "@NAME@".
//
// Generated by `bazel run @@KILN@//tools:new_backend -- --name=@NAME@` as a working skeleton: it computes on the host
// CPU, so that it builds and passes Kiln's conformance suite from the first minute. Each TODO marks where @NAME@'s
// hardware goes; hal/accelerator.h in Kiln states the contract of every method (what it returns, when it errors,
// whether it may block or throw).
//
// Device statistics (GetDeviceStats):
//   devices_visible  how many devices this process sees
// TODO: document each key you report (lower_snake_case, with its unit as a suffix: memory_used_bytes).
#ifndef @GUARD@
#define @GUARD@

#include <string>
#include <vector>

#include "hal/accelerator.h"

namespace @NAME@_backend {

class @CLASS@ final : public kiln::Accelerator {
 public:
  std::string name() const override { return "@NAME@"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const kiln::Devices& devices) const override;
  int AutoDeviceCount() const override;
  absl::Status CheckAvailable() const override;
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override;
  absl::Status SetupDevice(const kiln::LogicalDevice& device) override;
  absl::Status TeardownDevice(const kiln::LogicalDevice& device) override;
  absl::StatusOr<kiln::DeviceStats> GetDeviceStats(const kiln::LogicalDevice& device) const override;
  std::string ProcessGroupBackend() const override;
  std::vector<kiln::Precision> SupportedPrecisions() const override;
};

}  // namespace @NAME@_backend

#endif  // @GUARD@
EOF

emit "${name}_accelerator.cc" <<'EOF'
#include "@NAME@_accelerator.h"

#include "absl/strings/str_cat.h"
#include "hal/registry.h"

namespace @NAME@_backend {
namespace {

// TODO: the device type your LibTorch device registers under (c10::DeviceType::PrivateUse1 for an out-of-tree
// device). The skeleton runs on the host.
constexpr c10::DeviceType kDeviceType = c10::DeviceType::CPU;

// TODO: count @NAME@'s devices (driver query, device nodes). Return 0 when there are none or the query fails;
// never throw.
int CountDevices() { return 1; }

// `device.index` is @NAME@'s own number for the device (what ParseDevices gave); `device.compute` is the c10 device
// its tensors live on, which for the skeleton is the host CPU for every index.
absl::Status CheckOwnDevice(const kiln::LogicalDevice& device) {
  if (device.compute.type() == kDeviceType && device.index >= 0 && device.index < CountDevices()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the @NAME@ accelerator got device '", device.ToString(), "', which is not one of its devices"));
}

}  // namespace

absl::StatusOr<std::vector<int>> @CLASS@::ParseDevices(const kiln::Devices& devices) const {
  // Lightning's rules for numbered devices: "auto" and -1 all, N the first N, "0,2" exactly those. For processes
  // on the host instead, use kiln::ParseDeviceCount.
  return kiln::ParseDeviceIndices(devices, CountDevices(), name());
}

int @CLASS@::AutoDeviceCount() const { return CountDevices(); }

absl::Status @CLASS@::CheckAvailable() const {
  // TODO: check the driver and runtime; when something is missing, say what and how to fix it.
  if (CountDevices() == 0) return absl::FailedPreconditionError("no @NAME@ device found");
  return absl::OkStatus();
}

std::vector<c10::Device> @CLASS@::ParallelDevices(const std::vector<int>& indices) const {
  // TODO: one c10::Device(kDeviceType, index) per index, for a device LibTorch numbers. Kiln keeps each index
  // beside its c10 device (kiln::LogicalDevice), so devices that all compute on the host stay apart.
  return std::vector<c10::Device>(indices.size(), c10::Device(kDeviceType));
}

absl::Status @CLASS@::SetupDevice(const kiln::LogicalDevice& device) {
  // TODO: select the device for this process, create its context.
  return CheckOwnDevice(device);
}

absl::Status @CLASS@::TeardownDevice(const kiln::LogicalDevice& device) {
  // TODO: wait for the device, release cached memory. Set-up and tear-down may repeat in one process.
  return CheckOwnDevice(device);
}

absl::StatusOr<kiln::DeviceStats> @CLASS@::GetDeviceStats(const kiln::LogicalDevice& device) const {
  if (absl::Status status = CheckOwnDevice(device); !status.ok()) return status;
  // TODO: utilisation, memory, temperature... A value that cannot be read is left out; it does not fail the call.
  return kiln::DeviceStats{{"devices_visible", static_cast<double>(CountDevices())}};
}

// TODO: the collective backend for data-parallel training on @NAME@ (docs/collectives.md has a skeleton).
std::string @CLASS@::ProcessGroupBackend() const { return "gloo"; }

std::vector<kiln::Precision> @CLASS@::SupportedPrecisions() const {
  // TODO: every precision @NAME@ trains in, preferred first.
  return {kiln::Precision::k32True};
}

// Priority -100: "auto" prefers every built-in accelerator (cpu is 0) until you raise it.
KILN_REGISTER_ACCELERATOR({
    .name = "@NAME@",
    .description = "The @NAME@ accelerator (generated skeleton: computes on the host CPU).",
    .aliases = {},
    .priority = -100,
    .factory = [] { return std::make_shared<@CLASS@>(); },
});

}  // namespace @NAME@_backend
EOF

emit README.md <<'EOF'
# The @NAME@ accelerator for Kiln

Generated by `bazel run @@KILN@//tools:new_backend -- --name=@NAME@`. As generated it computes on the host CPU and
passes Kiln's conformance suite; replace each `TODO` in `@NAME@_accelerator.cc` with @NAME@'s hardware.

1. The workspace that builds Kiln needs, in its WORKSPACE, Kiln itself and its dependencies, then the lines of
   `WORKSPACE.snippet`:

       local_repository(name = "@KILN@", path = "/path/to/kiln")
       load("@@KILN@//tools:workspace.bzl", "kiln_dependencies")
       kiln_dependencies()
       # ... WORKSPACE.snippet here ...

   and a `.bazelrc` with `build --cxxopt=-std=c++17` and `build --host_cxxopt=-std=c++17` (LibTorch needs C++17).
   Kiln's docs/accelerators.md, "Your workspace", has these files complete.
2. `bazel test @@NAME@//:all` runs Kiln's conformance suite against "@NAME@", beside every backend Kiln links.
3. `bazel run @@KILN@//tools:accelerators` lists it; `bazel run @@KILN@//trainer:fit -- --accelerator=@NAME@` trains
   on it. A program of yours links `@@KILN@//trainer` and `@@KILN@//backends:linked`.
4. Its priority is -100, so `--accelerator=auto` prefers every built-in accelerator; raise `.priority` in the
   registration line when @NAME@ should win "auto".
EOF

else
emit BUILD <<'EOF'
# The @NAME@ accelerator for Kiln: an out-of-tree LibTorch device, "@NAME@:N". Generated by
# @@KILN@//tools:new_backend --device; yours to edit from here on. A backend depends on Kiln's HAL alone (@@KILN@//hal,
# the device kit and the staged collectives are part of it), never on its connector or trainer.
load("@@KILN@//tools:conformance.bzl", "kiln_accelerator_conformance_test")

cc_library(
    name = "@NAME@",
    srcs = [
        "@NAME@_accelerator.cc",
        "@NAME@_device.cc",
    ],
    hdrs = [
        "@NAME@_accelerator.h",
        "@NAME@_device.h",
    ],
    # The KILN_REGISTER_ACCELERATOR line runs from a static initialiser that nothing refers to: without alwayslink
    # the linker drops it, and Kiln's programs would not know "@NAME@". kiln_backends refuses such a library. (The
    # device registers with LibTorch when it is chosen, not when the library loads.)
    alwayslink = True,
    visibility = ["//visibility:public"],
    deps = [
        "@abseil//:base",
        "@@KILN@//hal",
        "@@KILN@//hal:staged_collectives",
        "@@KILN@//hal/device_kit",
        "@libtorch//:c10d",
        "@libtorch//:torch",
    ],
)

# Kiln's conformance suite against "@NAME@": `bazel test @@NAME@//:all`. As generated, every operator computes through
# LibTorch's CPU kernels (the device kit's fallback), so training must equal the CPU's bit for bit; drop `bitwise`
# once @NAME@'s own kernels compute.
kiln_accelerator_conformance_test(
    name = "@NAME@_conformance_test",
    accelerator = "@NAME@",
    bitwise = True,
    deps = [":@NAME@"],
)
EOF

emit "${name}_device.h" <<'EOF'
// The @NAME@ device: an out-of-tree LibTorch device (c10::DeviceType::PrivateUse1, named "@NAME@:N"), made with Kiln's
// device kit (@@KILN@//hal/device_kit) from @NAME@'s runtime (@NAME@_device.cc). The kit supplies the rest: the
// allocator and its statistics per device, the device guard, the copy, view and factory kernels, LibTorch's CPU
// fallback for every operator @NAME@ has no kernel for yet, autocast's casts, the runtime hooks and the name.
//
// Thread-safety: every function may be called from any thread.
#ifndef @NAME_UPPER@_@NAME_UPPER@_DEVICE_H_
#define @NAME_UPPER@_@NAME_UPPER@_DEVICE_H_

#include "absl/status/status.h"
#include "c10/core/Device.h"

namespace @NAME@_backend {

inline constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
inline constexpr char kDeviceName[] = "@NAME@";

// How many @NAME@ devices this process sees; 0 when none. Never throws.
int DeviceCount() noexcept;

// Registers the device with LibTorch and names it "@NAME@" on the first call (the accelerator calls it when the
// device is chosen), and returns OK, or why it could not: another out-of-tree device holds PrivateUse1 in this
// process (the message names both). Never throws.
absl::Status RegistrationStatus();

}  // namespace @NAME@_backend

#endif  // @NAME_UPPER@_@NAME_UPPER@_DEVICE_H_
EOF

emit "${name}_device.cc" <<'EOF'
#include "@NAME@_device.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "hal/device_kit/device_kit.h"

namespace @NAME@_backend {
namespace {

// ==== DEVICE-SPECIFIC: @NAME@'s runtime. ===========================================================================
// As generated this is a FAKE device: its memory is host memory and its copies are memcpy, so that the backend
// builds, passes Kiln's conformance suite and trains before @NAME@'s driver is wired in. Replace each body with the
// driver's call; hal/device_kit/device.h states each one's contract. Nothing else in this repository needs to change
// for @NAME@'s memory to be real.
constexpr int kFakeDeviceCount = 2;

class @DEVICE_CLASS@ final : public kiln::device_kit::Device {
 public:
  std::string Name() const override { return kDeviceName; }

  // The devices this process sees (honour @NAME_UPPER@_VISIBLE_DEVICES or your runtime's equivalent here).
  int Count() const noexcept override { return kFakeDeviceCount; }

  // `bytes` of device `index`'s memory, or nullptr when it is out of memory.
  void* Allocate(int index, size_t bytes) override { return std::malloc(bytes); }

  void Free(int index, void* data) noexcept override { std::free(data); }

  // Host to device, device to host, or within device `index`; complete when it returns.
  void Copy(void* dst, const void* src, size_t bytes, kiln::device_kit::CopyKind kind, int index) override {
    std::memmove(dst, src, bytes);
  }

  // Optional: SetCurrent(index) to select a device in the driver, Synchronize(index) to wait for its queue,
  // MemoryCapacity(index) for the memory_total_bytes statistic.
};
// ==== end of DEVICE-SPECIFIC ========================================================================================

}  // namespace

namespace {

// The process's one device object: the kit keeps it once registered, and DeviceCount asks it.
const std::shared_ptr<@DEVICE_CLASS@>& TheDevice() {
  static const auto* const device = new std::shared_ptr<@DEVICE_CLASS@>(std::make_shared<@DEVICE_CLASS@>());
  return *device;
}

}  // namespace

int DeviceCount() noexcept { return TheDevice()->Count(); }

absl::Status RegistrationStatus() {
  static const absl::Status* const status = [] {
    const std::string error = kiln::device_kit::Register(TheDevice());
    return new absl::Status(error.empty() ? absl::OkStatus() : absl::FailedPreconditionError(error));
  }();
  return *status;
}

}  // namespace @NAME@_backend
EOF

emit "${name}_accelerator.h" <<'EOF'
// The @NAME@ accelerator for Kiln, registered as "@NAME@": training on @NAME@_device.h's devices.
//
// Generated by `bazel run @@KILN@//tools:new_backend -- --name=@NAME@ --device`. hal/accelerator.h in Kiln states the
// contract of every method (what it returns, when it errors, whether it may block or throw).
//
//   devices       DeviceCount() devices, chosen by Lightning's GPU rules ("auto" and -1 all of them, N the first N,
//                 "0,1" or [1] exactly those); several devices mean one process each.
//   devices used  @NAME@:<index>
//   availability  available when the runtime sees a device and no other out-of-tree device holds PrivateUse1.
//   set-up        registers the device when it is first chosen, makes it current and resets its peak memory.
//   collective    "@NAME@_ccl": Kiln's StagedCollectives, which stage the device's tensors through host memory over
//                 Gloo. DEVICE-SPECIFIC: replace MakeCollectiveBackend's body with @NAME@'s CCL as a c10d backend
//                 (docs/collectives.md, "A backend for a linked accelerator").
//   precisions    32-true, 64-true and bf16-mixed (the device kit registers autocast's casts).
//
// Device statistics (GetDeviceStats), per device from the device kit's allocator:
//   memory_allocated_bytes       bytes in use on the device now
//   memory_allocated_peak_bytes  most bytes in use at once since SetupDevice
//   memory_active_blocks         allocations not yet freed
//   memory_total_blocks          allocations ever made on the device
//   cpu_fallback_calls           operators computed through the CPU fallback so far, all devices together
//   device_to_host_copies        reads of the device's memory by the host so far, all devices together
#ifndef @GUARD@
#define @GUARD@

#include <string>
#include <vector>

#include "hal/accelerator.h"

namespace @NAME@_backend {

class @CLASS@ final : public kiln::Accelerator {
 public:
  std::string name() const override { return "@NAME@"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const kiln::Devices& devices) const override;
  int AutoDeviceCount() const override;
  absl::Status CheckAvailable() const override;
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override;
  absl::Status SetupDevice(const kiln::LogicalDevice& device) override;
  absl::Status TeardownDevice(const kiln::LogicalDevice& device) override;
  absl::StatusOr<kiln::DeviceStats> GetDeviceStats(const kiln::LogicalDevice& device) const override;
  std::string ProcessGroupBackend() const override { return "@NAME@_ccl"; }
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(
      const kiln::LogicalDevice& device, const kiln::CollectiveOptions& options) override;
  std::vector<kiln::Precision> SupportedPrecisions() const override;
};

}  // namespace @NAME@_backend

#endif  // @GUARD@
EOF

emit "${name}_accelerator.cc" <<'EOF'
#include "@NAME@_accelerator.h"

#include "@NAME@_device.h"
#include "absl/strings/str_cat.h"
#include "hal/device_kit/device_kit.h"
#include "hal/registry.h"
#include "hal/staged_collectives.h"

namespace @NAME@_backend {
namespace {

// OK when `device` is one of @NAME@'s devices in this process, else InvalidArgument naming it and the ones there are.
absl::Status CheckOwnDevice(const kiln::LogicalDevice& device) {
  if (absl::Status status = kiln::CheckIndexIsCompute(device); !status.ok()) return status;
  const c10::Device& compute = device.compute;
  if (compute.type() == kDeviceType && compute.index() >= 0 && compute.index() < DeviceCount()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("the @NAME@ accelerator got device '", device.ToString(),
                                                 "', which is not one of its ", DeviceCount(), " devices"));
}

}  // namespace

absl::StatusOr<std::vector<int>> @CLASS@::ParseDevices(const kiln::Devices& devices) const {
  // Chosen: the device registers and takes its name now, before the plan names devices.
  if (absl::Status registered = RegistrationStatus(); !registered.ok()) return registered;
  return kiln::ParseDeviceIndices(devices, DeviceCount(), name());
}

int @CLASS@::AutoDeviceCount() const { return DeviceCount(); }

absl::Status @CLASS@::CheckAvailable() const {
  // A probe: it registers nothing.
  if (DeviceCount() == 0) return absl::FailedPreconditionError("no @NAME@ device found");
  if (std::string taken = kiln::device_kit::CheckCanRegister(kDeviceName); !taken.empty()) {
    return absl::FailedPreconditionError(taken);
  }
  return absl::OkStatus();
}

std::vector<c10::Device> @CLASS@::ParallelDevices(const std::vector<int>& indices) const {
  (void)RegistrationStatus();  // Named before the devices are printed; SetupDevice reports a failure.
  std::vector<c10::Device> devices;
  for (int index : indices) devices.emplace_back(kDeviceType, static_cast<c10::DeviceIndex>(index));
  return devices;
}

absl::Status @CLASS@::SetupDevice(const kiln::LogicalDevice& device) {
  if (absl::Status registered = RegistrationStatus(); !registered.ok()) return registered;
  if (absl::Status status = CheckOwnDevice(device); !status.ok()) return status;
  kiln::device_kit::SetCurrentDevice(device.compute.index());
  kiln::device_kit::ResetPeakMemoryStats(device.compute.index());
  return absl::OkStatus();
}

absl::Status @CLASS@::TeardownDevice(const kiln::LogicalDevice& device) {
  // Memory goes back when tensors are freed; set-up and tear-down may repeat in one process.
  return CheckOwnDevice(device);
}

absl::StatusOr<kiln::DeviceStats> @CLASS@::GetDeviceStats(const kiln::LogicalDevice& device) const {
  if (absl::Status status = CheckOwnDevice(device); !status.ok()) return status;
  kiln::DeviceStats stats;
  for (const kiln::device_kit::Statistic& statistic : kiln::device_kit::DeviceStatistics(device.compute.index())) {
    stats[statistic.name] = statistic.value;
  }
  return stats;
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> @CLASS@::MakeCollectiveBackend(
    const kiln::LogicalDevice& device, const kiln::CollectiveOptions& options) {
  if (absl::Status status = CheckOwnDevice(device); !status.ok()) return status;
  // DEVICE-SPECIFIC: @NAME@'s CCL as a c10d::Backend (docs/collectives.md has a skeleton that passes the conformance
  // suite: the unique id through options.store, Work that throws from wait() within options.timeout). Until then the
  // tensors travel through host memory over Gloo.
  return kiln::StagedCollectives::Create(options, ProcessGroupBackend(), kDeviceType);
}

std::vector<kiln::Precision> @CLASS@::SupportedPrecisions() const {
  return {kiln::Precision::k32True, kiln::Precision::k64True, kiln::Precision::kBf16Mixed};
}

// Priority -100: "auto" prefers every built-in accelerator (cpu is 0) until you raise it.
KILN_REGISTER_ACCELERATOR({
    .name = "@NAME@",
    .description = "The @NAME@ accelerator: an out-of-tree LibTorch device (@NAME@:N).",
    .aliases = {},
    .priority = -100,
    .factory = [] { return std::make_shared<@CLASS@>(); },
});

}  // namespace @NAME@_backend
EOF

emit README.md <<'EOF'
# The @NAME@ accelerator for Kiln

Generated by `bazel run @@KILN@//tools:new_backend -- --name=@NAME@ --device`: a real out-of-tree LibTorch device,
`@NAME@:0`, `@NAME@:1`, made with Kiln's device kit. As generated its runtime is a fake in host memory, and it builds,
passes Kiln's conformance suite (bit for bit against the CPU) and trains with `--devices=2 --strategy=ddp`.

What is yours to write, and all of it is marked `DEVICE-SPECIFIC`:

| where | what |
| --- | --- |
| `@NAME@_device.cc`, the `DEVICE-SPECIFIC` block | the runtime: how many devices, allocate, free, copy (and optionally select a device, synchronise) |
| `@NAME@_accelerator.cc`, `MakeCollectiveBackend` | your collective library as a c10d backend (until then tensors travel through host memory over Gloo) |
| your own kernels | `torch::Library` registrations for PrivateUse1 after the device registers; every operator without one runs on the CPU |

1. The workspace that builds Kiln needs, in its WORKSPACE, Kiln itself and its dependencies, then the lines of
   `WORKSPACE.snippet`:

       local_repository(name = "@KILN@", path = "/path/to/kiln")
       load("@@KILN@//tools:workspace.bzl", "kiln_dependencies")
       kiln_dependencies()
       # ... WORKSPACE.snippet here ...

   and Kiln's `.bazelrc` settings; Kiln's docs/accelerators.md, "Your workspace", has these files complete.
2. `bazel test @@NAME@//:all` runs Kiln's conformance suite against "@NAME@", beside every backend Kiln links.
3. `bazel run @@KILN@//trainer:fit -- --accelerator=@NAME@ --devices=2 --strategy=ddp` trains on two devices.
4. Its priority is -100, so `--accelerator=auto` prefers every built-in accelerator; raise `.priority` in the
   registration line when @NAME@ should win "auto".
EOF
fi

emit WORKSPACE.snippet <<'EOF'
# Add to the WORKSPACE of the workspace that builds Kiln (after Kiln's own set-up), to link @NAME@ into Kiln's
# programs (@@KILN@//trainer:fit, @@KILN@//tools:accelerators, and binaries that link @@KILN@//backends:linked).
# The path may also be relative to that workspace's root. List every backend in the one kiln_backends call.
load("@@KILN@//tools:backends.bzl", "kiln_backend_repository", "kiln_backends")

kiln_backend_repository(
    name = "@NAME@",
    path = "@OUT@",
)

kiln_backends(
    name = "kiln_backends",
    backends = ["@@NAME@//:@NAME@"],
)
EOF

echo "Wrote the $name backend to $out:"
(cd "$out" && ls -1 | sed 's/^/  /')
echo "Next: unless your WORKSPACE lists it already, add $out/WORKSPACE.snippet to it (see $out/README.md); then:"
echo "  bazel test @$name//:all"
