#include "trainer/data/text_encoding.h"

#include <string>

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(Utf8TextTest, AcceptsUtf8AndDropsItsByteOrderMark) {
  EXPECT_EQ(Utf8Text("a,b\n1,2\n", "f.csv").value_or("?"), "a,b\n1,2\n");
  EXPECT_EQ(Utf8Text("\xEF\xBB\xBF" "a,b\n", "f.csv").value_or("?"), "a,b\n");
  // Two-, three- and four-byte sequences: é, €, 𝄞.
  const std::string text = "caf\xC3\xA9,\xE2\x82\xAC,\xF0\x9D\x84\x9E\n";
  EXPECT_EQ(Utf8Text(text, "f.csv").value_or("?"), text);
  EXPECT_EQ(Utf8Text("", "f.csv").value_or("?"), "");
}

TEST(Utf8TextTest, OtherEncodingsAreErrorsSayingWhichAndHow) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {std::string("\xFF\xFE" "a\0,\0", 6), "f.csv is UTF-16 text"},
      {std::string("\xFE\xFF\0a", 4), "f.csv is UTF-16 text"},
      {std::string("\xFF\xFE\0\0a\0\0\0", 8), "f.csv is UTF-32 text"},
      {std::string("a\0,\0b\0", 6), "f.csv:1: byte 2 of the line is a NUL byte"},
      {"a,b\ncaf\xE9,1\n", "f.csv:2: byte 4 of the line (0xE9) is not UTF-8"},
      {"x\xC0\xAF", "f.csv:1: byte 2 of the line (0xC0) is not UTF-8"},      // An overlong '/'.
      {"x\xED\xA0\x80", "f.csv:1: byte 2 of the line (0xED) is not UTF-8"},  // A surrogate.
      {"x\xE2\x82", "f.csv:1: byte 2 of the line (0xE2) is not UTF-8"},      // Cut short.
  };
  for (const auto& [text, expected] : cases) {
    absl::StatusOr<absl::string_view> checked = Utf8Text(text, "f.csv");
    ASSERT_FALSE(checked.ok()) << expected;
    EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(checked.status().message().find(expected), std::string::npos)
        << "'" << checked.status().message() << "' lacks '" << expected << "'";
    EXPECT_NE(checked.status().message().find("iconv"), std::string::npos) << "no way to convert it";
  }
}

}  // namespace
}  // namespace kiln
