// --help for `//trainer:fit`: the usage message, then the flags in groups with their defaults, wrapped to 100
// columns. Abseil's own --help lists flags per source file, alphabetically; this one follows flags.h's groups.
#ifndef KILN_TRAINER_CLI_HELP_H_
#define KILN_TRAINER_CLI_HELP_H_

#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"

namespace kiln {

struct FlagGroup {
  std::string title;
  std::string file;  // The defining file's name, e.g. "hardware_flags.cc".
};

// Whether `flag` is one of fit's own: defined in trainer/cli/, or a Trainer option's (trainer/trainer_options.inc,
// which Abseil records as the file of those flags).
bool IsFitFlag(const absl::CommandLineFlag& flag);

// The groups of flags.h, in order.
const std::vector<FlagGroup>& FitFlagGroups();

// The whole help text: `usage`, then each group's flags (name, default, help), sorted by name within a group.
std::string FlagsHelp(const std::string& usage, const std::vector<FlagGroup>& groups);

// Names of the flags defined in trainer/cli/ that no group lists (for tests: must be empty).
std::vector<std::string> UngroupedFlags(const std::vector<FlagGroup>& groups);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_HELP_H_
