// Checking the command line before Abseil parses it, so that every mistake ends the way `fit` promises: exit
// status 2 and one `error: ` line naming the flag, the value and what is accepted. (Abseil itself would print
// "ERROR: ..." and exit with status 1.)
//
// Every way a value reaches fit goes through the same check: ExpandCommandLine first replaces Abseil's flag
// sources (--flagfile, --fromenv, --tryfromenv) by the flags they hold, reading each with a bound, so that
// CheckCommandLine and then Abseil's parser see plain flags only.
#ifndef KILN_TRAINER_CLI_COMMAND_LINE_H_
#define KILN_TRAINER_CLI_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/core/closest_name.h"  // ClosestName, declared here until it moved down for the trainer's checks.

namespace kiln {

// True when an argument asks for help: -h, --help, -help, --helpfull, --helpshort (before a "--" separator).
bool WantsHelp(int argc, char** argv);

// The largest flag file read, and how deeply flag files may name flag files.
inline constexpr size_t kMaxFlagFileBytes = 1 << 20;
inline constexpr int kMaxFlagFileDepth = 8;

// The arguments as fit reads them (argv[0] first): each --flagfile=F (Abseil's form: one flag per line, '#'
// comments and blank lines skipped, each line trimmed; a comma-separated list of files) replaced by its flags, each
// --fromenv=a,b by --a=<$FLAGS_a> --b=<$FLAGS_b>, each --tryfromenv=a,b likewise for the variables that are set.
// `resolve_path` turns a flag file's name into the path to open (fit: UserPath). InvalidArgument naming the file,
// the line or the variable: a flag file that is missing, unreadable, not a regular file (/dev/zero, a pipe) or
// larger than kMaxFlagFileBytes, a line that is not a flag, flag files nested deeper than kMaxFlagFileDepth, a
// variable --fromenv names that is not set, and --undefok (fit knows every flag it takes).
absl::StatusOr<std::vector<std::string>> ExpandCommandLine(const std::vector<std::string>& args,
                                                           std::string (*resolve_path)(const std::string&));

// A flag file's text as arguments (the format above); `source` names the file in errors.
absl::StatusOr<std::vector<std::string>> FlagFileArguments(absl::string_view text, absl::string_view source);

// OK when every argument is a known flag with a value its type accepts (--name=value, --name value, and --flag /
// --noflag for booleans). A "--" separator may end the arguments, but nothing may follow it: fit takes no
// positional arguments, and would otherwise ignore them. Otherwise InvalidArgument, e.g.
//   unknown flag --max_epoch; did you mean --max_epochs? (see --help)
//   --max_epochs='ten' is not valid; pass an integer
//   unexpected argument 'extra'; flags are written --name=value (see --help)
// The flag sources ExpandCommandLine reads are refused here: expand first.
// Flags are set as a side effect of checking their values; parse the command line afterwards as usual.
absl::Status CheckCommandLine(int argc, char** argv);

// The text of a file a flag names (--flagfile, --config): `path` is where it is, `shown` how the user wrote it.
// InvalidArgument naming --<flag>=<shown> when it is missing, unreadable, not a regular file (/dev/zero, a pipe)
// or larger than kMaxFlagFileBytes; `noun` names such a file ("flag file") and `expected` says what to pass instead.
absl::StatusOr<std::string> ReadArgumentFile(absl::string_view flag, const std::string& shown, const std::string& path,
                                             absl::string_view noun, absl::string_view expected);

// `text` with its control characters written as escapes (a newline as \n, a carriage return as \r, others and DEL
// as \xNN; a tab stays), so that one error is one line however a path, a YAML key or a plugin's message was spelt,
// and no escape sequence reaches the terminal. fit prints every `error:` line through it.
std::string OneLine(absl::string_view text);

// The arguments as the argc/argv pair that CheckCommandLine and Abseil take; it points into `args`.
std::vector<char*> ArgvOf(std::vector<std::string>& args);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_COMMAND_LINE_H_
