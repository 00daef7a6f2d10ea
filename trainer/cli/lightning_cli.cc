#include "trainer/cli/lightning_cli.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "trainer/cli/command_line.h"
#include "trainer/cli/config_file.h"
#include "trainer/cli/lightning_classes.h"

namespace kiln {
namespace {

using Section = ConfigKey::Section;

constexpr const char* kSubcommands[] = {"fit", "validate", "test", "predict"};

// The sections a --SECTION.KEY argument names, as LightningCLI spells them.
constexpr std::pair<const char*, Section> kSections[] = {
    {"trainer", Section::kTrainer},
    {"model", Section::kModel},
    {"data", Section::kData},
    {"lr_scheduler", Section::kLrScheduler},
};

// PyTorch's class names (with or without their module) for fit's --optimizer and --lr_scheduler values.
// The flag of `key` in `section`; "" when the config file has no such key. A plateau setting may be written as
// ReduceLROnPlateau's own argument (mode, factor, ...), which fit's flags prefix with plateau_.
std::string FlagOf(Section section, absl::string_view key) {
  for (const ConfigKey& entry : ConfigKeys()) {
    if (entry.section == section && entry.key == key) return entry.flag;
  }
  if (section == Section::kLrScheduler && !absl::StartsWith(key, "plateau_")) {
    return FlagOf(section, absl::StrCat("plateau_", key));
  }
  return "";
}

std::vector<std::string> KeysOf(Section section) {
  std::vector<std::string> keys;
  for (const ConfigKey& entry : ConfigKeys()) {
    if (entry.section == section) keys.emplace_back(entry.key);
  }
  return keys;
}

// The class a --optimizer or --lr_scheduler value names (lightning_classes.h): fit's value for it, or "".
std::string ClassValue(ClassKind kind, absl::string_view name) {
  const LightningClass* found = FindLightningClass(kind, name);
  return found == nullptr ? "" : found->value;
}

// fit's flag for an argument of the optimizer or scheduler classes (lr: learning_rate, factor: plateau_factor), or
// "" when none of them has one of that name.
std::string ArgumentFlag(ClassKind kind, absl::string_view argument) {
  for (const LightningClass& c : LightningClasses()) {
    if (c.kind != kind) continue;
    for (const ClassArgument& a : c.arguments) {
      if (a.flag != nullptr && argument == a.name) return a.flag;
    }
  }
  return "";
}

// The arguments with a flag, over the classes of a kind: "lr, momentum, weight_decay".
std::string ArgumentNames(ClassKind kind) {
  std::vector<std::string> names;
  for (const LightningClass& c : LightningClasses()) {
    if (c.kind != kind) continue;
    for (const ClassArgument& a : c.arguments) {
      if (a.flag != nullptr && std::find(names.begin(), names.end(), a.name) == names.end()) names.push_back(a.name);
    }
  }
  return absl::StrJoin(names, ", ");
}

class Translator {
 public:
  explicit Translator(std::vector<std::string>* notes) : notes_(notes) {}

  absl::StatusOr<std::vector<std::string>> Translate(const std::vector<std::string>& args) {
    std::vector<std::string> out;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (i == 1 && IsSubcommand(arg)) {
        subcommand_ = arg;
        out.push_back(absl::StrCat("--mode=", arg));
        continue;
      }
      if (i == 0 || arg == "--" || !absl::StartsWith(arg, "--")) {
        out.push_back(arg);
        continue;
      }
      absl::string_view body = absl::string_view(arg).substr(2);
      std::string name(body.substr(0, body.find('=')));
      const bool has_value = body.find('=') != absl::string_view::npos;
      std::string value = has_value ? std::string(body.substr(body.find('=') + 1)) : "";
      if (!IsLightningSpelling(name, has_value ? value : (i + 1 < args.size() ? args[i + 1] : ""))) {
        // fit's own --mode, as --mode=X or --mode X (abseil takes the next argument as the value too).
        if (name == "mode") mode_ = has_value ? value : (i + 1 < args.size() ? args[i + 1] : "");
        out.push_back(arg);
        continue;
      }
      if (!has_value) {  // --trainer.max_epochs 3: the value is the next argument.
        if (i + 1 >= args.size()) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value: write --", name, "=VALUE"));
        }
        value = args[++i];
      }
      absl::StatusOr<std::string> translated = TranslateOne(name, value);
      if (!translated.ok()) return translated.status();
      if (!translated->empty()) out.push_back(*std::move(translated));
    }
    if (!subcommand_.empty() && !mode_.empty() && mode_ != subcommand_) {
      return absl::InvalidArgumentError(absl::StrCat("the subcommand '", subcommand_, "' and --mode=", mode_,
                                                     " disagree; give one of them"));
    }
    return out;
  }

 private:
  static bool IsSubcommand(absl::string_view arg) {
    for (const char* subcommand : kSubcommands) {
      if (arg == subcommand) return true;
    }
    return false;
  }

  // `value` tells fit's own --optimizer and --lr_scheduler (adam, step, ...) from LightningCLI's, which name a
  // class (torch.optim.Adam, StepLR).
  static bool IsLightningSpelling(absl::string_view name, absl::string_view value) {
    if (name == "optimizer" || name == "lr_scheduler") {
      return absl::StrContains(value, '.') ||
             std::any_of(value.begin(), value.end(), [](char c) { return absl::ascii_isupper(c); });
    }
    if (name == "seed_everything") return true;
    if (absl::StartsWith(name, "optimizer.")) return true;
    for (const auto& [section, unused] : kSections) {
      if (absl::StartsWith(name, absl::StrCat(section, "."))) return true;
    }
    return false;
  }

