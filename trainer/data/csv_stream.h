// A CSV file as a stream of training batches (DataLoader::kUnknownLength), for files larger than memory: it is read
// a block of lines at a time, never whole. The file's rules are csv_table.h's (the header, the label column,
// classes, the errors, which name the file's own line numbers), except that the file must be plain text with lines
// ending in "\n" (or "\r\n"); a gzip file is refused, saying so.
//
// Open() reads the file once first, keeping only what the stream needs to be a table's equal: the header, the
// classes (in csv_table.h's order: numeric when every label is a number, text order otherwise) and, with
// `normalize`, the features' mean and standard deviation (and a regression target's), so that batches are scaled as
// TabularData scales its rows. Memory: one block of lines (at most `block_lines` lines and `max_block_bytes` bytes,
// or one line) or one batch at a time, and the file's class labels, whatever the file's size.
//
// Batches come in the file's order (a stream is not shuffled). With several processes, process r of W takes rows
// r, r + W, r + 2W, ... (set_shard). The position (state_dict: the next line's byte offset, its line number and
// row index) goes into checkpoints, so a run resumes mid-epoch exactly.
#ifndef KILN_TRAINER_DATA_CSV_STREAM_H_
#define KILN_TRAINER_DATA_CSV_STREAM_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/core/data_loader.h"
#include "trainer/data/csv_table.h"
#include "trainer/data/tabular_data.h"
#include "trainer/data/task.h"

namespace kiln {

struct CsvStreamOptions {
  std::string label_column = "-1";  // As CsvReadOptions::label_column.
  Task task = Task::kClassification;
  int64_t batch_size = 64;
  bool normalize = true;      // Standardise with the whole file's statistics (the first pass's).
  int64_t block_lines = 4096;  // Lines parsed at once, in the first pass and when reading a batch (at least 1).
  // The first pass's block also ends once its lines hold this many bytes (it holds at least one line), so that what
  // it holds is bounded by bytes, not lines alone: 4096 lines of 1 MiB each would otherwise be 4 GiB at once.
  int64_t max_block_bytes = int64_t{4} << 20;
  // The longest line read: a longer one (a file without line breaks, say) is refused, naming it, rather than read
  // whole into memory.
  int64_t max_line_bytes = int64_t{16} << 20;
};

class StreamingTableData;

class CsvStream final : public DataLoader {
 public:
  // Reads `path` once for its header, classes and statistics. NotFound for a missing file; InvalidArgument for a
  // gzip file, a file with no rows, and what ParseCsv refuses (naming the file's line).
  static absl::StatusOr<std::unique_ptr<CsvStream>> Open(const std::string& path, const CsvStreamOptions& options);

  int64_t num_batches() const override { return kUnknownLength; }
  void set_epoch(int64_t epoch) override;
  std::optional<Batch> next_batch() override;
  absl::Status set_shard(int rank, int world_size) override;
  c10::IValue state_dict() const override;
  absl::Status load_state_dict(const c10::IValue& state) override;

  const std::vector<std::string>& feature_names() const { return feature_names_; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  const std::string& label_name() const { return label_name_; }
  const TabularStatistics& statistics() const { return statistics_; }
  int64_t num_rows() const { return num_rows_; }  // Data rows in the file (the first pass's count).
  int64_t num_outputs() const {
    return task() == Task::kClassification ? static_cast<int64_t>(class_names_.size()) : 1;
  }
  Task task() const { return options_.task; }
  // The most lines one batch read held at once (for tests of the memory bound).
  int64_t max_block_lines() const { return max_block_lines_; }

  ~CsvStream() override;

 private:
  friend class StreamingTableData;  // Its validation rows are made as the stream's batches are (AsBatch).
  class LineReader;
  CsvStream() = default;
  // Open's reading: the header and the first pass, from byte `start` (after a byte-order mark). Throws c10::Error
  // for a line too long.
  static absl::StatusOr<std::unique_ptr<CsvStream>> Scan(std::unique_ptr<CsvStream> stream, int64_t start);
  // `rows` (parsed with the file's header and label column) as a batch of the stream: the features scaled with its
  // statistics, the classes numbered as its own. InvalidArgument names a class the stream does not have.
  absl::StatusOr<Batch> AsBatch(const CsvTable& rows) const;
  // Parses `lines` (the file's lines `numbers`) with the header in front; errors name the file's lines.
  absl::StatusOr<CsvTable> ParseBlock(const std::vector<std::string>& lines,
                                      const std::vector<int64_t>& numbers) const;

  std::string path_;
  int64_t size_ = 0;  // The file's bytes when it was opened.
  CsvStreamOptions options_;
  std::string header_line_;   // Empty when the file has no header.
  int64_t data_offset_ = 0;   // The first data line's byte offset, and its line number (1-based).
  int64_t data_line_ = 1;
  std::vector<std::string> feature_names_;
  std::vector<std::string> class_names_;
  std::string label_name_;
  TabularStatistics statistics_;
  int64_t num_rows_ = 0;
  int rank_ = 0;
  int world_size_ = 1;
  // Where the next batch starts.
  std::unique_ptr<LineReader> reader_;
  int64_t offset_ = 0;
  int64_t line_ = 1;
  int64_t row_ = 0;  // Data rows before offset_.
  int64_t max_block_lines_ = 0;
};

// fit's --streaming: the training rows a CsvStream, validation (and test and predict) rows from another CSV file
// read whole (`val_path`; none when empty), with the stream's classes and statistics. Its state is a TabularData's
// ("TabularData", the same keys), so that --mode=validate|predict reads its checkpoints as any table's.
class StreamingTableData final : public DataModule {
 public:
  // NotFound names the missing file; InvalidArgument a validation file whose features or classes do not fit.
  static absl::StatusOr<std::unique_ptr<StreamingTableData>> Create(const std::string& path,
                                                                    const std::string& val_path,
                                                                    const CsvStreamOptions& options);
  std::shared_ptr<DataLoader> train_dataloader() override { return stream_; }
  std::shared_ptr<DataLoader> val_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> test_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> predict_dataloader() override { return val_; }
  std::string state_key() const override { return "TabularData"; }
  c10::IValue state_dict() const override;

  const CsvStream& stream() const { return *stream_; }
  int64_t num_val() const { return num_val_; }

 private:
  StreamingTableData() = default;
  std::shared_ptr<CsvStream> stream_;
  std::shared_ptr<DataLoader> val_;
  int64_t num_val_ = 0;
};

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_CSV_STREAM_H_
