#include "hal/compat/version.h"

#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::compat {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(VersionTest, BuiltVersionIsMajorMinorPatch) {
  EXPECT_THAT(BuiltLibTorchVersion(), MatchesRegex("2\\.[0-9]+\\.[0-9]+"));
}

// The loaded libraries report their own version (show_config), and it is the one the headers had: a build that
// linked another LibTorch than it compiled against fails here.
TEST(VersionTest, RuntimeVersionIsTheBuiltOne) {
  const std::optional<std::string> runtime = RuntimeLibTorchVersion();
  ASSERT_TRUE(runtime.has_value()) << "at::show_config() names no TORCH_VERSION";
  EXPECT_EQ(runtime->substr(0, BuiltLibTorchVersion().size()), BuiltLibTorchVersion());
  EXPECT_TRUE(CheckLibTorchVersion().ok()) << CheckLibTorchVersion();
}

TEST(VersionTest, TheBuiltVersionIsAtLeastTheMinimum) {
  EXPECT_EQ(MinimumLibTorchVersion(), "2.8");
  EXPECT_TRUE(TORCH_VERSION_MAJOR > kMinimumLibTorchMajor ||
              (TORCH_VERSION_MAJOR == kMinimumLibTorchMajor && TORCH_VERSION_MINOR >= kMinimumLibTorchMinor))
      << BuiltLibTorchVersion();
}

struct VersionCase {
  std::string built;
  std::optional<std::string> runtime;
  bool ok;
};

TEST(VersionTest, MajorMinorMustAgree) {
  const VersionCase cases[] = {
      {"2.11.0", "2.11.0", true}, {"2.11.0", "2.11.0+cu130", true}, {"2.11.0", "2.11.1", true},
      {"1.13.0", "1.13.1", true}, {"2.11.0", std::nullopt, true},   {"2.11.0", "2.10.0", false},
      {"2.11.0", "2.1.0", false}, {"1.13.0", "2.11.0", false},      {"2.11.0", "1.13.0+dfsg", false},
  };
  for (const VersionCase& c : cases) {
    const absl::Status status =
        CheckLibTorchVersions(c.built, c.runtime ? std::optional<absl::string_view>(*c.runtime) : std::nullopt);
    EXPECT_EQ(status.ok(), c.ok) << c.built << " vs " << c.runtime.value_or("(none)") << ": " << status;
    if (!c.ok) {
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(status.message(), HasSubstr("built against LibTorch " + c.built));
      EXPECT_THAT(status.message(), HasSubstr("runs with LibTorch " + *c.runtime));
      EXPECT_THAT(status.message(), HasSubstr("KILN_LIBTORCH="));
    }
  }
}

}  // namespace
}  // namespace kiln::compat
