// Fuzz target: fit's config files (ConfigFileArguments), as `fit --config=FILE` reads a user's YAML.
//
// Input: the file's text.
//
// What must hold: no crash, however deep or odd the YAML; reading changes no flag; an error is InvalidArgument and
// names the file; otherwise every argument is --<flag>=<value> for a flag of the config table whose parser accepts
// the value. And what the flags then hold, written out by ConfigYaml, reads back to the same flag values.
#include <map>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "tests/fuzz/fuzz_support.h"
#include "trainer/cli/config_file.h"

namespace kiln {
namespace {

std::map<std::string, std::string> Values() {
  std::map<std::string, std::string> values;
  for (const ConfigKey& entry : ConfigKeys())
    values[entry.flag] = absl::FindCommandLineFlag(entry.flag)->CurrentValue();
  return values;
}

// Puts the flags of the config table back (absl::FlagSaver would log a line for every flag it restores).
void Restore(const std::map<std::string, std::string>& values) {
  std::string error;
  for (const auto& [name, value] : values) absl::FindCommandLineFlag(name)->ParseFrom(value, &error);
}

void Apply(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    KILN_FUZZ_CHECK(absl::StartsWith(arg, "--") && arg.find('=') != std::string::npos, arg);
    const size_t equals = arg.find('=');
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(arg.substr(2, equals - 2));
    KILN_FUZZ_CHECK(flag != nullptr && !IsCommandLineOnlyFlag(flag->Name()), arg);
    std::string error;
    KILN_FUZZ_CHECK(flag->ParseFrom(arg.substr(equals + 1), &error), arg + ": " + error);
  }
}

}  // namespace
}  // namespace kiln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::map<std::string, std::string> before = Values();
  struct RestoreAtEnd {
    const std::map<std::string, std::string>& values;
    ~RestoreAtEnd() { Restore(values); }
  } restore{before};  // Every input starts from the same flags.
  absl::StatusOr<std::vector<std::string>> args = ConfigFileArguments(text, "fuzz.yaml");
  KILN_FUZZ_CHECK(Values() == before, "reading a config file changed a flag");
  if (!args.ok()) {
    KILN_FUZZ_CHECK(args.status().code() == absl::StatusCode::kInvalidArgument, args.status().ToString());
    KILN_FUZZ_CHECK(absl::StartsWith(args.status().message(), "--config=fuzz.yaml"), args.status().ToString());
    return 0;
  }
  Apply(*args);
  const std::map<std::string, std::string> set = Values();
  const std::string yaml = ConfigYaml();
  absl::StatusOr<std::vector<std::string>> again = ConfigFileArguments(yaml, "fuzz.yaml");
  KILN_FUZZ_CHECK(again.ok(), again.status().ToString() + "\n" + yaml);
  Apply(*again);
  KILN_FUZZ_CHECK(Values() == set, "ConfigYaml did not read back to the same flags:\n" + yaml);
  return 0;
}
