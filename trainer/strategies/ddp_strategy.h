// DDPStrategy: distributed data parallel on torch.distributed's own C++ engine (c10d), like Lightning's
// DDPStrategy.
//
// Set-up: the processes meet through c10d's TCPStore at the plan's main address and port (global rank 0 hosts it),
// create a process group with the backend the plan names (the accelerator's preference: "gloo" for the CPU),
// broadcast rank 0's parameters and buffers, and average gradients in buckets with all-reduces that start during
// the backward pass as soon as a bucket's gradients are ready (PyTorch's DDP scheme; see gradient_reducer.h).
//
// Faults never hang: joining and every collective are bounded by `timeout`; past it, the strategy fails with a
// message naming this rank and what it waited for. A master port that is already taken is reported as such.
//
// Which process groups exist here: "gloo" (built into Debian's LibTorch). "nccl" needs a CUDA build of LibTorch;
// any other name is an error listing the available ones.
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
class Store;
}  // namespace c10d

namespace kiln {

class GradientReducer;

struct DDPOptions {
  absl::Duration timeout = absl::Minutes(30);  // PyTorch's default for joining and for each collective.
  std::optional<std::string> process_group_backend;  // Unset: the accelerator's preference.
  int64_t bucket_cap_mb = 25;                  // PyTorch DDP's bucket size.
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

  DDPOptions options_;
  std::shared_ptr<Accelerator> accelerator_;
  LogicalDevice logical_device_;
  c10::Device device_ = c10::Device(c10::DeviceType::CPU);  // logical_device_.compute.
  bool device_set_up_ = false;
  int global_rank_ = 0;
  int world_size_ = 1;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_DDP_STRATEGY_H_
