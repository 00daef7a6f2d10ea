#include "trainer/cli/command_line.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

// " did you mean --x?" for the closest defined flag within a few edits, else "".
std::string Suggestion(absl::string_view name) {
  std::vector<std::string> names;
  for (const auto& [candidate, flag] : absl::GetAllFlags()) {
    if (!flag->IsRetired()) names.emplace_back(candidate);
  }
  const std::string best = ClosestName(name, names);
  return best.empty() ? "" : absl::StrCat("; did you mean --", best, "?");
}

std::string Accepted(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "pass true or false (or write --flag / --noflag)";
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>() || flag.IsOfType<int32_t>()) return "pass an integer";
  if (flag.IsOfType<double>() || flag.IsOfType<float>()) return "pass a number";
  return "see --help";
}

// The name and value of a `--name=value` or `-name=value` argument; false when it is not one of `names`.
bool SourceFlag(absl::string_view arg, std::initializer_list<absl::string_view> names, std::string& name,
                std::string& value, bool& has_value) {
  absl::string_view body = arg;
  if (!absl::ConsumePrefix(&body, "--") && !absl::ConsumePrefix(&body, "-")) return false;
  const size_t equals = body.find('=');
  const absl::string_view flag = body.substr(0, equals);
  if (std::find(names.begin(), names.end(), flag) == names.end()) return false;
  name = std::string(flag);
  has_value = equals != absl::string_view::npos;
  value = has_value ? std::string(body.substr(equals + 1)) : "";
  return true;
}

absl::Status Expand(const std::vector<std::string>& args, size_t first, int depth,
                    std::string (*resolve_path)(const std::string&), std::vector<std::string>& out) {
  bool separated = false;
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string name, value;
    bool has_value = false;
    if (separated || arg == "--" ||
        !SourceFlag(arg, {"flagfile", "fromenv", "tryfromenv", "undefok"}, name, value, has_value)) {
      separated = separated || arg == "--";
      out.push_back(arg);
      continue;
    }
    if (name == "undefok") {
      return absl::InvalidArgumentError(
          "--undefok is not accepted: fit knows every flag it takes, and refuses the ones it does not (see --help)");
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value; write --", name, "=<value>"));
      }
      value = args[++i];
    }
    if (name == "flagfile") {
      if (depth >= kMaxFlagFileDepth) {
        return absl::InvalidArgumentError(absl::StrCat("--flagfile=", value, ": flag files nest more than ",
                                                       kMaxFlagFileDepth, " deep; does one name itself?"));
      }
      for (absl::string_view file : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        const std::string shown(file);
        absl::StatusOr<std::string> text = ReadArgumentFile("flagfile", shown, resolve_path(shown), "flag file",
                                                            "a text file with one --name=value per line");
        if (!text.ok()) return text.status();
        absl::StatusOr<std::vector<std::string>> inner = FlagFileArguments(*text, shown);
        if (!inner.ok()) return inner.status();
        if (absl::Status expanded = Expand(*inner, 0, depth + 1, resolve_path, out); !expanded.ok()) return expanded;
      }
      continue;
    }
    for (absl::string_view flag : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      const std::string variable = absl::StrCat("FLAGS_", flag);
      const char* set = std::getenv(variable.c_str());
      if (set == nullptr) {
        if (name == "tryfromenv") continue;
        return absl::InvalidArgumentError(absl::StrCat("--fromenv=", value, ": ", variable,
                                                       " is not set; set it, or use --tryfromenv to skip flags "
                                                       "whose variable is unset"));
      }
      out.push_back(absl::StrCat("--", flag, "=", set));
    }
  }
  return absl::OkStatus();
}

bool IsHelp(absl::string_view arg) {
  return arg == "-h" || arg == "--help" || arg == "-help" || arg == "--helpfull" || arg == "--helpshort";
}

}  // namespace

std::string OneLine(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if ((byte < 0x20 && c != '\t') || byte == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(byte, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<std::string> ReadArgumentFile(absl::string_view flag, const std::string& shown, const std::string& path,
                                             absl::string_view noun, absl::string_view expected) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", shown, ": ", std::strerror(errno), "; pass an existing ", noun));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", shown, " is not a regular file; pass ", expected));
  }
  if (static_cast<uint64_t>(info.st_size) > kMaxFlagFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", shown, " is ", info.st_size, " bytes; a ", noun,
                                                   " holds at most ", kMaxFlagFileBytes, " bytes"));
  }
  std::ifstream file(path, std::ios::binary);
  std::string text(kMaxFlagFileBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (file.bad()) return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", shown, ": cannot read it"));
  text.resize(static_cast<size_t>(file.gcount()));
  if (text.size() > kMaxFlagFileBytes) {  // It grew after stat.
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", shown, " holds more than ", kMaxFlagFileBytes,
                                                   " bytes; a ", noun, " holds at most that"));
  }
  return text;
}

absl::StatusOr<std::vector<std::string>> FlagFileArguments(absl::string_view text, absl::string_view source) {
  std::vector<std::string> args;
  int64_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != '-') {
      return absl::InvalidArgumentError(absl::StrCat("--flagfile=", source, " line ", number, ": '", line,
                                                     "' is not a flag; write one --name=value per line"));
    }
    args.emplace_back(line);
  }
  return args;
}

absl::StatusOr<std::vector<std::string>> ExpandCommandLine(const std::vector<std::string>& args,
                                                           std::string (*resolve_path)(const std::string&)) {
  std::vector<std::string> out;
  if (args.empty()) return out;
  out.push_back(args[0]);
  if (absl::Status expanded = Expand(args, 1, 0, resolve_path, out); !expanded.ok()) return expanded;
  return out;
}

std::vector<char*> ArgvOf(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  return argv;
}

bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") return false;
    if (IsHelp(argv[i])) return true;
  }
  return false;
}

absl::Status CheckCommandLine(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      if (i + 1 == argc) break;
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", argv[i + 1],
                                                     "' after '--'; fit takes flags only, written --name=value "
                                                     "(see --help)"));
    }
    if (!absl::StartsWith(arg, "-") || arg == "-") {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "'; flags are written --name=value (see --help)"));
    }
    absl::string_view body = arg;
    if (!absl::ConsumePrefix(&body, "--")) absl::ConsumePrefix(&body, "-");
    const size_t equals = body.find('=');
    absl::string_view name = body.substr(0, equals);
    const bool has_value = equals != absl::string_view::npos;
    absl::string_view value = has_value ? body.substr(equals + 1) : absl::string_view();

    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr && flag->IsOfType<bool>();
      if (!negated) flag = nullptr;
    }
    if (flag == nullptr || flag->IsRetired()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, Suggestion(name), " (see --help)"));
    }
    if (name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok") {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be expanded before the check (ExpandCommandLine)"));
    }
    if (negated) {
      if (has_value) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, " is not valid; write --no",
                                                       flag->Name(), " or --", flag->Name(), "=false"));
      }
      continue;
    }
    if (!has_value) {
      if (flag->IsOfType<bool>()) continue;
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value; write --", name, "=<value> (see --help)"));
      }
      value = argv[++i];
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, "='", value, "' is not valid; ", Accepted(*flag)));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln
