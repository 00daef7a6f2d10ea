#include "trainer/core/sync_batch_norm.h"

#include <functional>
#include <utility>

#include "ATen/ATen.h"
#include "c10/core/GradMode.h"
#include "c10/util/Exception.h"
#include "torch/csrc/autograd/custom_function.h"
#include "torch/csrc/distributed/c10d/Types.hpp"
#include "torch/csrc/distributed/c10d/Work.hpp"
#include "torch/nn/functional/batchnorm.h"
#include "torch/nn/init.h"
#include "torch/nn/modules/container/sequential.h"

namespace kiln {
namespace {

// Sums `tensor` over the group's processes in place (the group's backend for the tensor's device type).
void AllReduceInPlace(at::Tensor& tensor, const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  std::vector<at::Tensor> tensors = {tensor};
  group->allreduce(tensors)->wait();
}

// The sum of `input` over the group's processes, as a node of the autograd graph: its backward sums the incoming
// gradient over the processes too (the gradient of the sum of every process's loss with respect to this process's
// contribution). The group travels in the node as a capsule (c10d::ProcessGroup is a torch::CustomClassHolder).
class AllReduceSum final : public torch::autograd::Function<AllReduceSum> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* context, const at::Tensor& input,
                            const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
    context->saved_data["group"] = c10::IValue::make_capsule(group);
    at::Tensor sum = input.detach().clone(at::MemoryFormat::Contiguous);
    AllReduceInPlace(sum, group);
    return sum;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list gradients) {
    auto group = c10::static_intrusive_pointer_cast<c10d::ProcessGroup>(context->saved_data["group"].toCapsule());
    at::Tensor gradient = gradients[0].clone(at::MemoryFormat::Contiguous);
    AllReduceInPlace(gradient, group);
    return {gradient, at::Tensor()};
  }
};

// (1, C, 1, ...) for an input of `dims` dimensions: a per-channel tensor that broadcasts against it.
std::vector<int64_t> ChannelShape(int64_t channels, int64_t dims) {
  std::vector<int64_t> shape(dims, 1);
  shape[1] = channels;
  return shape;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// SyncBatchNormImpl

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_) : options(options_) { reset(); }

void SyncBatchNormImpl::reset() {
  // The registrations of torch::nn::BatchNorm (NormImplBase::reset), in the same order, under the same names.
  if (options.affine()) {
    weight = register_parameter("weight", at::empty({options.num_features()}));
    bias = register_parameter("bias", at::empty({options.num_features()}));
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", at::zeros({options.num_features()}));
    running_var = register_buffer("running_var", at::ones({options.num_features()}));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
  reset_parameters();
}

void SyncBatchNormImpl::Share(const at::Tensor& weight_, const at::Tensor& bias_, const at::Tensor& running_mean_,
                              const at::Tensor& running_var_, const at::Tensor& num_batches_tracked_) {
  // register_parameter sets requires_grad: keep each tensor's own (a frozen BatchNorm stays frozen).
  weight = register_parameter("weight", weight_, weight_.defined() && weight_.requires_grad());
  bias = register_parameter("bias", bias_, bias_.defined() && bias_.requires_grad());
  running_mean = register_buffer("running_mean", running_mean_);
  running_var = register_buffer("running_var", running_var_);
  num_batches_tracked = register_buffer("num_batches_tracked", num_batches_tracked_);
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (options.affine()) {
    torch::nn::init::ones_(weight);
    torch::nn::init::zeros_(bias);
  }
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "kiln::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", momentum=";
  if (options.momentum().has_value()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << options.affine() << ", track_running_stats=" << options.track_running_stats() << ")";
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  TORCH_CHECK_VALUE(input.dim() >= 2, "kiln::SyncBatchNorm: expected an input of at least 2 dimensions (batch, ",
                    "channels, ...), got ", input.dim(), "D input of shape ", input.sizes());
  TORCH_CHECK_VALUE(input.size(1) == options.num_features(), "kiln::SyncBatchNorm(", options.num_features(),
                    "): the input has ", input.size(1), " channels (dimension 1 of ", input.sizes(), "), not ",
                    options.num_features());
  // torch::nn::BatchNorm's bookkeeping, as its forward does it.
  double exponential_average_factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    ++tracked_forwards_;
    exponential_average_factor = options.momentum().has_value()
                                     ? *options.momentum()
                                     : 1.0 / num_batches_tracked.item<double>();  // A cumulative moving average.
  }
  if (is_training() && process_group_ && process_group_->getSize() > 1) {
    return SynchronisedForward(input, exponential_average_factor);
  }
  return torch::nn::functional::detail::batch_norm(input, running_mean, running_var, weight, bias,
                                                   is_training() || !options.track_running_stats(),
                                                   exponential_average_factor, options.eps());
}

at::Tensor SyncBatchNormImpl::SynchronisedForward(const at::Tensor& input, double exponential_average_factor) {
  const int64_t channels = input.size(1);
  // Statistics in float for half-precision inputs (as PyTorch's kernels accumulate them).
  const bool reduced = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
  const at::Tensor x = reduced ? input.to(at::kFloat) : input;
  std::vector<int64_t> reduce_dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) reduce_dims.push_back(d);
  const int64_t local_count = channels > 0 ? x.numel() / channels : 0;

  // One all-reduce of [sum (C), sum of squares (C), count (1)].
  const at::Tensor packed = at::cat({x.sum(reduce_dims), (x * x).sum(reduce_dims),
                                     at::full({1}, static_cast<double>(local_count), x.options())});
  const at::Tensor global = AllReduceSum::apply(packed, process_group_);
  const at::Tensor count = global.narrow(0, 2 * channels, 1).detach();
  if (local_count <= 1) {
    // Only then can the global count be 1 or less: read it (one device-to-host copy) to refuse it as BatchNorm does.
    const double total = count.item<double>();
    TORCH_CHECK_VALUE(total > 1, "kiln::SyncBatchNorm: expected more than 1 value per channel when training, got ",
                      total, " over the ", process_group_->getSize(), " processes of the group (this one's input: ",
                      input.sizes(), ")");
  }
  const at::Tensor mean = global.narrow(0, 0, channels) / count;
  const at::Tensor variance = (global.narrow(0, channels, channels) / count - mean * mean).clamp_min(0);

  const std::vector<int64_t> shape = ChannelShape(channels, x.dim());
  at::Tensor output = (x - mean.view(shape)) * at::rsqrt(variance + options.eps()).view(shape);
  if (weight.defined()) output = output * weight.view(shape) + bias.view(shape);

  if (options.track_running_stats()) {
    // PyTorch's SyncBatchNorm: the running variance is the unbiased one over the global count.
    c10::NoGradGuard no_grad;
    const double factor = exponential_average_factor;
    running_mean.mul_(1 - factor).add_(mean.detach().to(running_mean.scalar_type()) * factor);
    const at::Tensor unbiased = variance.detach() * count / (count - 1);
    running_var.mul_(1 - factor).add_(unbiased.to(running_var.scalar_type()) * factor);
  }
  return reduced ? output.to(input.scalar_type()) : output;
}

