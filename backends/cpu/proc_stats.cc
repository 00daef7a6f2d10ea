#include "backends/cpu/proc_stats.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::cpu {
namespace {

// Finds "Key:   123 kB" in a /proc key-value file and returns 123 * 1024 (or 123 when there is no unit).
absl::StatusOr<int64_t> FindBytes(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t value = 0;
    if (parts.empty() || !absl::SimpleAtoi(parts[0], &value)) break;
    const bool kilobytes = parts.size() > 1 && parts[1] == "kB";
    return kilobytes ? value * 1024 : value;
  }
  return absl::NotFoundError(absl::StrCat("no readable '", key, ":' line"));
}

}  // namespace

absl::StatusOr<MachineMemory> ParseMeminfo(absl::string_view meminfo) {
  absl::StatusOr<int64_t> total = FindBytes(meminfo, "MemTotal");
  if (!total.ok()) return total.status();
  absl::StatusOr<int64_t> available = FindBytes(meminfo, "MemAvailable");
  if (!available.ok()) return available.status();
  return MachineMemory{*total, *available};
}

absl::StatusOr<int64_t> ParseResidentBytes(absl::string_view status) { return FindBytes(status, "VmRSS"); }

absl::StatusOr<int64_t> ParseCpuTicks(absl::string_view stat) {
  // The second field, the command name, is in parentheses and may contain spaces: count fields after the last ')'.
  const size_t paren = stat.rfind(')');
  if (paren == absl::string_view::npos) return absl::InvalidArgumentError("no ')' in /proc/self/stat");
  std::vector<absl::string_view> fields = absl::StrSplit(stat.substr(paren + 1), ' ', absl::SkipWhitespace());
  // After ')': state is field 3, so utime (field 14) and stime (field 15) are at offsets 11 and 12.
  int64_t utime = 0;
  int64_t stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InvalidArgumentError("/proc/self/stat has no utime and stime fields");
  }
  return utime + stime;
}

absl::StatusOr<std::string> ReadProcFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

}  // namespace kiln::cpu
