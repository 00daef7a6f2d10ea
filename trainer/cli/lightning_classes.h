// The classes a LightningCLI config or command line names, and how each becomes fit's flags: the optimizers,
// learning-rate schedulers, callbacks, loggers, strategies and profilers Kiln has, each with every init argument
// LightningCLI writes for it (`--print_config`), and Lightning's Trainer and LightningCLI keys that Kiln has no flag
// for. One table for the config file (config_file.h) and the command line (lightning_cli.h), reading and writing.
//
// An argument with a flag sets it. An argument without one is Lightning's or PyTorch's behaviour that Kiln has as
// its only behaviour: it is accepted at that value (what LightningCLI writes when nothing was chosen) and refused,
// with the fix, at any other, so a config runs as written or says what it needs.
#ifndef KILN_TRAINER_CLI_LIGHTNING_CLASSES_H_
#define KILN_TRAINER_CLI_LIGHTNING_CLASSES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainer/cli/config_file.h"

namespace kiln {

struct ClassArgument {
  const char* name;  // The init argument, as the class names it.
  const char* flag;  // fit's flag it sets; nullptr: fit has none.
  // The value the class takes when the argument is not given, as LightningCLI writes it ("0.0", "null", "''",
  // "[0.9, 0.999]"); nullptr where the class has none (a required argument). Without a flag, the only value Kiln
  // accepts (kiln_value, when set, instead).
  const char* lightning_default;
  // Where Kiln's behaviour is not Lightning's default: the value a config must write to have it; nullptr: the default.
  const char* kiln_value = nullptr;
  bool written = true;  // false: read, but not written by --print_config.
};

enum class ClassKind { kOptimizer, kScheduler, kCallback, kLogger, kStrategy, kProfiler };

struct LightningClass {
  ClassKind kind;
  const char* name;    // "SGD"
  const char* module;  // "torch.optim"
  // What naming the class sets: `flag` to `value` ("optimizer" = "sgd", "logger" gets "csv", a callback's switch);
  // flag nullptr: nothing.
  const char* flag;
  const char* value;
  std::vector<ClassArgument> arguments;
  std::string class_path() const { return std::string(module) + "." + name; }
};

// Every class, by kind, in the order --print_config writes them.
const std::vector<LightningClass>& LightningClasses();

// The class of `kind` that `class_path` names, by its bare name or with any module path (torch.optim.SGD, SGD), or
// by fit's value for it (sgd); null when Kiln has none.
const LightningClass* FindLightningClass(ClassKind kind, absl::string_view class_path);

// The class of `kind` whose flag value is `value` (the optimizer "sgd": SGD); null when none.
const LightningClass* LightningClassOfValue(ClassKind kind, absl::string_view value);

// "Adam, AdamW, SGD": the class names of a kind, for messages.
std::string LightningClassNames(ClassKind kind);

// A key of Lightning's Trainer (section kTrainer) or LightningCLI (kTop) that fit has no flag for.
struct DefaultOnlyKey {
  ConfigKey::Section section;
  const char* key;
  const char* lightning_default;  // As LightningCLI writes it; the only value Kiln accepts.
  const char* why;                // What Kiln does instead, for the error.
};
const std::vector<DefaultOnlyKey>& DefaultOnlyKeys();

// LightningCLI's seed_everything `value` as fit's --seed: an integer is the seed itself; true draws one, and so
// does false (which leaves Lightning unseeded). `*drawn` says whether it was drawn, for the caller to print it.
std::string SeedEverything(absl::string_view value, bool* drawn);

// Whether `value` (a YAML scalar's text, "null" for null, or a flow list "[0.9, 0.999]") is `expected` (the same
// notation): numbers by value (0 is 0.0, 1e-8 is 1.0e-08), text exactly ('' and "" are empty).
bool SameYamlValue(absl::string_view value, absl::string_view expected);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_LIGHTNING_CLASSES_H_