// ---------------------------------------------------------------------------------------------------------------
// SyncBatchNormConversion

namespace {

// A kiln::SyncBatchNorm sharing `module`'s tensors when it is a torch::nn::BatchNorm{1,2,3}d; null otherwise.
std::shared_ptr<SyncBatchNormImpl> SyncOf(const torch::nn::Module& module) {
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&module)) {
    return std::make_shared<SyncBatchNormImpl>(*bn);
  }
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&module)) {
    return std::make_shared<SyncBatchNormImpl>(*bn);
  }
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&module)) {
    return std::make_shared<SyncBatchNormImpl>(*bn);
  }
  return nullptr;
}

}  // namespace

SyncBatchNormConversion SyncBatchNormConversion::Convert(torch::nn::Module& root) {
  SyncBatchNormConversion conversion;
  // Depth first, in the tree's order (named_modules'), the paths as state dicts write them.
  const std::function<void(torch::nn::Module&, const std::string&)> walk = [&](torch::nn::Module& module,
                                                                               const std::string& prefix) {
        for (const auto& child : module.named_children()) {
          const std::string path = prefix.empty() ? child.key() : prefix + "." + child.key();
          std::shared_ptr<SyncBatchNormImpl> sync = SyncOf(*child.value());
          if (sync == nullptr) {
            walk(*child.value(), path);
            continue;
          }
          Layer layer{.path = path, .parent = &module, .name = child.key(), .original = child.value(), .sync = sync};
          module.replace_module(child.key(), sync);
          // A Sequential calls its own list, not its registered children: the layer is replaced there too.
          if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module)) {
            int index = 0;
            for (torch::nn::AnyModule& called : *sequential) {
              if (called.ptr() == layer.original) {
                layer.sequential_entry = called;
                called = torch::nn::AnyModule(sync);
                layer.sequential_index = index;
                break;
              }
              ++index;
            }
          }
          conversion.layers_.push_back(std::move(layer));
        }
      };
  walk(root, "");
  return conversion;
}

SyncBatchNormConversion& SyncBatchNormConversion::operator=(SyncBatchNormConversion&& other) {
  if (this != &other) {
    Revert();
    layers_ = std::move(other.layers_);
    other.layers_.clear();
  }
  return *this;
}

std::vector<std::string> SyncBatchNormConversion::paths() const {
  std::vector<std::string> paths;
  for (const Layer& layer : layers_) paths.push_back(layer.path);
  return paths;
}

void SyncBatchNormConversion::Revert() {
  // In reverse, so that nested replacements unwind in order.
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    it->parent->replace_module(it->name, it->original);
    if (it->sequential_index >= 0) {
      auto& sequential = dynamic_cast<torch::nn::SequentialImpl&>(*it->parent);
      *(sequential.begin() + it->sequential_index) = it->sequential_entry;
    }
  }
  layers_.clear();
}

void SyncBatchNormConversion::BeginCheck() {
  for (Layer& layer : layers_) {
    layer.forwards_at_check = layer.sync->tracked_forwards();
    layer.tracked_at_check =
        layer.sync->num_batches_tracked.defined() ? layer.sync->num_batches_tracked.item<int64_t>() : 0;
  }
}

std::vector<std::string> SyncBatchNormConversion::Bypassed() const {
  std::vector<std::string> bypassed;
  for (const Layer& layer : layers_) {
    if (!layer.sync->num_batches_tracked.defined()) continue;
    const int64_t tracked = layer.sync->num_batches_tracked.item<int64_t>() - layer.tracked_at_check;
    const int64_t own = layer.sync->tracked_forwards() - layer.forwards_at_check;
    if (tracked > own) bypassed.push_back(layer.path);
  }
  return bypassed;
}

std::vector<std::string> SyncBatchNormConversion::UncheckedPaths() const {
  std::vector<std::string> unchecked;
  for (const Layer& layer : layers_) {
    // Held by this conversion alone, the original cannot run.
    if (!layer.sync->num_batches_tracked.defined() && layer.original.use_count() > 1) unchecked.push_back(layer.path);
  }
  return unchecked;
}

}  // namespace kiln
