#include "trainer/data/tabular_data.h"

#include <cmath>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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
  data->feature_names_ = table.feature_names;
  data->label_name_ = table.label_name;

  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const at::Tensor order = at::randperm(rows, generator, at::TensorOptions().dtype(at::kLong));
  const at::Tensor train_rows = order.slice(0, 0, data->num_train_);
  const at::Tensor val_rows = order.slice(0, data->num_train_, rows);
  at::Tensor train_x = table.features.index_select(0, train_rows);
  at::Tensor val_x = table.features.index_select(0, val_rows);
  const at::Tensor train_y = table.labels.index_select(0, train_rows);
  TabularStatistics& stats = data->statistics_;
  if (options.normalize && options.statistics.has_value()) {
    stats = *options.statistics;
    if (!stats.feature_mean.defined() || stats.feature_mean.numel() != data->num_features_ ||
        !stats.feature_std.defined() || stats.feature_std.numel() != data->num_features_) {
      return absl::InvalidArgumentError(
          absl::StrCat("the saved statistics are not for ", data->num_features_, " features"));
    }
  } else if (options.normalize) {
    stats.feature_mean = train_x.mean(0);
    // A constant feature (std 0, or one training row) is only centred.
    at::Tensor std = data->num_train_ > 1 ? train_x.std(0) : at::zeros_like(stats.feature_mean);
    stats.feature_std = at::where(std > 0, std, at::ones_like(std));
    if (options.task == Task::kRegression) {
      const at::Tensor y = train_y.to(at::kDouble);
      stats.target_mean = y.mean().item<double>();
      const double target_std = data->num_train_ > 1 ? y.std().item<double>() : 0.0;
      // A constant target is only centred, as a constant feature is.
      stats.target_std = std::isfinite(target_std) && target_std > 0 ? target_std : 1.0;
    }
  }
  if (stats.feature_mean.defined()) {
    train_x = (train_x - stats.feature_mean) / stats.feature_std;
    val_x = (val_x - stats.feature_mean) / stats.feature_std;
  }
  data->train_ = data->MakeLoader(train_x, train_y, /*training=*/true);
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
  if (statistics_.feature_mean.defined()) inputs = (inputs - statistics_.feature_mean) / statistics_.feature_std;
  predict_ = MakeLoader(inputs, at::Tensor(), false);
  return absl::OkStatus();
}

namespace {

c10::impl::GenericList Strings(const std::vector<std::string>& strings) {
  c10::impl::GenericList list(c10::StringType::get());
  for (const std::string& text : strings) list.push_back(text);
  return list;
}

// Reading a state: each accessor throws c10::Error naming the key.
const c10::IValue& Field(const c10::impl::GenericDict& dict, const char* key) {
  auto found = dict.find(c10::IValue(std::string(key)));
  TORCH_CHECK(found != dict.end(), "it has no '", key, "'");
  return found->value();
}

std::vector<std::string> StringList(const c10::impl::GenericDict& dict, const char* key) {
  const c10::IValue& value = Field(dict, key);
  TORCH_CHECK(value.isList(), "'", key, "' is not a list");
  std::vector<std::string> strings;
  for (const c10::IValue& item : value.toListRef()) {
    TORCH_CHECK(item.isString(), "'", key, "' holds a ", item.tagKind(), " where text was expected");
    strings.push_back(item.toStringRef());
  }
  return strings;
}

double Number(const c10::impl::GenericDict& dict, const char* key) {
  const c10::IValue& value = Field(dict, key);
  TORCH_CHECK(value.isDouble() || value.isInt(), "'", key, "' is not a number");
  return value.isDouble() ? value.toDouble() : static_cast<double>(value.toInt());
}

at::Tensor Statistic(const c10::impl::GenericDict& dict, const char* key, int64_t features) {
  const c10::IValue& value = Field(dict, key);
  if (value.isNone()) return at::Tensor();
  TORCH_CHECK(value.isTensor() && value.toTensor().dim() == 1 && value.toTensor().size(0) == features, "'", key,
              "' is not ", features, " numbers, one per feature");
  return value.toTensor().to(at::kFloat).contiguous();
}

struct SavedTable {
  Task task = Task::kClassification;
  std::vector<std::string> feature_names;
  std::string label_name;
  std::vector<std::string> class_names;
  TabularStatistics statistics;
};

absl::StatusOr<SavedTable> ReadState(const c10::IValue& state) {
  try {
    TORCH_CHECK(state.isGenericDict(), "it is a ", state.tagKind(), ", not a dictionary");
    const c10::impl::GenericDict dict = state.toGenericDict();
    SavedTable table;
    const c10::IValue& task = Field(dict, "task");
    TORCH_CHECK(task.isString() && ParseTask(task.toStringRef()).ok(), "'task' is not a task");
    table.task = *ParseTask(task.toStringRef());
    table.feature_names = StringList(dict, "feature_names");
    const c10::IValue& label = Field(dict, "label_name");
    TORCH_CHECK(label.isString(), "'label_name' is not text");
    table.label_name = label.toStringRef();
    table.class_names = StringList(dict, "class_names");
    const int64_t features = static_cast<int64_t>(table.feature_names.size());
    table.statistics.feature_mean = Statistic(dict, "feature_mean", features);
    table.statistics.feature_std = Statistic(dict, "feature_std", features);
    TORCH_CHECK(table.statistics.feature_mean.defined() == table.statistics.feature_std.defined(),
                "'feature_mean' and 'feature_std' must both be there, or neither");
    if (table.statistics.feature_std.defined()) {
      TORCH_CHECK(table.statistics.feature_std.gt(0).all().item<bool>(), "'feature_std' holds a value <= 0");
    }
    table.statistics.target_mean = Number(dict, "target_mean");
    table.statistics.target_std = Number(dict, "target_std");
    TORCH_CHECK(std::isfinite(table.statistics.target_mean) && std::isfinite(table.statistics.target_std) &&
                    table.statistics.target_std > 0,
                "'target_mean' and 'target_std' must be finite, and 'target_std' > 0");
    TORCH_CHECK(table.task == Task::kRegression || !table.class_names.empty(), "a classification table has no classes");
    return table;
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("the saved table is damaged: ", e.what_without_backtrace()));
  }
}

}  // namespace

