#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "hal/accelerator.h"
#include "nlohmann/json.hpp"
#include "trainer/profilers/advanced_profiler.h"
#include "trainer/profilers/profiler.h"
#include "trainer/profilers/pytorch_profiler.h"
#include "trainer/profilers/simple_profiler.h"

namespace kiln {
namespace {

std::string TempDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void Act(Profiler& profiler, const std::string& name, std::chrono::microseconds sleep = std::chrono::microseconds(0)) {
  ProfileAction action(&profiler, name);
  if (sleep.count() > 0) std::this_thread::sleep_for(sleep);
}

// Lightning formats each number with Python's format(x, ".5"); these are Python 3's answers.
TEST(PythonFloat5, MatchesPythonsFormat) {
  EXPECT_EQ(PythonFloat5(0.0024002), "0.0024002");
  EXPECT_EQ(PythonFloat5(1.0), "1.0");
  EXPECT_EQ(PythonFloat5(4.185e-05), "4.185e-05");
  EXPECT_EQ(PythonFloat5(123456.0), "1.2346e+05");
  EXPECT_EQ(PythonFloat5(100.0), "100.0");
  EXPECT_EQ(PythonFloat5(0.1234567), "0.12346");
}

TEST(SimpleProfiler, CountsEveryCallAndPrintsLightningsTable) {
  SimpleProfiler profiler;
  ASSERT_TRUE(profiler.setup({.stage = "fit"}).ok());
  for (int i = 0; i < 3; ++i) {
    ProfileAction outer(&profiler, "run_training_batch");
    Act(profiler, "[LightningModule]MyModel.on_train_batch_start");
    Act(profiler, "[Strategy]SingleDeviceStrategy.training_step", std::chrono::microseconds(2000));
  }
  Act(profiler, "run_training_epoch");
  ASSERT_EQ(profiler.actions().size(), 4u);
  EXPECT_EQ(profiler.actions()[0].name, "[LightningModule]MyModel.on_train_batch_start");
  EXPECT_EQ(profiler.actions()[0].durations.size(), 3u);
  EXPECT_EQ(profiler.actions()[2].name, "run_training_batch");
  EXPECT_EQ(profiler.actions()[2].durations.size(), 3u);
  EXPECT_EQ(profiler.actions()[3].durations.size(), 1u);

  const std::string report = profiler.summary();
  std::vector<std::string> lines = absl::StrSplit(report, '\n');
  ASSERT_GE(lines.size(), 12u) << report;
  EXPECT_EQ(lines[0], "FIT Profiler Report");
  EXPECT_EQ(lines[1], "");
  // Lightning's rule is as long as the header with its tabs expanded, plus one.
  const std::string& header = lines[3];
  EXPECT_TRUE(absl::StartsWith(header, "|  Action")) << header;
  for (const char* column : {"Mean duration (s)", "Num calls", "Total time (s)", "Percentage %"}) {
    EXPECT_TRUE(absl::StrContains(header, column)) << column;
  }
  size_t expanded = 0;
  for (char c : header) expanded = c == '\t' ? (expanded / 8 + 1) * 8 : expanded + 1;
  EXPECT_EQ(lines[2], std::string(expanded + 1, '-'));
  EXPECT_EQ(lines[4], lines[2]);
  EXPECT_TRUE(absl::StartsWith(lines[5], "|  Total")) << lines[5];
  EXPECT_TRUE(absl::StrContains(lines[5], "|  10 ")) << lines[5];  // 3 + 3 + 3 + 1 calls.
  // Sorted by percentage: the batch holds the step, which holds the sleep.
  EXPECT_TRUE(absl::StartsWith(lines[7], "|  run_training_batch")) << report;
  EXPECT_TRUE(absl::StartsWith(lines[8], "|  [Strategy]SingleDeviceStrategy.training_step")) << report;
  std::vector<std::string> cells = absl::StrSplit(lines[8], '|');
  ASSERT_GE(cells.size(), 6u);
  EXPECT_EQ(std::string(absl::StripAsciiWhitespace(cells[3])), "3");
}

TEST(SimpleProfiler, ANestedStartOfTheSameActionIsTimedOnce) {
  SimpleProfiler profiler;
  profiler.start("save_checkpoint");
  profiler.start("save_checkpoint");
  profiler.stop("save_checkpoint");
  profiler.stop("save_checkpoint");
  profiler.stop("never_started");
  ASSERT_EQ(profiler.actions().size(), 1u);
  EXPECT_EQ(profiler.actions()[0].durations.size(), 1u);
}

TEST(Profiler, FileNamesAreLightnings) {
  const std::string dir = TempDir("names");
  SimpleProfiler one(dir, "perf");
  ASSERT_TRUE(one.setup({.stage = "fit"}).ok());
  Act(one, "a");
  ASSERT_TRUE(one.describe().ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/fit-perf.txt"));

  SimpleProfiler ranked(dir, "per/f");  // Lightning makes '/' a '_'.
  ASSERT_TRUE(ranked.setup({.stage = "fit", .local_rank = 1}).ok());
  Act(ranked, "a");
  ASSERT_TRUE(ranked.describe().ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/fit-per_f-1.txt"));

  // dirpath defaults to the run's log_dir.
  SimpleProfiler defaulted("", "perf");
  ASSERT_TRUE(defaulted.setup({.stage = "test", .log_dir = dir + "/logs"}).ok());
  Act(defaulted, "a");
  ASSERT_TRUE(defaulted.describe().ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/logs/test-perf.txt"));
}

TEST(Profiler, DescribeAppendsAsLightningDoes) {
  const std::string dir = TempDir("append");
  SimpleProfiler profiler(dir, "perf");
  ASSERT_TRUE(profiler.setup({.stage = "fit"}).ok());
  Act(profiler, "first");
  ASSERT_TRUE(profiler.describe().ok());
  const std::string once = Read(dir + "/fit-perf.txt");
  EXPECT_TRUE(absl::StrContains(once, "|  first")) << once;
  ASSERT_TRUE(profiler.describe().ok());
  const std::string twice = Read(dir + "/fit-perf.txt");
  EXPECT_TRUE(absl::StartsWith(twice, once));
  EXPECT_GT(twice.size(), once.size());
  // Nothing but the report: no temporary left beside it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
}

TEST(MakeProfiler, NamesTheAcceptedOnes) {
  for (const std::string& name : ProfilerNames()) EXPECT_TRUE(MakeProfiler(name).ok()) << name;
  absl::StatusOr<std::unique_ptr<Profiler>> bad = MakeProfiler("xla");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* word : {"'xla'", "simple", "advanced", "pytorch"}) {
    EXPECT_TRUE(absl::StrContains(bad.status().message(), word)) << bad.status();
  }
}

TEST(ShortTypeName, DropsTheNamespaces) {
  EXPECT_EQ(ShortTypeName("kiln::Mlp"), "Mlp");
  EXPECT_EQ(ShortTypeName("MyModel"), "MyModel");
  EXPECT_EQ(ShortTypeName("a::b::Holder<std::vector<int>>"), "Holder<std::vector<int>>");
}

TEST(AdvancedProfiler, SplitsInclusiveAndExclusiveTime) {
  AdvancedProfiler profiler;
  ASSERT_TRUE(profiler.setup({.stage = "fit"}).ok());
  for (int i = 0; i < 2; ++i) {
    ProfileAction outer(&profiler, "run_training_batch");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Act(profiler, "[Strategy]SingleDeviceStrategy.backward", std::chrono::milliseconds(3));
    Act(profiler, "[LightningModule]MyModel.on_after_backward");
  }
  const AdvancedProfiler::Action* batch = profiler.Find("run_training_batch");
  const AdvancedProfiler::Action* backward = profiler.Find("[Strategy]SingleDeviceStrategy.backward");
  ASSERT_NE(batch, nullptr);
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ(batch->stats.calls, 2);
  EXPECT_EQ(backward->stats.calls, 2);
  EXPECT_GE(backward->stats.inclusive, 0.006);
  // The batch's own time excludes what was nested in it, exactly.
  double nested = 0;
  for (const auto& [name, stats] : batch->children) nested += stats.inclusive;
  EXPECT_NEAR(batch->stats.exclusive, batch->stats.inclusive - nested, 1e-9);
  EXPECT_GE(batch->stats.exclusive, 0.002);
  EXPECT_EQ(batch->children.at("[Strategy]SingleDeviceStrategy.backward").calls, 2);
  EXPECT_EQ(batch->children.at("[LightningModule]MyModel.on_after_backward").calls, 2);
  const std::string report = profiler.summary();
  EXPECT_TRUE(absl::StartsWith(report, "FIT Profiler Report\nProfile stats for: ")) << report;
  EXPECT_TRUE(absl::StrContains(report, "Profile stats for: run_training_batch\n")) << report;
  EXPECT_TRUE(absl::StrContains(report, "   ncalls  tottime  percall  cumtime  percall action")) << report;
  EXPECT_TRUE(absl::StrContains(report, "        2 ")) << report;
}

// An accelerator whose device reports two events of its own, inside the window it was asked to trace.
class TracingAccelerator final : public Accelerator {
 public:
  std::string name() const override { return "tracer"; }
  absl::StatusOr<std::vector<int>> ParseDevices(const Devices&) const override { return std::vector<int>{0}; }
  int AutoDeviceCount() const override { return 1; }
  absl::Status CheckAvailable() const override { return absl::OkStatus(); }
  std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const override {
    return std::vector<c10::Device>(indices.size(), c10::Device(c10::DeviceType::CPU));
  }
  absl::Status SetupDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::Status TeardownDevice(const LogicalDevice&) override { return absl::OkStatus(); }
  absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice&) const override { return DeviceStats{}; }
  std::string ProcessGroupBackend() const override { return "gloo"; }
  std::vector<Precision> SupportedPrecisions() const override { return {Precision::k32True}; }

  absl::Status StartDeviceTrace(const LogicalDevice& device) override {
    started_ns_ = NowNs();
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<DeviceTraceEvent>> StopDeviceTrace(const LogicalDevice& device) override {
    return std::vector<DeviceTraceEvent>{
        {.name = "tracer_kernel", .category = "kernel", .start_ns = started_ns_ + 1000, .duration_ns = 5000,
         .device_index = device.index},
        {.name = "Memcpy HtoD", .category = "gpu_memcpy", .start_ns = started_ns_ + 9000, .duration_ns = 2000,
         .device_index = device.index}};
  }
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  int64_t started_ns_ = 0;
};

TEST(PyTorchProfiler, WritesAChromeTraceWithTheRangesAndTheDevicesEvents) {
  const std::string dir = TempDir("trace");
  TracingAccelerator accelerator;
  PyTorchProfiler profiler(dir, "perf");
  LogicalDevice device{.accelerator = "tracer", .index = 1};
  ASSERT_TRUE(profiler.setup({.stage = "fit", .accelerator = &accelerator, .device = device}).ok());
  {
    ProfileAction step(&profiler, "[Strategy]SingleDeviceStrategy.training_step");
    at::Tensor a = at::ones({8, 8});
    at::Tensor b = a.mm(a);
  }
  const std::string report = profiler.summary();
  EXPECT_TRUE(absl::StrContains(report, "aten::mm")) << report;
  ASSERT_TRUE(profiler.trace_status().ok()) << profiler.trace_status();
  EXPECT_EQ(profiler.trace_path(), dir + "/fit-perf.pt.trace.json");
  nlohmann::json trace = nlohmann::json::parse(Read(profiler.trace_path()));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  double range_ts = -1, mm_ts = -1, kernel_ts = -1;
  int device_events = 0;
  for (const auto& event : trace["traceEvents"]) {
    const std::string name = event.value("name", "");
    if (name == "[pl][profile][Strategy]SingleDeviceStrategy.training_step") range_ts = event["ts"].get<double>();
    if (name == "aten::mm") mm_ts = event["ts"].get<double>();
    if (name == "tracer_kernel" || name == "Memcpy HtoD") {
      ++device_events;
      EXPECT_EQ(event["pid"], 1);
      EXPECT_EQ(event["args"]["device"], "tracer:1");
    }
    if (name == "tracer_kernel") {
      kernel_ts = event["ts"].get<double>();
      EXPECT_DOUBLE_EQ(event["dur"].get<double>(), 5.0);
    }
  }
  EXPECT_GE(range_ts, 0);
  EXPECT_GE(mm_ts, range_ts);  // The operator runs inside the hook's range.
  EXPECT_EQ(device_events, 2);
  // The device's events sit on the trace's own clock: within the window the profiler recorded, microseconds.
  EXPECT_GT(kernel_ts, 0);
  EXPECT_LT(std::abs(kernel_ts - range_ts), 60e6);
  EXPECT_TRUE(profiler.teardown().ok());
}

}  // namespace
}  // namespace kiln
