// Readers for the Linux /proc files behind the CPU accelerator's device statistics. Parsing is separate from
// reading so that tests can feed recorded file contents.
//
// Thread-safety: pure functions.
#ifndef KILN_BACKENDS_CPU_PROC_STATS_H_
#define KILN_BACKENDS_CPU_PROC_STATS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::cpu {

struct MachineMemory {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;
};

// From /proc/meminfo text: MemTotal and MemAvailable (kB in the file).
absl::StatusOr<MachineMemory> ParseMeminfo(absl::string_view meminfo);

// From /proc/self/status text: VmRSS in bytes.
absl::StatusOr<int64_t> ParseResidentBytes(absl::string_view status);

// From /proc/self/stat text: user + system CPU time of the process, in clock ticks.
absl::StatusOr<int64_t> ParseCpuTicks(absl::string_view stat);

// Reads a whole (small) file; NotFound/PermissionDenied name the path.
absl::StatusOr<std::string> ReadProcFile(const std::string& path);

}  // namespace kiln::cpu

#endif  // KILN_BACKENDS_CPU_PROC_STATS_H_
