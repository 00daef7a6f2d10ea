#include "trainer/profilers/pytorch_profiler.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <unordered_set>
#include <utility>

#include "ATen/record_function.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "torch/csrc/autograd/profiler_kineto.h"
#include "trainer/io/durable_file.h"

namespace kiln {
namespace {

namespace profiler = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

impl::ProfilerConfig KinetoConfig() {
  return impl::ProfilerConfig(impl::ProfilerState::KINETO, /*report_input_shapes=*/false, /*profile_memory=*/false,
                              /*with_stack=*/false, /*with_flops=*/false, /*with_modules=*/false);
}

std::set<impl::ActivityType> Activities() { return {impl::ActivityType::CPU}; }

// Chrome trace events for the device's own work: one track (pid) per device, as Kineto gives a GPU its own.
void AppendDeviceEvents(nlohmann::json& trace, const std::string& accelerator,
                        const std::vector<DeviceTraceEvent>& events) {
  nlohmann::json& out = trace["traceEvents"];
  if (!out.is_array()) out = nlohmann::json::array();
  const int64_t base_ns = trace.value("baseTimeNanoseconds", int64_t{0});
  std::set<int> devices;
  for (const DeviceTraceEvent& event : events) {
    devices.insert(event.device_index);
    out.push_back({{"ph", "X"},
                   {"cat", event.category.empty() ? "device" : event.category},
                   {"name", event.name},
                   {"pid", event.device_index},
                   {"tid", 0},
                   {"ts", static_cast<double>(event.start_ns - base_ns) / 1000.0},
                   {"dur", static_cast<double>(std::max<int64_t>(0, event.duration_ns)) / 1000.0},
                   {"args", {{"device", absl::StrCat(accelerator, ":", event.device_index)}}}});
  }
  for (int device : devices) {
    out.push_back({{"ph", "M"},
                   {"name", "process_name"},
                   {"pid", device},
                   {"tid", 0},
                   {"args", {{"name", absl::StrCat(accelerator, " ", device)}}}});
  }
}

}  // namespace

PyTorchProfiler::PyTorchProfiler(std::string dirpath, std::string filename)
    : Profiler(std::move(dirpath), std::move(filename)) {}

PyTorchProfiler::~PyTorchProfiler() {
  if (running_) (void)teardown();
}

absl::Status PyTorchProfiler::setup(const ProfilerSetup& setup) {
  if (absl::Status status = Profiler::setup(setup); !status.ok()) return status;
  if (running_) return absl::OkStatus();
  try {
    profiler::prepareProfiler(KinetoConfig(), Activities());
    profiler::enableProfiler(KinetoConfig(), Activities(), {at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE});
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat(
        "profiler=pytorch could not start LibTorch's profiler (", e.what(),
        "); is another profiler running in this process? Stop it, or use profiler=simple"));
  }
  running_ = true;
  accelerator_ = setup.accelerator;
  device_ = setup.device;
  trace_path_.clear();
  trace_status_ = absl::OkStatus();
  if (accelerator_ != nullptr && device_.has_value()) {
    if (absl::Status started = accelerator_->StartDeviceTrace(*device_); started.ok()) {
      device_tracing_ = true;
    } else {
      LOG(WARNING) << "profiler=pytorch: " << accelerator_->name() << " did not start its device trace (" << started
                   << "); the trace will hold the host's events only";
    }
  }
  return absl::OkStatus();
}

void PyTorchProfiler::start(absl::string_view action_name) {
  if (!running_) return;
  auto range = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (range->isActive()) range->before(absl::StrCat(kRangePrefix, action_name));
  ranges_[action_name] = std::move(range);
}

void PyTorchProfiler::stop(absl::string_view action_name) {
  auto it = ranges_.find(action_name);
  if (it == ranges_.end()) return;
  it->second->end();
  ranges_.erase(it);
}

