#include "trainer/cli/data_factory.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "trainer/cli/input_guard.h"
#include "absl/strings/match.h"
#include "trainer/data/csv_stream.h"
#include "trainer/data/csv_table.h"
#include "trainer/data/digits.h"
#include "trainer/io/memory_budget.h"
#include "trainer/data/prefetching_data_module.h"

namespace kiln {

namespace {

absl::StatusOr<LoadedData> Load(const DataSpec& spec) {
  LoadedData loaded;
  loaded.task = spec.task;
  const int threads = std::max(1, spec.num_workers);
  if (spec.data == "synthetic") {
    if (!spec.predict_data.empty()) {
      return FlagError("predict_data", spec.predict_data,
                       "the synthetic task has no file layout to predict on; drop --predict_data (predictions are "
                       "made on its validation examples) or train on a CSV file");
    }
    // The examples and the class centres are made whole, before training.
    const SyntheticOptions& synthetic = spec.synthetic;
    const uint64_t values =
        SaturatingMultiply(static_cast<uint64_t>(synthetic.num_train) + static_cast<uint64_t>(synthetic.num_val),
                           static_cast<uint64_t>(synthetic.num_features) + 2);
    const uint64_t centres =
        SaturatingMultiply(static_cast<uint64_t>(synthetic.num_classes), static_cast<uint64_t>(synthetic.num_features));
    if (absl::Status fits = CheckInputFits(
            SaturatingMultiply(std::max(values, centres), 2 * sizeof(float)),
            absl::StrCat("--data=synthetic with --num_train=", synthetic.num_train, ", --num_val=", synthetic.num_val,
                         ", --num_features=", synthetic.num_features, " and --num_classes=", synthetic.num_classes),
            "pass smaller sizes");
        !fits.ok()) {
      return fits;
    }
    loaded.module = std::make_shared<SyntheticClusters>(spec.synthetic);
    loaded.num_features = spec.synthetic.num_features;
    loaded.num_outputs = spec.synthetic.num_classes;
    for (int64_t i = 0; i < loaded.num_outputs; ++i) loaded.class_names.push_back(absl::StrCat(i));
    loaded.description = absl::StrCat("synthetic: ", spec.synthetic.num_train, " training and ", spec.synthetic.num_val,
                                      " validation examples, ", spec.synthetic.num_features, " features, ",
                                      spec.synthetic.num_classes, " classes");
  } else if (spec.saved_state.isGenericDict() && !spec.predict_data.empty()) {
    // Rows to predict on, scaled with the checkpoint's statistics: the training file is not needed.
    absl::StatusOr<std::unique_ptr<TabularData>> data = TabularData::FromState(spec.saved_state, spec.batch_size);
    if (!data.ok()) return data.status();
    absl::StatusOr<CsvTable> rows = ReadCsv(spec.predict_data, {.label_column = spec.label_column,
                                                                .task = (*data)->task(),
                                                                .num_features = (*data)->num_features(),
                                                                .num_threads = threads});
    if (absl::IsNotFound(rows.status())) {
      return FlagError("predict_data", spec.predict_data, "no such file; pass an existing CSV file");
    }
    if (!rows.ok()) return rows.status();
    if (absl::Status set = (*data)->set_predict_features(rows->features); !set.ok()) return set;
    loaded.task = (*data)->task();
    loaded.table = data->get();
    loaded.statistics = &(*data)->statistics();
    loaded.num_features = (*data)->num_features();
    loaded.num_outputs = (*data)->num_outputs();
    loaded.class_names = (*data)->class_names();
    loaded.description = absl::StrCat(spec.predict_data, ": ", rows->num_rows(), " rows to predict on, ",
                                      loaded.num_features, " features, scaled as the checkpoint's training rows");
    loaded.module = std::shared_ptr<TabularData>(std::move(data).value());
  } else if (spec.streaming) {
    absl::StatusOr<std::unique_ptr<StreamingTableData>> data = StreamingTableData::Create(
        spec.data, spec.val_data,
        {.label_column = spec.label_column, .task = spec.task, .batch_size = spec.batch_size,
         .normalize = spec.normalize});
    if (absl::IsNotFound(data.status())) {
      const bool training = absl::StrContains(data.status().message(), spec.data + ":");
      return training ? FlagError("data", spec.data, "no such file; pass an existing CSV file")
                      : FlagError("val_data", spec.val_data, "no such file; pass an existing CSV file");
    }
    if (!data.ok()) return data.status();
    const CsvStream& stream = (*data)->stream();
    loaded.task = spec.task;
    loaded.statistics = &stream.statistics();
    loaded.num_features = static_cast<int64_t>(stream.feature_names().size());
    loaded.num_outputs = stream.num_outputs();
    loaded.class_names = stream.class_names();
    loaded.description = absl::StrCat(
        spec.data, ": ", stream.num_rows(), " training rows read as a stream, ",
        spec.val_data.empty() ? std::string("no validation rows")
                              : absl::StrCat((*data)->num_val(), " validation rows from ", spec.val_data),
        ", ", loaded.num_features, " features, ",
        spec.task == Task::kClassification ? absl::StrCat(loaded.num_outputs, " classes") : std::string("regression"));
    loaded.module = std::shared_ptr<StreamingTableData>(std::move(data).value());
    // A stream is read on the loop thread: its next batch is read ahead by the loop itself.
    return loaded;
  } else {
    absl::StatusOr<CsvTable> table =
        spec.data == "digits"
            ? LoadDigits(spec.digits_path, threads)
            : ReadCsv(spec.data, {.label_column = spec.label_column, .task = spec.task, .num_threads = threads});
    if (absl::IsNotFound(table.status()) && spec.data != "digits") {
      return FlagError("data", spec.data, "no such file; pass synthetic, digits, or an existing CSV file");
    }
    if (!table.ok()) return table.status();
    const std::string source = spec.data == "digits" ? "digits" : spec.data;
    TabularDataOptions options{.task = spec.task,
                               .val_fraction = spec.val_fraction,
                               .batch_size = spec.batch_size,
                               .shuffle = spec.shuffle,
                               .seed = spec.seed,
                               .normalize = spec.normalize};
    std::unique_ptr<TabularData> saved;
    if (spec.saved_state.isGenericDict()) {
      // The checkpoint's statistics and classes, not this file's.
      absl::StatusOr<std::unique_ptr<TabularData>> from_state = TabularData::FromState(spec.saved_state, 1);
      if (!from_state.ok()) return from_state.status();
      saved = *std::move(from_state);
      options.normalize = saved->statistics().feature_mean.defined();
      if (options.normalize) options.statistics = saved->statistics();
    }
    absl::StatusOr<std::unique_ptr<TabularData>> data = TabularData::Create(*std::move(table), options);
    if (!data.ok()) return data.status();
    if (saved != nullptr) {
      if (absl::Status fits = (*data)->load_state_dict(spec.saved_state); !fits.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--data=", spec.data, " does not fit the checkpoint's table: ", fits.message()));
      }
    }
    loaded.table = data->get();
    loaded.statistics = &(*data)->statistics();
    loaded.num_features = (*data)->num_features();
    loaded.num_outputs = (*data)->num_outputs();
    loaded.class_names = (*data)->class_names();
    loaded.description = absl::StrCat(
        source, ": ", (*data)->num_train(), " training and ", (*data)->num_val(), " validation rows, ",
        loaded.num_features, " features, ",
        spec.task == Task::kClassification ? absl::StrCat(loaded.num_outputs, " classes") : std::string("regression"));
    if (!spec.predict_data.empty()) {
      absl::StatusOr<CsvTable> rows = ReadCsv(spec.predict_data, {.label_column = spec.label_column,
                                                                  .task = spec.task,
                                                                  .num_features = loaded.num_features,
                                                                  .num_threads = threads});
      if (absl::IsNotFound(rows.status())) {
        return FlagError("predict_data", spec.predict_data, "no such file; pass an existing CSV file");
      }
      if (!rows.ok()) return rows.status();
      if (absl::Status set = (*data)->set_predict_features(rows->features); !set.ok()) return set;
    }
    loaded.module = std::shared_ptr<TabularData>(std::move(data).value());
  }
  if (spec.num_workers > 0) {
    loaded.module = std::make_shared<PrefetchingDataModule>(loaded.module, 2 * spec.num_workers);
  }
  return loaded;
}

}  // namespace

absl::StatusOr<LoadedData> LoadData(const DataSpec& spec) {
  return GuardedLoad<LoadedData>(absl::StrCat("--data=", spec.data, ": cannot load it"),
                                 "pass a smaller data set, or smaller sizes",
                                 [&]() -> absl::StatusOr<LoadedData> { return Load(spec); });
}

}  // namespace kiln
