#include "kernels.h"

#include <atomic>
#include <cstring>

#include "ATen/EmptyTensor.h"
#include "ATen/core/Tensor.h"
#include "ATen/native/CPUFallback.h"
#include "ATen/native/Resize.h"
#include "ATen/ops/_reshape_alias_native.h"
#include "ATen/ops/as_strided_native.h"
#include "ATen/ops/from_blob.h"
#include "ATen/ops/set_native.h"
#include "ATen/ops/view_native.h"
#include "allocator.h"
#include "c10/core/SymIntArrayRef.h"
#include "device.h"
#include "hal/compat/privateuse1.h"
#include "torch/library.h"

namespace virtual_npu {
namespace {

std::atomic<int64_t> cpu_fallback_calls{0};
std::atomic<int64_t> device_to_host_copies{0};
// How deep this thread is in the CPU fallback, whose own copies to and from the CPU are how the device computes,
// not reads of its memory by the host.
thread_local int fallback_depth = 0;

bool IsVirtualNpu(const at::Tensor& tensor) { return tensor.device().type() == kDeviceType; }

// The device a factory function allocates on: the one asked for, else the current one.
c10::Device TargetDevice(c10::optional<c10::Device> device) {
  c10::Device target = device.value_or(c10::Device(kDeviceType));
  if (!target.has_index()) target = c10::Device(kDeviceType, CurrentDevice());
  const absl::Status status = CheckDevice(target);
  TORCH_CHECK(status.ok(), std::string(status.message()));
  return target;
}

void CheckFactoryOptions(c10::optional<c10::Layout> layout, c10::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "virtual_npu tensors must be strided, not ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "virtual_npu memory is host memory already; pin_memory is not supported");
}

at::Tensor Empty(c10::SymIntArrayRef size, c10::optional<at::ScalarType> dtype, c10::optional<c10::Layout> layout,
                 c10::optional<c10::Device> device, c10::optional<bool> pin_memory,
                 c10::optional<c10::MemoryFormat> memory_format) {
  CheckFactoryOptions(layout, pin_memory);
  const c10::Device target = TargetDevice(device);
  return at::detail::empty_generic(kiln::compat::AsIntArrayRef(size), DeviceAllocator(target.index()),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor EmptyStrided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride, c10::optional<at::ScalarType> dtype,
                        c10::optional<c10::Layout> layout, c10::optional<c10::Device> device,
                        c10::optional<bool> pin_memory) {
  CheckFactoryOptions(layout, pin_memory);
  const c10::Device target = TargetDevice(device);
  return at::detail::empty_strided_generic(
      kiln::compat::AsIntArrayRef(size), kiln::compat::AsIntArrayRef(stride), DeviceAllocator(target.index()),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype));
}

// A CPU tensor over the same host memory as `tensor` (which is on the CPU or the virtual NPU), with the same sizes
// and strides. The alias does not own the memory: `tensor` must outlive it.
at::Tensor HostAlias(const at::Tensor& tensor) {
  if (tensor.is_cpu()) return tensor;
  TORCH_CHECK(IsVirtualNpu(tensor), "virtual_npu copies to and from the CPU and itself only, not ", tensor.device());
  return at::from_blob(tensor.data_ptr(), tensor.sizes(), tensor.strides(),
                       at::TensorOptions().dtype(tensor.scalar_type()).device(at::kCPU));
}

// self -> dst, where either is on the virtual NPU and the other on it or on the CPU. Broadcasting and dtype
// conversion are the CPU copy's.
at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.numel() == 0 || dst.numel() == 0) return dst;
  if (fallback_depth == 0 && IsVirtualNpu(self) && dst.is_cpu()) {
    device_to_host_copies.fetch_add(1, std::memory_order_relaxed);
  }
  at::Tensor host_dst = HostAlias(dst);
  host_dst.copy_(HostAlias(self));
  return dst;
}

