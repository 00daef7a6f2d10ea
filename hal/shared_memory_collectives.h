// SharedMemoryCollectives: Gloo with a same-host fast path. When every rank of a group runs on this host, the CPU
// tensors of the collectives that training uses travel through one shared-memory segment the ranks map, instead of
// through Gloo's TCP connections over loopback. On a machine whose processes share its cores, those connections cost
// the compute its cores (the kernel copies each byte through a socket on both sides); a copy into shared memory and
// a copy out cost a memcpy each. Everything else (other ranks' hosts, CUDA tensors on Gloo, collectives it does not
// carry) goes to the Gloo backend it wraps, which it made connect as usual. Which path a call takes depends on its
// tensors (device, layout, dtype, sizes), which c10d requires to be alike in every rank.
//
// What it carries itself, on dense contiguous CPU tensors, one tensor per call: allreduce (sum, product, min, max),
// broadcast, allgather (equal sizes), _allgather_base, reduce_scatter (equal sizes) and _reduce_scatter_base (sum,
// product, min, max), barrier. A reduction adds the ranks' values in rank order (((x0 + x1) + x2) + ...) for every
// element, whichever rank computes it, so every rank gets the same bits, and the same bits at every run.
//
// How: the segment has two sets of buffers (one slot per rank, and a result area), used in turn by each round of a
// collective; a tensor larger than a slot goes in rounds. A round is: each rank copies its part into its slot, the
// ranks meet (a counter per rank in the segment, a futex to sleep on), each rank reads what it needs. The set a
// round writes was last read two rounds before, and every rank has passed a meeting since, so one meeting per round
// suffices (two for allreduce: sums, then the results).
//
// Failures: each wait of a collective for the other ranks (one per round) lasts at most the backend's timeout, and
// while it waits it checks that the ranks it waits for are alive (a pidfd each): a rank that dies makes its peers
// throw at once, naming it; a rank that fails marks the segment so that its peers throw too. After a failure every
// collective of this backend throws.
//
// The segment: made by rank 0 under /dev/shm (POSIX shm_open), its pages reserved up front (posix_fallocate, so that
// a full /dev/shm is an error at set-up rather than a SIGBUS later), opened by the other ranks, and unlinked as soon
// as every rank has mapped it: nothing stays behind when the processes end. Only a kill of rank 0 between making and
// unlinking it (the few milliseconds of set-up) leaves a /dev/shm/kiln-* file.
//
// Thread-safety: as c10d's backends: calls in the same order in every rank; calls from several threads of a process
// are serialised.
#ifndef KILN_HAL_SHARED_MEMORY_COLLECTIVES_H_
#define KILN_HAL_SHARED_MEMORY_COLLECTIVES_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "c10/util/intrusive_ptr.h"
#include "hal/collectives.h"
#include "torch/csrc/distributed/c10d/Backend.hpp"

namespace kiln {

// The environment variable that turns the fast path off ("0"): every collective then goes over Gloo's connections.
inline constexpr char kSharedMemoryCollectivesEnv[] = "KILN_SHARED_MEMORY_COLLECTIVES";

class SharedMemoryCollectives final : public c10d::Backend {
 public:
  // `gloo` wrapped with the fast path when every rank of `options` is on this host (the same boot, PID and mount
  // namespaces) and the segment could be made and mapped by all of them; otherwise `gloo` itself, and `*why_not`
  // (when given) says why. All ranks decide together, through `options.store`: they all wrap, or none does. Needs
  // every rank to call it; waits for them within `options.timeout`.
  static c10::intrusive_ptr<c10d::Backend> Wrap(const CollectiveOptions& options,
                                                c10::intrusive_ptr<c10d::Backend> gloo,
                                                std::string* why_not = nullptr);

  // Whether `backend` is one (a wrapped Gloo), whose reduce-scatter costs less than an all-reduce.
  static bool IsSharedMemory(const c10d::Backend& backend);

  ~SharedMemoryCollectives() override;

  const std::string getBackendName() const override { return gloo_->getBackendName(); }
  void setTimeout(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<Options> getBackendOptions() override { return gloo_->getBackendOptions(); }

  // Carried here when the tensors allow it (see above); otherwise Gloo's.
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  // Gloo's.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions(),
                        bool wait_all_ranks = false) override;
  void setSequenceNumberForGroup() override { gloo_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return gloo_->getSequenceNumberForGroup(); }

  struct Segment;  // The mapping and its layout (shared_memory_collectives.cc).

  SharedMemoryCollectives(int rank, int size, c10::intrusive_ptr<c10d::Backend> gloo, std::unique_ptr<Segment> segment,
                          std::chrono::milliseconds timeout);

 private:
  // Blocks until every rank has finished the current round's writes (round `round_`, then advances it), or throws:
  // a timeout, a dead rank, a rank that gave up. `what` names the collective in the error.
  void Meet(const char* what);
  // Marks the segment failed (waking the peers), remembers it here, and throws `message`.
  [[noreturn]] void Fail(const std::string& message);
  void CheckUsable(const char* what) const;
  std::byte* Slot(int rank) const;  // This round's slot of `rank`.
  std::byte* Result() const;        // This round's result area.

  void AllReduce(at::Tensor& tensor, c10d::ReduceOp op);
  void Broadcast(at::Tensor& tensor, int root);
  void AllGather(const std::vector<std::byte*>& outputs, const at::Tensor& input);
  void ReduceScatter(at::Tensor& output, const std::vector<const std::byte*>& inputs, c10d::ReduceOp op);

  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::unique_ptr<Segment> segment_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;        // One collective at a time in this process.
  uint64_t round_ = 0;      // Rounds begun: which set of buffers a round uses (every rank counts the same).
  uint64_t meetings_ = 0;   // Meetings begun: what this rank's counter in the segment says.
  std::string failure_;     // Why the backend is unusable; empty while it is usable.
};

}  // namespace kiln

#endif  // KILN_HAL_SHARED_MEMORY_COLLECTIVES_H_
