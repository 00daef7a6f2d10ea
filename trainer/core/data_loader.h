// Data for the loops: a DataLoader yields the batches of one epoch by index; a DataModule supplies the loaders for
// each stage, like Lightning's LightningDataModule.
//
// Batches are addressed by index within an epoch rather than streamed, so that the trainer can resume in the middle
// of an epoch and shard an epoch between processes without replaying data. Shuffling is a function of (seed, epoch).
//
// Thread-safety: a DataLoader is used by one thread at a time; `get_batch` for different indices may run on
// background threads once `set_epoch` has returned.
#ifndef KILN_TRAINER_CORE_DATA_LOADER_H_
#define KILN_TRAINER_CORE_DATA_LOADER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ATen/core/Tensor.h"
#include "ATen/core/ivalue.h"
#include "absl/status/status.h"
#include "c10/util/Exception.h"
#include "trainer/core/batch.h"

namespace kiln {

class DataLoader {
 public:
  // What num_batches() returns for a stream of unknown length.
  static constexpr int64_t kUnknownLength = -1;

  virtual ~DataLoader() = default;
  // Batches in one epoch, or kUnknownLength for a stream (Lightning's IterableDataset: a token stream, a file larger
  // than memory), whose batches the loops take with next_batch() until it ends.
  virtual int64_t num_batches() const = 0;
  // Called before each epoch; a shuffling loader reorders its examples from (seed, epoch), a stream starts over.
  virtual void set_epoch(int64_t epoch) { (void)epoch; }
  // Batch `index` (0 <= index < num_batches()) of the current epoch. May throw c10::Error on bad tensors. A stream
  // need not implement it (the loops never call it then): the default throws.
  virtual Batch get_batch(int64_t index) {
    TORCH_CHECK(false, "get_batch(", index, ") on a loader without it: a loader of known length implements ",
                "get_batch; a stream returns kUnknownLength from num_batches() and implements next_batch()");
  }
  // A stream's next batch of the current epoch, or nullopt when the epoch's data ends. With several processes, each
  // process's stream is its own share (set_shard), and the loops end the epoch for every process as soon as one
  // process's share ends, so that all take the same steps (what is left of the others' shares is dropped, as
  // drop_last drops a last partial batch). The default throws (loaders of known length use get_batch).
  virtual std::optional<Batch> next_batch() {
    TORCH_CHECK(false, "next_batch() on a loader of known length: the loops call it only when num_batches() is "
                "kUnknownLength");
  }
  // Where a stream stands: what lets load_state_dict make next_batch() return, after set_epoch, the batch it would
  // return next now (a file offset, a row count). Anything torch.save can hold; kept in checkpoints, so that a run
  // resumes mid-epoch exactly. None (the default): the stream cannot resume mid-epoch, and resuming from a
  // checkpoint taken inside an epoch is refused, saying so.
  virtual c10::IValue state_dict() const { return c10::IValue(); }
  virtual absl::Status load_state_dict(const c10::IValue& state) {
    (void)state;
    return absl::UnimplementedError("this loader keeps no position (DataLoader::state_dict returns None)");
  }
  // Makes this loader yield only process `rank`'s share of each epoch, out of `world_size` processes, as
  // PyTorch's DistributedSampler does: rank r takes examples r, r + world_size, r + 2 x world_size, ... of the
  // epoch's order. A training loader gives every rank the same number of batches (the epoch's examples are padded
  // by repeating the first ones, or trimmed with drop_last); an evaluation loader may give each example once
  // instead (TensorDataLoaderOptions::even_shards), so that metrics and predictions over the ranks are one
  // process's. Called by distributed strategies before the first
  // epoch. The default refuses: a loader that cannot be sharded would silently train every rank on all the data.
  virtual absl::Status set_shard(int rank, int world_size) {
    if (world_size == 1) return absl::OkStatus();
    return absl::UnimplementedError("this DataLoader cannot be sharded between processes; implement "
                                    "DataLoader::set_shard to train with a distributed strategy");
  }
};

struct TensorDataLoaderOptions {
  int64_t batch_size = 1;  // Lightning's default.
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;
  // With several processes: true, PyTorch's DistributedSampler (every shard the same size, by repeating the first
  // examples), which training needs so that every rank takes the same number of steps; false, every example exactly
  // once (shards differ by one at most), which evaluation needs so that its metrics over all ranks equal one
  // process's (Lightning pads there too, and its validation metrics then depend on the number of processes).
  bool even_shards = true;
};

// Batches of in-memory tensors (first dimension: examples).
//
// The epoch's order is a permutation drawn from (seed, epoch) alone, whatever the number of processes, and a shard
// takes every world_size-th example of it. So N processes with batch size B see, between them, exactly the batches
// that one process with batch size N x B sees: scaling out changes no result beyond floating-point rounding.
class TensorDataLoader final : public DataLoader {
 public:
  TensorDataLoader(at::Tensor inputs, at::Tensor targets, TensorDataLoaderOptions options);
  // Named tensors, all with the same first dimension, in the order given: each batch is a dictionary batch
  // (Batch::data) with the same names, each tensor holding the batch's rows of its own
  // (TensorDataLoader({{"input_ids", ids}, {"attention_mask", mask}, {"labels", labels}}, {.batch_size = 8})).
  TensorDataLoader(std::vector<std::pair<std::string, at::Tensor>> named, TensorDataLoaderOptions options);

