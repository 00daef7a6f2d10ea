// Data for the loops: a DataLoader yields the batches of one epoch by index; a DataModule supplies the loaders for
// each stage, like Lightning's LightningDataModule.
//
// Batches are addressed by index within an epoch rather than streamed, so that the trainer can resume in the middle
// of an epoch and shard an epoch between processes without replaying data. Shuffling is a function of (seed, epoch).
//
// Thread-safety: a DataLoader is used by one thread at a time; `get_batch` for different indices may run on
// background threads once `set_epoch` has returned.
#ifndef KILN_TRAINER_DATA_LOADER_H_
#define KILN_TRAINER_DATA_LOADER_H_

#include <cstdint>
#include <memory>

#include "ATen/core/Tensor.h"
#include "trainer/batch.h"

namespace kiln {

class DataLoader {
 public:
  virtual ~DataLoader() = default;
  // Batches in one epoch.
  virtual int64_t num_batches() const = 0;
  // Called before each epoch; a shuffling loader reorders its examples from (seed, epoch).
  virtual void set_epoch(int64_t epoch) { (void)epoch; }
  // Batch `index` (0 <= index < num_batches()) of the current epoch. May throw c10::Error on bad tensors.
  virtual Batch get_batch(int64_t index) = 0;
};

struct TensorDataLoaderOptions {
  int64_t batch_size = 1;  // Lightning's default.
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;
};

// Batches of in-memory tensors (first dimension: examples).
class TensorDataLoader final : public DataLoader {
 public:
  TensorDataLoader(at::Tensor inputs, at::Tensor targets, TensorDataLoaderOptions options);

  int64_t num_batches() const override;
  void set_epoch(int64_t epoch) override;
  Batch get_batch(int64_t index) override;

  int64_t num_examples() const { return inputs_.size(0); }

 private:
  at::Tensor inputs_;
  at::Tensor targets_;
  TensorDataLoaderOptions options_;
  at::Tensor order_;  // Example order for the current epoch (int64), undefined when not shuffling.
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
};

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_LOADER_H_