  absl::StatusOr<std::string> TranslateOne(const std::string& name, const std::string& value) {
    if (name == "seed_everything") return Seed(value);
    if (name == "optimizer") {
      const std::string optimizer = ClassValue(ClassKind::kOptimizer, value);
      if (optimizer.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--optimizer='", value, "' is not an optimizer Kiln has; pass ",
                                                       LightningClassNames(ClassKind::kOptimizer)));
      }
      return absl::StrCat("--optimizer=", optimizer);
    }
    if (absl::StartsWith(name, "optimizer.")) {
      absl::string_view argument = absl::StripPrefix(absl::StripPrefix(name, "optimizer."), "init_args.");
      if (argument == "class_path") return TranslateOne("optimizer", value);
      const std::string flag = ArgumentFlag(ClassKind::kOptimizer, argument);
      if (!flag.empty()) return absl::StrCat("--", flag, "=", value);
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, ": Kiln's optimizers take ", ArgumentNames(ClassKind::kOptimizer),
          " (fit's --learning_rate, --momentum, --weight_decay); their other arguments are PyTorch's defaults"));
    }
    if (name == "lr_scheduler" || name == "lr_scheduler.class_path") {
      const std::string scheduler = value == "none" ? "none" : ClassValue(ClassKind::kScheduler, value);
      if (scheduler.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--lr_scheduler='", value,
                                                       "' is not a scheduler Kiln has; pass ",
                                                       LightningClassNames(ClassKind::kScheduler), " or none"));
      }
      return absl::StrCat("--lr_scheduler=", scheduler);
    }
    for (const auto& [section_name, section] : kSections) {
      const std::string prefix = absl::StrCat(section_name, ".");
      if (!absl::StartsWith(name, prefix)) continue;
      const absl::string_view key = absl::StripPrefix(absl::string_view(name).substr(prefix.size()), "init_args.");
      if (section == Section::kTrainer && absl::StartsWith(key, "callbacks")) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", name, ": callbacks on the command line are not supported; use fit's flags (--checkpoint_monitor, "
            "--save_top_k, --early_stopping_monitor, --patience, --swa_lrs, --ema_weight_averaging, ...) or "
            "trainer.callbacks in a --config file"));
      }
      // trainer.profiler as a class (--trainer.profiler=SimpleProfiler, or .class_path) and its init arguments
      // (--trainer.profiler.dirpath, or .init_args.dirpath): fit's --profiler name, dirpath and filename.
      if (section == Section::kTrainer && (key == "profiler" || key == "profiler.class_path")) {
        const std::string profiler = ClassValue(ClassKind::kProfiler, value);
        if (!profiler.empty()) return absl::StrCat("--profiler=", profiler);
        if (key == "profiler.class_path") {
          return absl::InvalidArgumentError(absl::StrCat("--", name, "='", value, "' is not a profiler Kiln has; pass ",
                                                         LightningClassNames(ClassKind::kProfiler)));
        }
      }
      if (section == Section::kTrainer && absl::StartsWith(key, "profiler.")) {
        const absl::string_view argument = absl::StripPrefix(absl::StripPrefix(key, "profiler."), "init_args.");
        const std::string flag = ArgumentFlag(ClassKind::kProfiler, argument);
        if (!flag.empty()) return absl::StrCat("--", flag, "=", value);
        return absl::InvalidArgumentError(absl::StrCat(
            "--", name, ": Kiln's profilers take ", ArgumentNames(ClassKind::kProfiler),
            " on the command line (fit's --profiler_dirpath, --profiler_filename); their other arguments are "
            "Lightning's defaults"));
      }
      std::string flag = FlagOf(section, key);
      // LightningCLI's scheduler arguments (--lr_scheduler.factor is fit's --plateau_factor).
      if (flag.empty() && section == Section::kLrScheduler) flag = ArgumentFlag(ClassKind::kScheduler, key);
      if (flag.empty()) {
        const std::string closest = ClosestName(key, KeysOf(section));
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown flag --", name, closest.empty() ? "; fit --print_config shows every key"
                                                     : absl::StrCat("; did you mean --", section_name, ".", closest,
                                                                    "?")));
      }
      return absl::StrCat("--", flag, "=", value);
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
  }

  // Lightning's seed_everything: an int is the seed; true (or false, which leaves Lightning unseeded) draws one.
  absl::StatusOr<std::string> Seed(const std::string& value) {
    bool drawn = false;
    // --seed's own check refuses what is not a seed, naming --seed.
    const std::string seed = SeedEverything(value, &drawn);
    if (drawn) {
      notes_->push_back(absl::StrCat("--seed_everything=", value, ": this run's seed is ", seed, " (pass --seed=",
                                     seed, " to repeat it)"));
    }
    return absl::StrCat("--seed=", seed);
  }

  std::vector<std::string>* notes_;
  std::string subcommand_;
  std::string mode_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> LightningCliArguments(const std::vector<std::string>& args,
                                                              std::vector<std::string>* notes) {
  return Translator(notes).Translate(args);
}

}  // namespace kiln
