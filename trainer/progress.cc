#include "trainer/progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace kiln {
namespace {

std::string FormatMetrics(const MetricMap& metrics) {
  std::string out;
  for (const auto& [name, value] : metrics) absl::StrAppendFormat(&out, " %s=%.4g", name, value);
  return out;
}

// tqdm's clock: MM:SS, or H:MM:SS past an hour.
std::string Clock(double seconds) {
  const int64_t total = static_cast<int64_t>(seconds + 0.5);
  if (total >= 3600) return absl::StrFormat("%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60);
  return absl::StrFormat("%02d:%02d", total / 60, total % 60);
}

}  // namespace

ProgressReporter::ProgressReporter(bool enabled, int64_t log_every_n_steps)
    : enabled_(enabled), terminal_(isatty(STDERR_FILENO) == 1), log_every_n_steps_(log_every_n_steps) {}

void ProgressReporter::StartEpoch(int64_t epoch, int64_t max_epochs, int64_t num_batches) {
  epoch_ = epoch;
  max_epochs_ = max_epochs;
  num_batches_ = num_batches;
  epoch_start_ = absl::Now();
  last_draw_ = absl::InfinitePast();
}

void ProgressReporter::Step(int64_t batch_idx, int64_t global_step, absl::FunctionRef<MetricMap()> metrics) {
  if (!enabled_) return;
  if (!terminal_) {
    if (log_every_n_steps_ > 0 && global_step % log_every_n_steps_ == 0) {
      LOG(INFO) << "epoch " << epoch_ << " step " << global_step << FormatMetrics(metrics());
    }
    return;
  }
  const absl::Time now = absl::Now();
  const bool last = batch_idx + 1 == num_batches_;
  if (!last && now - last_draw_ < absl::Milliseconds(100)) return;  // Redrawing costs more than a small step.
  last_draw_ = now;
  const double elapsed = absl::ToDoubleSeconds(now - epoch_start_);
  const double rate = elapsed > 0 ? static_cast<double>(batch_idx + 1) / elapsed : 0;
  const double left = rate > 0 ? static_cast<double>(num_batches_ - batch_idx - 1) / rate : 0;
  constexpr int kWidth = 20;
  const int filled = num_batches_ > 0 ? static_cast<int>(kWidth * (batch_idx + 1) / num_batches_) : kWidth;
  const std::string epoch = max_epochs_ > 0 ? absl::StrCat("Epoch ", epoch_, "/", max_epochs_ - 1)
                                            : absl::StrCat("Epoch ", epoch_);
  // Lightning's bar: epoch, progress, [elapsed<left, rate], then the metrics logged with prog_bar.
  std::fprintf(stderr, "\r\033[K%s [%s%s] %lld/%lld [%s<%s, %.2f it/s] step %lld%s", epoch.c_str(),
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
               static_cast<long long>(batch_idx + 1), static_cast<long long>(num_batches_), Clock(elapsed).c_str(),
               Clock(left).c_str(), rate, static_cast<long long>(global_step), FormatMetrics(metrics()).c_str());
  std::fflush(stderr);
}

void ProgressReporter::EndEpoch(int64_t epoch, const MetricMap& metrics) {
  if (!enabled_) return;
  if (terminal_) {
    std::fprintf(stderr, "\r\033[KEpoch %lld done in %.2fs:%s\n", static_cast<long long>(epoch),
                 absl::ToDoubleSeconds(absl::Now() - epoch_start_), FormatMetrics(metrics).c_str());
  } else {
    LOG(INFO) << "epoch " << epoch << " done in " << absl::ToDoubleSeconds(absl::Now() - epoch_start_) << "s:"
              << FormatMetrics(metrics);
  }
}

}  // namespace kiln
