// The peak memory a piece of code takes, as the kernel counts it, for the tests that hold each reader of outside
// input to the memory bound docs/reliability.md states for it ("Memory").
//
// What is measured is the resident set's high-water mark (VmHWM), reset before the code runs (writing 5 to
// /proc/self/clear_refs, Linux 4.0 and later), less the resident set then: every page the code touched and kept at
// its peak, whoever allocated it (LibTorch's allocator, malloc, mmap, a library's code), freed or not by the end
// (free heap that malloc kept is given back first, malloc_trim, so that reusing it does not hide an allocation).
// So it is an upper bound of what the code itself allocated at once: the comparison with a stated bound is never
// too lenient. Not for timing, and not exact to the page: run what is measured at a size where the bound's
// margin (its constant) is small beside what a defect would take.
//
// Thread-safety: measures the whole process; run nothing else meanwhile.
#ifndef KILN_TRAINER_IO_PEAK_MEMORY_H_
#define KILN_TRAINER_IO_PEAK_MEMORY_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"

namespace kiln {

// The bytes by which the process's resident set grew at most while `run` ran. FailedPrecondition, saying why, where
// the kernel does not let the process reset its high-water mark.
absl::StatusOr<uint64_t> PeakResidentGrowth(const std::function<void()>& run);

// What a stated bound is multiplied by in this build: 1, or 4 under AddressSanitizer (--config=asan), where every
// allocation carries red zones and freed memory waits in a quarantine before it is reused, so the resident set of the
// same code grows by more than the code allocates. The bounds are stated, and defects measured, for the real build.
uint64_t SanitizerMemoryFactor();

}  // namespace kiln

#endif  // KILN_TRAINER_IO_PEAK_MEMORY_H_
