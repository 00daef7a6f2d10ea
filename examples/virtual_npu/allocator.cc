#include "allocator.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <new>

#include "c10/util/Exception.h"
#include "device.h"
#include "hal/compat/privateuse1.h"

namespace virtual_npu {
namespace {

constexpr size_t kAlignment = 64;

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
  Counters* counters;
};

void RaisePeak(Counters& counters, int64_t in_use) {
  int64_t peak = counters.peak_allocated_bytes.load(std::memory_order_relaxed);
  while (in_use > peak && !counters.peak_allocated_bytes.compare_exchange_weak(peak, in_use)) {
  }
}

void DeleteBlock(void* context) {
  Block* block = static_cast<Block*>(context);
  block->counters->allocated_bytes.fetch_sub(static_cast<int64_t>(block->size));
  block->counters->active_blocks.fetch_sub(1);
  std::free(block->data);
  delete block;
}

class VirtualNpuAllocator final : public kiln::compat::DeviceAllocator {
 public:
  VirtualNpuAllocator() = default;
  void set_index(c10::DeviceIndex index) { index_ = index; }
  Counters& counters() const { return counters_; }

  c10::DataPtr Allocate(size_t size) const override {
    const c10::Device device(kDeviceType, index_);
    if (size == 0) return c10::DataPtr(nullptr, device);
    const size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
    void* data = std::aligned_alloc(kAlignment, rounded);
    TORCH_CHECK(data != nullptr, "virtual_npu device ", static_cast<int>(index_), ": out of memory allocating ", size,
                " bytes (", counters_.allocated_bytes.load(), " bytes in use)");
    const int64_t in_use = counters_.allocated_bytes.fetch_add(static_cast<int64_t>(size)) + static_cast<int64_t>(size);
    RaisePeak(counters_, in_use);
    counters_.active_blocks.fetch_add(1);
    counters_.total_blocks.fetch_add(1);
    return c10::DataPtr(data, new Block{data, size, &counters_}, &DeleteBlock, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

 private:
  c10::DeviceIndex index_ = 0;
  mutable Counters counters_;
};

std::array<VirtualNpuAllocator, kMaxDevices>& Allocators() {
  static auto* const allocators = [] {
    auto* all = new std::array<VirtualNpuAllocator, kMaxDevices>();
    for (int i = 0; i < kMaxDevices; ++i) (*all)[i].set_index(static_cast<c10::DeviceIndex>(i));
    return all;
  }();
  return *allocators;
}

VirtualNpuAllocator& Checked(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < kMaxDevices, "virtual_npu has no device ", static_cast<int>(index));
  return Allocators()[index];
}

// c10's allocator for PrivateUse1, for code that asks c10::GetAllocator: it allocates on the current device.
class CurrentDeviceAllocator final : public kiln::compat::DeviceAllocator {
 public:
  c10::DataPtr Allocate(size_t size) const override { return Checked(CurrentDevice()).Allocate(size); }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
};

CurrentDeviceAllocator current_device_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &current_device_allocator);

}  // namespace

c10::Allocator* DeviceAllocator(c10::DeviceIndex index) { return &Checked(index); }

MemoryStats GetMemoryStats(c10::DeviceIndex index) {
  const Counters& counters = Checked(index).counters();
  return MemoryStats{counters.allocated_bytes.load(), counters.peak_allocated_bytes.load(),
                     counters.active_blocks.load(), counters.total_blocks.load()};
}

void ResetPeakMemoryStats(c10::DeviceIndex index) {
  Counters& counters = Checked(index).counters();
  counters.peak_allocated_bytes.store(counters.allocated_bytes.load());
}

}  // namespace virtual_npu
