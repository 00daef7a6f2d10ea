// The virtual NPU's operators, registered with LibTorch's dispatcher for the PrivateUse1 keys when this library is
// linked (kernels.cc).
//
// The device implements only what LibTorch cannot do for it: creating tensors in its memory (empty,
// empty_strided), copying between it and the host (_copy_from, _copy_from_and_resize), resizing (resize_), the view
// operators (as_strided, view, _reshape_alias), which must share storage and so cannot be computed elsewhere,
// set_ on a storage (used when tensors are saved), and _has_compatible_shallow_copy_type, which lets
// `module->to(device)` swap a parameter's data in place. Every other operator goes through LibTorch's boxed CPU
// fallback: its tensor arguments are copied to the CPU, the CPU kernel runs, and the results are copied back.
// That is slow, and exact: results are the CPU's, bit for bit.
//
// Thread-safety: the kernels are as thread-safe as LibTorch's CPU kernels; the counters are atomic.
#ifndef VIRTUAL_NPU_KERNELS_H_
#define VIRTUAL_NPU_KERNELS_H_

#include <cstdint>

namespace virtual_npu {

// How many operator calls went through the CPU fallback in this process.
int64_t CpuFallbackCalls();

// How many times the host read the device's memory in this process: a copy from the device to the CPU (a .to(cpu),
// a checkpoint's snapshot), or an operator whose result is not a tensor (item()'s _local_scalar_dense, is_nonzero).
// On a real device each is a wait for the device to finish what was queued. The CPU fallback's own copies, which
// are how this device computes, do not count.
int64_t DeviceToHostCopies();

}  // namespace virtual_npu

#endif  // VIRTUAL_NPU_KERNELS_H_
