#include "hal/device_kit/device_kit.h"

#include <array>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/detail/PrivateUse1HooksInterface.h"
#include "c10/core/DeviceType.h"
#include "c10/core/impl/DeviceGuardImplInterface.h"
#include "c10/util/Exception.h"
#include "hal/device_kit/internal.h"

namespace kiln::device_kit {
namespace internal {
std::atomic<int64_t> cpu_fallback_calls{0};
std::atomic<int64_t> device_to_host_copies{0};
}  // namespace internal

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// Who holds PrivateUse1 in this process, as far as this copy of the kit knows.
struct Registration {
  std::mutex mutex;
  std::shared_ptr<Device> device;  // Set by Register; the kit's kernels use it from then on.
  std::string name;                // Set by Register or RecordRegistration.
  std::string origin;              // Who registered it, for the message refusing the next one.
  std::string unusable;            // Why autograd cannot run on the registered device, when it cannot.
};

Registration& State() {
  static auto* const state = new Registration();  // Lives as long as the process: kernels use it until exit.
  return *state;
}

std::atomic<Device*> registered_device{nullptr};
thread_local int current_device = 0;

std::string Taken(const std::string& name, const std::string& holder, const std::string& origin) {
  return "cannot register the out-of-tree device '" + name + "': this process's PrivateUse1 device is " + holder +
         " already (" + origin + "), and LibTorch has one PrivateUse1 device per process; use one of the two in a "
         "process (a run chooses one accelerator; drop the other's plugin, or choose it in another run)";
}

// Whether LibTorch itself has a PrivateUse1 device that this copy of the kit did not record. Caller holds the lock.
std::string LibTorchHolder(const std::string& name) {
  const bool named = c10::is_privateuse1_backend_registered();
  const std::string current = named ? c10::get_privateuse1_backend() : "";
  if (at::isPrivateUse1HooksRegistered() || c10::impl::hasDeviceGuardImpl(kType)) {
    return Taken(name, named ? "'" + current + "'" : "an unnamed device",
                 "registered by a library outside Kiln's device kit");
  }
  if (named && current != name) return Taken(name, "'" + current + "'", "named by another library");
  return "";
}

std::string CheckLocked(const Registration& state, const std::string& name) {
  if (!state.name.empty()) return state.name == name ? "" : Taken(name, "'" + state.name + "'", state.origin);
  return LibTorchHolder(name);
}

// ---- Runtime hooks.

class RuntimeHooks final : public at::PrivateUse1HooksInterface {
 public:
  explicit RuntimeHooks(std::function<int()> device_count) : device_count_(std::move(device_count)) {}

  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count_()); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    const int count = device_count_();
    TORCH_CHECK(device_index >= -1 && device_index < count, PrivateUse1Name(), " has no device ",
                static_cast<int>(device_index), " (", count, " devices)");
    std::lock_guard<std::mutex> lock(mutex_);
    // Grown, never shrunk: a reference handed out stays valid for the process's life.
    while (static_cast<int>(generators_.size()) < count) {
      generators_.push_back(std::make_unique<at::Generator>(at::make_generator<at::CPUGeneratorImpl>()));
    }
    return *generators_[device_index < 0 ? 0 : device_index];
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    internal::ResizeStorageBytes(storage.unsafeGetStorageImpl(), newsize);
  }

 private:
  const std::function<int()> device_count_;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<at::Generator>> generators_;
};

// ---- Memory: one allocator per device, each counting what it handed out.

struct Counters {
  std::atomic<int64_t> allocated_bytes{0};
  std::atomic<int64_t> peak_allocated_bytes{0};
  std::atomic<int64_t> active_blocks{0};
  std::atomic<int64_t> total_blocks{0};
};

// What the deleter needs to undo one allocation: it is the DataPtr's context.
struct Block {
  void* data;
  size_t size;
  int index;
  Counters* counters;
};

void DeleteBlock(void* context) {
  Block* block = static_cast<Block*>(context);
  block->counters->allocated_bytes.fetch_sub(static_cast<int64_t>(block->size));
  block->counters->active_blocks.fetch_sub(1);
  registered_device.load()->Free(block->index, block->data);
  delete block;
}

class DeviceAllocator final : public c10::Allocator {
 public:
  void set_index(int index) { index_ = index; }
  Counters& counters() { return counters_; }

  c10::DataPtr allocate(size_t size) override {
    const c10::Device device(kType, static_cast<c10::DeviceIndex>(index_));
    if (size == 0) return c10::DataPtr(nullptr, device);
    Device* runtime = registered_device.load();
    void* data = runtime->Allocate(index_, size);
    TORCH_CHECK_WITH(OutOfMemoryError, data != nullptr, PrivateUse1Name(), ":", index_, " is out of memory: ",
                     size, " bytes asked for, ", counters_.allocated_bytes.load(), " bytes in use");
    const int64_t in_use = counters_.allocated_bytes.fetch_add(static_cast<int64_t>(size)) + static_cast<int64_t>(size);
    int64_t peak = counters_.peak_allocated_bytes.load(std::memory_order_relaxed);
    while (in_use > peak && !counters_.peak_allocated_bytes.compare_exchange_weak(peak, in_use)) {
    }
    counters_.active_blocks.fetch_add(1);
    counters_.total_blocks.fetch_add(1);
    return c10::DataPtr(data, new Block{data, size, index_, &counters_}, &DeleteBlock, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) registered_device.load()->Copy(dest, src, count, CopyKind::kDeviceToDevice, index_);
  }