const at::Tensor& Resize(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, kiln::compat::AsIntArrayRef(size), /*stride=*/c10::nullopt,
                               /*resize_storage=*/false);
  if (impl->numel() > 0) {
    const size_t needed =
        at::detail::computeStorageNbytesContiguous(impl->sizes(), impl->dtype().itemsize(), impl->storage_offset());
    const c10::Storage& storage = impl->unsafe_storage();
    TORCH_CHECK(storage, "virtual_npu: cannot resize a tensor without storage");
    // Grows through the storage's own allocator (this device's), copying the old bytes over.
    if (needed > storage.nbytes()) at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), needed);
  }
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return CopyFrom(self, dst, /*non_blocking=*/false);
}

at::Tensor AsStrided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                     c10::optional<c10::SymInt> storage_offset) {
  c10::optional<int64_t> offset;
  if (storage_offset.has_value()) offset = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, kiln::compat::AsIntArrayRef(size), kiln::compat::AsIntArrayRef(stride),
                                           offset);
}

at::Tensor View(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, kiln::compat::AsIntArrayRef(size));
}

at::Tensor ReshapeAlias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, kiln::compat::AsIntArrayRef(size), kiln::compat::AsIntArrayRef(stride));
}

at::Tensor& SetStorage(at::Tensor& self, c10::Storage source, c10::SymInt storage_offset, c10::SymIntArrayRef size,
                       c10::SymIntArrayRef stride) {
  // LibTorch's CPU implementation checks that the storage is on self's device and is otherwise device-neutral.
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset.expect_int(),
                                      kiln::compat::AsIntArrayRef(size), kiln::compat::AsIntArrayRef(stride));
}

// `module->to(device)` replaces each parameter's data in place (set_data), which LibTorch allows only between
// tensor types it knows to be compatible. Host memory is host memory: the CPU and the virtual NPU are.
bool HasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  const auto host_backed = [](const at::Tensor& tensor) {
    return tensor.layout() == c10::kStrided && (tensor.is_cpu() || IsVirtualNpu(tensor));
  };
  return host_backed(self) && host_backed(from);
}

// Whether `op` returns something other than tensors (item()'s _local_scalar_dense, is_nonzero, equal): its result
// is read from the device's memory onto the host, as a copy to the CPU would be.
bool ReturnsHostValue(const c10::OperatorHandle& op) {
  for (const c10::Argument& result : op.schema().returns()) {
    const c10::TypePtr& type = result.type();
    if (type->kind() != c10::TypeKind::TensorType && !type->isSubtypeOf(*c10::ListType::ofTensors())) return true;
  }
  return false;
}

void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  cpu_fallback_calls.fetch_add(1, std::memory_order_relaxed);
  if (fallback_depth == 0 && ReturnsHostValue(op)) device_to_host_copies.fetch_add(1, std::memory_order_relaxed);
  struct Depth {
    Depth() { ++fallback_depth; }
    ~Depth() { --fallback_depth; }
  } depth;
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(Empty));
  m.impl("empty_strided", TORCH_FN(EmptyStrided));
  m.impl("_copy_from", TORCH_FN(CopyFrom));
  m.impl("_copy_from_and_resize", TORCH_FN(CopyFromAndResize));
  m.impl("resize_", TORCH_FN(Resize));
  m.impl("as_strided", TORCH_FN(AsStrided));
  m.impl("view", TORCH_FN(View));
  m.impl("_reshape_alias", TORCH_FN(ReshapeAlias));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(SetStorage));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(HasCompatibleShallowCopyType));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(HasCompatibleShallowCopyType));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&CpuFallback>()); }

}  // namespace

int64_t CpuFallbackCalls() { return cpu_fallback_calls.load(std::memory_order_relaxed); }

int64_t DeviceToHostCopies() { return device_to_host_copies.load(std::memory_order_relaxed); }

}  // namespace virtual_npu
