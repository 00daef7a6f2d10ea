#include "backends/cpu/cpu_accelerator.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "backends/cpu/proc_stats.h"
#include "hal/registry.h"

namespace kiln {
namespace {

double ProcessCpuSeconds() {
  absl::StatusOr<std::string> stat = cpu::ReadProcFile("/proc/self/stat");
  if (!stat.ok()) return -1;
  absl::StatusOr<int64_t> ticks = cpu::ParseCpuTicks(*stat);
  if (!ticks.ok()) return -1;
  return static_cast<double>(*ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

absl::Status CheckCpu(const c10::Device& device) {
  if (device.is_cpu()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the cpu accelerator got device '", device.str(), "'; it runs only on 'cpu'"));
}

}  // namespace

CpuAccelerator::CpuAccelerator() : last_sample_{absl::Now(), ProcessCpuSeconds()} {}

absl::StatusOr<std::vector<int>> CpuAccelerator::ParseDevices(const Devices& devices) const {
  return ParseDeviceCount(devices, AutoDeviceCount(), name());
}

std::vector<c10::Device> CpuAccelerator::ParallelDevices(const std::vector<int>& indices) const {
  return std::vector<c10::Device>(indices.size(), c10::Device(c10::DeviceType::CPU));
}

absl::Status CpuAccelerator::SetupDevice(const LogicalDevice& device) { return CheckCpu(device.compute); }

absl::Status CpuAccelerator::TeardownDevice(const LogicalDevice& device) { return CheckCpu(device.compute); }

absl::StatusOr<DeviceStats> CpuAccelerator::GetDeviceStats(const LogicalDevice& logical) const {
  const c10::Device& device = logical.compute;
  if (absl::Status status = CheckCpu(device); !status.ok()) return status;
  DeviceStats stats;
  if (absl::StatusOr<std::string> status_file = cpu::ReadProcFile("/proc/self/status"); status_file.ok()) {
    if (absl::StatusOr<int64_t> rss = cpu::ParseResidentBytes(*status_file); rss.ok()) {
      stats["process_rss_bytes"] = static_cast<double>(*rss);
    }
  }
  if (absl::StatusOr<std::string> meminfo = cpu::ReadProcFile("/proc/meminfo"); meminfo.ok()) {
    if (absl::StatusOr<cpu::MachineMemory> memory = cpu::ParseMeminfo(*meminfo); memory.ok() &&
                                                                                  memory->total_bytes > 0) {
      stats["machine_memory_total_bytes"] = static_cast<double>(memory->total_bytes);
      stats["machine_memory_available_bytes"] = static_cast<double>(memory->available_bytes);
      stats["machine_memory_used_percent"] =
          100.0 * (1.0 - static_cast<double>(memory->available_bytes) / static_cast<double>(memory->total_bytes));
    }
  }
  const double cpu_seconds = ProcessCpuSeconds();
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mutex_);
    const double wall_seconds = absl::ToDoubleSeconds(now - last_sample_.wall);
    if (cpu_seconds >= 0 && last_sample_.cpu_seconds >= 0 && wall_seconds > 0) {
      stats["process_cpu_percent"] = 100.0 * (cpu_seconds - last_sample_.cpu_seconds) / wall_seconds;
    }
    last_sample_ = {now, cpu_seconds};
  }
  stats["machine_cpu_count"] = static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN));
  return stats;
}

std::vector<Precision> CpuAccelerator::SupportedPrecisions() const {
  // As Lightning's CPU accelerator: no 16-true, and 16-mixed runs as bf16-mixed (SubstitutePrecision), although
  // LibTorch 2.x has float16 CPU autocast: a float16 loss scaler on the CPU buys nothing over bfloat16.
  return {Precision::k32True, Precision::k64True, Precision::kBf16Mixed, Precision::kBf16True};
}

std::optional<PrecisionSubstitute> CpuAccelerator::SubstitutePrecision(Precision requested) const {
  if (requested != Precision::k16Mixed) return std::nullopt;
  return PrecisionSubstitute{
      Precision::kBf16Mixed,
      "You passed `Trainer(accelerator='cpu', precision='16-mixed')` but AMP with fp16 is not supported on CPU. "
      "Using `precision='bf16-mixed'` instead."};
}

KILN_REGISTER_ACCELERATOR({
    .name = "cpu",
    .description = "The host CPU; devices=N runs N processes on this machine.",
    .aliases = {},
    .priority = 0,
    .factory = [] { return std::make_shared<CpuAccelerator>(); },
});

}  // namespace kiln
