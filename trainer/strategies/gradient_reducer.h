// GradientReducer: averages gradients across processes in buckets, and starts each bucket's all-reduce as soon as
// the backward pass has produced all of its gradients, so that communication overlaps with the rest of backward.
//
// This is the scheme of PyTorch's DDP (c10d::Reducer). Debian's LibTorch ships c10d's Reducer in its library but not
// the headers it needs (torch/csrc/distributed/autograd; LibTorch 2.x's wheel has them: README, "Distributed
// training"), so Kiln drives the same building blocks itself: post
// hooks on each parameter's gradient accumulator (they fire once .grad holds the new gradient), buckets filled in
// reverse parameter order (gradients arrive last layer first) up to a size cap with a small first bucket, and
// c10d's ProcessGroup::allreduce for the communication. Buckets are launched strictly in order, so every process
// issues the same collectives in the same order.
//
// Use: PrepareForBackward() before a backward pass whose gradients must be averaged, FinishBackward() after it.
// Without PrepareForBackward the hooks do nothing (gradient accumulation without communication).
//
// Thread-safety: hooks run on autograd's thread(s); a mutex guards the bucket state. Prepare/Finish are called by
// the loop thread.
#ifndef KILN_TRAINER_STRATEGIES_GRADIENT_REDUCER_H_
#define KILN_TRAINER_STRATEGIES_GRADIENT_REDUCER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ATen/core/Tensor.h"
#include "c10/util/intrusive_ptr.h"

namespace c10d {
class ProcessGroup;
class Work;
}  // namespace c10d

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace kiln {

class GradientReducer {
 public:
  // `parameters` must be the same, in the same order, in every process.
  GradientReducer(std::vector<at::Tensor> parameters, c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                  size_t first_bucket_bytes, size_t bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void PrepareForBackward();
  // Launches what is left (parameters that got no gradient count as zeros), waits for every bucket, and writes
  // the averaged gradients into each parameter's .grad. Throws what the process group throws (a dead peer, a
  // timeout).
  void FinishBackward();

  // The buckets, as indices into `parameters`, in launch order (for tests).
  std::vector<std::vector<size_t>> buckets() const;

 private:
  struct Bucket {
    std::vector<size_t> parameters;
    size_t pending = 0;
    at::Tensor flat;
    c10::intrusive_ptr<c10d::Work> work;
  };
  void MarkReady(size_t parameter);
  void LaunchReadyBucketsLocked();
  void Launch(Bucket& bucket);

  std::vector<at::Tensor> parameters_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // Parameter index -> bucket index.
  std::vector<bool> ready_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // Kept alive: parameters hold them weakly.
  std::vector<uintptr_t> hook_keys_;
  std::mutex mutex_;
  bool armed_ = false;
  size_t next_bucket_ = 0;
  std::shared_ptr<bool> alive_;  // Hooks outlive nothing they must not: they check this first.
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_GRADIENT_REDUCER_H_
