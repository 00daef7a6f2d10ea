#include "trainer/accelerator_plugins.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<std::string> Values(std::vector<std::string> args, const std::string& parsed = "") {
  absl::SetFlag(&FLAGS_accelerator_plugin, parsed);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return AcceleratorPluginFlagValues(static_cast<int>(argv.size()), argv.data());
}

TEST(AcceleratorPluginFlagValuesTest, EveryOccurrenceCountsNotJustTheLast) {
  EXPECT_THAT(Values({"fit"}), IsEmpty());
  EXPECT_THAT(
      Values({"fit", "--accelerator_plugin=./a.so", "--max_epochs=1", "--accelerator_plugin=/b/b.so"}, "/b/b.so"),
      ElementsAre("./a.so", "/b/b.so"));
  // Abseil's other spellings: one dash, and the value as the next argument.
  EXPECT_THAT(
      Values({"fit", "-accelerator_plugin=./a.so", "--accelerator_plugin", "./b.so", "-accelerator_plugin", "./c.so"},
             "./c.so"),
      ElementsAre("./a.so", "./b.so", "./c.so"));
  // Commas belong to the path; an empty value stays, for the loader to refuse.
  EXPECT_THAT(Values({"fit", "--accelerator_plugin=./a,b.so", "--accelerator_plugin="}), ElementsAre("./a,b.so", ""));
}

TEST(AcceleratorPluginFlagValuesTest, OtherFlagsAndPositionalArgumentsAreNotPlugins) {
  EXPECT_THAT(Values({"fit", "--accelerator=cpu", "--accelerator_plugins=./x.so", "--", "--accelerator_plugin=./y.so"}),
              IsEmpty());
}

TEST(AcceleratorPluginFlagValuesTest, AValueTheFlagGotElsewhereIsKept) {
  // As from --flagfile: the flag holds a value that the command line does not show.
  EXPECT_THAT(Values({"fit"}, "./from_flagfile.so"), ElementsAre("./from_flagfile.so"));
  EXPECT_THAT(Values({"fit", "--accelerator_plugin=./a.so"}, "./from_flagfile.so"),
              ElementsAre("./a.so", "./from_flagfile.so"));
}

}  // namespace
}  // namespace kiln
