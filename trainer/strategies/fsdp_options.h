// FSDPStrategy's options (fsdp_strategy.h), as one struct, and the table of those a user sets by name
// (fsdp_options.inc): fit's flag, the config file's key and the LightningCLI FSDPStrategy's init argument of each,
// parsed once, where the text comes in, into its FSDPOptions field. Past that edge the options are types: the trainer
// (TrainerOptions::fsdp) and the strategy factory carry this struct, not text.
//
// Adding an option fsdp takes by name: a field in FSDPOptions and a row in fsdp_options.inc (docs/distributed.md,
// "Adding an fsdp option"). A field of a type no row had before also needs its SetFsdpField and CheckFsdpField
// overloads here.
//
// Torch-free on purpose: the trainer's options, fit's flags and the config file include it without LibTorch.
// Everything here is pure and thread-compatible.
#ifndef KILN_TRAINER_STRATEGIES_FSDP_OPTIONS_H_
#define KILN_TRAINER_STRATEGIES_FSDP_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kiln {

// How a sharded unit's gradients are reduced (FSDPOptions::gradient_reduction).
enum class GradientReduction {
  kAuto,           // All-reduce on Gloo (whose reduce-scatter is an all-reduce of a copy) and on a backend that
                   // declares no reduce-scatter (Accelerator::SupportedCollectives), reduce-scatter elsewhere.
  kReduceScatter,  // PyTorch's: each rank receives its shard's sum (half an all-reduce's traffic).
  kAllReduce,      // The whole sum on every rank, each keeping its shard.
};

// Lightning's and PyTorch's names (ShardingStrategy).
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };

// "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD" (case-insensitive); InvalidArgument naming them otherwise.
absl::StatusOr<ShardingStrategy> ParseShardingStrategy(const std::string& text);
const char* ShardingStrategyName(ShardingStrategy strategy);

// Lightning's state_dict_type: full checkpoints (rank 0 writes the whole model and optimizer state, in ddp's layout)
// or sharded ones (every rank writes its part, in torch.distributed.checkpoint's layout; sharded_checkpoint.h).
enum class StateDictType { kFull, kSharded };

// "full" or "sharded", as Lightning spells them; InvalidArgument naming them otherwise.
absl::StatusOr<StateDictType> ParseStateDictType(const std::string& text);
const char* StateDictTypeName(StateDictType type);

// Lightning's auto_wrap_policy, both kinds: by module type (names as LibTorch spells the class without its Impl,
// "Linear", or with its namespace, "torch::nn::Linear") and by size (PyTorch's size_based_auto_wrap_policy: a module
// whose parameters not yet in a unit number at least min_num_params). Empty and 0: no units but the root.
struct FsdpWrapPolicy {
  std::vector<std::string> module_types;
  int64_t min_num_params = 0;
  // Lightning's activation_checkpointing_policy, by type as module_types: such modules become units too, and
  // recompute their activations in the backward pass (FsdpUnitImpl::set_checkpointed).
  std::vector<std::string> checkpoint_types;
};

// A floating-point type of FSDP's mixed precision (PyTorch's torch.float32, torch.bfloat16, torch.float16).
enum class FsdpDtype { kFloat32, kBFloat16, kFloat16 };

// "float32"/"fp32"/"32", "bfloat16"/"bf16", "float16"/"fp16"/"half"/"16" (case-insensitive, a "torch." prefix
// allowed); InvalidArgument naming them otherwise.
absl::StatusOr<FsdpDtype> ParseFsdpDtype(const std::string& text);
// PyTorch's name without "torch.": "float32", "bfloat16", "float16".
const char* FsdpDtypeName(FsdpDtype dtype);

// PyTorch's FSDP MixedPrecision (Lightning's FSDPStrategy(mixed_precision=...)): the shards (and so the optimizer)
// stay in their own type, float32; a unit's parameters are gathered in param_dtype (each rank's shard cast, then
// all-gathered) and its forward and backward compute in it; the gradients are reduced in reduce_dtype (unset:
// param_dtype, as PyTorch's) and land in the shard's gradient in the shard's type; the model's buffers are cast to
// buffer_dtype. Unset: no cast. All three unset: the precision flag decides, as Lightning's FSDPPrecision does
// (FsdpMixedPrecisionFor).
struct FsdpMixedPrecision {
  std::optional<FsdpDtype> param_dtype;
  std::optional<FsdpDtype> reduce_dtype;
  std::optional<FsdpDtype> buffer_dtype;

  bool empty() const { return !param_dtype && !reduce_dtype && !buffer_dtype; }
  bool operator==(const FsdpMixedPrecision& other) const {
    return param_dtype == other.param_dtype && reduce_dtype == other.reduce_dtype && buffer_dtype == other.buffer_dtype;
  }
};