 private:
  int index_ = 0;
  Counters counters_;
};

std::array<DeviceAllocator, kMaxDevices>& Allocators() {
  static auto* const allocators = [] {
    auto* all = new std::array<DeviceAllocator, kMaxDevices>();
    for (int i = 0; i < kMaxDevices; ++i) (*all)[i].set_index(i);
    return all;
  }();
  return *allocators;
}

DeviceAllocator& Checked(int index) {
  TORCH_CHECK(index >= 0 && index < kMaxDevices, "the device kit has no device ", index, " (at most ", kMaxDevices,
              ")");
  return Allocators()[index];
}

// c10's allocator for PrivateUse1, for code that asks c10::GetAllocator: it allocates on the current device.
class CurrentDeviceAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t size) override { return internal::AllocatorFor(current_device)->allocate(size); }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    Checked(current_device).copy_data(dest, src, count);
  }
};

// ---- The device guard: the current device per thread, one stream per device, synchronous from LibTorch's side.

class GuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    setDevice(device);
    return previous;
  }

  c10::Device getDevice() const override { return c10::Device(kType, static_cast<c10::DeviceIndex>(current_device)); }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kType, PrivateUse1Name(), "'s device guard got a ", device.type(), " device");
    if (!device.has_index()) return;
    internal::CheckIndex(device.index());
    SetCurrentDevice(device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.has_index()) {
      current_device = device.index();
      registered_device.load()->SetCurrent(device.index());
    }
  }

  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    Device* device = registered_device.load();
    return static_cast<c10::DeviceIndex>(device == nullptr ? 0 : device->Count());
  }

  bool queryStream(const c10::Stream& stream) const override { return true; }
  void synchronizeStream(const c10::Stream& stream) const override {
    registered_device.load()->Synchronize(stream.device_index());
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    registered_device.load()->Synchronize(device_index);
  }
};

}  // namespace

namespace internal {

Device* RegisteredDevice() { return registered_device.load(); }

void CheckIndex(int index) {
  Device* device = registered_device.load();
  const int count = device == nullptr ? 0 : device->Count();
  TORCH_CHECK(index >= 0 && index < count, "'", PrivateUse1Name(), ":", index, "' is not a device of this process; it has ",
              count, count == 0 ? "" : " (" + PrivateUse1Name() + ":0 to " + PrivateUse1Name() + ":" +
                                           std::to_string(count - 1) + ")");
}

c10::Allocator* AllocatorFor(int index) {
  CheckIndex(index);
  return &Checked(index);
}

void ResizeStorageBytes(c10::StorageImpl* storage, size_t bytes) {
  TORCH_CHECK(storage->resizable(), PrivateUse1Name(), ": cannot resize a storage that is not resizable");
  c10::DataPtr fresh = bytes > 0 ? storage->allocator()->allocate(bytes) : c10::DataPtr(nullptr, storage->device());
  const size_t keep = std::min(bytes, storage->nbytes());
  if (keep > 0 && storage->data() != nullptr) {
    registered_device.load()->Copy(fresh.get(), storage->data(), keep, CopyKind::kDeviceToDevice,
                                   storage->device().index());
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(bytes);
}

}  // namespace internal

namespace {

std::string RegisterDevice(std::shared_ptr<Device> device, bool probe_autograd) {
  if (device == nullptr) return "kiln::device_kit::Register got no device";
  const std::string name = device->Name();
  Registration& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.device == device) return state.unusable;
  if (state.device != nullptr && state.name == name) {
    return "cannot register the out-of-tree device '" + name +
           "' twice: another kiln::device_kit::Device of that name is registered already; register one object";
  }
  if (!state.name.empty()) return Taken(name, "'" + state.name + "'", state.origin);
  if (std::string taken = LibTorchHolder(name); !taken.empty()) return taken;
  const int count = device->Count();
  if (count > kMaxDevices) {
    return "cannot register the out-of-tree device '" + name + "': it reports " + std::to_string(count) +
           " devices, more than the " + std::to_string(kMaxDevices) + " Kiln's device kit serves";
  }
  // The name first: it is the step LibTorch may refuse (a name it does not accept), and nothing is registered yet.
  if (std::string named = NamePrivateUse1(name); !named.empty()) return named;
  try {
    registered_device.store(device.get());
    RegisterRuntimeHooks([raw = device.get()] { return raw->Count(); });
    static GuardImpl guard;
    c10::impl::registerDeviceGuard(kType, &guard);
    static CurrentDeviceAllocator current_device_allocator;
    c10::SetAllocator(kType, &current_device_allocator);
    internal::RegisterKernels();
  } catch (const c10::Error& error) {
    // LibTorch refused a registration (another library registered PrivateUse1 kernels without a device): the process
    // is left with part of a device, so say so plainly.
    return "registering the out-of-tree device '" + name +
           "' with LibTorch failed part way: " + error.what_without_backtrace();
  } catch (const std::exception& error) {
    return "registering the out-of-tree device '" + name + "' with LibTorch failed part way: " + error.what();
  }
  state.device = device;
  state.name = name;
  state.origin = "registered through Kiln's device kit";
  // LibTorch's autograd engine sizes its queues for devices once, at the process's first backward pass, from the
  // devices registered then: on a device registered after it, every backward fails inside autograd. One backward
  // here either starts the engine with this device in it or finds that it started without it.
  if (count > 0 && probe_autograd) {
    if (std::string failed = ProbeAutograd(); !failed.empty()) {
      // LibTorch's words for an engine without this device (torch/csrc/autograd/engine.cpp); anything else is the
      // device's own failure (out of memory, a copy that failed), said as it is.
      if (failed.find("device_ready_queues_") != std::string::npos) {
        state.unusable = "the out-of-tree device '" + name +
                         "' was registered after this process's first backward pass, and LibTorch's autograd engine "
                         "sizes its device queues once, at that first pass, so it cannot run a backward pass on '" +
                         name + "'; register the device (choose its accelerator) before the process first trains or "
                         "calls backward (LibTorch: " + failed + ")";
      } else {
        state.unusable = "the out-of-tree device '" + name + "' is registered, but one backward pass on " + name +
                         ":0 failed: " + failed;
      }
    }
  }
  return state.unusable;
}

}  // namespace

