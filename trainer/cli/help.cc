#include "trainer/cli/help.h"

#include <algorithm>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln {
namespace {

constexpr size_t kWidth = 100;
constexpr char kIndent[] = "      ";

// Abseil records trainer/trainer_options.inc as the file of the Trainer's options' flags (their rows are there), and
// trainer/strategies/fsdp_options.inc as the strategy group's: the row names the *_flags.cc that defines them.
bool FromOptionsTable(const absl::CommandLineFlag& flag) {
  return absl::EndsWith(flag.Filename(), "trainer/trainer_options.inc") ||
         absl::EndsWith(flag.Filename(), "trainer/strategies/fsdp_options.inc");
}

std::string OptionFlagsFile(absl::string_view name) {
#define KILN_TRAINER_OPTION(group, type, option, fit_default, section, key, help) \
  if (name == #option) return #group "_flags.cc";
#include "trainer/trainer_options.inc"
  return "";
}

bool InGroup(const absl::CommandLineFlag& flag, const FlagGroup& group) {
  if (FromOptionsTable(flag)) return OptionFlagsFile(flag.Name()) == group.file;
  const std::string& file = flag.Filename();
  return absl::EndsWith(file, "/" + group.file) || file == group.file;
}

bool InCli(const absl::CommandLineFlag& flag) { return IsFitFlag(flag); }

// `text` wrapped at kWidth, each line starting with `indent`.
std::string Wrap(const std::string& text, const std::string& indent) {
  std::string out;
  std::string line = indent;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > kWidth) {
      absl::StrAppend(&out, line, "\n");
      line = indent;
    }
    absl::StrAppend(&line, line.size() > indent.size() ? " " : "", word);
  }
  absl::StrAppend(&out, line, "\n");
  return out;
}

std::string Default(const absl::CommandLineFlag& flag) {
  const std::string value = flag.DefaultValue();
  if (flag.IsOfType<std::string>() && (value.empty() || value.find(' ') != std::string::npos)) {
    return absl::StrCat("\"", value, "\"");
  }
  return value;
}

}  // namespace

bool IsFitFlag(const absl::CommandLineFlag& flag) {
  return absl::StrContains(flag.Filename(), "trainer/cli/") || FromOptionsTable(flag);
}

const std::vector<FlagGroup>& FitFlagGroups() {
  static const std::vector<FlagGroup>* groups = new std::vector<FlagGroup>{
      {"Hardware (Lightning's Trainer arguments, resolved by the connector)", "hardware_flags.cc"},
      {"Strategy options (the strategy's own: fsdp's)", "strategy_flags.cc"},
      {"Accelerator plugins", "accelerator_plugins.cc"},
      {"Training loop", "loop_flags.cc"},
      {"Checkpoints and resuming", "checkpoint_flags.cc"},
      {"Weight averaging (Lightning's StochasticWeightAveraging and EMAWeightAveraging callbacks)",
       "weight_averaging_flags.cc"},
      {"Model", "model_flags.cc"},
      {"Learning-rate scheduler (PyTorch's torch.optim.lr_scheduler)", "scheduler_flags.cc"},
      {"Data", "data_flags.cc"},
      {"Logging and outputs", "output_flags.cc"},
      {"Mode", "mode_flags.cc"},
      {"Tuning before training (Lightning's Tuner; Lightning 1.x's auto_lr_find, auto_scale_batch_size)",
       "tuner_flags.cc"},
      {"Config file (LightningCLI's --config)", "config_flags.cc"},
  };
  return *groups;
}

std::string FlagsHelp(const std::string& usage, const std::vector<FlagGroup>& groups) {
  std::map<size_t, std::vector<const absl::CommandLineFlag*>> by_group;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    for (size_t i = 0; i < groups.size(); ++i) {
      if (InGroup(*flag, groups[i])) by_group[i].push_back(flag);
    }
  }
  std::string out = absl::StrCat(usage, "\n");
  for (size_t i = 0; i < groups.size(); ++i) {
    std::vector<const absl::CommandLineFlag*>& flags = by_group[i];
    if (flags.empty()) continue;
    std::sort(flags.begin(), flags.end(), [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
    absl::StrAppend(&out, "\n", groups[i].title, ":\n");
    for (const absl::CommandLineFlag* flag : flags) {
      absl::StrAppend(&out, "  --", flag->Name(), "=", Default(*flag), "\n", Wrap(flag->Help(), kIndent));
    }
  }
  absl::StrAppend(&out,
                  "\nBoolean flags also take the forms --flag and --noflag. Flags may also come from\n"
                  "--flagfile=FILE (one --name=value per line, '#' comments; at most 1 MiB) and from\n"
                  "--fromenv=name,... (the variable FLAGS_name; --tryfromenv skips unset ones); they are\n"
                  "checked like the command line's.\n");
  return out;
}

std::vector<std::string> UngroupedFlags(const std::vector<FlagGroup>& groups) {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!InCli(*flag)) continue;
    if (std::none_of(groups.begin(), groups.end(), [&](const FlagGroup& g) { return InGroup(*flag, g); })) {
      names.push_back(std::string(name));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln
