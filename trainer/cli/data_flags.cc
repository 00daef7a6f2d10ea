// Which data, and how it is read.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"
#include "trainer/data/digits.h"

ABSL_FLAG(std::string, data, "synthetic",
          "\"synthetic\" (the built-in task: 4 classes of Gaussian clusters), \"digits\" (the UCI handwritten digits "
          "from Debian's python3-sklearn), or a CSV file (.csv or .csv.gz) of feature columns and a label column.");
ABSL_FLAG(std::string, task, "classification", "CSV files: \"classification\" or \"regression\".");
ABSL_FLAG(std::string, label_column, "-1",
          "CSV files: the label column, by header name or 0-based index (negative counts from the end; -1: last).");
ABSL_FLAG(double, val_fraction, 0.2, "CSV files and digits: the share of rows held out for validation, in [0, 1).");
ABSL_FLAG(bool, streaming, false,
          "CSV files: read the training rows as a stream, a block of lines at a time and in the file's order, for a "
          "file larger than memory (a first pass finds the classes and statistics; no shuffling, no --val_fraction "
          "split: validation rows come from --val_data). A run resumes mid-epoch from the stream's position.");
ABSL_FLAG(std::string, val_data, "",
          "--streaming: a CSV file of validation rows (read whole; the training file's columns and classes). Empty: "
          "no validation.");
ABSL_FLAG(int64_t, batch_size, 64, "Examples per batch.");
ABSL_FLAG(bool, shuffle, true, "Shuffle the training examples every epoch (from --seed and the epoch).");
ABSL_FLAG(bool, normalize, true,
          "CSV files and digits: standardise each feature with the training rows' mean and standard deviation.");
ABSL_FLAG(int, num_workers, 2,
          "Background threads: CSV files are parsed by this many threads, and batches are prepared ahead of the "
          "loop on a background thread (0: everything on the loop thread).");
ABSL_FLAG(int64_t, max_inflated_mib, 1024,
          "The most one compressed input may inflate to, in MiB: a .csv.gz file, a checkpoint's compressed records "
          "together (a guard against compression bombs; raise it for a larger file you trust).");
ABSL_FLAG(std::string, digits_path, kiln::kDigitsPath, "--data=digits: where python3-sklearn installs digits.csv.gz.");
ABSL_FLAG(int64_t, num_features, 16, "--data=synthetic: input features.");
ABSL_FLAG(int64_t, num_classes, 4, "--data=synthetic: classes.");
ABSL_FLAG(int64_t, num_train, 4096, "--data=synthetic: training examples.");
ABSL_FLAG(int64_t, num_val, 1024, "--data=synthetic: validation examples.");
