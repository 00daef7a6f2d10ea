#include "trainer/data/tabular_data.h"

#include <cmath>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "absl/strings/str_cat.h"

namespace kiln {

absl::StatusOr<std::unique_ptr<TabularData>> TabularData::Create(CsvTable table, const TabularDataOptions& options) {
  if (!table.labels.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(table.source, " has no label column to train on"));
  }
  if (!(options.val_fraction >= 0.0 && options.val_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction=", options.val_fraction, " is not valid; pass a fraction in [0.0, 1.0), e.g. 0.2"));
  }
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size=", options.batch_size, " is not valid; pass an int >= 1"));
  }
  const int64_t rows = table.num_rows();
  const int64_t num_val = static_cast<int64_t>(std::llround(options.val_fraction * static_cast<double>(rows)));
  if (rows - num_val < 1) {
    return absl::InvalidArgumentError(absl::StrCat("val_fraction=", options.val_fraction,
                                                   " leaves no training rows out of ", rows, " in ", table.source,
                                                   "; pass a smaller fraction"));
  }
  std::unique_ptr<TabularData> data(new TabularData());
  data->options_ = options;
  data->num_features_ = table.num_features();
  data->num_train_ = rows - num_val;
  data->num_val_ = num_val;
  data->class_names_ = table.class_names;

  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const at::Tensor order = at::randperm(rows, generator, at::TensorOptions().dtype(at::kLong));
  const at::Tensor train_rows = order.slice(0, 0, data->num_train_);
  const at::Tensor val_rows = order.slice(0, data->num_train_, rows);
  at::Tensor train_x = table.features.index_select(0, train_rows);
  at::Tensor val_x = table.features.index_select(0, val_rows);
  if (options.normalize) {
    data->mean_ = train_x.mean(0);
    // A constant feature (std 0, or one training row) is only centred.
    at::Tensor std = data->num_train_ > 1 ? train_x.std(0) : at::zeros_like(data->mean_);
    data->std_ = at::where(std > 0, std, at::ones_like(std));
    train_x = (train_x - data->mean_) / data->std_;
    val_x = (val_x - data->mean_) / data->std_;
  }
  data->train_ = data->MakeLoader(train_x, table.labels.index_select(0, train_rows), /*training=*/true);
  if (num_val > 0) data->val_ = data->MakeLoader(val_x, table.labels.index_select(0, val_rows), /*training=*/false);
  return data;
}

std::shared_ptr<DataLoader> TabularData::MakeLoader(at::Tensor inputs, at::Tensor targets, bool training) const {
  // Evaluation and prediction see every example once, whatever the number of processes (data_loader.h).
  return std::make_shared<TensorDataLoader>(std::move(inputs), std::move(targets),
                                            TensorDataLoaderOptions{.batch_size = options_.batch_size,
                                                                    .shuffle = training && options_.shuffle,
                                                                    .seed = options_.seed,
                                                                    .even_shards = training});
}

absl::Status TabularData::set_predict_features(const at::Tensor& features) {
  if (!features.defined() || features.dim() != 2 || features.size(1) != num_features_) {
    return absl::InvalidArgumentError(absl::StrCat("rows to predict on need ", num_features_, " features each"));
  }
  at::Tensor inputs = features.to(at::kFloat);
  if (options_.normalize) inputs = (inputs - mean_) / std_;
  predict_ = MakeLoader(inputs, at::Tensor(), false);
  return absl::OkStatus();
}

int64_t TabularData::num_outputs() const {
  return options_.task == Task::kClassification ? static_cast<int64_t>(class_names_.size()) : 1;
}

}  // namespace kiln
