// The accelerator contract: everything Kiln needs to know about a kind of hardware.
//
// An `Accelerator` answers every hardware question the connector and the trainer have: what the user's `devices`
// value means, how many devices "auto" finds, whether the hardware can be used here, which `c10::Device`s the
// processes compute on (a LogicalDevice keeps the accelerator's own index beside it), how to set a device up and tear
// it down, what its statistics are, which collective backend distributed training runs on (hal/collectives.h), and
// which precisions it supports, and how fast a device can compute at best (its peak FLOP/s per dtype, for MFU).
// Nothing above the HAL knows any of this, so a third-party accelerator plugs in by implementing this class,
// exactly like the built-in ones (backends/*).
//
// Contract for implementers:
//  - Methods marked "must not throw" are called while probing many backends (for "auto" and listings); a failure
//    there is reported through the return value, never by an exception, a crash or a log at ERROR level.
//  - Methods returning absl::Status report errors as values. They must not throw either: a LibTorch call that may
//    throw (c10::Error) is wrapped by the implementation.
//  - Instances are shared (`std::shared_ptr<Accelerator>`) between the connector, the trainer and tools. The const
//    methods must be safe to call from several threads at once; SetupDevice/TeardownDevice are called by the
//    trainer from one thread, once per process and device.
//  - Implementations are `final` and register with one line beside them (see registry.h).
#ifndef KILN_HAL_ACCELERATOR_H_
#define KILN_HAL_ACCELERATOR_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "c10/core/ScalarType.h"
#include "c10/util/intrusive_ptr.h"
#include "hal/collectives.h"
#include "hal/devices.h"
#include "hal/precision.h"

namespace kiln {

// Device statistics: metric name -> value. Each backend documents the keys it reports (and their units) in its
// header. Keys are lower_snake_case with the unit as a suffix where there is one (`rss_bytes`, `utilization_percent`).
using DeviceStats = std::map<std::string, double>;

// The device one process runs on, as its accelerator numbers it, with the c10 device its tensors live on. The two
// differ for a backend that computes on another c10 device (a simulator or a bring-up backend on the host CPU: its
// devices 0, 1 and 2 all compute on `cpu`), so everything that speaks of a device to a user or to the backend uses
// this, not the c10 device alone.
struct LogicalDevice {
  std::string accelerator;  // The accelerator's name() ("acme").
  int index = 0;            // The index ParseDevices gave for this process.
  c10::Device compute = c10::Device(c10::DeviceType::CPU);  // What ParallelDevices gave for that index.

  // "acme:2"; with the c10 device when its name says something else: "acme:2 (on cpu)".
  std::string ToString() const;
};

// An accelerator's answer when asked to run at a precision it cannot run as requested, but can run in a close
// substitute (Lightning: "16-mixed" on CPU runs as "bf16-mixed").
struct PrecisionSubstitute {
  Precision precision;
  std::string warning;  // Shown to the user, in Lightning's words where Lightning has them.
};

class Accelerator {
 public:
  virtual ~Accelerator() = default;

  // The registered name, lower case ("cpu", "cuda"). Never empty. Must not throw.
  virtual std::string name() const = 0;

  // Turns the user's `devices` value into the device indices it means for this accelerator, in order. For
  // "auto", the result has AutoDeviceCount() entries (the connector rejects a zero count before calling this).
  // Returns InvalidArgument, naming the bad value and the accepted ones, for anything this accelerator does not
  // accept; indices beyond the devices present are an error that says which exist. Does not check availability.
  // May probe the hardware (to count devices); must not throw or block for long.
  virtual absl::StatusOr<std::vector<int>> ParseDevices(const Devices& devices) const = 0;

  // How many devices "auto" should use. Returns 0 when there are none or the probe fails; must not throw. It may
  // probe the hardware; it must not initialise it in a way that changes later behaviour (no context creation
  // that would break a later fork).
  virtual int AutoDeviceCount() const = 0;

  // OK when this accelerator can be used in this process now. Otherwise FailedPrecondition (or Unavailable) whose
  // message says why, in words a user can act on ("no CUDA device visible (CUDA_VISIBLE_DEVICES is unset)").
  // Must not throw.
  virtual absl::Status CheckAvailable() const = 0;
  bool IsAvailable() const { return CheckAvailable().ok(); }

  // The c10 device each local process computes on, one entry per parsed index (so its size is the number of local
  // processes). `indices` must come from ParseDevices; the result is unspecified otherwise. Several indices may
  // compute on the same c10 device (a backend on the host CPU); the index stays in the LogicalDevice that Kiln
  // builds from both and passes to the methods below. Must not throw.
  virtual std::vector<c10::Device> ParallelDevices(const std::vector<int>& indices) const = 0;

