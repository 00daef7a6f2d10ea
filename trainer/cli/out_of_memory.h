// What fit says when memory runs out past every input check: an allocation that fails while it trains, or while it
// reads something whose size the checks accepted. Each reader of outside input has a stated memory bound
// (docs/reliability.md, "Memory"), so this names what ran out, what fit was doing, and the limits that bound what
// the inputs may take, never "internal error": the fix is the user's (a smaller input, model or batch, more memory).
//
// Thread-safety: pure functions. Never throw, except std::bad_alloc from building the message itself.
#ifndef KILN_TRAINER_CLI_OUT_OF_MEMORY_H_
#define KILN_TRAINER_CLI_OUT_OF_MEMORY_H_

#include <cstdint>
#include <exception>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln {

// Whether `error` says that memory ran out: std::bad_alloc (operator new, the standard library's containers) or
// LibTorch's c10::OutOfMemoryError (its CPU allocator's "can't allocate memory", a device's allocator).
bool IsOutOfMemory(const std::exception& error);

// fit's one line for it: "out of memory while <doing> (<detail>), training stopped; ..." with the limits in force:
// `max_inflated_bytes` (--max_inflated_mib) and `input_budget_bytes` (half of the memory available now, what a data
// file, its index and its values may each take), and what to lower.
std::string OutOfMemoryMessage(absl::string_view doing, absl::string_view detail, uint64_t max_inflated_bytes,
                               uint64_t input_budget_bytes);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_OUT_OF_MEMORY_H_
