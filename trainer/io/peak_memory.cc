#include "trainer/io/peak_memory.h"

#include <malloc.h>

#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

// A "Vm...:  1234 kB" line of /proc/self/status, in bytes.
absl::StatusOr<uint64_t> StatusBytes(absl::string_view field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, field) || !absl::ConsumePrefix(&rest, ":")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    uint64_t kib = 0;
    if (absl::ConsumeSuffix(&rest, "kB") && absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib)) {
      return kib * 1024;
    }
  }
  return absl::FailedPreconditionError(absl::StrCat("/proc/self/status has no readable ", field, " line"));
}

}  // namespace

absl::StatusOr<uint64_t> PeakResidentGrowth(const std::function<void()>& run) {
  // Heap that earlier code freed but malloc kept would be reused unseen: given back first, so that what `run`
  // allocates is counted as it is touched.
  malloc_trim(0);
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";  // Resets the high-water mark to the resident set now.
    clear.flush();
    if (!clear) {
      return absl::FailedPreconditionError("cannot write /proc/self/clear_refs to reset the peak resident set");
    }
  }
  absl::StatusOr<uint64_t> before = StatusBytes("VmRSS");
  if (!before.ok()) return before.status();
  absl::StatusOr<uint64_t> reset = StatusBytes("VmHWM");
  if (!reset.ok()) return reset.status();
  if (*reset > *before + (uint64_t{1} << 20)) {
    return absl::FailedPreconditionError("the kernel did not reset the peak resident set (VmHWM)");
  }
  run();
  absl::StatusOr<uint64_t> peak = StatusBytes("VmHWM");
  if (!peak.ok()) return peak.status();
  return *peak > *before ? *peak - *before : 0;
}

uint64_t SanitizerMemoryFactor() {
#if defined(__SANITIZE_ADDRESS__)
  return 4;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return 4;
#else
  return 1;
#endif
#else
  return 1;
#endif
}

}  // namespace kiln
