#include "trainer/data/csv_stream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/csv_table.h"
#include "trainer/io/peak_memory.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  return std::string(root != nullptr ? root : "/tmp") + "/" + name;
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// 23 rows of two features and a text label, with a header, a blank line and a last line without "\n".
std::string Rows() {
  std::string text = "width,height,kind\n";
  const char* const kinds[] = {"cat", "dog", "ant"};
  for (int i = 0; i < 23; ++i) {
    absl::StrAppend(&text, i * 0.5, ",", (i * 7) % 5, ",", kinds[(i * 2) % 3], i + 1 < 23 ? "\n" : "");
    if (i == 10) text += "\n";
  }
  return text;
}

TEST(CsvStreamTest, StreamsTheTablesRowsWithItsClassesAndTheFilesStatistics) {
  const std::string path = Write("rows.csv", Rows());
  absl::StatusOr<CsvTable> table = ReadCsv(path, {});
  ASSERT_TRUE(table.ok()) << table.status();
  absl::StatusOr<std::unique_ptr<CsvStream>> stream = CsvStream::Open(path, {.batch_size = 5, .block_lines = 4});
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ((*stream)->class_names(), table->class_names);
  EXPECT_EQ((*stream)->feature_names(), table->feature_names);
  EXPECT_EQ((*stream)->num_rows(), 23);
  const at::Tensor mean = table->features.mean(0);
  const at::Tensor std = table->features.std(0);
  EXPECT_TRUE(at::allclose((*stream)->statistics().feature_mean, mean, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose((*stream)->statistics().feature_std, std, 1e-5, 1e-6));
  for (int epoch = 0; epoch < 2; ++epoch) {
    (*stream)->set_epoch(epoch);
    std::vector<at::Tensor> features;
    std::vector<at::Tensor> labels;
    while (std::optional<Batch> batch = (*stream)->next_batch()) {
      EXPECT_LE(batch->size(), 5);
      features.push_back(batch->input);
      labels.push_back(batch->target);
    }
    ASSERT_EQ(features.size(), 5u) << "4 batches of 5 and one of 3";
    EXPECT_TRUE(at::allclose(at::cat(features), (table->features - mean) / std, 1e-4, 1e-5));
    EXPECT_TRUE(at::cat(labels).equal(table->labels));
  }
  EXPECT_LE((*stream)->max_block_lines(), 5) << "a batch reads its own lines, not the file";
}

// docs/reliability.md, "Memory", a CSV stream: what it may take at its peak, holding a block of `block_bytes` (its
// first pass's) or a batch of `batch_bytes` of lines, whatever the file's size (and the class labels, here two).
constexpr uint64_t kMiB = uint64_t{1} << 20;
uint64_t StreamBound(uint64_t block_bytes, uint64_t batch_bytes) {
  return SanitizerMemoryFactor() * (64 * (block_bytes + batch_bytes) + 16 * kMiB);
}

// 4096 lines of 2 KiB (8 MiB) fit in one block of 4096 lines: the first pass held them all, and what parsing them
// takes (seen failing before blocks were bounded in bytes too: 93 MiB against a bound of 32; 2.4 MiB since). A block now ends at
// max_block_bytes (128 KiB here), and a batch holds 64 lines, so the stream holds about 256 KiB of lines at a time.
TEST(CsvStreamTest, MemoryIsBoundedByTheBlockAndTheBatchNotTheFile) {
  std::string wide;
  for (int i = 0; i < 1023; ++i) wide += "1,";
  std::string text;
  for (int line = 0; line < 4096; ++line) absl::StrAppend(&text, wide, line % 2, "\n");
  const std::string path = Write("wide.csv", text);
  const uint64_t line_bytes = wide.size() + 2;
  const CsvStreamOptions options{.batch_size = 64, .max_block_bytes = 128 << 10};
  int64_t rows = 0;
  absl::StatusOr<std::unique_ptr<CsvStream>> stream;
  absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] {
    stream = CsvStream::Open(path, options);
    if (!stream.ok()) return;
    while (std::optional<Batch> batch = (*stream)->next_batch()) rows += batch->size();
  });
  ASSERT_TRUE(peak.ok()) << peak.status();
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(rows, 4096);
  EXPECT_EQ((*stream)->num_rows(), 4096);
  const uint64_t bound = StreamBound(options.max_block_bytes + line_bytes, options.batch_size * line_bytes);
  EXPECT_LE(*peak, bound) << "streaming " << text.size() / kMiB << " MiB took " << *peak / kMiB
                          << " MiB at the peak; the bound is " << bound / kMiB << " MiB";
  std::printf("%s: %zu bytes, peak %llu bytes, bound %llu\n", path.c_str(), text.size(),
              static_cast<unsigned long long>(*peak), static_cast<unsigned long long>(bound));
}

