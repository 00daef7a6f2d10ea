// What to do: train, evaluate or predict.
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

ABSL_FLAG(std::string, mode, "fit",
          "\"fit\" (train), \"validate\" (evaluate --ckpt_path on the validation data), \"test\" (on the test "
          "data: a table's held-out rows, as validation uses) or \"predict\" (write "
          "predictions of --ckpt_path to --predictions). Model and data flags left out are the checkpoint's, and a "
          "table's classes and feature scaling come from it: the training file is not needed to predict.");
ABSL_FLAG(std::string, predict_data, "",
          "--mode=predict: a CSV file of rows to predict on (feature columns, with or without the label column); "
          "empty: the validation rows.");
ABSL_FLAG(std::string, predictions, "",
          "--mode=predict: the CSV file to write (index, prediction, and class probabilities for classification); "
          "empty: <default_root_dir>/predictions.csv.");
