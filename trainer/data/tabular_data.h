// TabularData: a DataModule over a table of features and labels (a CSV file, the digits), split into training and
// validation rows by a seeded permutation, with features standardised by the training rows' statistics.
//
// The split and the statistics depend only on the table, `val_fraction` and `seed`, so a later process (resuming,
// predicting) that builds the module from the same file and flags gets the same rows and the same scaling.
// Validation, test and prediction use the validation rows, unless `set_predict_features` gives other rows to
// predict on.
#ifndef KILN_TRAINER_DATA_TABULAR_DATA_H_
#define KILN_TRAINER_DATA_TABULAR_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/csv_table.h"
#include "trainer/data/task.h"
#include "trainer/core/data_loader.h"

namespace kiln {

struct TabularDataOptions {
  Task task = Task::kClassification;
  double val_fraction = 0.2;  // In [0, 1): the share of rows held out for validation (rounded to whole rows).
  int64_t batch_size = 64;
  bool shuffle = true;  // Shuffle the training rows every epoch (from seed and epoch).
  uint64_t seed = 42;
  bool normalize = true;  // Standardise each feature with the training rows' mean and standard deviation.
};

class TabularData final : public DataModule {
 public:
  // InvalidArgument when the options do not fit the table (no labels, a fraction outside [0, 1), a split that
  // leaves no training rows, a batch size < 1), naming the value and what is accepted.
  static absl::StatusOr<std::unique_ptr<TabularData>> Create(CsvTable table, const TabularDataOptions& options);

  std::shared_ptr<DataLoader> train_dataloader() override { return train_; }
  std::shared_ptr<DataLoader> val_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> test_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> predict_dataloader() override { return predict_ != nullptr ? predict_ : val_; }

  // Rows to predict on instead of the validation rows (float32 [rows, num_features()]), scaled like the rest.
  absl::Status set_predict_features(const at::Tensor& features);

  int64_t num_features() const { return num_features_; }
  // Classes for classification, 1 for regression.
  int64_t num_outputs() const;
  Task task() const { return options_.task; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  int64_t num_train() const { return num_train_; }
  int64_t num_val() const { return num_val_; }

 private:
  TabularData() = default;
  std::shared_ptr<DataLoader> MakeLoader(at::Tensor inputs, at::Tensor targets, bool training) const;

  TabularDataOptions options_;
  int64_t num_features_ = 0;
  int64_t num_train_ = 0;
  int64_t num_val_ = 0;
  std::vector<std::string> class_names_;
  at::Tensor mean_;
  at::Tensor std_;
  std::shared_ptr<DataLoader> train_;
  std::shared_ptr<DataLoader> val_;
  std::shared_ptr<DataLoader> predict_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_TABULAR_DATA_H_
