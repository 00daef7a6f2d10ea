// The kit's operators for PrivateUse1: what LibTorch cannot do without a device (creating tensors in its memory,
// copying between it and the host, resizing, the views, which share storage, set_ on a storage, and
// _has_compatible_shallow_copy_type, which lets module->to(device) swap a parameter's data in place), LibTorch's CPU
// fallback for every other operator, and autocast's casts.
//
// Copies move bytes only through Device::Copy, so they hold for memory the host cannot address. A copy between
// layouts or dtypes stages the device side through a host buffer spanning the tensor's elements in its storage, and
// the host copy (LibTorch's CPU copy_) converts, broadcasts and restrides.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "ATen/EmptyTensor.h"
#include "ATen/autocast_mode.h"
#include "ATen/core/Tensor.h"
#include "ATen/native/CPUFallback.h"
#include "ATen/native/Resize.h"
#include "ATen/ops/_reshape_alias_native.h"
#include "ATen/ops/as_strided_native.h"
#include "ATen/ops/empty.h"
#include "ATen/ops/ones.h"
#include "ATen/ops/set_native.h"
#include "ATen/ops/view_native.h"
#include "c10/core/SymIntArrayRef.h"
#include "hal/device_kit/device_kit.h"
#include "hal/device_kit/internal.h"
#include "torch/library.h"

namespace kiln::device_kit::internal {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// How deep this thread is in the CPU fallback, whose own copies to and from the host are how an operator without a
// kernel computes, not reads of the device's memory by the host.
thread_local int fallback_depth = 0;

bool OnDevice(const at::Tensor& tensor) { return tensor.device().type() == kType; }

c10::IntArrayRef Ints(c10::SymIntArrayRef sizes) { return c10::asIntArrayRefSlow(sizes, __FILE__, __LINE__); }

// The device a factory function allocates on: the one asked for, else the current one.
int TargetIndex(std::optional<c10::Device> device) {
  const int index = device.has_value() && device->has_index() ? device->index() : CurrentDevice();
  CheckIndex(index);
  return index;
}

void CheckFactoryOptions(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, PrivateUse1Name(), " tensors must be strided, not ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "pin_memory is for host tensors; ", PrivateUse1Name(),
              " tensors cannot be pinned");
}

at::Tensor Empty(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<c10::Layout> layout,
                 std::optional<c10::Device> device, std::optional<bool> pin_memory,
                 std::optional<c10::MemoryFormat> memory_format) {
  CheckFactoryOptions(layout, pin_memory);
  return at::detail::empty_generic(Ints(size), AllocatorFor(TargetIndex(device)), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor EmptyStrided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride, std::optional<at::ScalarType> dtype,
                        std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                        std::optional<bool> pin_memory) {
  CheckFactoryOptions(layout, pin_memory);
  return at::detail::empty_strided_generic(Ints(size), Ints(stride), AllocatorFor(TargetIndex(device)),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype));
}

// The elements a tensor spans in its storage, from its first (its data_ptr): 1 + sum of (size - 1) * stride.
int64_t Span(const at::Tensor& tensor) {
  if (tensor.numel() == 0) return 0;
  int64_t span = 1;
  for (int64_t dim = 0; dim < tensor.dim(); ++dim) {
    TORCH_CHECK(tensor.stride(dim) >= 0, PrivateUse1Name(), ": cannot copy a tensor with a negative stride");
    span += (tensor.size(dim) - 1) * tensor.stride(dim);
  }
  return span;
}

// A device tensor's elements on the host: `buffer` holds the bytes it spans, `view` sees them with its sizes and
// strides.
struct Staged {
  at::Tensor buffer;
  at::Tensor view;
};

Staged ReadToHost(const at::Tensor& tensor) {
  const int64_t span = Span(tensor);
  at::Tensor buffer = at::empty({span}, at::TensorOptions().dtype(tensor.scalar_type()).device(at::kCPU));
  RegisteredDevice()->Copy(buffer.data_ptr(), tensor.const_data_ptr(), span * tensor.element_size(),
                           CopyKind::kDeviceToHost, tensor.device().index());
  return Staged{buffer, buffer.as_strided(tensor.sizes(), tensor.strides(), 0)};
}

