#include "trainer/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
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

// The terminal's width now; 80 when it cannot be read.
int TerminalWidth() {
  struct winsize size {};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

std::string Rate(double elapsed, int64_t done, int64_t total, double* left) {
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  *left = rate > 0 ? static_cast<double>(total - done) / rate : 0;
  return absl::StrFormat("[%s<%s, %.2f it/s]", Clock(elapsed), Clock(*left), rate);
}

}  // namespace

std::string ProgressReporter::FitLine(const std::string& head, int64_t done, int64_t total, const std::string& tail,
                                      const std::string& metrics, int width) {
  // One column spare: a line exactly as wide as the terminal wraps on some terminals.
  const int room = std::max(width - 1, 1);
  const std::string count = absl::StrCat(done, "/", total);
  const int fixed = static_cast<int>(head.size() + count.size() + tail.size()) + 5;  // Spaces and brackets.
  constexpr int kWidestBar = 20;
  constexpr int kNarrowestBar = 5;
  const int bar = std::clamp(room - fixed - static_cast<int>(metrics.size()), kNarrowestBar, kWidestBar);
  const int filled = total > 0 ? static_cast<int>(bar * std::min(done, total) / total) : bar;
  std::string line = absl::StrCat(head, " [", std::string(filled, '#'), std::string(bar - filled, '.'), "] ", count,
                                  " ", tail, metrics);
  if (static_cast<int>(line.size()) > room) line.resize(room);
  return line;
}

ProgressReporter::ProgressReporter(bool enabled, int64_t log_every_n_steps)
    : enabled_(enabled), terminal_(isatty(STDERR_FILENO) == 1), log_every_n_steps_(log_every_n_steps) {}

void ProgressReporter::StartEpoch(int64_t epoch, int64_t max_epochs, int64_t num_batches) {
  epoch_ = epoch;
  max_epochs_ = max_epochs;
  num_batches_ = num_batches;
  epoch_start_ = absl::Now();
  last_draw_ = absl::InfinitePast();
  batches_seen_ = 0;
}

void ProgressReporter::Step(int64_t batch_idx, int64_t global_step, absl::FunctionRef<MetricMap()> metrics) {
  if (!enabled_) return;
  batches_seen_ = batch_idx + 1;
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
  const std::string epoch =
      max_epochs_ > 0 ? absl::StrCat("Epoch ", epoch_, "/", max_epochs_ - 1) : absl::StrCat("Epoch ", epoch_);
  if (num_batches_ < 0) {
    // A stream of unknown length: the batches so far and the rate, without a bar or a time left (Lightning's
    // "Epoch 0: 123it [00:01, 95.20it/s]").
    const double rate = elapsed > 0 ? static_cast<double>(batch_idx + 1) / elapsed : 0;
    std::string line = absl::StrCat(epoch, ": ", batch_idx + 1, "it ",
                                     absl::StrFormat("[%s, %.2fit/s]", Clock(elapsed), rate), " step ", global_step,
                                     FormatMetrics(metrics()));
    if (static_cast<int>(line.size()) > TerminalWidth() - 1) line.resize(std::max(TerminalWidth() - 1, 1));
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    return;
  }
  double left = 0;
  const std::string rate = Rate(elapsed, batch_idx + 1, num_batches_, &left);
  // Lightning's bar: epoch, progress, [elapsed<left, rate], then the metrics logged with prog_bar.
  const std::string line = FitLine(epoch, batch_idx + 1, num_batches_, absl::StrCat(rate, " step ", global_step),
                                   FormatMetrics(metrics()), TerminalWidth());
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

void ProgressReporter::StartEvaluation(const char* what, int64_t num_batches) {
  if (!enabled_ || !terminal_) return;
  evaluation_ = what;
  evaluation_batches_ = num_batches;
  evaluation_start_ = absl::Now();
  last_evaluation_draw_ = absl::InfinitePast();
}

void ProgressReporter::EvaluationStep(int64_t batch_idx) {
  if (evaluation_ == nullptr) return;
  const absl::Time now = absl::Now();
  const bool last = batch_idx + 1 == evaluation_batches_;
  if (!last && now - last_evaluation_draw_ < absl::Milliseconds(100)) return;
  last_evaluation_draw_ = now;
  double left = 0;
  const std::string rate =
      Rate(absl::ToDoubleSeconds(now - evaluation_start_), batch_idx + 1, evaluation_batches_, &left);
  const std::string line = FitLine(evaluation_, batch_idx + 1, evaluation_batches_, rate, "", TerminalWidth());
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

void ProgressReporter::EndEvaluation() {
  if (evaluation_ == nullptr) return;
  evaluation_ = nullptr;
  // The training bar comes back at its next redraw.
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  last_draw_ = absl::InfinitePast();
}

void ProgressReporter::EndEpoch(int64_t epoch, const MetricMap& metrics) {
  if (!enabled_) return;
  // A stream's bar is redrawn at most every 100 ms and has no last batch to force a draw: the count it reached is
  // said here (a bar of known length reached its total at its last batch).
  const std::string count = num_batches_ < 0 ? absl::StrCat(" (", batches_seen_, " batches)") : "";
  if (terminal_) {
    std::fprintf(stderr, "\r\033[KEpoch %lld done in %.2fs%s:%s\n", static_cast<long long>(epoch),
                 absl::ToDoubleSeconds(absl::Now() - epoch_start_), count.c_str(), FormatMetrics(metrics).c_str());
  } else {
    LOG(INFO) << "epoch " << epoch << " done in " << absl::ToDoubleSeconds(absl::Now() - epoch_start_) << "s"
              << count << ":" << FormatMetrics(metrics);
  }
}

}  // namespace kiln
