// Counting a step's floating-point operations (FLOPs) by LibTorch's own operators, as PyTorch's
// torch.utils.flop_counter.FlopCounterMode counts them (which Lightning's measure_flops uses): what ThroughputMonitor
// turns into FLOP/s and MFU, and what a module may compute once for its flops_per_batch().
//
//   kiln::FlopCounter counter;
//   if (absl::Status started = counter.Start(); !started.ok()) ...;
//   at::Tensor loss = model.training_step(batch, 0);
//   loss.backward();
//   counter.Stop();
//   int64_t flops = counter.total();  // Forward and backward.
//
// What counts, with PyTorch's formulas (a multiply-add is two FLOPs): aten::mm, addmm, bmm and baddbmm (2 x m x k x
// n, times the batch; the added term is free), aten::convolution and convolution_backward (PyTorch's
// conv_flop_count, for each gradient the backward computes). Everything else is free, as in PyTorch's counter:
// element-wise operators, reductions, softmax, the optimizer's step. aten::linear, matmul and conv2d count through the
// products they run, so nothing counts twice; a counted operator inside another counted one (convolution's own
// _convolution) is not counted again. Attention's fused kernels (scaled_dot_product_attention) are not counted yet.
//
// It observes operators through LibTorch's RecordFunction callbacks, registered for the thread that calls Start (and
// so for the autograd engine's threads that run that thread's backward); operators other threads run are not
// counted. One counter counts at a time in a process: Start while another counts is refused. Operators cost more
// while a counter counts (their inputs' shapes are read), so count one step, not a run.
#ifndef KILN_TRAINER_CORE_FLOP_COUNTER_H_
#define KILN_TRAINER_CORE_FLOP_COUNTER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kiln {

class FlopCounter {
 public:
  FlopCounter() = default;
  ~FlopCounter();  // Stops counting.
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  // Counts the operators this thread runs from now on, adding to what was counted before. FailedPrecondition when
  // another counter is counting in this process (or this one already is).
  absl::Status Start();
  // Stops counting (nothing when not counting). Must be called on the thread that called Start.
  void Stop();
  bool counting() const { return handle_ != 0; }

  // FLOPs counted so far, in all; and by operator ("aten::mm"). Safe to call while counting.
  int64_t total() const { return total_.load(std::memory_order_relaxed); }
  std::map<std::string, int64_t> by_operator() const;
  void Reset();

  // Internal: called by the RecordFunction callback (flop_counter.cc).
  void Add(const char* op, int64_t flops);

 private:
  uint64_t handle_ = 0;  // at::CallbackHandle while counting.
  std::atomic<int64_t> total_{0};
  mutable absl::Mutex mutex_;
  std::map<std::string, int64_t> by_operator_ ABSL_GUARDED_BY(mutex_);
};

// Lightning's measure_flops: the FLOPs `fn` performs (run a forward, or a forward and a backward, in it). An
// exception from `fn` propagates after counting stops. FailedPrecondition when another counter is counting.
absl::StatusOr<int64_t> MeasureFlops(absl::FunctionRef<void()> fn);

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_FLOP_COUNTER_H_