// Lightning's FSDPPrecision.mixed_precision_config: the MixedPrecision a precision flag (its canonical name) implies
// when none is given: all three float16 for "16-mixed" and "16-true", bfloat16 for "bf16-mixed" and "bf16-true",
// float32 for "32-true"; nothing for any other ("64-true", which Lightning's FSDP refuses).
FsdpMixedPrecision FsdpMixedPrecisionFor(absl::string_view precision);

struct FSDPOptions {
  absl::Duration timeout = absl::Minutes(30);  // For joining and for each collective.
  std::optional<std::string> process_group_backend;  // Unset: the accelerator's preference.
  ShardingStrategy sharding_strategy = ShardingStrategy::kFullShard;  // Lightning's default.
  FsdpWrapPolicy auto_wrap_policy;                                    // Empty: one (root) unit.
  // PyTorch's backward_prefetch=BACKWARD_PRE (its default): a unit's backward starts the gather of the unit whose
  // backward comes next, so that it travels while this one computes (one more unit's parameters whole at a time).
  bool backward_prefetch = true;
  // PyTorch's forward_prefetch (off by default there too): the same in the forward pass, in the order of the first
  // step's forward.
  bool forward_prefetch = false;
  // Lightning's cpu_offload (strategy name "fsdp_cpu_offload"): each rank's shards, their gradients and so the
  // optimizer's state stay in host memory, and the optimizer steps there; only the units computing are on the
  // device. Shards even one rank; refused with NO_SHARD.
  bool cpu_offload = false;
  // Lightning's activation_checkpointing_policy: module types whose activations are made again in the backward pass
  // instead of kept (they become units too; fsdp_unit.h).
  std::vector<std::string> activation_checkpointing_policy;
  // Lightning's state_dict_type (StateDictType).
  StateDictType state_dict_type = StateDictType::kFull;
  // Kiln's (PyTorch always reduce-scatters): how a sharded unit's gradients are reduced. kAuto all-reduces on Gloo,
  // whose reduce-scatter is an all-reduce of a copy of the buffer (so the sums are the same, without the copies), and
  // reduce-scatters on every other backend.
  GradientReduction gradient_reduction = GradientReduction::kAuto;
  // PyTorch's MixedPrecision (FsdpMixedPrecision); all unset: what the trainer's precision implies.
  FsdpMixedPrecision mixed_precision;
};

// The module type names of a comma-separated list ("Linear, Conv2d"), each without the spaces around it; empty
// entries dropped.
std::vector<std::string> SplitModuleTypes(absl::string_view list);

// One row's value as text comes in (fit's flag, whose type the row gives) into its field, by the field's type.
// nullopt when set; otherwise what is accepted ("pass full or sharded"), and the field is left as it was.
std::optional<std::string> SetFsdpField(ShardingStrategy& field, const std::string& text);
std::optional<std::string> SetFsdpField(StateDictType& field, const std::string& text);
std::optional<std::string> SetFsdpField(std::vector<std::string>& module_types, const std::string& text);
std::optional<std::string> SetFsdpField(int64_t& count, const int64_t& value);
std::optional<std::string> SetFsdpField(std::optional<FsdpDtype>& dtype, const std::string& text);

// The check of a field a program set itself (TrainerOptions::fsdp): nullopt, or what is accepted, as SetFsdpField.
std::optional<std::string> CheckFsdpField(ShardingStrategy field);
std::optional<std::string> CheckFsdpField(StateDictType field);
std::optional<std::string> CheckFsdpField(const std::vector<std::string>& module_types);
std::optional<std::string> CheckFsdpField(int64_t count);
std::optional<std::string> CheckFsdpField(const std::optional<FsdpDtype>& dtype);

// A field's value as a flag writes it (for error messages and StrategyArguments' text fields).
std::string FsdpFieldText(ShardingStrategy field);
std::string FsdpFieldText(StateDictType field);
std::string FsdpFieldText(const std::vector<std::string>& module_types);
std::string FsdpFieldText(int64_t count);
std::string FsdpFieldText(const std::optional<FsdpDtype>& dtype);  // "" when unset.

// The names of the table's rows whose field in `options` differs from FSDPOptions{}'s, in the table's order.
std::vector<std::string> FsdpOptionsSet(const FSDPOptions& options);

// Every row's name, "a, b and c": for messages that list fsdp's options.
std::string FsdpOptionNames();

// The name (fit's flag and config key) of the row that Lightning's FSDPStrategy init argument `init_arg` sets, or
// nullptr when no row does (LightningCLI's table, trainer/cli/lightning_classes.cc).
const char* FsdpOptionForInitArg(absl::string_view init_arg);

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_FSDP_OPTIONS_H_
