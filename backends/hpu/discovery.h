// Finds Habana (Intel Gaudi) accelerators from what the habanalabs driver exposes on a host, reading files only.
//
// Where the driver puts things (Linux's Documentation/ABI/testing/sysfs-driver-habanalabs):
//   - drivers on the kernel's accel subsystem (Linux 6.2 and later, and Habana's current out-of-tree driver):
//     device node /dev/accel/accel<N>, attributes in /sys/class/accel/accel<N>/device/ (the PCI device: `vendor`,
//     and the driver's `device_type`, `status`, clocks, ...);
//   - older drivers: device node /dev/hl<N>, attributes in /sys/class/habanalabs/hl<N>/, the PCI device (with
//     `vendor`) in /sys/class/habanalabs/hl<N>/device/.
// Control nodes (accel_controlD<N>, hl_controlD<N>) are not devices and are ignored. Other drivers use /dev/accel
// too (Intel's NPU, AMD's XDNA), which is why the PCI vendor must be Habana Labs' 0x1da3.
//
// A node is counted only when everything checks out: its sysfs entry exists, the vendor is 0x1da3, device_type
// names a Gaudi (GOYA is an inference card), `status` (when the driver has it) is "operational", and this process
// may open the node for reading and writing. Anything else leaves that device uncounted, with the reason recorded;
// nothing is ever guessed (Lightning's Habana plugin returns 8 when its query fails; Kiln returns what it found).
//
// The node is never opened: the driver lets one process at a time open a device, so a probe must not take it.
// Everything is read under a root folder ("/" on a real host), so tests can build a fake device tree.
//
// Thread-safety: pure functions of the file system; they may be called from any thread. Nothing here throws.
#ifndef KILN_BACKENDS_HPU_DISCOVERY_H_
#define KILN_BACKENDS_HPU_DISCOVERY_H_

#include <string>
#include <vector>

#include "hal/accelerator.h"

namespace kiln::hpu {

// Habana Labs' PCI vendor id, as sysfs writes it.
inline constexpr char kHabanaVendorId[] = "0x1da3";

struct HabanaDevice {
  std::string node;            // The device node, e.g. "<root>/dev/accel/accel0".
  std::string attributes_dir;  // Where the driver's attributes are (device_type, status, clocks, ...).
  std::string pci_dir;         // The PCI device (vendor, hwmon/).
  std::string device_type;     // As the driver names it ("GAUDI2"); empty when it could not be read.
  bool counted = false;        // True when every check passed.
  std::string reason;          // Why it is not counted; empty when counted.
};

struct Discovery {
  std::string root;
  std::vector<HabanaDevice> devices;  // Every device node found, counted or not, accel nodes first, by number.
  std::vector<std::string> problems;  // Folders that exist but could not be listed.

  // The counted devices, in order: HPU index i is counted()[i].
  std::vector<HabanaDevice> counted() const;
  int count() const { return static_cast<int>(counted().size()); }

  // One paragraph for messages: what was found, and why each uncounted node was not counted.
  std::string Summary() const;
};

// Looks for devices under `root` ("/" on a real host). Never fails: what cannot be read is recorded.
Discovery DiscoverDevices(const std::string& root);

// The statistics of a counted device, from its sysfs attributes (keys documented in hpu_accelerator.h). A value
// that cannot be read or parsed is left out.
DeviceStats ReadDeviceStats(const HabanaDevice& device);

}  // namespace kiln::hpu

#endif  // KILN_BACKENDS_HPU_DISCOVERY_H_
