#include "trainer/strategies/gradient_reducer.h"

#include <utility>

#include "ATen/ATen.h"
#include "torch/csrc/autograd/function.h"
#include "torch/csrc/autograd/function_hook.h"
#include "torch/csrc/autograd/variable.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/csrc/distributed/c10d/Work.hpp"

namespace kiln {
namespace {

class ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<bool> alive, std::function<void()> on_ready)
      : alive_(std::move(alive)), on_ready_(std::move(on_ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& inputs) override {
    if (std::shared_ptr<bool> alive = alive_.lock(); alive && *alive) on_ready_();
    return outputs;
  }

 private:
  std::weak_ptr<bool> alive_;
  std::function<void()> on_ready_;
};

}  // namespace

GradientReducer::GradientReducer(std::vector<at::Tensor> parameters,
                                 c10::intrusive_ptr<c10d::ProcessGroup> process_group, size_t first_bucket_bytes,
                                 size_t bucket_bytes)
    : parameters_(std::move(parameters)),
      process_group_(std::move(process_group)),
      bucket_of_(parameters_.size()),
      ready_(parameters_.size(), false),
      alive_(std::make_shared<bool>(true)) {
  // Reverse order, because backward produces the last layers' gradients first. A bucket holds one dtype.
  size_t cap = first_bucket_bytes;
  size_t bytes = 0;
  for (size_t i = parameters_.size(); i-- > 0;) {
    const at::Tensor& parameter = parameters_[i];
    const size_t size = parameter.numel() * parameter.element_size();
    const bool new_bucket = buckets_.empty() || bytes + size > cap ||
                            parameters_[buckets_.back().parameters.front()].scalar_type() != parameter.scalar_type();
    if (new_bucket) {
      if (!buckets_.empty()) cap = bucket_bytes;
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().parameters.push_back(i);
    bucket_of_[i] = buckets_.size() - 1;
    bytes += size;
  }
  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> accumulator = torch::autograd::impl::grad_accumulator(parameters_[i]);
    hook_keys_.push_back(accumulator->add_post_hook(
        std::make_unique<ReadyHook>(alive_, [this, i] { MarkReady(i); })));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradientReducer::~GradientReducer() {
  *alive_ = false;
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

std::vector<std::vector<size_t>> GradientReducer::buckets() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& bucket : buckets_) out.push_back(bucket.parameters);
  return out;
}

void GradientReducer::PrepareForBackward() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = true;
  next_bucket_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.parameters.size();
    bucket.flat = at::Tensor();
    bucket.work.reset();
  }
}

void GradientReducer::MarkReady(size_t parameter) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_ || ready_[parameter]) return;
  ready_[parameter] = true;
  --buckets_[bucket_of_[parameter]].pending;
  LaunchReadyBucketsLocked();
}

void GradientReducer::LaunchReadyBucketsLocked() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) Launch(buckets_[next_bucket_++]);
}

void GradientReducer::Launch(Bucket& bucket) {
  std::vector<at::Tensor> pieces;
  for (size_t i : bucket.parameters) {
    const at::Tensor& parameter = parameters_[i];
    const at::Tensor grad = parameter.grad();
    pieces.push_back(grad.defined() ? grad.detach().reshape({-1}) : at::zeros({parameter.numel()}, parameter.options()));
  }
  bucket.flat = at::cat(pieces);
  std::vector<at::Tensor> tensors = {bucket.flat};
  bucket.work = process_group_->allreduce(tensors);
}

void GradientReducer::FinishBackward() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!armed_) return;
    armed_ = false;
    // Parameters that took no part in this backward pass count as zero gradients.
    while (next_bucket_ < buckets_.size()) Launch(buckets_[next_bucket_++]);
  }
  const double world_size = static_cast<double>(process_group_->getSize());
  for (Bucket& bucket : buckets_) {
    bucket.work->wait();
    bucket.flat.div_(world_size);
    int64_t offset = 0;
    for (size_t i : bucket.parameters) {
      at::Tensor& parameter = parameters_[i];
      const int64_t n = parameter.numel();
      at::Tensor averaged = bucket.flat.slice(0, offset, offset + n).view(parameter.sizes());
      if (parameter.grad().defined()) {
        parameter.mutable_grad().detach().copy_(averaged);
      } else {
        parameter.mutable_grad() = averaged.clone();
      }
      offset += n;
    }
    bucket.flat = at::Tensor();
    bucket.work.reset();
  }
}

}  // namespace kiln
