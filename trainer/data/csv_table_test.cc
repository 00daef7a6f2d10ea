#include "trainer/data/csv_table.h"

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "trainer/data/digits.h"
#include "trainer/io/memory_budget.h"
#include "trainer/data/text_file.h"
#include "trainer/io/peak_memory.h"

namespace kiln {
namespace {

std::string TempPath(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  return std::string(root != nullptr ? root : "/tmp") + "/" + name;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

std::string WriteGzip(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  gzFile file = gzopen(path.c_str(), "wb");
  gzwrite(file, text.data(), static_cast<unsigned>(text.size()));
  gzclose(file);
  return path;
}

TEST(CsvTableTest, HeaderLabelByNameAndTextClasses) {
  absl::StatusOr<CsvTable> table =
      ParseCsv("x,species,y\n1.5,b,2\n3,a,4\n\n5,\"b\",6\r\n", "t.csv", {.label_column = "species"});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(table->has_header);
  EXPECT_EQ(table->feature_names, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(table->label_name, "species");
  EXPECT_EQ(table->class_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(table->features.equal(at::tensor({1.5f, 2.f, 3.f, 4.f, 5.f, 6.f}).reshape({3, 2})));
  EXPECT_TRUE(table->labels.equal(at::tensor({1, 0, 1}, at::kLong)));
}

TEST(CsvTableTest, NoHeaderNumericClassesKeepNumericOrder) {
  absl::StatusOr<CsvTable> table = ParseCsv("0,10\n1,2\n2,10\n3,9\n", "t.csv", {});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_FALSE(table->has_header);
  EXPECT_EQ(table->feature_names, (std::vector<std::string>{"column_0"}));
  EXPECT_EQ(table->class_names, (std::vector<std::string>{"2", "9", "10"}));  // Not text order ("10" < "2").
  EXPECT_TRUE(table->labels.equal(at::tensor({2, 0, 2, 1}, at::kLong)));
}

TEST(CsvTableTest, HeaderDetectedFromTheLabelCellAlone) {
  // Every feature name is numeric-looking, but the label cell is text above a numeric label.
  absl::StatusOr<CsvTable> table = ParseCsv("1,2,target\n0.5,1,3\n0.25,2,4\n", "t.csv", {});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(table->has_header);
  EXPECT_EQ(table->num_rows(), 2);
}

TEST(CsvTableTest, RegressionAndLabelByNegativeIndex) {
  absl::StatusOr<CsvTable> table =
      ParseCsv("price,a,b\n1.25,0,1\n-2,1,0\n", "t.csv", {.label_column = "-3", .task = Task::kRegression});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->label_name, "price");
  EXPECT_TRUE(table->labels.equal(at::tensor({1.25f, -2.f})));
  EXPECT_TRUE(table->class_names.empty());
}

TEST(CsvTableTest, ErrorsNameTheFileLineColumnAndCell) {
  struct Case {
    std::string text;
    CsvReadOptions options;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"a,b,c\n1,2,x\n3,oops,y\n", {}, "t.csv:3: column 2 ('b'): 'oops' is not a number"},
      {"1,2,0\n3,4\n", {}, "t.csv:2: 2 cells, but the first row has 3"},
      {"a,b\n1,2\n", {.label_column = "label"}, "label column 'label' is not in the header of t.csv (a, b)"},
      {"1,2\n3,4\n", {.label_column = "5"}, "label column 5 is out of range for t.csv, which has 2 columns"},
      {"a,b\n1,x\n", {.task = Task::kRegression}, "t.csv:2: label 'x' (column 2, 'b') is not a number"},
      {"a,b\n1,\"x\n", {}, "t.csv:2: a quoted cell is not closed"},
      // Non-finite values never reach a model: NaN, infinities, and numbers beyond float32's range.
      {"a,b,c\n1,nan,x\n", {}, "t.csv:2: column 2 ('b'): 'nan' is not a number (NaN)"},
      {"a,b,c\n1,2,x\n-inf,3,y\n", {}, "t.csv:3: column 1 ('a'): '-inf' is not a finite float32"},
      {"a,b,c\n1e39,2,x\n", {}, "t.csv:2: column 1 ('a'): '1e39' is not a finite float32"},
      {"a,b\n1,inf\n", {.task = Task::kRegression}, "t.csv:2: label 'inf' (column 2, 'b') is not a finite"},
      {"1,7\n2,7\n", {}, "has a single class ('7')"},
      {"\n\n", {}, "t.csv is empty"},
      {"a,b\n", {}, "t.csv has a header but no data rows"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CsvTable> table = ParseCsv(c.text, "t.csv", c.options);
    ASSERT_FALSE(table.ok()) << c.text;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(table.status().message().find(c.expected), std::string::npos)
        << "'" << table.status().message() << "' does not contain '" << c.expected << "'";
  }
}

TEST(CsvTableTest, QuotedCellsWithCommasAndQuotes) {
  absl::StatusOr<CsvTable> table = ParseCsv("f,name\n1,\"a, \"\"b\"\"\"\n2,c\n", "t.csv", {});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->class_names, (std::vector<std::string>{"a, \"b\"", "c"}));
}

TEST(CsvTableTest, FilesToPredictOnMayOmitTheLabel) {
  absl::StatusOr<CsvTable> features_only = ParseCsv("1,2\n3,4\n", "p.csv", {.num_features = 2});
  ASSERT_TRUE(features_only.ok()) << features_only.status();
  EXPECT_FALSE(features_only->labels.defined());
  EXPECT_EQ(features_only->num_rows(), 2);
  absl::StatusOr<CsvTable> with_label = ParseCsv("a,b,y\n1,2,cat\n", "p.csv", {.num_features = 2});
  ASSERT_TRUE(with_label.ok()) << with_label.status();
  EXPECT_EQ(with_label->feature_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(with_label->labels.defined());
  absl::StatusOr<CsvTable> wrong = ParseCsv("1,2,3,4\n", "p.csv", {.num_features = 2});
  EXPECT_NE(wrong.status().message().find("4 columns, but the model was trained on 2 features"), std::string::npos)
      << wrong.status();
}

TEST(CsvTableTest, ThreadsGiveTheSameTableAndTheEarliestError) {
  std::string text = "a,b,label\n";
  for (int i = 0; i < 10000; ++i)
    text += std::to_string(i) + "," + std::to_string(i % 7) + ".5," + std::to_string(i % 3) + "\n";
  absl::StatusOr<CsvTable> one = ParseCsv(text, "big.csv", {.num_threads = 1});
  absl::StatusOr<CsvTable> four = ParseCsv(text, "big.csv", {.num_threads = 4});
  ASSERT_TRUE(one.ok() && four.ok());
  EXPECT_TRUE(one->features.equal(four->features));
  EXPECT_TRUE(one->labels.equal(four->labels));
  EXPECT_FLOAT_EQ(one->features[9999][1].item<float>(), 9999 % 7 + 0.5f);

  std::string bad = text;
  bad.replace(bad.find("\n9000,"), 6, "\n9000x,");  // Line 9002 (header is line 1).
  bad.replace(bad.find("\n3000,"), 6, "\n3000x,");  // Line 3002: the earliest, in another thread's rows.
  absl::StatusOr<CsvTable> failed = ParseCsv(bad, "big.csv", {.num_threads = 4});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("big.csv:3002: column 1 ('a'): '3000x'"), std::string::npos)
      << failed.status();
}

TEST(CsvTableTest, ReadsPlainAndGzipFilesAlike) {
  const std::string text = "a,b\n1,0\n2,1\n";
  absl::StatusOr<CsvTable> plain = ReadCsv(WriteFile("plain.csv", text), {});
  absl::StatusOr<CsvTable> gzip = ReadCsv(WriteGzip("packed.csv.gz", text), {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(gzip.ok()) << gzip.status();
  EXPECT_TRUE(plain->features.equal(gzip->features));
  EXPECT_EQ(ReadCsv(TempPath("missing.csv"), {}).status().code(), absl::StatusCode::kNotFound);
}

TEST(CsvTableTest, TruncatedGzipIsAnError) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  const std::string path = WriteGzip("whole.csv.gz", text);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string truncated = WriteFile("truncated.csv.gz", bytes.substr(0, bytes.size() / 2));
  absl::StatusOr<CsvTable> table = ReadCsv(truncated, {});
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("truncated.csv.gz"), std::string::npos) << table.status();
}

TEST(CsvTableTest, ByteOrderMarksAndEveryLineEnding) {
  // A headerless file with a UTF-8 byte-order mark keeps its first row; a named header is found behind it.
  absl::StatusOr<CsvTable> headerless = ParseCsv("\xEF\xBB\xBF" "1,2,0\n3,4,1\n", "t.csv", {});
  ASSERT_TRUE(headerless.ok()) << headerless.status();
  EXPECT_FALSE(headerless->has_header);
  EXPECT_EQ(headerless->num_rows(), 2);
  absl::StatusOr<CsvTable> named = ParseCsv("\xEF\xBB\xBF" "label,x\n0,1\n1,2\n", "t.csv", {.label_column = "label"});
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->label_name, "label");
  // Unix, Windows, classic Mac OS, and a mixture: the same table, with the same line numbers in errors.
  for (const std::string& end : {"\n", "\r\n", "\r"}) {
    absl::StatusOr<CsvTable> table = ParseCsv("a,b\n1,0" + end + "2,1" + end + "3,0", "t.csv", {});
    ASSERT_TRUE(table.ok()) << table.status();
    EXPECT_EQ(table->num_rows(), 3);
    EXPECT_TRUE(table->features.equal(at::tensor({1.f, 2.f, 3.f}).reshape({3, 1})));
    EXPECT_EQ(ParseCsv("a,b" + end + "1,0" + end + "x,1" + end, "t.csv", {}).status().message().substr(0, 9),
              "t.csv:3: ");
  }
}

TEST(CsvTableTest, ANonFiniteAmongNumericLabelsIsAnError) {
  for (const std::string& bad : {"nan", "NaN", "inf", "-inf"}) {
    absl::StatusOr<CsvTable> table = ParseCsv("1,0\n2,1\n3," + bad + "\n4,1\n", "t.csv", {});
    ASSERT_FALSE(table.ok()) << bad;
    EXPECT_NE(table.status().message().find("t.csv:3: label '" + bad + "'"), std::string::npos) << table.status();
    EXPECT_NE(table.status().message().find("is not a finite number"), std::string::npos) << table.status();
  }
  // Among text labels, "nan" is a class name like any other.
  absl::StatusOr<CsvTable> text = ParseCsv("1,cat\n2,dog\n3,nan\n", "t.csv", {});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->class_names, (std::vector<std::string>{"cat", "dog", "nan"}));
}

TEST(CsvTableTest, ALabelNameTwiceInTheHeaderIsAnError) {
  absl::StatusOr<CsvTable> table = ParseCsv("label,x,label\n0,1,1\n1,2,0\n", "t.csv", {.label_column = "label"});
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("label column 'label' appears twice in the header of t.csv (columns 1 and 3)"),
            std::string::npos)
      << table.status();
  EXPECT_TRUE(ParseCsv("label,x,label\n0,1,1\n1,2,0\n", "t.csv", {.label_column = "2"}).ok()) << "by index";
}

