// kiln::Version() and the KILN_VERSION_* macros agree with each other and with CHANGELOG.md's newest released
// heading ("## 0.2.0 (2026-12-07)"), and the released headings go from newest to oldest: cutting a release means
// writing its heading and bumping hal/version.h in the same change.
#include "hal/version.h"

#include <fstream>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

struct Heading {
  int major, minor, patch;
  std::string text;
};

// Every "## MAJOR.MINOR.PATCH ..." heading of CHANGELOG.md (a runfile of this test), in the file's order.
std::vector<Heading> ReleasedHeadings() {
  std::ifstream file("CHANGELOG.md");
  EXPECT_TRUE(file.good()) << "CHANGELOG.md is not among the test's runfiles";
  const std::regex released(R"(^## (\d+)\.(\d+)\.(\d+)( .*)?$)");
  std::vector<Heading> headings;
  for (std::string line; std::getline(file, line);) {
    std::smatch match;
    if (std::regex_match(line, match, released)) {
      headings.push_back({std::stoi(match[1]), std::stoi(match[2]), std::stoi(match[3]), line});
    }
  }
  return headings;
}

TEST(VersionTest, MacrosSpellTheLibrarysVersion) {
  EXPECT_EQ(Version(), std::to_string(KILN_VERSION_MAJOR) + "." + std::to_string(KILN_VERSION_MINOR) + "." +
                           std::to_string(KILN_VERSION_PATCH));
}

TEST(VersionTest, NewestReleasedHeadingOfTheChangelogIsTheVersion) {
  const std::vector<Heading> headings = ReleasedHeadings();
  ASSERT_FALSE(headings.empty()) << "CHANGELOG.md has no released heading (## MAJOR.MINOR.PATCH)";
  const Heading& newest = headings.front();
  EXPECT_EQ(std::to_string(newest.major) + "." + std::to_string(newest.minor) + "." + std::to_string(newest.patch),
            Version())
      << "CHANGELOG.md's newest release is '" << newest.text << "' but hal/version.h says " << Version()
      << ": bump hal/version.h when a release is cut, and only then";
}

TEST(VersionTest, ReleasedHeadingsGoFromNewestToOldest) {
  const std::vector<Heading> headings = ReleasedHeadings();
  for (size_t i = 1; i < headings.size(); ++i) {
    const Heading& newer = headings[i - 1];
    const Heading& older = headings[i];
    EXPECT_GT(std::tie(newer.major, newer.minor, newer.patch), std::tie(older.major, older.minor, older.patch))
        << "'" << newer.text << "' comes before '" << older.text << "'";
  }
}

}  // namespace
}  // namespace kiln
