#include "trainer/io/memory_budget.h"

#include <atomic>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kiln {
namespace {

// A "Key:   123 kB" line of a /proc file, in bytes; `otherwise` when absent.
uint64_t ProcValueBytes(const char* path, absl::string_view key, uint64_t otherwise) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t value = 0;
    if (fields.size() >= 2 && fields[0] == key && absl::SimpleAtoi(fields[1], &value)) {
      return fields.size() >= 3 && fields[2] == "kB" ? SaturatingMultiply(value, 1024) : value;
    }
  }
  return otherwise;
}

std::string Gib(uint64_t bytes) {
  if (bytes < (1ull << 30)) return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1ull << 20));
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
}

}  // namespace

uint64_t SaturatingMultiply(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return std::numeric_limits<uint64_t>::max();
  return a * b;
}

uint64_t AvailableMemoryBytes() {
  uint64_t available = ProcValueBytes("/proc/meminfo", "MemAvailable:", std::numeric_limits<uint64_t>::max());
  rlimit limit;
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const uint64_t used = ProcValueBytes("/proc/self/status", "VmSize:", 0);
    const uint64_t room = limit.rlim_cur > used ? limit.rlim_cur - used : 0;
    available = std::min<uint64_t>(available, room);
  }
  return available;
}

uint64_t InputMemoryBudget() { return AvailableMemoryBytes() / 2; }

absl::Status CheckInputFits(uint64_t bytes, absl::string_view what, absl::string_view fix) {
  const uint64_t budget = InputMemoryBudget();
  if (bytes <= budget) return absl::OkStatus();
  const std::string needed = bytes == std::numeric_limits<uint64_t>::max() ? "more bytes than 64 bits count"
                                                                            : Gib(bytes);
  return absl::ResourceExhaustedError(absl::StrCat(what, " needs ", needed, ", more than the ", Gib(budget),
                                                   " (half of the memory available) an input may take; ", fix));
}

namespace {
std::atomic<uint64_t> max_inflated_bytes{kDefaultMaxInflatedBytes};
}  // namespace

uint64_t MaxInflatedBytes() { return max_inflated_bytes.load(std::memory_order_relaxed); }

void SetMaxInflatedBytes(uint64_t bytes) { max_inflated_bytes.store(bytes, std::memory_order_relaxed); }

absl::Status InflatesTooFar(absl::string_view what) {
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " inflates to more than ", Gib(MaxInflatedBytes()),
      ", the most Kiln inflates from one compressed input (a guard against compression bombs); if the file is "
      "yours, raise the limit with --max_inflated_mib (kiln::SetMaxInflatedBytes in a program)"));
}

absl::Status InputExceeds(absl::string_view what, uint64_t budget, absl::string_view fix) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " passes ", Gib(budget), ", the most (half of the memory available) an input may take; ", fix));
}

}  // namespace kiln
