// The virtual NPU's memory: one allocator per device, each counting the bytes it has handed out.
//
// Memory is host memory (aligned to 64 bytes), so the CPU kernels that compute for the device can read and write it
// directly. Each device's allocator counts the bytes in use (requested sizes, not rounded), the peak of that since
// the last ResetPeakMemoryStats, and the blocks live and ever allocated. These counters are what the accelerator
// reports as device statistics (virtual_npu_accelerator.h).
//
// Thread-safety: allocation, release and the counters are lock-free atomics; any thread may allocate on any device.
// Allocators live for the whole process.
#ifndef VIRTUAL_NPU_ALLOCATOR_H_
#define VIRTUAL_NPU_ALLOCATOR_H_

#include <cstdint>

#include "c10/core/Allocator.h"
#include "c10/core/Device.h"

namespace virtual_npu {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // Bytes in use now.
  int64_t peak_allocated_bytes = 0;  // Most bytes in use at once since the last ResetPeakMemoryStats.
  int64_t active_blocks = 0;         // Allocations not yet freed.
  int64_t total_blocks = 0;          // Allocations ever made (never reset).
};

// The allocator of device `index` (0 <= index < kMaxDevices; checked). Its DataPtrs carry the device
// privateuseone:<index>. Never null.
c10::Allocator* DeviceAllocator(c10::DeviceIndex index);

// The counters of device `index` (checked as above).
MemoryStats GetMemoryStats(c10::DeviceIndex index);

// Sets device `index`'s peak to the bytes in use now.
void ResetPeakMemoryStats(c10::DeviceIndex index);

}  // namespace virtual_npu

#endif  // VIRTUAL_NPU_ALLOCATOR_H_
