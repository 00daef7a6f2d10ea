// FlatParameter: the parameters of one FSDP unit kept as one flat shard per rank (PyTorch FSDP's FlatParameter).
//
// The unit's parameters, flattened in order and padded to a multiple of the world size, are split into equal
// chunks; each rank keeps its chunk as `shard()`, a leaf tensor the optimizer steps. While the unit computes, its
// parameters are whole: Unshard all-gathers every rank's chunk into one flat buffer, and the module's own parameter
// tensors are views of it (they keep their names, shapes and autograd identity, so the module's code and its
// state_dict are unchanged). Reshard frees the buffer's memory (the views keep their shapes; reading one then throws
// LibTorch's "data is not allocated" error). The gradients land in a flat buffer of the same layout (each
// parameter's .grad is a view of it), which ReduceGradients reduce-scatters into the shard's gradient, averaged over
// the ranks, and frees.
//
// Not sharded (NO_SHARD, or one rank): the flat buffer is never freed, and the optimizer steps the members
// themselves (so that a fused optimizer's kernels see the tensors they see under DDP); their gradients, views of the
// flat gradient, are all-reduced in place.
//
// Mixed precision (PyTorch's MixedPrecision): with a param_dtype other than the parameters' own, the shard keeps their
// own type (the optimizer steps it there) and the flat buffer the members view is of param_dtype: Unshard casts this
// rank's chunk and all-gathers the cast chunks, so the unit computes in param_dtype and its gradients come in it.
// They are reduced in reduce_dtype and land in the shard's gradient in the shard's type. Such a unit is always
// sharded (as offload: one rank keeps one chunk, the whole); not sharding it (NO_SHARD over several ranks) is refused.
// A checkpoint and the end of a run (GatherToHost) gather the shards themselves, in their own type.
//
// Every method that takes the process group is a collective: every rank calls it for the same unit in the same
// order. Thread-safety: one thread at a time (the loop's, or autograd's during backward). Throws c10::Error with
// the unit's name for what it refuses.
#ifndef KILN_TRAINER_STRATEGIES_FLAT_PARAMETER_H_
#define KILN_TRAINER_STRATEGIES_FLAT_PARAMETER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "c10/core/StorageImpl.h"
#include "c10/core/ScalarType.h"
#include "c10/util/intrusive_ptr.h"

namespace c10d {
class ProcessGroup;
class Work;
}  // namespace c10d

namespace kiln {

class FlatParameter {
 public:
  struct Member {
    std::string name;  // As the model's named_parameters() says it ("net.0.weight").
    at::Tensor parameter;
  };

  // Takes `members` (one device and one dtype; refused otherwise) as the unit `name`, onto `device`: this rank's
  // chunk of their values becomes the shard, and each parameter becomes a view of the flat buffer, which stays whole
  // (gathered) until Reshard. `sharded` false keeps everything on every rank. `offload` keeps the shard, its
  // gradient (and so the optimizer's state) in host memory (Lightning's cpu_offload): the gather copies it to
  // `device` first, and the reduced gradient comes back; it shards even one rank.
  // `replicate` (HYBRID_SHARD): the ranks that hold the same shard (rank and world_size are then within the
  // shard's group); the reduced gradient is all-reduced across them too, and averaged over all of them. Not owned.
  // `mixed` (Mixed): the types the unit computes and reduces in; unset, or the parameters' own: theirs.
  struct Mixed {
    std::optional<c10::ScalarType> param_dtype;
    std::optional<c10::ScalarType> reduce_dtype;  // Unset: param_dtype (PyTorch's default).
  };
  FlatParameter(std::string name, std::vector<Member> members, int rank, int world_size, bool sharded,
                c10::Device device, bool offload = false, c10d::ProcessGroup* replicate = nullptr, Mixed mixed = {});

  const std::string& name() const { return name_; }
  const std::vector<Member>& members() const { return members_; }
  // The leaf the optimizer steps when sharded: this rank's chunk (undefined when not sharded).
  const at::Tensor& shard() const { return shard_; }
  bool sharded() const { return sharded_; }
  bool gathered() const { return gathered_; }
  // Gathered, and no gather travelling: the parameters can be read.
  bool ready() const { return gathered_ && !gather_work_; }
  // The flat buffer's storage, which the members (and views of them) share; kept while its memory comes and goes.
  const c10::StorageImpl* storage() const { return full_.storage().unsafeGetStorageImpl(); }
  int64_t numel() const { return numel_; }          // The parameters' elements, without padding.
  int64_t padded_numel() const { return padded_; }  // A multiple of the world size.
  // Whether the unit computes in another type than its shard's (mixed precision), and that type; the type its
  // gradients are reduced in.
  bool mixed_precision() const { return mixed_; }
  c10::ScalarType compute_dtype() const { return full_.scalar_type(); }
  c10::ScalarType reduce_dtype() const { return reduce_dtype_; }
  // The bytes the whole parameters take on the device now: the flat buffer's (0 when resharded).
  int64_t gathered_bytes() const { return static_cast<int64_t>(full_.storage().nbytes()); }
  // How many members need a gradient (those ReduceGradients waits for).
  int requires_grad_count() const { return requires_grad_count_; }