TEST(CsvStreamTest, ShardsTakeEveryOtherRowAndThePositionResumes) {
  const std::string path = Write("shards.csv", Rows());
  absl::StatusOr<CsvTable> table = ReadCsv(path, {});
  ASSERT_TRUE(table.ok());
  std::vector<at::Tensor> shards;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<std::unique_ptr<CsvStream>> stream =
        CsvStream::Open(path, {.batch_size = 4, .normalize = false});
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE((*stream)->set_shard(rank, 2).ok());
    (*stream)->set_epoch(0);
    std::vector<at::Tensor> labels;
    while (std::optional<Batch> batch = (*stream)->next_batch()) labels.push_back(batch->target);
    shards.push_back(at::cat(labels));
  }
  EXPECT_TRUE(shards[0].equal(table->labels.slice(0, 0, 23, 2)));
  EXPECT_TRUE(shards[1].equal(table->labels.slice(0, 1, 23, 2)));

  absl::StatusOr<std::unique_ptr<CsvStream>> first = CsvStream::Open(path, {.batch_size = 4, .normalize = false});
  ASSERT_TRUE(first.ok());
  (*first)->next_batch();
  (*first)->next_batch();
  const c10::IValue state = (*first)->state_dict();
  const std::optional<Batch> third = (*first)->next_batch();
  absl::StatusOr<std::unique_ptr<CsvStream>> second = CsvStream::Open(path, {.batch_size = 4, .normalize = false});
  ASSERT_TRUE(second.ok());
  (*second)->set_epoch(0);
  ASSERT_TRUE((*second)->load_state_dict(state).ok());
  const std::optional<Batch> again = (*second)->next_batch();
  ASSERT_TRUE(third.has_value() && again.has_value());
  EXPECT_TRUE(again->input.equal(third->input));
  EXPECT_TRUE(again->target.equal(third->target));
}

TEST(CsvStreamTest, ErrorsNameTheFilesLineAndTheFix) {
  std::string text = Rows();
  text.replace(text.find("\n8,2,"), 5, "\n8,x,");  // Row 16's height: in the stream's sixth block of 3 lines.
  const std::string bad = Write("bad.csv", text);
  absl::StatusOr<CsvTable> whole = ReadCsv(bad, {});
  ASSERT_FALSE(whole.ok());
  const std::string where = bad + ":19:";  // Row 16: after the header, 16 rows and the blank line.
  EXPECT_THAT(whole.status().message(), HasSubstr(where)) << whole.status();
  absl::StatusOr<std::unique_ptr<CsvStream>> stream = CsvStream::Open(bad, {.block_lines = 3});
  ASSERT_FALSE(stream.ok());
  EXPECT_THAT(stream.status().message(), HasSubstr(where)) << "the same line as the whole file's reader";

  const std::string gzip = Write("rows.csv.gz", std::string("\x1f\x8b\x08\x00", 4));
  EXPECT_THAT(CsvStream::Open(gzip, {}).status().message(), HasSubstr("is gzip-compressed; a stream reads plain text"));
  EXPECT_EQ(CsvStream::Open(TempPath("none.csv"), {}).status().code(), absl::StatusCode::kNotFound);
  // A file without line breaks is not read whole: the line is refused at the bound, naming it.
  const std::string endless = Write("endless.csv", "a,label\n1,x\n" + std::string(5000, '7'));
  EXPECT_THAT(CsvStream::Open(endless, {.max_line_bytes = 1024}).status().message(),
              HasSubstr(endless + ":3: a line longer than 1024 bytes"));
  const std::string one = Write("one.csv", "a,label\n1,x\n2,x\n");
  EXPECT_THAT(CsvStream::Open(one, {}).status().message(), HasSubstr("has a single class"));
}

}  // namespace
}  // namespace kiln
