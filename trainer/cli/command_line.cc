#include "trainer/cli/command_line.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " did you mean --x?" for the closest defined flag within a few edits, else "".
std::string Suggestion(absl::string_view name) {
  std::string best;
  size_t best_distance = 4;
  for (const auto& [candidate, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired()) continue;
    const size_t distance = EditDistance(name, candidate);
    if (distance < best_distance || (distance == best_distance && !best.empty() && candidate < best)) {
      best = std::string(candidate);
      best_distance = distance;
    }
  }
  return best.empty() ? "" : absl::StrCat("; did you mean --", best, "?");
}

std::string Accepted(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "pass true or false (or write --flag / --noflag)";
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>() || flag.IsOfType<int32_t>()) return "pass an integer";
  if (flag.IsOfType<double>() || flag.IsOfType<float>()) return "pass a number";
  return "see --help";
}

bool IsHelp(absl::string_view arg) {
  return arg == "-h" || arg == "--help" || arg == "-help" || arg == "--helpfull" || arg == "--helpshort";
}

}  // namespace

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
    if (arg == "--") break;
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