std::string Register(std::shared_ptr<Device> device) { return RegisterDevice(std::move(device), true); }

std::string RegisterWhenLoaded(std::shared_ptr<Device> device) { return RegisterDevice(std::move(device), false); }

std::string ProbeAutograd() { return internal::ProbeAutograd(); }

std::string CheckCanRegister(const std::string& name) {
  Registration& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  return CheckLocked(state, name);
}

void RecordRegistration(const std::string& name, const std::string& origin) {
  Registration& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.name = name;
  state.origin = origin;
}

std::string RegisteredName() {
  Registration& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.name;
}

std::string NamePrivateUse1(const std::string& name) {
  if (c10::is_privateuse1_backend_registered()) {
    const std::string current = c10::get_privateuse1_backend();
    if (current == name) return "";
    return "cannot name LibTorch's out-of-tree device (PrivateUse1) '" + name + "': it is '" + current +
           "' already, and one process has one PrivateUse1 device";
  }
  try {
    c10::register_privateuse1_backend(name);
  } catch (const c10::Error& error) {
    return "cannot name LibTorch's out-of-tree device (PrivateUse1) '" + name +
           "': " + error.what_without_backtrace();
  }
  return "";
}

std::string PrivateUse1Name() { return c10::DeviceTypeName(kType, /*lower_case=*/true); }

void RegisterRuntimeHooks(std::function<int()> device_count) {
  at::RegisterPrivateUse1HooksInterface(new RuntimeHooks(std::move(device_count)));  // Lives as long as the process.
}

MemoryStats GetMemoryStats(int index) {
  Counters& counters = Checked(index).counters();
  return MemoryStats{counters.allocated_bytes.load(), counters.peak_allocated_bytes.load(),
                     counters.active_blocks.load(), counters.total_blocks.load()};
}

void ResetPeakMemoryStats(int index) {
  Counters& counters = Checked(index).counters();
  counters.peak_allocated_bytes.store(counters.allocated_bytes.load());
}

std::vector<Statistic> DeviceStatistics(int index) {
  const MemoryStats memory = GetMemoryStats(index);
  std::vector<Statistic> statistics = {
      {"memory_allocated_bytes", static_cast<double>(memory.allocated_bytes)},
      {"memory_allocated_peak_bytes", static_cast<double>(memory.peak_allocated_bytes)},
      {"memory_active_blocks", static_cast<double>(memory.active_blocks)},
      {"memory_total_blocks", static_cast<double>(memory.total_blocks)},
      {"cpu_fallback_calls", static_cast<double>(CpuFallbackCalls())},
      {"device_to_host_copies", static_cast<double>(DeviceToHostCopies())},
  };
  Device* device = registered_device.load();
  const int64_t capacity = device != nullptr ? device->MemoryCapacity(index) : -1;
  if (capacity >= 0) statistics.push_back({"memory_total_bytes", static_cast<double>(capacity)});
  return statistics;
}

int64_t CpuFallbackCalls() { return internal::cpu_fallback_calls.load(std::memory_order_relaxed); }
int64_t DeviceToHostCopies() { return internal::device_to_host_copies.load(std::memory_order_relaxed); }

int CurrentDevice() { return current_device; }

void SetCurrentDevice(int index) {
  current_device = index;
  if (Device* device = registered_device.load(); device != nullptr) device->SetCurrent(index);
}

}  // namespace kiln::device_kit
