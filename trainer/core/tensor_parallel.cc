#include "trainer/core/tensor_parallel.h"

#include <cmath>
#include <limits>
#include <utility>

#include "ATen/ATen.h"
#include "c10/util/Exception.h"
#include "torch/csrc/autograd/custom_function.h"
#include "torch/nn/modules/linear.h"

namespace kiln {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int GroupSize(const ProcessGroupPtr& group) { return group == nullptr ? 1 : group->getSize(); }
int GroupRank(const ProcessGroupPtr& group) { return group == nullptr ? 0 : group->getRank(); }

void SaveGroup(AutogradContext* context, const ProcessGroupPtr& group) {
  // The group travels in the node as a capsule (c10d::ProcessGroup is a torch::CustomClassHolder).
  context->saved_data["group"] = c10::IValue::make_capsule(group);
}
ProcessGroupPtr LoadGroup(AutogradContext* context) {
  return c10::static_intrusive_pointer_cast<c10d::ProcessGroup>(context->saved_data["group"].toCapsule());
}

at::Tensor AllReduce(const at::Tensor& tensor, const ProcessGroupPtr& group) {
  std::vector<at::Tensor> tensors = {tensor.detach().clone(at::MemoryFormat::Contiguous)};
  group->allreduce(tensors)->wait();
  return tensors[0];
}

// Every rank's `tensor` (same shape on each), concatenated along the last dimension (dim = -1) or the first (0).
at::Tensor AllGather(const at::Tensor& tensor, const ProcessGroupPtr& group, int64_t dim) {
  std::vector<at::Tensor> input = {tensor.detach().contiguous()};
  std::vector<std::vector<at::Tensor>> output(1);
  for (int r = 0; r < group->getSize(); ++r) output[0].push_back(at::empty_like(input[0]));
  group->allgather(output, input)->wait();
  return at::cat(output[0], dim);
}

// This rank's 1/size part of `tensor` along `dim`.
at::Tensor Slice(const at::Tensor& tensor, const ProcessGroupPtr& group, int64_t dim) {
  const int64_t length = tensor.size(dim);
  const int size = group->getSize();
  TORCH_CHECK_VALUE(length % size == 0, "tensor parallelism: dimension ", dim, " of size ", length,
                    " cannot be split into ", size, " equal parts (one per rank of the tensor-parallel group); make it "
                    "a multiple of tensor_parallel_size");
  const int64_t part = length / size;
  return tensor.narrow(dim, group->getRank() * part, part).contiguous();
}

class CopyToRegion final : public torch::autograd::Function<CopyToRegion> {
 public:
  static at::Tensor forward(AutogradContext* context, const at::Tensor& input, const ProcessGroupPtr& group) {
    SaveGroup(context, group);
    return input.view_as(input);
  }
  static variable_list backward(AutogradContext* context, variable_list gradients) {
    return {AllReduce(gradients[0], LoadGroup(context)), at::Tensor()};
  }
};

class ReduceFromRegion final : public torch::autograd::Function<ReduceFromRegion> {
 public:
  static at::Tensor forward(AutogradContext* context, const at::Tensor& input, const ProcessGroupPtr& group) {
    return AllReduce(input, group);
  }
  static variable_list backward(AutogradContext* context, variable_list gradients) {
    return {gradients[0], at::Tensor()};
  }
};

class GatherFromRegion final : public torch::autograd::Function<GatherFromRegion> {
 public:
  static at::Tensor forward(AutogradContext* context, const at::Tensor& input, const ProcessGroupPtr& group) {
    SaveGroup(context, group);
    return AllGather(input, group, -1);
  }
  static variable_list backward(AutogradContext* context, variable_list gradients) {
    return {Slice(gradients[0], LoadGroup(context), -1), at::Tensor()};
  }
};

class ScatterToRegion final : public torch::autograd::Function<ScatterToRegion> {
 public:
  static at::Tensor forward(AutogradContext* context, const at::Tensor& input, const ProcessGroupPtr& group) {
    SaveGroup(context, group);
    return Slice(input.detach(), group, -1);
  }
  static variable_list backward(AutogradContext* context, variable_list gradients) {
    return {AllGather(gradients[0], LoadGroup(context), -1), at::Tensor()};
  }
};

class ReduceScatterToRegion final : public torch::autograd::Function<ReduceScatterToRegion> {
 public:
  static at::Tensor forward(AutogradContext* context, const at::Tensor& input, const ProcessGroupPtr& group) {
    SaveGroup(context, group);
    const int size = group->getSize();
    TORCH_CHECK_VALUE(input.dim() >= 1 && input.size(0) % size == 0, "tensor parallelism: reduce-scatter needs a "
                      "first dimension that the tensor-parallel group's ", size, " ranks divide, got shape ",
                      input.sizes());
    std::vector<int64_t> shape = input.sizes().vec();
    shape[0] /= size;
    at::Tensor output = at::empty(shape, input.options());
    at::Tensor whole = input.detach().contiguous();
    group->_reduce_scatter_base(output, whole)->wait();
    return output;
  }
  static variable_list backward(AutogradContext* context, variable_list gradients) {
    return {AllGather(gradients[0], LoadGroup(context), 0), at::Tensor()};
  }
};

// The whole layer's initial parameters as torch::nn::Linear(in, out) draws them (the same generator calls).
torch::nn::Linear WholeLinear(int64_t in_features, int64_t out_features, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in_features, out_features).bias(bias));
}

