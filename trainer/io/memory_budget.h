// How much memory an input may take when Kiln loads it whole (a CSV file, its tensors, the synthetic task), checked
// before the allocation: asking for more than the machine can give would end in std::bad_alloc (an abort, where fit
// promises an error) or, with Linux's overcommit, in the OOM killer midway through the read.
#ifndef KILN_TRAINER_IO_MEMORY_BUDGET_H_
#define KILN_TRAINER_IO_MEMORY_BUDGET_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kiln {

// Bytes this process may still allocate as far as it can tell: the smaller of /proc/meminfo's MemAvailable and
// what the address-space limit (ulimit -v) leaves above the process's current size. Never throws.
uint64_t AvailableMemoryBytes();

// The most one input may take: half of AvailableMemoryBytes, leaving the other half for the copies parsing makes
// (text to tensors) and for training itself.
uint64_t InputMemoryBudget();

// OK when `bytes` fit in InputMemoryBudget; otherwise ResourceExhausted: "<what> needs 12.0 GiB, more than the
// 5.8 GiB (half of the memory available) an input may take; <fix>".
absl::Status CheckInputFits(uint64_t bytes, absl::string_view what, absl::string_view fix);

// For an input found too large while it is read: "<what> passes 5.8 GiB, the most (half of the memory available) an
// input may take; <fix>", with `budget` the InputMemoryBudget the read was checked against.
absl::Status InputExceeds(absl::string_view what, uint64_t budget, absl::string_view fix);

// The most one compressed input may inflate to: a gzip data file (.csv.gz), a deflated record of a checkpoint. A
// deflate stream can grow a thousandfold, so a small file could otherwise fill memory or keep the parser busy for
// minutes before any other check sees it (a 3 MB .csv.gz inflated to 3 GiB). 1 GiB unless SetMaxInflatedBytes
// (fit's --max_inflated_mib) says otherwise. Thread-safe.
inline constexpr uint64_t kDefaultMaxInflatedBytes = uint64_t{1} << 30;
uint64_t MaxInflatedBytes();
void SetMaxInflatedBytes(uint64_t bytes);

// For a compressed input that inflates past MaxInflatedBytes: "<what> inflates to more than 1.0 GiB, the most Kiln
// inflates from one compressed input; <how to raise it>".
absl::Status InflatesTooFar(absl::string_view what);

// a * b, or UINT64_MAX when that overflows: for sizes that are checked against the budget next.
uint64_t SaturatingMultiply(uint64_t a, uint64_t b);

}  // namespace kiln

#endif  // KILN_TRAINER_IO_MEMORY_BUDGET_H_
