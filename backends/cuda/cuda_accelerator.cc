#include "backends/cuda/cuda_accelerator.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "ATen/Context.h"
#include "ATen/detail/CUDAHooksInterface.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cuda/caching_allocator.h"
#include "backends/cuda/peak_flops.h"
#include "backends/cuda/visible_devices.h"
#include "c10/core/DeviceType.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "c10/util/Exception.h"
#include "hal/registry.h"

#ifdef KILN_WITH_CUDA
#include "cuda_runtime_api.h"
#include "torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"
#endif

namespace kiln {
namespace {

// True when the linked LibTorch was built with the CUDA runtime (its CUDA hooks are registered). The default hooks
// of a CPU-only LibTorch answer false.
bool LibTorchHasCudaRuntime() {
  try {
    return at::detail::getCUDAHooks().hasCUDART();
  } catch (...) {
    return false;
  }
}

// Visible CUDA devices as LibTorch counts them: 0 in a CPU-only LibTorch or without a usable driver.
int LibTorchDeviceCount() {
  if (!LibTorchHasCudaRuntime()) return 0;
  try {
    return at::detail::getCUDAHooks().getNumGPUs();
  } catch (...) {
    return 0;
  }
}

// LibTorch 2.x takes a named out-of-tree device (PrivateUse1) for the process's accelerator (at::getAccelerator),
// and its autograd then finds no stream for a CUDA node: every backward over CUDA tensors fails with
// "opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED" (pytorch/pytorch#161129; seen on an H200 with
// LibTorch 2.11 when a linked backend named its device at load). Refused here, with the cause, before any work.
absl::Status CheckNoNamedPrivateUse1() {
  if (!c10::is_privateuse1_backend_registered()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot train on CUDA in this process: the out-of-tree device '", c10::get_privateuse1_backend(),
      "' (LibTorch's PrivateUse1) is registered here, and LibTorch then takes it for the process's accelerator, so "
      "that every CUDA backward fails inside autograd (pytorch/pytorch#161129). Run CUDA in a process that does not "
      "use that device: leave its plugin out of --accelerator_plugin and KILN_ACCELERATOR_PLUGINS, or have its "
      "backend name the device on first use rather than when its library loads (hal/compat/privateuse1.h)"));
}

#ifdef KILN_WITH_CUDA
// NCCL sets its communicator up, at the first collective, by blocking until every rank has joined
// (ncclCommInitRank), with no bound: a peer that never starts kept rank 0 waiting past any timeout (the conformance
// suite's missing-peer check, on an H200). So the ranks meet at the store first, bounded by the timeout
// (hal/collectives.h: joining returns or fails within it).
absl::Status JoinAtStore(c10d::Store& store, int rank, int world_size, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(absl::StrCat("kiln_nccl_joined/", r));
  try {
    store.set(keys[rank], std::vector<uint8_t>{1});
    store.wait(keys, timeout);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < world_size; ++r) {
        if (!store.check({keys[r]})) missing.push_back(r);
      }
    } catch (const std::exception&) {
      // The store itself is gone: its own message below says so.
    }
    return absl::UnavailableError(absl::StrCat(
        "nccl: rank ", rank, " of ", world_size, " waited ", timeout.count(), " ms for the other ranks to join",
        missing.empty() ? "" : absl::StrCat(" (rank(s) ", absl::StrJoin(missing, ", "), " never came)"),
        "; start every rank, or raise process_group_timeout. The store said: ", e.what()));
  }
}
#endif

