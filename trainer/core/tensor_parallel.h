// Tensor parallelism as Megatron-LM's layers (Shoeybi et al., 2019): linear layers whose weight is split across the
// ranks of a tensor-parallel group, and a self-attention block whose heads are, with the collectives between them as
// nodes of the autograd graph. Lightning's ModelParallelStrategy parallelises a Python model with PyTorch's
// parallelize_module (ColwiseParallel, RowwiseParallel), which rewrites modules through forward hooks; LibTorch's
// C++ modules have none, so a Kiln model is written with these layers instead. With a null group (or a group of
// one rank) each is exactly its plain counterpart: one model's code serves one device and tp ranks.
//
//   class Block : public torch::nn::Module {      // in LightningModule::configure_model:
//     Block(int64_t d, int64_t heads, GroupPtr tp)  //   auto tp = device_mesh()->tensor_parallel_group();
//       : attention(register_module("attention", kiln::ParallelSelfAttention(d, heads, tp))),
//         fc(register_module("fc", kiln::ColumnParallelLinear(kiln::ColumnParallelLinearOptions(d, 4 * d), tp))),
//         proj(register_module("proj", kiln::RowParallelLinear(kiln::RowParallelLinearOptions(4 * d, d), tp))) {}
//     ... x = x + attention(norm1(x)); x = x + proj(gelu(fc(norm2(x)))); ...
//   };
//
// Initialisation: every layer draws the whole weight (and bias) as torch::nn::Linear(in, out) would, from the same
// generator on every rank, and keeps its rank's slice. So with the same seed on every rank (seed_everything), a
// model's parameters at tp ranks are slices of its parameters on one device, and its losses are the same up to the
// order of floating-point sums. Parameter names are Linear's ("weight", "bias").
//
// Collectives: a forward (and its backward) of a layer with a group of several ranks is a collective of that group:
// every rank of it runs the same layers in the same order, with inputs of the same shape. They run on whatever
// backend the group carries (Gloo for CPU tensors, the accelerator's own for its device's). A failed collective
// throws what c10d throws. Thread-safety: as any torch::nn::Module.
#ifndef KILN_TRAINER_CORE_TENSOR_PARALLEL_H_
#define KILN_TRAINER_CORE_TENSOR_PARALLEL_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "c10/util/intrusive_ptr.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/nn/cloneable.h"
#include "torch/nn/module.h"
#include "torch/nn/pimpl.h"

namespace kiln {

using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

// The collectives of tensor parallelism as autograd functions (Megatron's f, g and their gathering kin). With a null
// group or one rank, each returns its input. The input's last dimension is the split one where they split or gather.
//
// Forward identity; backward all-reduces (sums) the gradient over `group`: what a column-parallel layer puts before
// its matmul, since every rank's slice of the output depends on the whole input.
at::Tensor CopyToTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group);
// Forward all-reduces (sums) over `group`; backward identity: what a row-parallel layer does with its partial output.
at::Tensor ReduceFromTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group);
// Forward all-gathers every rank's input along the last dimension (rank order); backward keeps this rank's slice of
// the gradient. Every rank's input has the same shape.
at::Tensor GatherFromTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group);
// Forward keeps this rank's slice of the last dimension (which the group's size must divide; c10::ValueError
// otherwise); backward all-gathers the gradient.
at::Tensor ScatterToTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group);
// Forward reduce-scatters along the first dimension (each rank gets the sum of its 1/tp rows; the group's size
// must divide it); backward all-gathers the gradient along the first dimension (Megatron's sequence-parallel pair).
at::Tensor ReduceScatterToTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group);

// One parameter of a tensor-parallel layer that holds this rank's slice of a whole one (what a checkpoint gathers).
struct TensorParallelShard {
  std::string name;  // Its name in the module that holds it ("weight").
  at::Tensor parameter;
  int64_t dim;  // Split along this dimension, in rank order, in equal parts.
  ProcessGroupPtr group;
};

