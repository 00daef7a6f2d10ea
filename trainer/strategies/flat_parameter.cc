#include "trainer/strategies/flat_parameter.h"

#include <utility>

#include "ATen/ATen.h"
#include "c10/core/Allocator.h"
#include "c10/core/StorageImpl.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "trainer/strategies/gather_on_use.h"

namespace kiln {

FlatParameter::FlatParameter(std::string name, std::vector<Member> members, int rank, int world_size, bool sharded,
                             c10::Device device, bool offload, c10d::ProcessGroup* replicate, Mixed mixed)
    : name_(std::move(name)),
      members_(std::move(members)),
      rank_(rank),
      world_size_(world_size),
      sharded_(offload || (sharded && world_size > 1) ||
               (sharded && !members_.empty() && mixed.param_dtype.has_value() &&
                *mixed.param_dtype != members_.front().parameter.scalar_type())),
      offload_(offload),
      replicate_(replicate) {
  // This class works on the flat buffer itself: its operators do not trigger a gather (gather_on_use.h).
  GatherOnUseScope::ScopedBypass bypass;
  TORCH_CHECK(!members_.empty(), "fsdp unit '", name_, "' has no parameters");
  const at::Tensor& first = members_.front().parameter;
  for (const Member& member : members_) {
    TORCH_CHECK_VALUE(member.parameter.device() == first.device() && member.parameter.dtype() == first.dtype(),
                      "fsdp unit '", name_, "': parameter '", member.name, "' is ", member.parameter.dtype(), " on ",
                      member.parameter.device(), " but '", members_.front().name, "' is ", first.dtype(), " on ",
                      first.device(), "; the parameters of one unit are kept as one flat tensor, so they must share a "
                      "dtype and a device (wrap the modules that differ as units of their own)");
    offsets_.push_back(numel_);
    numel_ += member.parameter.numel();
    if (member.parameter.requires_grad()) ++requires_grad_count_;
  }
  mixed_ = mixed.param_dtype.has_value() && *mixed.param_dtype != first.scalar_type();
  TORCH_CHECK_VALUE(!mixed_ || sharded_, "fsdp unit '", name_, "': mixed precision (param_dtype ",
                    *mixed.param_dtype, " for ", first.dtype(), " parameters) needs the unit sharded, but it is not "
                    "(NO_SHARD); use FULL_SHARD or SHARD_GRAD_OP with mixed precision, or leave param_dtype unset");
  reduce_dtype_ = mixed.reduce_dtype.value_or(mixed.param_dtype.value_or(first.scalar_type()));
  padded_ = sharded_ ? (numel_ + world_size_ - 1) / world_size_ * world_size_ : numel_;
  at::NoGradGuard no_grad;
  full_ = at::zeros({padded_}, first.options().device(device).requires_grad(false));  // The padding stays zero.
  for (size_t i = 0; i < members_.size(); ++i) {
    full_.narrow(0, offsets_[i], members_[i].parameter.numel()).copy_(members_[i].parameter.detach().reshape(-1));
  }
  if (sharded_) {
    shard_ = ChunkOf(full_).to(offload_ ? c10::Device(c10::kCPU) : device, /*non_blocking=*/false, /*copy=*/true);
    shard_.set_requires_grad(requires_grad_count_ > 0);
  }
  // The members compute in param_dtype: the whole values cast (what casting each chunk and gathering them gives).
  if (mixed_) full_ = full_.to(*mixed.param_dtype);
  // The members become views of the flat buffer: same tensors (the module's own), new memory.
  const at::Tensor base = full_.detach();
  for (size_t i = 0; i < members_.size(); ++i) {
    at::Tensor& parameter = members_[i].parameter;
    parameter.set_data(base.narrow(0, offsets_[i], parameter.numel()).view(parameter.sizes()));
  }
}

void FlatParameter::AllocateFull() {
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(padded_) * full_.element_size();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

void FlatParameter::Unshard(c10d::ProcessGroup& group) {
  StartUnshard(group);
  WaitUnshard();
}

void FlatParameter::StartUnshard(c10d::ProcessGroup& group) {
  GatherOnUseScope::ScopedBypass bypass;
  if (gathered_) return;
  AllocateFull();
  at::Tensor output = full_.detach();
  // An offloaded shard travels from host memory first (the collective carries the device's tensors); under mixed
  // precision the chunk is cast first, so that the gather carries param_dtype (PyTorch's order).
  at::Tensor input =
      offload_ || mixed_ ? shard_.detach().to(full_.device(), full_.scalar_type()) : shard_.detach();
  gather_work_ = group._allgather_base(output, input);
  gathered_ = true;
}

void FlatParameter::WaitUnshard() {
  if (!gather_work_) return;
  c10::intrusive_ptr<c10d::Work> work = std::move(gather_work_);
  gather_work_.reset();
  work->wait();
}

void FlatParameter::Reshard() {
  if (!sharded_ || !gathered_) return;
  WaitUnshard();
  // The members' views keep their shapes; their memory goes back to the allocator.
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, full_.device()));
  storage->set_nbytes(0);
  gathered_ = false;
}

