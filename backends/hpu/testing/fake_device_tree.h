// FakeDeviceTree: a fake of what the habanalabs driver exposes (device nodes under dev/, attributes under sys/),
// built in a temporary folder that HPU discovery then reads as its root. Test support only.
//
// Nodes are plain files (tests cannot rely on creating character devices); discovery never opens them, it only
// checks that this process may. Each helper creates the folders it needs and fails the test on error.
#ifndef KILN_BACKENDS_HPU_TESTING_FAKE_DEVICE_TREE_H_
#define KILN_BACKENDS_HPU_TESTING_FAKE_DEVICE_TREE_H_

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kiln::hpu::testing {

class FakeDeviceTree {
 public:
  // A new, empty tree under the test's temporary folder.
  explicit FakeDeviceTree(const std::string& name) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") / ("fake_device_tree_" + name);
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }

  std::string root() const { return root_.string(); }
  std::string Path(const std::string& relative) const { return (root_ / relative).string(); }

  void WriteFile(const std::string& relative, const std::string& contents) const {
    const std::filesystem::path path = root_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream file(path);
    file << contents;
    ASSERT_TRUE(file.good()) << "cannot write " << path;
  }

  void MakeDirectory(const std::string& relative) const { std::filesystem::create_directories(root_ / relative); }

  void Remove(const std::string& relative) const { std::filesystem::remove_all(root_ / relative); }

  // A symbolic link at `relative` to `target` (absolute, or relative to the link's folder).
  void Symlink(const std::string& target, const std::string& relative) const {
    const std::filesystem::path path = root_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::filesystem::remove_all(path);
    std::filesystem::create_symlink(target, path);
  }

  // A Gaudi on a driver with the accel subsystem: /dev/accel/accel<n>, and sysfs as the driver writes it. The PCI
  // device folder is kept under sys/bus/pci/devices/<pci> with the class folder's `device` link pointing at it.
  void AddAccelGaudi(int n, const std::string& device_type = "GAUDI2") const {
    const std::string pci = PciDir(n);
    WriteFile(pci + "/vendor", "0x1da3\n");
    WriteFile(pci + "/device_type", device_type + "\n");
    WriteFile(pci + "/status", "operational\n");
    Symlink(Path(pci), "sys/class/accel/accel" + std::to_string(n) + "/device");
    WriteFile("dev/accel/accel" + std::to_string(n), "");
    WriteFile("dev/accel/accel_controlD" + std::to_string(n), "");
  }

  // A Gaudi on an older driver: /dev/hl<n>, attributes in sys/class/habanalabs/hl<n>/, the PCI device below it.
  void AddHlGaudi(int n, const std::string& device_type = "GAUDI") const {
    const std::string cls = "sys/class/habanalabs/hl" + std::to_string(n);
    WriteFile(cls + "/device_type", device_type + "\n");
    WriteFile(cls + "/status", "Operational\n");
    WriteFile(PciDir(100 + n) + "/vendor", "0x1da3\n");
    Symlink(Path(PciDir(100 + n)), cls + "/device");
    WriteFile("dev/hl" + std::to_string(n), "");
    WriteFile("dev/hl_controlD" + std::to_string(n), "");
  }

  // The PCI device folder of accel device `n` (relative to the root).
  static std::string PciDir(int n) { return "sys/bus/pci/devices/0000:" + std::to_string(10 + n) + ":00.0"; }

 private:
  std::filesystem::path root_;
};

}  // namespace kiln::hpu::testing

#endif  // KILN_BACKENDS_HPU_TESTING_FAKE_DEVICE_TREE_H_