  // Prepares `device` for use by this process (select it, create contexts). Called once per process before any
  // tensor is moved to `device.compute`; an error stops the run before training. May block while it initialises.
  virtual absl::Status SetupDevice(const LogicalDevice& device) = 0;

  // Releases what SetupDevice and training left on `device` (cached memory, contexts). Called once when training
  // ends, also after a failed run. Setup followed by teardown may repeat in one process.
  virtual absl::Status TeardownDevice(const LogicalDevice& device) = 0;

  // Current statistics of `device` (see DeviceStats). Returns an error only when `device` is not one of this
  // accelerator's (its index or its c10 device); a statistic that cannot be read is left out (or reported as an
  // `*_available` = 0 key), it does not fail the call. Cheap enough to call every few steps; must not throw.
  virtual absl::StatusOr<DeviceStats> GetDeviceStats(const LogicalDevice& device) const = 0;

  // The name of the torch.distributed collective backend MakeCollectiveBackend makes ("gloo", "nccl", "hccl", a
  // vendor's own), as plans, errors and `process_group_backend` spell it. Must not throw.
  virtual std::string ProcessGroupBackend() const = 0;

  // Every c10d backend MakeCollectiveBackend can make for this accelerator, its own (ProcessGroupBackend) first: the
  // names `process_group_backend` may choose besides "gloo" (a vendor's library may bring several). The strategy
  // passes the chosen one in CollectiveOptions::backend. Must not throw.
  virtual std::vector<std::string> ProcessGroupBackends() const { return {ProcessGroupBackend()}; }

  // Makes the c10d backend that carries data-parallel training's collectives on the tensors of `device`
  // (hal/collectives.h says what it must support and how it fails), for this process: rank `options.rank` of
  // `options.world_size`. Called once per process, after SetupDevice, by every rank at the same point of set-up; it
  // may block while the ranks connect, for at most `options.timeout`. The default serves accelerators whose devices
  // compute on the CPU, with Gloo; for any other device type it returns Unimplemented, naming the accelerator, the
  // device type and what to implement. Errors are values; must not throw.
  virtual absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeCollectiveBackend(const LogicalDevice& device,
                                                                                  const CollectiveOptions& options);
  // Which of hal/collectives.h's collectives that backend can do. The default: all of them. A backend that lacks
  // some declares it here: the conformance suite skips their checks saying so, and fsdp (which needs all-gather and
  // reduce-scatter) is refused before training, naming what is lacking. Must not throw.
  virtual CollectiveSupport SupportedCollectives() const { return {}; }

  // The precisions this accelerator can train in, in its order of preference. Never empty. Must not throw.
  virtual std::vector<Precision> SupportedPrecisions() const = 0;

  // When `requested` is not supported but a close substitute is, returns it with the warning to show. The
  // default offers no substitute. Must not throw.
  virtual std::optional<PrecisionSubstitute> SubstitutePrecision(Precision requested) const {
    (void)requested;
    return std::nullopt;
  }

  // The theoretical peak of `device` in floating-point operations per second (FLOP/s, a multiply-add counting two)
  // when its dense matrix products compute in `dtype` (c10::kFloat, kDouble, kHalf, kBFloat16; what ComputeDtype
  // gives for the run's precision): the figure model FLOPs utilization (MFU) divides by, as Lightning's
  // get_available_flops gives it for CUDA and TPU. It is an upper bound no real step reaches, for one device (the
  // trainer multiplies by the devices itself). std::nullopt (the default) means unknown: MFU is then not reported,
  // unless the user gives a figure (ThroughputMonitorOptions::available_flops). A backend documents in its header
  // where its figures come from. May read the device's properties (after SetupDevice); must not throw.
  virtual std::optional<double> PeakFlops(const LogicalDevice& device, c10::ScalarType dtype) const {
    (void)device;
    (void)dtype;
    return std::nullopt;
  }
};

// One LogicalDevice per parsed index, in order: `accelerator`'s ParallelDevices for `indices`, each with its index.
std::vector<LogicalDevice> LogicalDevices(const Accelerator& accelerator, const std::vector<int>& indices);

// The LogicalDevice of `accelerator` that computes on `compute`, for backends that number their devices as their
// c10 device does (CUDA, a PrivateUse1 device): the index of `compute`, or 0 when it has none. A backend whose
// devices share one c10 device (a simulator on the host) is reached only through LogicalDevices.
LogicalDevice LogicalDeviceOf(const Accelerator& accelerator, const c10::Device& compute);

// For those same backends: OK when `device.index` is its c10 device's own index (or the c10 device has none);
// otherwise InvalidArgument naming both, so that a logical device that is not theirs is refused.
absl::Status CheckIndexIsCompute(const LogicalDevice& device);

}  // namespace kiln

#endif  // KILN_HAL_ACCELERATOR_H_