TEST(CsvTableTest, AFileLargerThanTheBudgetIsRefusedBeforeItIsRead) {
  // What it inflates to counts, not the compressed size: 4 MiB of rows in a gzip file of a few KiB.
  std::string rows;
  while (rows.size() < (4u << 20)) rows += "1,2,3,4,5,6,7,0\n";
  const std::string gzip = WriteGzip("bomb.csv.gz", rows);
  absl::StatusOr<std::string> inflated = ReadTextFile(gzip, 1 << 20);
  ASSERT_FALSE(inflated.ok());
  EXPECT_EQ(inflated.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(inflated.status().message().find("bomb.csv.gz inflated passes 1.0 MiB, the most"), std::string::npos)
      << inflated.status();
  EXPECT_TRUE(ReadTextFile(gzip, 8 << 20).ok()) << "the same file within a larger budget";

  // A sparse file twice the size of the memory available costs nothing to make; it is refused by its size.
  const std::string sparse = TempPath("sparse.csv");
  std::ofstream(sparse).close();
  const uint64_t size = 2 * AvailableMemoryBytes();
  std::filesystem::resize_file(sparse, size);
  absl::StatusOr<CsvTable> table = ReadCsv(sparse, {});
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(table.status().message().find("sparse.csv (" + std::to_string(size) + " bytes) passes"), std::string::npos)
      << table.status();
  std::filesystem::remove(sparse);
}

// docs/reliability.md, "Memory", CSV files read whole: what reading a file whose text (or what its gzip stream
// inflates to) is `text_bytes` may take at its peak.
constexpr uint64_t kMiB = uint64_t{1} << 20;
uint64_t WholeCsvBound(uint64_t text_bytes) { return SanitizerMemoryFactor() * (64 * text_bytes + 16 * kMiB); }

// The costliest shapes of CSV text per byte: short rows with a distinct text label each (a line, a label string, a
// class and its name per 5 to 6 bytes), short rows of numbers, and wide rows (a float per 2 bytes). Each about 2 MiB,
// plain and gzip, on one thread and on four: within 64 bytes per byte of text and 16 MiB (measured: 37 per byte at
// most, for the distinct labels).
TEST(CsvTableTest, ReadingAWholeFileStaysWithinItsMemoryBound) {
  constexpr size_t kTextBytes = 2 << 20;
  const auto fill = [&](const std::function<std::string(int64_t)>& row) {
    std::string text;
    text.reserve(kTextBytes + 4096);
    for (int64_t i = 0; text.size() < kTextBytes; ++i) text += row(i);
    return text;
  };
  const char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  const auto label = [&](int64_t i) {
    std::string name;
    do {
      name += kDigits[i % 62];
      i /= 62;
    } while (i > 0);
    return name;
  };
  std::string wide_row;
  for (int i = 0; i < 4095; ++i) wide_row += "1,";
  struct Shape {
    std::string name;
    std::string text;
    int threads;
  };
  std::vector<Shape> shapes;
  shapes.push_back({"distinct_labels", fill([&](int64_t i) { return "1," + label(i) + "\n"; }), 1});
  shapes.push_back({"distinct_labels_4_threads", shapes.back().text, 4});
  shapes.push_back({"short_rows", fill([&](int64_t i) { return i % 2 == 0 ? "1,0\n" : "1,1\n"; }), 1});
  shapes.push_back({"wide_rows", fill([&](int64_t i) { return wide_row + (i % 2 == 0 ? "0\n" : "1\n"); }), 1});
  for (const Shape& shape : shapes) {
    for (const bool gzip : {false, true}) {
      const std::string path = gzip ? WriteGzip(shape.name + ".csv.gz", shape.text)
                                    : WriteFile(shape.name + ".csv", shape.text);
      absl::StatusOr<CsvTable> table;
      absl::StatusOr<uint64_t> peak = PeakResidentGrowth([&] { table = ReadCsv(path, {.num_threads = shape.threads}); });
      ASSERT_TRUE(peak.ok()) << peak.status();
      ASSERT_TRUE(table.ok()) << table.status();
      EXPECT_LE(*peak, WholeCsvBound(shape.text.size()))
          << path << ": " << shape.text.size() << " bytes of text took " << *peak / kMiB << " MiB at the peak";
      std::printf("%s: %zu bytes of text, %lld rows, peak %llu bytes (%.1f per byte)\n", path.c_str(),
                  shape.text.size(), static_cast<long long>(table->num_rows()),
                  static_cast<unsigned long long>(*peak), static_cast<double>(*peak) / shape.text.size());
      table = CsvTable();
      std::filesystem::remove(path);
    }
  }
}

TEST(DigitsTest, LoadsTheUciDigitsFromPython3Sklearn) {
  absl::StatusOr<CsvTable> digits = LoadDigits();
  ASSERT_TRUE(digits.ok()) << digits.status();
  EXPECT_EQ(digits->num_rows(), 1797);
  EXPECT_EQ(digits->num_features(), 64);
  EXPECT_EQ(digits->class_names.size(), 10u);
  EXPECT_EQ(digits->feature_names[9], "pixel_1_1");
  EXPECT_GE(digits->features.min().item<float>(), 0.f);
  EXPECT_LE(digits->features.max().item<float>(), 16.f);
  // Every digit occurs (about 180 each).
  EXPECT_GT(at::bincount(digits->labels).min().item<int64_t>(), 150);
}

TEST(DigitsTest, MissingFileSaysHowToInstallIt) {
  absl::StatusOr<CsvTable> digits = LoadDigits(TempPath("no/digits.csv.gz"));
  EXPECT_EQ(digits.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(digits.status().message().find("apt-get install python3-sklearn"), std::string::npos) << digits.status();
}

}  // namespace
}  // namespace kiln