void FlatParameter::GatherToHost(c10d::ProcessGroup& group) {
  GatherOnUseScope::ScopedBypass bypass;
  if (mixed_ && !on_host()) {
    // The gathered buffer holds param_dtype's rounding of the values: the shards themselves are gathered instead, in
    // their own type, and the compute buffer is left as it is (gathered or not).
    WaitUnshard();
    at::NoGradGuard no_grad;
    at::Tensor input = shard_.detach().to(full_.device());
    at::Tensor whole = at::empty({padded_}, input.options());
    group._allgather_base(whole, input)->wait();
    host_full_ = whole.device().is_cpu() ? whole : whole.cpu();
    for (size_t i = 0; i < members_.size(); ++i) {
      at::Tensor& parameter = members_[i].parameter;
      device_views_.push_back(parameter.detach());
      parameter.set_data(host_full_.narrow(0, offsets_[i], parameter.numel()).view(parameter.sizes()));
    }
    return;
  }
  // On the CPU the gathered buffer already is host memory: a copy would only add a second one.
  if (!sharded_ || gathered_ || on_host() || full_.device().is_cpu()) {
    Unshard(group);
    return;
  }
  Unshard(group);
  at::NoGradGuard no_grad;
  host_full_ = full_.detach().to(c10::Device(c10::kCPU), /*non_blocking=*/false, /*copy=*/true);
  for (size_t i = 0; i < members_.size(); ++i) {
    at::Tensor& parameter = members_[i].parameter;
    // The device view, kept to be put back: made again once the buffer is freed, it would be refused (LibTorch checks
    // a new view against its storage's size).
    device_views_.push_back(parameter.detach());
    parameter.set_data(host_full_.narrow(0, offsets_[i], parameter.numel()).view(parameter.sizes()));
  }
  Reshard();
}

void FlatParameter::ReturnFromHost(bool update_shard) {
  GatherOnUseScope::ScopedBypass bypass;
  if (!on_host()) return;
  at::NoGradGuard no_grad;
  if (update_shard) shard_.detach().copy_(ChunkOf(host_full_));
  // Gathered compute parameters follow the restored values (every rank holds them whole: no collective).
  if (update_shard && mixed_ && gathered_) full_.detach().copy_(host_full_);
  for (size_t i = 0; i < members_.size(); ++i) members_[i].parameter.set_data(device_views_[i]);
  device_views_.clear();
  host_full_.reset();
}

bool FlatParameter::WindowOpen() const {
  if (!full_grad_.defined()) return false;
  if (sharded_) return shard_.grad().defined();
  for (const Member& member : members_) {
    if (member.parameter.requires_grad()) return member.parameter.grad().defined();
  }
  return false;
}

void FlatParameter::PrepareGradients() {
  GatherOnUseScope::ScopedBypass bypass;
  if (requires_grad_count_ == 0) return;
  // A gradient-accumulation window sums into the same buffer until it ends. While it is open the optimizer's
  // parameters have gradients (the shard a zero one, set here): when its zero_grad has cleared them since, the buffer
  // holds a window that never stepped (a skipped batch), and is not summed into.
  if (WindowOpen()) return;
  full_grad_ = at::zeros({padded_}, full_.options());
  for (size_t i = 0; i < members_.size(); ++i) {
    at::Tensor& parameter = members_[i].parameter;
    if (!parameter.requires_grad()) continue;
    // Autograd's AccumulateGrad adds into a gradient that is already there, in place: it lands in the flat buffer.
    parameter.mutable_grad() = full_grad_.narrow(0, offsets_[i], parameter.numel()).view(parameter.sizes());
  }
  if (sharded_ && !shard_.grad().defined()) {
    shard_.mutable_grad() = at::zeros_like(shard_);
    shard_grad_zero_ = true;
  }
}

