// The options of kiln::Trainer as one table (trainer_options.inc): each option's setter from fit's flag value and
// its one check, which the library (Trainer, before any device is touched) and `fit` (FitConfigFromFlags) both run.
#ifndef KILN_TRAINER_TRAINER_OPTIONS_H_
#define KILN_TRAINER_TRAINER_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/strategies/fsdp_options.h"

namespace kiln {

struct TrainerOptions;

// Why an option's value is refused: the value as written, and what is accepted ("pass an int >= 1"). The library
// writes it as `name=value is not valid; accepted`, fit as `--name='value' is not valid; accepted`.
struct OptionError {
  std::string value;
  std::string accepted;
};
using OptionCheck = std::optional<OptionError>;

// Per option <name> of trainer_options.inc:
//   SetTrainerOption_<name>(options, value): fit's flag value into TrainerOptions (a value that cannot be represented,
//     such as max_time's text that is no time, is refused here);
//   CheckTrainerOption_<name>(options): the option's one check of the value TrainerOptions holds.
#define KILN_TRAINER_OPTION(group, type, name, fit_default, section, key, help) \
  OptionCheck SetTrainerOption_##name(TrainerOptions& options, const type& value); \
  OptionCheck CheckTrainerOption_##name(const TrainerOptions& options);
#include "trainer/trainer_options.inc"

// One row of the table, for code that goes through every option.
struct TrainerOptionSpec {
  const char* name;
  OptionCheck (*check)(const TrainerOptions& options);
};

// Every option, in the table's order.
const std::vector<TrainerOptionSpec>& TrainerOptionSpecs();

// Every option's check, in the table's order: the first refused, as the library words it
// (InvalidArgument "name=value is not valid; accepted"), or OK.
absl::Status CheckTrainerOptions(const TrainerOptions& options);

// The fsdp options `options` asks for: TrainerOptions::fsdp, with each deprecated text field (sharding_strategy,
// auto_wrap_policy, ...) that differs from its default parsed over it; InvalidArgument as CheckTrainerOptions words it
// for text that does not parse (CheckTrainerOptions runs this too).
absl::StatusOr<FSDPOptions> EffectiveFsdpOptions(const TrainerOptions& options);

// The module type names of a comma-separated option (auto_wrap_policy, activation_checkpointing_policy), each without
// the spaces around it; empty entries dropped.
std::vector<std::string> ModuleTypeNames(absl::string_view list);

}  // namespace kiln

#endif  // KILN_TRAINER_TRAINER_OPTIONS_H_
