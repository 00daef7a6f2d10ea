// LibTorch's CUDA caching allocator, as far as the CUDA backend needs it: statistics and releasing cached memory.
//
// The allocator lives in libc10_cuda, which only a CUDA-enabled LibTorch has. The code that calls it is compiled
// only in a build with KILN_WITH_CUDA defined (`bazel build --config=cuda`, see docs/backends.md); in every other
// build these functions report that the allocator is not built in, and EmptyCache has nothing to release.
//
// Thread-safety: the allocator is thread-safe; so are these functions. None throws: LibTorch's exceptions are
// caught and returned as errors.
#ifndef KILN_BACKENDS_CUDA_CACHING_ALLOCATOR_H_
#define KILN_BACKENDS_CUDA_CACHING_ALLOCATOR_H_

#include "absl/status/status.h"
#include "hal/accelerator.h"

namespace kiln::cuda {

// True in a build with KILN_WITH_CUDA.
bool CachingAllocatorBuiltIn();

// Adds the caching allocator's statistics of CUDA device `device_index` to `stats` (torch.cuda.memory_stats' "all"
// pool), under these keys:
//   allocator_allocated_bytes, allocator_allocated_peak_bytes   memory held by tensors
//   allocator_reserved_bytes, allocator_reserved_peak_bytes     memory reserved from CUDA (cached included)
//   allocator_active_bytes                                      memory in active blocks
//   allocator_alloc_retries                                     cudaMalloc failures that forced a cache flush
//   allocator_ooms                                              out-of-memory errors after a flush
// Initialises LibTorch's CUDA state on first use (as torch.cuda.memory_stats does). Unimplemented without
// KILN_WITH_CUDA; Internal with LibTorch's message when it refuses. Adds nothing on error.
absl::Status AddCachingAllocatorStats(int device_index, DeviceStats* stats);

// Releases every cached block that no tensor uses (torch.cuda.empty_cache()). OK, doing nothing, without
// KILN_WITH_CUDA. Internal with LibTorch's message when it refuses.
absl::Status EmptyCache();

}  // namespace kiln::cuda

#endif  // KILN_BACKENDS_CUDA_CACHING_ALLOCATOR_H_
