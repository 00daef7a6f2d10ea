// A vendor's LibTorch extension as vendors ship theirs (torch_npu, PyTorch's OpenReg): a shared library that, when it
// is loaded, registers its PrivateUse1 device "acme_npu" from a static initialiser, and that exports the creator of
// its c10d backend, ProcessGroupACCL, with c10d's creator signature (the function its Python package would hand to
// torch.distributed.Backend.register_backend). It knows nothing of Kiln's accelerators; Kiln adopts it with
// --accelerator_library (tests/vendor_stack/adopt_test.sh). Built by build.sh with plain g++.
//
// Its device is two devices in host memory. A vendor writes a runtime's worth of kernels, allocator and guard; this one
// takes them from Kiln's device kit, compiled in with hidden visibility, so that the double stays small. Its collective
// library is Gloo on views of the device's memory (host memory here), as a vendor's CCL would run on its own links.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "hal/device_kit/device_kit.h"
#include "torch/csrc/distributed/c10d/Backend.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "torch/csrc/distributed/c10d/Store.hpp"

namespace {

class HostMemory final : public kiln::device_kit::Device {
 public:
  std::string Name() const override { return "acme_npu"; }
  int Count() const noexcept override { return 2; }
  void* Allocate(int, size_t bytes) override { return std::malloc(bytes); }
  void Free(int, void* data) noexcept override { std::free(data); }
  void Copy(void* dst, const void* src, size_t bytes, kiln::device_kit::CopyKind, int) override {
    std::memcpy(dst, src, bytes);
  }
  int64_t MemoryCapacity(int) const noexcept override { return int64_t{1} << 30; }
};

// What the vendor's library does when it is loaded. Nothing may throw out of a static initialiser.
struct RegisterWhenLoaded {
  RegisterWhenLoaded() {
    const std::string failed = kiln::device_kit::RegisterWhenLoaded(std::make_shared<HostMemory>());
    if (!failed.empty()) std::fprintf(stderr, "acme_torch: %s\n", failed.c_str());
  }
} register_when_loaded;

// A CPU tensor over the same memory as a device tensor.
at::Tensor HostView(const at::Tensor& tensor) {
  return at::from_blob(tensor.data_ptr(), tensor.sizes(), tensor.strides(), tensor.options().device(at::kCPU));
}

std::vector<at::Tensor> HostViews(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> views;
  for (const at::Tensor& tensor : tensors) views.push_back(HostView(tensor));
  return views;
}

std::vector<std::vector<at::Tensor>> HostViews(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> views;
  for (const std::vector<at::Tensor>& tensors : lists) views.push_back(HostViews(tensors));
  return views;
}

}  // namespace

namespace acme {

// ACCL, Acme's collective library, as a c10d backend. Each collective completes before it returns.
class __attribute__((visibility("default"))) ProcessGroupACCL final : public c10d::Backend {
 public:
  ProcessGroupACCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout)
      : Backend(rank, size) {
    auto options = c10d::ProcessGroupGloo::Options::create();
    options->timeout = timeout;
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    links_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  }

  // c10d's creator, exported: what Kiln finds and calls.
  static c10::intrusive_ptr<c10d::Backend> createProcessGroupACCL(const c10::intrusive_ptr<c10d::Store>& store,
                                                                  int rank, int size,
                                                                  const std::chrono::duration<float>& timeout);

  const std::string getBackendName() const override { return "accl"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    std::vector<at::Tensor> views = HostViews(tensors);
    return Done(links_->allreduce(views, opts));
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    std::vector<at::Tensor> views = HostViews(tensors);
    return Done(links_->broadcast(views, opts));
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    std::vector<std::vector<at::Tensor>> out = HostViews(outputs);
    std::vector<at::Tensor> in = HostViews(inputs);
    return Done(links_->allgather(out, in, opts));
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    at::Tensor out = HostView(output);
    at::Tensor in = HostView(input);
    return Done(links_->_allgather_base(out, in, opts));
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    at::Tensor out = HostView(output);
    at::Tensor in = HostView(input);
    return Done(links_->_reduce_scatter_base(out, in, opts));
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return Done(links_->barrier(opts));
  }

 private:
  // Waits (Gloo bounds it by the timeout and throws naming the peer), so the memory the views share is written when
  // the call returns, as the caller's device stream would see it.
  static c10::intrusive_ptr<c10d::Work> Done(c10::intrusive_ptr<c10d::Work> work) {
    work->wait();
    return work;
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> links_;
};

c10::intrusive_ptr<c10d::Backend> ProcessGroupACCL::createProcessGroupACCL(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<ProcessGroupACCL>(store, rank, size,
                                               std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}

}  // namespace acme