int64_t FlatParameter::Ranks() const {
  return world_size_ * (replicate_ != nullptr ? replicate_->getSize() : 1);
}

void FlatParameter::StartReduceGradients(c10d::ProcessGroup& group) {
  GatherOnUseScope::ScopedBypass bypass;
  if (!full_grad_.defined() || reduce_work_) return;
  at::NoGradGuard no_grad;
  if (world_size_ == 1 && !sharded_) return;
  if (sharded_ && full_grad_.scalar_type() != reduce_dtype_) full_grad_ = full_grad_.to(reduce_dtype_);
  if (!sharded_ || reduce_by_all_reduce_) {
    // Divided first, then summed, as DDP's reducer does: the same rounding of each rank's part.
    if (const int64_t ranks = Ranks(); ranks > 1) full_grad_.div_(ranks);
    // The optimizer steps the members themselves, whose gradients are views of the buffer: reduced in place. (Or the
    // whole buffer is reduced and the shard's chunk kept: FinishReduceGradients.)
    std::vector<at::Tensor> tensors = {full_grad_};
    reduce_work_ = group.allreduce(tensors);
    return;
  }
  reduced_ = at::empty({chunk()}, full_grad_.options());
  reduce_work_ = group._reduce_scatter_base(reduced_, full_grad_);
}

void FlatParameter::FinishReduceGradients() {
  GatherOnUseScope::ScopedBypass bypass;
  if (!full_grad_.defined()) return;
  if (reduce_work_) {
    c10::intrusive_ptr<c10d::Work> work = std::move(reduce_work_);
    reduce_work_.reset();
    work->wait();
  }
  if (sharded_ && reduce_by_all_reduce_) reduced_ = ChunkOf(full_grad_);
  if (sharded_ && replicate_ != nullptr) {
    // The same shard's part from every node.
    std::vector<at::Tensor> tensors = {reduced_};
    replicate_->allreduce(tensors)->wait();
  }
  if (sharded_) {
    at::NoGradGuard no_grad;
    // A reduce-scatter's chunk is divided after the sum: a pass over the chunk instead of one over the whole buffer.
    // For a power-of-two number of ranks the bits are those of dividing first (a power of two scales exactly, short
    // of subnormal values); otherwise each element may differ by half a unit in the last place.
    if (const int64_t ranks = Ranks(); !reduce_by_all_reduce_ && ranks > 1) reduced_.div_(ranks);
    // Back in the shard's own type (mixed precision) and memory (offload).
    at::Tensor reduced = reduced_.to(shard_.device(), shard_.scalar_type());
    if (shard_grad_zero_ && (!reduce_by_all_reduce_ || mixed_)) {
      // Zero plus the reduced gradient is the reduced gradient: it becomes the shard's, without a pass over it. (A
      // chunk of the all-reduced buffer is added instead: taken, it would keep the whole buffer alive; under mixed
      // precision `reduced` is a copy in the shard's type.)
      shard_.mutable_grad() = reduced;
    } else {
      shard_.mutable_grad().add_(reduced);  // PrepareGradients set it.
    }
    shard_grad_zero_ = false;
    reduced_.reset();
    for (Member& member : members_) member.parameter.mutable_grad().reset();
  }
  full_grad_.reset();
}

void FlatParameter::UpdateShardFromFull() {
  GatherOnUseScope::ScopedBypass bypass;
  if (!sharded_) return;
  TORCH_CHECK(gathered_, "fsdp unit '", name_, "': the shard can be updated only from gathered parameters");
  at::NoGradGuard no_grad;
  shard_.detach().copy_(ChunkOf(full_));
}

void FlatParameter::Release() {
  GatherOnUseScope::ScopedBypass bypass;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < members_.size(); ++i) {
    at::Tensor& parameter = members_[i].parameter;
    if (sharded_) parameter.mutable_grad().reset();
    // After GatherToHost (the end of a run: FSDPStrategy::Finish placed each member, on the device where the model
    // fits) a member keeps its place; a gathered one gets memory of its own.
    if (on_host() || !gathered_) continue;
    try {
      parameter.set_data(parameter.detach().clone());
    } catch (const c10::Error&) {
      // No room for a copy of its own (a device's memory): it stays a view of the flat buffer, which it keeps.
    }
  }
  full_grad_.reset();
  device_views_.clear();
  host_full_.reset();
}

}  // namespace kiln
