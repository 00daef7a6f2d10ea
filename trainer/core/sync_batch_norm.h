// kiln::SyncBatchNorm: batch normalization whose training statistics are the whole global batch's, across the
// processes of a c10d process group (PyTorch's torch.nn.SyncBatchNorm; Lightning's Trainer(sync_batchnorm=True)),
// on whatever collective backend the group carries: Gloo for CPU tensors, the accelerator's own (NCCL, a vendor's,
// the virtual NPU's) for its device's (hal/collectives.h). PyTorch's runs on CUDA alone; this one on any device.
//
//   class Net : public kiln::LightningModule {
//     Net() { bn_ = register_module("bn", kiln::SyncBatchNorm(torch::nn::BatchNormOptions(16))); }
//     ...  bn_(x) ...
//     kiln::SyncBatchNorm bn_{nullptr};
//   };
//
// Under a Trainer whose strategy runs several processes (ddp, fsdp), every registered kiln::SyncBatchNorm without a
// group of its own synchronises over the strategy's group; a program of its own gives it one (set_process_group).
// In training, with a group of more than one process, each process computes its local per-channel sum, sum of
// squares and count, one all-reduce (sum) makes them the global batch's, and the input is normalised with the global
// mean and biased variance; the all-reduce is part of the autograd graph (its backward all-reduces the gradient), so
// the gradients are those of the sum of every process's loss, as PyTorch's. The running statistics are updated as
// PyTorch's SyncBatchNorm does (the unbiased variance over the global count), so every process keeps the same ones.
// In eval mode, without a group, or with a group of one process, it is exactly torch::nn::BatchNorm{1,2,3}d.
//
// Options, parameters and buffers are torch::nn::BatchNorm's (weight, bias, running_mean, running_var,
// num_batches_tracked), so state dicts and checkpoints are the same as a BatchNorm's.
//
// Numerics: the variance is E[x²] - E[x]², in the input's type (float for half and bfloat16 inputs); where
// |mean| is large against the standard deviation it loses about log2(mean²/var) bits against a two-pass variance.
// The global count travels in the same type (exact below 2^24 elements per channel in float).
//
// Collectives: a training forward (and its backward) with a group is a collective: every process of the group must
// run the layers in the same order. Thread-safety: as any torch::nn::Module.
#ifndef KILN_TRAINER_CORE_SYNC_BATCH_NORM_H_
#define KILN_TRAINER_CORE_SYNC_BATCH_NORM_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "c10/util/intrusive_ptr.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/nn/cloneable.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/container/any.h"
#include "torch/nn/modules/batchnorm.h"
#include "torch/nn/options/batchnorm.h"
#include "torch/nn/pimpl.h"

namespace kiln {

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options);
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}
  // A layer that shares `original`'s options and its parameter and buffer tensors (the same tensor objects: what
  // one trains, the other sees). What the conversion below makes.
  template <size_t D, typename Derived>
  explicit SyncBatchNormImpl(const torch::nn::BatchNormImplBase<D, Derived>& original)
      : options(original.options) {
    Share(original.weight, original.bias, original.running_mean, original.running_var, original.num_batches_tracked);
  }

  // Input: (N, C, ...) with C = num_features. Throws c10::ValueError for an input of fewer than 2 dimensions, of
  // another channel count, or (training) with one value per channel over the whole group.
  at::Tensor forward(const at::Tensor& input);

  // The group whose processes share the batch statistics; null (the default) normalises with this process's batch.
  // The layer keeps the group alive until it is replaced.
  void set_process_group(c10::intrusive_ptr<c10d::ProcessGroup> group) { process_group_ = std::move(group); }
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return process_group_; }

  // How many training forwards of this layer have advanced num_batches_tracked (with track_running_stats): how a
  // caller tells this layer's forwards from another module's that shares its buffer (SyncBatchNormConversion).
  int64_t tracked_forwards() const { return tracked_forwards_; }

  void reset() override;
  void reset_running_stats();
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  torch::nn::BatchNormOptions options;
  at::Tensor weight;
  at::Tensor bias;
  at::Tensor running_mean;
  at::Tensor running_var;
  at::Tensor num_batches_tracked;

 private:
  void Share(const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& running_mean,
             const at::Tensor& running_var, const at::Tensor& num_batches_tracked);
  at::Tensor SynchronisedForward(const at::Tensor& input, double exponential_average_factor);

  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  int64_t tracked_forwards_ = 0;
};

TORCH_MODULE(SyncBatchNorm);

// torch.nn.SyncBatchNorm.convert_sync_batchnorm in C++: every torch::nn::BatchNorm{1,2,3}d registered in `root`'s
// tree is replaced, in its parent (Module::replace_module, and in a torch::nn::Sequential's list of what its forward
// calls), by a kiln::SyncBatchNorm sharing its tensors. What the conversion cannot reach: a member that holds the
// BatchNorm (`torch::nn::BatchNorm2d bn_` called as bn_(x)) still calls the BatchNorm, and so do a ModuleList's or a
// ModuleDict's own lists (their elements are cast by type to be called; they keep the BatchNorm). CheckBypassed
// finds those that ran. Revert (or the destructor) puts every BatchNorm back.
class SyncBatchNormConversion {
 public:
  SyncBatchNormConversion() = default;
  static SyncBatchNormConversion Convert(torch::nn::Module& root);
  ~SyncBatchNormConversion() { Revert(); }
  SyncBatchNormConversion(SyncBatchNormConversion&&) = default;
  SyncBatchNormConversion& operator=(SyncBatchNormConversion&& other);
  SyncBatchNormConversion(const SyncBatchNormConversion&) = delete;
  SyncBatchNormConversion& operator=(const SyncBatchNormConversion&) = delete;

  // The converted layers' paths in the tree ("features.1"), in the tree's order.
  std::vector<std::string> paths() const;
  bool empty() const { return layers_.empty(); }
  // Puts the original BatchNorms back where they were (their tensors hold what training made). Idempotent.
  void Revert();

  // Remembers where every converted layer's num_batches_tracked stands; then, after some training forwards,
  // Bypassed names every layer whose buffer advanced more than its kiln::SyncBatchNorm's forwards did: its original
  // BatchNorm ran (a member called directly), unsynchronised. Layers without running statistics
  // (track_running_stats=false) cannot be told apart this way and are never named (UncheckedPaths lists those whose
  // original is still held elsewhere). Reads each buffer once (a device-to-host copy per layer).
  void BeginCheck();
  std::vector<std::string> Bypassed() const;
  std::vector<std::string> UncheckedPaths() const;

 private:
  struct Layer {
    std::string path;
    torch::nn::Module* parent;  // A module of the tree, which outlives the conversion.
    std::string name;           // In the parent.
    std::shared_ptr<torch::nn::Module> original;  // The BatchNorm.
    std::shared_ptr<SyncBatchNormImpl> sync;
    int sequential_index = -1;  // Where a Sequential parent's forward calls it, or -1,
    torch::nn::AnyModule sequential_entry;  // and what it called there.
    int64_t tracked_at_check = 0;
    int64_t forwards_at_check = 0;
  };
  std::vector<Layer> layers_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_SYNC_BATCH_NORM_H_
