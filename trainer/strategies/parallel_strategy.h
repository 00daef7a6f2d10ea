// ParallelStrategy: what every strategy with one process per device shares (Lightning's ParallelStrategy): meeting
// the other processes through c10d's TCPStore, a c10d::ProcessGroup on the accelerator's own collective backend
// (hal/collectives.h), Gloo beside it for host values where the device is not the CPU, rank 0's parameters and
// buffers broadcast to every rank, and the collectives the loops use (ReduceMean, ReduceAny, AllGather, Barrier).
// DDPStrategy (ddp_strategy.h) and FSDPStrategy (fsdp_strategy.h) add how gradients and parameters travel.
//
// Faults never hang: joining and every collective are bounded by the timeout; past it, the strategy fails with a
// message naming this rank and what it waited for. A master port that is already taken is reported as such.
//
// Which backends: the accelerator's own (its ProcessGroupBackend() name), or "gloo" for a device that computes on the
// CPU; any other name, or Gloo for another device's tensors, is refused before training with the fix.
#ifndef KILN_TRAINER_STRATEGIES_PARALLEL_STRATEGY_H_
#define KILN_TRAINER_STRATEGIES_PARALLEL_STRATEGY_H_

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "c10/util/intrusive_ptr.h"
#include "hal/collectives.h"
#include "trainer/strategies/strategy.h"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace kiln {

class ParallelStrategy : public Strategy {
 public:
  ~ParallelStrategy() override;

  bool IsDistributed() const override { return true; }
  std::optional<std::string> ProcessGroupBackend() const override { return process_group_backend_; }

  // Releases the process group, the store and the device (after the subclass's own state: ReleaseState).
  absl::Status Teardown() override;
  c10::Device root_device() const override { return device_; }
  Batch BatchToDevice(const Batch& batch) const override;
  at::Tensor ReduceMean(const at::Tensor& value) override;
  std::vector<at::Tensor> AllGather(const at::Tensor& value) override;
  bool ReduceAny(bool decision) override;
  bool is_global_zero() const override { return global_rank_ == 0; }
  int global_rank() const override { return global_rank_; }
  int world_size() const override { return world_size_; }
  void Barrier() override;
  std::vector<std::string> ExchangeThroughStore(const std::string& what, const std::string& mine) override;
  // The run's group (process_group()); null before Setup and after Teardown.
  c10::intrusive_ptr<c10d::ProcessGroup> LayerSyncProcessGroup() const override;

 protected:
  ParallelStrategy(absl::Duration timeout, std::optional<std::string> process_group_backend);

  // Sets up this process's device and moves `model` there (unless `move_model` is false: a strategy that places the
  // parameters itself), meets the other ranks, makes the process group, checks it with one all-reduce on the device
  // and broadcasts rank 0's parameters and buffers. Blocks while joining, within the timeout. Errors as
  // Strategy::Setup says; Teardown follows a failure.
  absl::Status JoinProcessGroup(const Plan& plan, torch::nn::Module& model, bool move_model = true);

  // Runs a c10d call, rethrowing its error with this rank, what failed, and the likely cause (FailureHint).
  template <typename Fn>
  auto Collective(const char* what, Fn&& fn) {
    try {
      return fn();
    } catch (const std::exception& e) {
      Rethrow(what, e);
    }
  }
  // What most likely made a collective fail, said after its message. The default: a dead or silent rank.
  virtual std::string FailureHint(const std::string& message) const;
  // DeadlineExceeded: this rank could not meet the others at the plan's address (`cause` says why).
  absl::Status NotMet(absl::string_view cause) const;
  // Releases what the subclass built on the group (a reducer, shards), before the group goes. Never throws.
  virtual void ReleaseState() {}

  // A process group of `ranks` (global ranks; this one among them) on the run's backends, meeting under `name` in
  // the run's store. Every rank of `ranks` calls it (a collective among them); within the timeout.
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeSubgroup(const std::vector<int>& ranks,
                                                                     const std::string& name);

  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return process_group_; }
  // The plan's processes per node and this process's node (after JoinProcessGroup).
  int local_world_size() const { return local_world_size_; }
  int node_rank() const { return node_rank_; }
  absl::Duration timeout() const { return timeout_; }

 private:
  [[noreturn]] void Rethrow(const char* what, const std::exception& error) const;
  // One all-reduce on the device; FailedPrecondition or Internal, naming the backend and the fix, when it fails.
  absl::Status CheckCollectives(const std::string& backend);
  // A process group of `size` ranks, this one `rank`, on the run's backends, their keys under `prefix`.
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeGroup(int rank, int size, const std::string& prefix);

  absl::Duration timeout_;
  std::optional<std::string> process_group_backend_;  // Unset: the accelerator's preference.
  std::shared_ptr<Accelerator> accelerator_;
  LogicalDevice logical_device_;
  c10::Device device_ = c10::Device(c10::DeviceType::CPU);  // logical_device_.compute.
  bool device_set_up_ = false;
  int global_rank_ = 0;
  int world_size_ = 1;
  std::string address_;  // Where the ranks meet (for messages).
  int port_ = 0;
  c10::intrusive_ptr<c10d::Store> store_;
  std::atomic<int64_t> exchange_rounds_{0};  // ExchangeThroughStore's, numbering its keys.
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  CollectiveOptions collective_;  // The backends' options, but for the rank, the size and the store.
  std::string backend_;           // The device backend's name.
  int local_world_size_ = 1;
  int node_rank_ = 0;
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_PARALLEL_STRATEGY_H_
