#include "backends/cpu/proc_stats.h"

#include "gtest/gtest.h"

namespace kiln::cpu {
namespace {

TEST(ProcStatsTest, ParsesMeminfo) {
  absl::StatusOr<MachineMemory> memory = ParseMeminfo(
      "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   12288000 kB\nBuffers: 1 kB\n");
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->total_bytes, 24576000LL * 1024);
  EXPECT_EQ(memory->available_bytes, 12288000LL * 1024);
  EXPECT_FALSE(ParseMeminfo("MemTotal: 10 kB\n").ok());
  EXPECT_FALSE(ParseMeminfo("MemTotal: lots kB\nMemAvailable: 1 kB\n").ok());
}

TEST(ProcStatsTest, ParsesResidentSize) {
  EXPECT_EQ(*ParseResidentBytes("Name:\tfit\nVmPeak:\t  9 kB\nVmRSS:\t    2048 kB\n"), 2048 * 1024);
  EXPECT_FALSE(ParseResidentBytes("Name:\tfit\n").ok());
}

TEST(ProcStatsTest, ParsesCpuTicksEvenWithSpacesInTheName) {
  // Fields after ')': state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
  EXPECT_EQ(*ParseCpuTicks("42 (my (odd) prog) R 1 42 42 0 -1 4194304 100 0 0 0 250 17 0 0 20 0 1"), 267);
  EXPECT_FALSE(ParseCpuTicks("42 (x) R 1 2").ok());
  EXPECT_FALSE(ParseCpuTicks("no parenthesis").ok());
}

TEST(ProcStatsTest, ReadsRealFilesAndNamesMissingOnes) {
  EXPECT_TRUE(ReadProcFile("/proc/self/stat").ok());
  absl::StatusOr<std::string> missing = ReadProcFile("/proc/self/no-such-file");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/proc/self/no-such-file"), absl::string_view::npos);
}

}  // namespace
}  // namespace kiln::cpu
