// StagedCollectives: a c10d backend for an out-of-tree device's tensors that a vendor uses before its collective
// library (CCL) is on the fabric: each collective stages the device tensors through host memory, runs the host
// transport (Gloo, which the backend owns) and writes the result back to the device. The virtual NPU's "vnccl" is
// one, and so is what //tools:new_backend --device writes; a vendor's own CCL replaces it behind the same
// Accelerator::MakeCollectiveBackend, and everything around it (the c10d::Backend overrides, the Work and its future,
// the timeout, the errors) stays the same.
//
// What it supports, on tensors of its device type (any dtype Gloo takes): allreduce (sum, max, min, product),
// broadcast, allgather, _allgather_base, reduce_scatter, _reduce_scatter_base and barrier. Each call completes before
// it returns (the Work it gives is done; wait() returns at once, getFuture() is completed), and is bounded by the
// timeout the backend was made with: a peer that never arrives makes the call throw Gloo's timeout error.
//
// Thread-safety: as c10d's backends: calls in the same order in every rank; one call at a time per process (the
// host transport serialises them).
#ifndef KILN_HAL_STAGED_COLLECTIVES_H_
#define KILN_HAL_STAGED_COLLECTIVES_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "c10/core/DeviceType.h"
#include "hal/collectives.h"
#include "torch/csrc/distributed/c10d/Backend.hpp"

namespace kiln {

class StagedCollectives final : public c10d::Backend {
 public:
  // Connects rank `options.rank` of `options.world_size` through `options.store`, within `options.timeout`, as the
  // backend `name` ("vnccl") for tensors on `device_type`. Errors say `name`'s host transport failed, and why.
  static absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> Create(const CollectiveOptions& options,
                                                                  std::string name, c10::DeviceType device_type);

  const std::string getBackendName() const override { return name_; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  StagedCollectives(int rank, int size, c10::intrusive_ptr<c10d::Backend> host, std::string name,
                    c10::DeviceType device_type);

 private:
  void CheckOnDevice(const at::Tensor& tensor, const char* what) const;
  // Waits for the host transport's `work`, rethrowing its error with this backend's name, `what` and this rank.
  void Wait(const char* what, const c10::intrusive_ptr<c10d::Work>& work) const;
  std::vector<at::Tensor> ToHost(const std::vector<at::Tensor>& tensors, const char* what) const;

  // A collective on one flat output and one flat input (the _base ones): stages both, runs `host_call` on the host
  // copies, writes the output back.
  c10::intrusive_ptr<c10d::Work> StagedFlat(
      at::Tensor& output, at::Tensor& input, const char* what, c10d::OpType type,
      const std::function<c10::intrusive_ptr<c10d::Work>(at::Tensor&, at::Tensor&)>& host_call);

  c10::intrusive_ptr<c10d::Backend> host_;  // The host transport (Gloo) the staged tensors travel on.
  const std::string name_;
  const c10::DeviceType device_type_;
};

}  // namespace kiln

#endif  // KILN_HAL_STAGED_COLLECTIVES_H_