void CheckDivides(const ProcessGroupPtr& group, int64_t features, const char* layer, const char* what) {
  const int size = GroupSize(group);
  TORCH_CHECK_VALUE(features % size == 0, layer, ": ", what, " (", features, ") must be a multiple of the "
                    "tensor-parallel group's size (", size, "): each rank holds an equal part; choose sizes that ",
                    size, " divides, or a smaller tensor_parallel_size");
}

}  // namespace

at::Tensor CopyToTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group) {
  if (GroupSize(group) == 1) return input;
  return CopyToRegion::apply(input, group);
}

at::Tensor ReduceFromTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group) {
  if (GroupSize(group) == 1) return input;
  return ReduceFromRegion::apply(input, group);
}

at::Tensor GatherFromTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group) {
  if (GroupSize(group) == 1) return input;
  return GatherFromRegion::apply(input, group);
}

at::Tensor ScatterToTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group) {
  if (GroupSize(group) == 1) return input;
  return ScatterToRegion::apply(input, group);
}

at::Tensor ReduceScatterToTensorParallelRegion(const at::Tensor& input, const ProcessGroupPtr& group) {
  if (GroupSize(group) == 1) return input;
  return ReduceScatterToRegion::apply(input, group);
}

std::vector<TensorParallelShard> TensorParallelShards(const torch::nn::Module& module) {
  std::vector<TensorParallelShard> shards;
  const auto add = [&](const std::string& path, const torch::nn::Module& candidate) {
    const auto* layer = dynamic_cast<const TensorParallelLayer*>(&candidate);
    if (layer == nullptr) return;
    for (TensorParallelShard shard : layer->tensor_parallel_shards()) {
      shard.name = path.empty() ? shard.name : path + "." + shard.name;
      shards.push_back(std::move(shard));
    }
  };
  // The module itself by reference (a module on the stack is not a shared_ptr), then its descendants.
  add("", module);
  for (const auto& item : module.named_modules("", /*include_self=*/false)) add(item.key(), *item.value());
  return shards;
}

// ---------------------------------------------------------------------------------------------------------------
// ColumnParallelLinearImpl

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const ColumnParallelLinearOptions& options_, ProcessGroupPtr group)
    : options(options_), group_(std::move(group)) {
  reset();
}

void ColumnParallelLinearImpl::reset() {
  CheckDivides(group_, options.out_features(), "ColumnParallelLinear", "out_features");
  torch::nn::Linear whole = WholeLinear(options.in_features(), options.out_features(), options.bias());
  const int64_t part = options.out_features() / GroupSize(group_);
  const int64_t start = GroupRank(group_) * part;
  weight = register_parameter("weight", whole->weight.detach().narrow(0, start, part).clone());
  if (options.bias()) {
    bias = register_parameter("bias", whole->bias.detach().narrow(0, start, part).clone());
  } else {
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& input) {
  at::Tensor output = at::linear(CopyToTensorParallelRegion(input, group_), weight, bias);
  return options.gather_output() ? GatherFromTensorParallelRegion(output, group_) : output;
}

void ColumnParallelLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::ColumnParallelLinear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << (options.bias() ? "true" : "false")
         << ", tensor_parallel_size=" << GroupSize(group_) << ")";
}

std::vector<TensorParallelShard> ColumnParallelLinearImpl::tensor_parallel_shards() const {
  if (GroupSize(group_) == 1) return {};
  std::vector<TensorParallelShard> shards = {{"weight", weight, 0, group_}};
  if (bias.defined()) shards.push_back({"bias", bias, 0, group_});
  return shards;
}

