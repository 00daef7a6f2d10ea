// The built-in synthetic task: Gaussian clusters in `num_features` dimensions, several per class.
//
// Each class owns `clusters_per_class` centres drawn from N(0, separation^2 I); an example is a random centre of
// its class plus N(0, I) noise. Because a class is a union of clusters, no linear model separates the classes and
// a hidden layer matters, while the clusters overlap a little, so accuracy stays below 100% and keeps telling
// models apart. Everything derives from `seed`: every run (and every process) sees the same data.
#ifndef KILN_TRAINER_SYNTHETIC_DATA_H_
#define KILN_TRAINER_SYNTHETIC_DATA_H_

#include <cstdint>
#include <memory>

#include "trainer/core/data_loader.h"

namespace kiln {

struct SyntheticOptions {
  int64_t num_train = 4096;
  int64_t num_val = 1024;
  int64_t num_features = 16;
  int64_t num_classes = 4;
  int64_t clusters_per_class = 4;
  double separation = 1.0;
  int64_t batch_size = 64;
  uint64_t seed = 42;
  bool shuffle = true;  // Shuffle the training examples every epoch (from seed and epoch).
};

class SyntheticClusters final : public DataModule {
 public:
  explicit SyntheticClusters(const SyntheticOptions& options);

  std::shared_ptr<DataLoader> train_dataloader() override { return train_; }
  std::shared_ptr<DataLoader> val_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> test_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> predict_dataloader() override { return val_; }

 private:
  std::shared_ptr<TensorDataLoader> train_;
  std::shared_ptr<TensorDataLoader> val_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_SYNTHETIC_DATA_H_
