#include "trainer/cli/command_line.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"
#include "trainer/cli/flags.h"
#include "trainer/cli/help.h"

namespace kiln {
namespace {

absl::Status Check(std::vector<std::string> args) {
  args.insert(args.begin(), "fit");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return CheckCommandLine(static_cast<int>(argv.size()), argv.data());
}

bool Help(std::vector<std::string> args) {
  args.insert(args.begin(), "fit");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return WantsHelp(static_cast<int>(argv.size()), argv.data());
}

TEST(CommandLineTest, AcceptsAbseilsForms) {
  absl::FlagSaver saver;
  EXPECT_TRUE(Check({}).ok());
  EXPECT_TRUE(Check({"--max_epochs=3", "-batch_size=8", "--devices", "1", "--shuffle", "--nonormalize",
                     "--report=false", "--"})
                  .ok());
}

TEST(CommandLineTest, ErrorsNameTheFlagTheValueAndWhatIsAccepted) {
  absl::FlagSaver saver;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--max_epoch=3"}, "unknown flag --max_epoch; did you mean --max_epochs? (see --help)"},
      {{"--frobnicate"}, "unknown flag --frobnicate (see --help)"},
      {{"--max_epochs=ten"}, "--max_epochs='ten' is not valid; pass an integer"},
      {{"--learning_rate=fast"}, "--learning_rate='fast' is not valid; pass a number"},
      {{"--shuffle=maybe"}, "--shuffle='maybe' is not valid; pass true or false"},
      {{"--noshuffle=true"}, "--noshuffle=true is not valid; write --noshuffle or --shuffle=false"},
      {{"--max_epochs"}, "--max_epochs needs a value; write --max_epochs=<value>"},
      {{"extra"}, "unexpected argument 'extra'; flags are written --name=value"},
      {{"--max_epochs=3", "--", "--max_epochs=ten"}, "unexpected argument '--max_epochs=ten' after '--'"},
      {{"--flagfile=run.flags"}, "--flagfile must be expanded before the check"},
  };
  for (const auto& [args, expected] : cases) {
    absl::Status status = Check(args);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << args[0];
    EXPECT_NE(status.message().find(expected), std::string::npos)
        << "'" << status.message() << "' lacks '" << expected << "'";
  }
}

std::string Identity(const std::string& path) { return path; }

std::string TempFile(const std::string& name, const std::string& text) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(root != nullptr ? root : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

absl::StatusOr<std::vector<std::string>> Expand(std::vector<std::string> args) {
  args.insert(args.begin(), "fit");
  absl::StatusOr<std::vector<std::string>> expanded = ExpandCommandLine(args, Identity);
  if (expanded.ok()) expanded->erase(expanded->begin());
  return expanded;
}

TEST(ExpandCommandLineTest, FlagFilesAndVariablesBecomePlainFlags) {
  const std::string inner = TempFile("inner.flags", "--batch_size=8\n");
  const std::string outer = TempFile("outer.flags", "# a comment\n\n  --max_epochs=3  \r\n--flagfile=" + inner + "\n");
  setenv("FLAGS_seed", "7", 1);
  unsetenv("FLAGS_precision");
  absl::StatusOr<std::vector<std::string>> expanded =
      Expand({"--devices=1", "--flagfile=" + outer, "--fromenv=seed", "--tryfromenv=precision,seed", "--"});
  ASSERT_TRUE(expanded.ok()) << expanded.status();
  EXPECT_EQ(*expanded, (std::vector<std::string>{"--devices=1", "--max_epochs=3", "--batch_size=8", "--seed=7",
                                                 "--seed=7", "--"}));
}

TEST(ExpandCommandLineTest, BadSourcesAreErrorsNamingThem) {
  const std::string missing = TempFile("x", "") + ".missing";
  const std::string big = TempFile("big.flags", std::string(kMaxFlagFileBytes + 1, '#'));
  const std::string stray = TempFile("stray.flags", "--max_epochs=3\nmax_steps=4\n");
  const std::string loop = TempFile("loop.flags", "");
  TempFile("loop.flags", "--flagfile=" + loop + "\n");
  unsetenv("FLAGS_max_epochs");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--flagfile=" + missing}, "--flagfile=" + missing + ": No such file or directory"},
      {{"--flagfile=/dev/zero"}, "--flagfile=/dev/zero is not a regular file"},
      {{"--flagfile=" + big}, "a flag file holds at most 1048576 bytes"},
      {{"--flagfile=" + stray}, "line 2: 'max_steps=4' is not a flag; write one --name=value per line"},
      {{"--flagfile=" + loop}, "flag files nest more than 8 deep"},
      {{"--fromenv=max_epochs"}, "FLAGS_max_epochs is not set"},
      {{"--undefok=max_epochs"}, "--undefok is not accepted"},
      {{"--flagfile"}, "--flagfile needs a value"},
  };
  for (const auto& [args, expected] : cases) {
    absl::StatusOr<std::vector<std::string>> expanded = Expand(args);
    ASSERT_FALSE(expanded.ok()) << args[0];
    EXPECT_EQ(expanded.status().code(), absl::StatusCode::kInvalidArgument) << args[0];
    EXPECT_NE(expanded.status().message().find(expected), std::string::npos)
        << "'" << expanded.status().message() << "' lacks '" << expected << "'";
  }
}

TEST(ExpandCommandLineTest, AFlagFilesValuesMeetTheSameChecks) {
  absl::FlagSaver saver;
  const std::string file = TempFile("bad_value.flags", "--max_epochs=ten\n");
  absl::StatusOr<std::vector<std::string>> expanded = ExpandCommandLine({"fit", "--flagfile=" + file}, Identity);
  ASSERT_TRUE(expanded.ok());
  std::vector<char*> argv = ArgvOf(*expanded);
  const absl::Status checked = CheckCommandLine(static_cast<int>(expanded->size()), argv.data());
  EXPECT_EQ(checked.message(), "--max_epochs='ten' is not valid; pass an integer");
}

TEST(CommandLineTest, HelpIsAskedForBeforeTheSeparatorOnly) {
  EXPECT_TRUE(Help({"--help"}));
  EXPECT_TRUE(Help({"--max_epochs=3", "-h"}));
  EXPECT_TRUE(Help({"--helpfull"}));
  EXPECT_FALSE(Help({"--max_epochs=3"}));
  EXPECT_FALSE(Help({"--", "--help"}));
}

TEST(HelpTest, ListsEveryFlagInItsGroup) {
  EXPECT_TRUE(UngroupedFlags(FitFlagGroups()).empty());
  const std::string help = FlagsHelp("usage line", FitFlagGroups());
  EXPECT_EQ(help.rfind("usage line\n", 0), 0u);
  size_t previous = 0;
  for (const FlagGroup& group : FitFlagGroups()) {
    const size_t at = help.find("\n" + group.title + ":\n");
    ASSERT_NE(at, std::string::npos) << group.title;
    EXPECT_GT(at, previous) << group.title << " is out of order";
    previous = at;
  }
  int listed = 0;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!IsFitFlag(*flag)) continue;
    ++listed;
    EXPECT_NE(help.find("\n  --" + std::string(name) + "="), std::string::npos) << name;
  }
  EXPECT_GT(listed, 50);
  EXPECT_NE(help.find("  --accelerator=auto\n      Accelerator name or alias"), std::string::npos);
  EXPECT_NE(help.find("  --max_time=\"\"\n"), std::string::npos);
  for (size_t start = 0, end; (end = help.find('\n', start)) != std::string::npos; start = end + 1) {
    EXPECT_LE(end - start, 100u) << help.substr(start, end - start);
  }
}

TEST(HelpTest, NoFlagTakesANameAbseilDefines) {
  // A second definition of one of these would silently share storage with Abseil's own flag (same symbol).
  for (const char* reserved : {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch", "version",
                               "only_check_args", "flagfile", "fromenv", "tryfromenv", "undefok"}) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(reserved);
    if (flag != nullptr) {
      EXPECT_FALSE(IsFitFlag(*flag)) << reserved;
    }
  }
}

TEST(OneLineTest, ControlCharactersBecomeEscapes) {
  EXPECT_EQ(OneLine("plain text, a tab\there"), "plain text, a tab\there");
  EXPECT_EQ(OneLine("two\nlines\r\n"), "two\\nlines\\r\\n");
  EXPECT_EQ(OneLine("\x1b[2J clear"), "\\x1b[2J clear");
  EXPECT_EQ(OneLine(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7f");
  EXPECT_EQ(OneLine("UTF-8 stays: \xc3\xa9"), "UTF-8 stays: \xc3\xa9");
}

}  // namespace
}  // namespace kiln