// ---------------------------------------------------------------------------------------------------------------
// RowParallelLinearImpl

RowParallelLinearImpl::RowParallelLinearImpl(const RowParallelLinearOptions& options_, ProcessGroupPtr group)
    : options(options_), group_(std::move(group)) {
  reset();
}

void RowParallelLinearImpl::reset() {
  CheckDivides(group_, options.in_features(), "RowParallelLinear", "in_features");
  torch::nn::Linear whole = WholeLinear(options.in_features(), options.out_features(), options.bias());
  const int64_t part = options.in_features() / GroupSize(group_);
  weight = register_parameter("weight", whole->weight.detach().narrow(1, GroupRank(group_) * part, part).clone());
  if (options.bias()) {
    bias = register_parameter("bias", whole->bias.detach().clone());
  } else {
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& input) {
  if (GroupSize(group_) == 1) return at::linear(input, weight, bias);
  const at::Tensor local = options.input_is_parallel() ? input : ScatterToTensorParallelRegion(input, group_);
  // The partial products summed over the ranks, and the bias added once, to the sum.
  at::Tensor output = ReduceFromTensorParallelRegion(at::linear(local, weight), group_);
  return bias.defined() ? output + bias : output;
}

void RowParallelLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::RowParallelLinear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << (options.bias() ? "true" : "false")
         << ", tensor_parallel_size=" << GroupSize(group_) << ")";
}

std::vector<TensorParallelShard> RowParallelLinearImpl::tensor_parallel_shards() const {
  if (GroupSize(group_) == 1) return {};
  return {{"weight", weight, 1, group_}};
}

// ---------------------------------------------------------------------------------------------------------------
// ParallelSelfAttentionImpl

ParallelSelfAttentionImpl::ParallelSelfAttentionImpl(int64_t embed_dim_, int64_t num_heads_, ProcessGroupPtr group)
    : embed_dim(embed_dim_), num_heads(num_heads_), group_(std::move(group)) {
  reset();
}

void ParallelSelfAttentionImpl::reset() {
  TORCH_CHECK_VALUE(num_heads >= 1 && embed_dim % num_heads == 0, "ParallelSelfAttention: embed_dim (", embed_dim,
                    ") must be a multiple of num_heads (", num_heads, ")");
  const int size = GroupSize(group_);
  TORCH_CHECK_VALUE(num_heads % size == 0, "ParallelSelfAttention: num_heads (", num_heads, ") must be a multiple of "
                    "the tensor-parallel group's size (", size, "): each rank computes an equal number of heads; "
                    "choose a tensor_parallel_size that divides ", num_heads);
  query = register_module("query", ColumnParallelLinear(ColumnParallelLinearOptions(embed_dim, embed_dim), group_));
  key = register_module("key", ColumnParallelLinear(ColumnParallelLinearOptions(embed_dim, embed_dim), group_));
  value = register_module("value", ColumnParallelLinear(ColumnParallelLinearOptions(embed_dim, embed_dim), group_));
  out = register_module("out", RowParallelLinear(RowParallelLinearOptions(embed_dim, embed_dim), group_));
}

at::Tensor ParallelSelfAttentionImpl::forward(const at::Tensor& input) {
  TORCH_CHECK_VALUE(input.dim() == 3 && input.size(2) == embed_dim, "ParallelSelfAttention: expected an input of "
                    "shape (batch, time, ", embed_dim, "), got ", input.sizes());
  const int64_t batch = input.size(0);
  const int64_t time = input.size(1);
  const int64_t heads = num_heads / GroupSize(group_);  // This rank's.
  const int64_t head_dim = embed_dim / num_heads;
  const auto split = [&](const at::Tensor& x) { return x.view({batch, time, heads, head_dim}).transpose(1, 2); };
  const at::Tensor q = split(query(input));
  const at::Tensor k = split(key(input));
  const at::Tensor v = split(value(input));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
  const at::Tensor future = at::ones({time, time}, input.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  const at::Tensor attended = at::matmul(at::softmax(scores, -1), v);  // (batch, heads, time, head_dim)
  return out(attended.transpose(1, 2).contiguous().view({batch, time, heads * head_dim}));
}

void ParallelSelfAttentionImpl::pretty_print(std::ostream& stream) const {
  stream << "kiln::ParallelSelfAttention(embed_dim=" << embed_dim << ", num_heads=" << num_heads
         << ", tensor_parallel_size=" << GroupSize(group_) << ")";
}

}  // namespace kiln