// What the strategy asks of a tensor-parallel layer: its parameters that are slices (the rest are the same on every
// rank of the group).
class TensorParallelLayer {
 public:
  virtual ~TensorParallelLayer() = default;
  virtual std::vector<TensorParallelShard> tensor_parallel_shards() const = 0;
};

// Every slice-holding parameter of `module`'s tree (its tensor-parallel layers', with their paths as names).
std::vector<TensorParallelShard> TensorParallelShards(const torch::nn::Module& module);

struct ColumnParallelLinearOptions {
  ColumnParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);  // The whole layer's; the group's size must divide it.
  TORCH_ARG(bool, bias) = true;
  // Whether forward all-gathers the output slices into the whole output (otherwise each rank returns its slice,
  // what a row-parallel layer after it takes).
  TORCH_ARG(bool, gather_output) = false;
};

// Y = X W^T + b with W split by output features: this rank holds rows [r * out / tp, (r + 1) * out / tp) of W and b.
// Input: (..., in_features), the same on every rank; output (..., out_features / tp), or the whole with gather_output.
class ColumnParallelLinearImpl : public torch::nn::Cloneable<ColumnParallelLinearImpl>, public TensorParallelLayer {
 public:
  // Throws c10::ValueError when the group's size does not divide out_features.
  ColumnParallelLinearImpl(const ColumnParallelLinearOptions& options, ProcessGroupPtr group = nullptr);
  at::Tensor forward(const at::Tensor& input);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;
  std::vector<TensorParallelShard> tensor_parallel_shards() const override;

  ColumnParallelLinearOptions options;
  at::Tensor weight;  // (out_features / tp, in_features)
  at::Tensor bias;    // (out_features / tp), or undefined without bias.

 private:
  ProcessGroupPtr group_;
};
TORCH_MODULE(ColumnParallelLinear);

struct RowParallelLinearOptions {
  RowParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);  // The whole layer's; the group's size must divide it.
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  // Whether the input is already this rank's slice of the features (a column-parallel layer's output); otherwise
  // forward takes its slice of the whole input.
  TORCH_ARG(bool, input_is_parallel) = true;
};

// Y = X W^T + b with W split by input features: this rank holds columns [r * in / tp, (r + 1) * in / tp) of W; the
// partial products are all-reduced over the group and b (whole on every rank) is added once, after the sum.
class RowParallelLinearImpl : public torch::nn::Cloneable<RowParallelLinearImpl>, public TensorParallelLayer {
 public:
  // Throws c10::ValueError when the group's size does not divide in_features.
  RowParallelLinearImpl(const RowParallelLinearOptions& options, ProcessGroupPtr group = nullptr);
  at::Tensor forward(const at::Tensor& input);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;
  std::vector<TensorParallelShard> tensor_parallel_shards() const override;

  RowParallelLinearOptions options;
  at::Tensor weight;  // (out_features, in_features / tp)
  at::Tensor bias;    // (out_features), or undefined without bias.

 private:
  ProcessGroupPtr group_;
};
TORCH_MODULE(RowParallelLinear);

// Causal multi-head self-attention with its heads split across the group: query, key and value column-parallel
// (submodules "query", "key", "value"; each rank computes num_heads / tp heads), the output projection row-parallel
// ("out"). Input and output (batch, time, embed_dim), the same on every rank.
class ParallelSelfAttentionImpl : public torch::nn::Cloneable<ParallelSelfAttentionImpl> {
 public:
  // Throws c10::ValueError when num_heads does not divide embed_dim or the group's size does not divide num_heads.
  ParallelSelfAttentionImpl(int64_t embed_dim, int64_t num_heads, ProcessGroupPtr group = nullptr);
  at::Tensor forward(const at::Tensor& input);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  int64_t embed_dim;
  int64_t num_heads;
  ColumnParallelLinear query{nullptr}, key{nullptr}, value{nullptr};
  RowParallelLinear out{nullptr};

 private:
  ProcessGroupPtr group_;
};
TORCH_MODULE(ParallelSelfAttention);

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_TENSOR_PARALLEL_H_
