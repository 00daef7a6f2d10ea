// Checking the command line before Abseil parses it, so that every mistake ends the way `fit` promises: exit
// status 2 and one `error: ` line naming the flag, the value and what is accepted. (Abseil itself would print
// "ERROR: ..." and exit with status 1.)
#ifndef KILN_TRAINER_CLI_COMMAND_LINE_H_
#define KILN_TRAINER_CLI_COMMAND_LINE_H_

#include <string>

#include "absl/status/status.h"

namespace kiln {

// True when an argument asks for help: -h, --help, -help, --helpfull, --helpshort (before a "--" separator).
bool WantsHelp(int argc, char** argv);

// OK when every argument is a known flag with a value its type accepts (--name=value, --name value, and --flag /
// --noflag for booleans), up to a "--" separator. Otherwise InvalidArgument, e.g.
//   unknown flag --max_epoch; did you mean --max_epochs? (see --help)
//   --max_epochs='ten' is not valid; pass an integer
//   unexpected argument 'extra'; flags are written --name=value (see --help)
// Flags are set as a side effect of checking their values; parse the command line afterwards as usual.
absl::Status CheckCommandLine(int argc, char** argv);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_COMMAND_LINE_H_