// A host tensor laid out as `device_tensor` is in its storage, to be written back with WriteBack: contiguous when
// it is (nothing to read first), else its current bytes, so that the gaps between its elements are written back
// unchanged.
Staged HostImage(const at::Tensor& device_tensor) {
  if (device_tensor.is_contiguous()) {
    at::Tensor buffer = at::empty(device_tensor.sizes(),
                                  at::TensorOptions().dtype(device_tensor.scalar_type()).device(at::kCPU));
    return Staged{buffer, buffer};
  }
  return ReadToHost(device_tensor);
}

void WriteBack(const at::Tensor& device_tensor, const Staged& image) {
  RegisteredDevice()->Copy(device_tensor.data_ptr(), image.buffer.const_data_ptr(), image.buffer.nbytes(),
                           CopyKind::kHostToDevice, device_tensor.device().index());
}

// Whether a copy is one run of bytes: same dtype and sizes, both contiguous.
bool Direct(const at::Tensor& from, const at::Tensor& to) {
  return from.scalar_type() == to.scalar_type() && from.sizes() == to.sizes() && from.is_contiguous() &&
         to.is_contiguous();
}

// self -> dst, where either is on the device and the other on it or on the host. Broadcasting and dtype conversion
// are the host copy's.
at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.numel() == 0 || dst.numel() == 0) return dst;
  TORCH_CHECK((OnDevice(self) || self.is_cpu()) && (OnDevice(dst) || dst.is_cpu()), PrivateUse1Name(),
              " copies between itself and the CPU only, not from ", self.device(), " to ", dst.device());
  Device* device = RegisteredDevice();
  if (OnDevice(self) && dst.is_cpu()) {
    if (fallback_depth == 0) device_to_host_copies.fetch_add(1, std::memory_order_relaxed);
    if (Direct(self, dst)) {
      device->Copy(dst.data_ptr(), self.const_data_ptr(), self.nbytes(), CopyKind::kDeviceToHost,
                   self.device().index());
    } else {
      dst.copy_(ReadToHost(self).view);
    }
    return dst;
  }
  if (self.is_cpu()) {
    if (Direct(self, dst)) {
      device->Copy(dst.data_ptr(), self.const_data_ptr(), self.nbytes(), CopyKind::kHostToDevice,
                   dst.device().index());
    } else {
      const Staged image = HostImage(dst);
      image.view.copy_(self);
      WriteBack(dst, image);
    }
    return dst;
  }
  if (Direct(self, dst) && self.device() == dst.device()) {
    device->Copy(dst.data_ptr(), self.const_data_ptr(), self.nbytes(), CopyKind::kDeviceToDevice,
                 dst.device().index());
    return dst;
  }
  const Staged image = HostImage(dst);
  image.view.copy_(ReadToHost(self).view);
  WriteBack(dst, image);
  return dst;
}

const at::Tensor& Resize(const at::Tensor& self, c10::SymIntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, Ints(size), /*stride=*/std::nullopt, /*resize_storage=*/false);
  if (impl->numel() > 0) {
    const size_t needed =
        at::detail::computeStorageNbytesContiguous(impl->sizes(), impl->dtype().itemsize(), impl->storage_offset());
    const c10::Storage& storage = impl->unsafe_storage();
    TORCH_CHECK(storage, PrivateUse1Name(), ": cannot resize a tensor without storage");
    if (needed > storage.nbytes()) ResizeStorageBytes(storage.unsafeGetStorageImpl(), needed);
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
                     std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset.has_value()) offset = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, Ints(size), Ints(stride), offset);
}

at::Tensor View(const at::Tensor& self, c10::SymIntArrayRef size) { return at::native::view(self, Ints(size)); }

at::Tensor ReshapeAlias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, Ints(size), Ints(stride));
}

