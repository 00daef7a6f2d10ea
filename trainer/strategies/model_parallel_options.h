// ModelParallelStrategy's options (model_parallel_strategy.h), as one struct, and the parsing of its two sizes from
// text ("auto" or a positive count), as fit's flags, config keys and LightningCLI's init_args give them. Torch-free on
// purpose: the trainer's options and the command line include it without LibTorch. Pure and thread-compatible.
#ifndef KILN_TRAINER_STRATEGIES_MODEL_PARALLEL_OPTIONS_H_
#define KILN_TRAINER_STRATEGIES_MODEL_PARALLEL_OPTIONS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kiln {

struct ModelParallelOptions {
  absl::Duration timeout = absl::Minutes(30);  // For joining and for each collective.
  std::optional<std::string> process_group_backend;  // Unset: the accelerator's preference.
  // Lightning's data_parallel_size and tensor_parallel_size: the device mesh's shape. Unset is Lightning's "auto":
  // the number of nodes and the devices per node. Their product must be the run's world size.
  std::optional<int> data_parallel_size;
  std::optional<int> tensor_parallel_size;
  // Lightning's save_distributed_checkpoint: true (its default) saves a sharded checkpoint, a folder each rank writes
  // its slices into without gathering them (trainer/checkpoint/sharded/sharded_checkpoint.h), which any mesh and one
  // device resume from; false a full checkpoint, the whole tensors gathered to every rank and rank 0 writing the file.
  bool save_distributed_checkpoint = true;
};

// "auto" (nullopt) or a positive count; InvalidArgument naming `name`, the text and what is accepted otherwise.
absl::StatusOr<std::optional<int>> ParseParallelSize(const std::string& name, const std::string& text);
// The text ParseParallelSize reads back ("auto" for nullopt).
std::string ParallelSizeText(const std::optional<int>& size);

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_MODEL_PARALLEL_OPTIONS_H_
