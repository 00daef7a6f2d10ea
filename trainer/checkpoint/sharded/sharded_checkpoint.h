// Sharded checkpoints, in the layout torch.distributed.checkpoint (DCP) reads, as Lightning's FSDPStrategy writes
// them with state_dict_type="sharded": a folder with the checkpoint's name (`epoch=1-step=20.ckpt/`) holding
//   __<rank>_0.distcp  each rank's records, one after another, each the torch.save file of one piece of a tensor or
//                      of one value (what DCP's FileSystemWriter writes); every rank writes its own, at once
//   .metadata          DCP's Metadata pickle, by rank 0: each tensor's size, dtype and pieces, and where each record
//                      lies (file, offset, length)
//   meta.pt            the rest of the checkpoint, by rank 0 (Lightning's meta.pt): epoch, global_step, loops,
//                      callbacks, schedulers, hyper-parameters and Kiln's section
// The keys are Lightning's: "model.<name>" for the state_dict's tensors; "optimizer_<i>.state.<parameter name>.<key>"
// for each optimizer's state (PyTorch's layout, keyed by the parameter's name as FSDP's optim_state_dict keys it);
// "optimizer_<i>.param_groups.<g>.<key>" for its groups' settings (their "params" as names).
//
// Pieces: a tensor whole on every rank is split by rows, rank r writing rows [r c, (r + 1) c), c = ceil(rows / N)
// (torch.chunk's split); a tensor with no rows to split (a scalar, an empty one) and every value that is not a tensor
// are rank 0's. A tensor a rank holds only a part of (a tensor-parallel slice: ShardedCheckpointRanks::parts) is
// written from that part, where it lies in the whole tensor, without gathering it; the ranks that hold the same part
// split its rows likewise. The index records each piece's offsets in every dimension of the whole tensor (DCP's
// chunks), so the reader assembles the whole tensors whatever pieces wrote them: a checkpoint saved by any number of
// ranks, in any layout, is read by any other, and by DCP.
//
// Atomic, as a checkpoint file is: the ranks write into `<name>.tmp-<rank 0's pid>/`, rank 0 writes the two index
// files once every rank's records are on disk, and renames the folder to the name (exchanging it atomically with
// what was there); a crash or kill at any point leaves the previous checkpoint or the new one, and a stale
// temporary folder that RemoveStaleTemporaryFiles removes.
//
// Kiln reads its own copy of the index (meta.pt's kiln.sharded, written beside .metadata from the same records):
// .metadata's dictionaries are keyed by objects, which LibTorch's unpickler cannot hold. So Kiln reads the sharded
// checkpoints it wrote, not ones PyTorch wrote.
//
// Thread-safety: one call per rank at a time.
#ifndef KILN_TRAINER_CHECKPOINT_SHARDED_SHARDED_CHECKPOINT_H_
#define KILN_TRAINER_CHECKPOINT_SHARDED_SHARDED_CHECKPOINT_H_

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ATen/core/Dict.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

inline constexpr char kShardedMetaFile[] = "meta.pt";
inline constexpr char kDcpMetadataFile[] = ".metadata";

// Where a rank's part of a tensor lies in the whole tensor: its sizes and offsets, and which of the `replicas` ranks
// that hold the same part this one is (they split the part's rows between them, so that each element is written
// once).
struct ShardedPart {
  std::vector<int64_t> whole_sizes;
  std::vector<int64_t> sizes;    // The part's (the tensor this rank holds).
  std::vector<int64_t> offsets;  // Where it starts in the whole tensor, in each dimension.
  int replica = 0;
  int replicas = 1;
};

struct ShardedCheckpointRanks {
  int rank = 0;
  int world_size = 1;
  // Each optimizer's parameters' names, in its state's numbering (group after group); an index past the end is
  // named by its number.
  std::vector<std::vector<std::string>> optimizer_parameter_names;
  // Every rank's `mine`, in rank order: a collective that every rank calls as often, in the same order. For a write
  // on a thread beside the training loop's (an asynchronous save), one that is safe there: through the run's store
  // (Strategy::ExchangeThroughStore), not the process group the loop's collectives use.
  std::function<std::vector<std::string>(const std::string& mine)> all_gather;
  // The parameters whose tensors this rank holds a part of, by name: the model's entry and each optimizer state
  // tensor of the part's sizes (momentum, moments) are written as that part of the whole tensor. Every tensor not
  // named here is whole on every rank. (Last, so that an initialiser of the fields above keeps its meaning.)
  std::unordered_map<std::string, ShardedPart> parts;
};

// Writes `contents` (a checkpoint's dictionary, the same on every rank: checkpoint_connector.h's) as the sharded
// checkpoint `path`, every rank its pieces. A collective. Errors name `path`, and the rank whose write failed; every
// rank returns the error of any rank's write, and rank 0 alone that of the final rename.
// `contents` may be an error (the snapshot failed on this rank): every rank still takes part, and all return it.
// A part (ranks.parts) that does not lie within its whole tensor is an error of this rank's; pieces of the ranks that
// do not cover a whole tensor exactly once (parts that disagree) are refused by rank 0, and nothing is published.
absl::Status WriteShardedCheckpoint(const std::string& path, absl::StatusOr<c10::impl::GenericDict> contents,
                                    const ShardedCheckpointRanks& ranks);

// Whether `path` is a folder holding a sharded checkpoint's meta.pt (complete or not).
bool IsShardedCheckpoint(const std::string& path);

// The whole checkpoint `contents` (meta.pt's dictionary, read) stands for, its state_dict and optimizer_states read
// from the records the folder `path` holds and put back in Kiln's layout. InvalidArgument naming the folder for an
// index that does not fit its records, a record that is damaged or missing, a tensor some pieces of which are missing,
// records that overlap, and tensors whose sizes together pass the folder's data (its .distcp files and what their
// deflated records inflate to, at most MaxInflatedBytes together), refused before any is allocated. Each record is
// read once, however many entries name it, and what it holds is shared by them: the memory this takes is bounded by
// the folder (docs/reliability.md, "Memory").
absl::Status ReadShardedState(const std::string& path, c10::impl::GenericDict& contents);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_SHARDED_SHARDED_CHECKPOINT_H_