absl::Status CheckCudaType(const c10::Device& device) {
  if (device.is_cuda()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the cuda accelerator got device '", device.str(), "'; it runs only on CUDA devices ('cuda:N')"));
}

std::string Hint() {
  const std::optional<std::string> visible = cuda::CudaVisibleDevicesFromEnvironment();
  return cuda::VisibilityHint(visible ? std::optional<absl::string_view>(*visible) : std::nullopt);
}

std::string NotVisible(int index, int visible_count) {
  if (visible_count <= 0) {
    return absl::StrCat("CUDA device ", index, " requested, but no CUDA device is visible (", Hint(), ")");
  }
  return absl::StrCat("CUDA device ", index, " requested, but only ", visible_count,
                      visible_count == 1 ? " is" : " are", " visible (", Hint(), ")");
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCudaDevices(const Devices& devices, int visible_count,
                                                  std::optional<absl::string_view> cuda_visible_devices) {
  return ParseDeviceIndices(devices, visible_count, "CUDA", cuda::VisibilityHint(cuda_visible_devices));
}

CudaAccelerator::CudaAccelerator(CudaOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::vector<int>> CudaAccelerator::ParseDevices(const Devices& devices) const {
  const std::optional<std::string> visible = cuda::CudaVisibleDevicesFromEnvironment();
  return ParseCudaDevices(devices, AutoDeviceCount(),
                          visible ? std::optional<absl::string_view>(*visible) : std::nullopt);
}

int CudaAccelerator::AutoDeviceCount() const { return LibTorchDeviceCount(); }

absl::Status CudaAccelerator::CheckAvailable() const {
  if (!LibTorchHasCudaRuntime()) {
#ifdef KILN_WITH_CUDA
    return absl::FailedPreconditionError(
        "no CUDA device can be used: this build links LibTorch's CUDA libraries, but they registered no CUDA runtime "
        "(is the libtorch_cuda this program loads the one it was built with? see docs/backends.md, 'CUDA backend')");
#else
    return absl::FailedPreconditionError(
        "no CUDA device can be used: this build of Kiln links LibTorch's CPU libraries alone (the default build); "
        "build Kiln with --config=cuda, after tools/setup.sh --cuda (see docs/backends.md, 'CUDA backend')");
#endif
  }
  if (LibTorchDeviceCount() <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device visible (", Hint(),
                     "); check that `nvidia-smi` lists a GPU and that CUDA_VISIBLE_DEVICES "
                     "does not hide it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CudaAccelerator::MakeCollectiveBackend(
    const LogicalDevice& device, const CollectiveOptions& options) {
  if (absl::Status status = CheckIndexIsCompute(device); !status.ok()) return status;
#ifdef KILN_WITH_CUDA
  if (absl::Status joined = JoinAtStore(*options.store, options.rank, options.world_size, options.timeout);
      !joined.ok()) {
    return joined;
  }
  try {
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = options.timeout;
    return c10::intrusive_ptr<c10d::Backend>(
        c10::make_intrusive<c10d::ProcessGroupNCCL>(options.store, options.rank, options.world_size, nccl_options));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("nccl: LibTorch's ProcessGroupNCCL could not start: ", e.what()));
  }
#else
  (void)options;
  return absl::FailedPreconditionError(
      "nccl: this build of Kiln links LibTorch's CPU libraries alone, without ProcessGroupNCCL; build Kiln with "
      "--config=cuda, after tools/setup.sh --cuda (see docs/backends.md, 'CUDA backend')");
#endif
}

std::optional<double> CudaAccelerator::PeakFlops(const LogicalDevice& device, c10::ScalarType dtype) const {
  if (!CheckIndexIsCompute(device).ok() || !LibTorchHasCudaRuntime()) return std::nullopt;
#ifdef KILN_WITH_CUDA
  cuda::GpuProperties properties;
  int clock_khz = 0;
  const int index = device.index;
  if (cudaDeviceGetAttribute(&properties.major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&properties.minor, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&properties.multiprocessors, cudaDevAttrMultiProcessorCount, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index) != cudaSuccess) {
    (void)cudaGetLastError();  // Leave no sticky error for LibTorch's next call.
    return std::nullopt;
  }
  properties.peak_clock_khz = clock_khz;
  // float32 matrix products run on the tensor cores in TF32 when LibTorch lets cuBLAS (torch's
  // set_float32_matmul_precision other than "highest"), as Lightning's get_available_flops takes it.
  return cuda::PeakFlopsOf(properties, dtype, at::globalContext().allowTF32CuBLAS());
#else
  (void)dtype;
  return std::nullopt;
#endif
}

std::vector<c10::Device> CudaAccelerator::ParallelDevices(const std::vector<int>& indices) const {
  std::vector<c10::Device> devices;
  devices.reserve(indices.size());
  for (int index : indices) devices.emplace_back(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
  return devices;
}

absl::Status CudaAccelerator::SetupDevice(const LogicalDevice& logical) {
  const c10::Device& device = logical.compute;
  if (absl::Status status = CheckIndexIsCompute(logical); !status.ok()) return status;
  if (absl::Status status = CheckCudaType(device); !status.ok()) return status;
  if (absl::Status status = CheckNoNamedPrivateUse1(); !status.ok()) return status;
  if (absl::Status status = CheckAvailable(); !status.ok()) return status;
  const int index = device.has_index() ? device.index() : 0;
  if (const int count = LibTorchDeviceCount(); index >= count) {
    return absl::InvalidArgumentError(NotVisible(index, count));
  }
  try {
    // The device guard is LibTorch's device-neutral way to select a device; it exists in every build and is
    // implemented by libtorch_cuda in a CUDA one.
    c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
        ->setDevice(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
  } catch (const c10::Error& error) {
    return absl::InternalError(
        absl::StrCat("selecting CUDA device ", index, " failed: ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status CudaAccelerator::TeardownDevice(const LogicalDevice& logical) {
  const c10::Device& device = logical.compute;
  if (absl::Status status = CheckIndexIsCompute(logical); !status.ok()) return status;
  if (absl::Status status = CheckCudaType(device); !status.ok()) return status;
  const int index = device.has_index() ? device.index() : 0;
  // Nothing can have been set up on a device LibTorch cannot see (SetupDevice refused it): nothing to release.
  if (index >= LibTorchDeviceCount()) return absl::OkStatus();
  try {
    at::detail::getCUDAHooks().deviceSynchronize(index);
  } catch (const c10::Error& error) {
    return absl::InternalError(
        absl::StrCat("waiting for CUDA device ", index, " failed: ", error.what_without_backtrace()));
  }
  return cuda::EmptyCache();
}

absl::Status CudaAccelerator::NvmlStatus() const {
  LoadedNvml();
  absl::MutexLock lock(&mutex_);
  return nvml_status_;
}

const cuda::Nvml* CudaAccelerator::LoadedNvml() const {
  absl::MutexLock lock(&mutex_);
  if (!nvml_tried_) {
    nvml_tried_ = true;
    absl::StatusOr<std::unique_ptr<cuda::Nvml>> nvml = cuda::Nvml::Load(options_.nvml_library);
    if (nvml.ok()) {
      nvml_ = std::move(*nvml);
    } else {
      nvml_status_ = nvml.status();
    }
  }
  return nvml_.get();
}

absl::StatusOr<DeviceStats> CudaAccelerator::GetDeviceStats(const LogicalDevice& logical) const {
  const c10::Device& device = logical.compute;
  if (absl::Status status = CheckIndexIsCompute(logical); !status.ok()) return status;
  if (absl::Status status = CheckCudaType(device); !status.ok()) return status;
  int index = device.has_index() ? device.index() : -1;
  if (index < 0) {
    int64_t current = -1;
    try {
      current = at::detail::getCUDAHooks().current_device();
    } catch (...) {
    }
    index = current >= 0 ? static_cast<int>(current) : 0;
  }

  // The NVML index of every visible CUDA device, when NVML can say.
  const cuda::Nvml* nvml = LoadedNvml();
  std::optional<std::vector<int>> nvml_indices;
  if (nvml != nullptr) {
    const std::optional<std::string> visible = cuda::CudaVisibleDevicesFromEnvironment();
    const cuda::VisibleDevices parsed =
        cuda::ParseCudaVisibleDevices(visible ? std::optional<absl::string_view>(*visible) : std::nullopt);
    absl::StatusOr<std::vector<std::string>> uuids = nvml->DeviceUuids();
    if (uuids.ok()) {
      absl::StatusOr<std::vector<int>> mapped = cuda::NvmlIndicesOfCudaDevices(parsed, *uuids);
      if (mapped.ok()) nvml_indices = std::move(*mapped);
    }
  }

  int visible_count = LibTorchDeviceCount();
  if (visible_count == 0 && nvml_indices.has_value()) visible_count = static_cast<int>(nvml_indices->size());
  if (index >= visible_count) return absl::InvalidArgumentError(NotVisible(index, visible_count));

  DeviceStats stats;
  stats["nvml_available"] = 0;
  if (nvml_indices.has_value() && index < static_cast<int>(nvml_indices->size())) {
    absl::StatusOr<DeviceStats> readings = nvml->ReadDevice((*nvml_indices)[index]);
    if (readings.ok()) {
      stats.insert(readings->begin(), readings->end());
      stats["nvml_available"] = 1;
    }
  }
  // The caching allocator only knows the devices LibTorch sees.
  const bool allocator_read = index < LibTorchDeviceCount() && cuda::AddCachingAllocatorStats(index, &stats).ok();
  stats["allocator_available"] = allocator_read ? 1 : 0;
  return stats;
}

std::vector<Precision> CudaAccelerator::SupportedPrecisions() const {
  return {Precision::k32True, Precision::k16Mixed, Precision::kBf16Mixed,
          Precision::k64True, Precision::k16True,  Precision::kBf16True};
}

KILN_REGISTER_ACCELERATOR({
    .name = "cuda",
    .description = "NVIDIA GPUs through LibTorch's CUDA runtime; statistics from NVML (libnvidia-ml.so.1).",
    .aliases = {"gpu"},
    .priority = 20,
    .factory = [] { return std::make_shared<CudaAccelerator>(); },
});

}  // namespace kiln
