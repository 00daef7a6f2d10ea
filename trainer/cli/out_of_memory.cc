#include "trainer/cli/out_of_memory.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "c10/util/Exception.h"

namespace kiln {
namespace {

std::string Mib(uint64_t bytes) { return absl::StrFormat("%.0f MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

bool IsOutOfMemory(const std::exception& error) {
  return dynamic_cast<const std::bad_alloc*>(&error) != nullptr ||
         dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr;
}

std::string OutOfMemoryMessage(absl::string_view doing, absl::string_view detail, uint64_t max_inflated_bytes,
                               uint64_t input_budget_bytes) {
  return absl::StrCat(
      "out of memory while ", doing, " (", detail, "), training stopped; each input is read within a bound of its ",
      "size (docs/reliability.md, \"Memory\"): a compressed data file or checkpoint inflates to at most ",
      "--max_inflated_mib (", Mib(max_inflated_bytes), "), and a data file, its index and its values to half of the ",
      "memory available (", Mib(input_budget_bytes), " now); to need less, lower --batch_size, the model's sizes or ",
      "--max_inflated_mib, read a large CSV file with --streaming, or give fit more memory (other processes, ulimit ",
      "-v)");
}

}  // namespace kiln