absl::Status PyTorchProfiler::Finish(std::string* table) {
  for (auto& [name, range] : ranges_) range->end();
  ranges_.clear();
  std::vector<DeviceTraceEvent> device_events;
  if (device_tracing_) {
    device_tracing_ = false;
    absl::StatusOr<std::vector<DeviceTraceEvent>> events = accelerator_->StopDeviceTrace(*device_);
    if (events.ok()) {
      device_events = *std::move(events);
    } else {
      LOG(WARNING) << "profiler=pytorch: " << accelerator_->name() << " did not report its device trace ("
                   << events.status() << "); the trace holds the host's events only";
    }
  }
  running_ = false;
  std::unique_ptr<profiler::ProfilerResult> result;
  try {
    result = profiler::disableProfiler();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("profiler=pytorch: stopping LibTorch's profiler failed: ", e.what()));
  }
  if (result == nullptr) return absl::InternalError("profiler=pytorch: LibTorch's profiler returned no result");

  // The operators' table, as PyTorch's key_averages().table() sums them: per name, calls and CPU time.
  if (table != nullptr) {
    struct Row {
      int64_t calls = 0;
      int64_t total_ns = 0;
    };
    std::map<std::string, Row> rows;
    int64_t all_ns = 0;
    for (const profiler::KinetoEvent& event : result->events()) {
      if (event.deviceType() != c10::DeviceType::CPU) continue;
      Row& row = rows[event.name()];
      ++row.calls;
      row.total_ns += static_cast<int64_t>(event.durationNs());
      if (event.name().rfind(kRangePrefix.data(), 0) != 0) all_ns += static_cast<int64_t>(event.durationNs());
    }
    std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
    size_t width = 4;
    for (const auto& [name, row] : sorted) width = std::max(width, std::min<size_t>(name.size(), 80));
    const std::string rule = std::string(width + 48, '-');
    std::string text = absl::StrFormat("%s\n%-*s  %14s  %14s  %12s\n%s\n", rule, width, "Name", "CPU total",
                                       "CPU time avg", "# of Calls", rule);
    for (const auto& [name, row] : sorted) {
      absl::StrAppendFormat(&text, "%-*s  %12.3fms  %12.3fus  %12d\n", width, name.substr(0, 80),
                            static_cast<double>(row.total_ns) / 1e6,
                            static_cast<double>(row.total_ns) / 1e3 / static_cast<double>(row.calls), row.calls);
    }
    absl::StrAppendFormat(&text, "%s\nSelf CPU time total: %.3fms\n", rule, static_cast<double>(all_ns) / 1e6);
    *table = std::move(text);
  }

  // The trace: LibTorch writes it, Kiln adds the device's events and puts it in place whole.
  absl::StatusOr<std::string> path = OutputPath(PrepareFilename("", ".pt.trace.json"));
  if (!path.ok()) return path.status();
  if (path->empty()) return absl::OkStatus();
  const std::string raw = absl::StrCat(*path, ".kineto.tmp");
  try {
    result->save(raw);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("profiler=pytorch: LibTorch could not write its trace to '", raw,
                                            "': ", e.what()));
  }
  std::string contents;
  {
    std::ifstream in(raw, std::ios::binary);
    contents.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::remove(raw.c_str());
  nlohmann::json trace = nlohmann::json::parse(contents, nullptr, /*allow_exceptions=*/false);
  if (trace.is_discarded() || !trace.is_object()) {
    return absl::InternalError(absl::StrCat("profiler=pytorch: LibTorch's trace (", contents.size(),
                                            " bytes) is not a JSON object; nothing written to ", *path));
  }
  if (!device_events.empty()) AppendDeviceEvents(trace, accelerator_->name(), device_events);
  if (absl::Status written = WriteFileDurably(*path, trace.dump()); !written.ok()) return written;
  trace_path_ = *path;
  return absl::OkStatus();
}

std::string PyTorchProfiler::summary() {
  if (!running_) return "";
  std::string table;
  trace_status_ = Finish(&table);
  if (!trace_status_.ok()) LOG(WARNING) << trace_status_;
  if (!trace_path_.empty()) absl::StrAppend(&table, "Trace: ", trace_path_, "\n");
  return StatsToString({{"records", table}}) + "\n";
}

absl::Status PyTorchProfiler::teardown() {
  if (!running_) return absl::OkStatus();
  return Finish(nullptr);
}

}  // namespace kiln
