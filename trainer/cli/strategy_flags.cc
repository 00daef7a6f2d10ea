// The strategy's own options (fsdp's: trainer/strategies/fsdp_options.inc), whose flags the strategy rows of the
// Trainer's option table define.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/hardware_flags.h"

#define KILN_FLAG_GROUP_strategy(...) __VA_ARGS__
#include "trainer/cli/trainer_option_flags.h"