c10::IValue TableState(Task task, const std::vector<std::string>& feature_names, const std::string& label_name,
                       const std::vector<std::string>& class_names, const TabularStatistics& statistics) {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert(std::string("task"), TaskName(task));
  state.insert(std::string("feature_names"), Strings(feature_names));
  state.insert(std::string("label_name"), label_name);
  state.insert(std::string("class_names"), Strings(class_names));
  state.insert(std::string("normalize"), statistics.feature_mean.defined());
  state.insert(std::string("feature_mean"),
               statistics.feature_mean.defined() ? c10::IValue(statistics.feature_mean) : c10::IValue());
  state.insert(std::string("feature_std"),
               statistics.feature_std.defined() ? c10::IValue(statistics.feature_std) : c10::IValue());
  state.insert(std::string("target_mean"), statistics.target_mean);
  state.insert(std::string("target_std"), statistics.target_std);
  return state;
}

c10::IValue TabularData::state_dict() const {
  return TableState(options_.task, feature_names_, label_name_, class_names_, statistics_);
}

absl::Status TabularData::load_state_dict(const c10::IValue& state) {
  absl::StatusOr<SavedTable> saved = ReadState(state);
  if (!saved.ok()) return saved.status();
  if (saved->task != options_.task) {
    return absl::InvalidArgumentError(
        absl::StrCat("it was saved for ", TaskName(saved->task), ", this table is for ", TaskName(options_.task)));
  }
  if (saved->feature_names.size() != feature_names_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("it was saved for ", saved->feature_names.size(),
                                                   " features, this table has ", feature_names_.size()));
  }
  if (saved->class_names != class_names_) {
    return absl::InvalidArgumentError(absl::StrCat("it was saved for the classes ",
                                                   absl::StrJoin(saved->class_names, ","), ", this table has ",
                                                   absl::StrJoin(class_names_, ",")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TabularData>> TabularData::FromState(const c10::IValue& state, int64_t batch_size) {
  absl::StatusOr<SavedTable> saved = ReadState(state);
  if (!saved.ok()) return saved.status();
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size=", batch_size, " is not valid; pass an int >= 1"));
  }
  std::unique_ptr<TabularData> data(new TabularData());
  data->options_.task = saved->task;
  data->options_.batch_size = batch_size;
  data->options_.normalize = saved->statistics.feature_mean.defined();
  data->num_features_ = static_cast<int64_t>(saved->feature_names.size());
  data->feature_names_ = std::move(saved->feature_names);
  data->label_name_ = std::move(saved->label_name);
  data->class_names_ = std::move(saved->class_names);
  data->statistics_ = std::move(saved->statistics);
  return data;
}

int64_t TabularData::num_outputs() const {
  return options_.task == Task::kClassification ? static_cast<int64_t>(class_names_.size()) : 1;
}

}  // namespace kiln
