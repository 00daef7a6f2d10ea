// DDPStrategy: distributed data parallel on torch.distributed's own C++ engine (c10d), like Lightning's
// DDPStrategy.
//
// Set-up: the processes meet through c10d's TCPStore at the plan's main address and port (global rank 0 hosts it),
// make a process group whose backend for the device's type is the accelerator's own (Accelerator::
// MakeCollectiveBackend: Gloo for the CPU, NCCL for CUDA, a vendor's CCL for its device; hal/collectives.h), with Gloo
// beside it for host values where the device is not the CPU, check it with one all-reduce on the device, broadcast
// rank 0's parameters and buffers, and average gradients with PyTorch's own DDP reducer (c10d::Reducer: buckets whose
// all-reduces start during the backward pass, rebuilt in gradient order after the first step; with
// find_unused_parameters, parameters that take no part in a step are found from the loss's graph).
//
// Faults never hang: joining and every collective are bounded by `timeout`; past it, the strategy fails with a
// message naming this rank and what it waited for. A master port that is already taken is reported as such.
//
// Which backends: the accelerator's own (its ProcessGroupBackend() name), or "gloo" for a device that computes on the
// CPU; any other name, or Gloo for another device's tensors, is refused before training with the fix.
#ifndef KILN_TRAINER_STRATEGIES_DDP_STRATEGY_H_
#define KILN_TRAINER_STRATEGIES_DDP_STRATEGY_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "c10/util/intrusive_ptr.h"
#include "trainer/strategies/strategy.h"

namespace c10d {
class ProcessGroup;
class Reducer;
class Store;
}  // namespace c10d

namespace kiln {


struct DDPOptions {
  absl::Duration timeout = absl::Minutes(30);  // PyTorch's default for joining and for each collective.
  std::optional<std::string> process_group_backend;  // Unset: the accelerator's preference.
  int64_t bucket_cap_mb = 25;                  // PyTorch DDP's bucket size.
  // Lightning's and PyTorch's: find the parameters that get no gradient in a step (from the loss's graph) and
  // reduce them as zeros. Without it, a parameter that takes no part in a step stops the next one with c10d's
  // error. Strategy names: "ddp_find_unused_parameters_true" / "_false".
  bool find_unused_parameters = false;
};

class DDPStrategy final : public Strategy {
 public:
  explicit DDPStrategy(DDPOptions options = {});
  ~DDPStrategy() override;

  std::string name() const override { return "ddp"; }
  bool IsDistributed() const override { return true; }
  std::optional<std::string> ProcessGroupBackend() const override { return options_.process_group_backend; }

  absl::Status Setup(const Plan& plan, torch::nn::Module& model) override;
  absl::Status Teardown() override;
  c10::Device root_device() const override { return device_; }
  Batch BatchToDevice(const Batch& batch) const override;
  void Backward(const at::Tensor& loss, bool sync_gradients) override;
  void OptimizerStep(torch::optim::Optimizer& optimizer) override;
  at::Tensor ReduceMean(const at::Tensor& value) override;
  std::vector<at::Tensor> AllGather(const at::Tensor& value) override;
  bool ReduceAny(bool decision) override;
  bool is_global_zero() const override { return global_rank_ == 0; }
  int global_rank() const override { return global_rank_; }
  int world_size() const override { return world_size_; }
  void Barrier() override;

  const DDPOptions& options() const { return options_; }

 private:
  // Runs a c10d call, rethrowing its error with this rank and the likely cause (a dead or missing rank).
  template <typename Fn>
  auto Collective(const char* what, Fn&& fn);
  absl::Status NotMet(const std::string& address, int port, absl::string_view cause) const;
  // One all-reduce on the device; FailedPrecondition or Internal, naming the backend and the fix, when it fails.
  absl::Status CheckCollectives(const std::string& backend);

  DDPOptions options_;
  std::shared_ptr<Accelerator> accelerator_;
  LogicalDevice logical_device_;
  c10::Device device_ = c10::Device(c10::DeviceType::CPU);  // logical_device_.compute.
  bool device_set_up_ = false;
  int global_rank_ = 0;
  int world_size_ = 1;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  std::shared_ptr<c10d::Reducer> reducer_;  // Null when no parameter needs a gradient.
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_DDP_STRATEGY_H_
