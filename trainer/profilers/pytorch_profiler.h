// Lightning's PyTorchProfiler: LibTorch's own profiler (Kineto, torch/csrc/autograd/profiler_kineto.h) records every
// operator LibTorch runs while an entry point runs, and every action of the trainer as a record_function range named
// as Lightning names it ("[pl][profile]" + the action: "[pl][profile][LightningModule]MyModel.on_fit_start"). At the
// end it writes a Chrome trace (Perfetto, chrome://tracing and TensorBoard's profile plugin open it) to
// <dirpath>/<stage>[-<filename>][-<local_rank>].pt.trace.json, with what the accelerator reports its device did in
// that time (Accelerator::StartDeviceTrace/StopDeviceTrace) merged in as the device's own track, and reports the
// operators' times.
//
// Unlike Lightning's, it records the whole entry point (no schedule of wait, warm-up and active steps), so its trace
// of a long run is large: profile a short one (limit_train_batches, max_steps).
#ifndef KILN_TRAINER_PROFILERS_PYTORCH_PROFILER_H_
#define KILN_TRAINER_PROFILERS_PYTORCH_PROFILER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainer/profilers/profiler.h"

namespace at {
class RecordFunction;
}  // namespace at

namespace kiln {

class PyTorchProfiler : public Profiler {
 public:
  // Lightning's prefix of every action's range.
  static constexpr absl::string_view kRangePrefix = "[pl][profile]";

  explicit PyTorchProfiler(std::string dirpath = "", std::string filename = "");
  ~PyTorchProfiler() override;

  // Starts LibTorch's profiler (an error when another is running in this process) and the device's trace.
  absl::Status setup(const ProfilerSetup& setup) override;
  void start(absl::string_view action_name) override;
  void stop(absl::string_view action_name) override;
  // Stops the profiler, writes the trace, and returns the operators' table (names, calls, CPU time).
  std::string summary() override;
  absl::Status teardown() override;

  // The trace the last summary() wrote (empty before), and why it could not write one (OK when it did).
  const std::string& trace_path() const { return trace_path_; }
  const absl::Status& trace_status() const { return trace_status_; }

 private:
  absl::Status Finish(std::string* table);

  bool running_ = false;
  Accelerator* accelerator_ = nullptr;
  std::optional<LogicalDevice> device_;
  bool device_tracing_ = false;
  absl::flat_hash_map<std::string, std::unique_ptr<at::RecordFunction>> ranges_;
  std::string trace_path_;
  absl::Status trace_status_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_PROFILERS_PYTORCH_PROFILER_H_
