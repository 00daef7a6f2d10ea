// Shared between the kit's two files (device_kit.cc: state, allocator, guard, hooks; kernels.cc: the operators). Not
// part of the kit's API.
#ifndef KILN_HAL_DEVICE_KIT_INTERNAL_H_
#define KILN_HAL_DEVICE_KIT_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "c10/core/Allocator.h"
#include "c10/core/StorageImpl.h"
#include "hal/device_kit/device.h"

namespace kiln::device_kit::internal {

// The registered device; null before Register. Set once, never reset.
Device* RegisteredDevice();

// Device `index`'s allocator (checked: 0 <= index < the device's count).
c10::Allocator* AllocatorFor(int index);

// Throws c10::Error unless `index` is one of the registered device's.
void CheckIndex(int index);

// Makes `storage` (on the registered device) `bytes` long: new memory from its allocator, the old bytes that fit
// copied over on the device. Throws c10::Error for a storage that is not resizable.
void ResizeStorageBytes(c10::StorageImpl* storage, size_t bytes);

// Registers the kernels and autocast's casts (kernels.cc). Called once, by Register.
void RegisterKernels();

// Runs one backward pass on device 0 (there must be one): "" when autograd works on the device, else why not. See
// Register's comment on LibTorch's autograd engine.
std::string ProbeAutograd();

extern std::atomic<int64_t> cpu_fallback_calls;
extern std::atomic<int64_t> device_to_host_copies;

}  // namespace kiln::device_kit::internal

#endif  // KILN_HAL_DEVICE_KIT_INTERNAL_H_