  int64_t num_batches() const override;
  void set_epoch(int64_t epoch) override;
  Batch get_batch(int64_t index) override;
  absl::Status set_shard(int rank, int world_size) override;

  int64_t num_examples() const { return inputs_.size(0); }

 private:
  int64_t num_local_examples() const;

  at::Tensor inputs_;   // For named tensors: the first of them (its first dimension counts the examples).
  at::Tensor targets_;
  std::vector<std::pair<std::string, at::Tensor>> named_;
  TensorDataLoaderOptions options_;
  int rank_ = 0;
  int world_size_ = 1;
  int64_t epoch_ = 0;
  at::Tensor order_;  // This process's examples for the current epoch (int64); undefined: all, in order.
};

enum class Stage { kFit, kValidate, kTest, kPredict };

class DataModule {
 public:
  virtual ~DataModule() = default;
  // Called once per stage before the loaders are asked for (download, split, tokenise, ...).
  virtual void setup(Stage stage) { (void)stage; }
  virtual std::shared_ptr<DataLoader> train_dataloader() = 0;
  // Null when there is no such data; the matching loop is then skipped.
  virtual std::shared_ptr<DataLoader> val_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> test_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> predict_dataloader() { return nullptr; }

  // Several loaders for a stage, as Lightning's *_dataloader() returning a list: the loops run them in this order,
  // pass each one's index to the steps and the batch hooks as `dataloader_idx`, and, when there are two or more, log
  // every metric a step logs with "/dataloader_idx_<i>" after its name (Lightning's names: "val_loss/dataloader_idx_1").
  // By default the one loader of the singular method, or none when it returns null. Null entries are refused.
  virtual std::vector<std::shared_ptr<DataLoader>> val_dataloaders() { return OneOrNone(val_dataloader()); }
  virtual std::vector<std::shared_ptr<DataLoader>> test_dataloaders() { return OneOrNone(test_dataloader()); }
  virtual std::vector<std::shared_ptr<DataLoader>> predict_dataloaders() { return OneOrNone(predict_dataloader()); }

  // What a checkpoint keeps of the data, as Lightning keeps a LightningDataModule's state_dict(): written under
  // state_key() (by default nothing is written), and given to load_state_dict when a fit resumes from the
  // checkpoint. The state holds what torch.save can: dictionaries, lists, numbers, strings, tensors. An error from
  // load_state_dict stops the resume, naming the checkpoint.
  virtual std::string state_key() const { return ""; }
  virtual c10::IValue state_dict() const { return c10::IValue(); }
  virtual absl::Status load_state_dict(const c10::IValue& state) {
    (void)state;
    return absl::OkStatus();
  }

 private:
  static std::vector<std::shared_ptr<DataLoader>> OneOrNone(std::shared_ptr<DataLoader> loader) {
    if (loader == nullptr) return {};
    return {std::move(loader)};
  }
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_DATA_LOADER_H_
