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
// Pieces: rank r writes rows [r c, (r + 1) c) of every tensor, c = ceil(rows / N) (torch.chunk's split); a tensor
// with no rows to split (a scalar, an empty one) and every value that is not a tensor are rank 0's. The pieces depend
// only on the tensors' shapes and N, not on how a strategy sharded the state in training, so any number of ranks, and
// DCP, read them.
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
#include <vector>

#include "ATen/core/Dict.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

inline constexpr char kShardedMetaFile[] = "meta.pt";
inline constexpr char kDcpMetadataFile[] = ".metadata";

struct ShardedCheckpointRanks {
  int rank = 0;
  int world_size = 1;
  // Each optimizer's parameters' names, in its state's numbering (group after group); an index past the end is
  // named by its number.
  std::vector<std::vector<std::string>> optimizer_parameter_names;
  // Every rank's `mine`, in rank order: a collective that every rank calls as often, in the same order.
  std::function<std::vector<std::string>(const std::string& mine)> all_gather;
};

// Writes `contents` (a checkpoint's dictionary, the same on every rank: checkpoint_connector.h's) as the sharded
// checkpoint `path`, every rank its pieces. A collective. Errors name `path`, and the rank whose write failed; every
// rank returns the error of any rank's write, and rank 0 alone that of the final rename.
// `contents` may be an error (the snapshot failed on this rank): every rank still takes part, and all return it.
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