  // Makes the parameters whole from every rank's shard (a collective; nothing when already gathered): Unshard waits
  // for it, StartUnshard only starts it (the collective backend carries it while the caller computes) and
  // WaitUnshard waits for a started one. Until then the parameters must not be read.
  void Unshard(c10d::ProcessGroup& group);
  void StartUnshard(c10d::ProcessGroup& group);
  void WaitUnshard();
  // Frees the whole parameters' memory (nothing when not sharded or not gathered; waits for a started gather).
  void Reshard();
  // For a checkpoint of a sharded unit that is not gathered: makes its parameters whole in host memory, the device
  // holding them whole only while they are gathered and copied (so that saving or restoring a checkpoint needs one
  // unit's room on the device, not the model's). The members are then host tensors until ReturnFromHost; their data
  // changes device, which makes autograd forget their gradient accumulators (the caller hooks the new ones).
  // Otherwise (not sharded, already gathered, or on the CPU, whose buffer is host memory) Unshard. A collective.
  void GatherToHost(c10d::ProcessGroup& group);
  bool on_host() const { return host_full_.defined(); }
  // Undoes GatherToHost: the members view the device buffer again, resharded (nothing when not on the host).
  // `update_shard`: this rank's chunk of the host values (a checkpoint restored into them) becomes the shard first
  // (under mixed precision, gathered parameters follow them).
  void ReturnFromHost(bool update_shard = false);
  // Points every member's gradient at a zeroed flat buffer (kept while a gradient-accumulation window sums into it),
  // and, when sharded, gives the shard a zero gradient if it has none.
  void PrepareGradients();
  bool has_gradients() const { return full_grad_.defined(); }
  // Reduces the flat gradient over the ranks, averaged: into the shard's gradient (added to it) when sharded, in place
  // otherwise; then lets the flat gradient go. A collective. StartReduceGradients starts it (the members' gradients
  // must not be read until FinishReduceGradients has waited for it).
  void StartReduceGradients(c10d::ProcessGroup& group);
  void FinishReduceGradients();
  // Reduces a sharded unit's gradient by an all-reduce of the whole buffer, this rank keeping its chunk, instead of a
  // reduce-scatter: for a backend whose reduce-scatter costs more than its all-reduce (Gloo's is a copy of the buffer,
  // an all-reduce and a copy of the chunk: the same sums, later). Off by default.
  void set_reduce_by_all_reduce(bool on) { reduce_by_all_reduce_ = on; }
  // Where member `index` starts in the flat buffer; this rank's chunk (the shard's size when sharded).
  int64_t offset(size_t index) const { return offsets_[index]; }
  int64_t chunk() const { return sharded_ ? padded_ / world_size_ : padded_; }
  // This rank's chunk of `flat`, a tensor laid out as the flat buffer (padded_numel() elements): a view.
  at::Tensor ChunkOf(const at::Tensor& flat) const { return flat.narrow(0, sharded_ ? rank_ * chunk() : 0, chunk()); }
  // Copies this rank's chunk of the whole parameters into the shard (after something wrote the whole parameters,
  // a checkpoint being restored). Needs them gathered.
  void UpdateShardFromFull();
  // Gives every member its own memory holding its whole value (after Unshard) and forgets the flat buffers: the
  // parameters are plain tensors again.
  void Release();

 private:
  void AllocateFull();
  // Whether a gradient-accumulation window is summing into full_grad_ (PrepareGradients).
  bool WindowOpen() const;
  // How many ranks' gradients a reduction sums: this group's, times the replicas' (HYBRID_SHARD).
  int64_t Ranks() const;

  std::string name_;
  std::vector<Member> members_;
  std::vector<int64_t> offsets_;  // Where each member starts in the flat buffer.
  int rank_;
  int world_size_;
  bool sharded_;
  bool offload_;
  c10d::ProcessGroup* replicate_;
  int64_t numel_ = 0;
  int64_t padded_ = 0;
  int requires_grad_count_ = 0;
  at::Tensor full_;       // The flat buffer the members view; its storage is freed when resharded.
  at::Tensor shard_;      // This rank's chunk; undefined when not sharded.
  at::Tensor full_grad_;  // The members' gradients, flat; undefined outside a backward.
  at::Tensor host_full_;  // GatherToHost's copy of the whole parameters, which the members view until ReturnFromHost.
  std::vector<at::Tensor> device_views_;  // Meanwhile, the members' views of full_, by member.
  bool gathered_ = true;
  c10::intrusive_ptr<c10d::Work> gather_work_;  // A started all-gather into full_.
  c10::intrusive_ptr<c10d::Work> reduce_work_;  // A started reduction of full_grad_.
  at::Tensor reduced_;                          // Its output, when sharded.
  bool reduce_by_all_reduce_ = false;
  bool shard_grad_zero_ = false;                // The shard's gradient is the zero PrepareGradients set.
  bool mixed_ = false;                          // full_ is of another type than shard_ (mixed precision).
  c10::ScalarType reduce_dtype_ = c10::ScalarType::Float;
};

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_FLAT_PARAMETER_H_