at::Tensor& SetStorage(at::Tensor& self, c10::Storage source, c10::SymInt storage_offset, c10::SymIntArrayRef size,
                       c10::SymIntArrayRef stride) {
  // LibTorch's CPU implementation checks that the storage is on self's device and is otherwise device-neutral.
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset.expect_int(), Ints(size), Ints(stride));
}

// module->to(device) replaces each parameter's data in place (set_data), which LibTorch allows only between tensor
// types it knows to be compatible; dense strided tensors on the host and on the device are (as for CUDA).
bool HasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](const at::Tensor& tensor) {
    return tensor.layout() == c10::kStrided && (tensor.is_cpu() || OnDevice(tensor));
  };
  return dense(self) && dense(from);
}

// Whether `op` returns something other than tensors (item()'s _local_scalar_dense, is_nonzero, equal): its result is
// read from the device's memory onto the host, as a copy to the CPU would be.
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

torch::Library& NewLibrary(torch::Library::Kind kind, const char* ns, c10::DispatchKey key) {
  // Registrations last as long as their Library: these live as long as the process.
  static auto* const libraries = new std::vector<std::unique_ptr<torch::Library>>();
  libraries->push_back(std::make_unique<torch::Library>(kind, ns, key, __FILE__, __LINE__));
  return *libraries->back();
}

}  // namespace

void RegisterKernels() {
  torch::Library& kernels = NewLibrary(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1);
  kernels.impl("empty.memory_format", TORCH_FN(Empty));
  kernels.impl("empty_strided", TORCH_FN(EmptyStrided));
  kernels.impl("_copy_from", TORCH_FN(CopyFrom));
  kernels.impl("_copy_from_and_resize", TORCH_FN(CopyFromAndResize));
  kernels.impl("resize_", TORCH_FN(Resize));
  kernels.impl("as_strided", TORCH_FN(AsStrided));
  kernels.impl("view", TORCH_FN(View));
  kernels.impl("_reshape_alias", TORCH_FN(ReshapeAlias));
  kernels.impl("set_.source_Storage_storage_offset", TORCH_FN(SetStorage));
  kernels.impl("_has_compatible_shallow_copy_type", TORCH_FN(HasCompatibleShallowCopyType));
  NewLibrary(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradPrivateUse1)
      .impl("_has_compatible_shallow_copy_type", TORCH_FN(HasCompatibleShallowCopyType));
  NewLibrary(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1)
      .fallback(torch::CppFunction::makeFromBoxedFunction<&CpuFallback>());

  // bf16-mixed and 16-mixed: LibTorch has autocast for out-of-tree devices and leaves the casting policy to the
  // device; these are the lists LibTorch's accelerators share (ATen/autocast_mode.h): matrix products and
  // convolutions in the lower precision, reductions, losses and other precision-sensitive operators in float32,
  // mixed-type operators promoted to the widest input.
  NewLibrary(torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1)
      .fallback(torch::CppFunction::makeFallthrough());
  torch::Library& m = NewLibrary(torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1);
  using at::autocast::CastPolicy;
#define KILN_KIT_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define KILN_KIT_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define KILN_KIT_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define KILN_KIT_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(KILN_KIT_LOWER)
  AT_FORALL_FP32(KILN_KIT_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(KILN_KIT_FP32_SET_OPT_DTYPE)
  AT_FORALL_PROMOTE(KILN_KIT_PROMOTE)
#undef KILN_KIT_LOWER
#undef KILN_KIT_FP32
#undef KILN_KIT_FP32_SET_OPT_DTYPE
#undef KILN_KIT_PROMOTE
}

std::string ProbeAutograd() {
  try {
    c10::InferenceMode inference(false);
    c10::AutoGradMode grad(true);
    at::Tensor probe = at::ones({1}, at::TensorOptions().device(c10::Device(kType, 0))).requires_grad_();
    probe.sum().backward();
    return "";
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  }
}

}  // namespace kiln::device_kit::internal
