// The hardware flags of `//trainer:fit` (the hardware rows of trainer/trainer_options.inc) and the strategy's own
// (its strategy rows: fsdp's options), for programs that take them without the rest of fit's flags: //tools:resolve.
#ifndef KILN_TRAINER_CLI_HARDWARE_FLAGS_H_
#define KILN_TRAINER_CLI_HARDWARE_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

#define KILN_HARDWARE_ROW_hardware(...) __VA_ARGS__
#define KILN_HARDWARE_ROW_strategy(...) __VA_ARGS__
#define KILN_HARDWARE_ROW_loop(...)
#define KILN_HARDWARE_ROW_checkpoint(...)
#define KILN_HARDWARE_ROW_output(...)
#define KILN_TRAINER_OPTION(group, type, name, fit_default, section, key, help) \
  KILN_HARDWARE_ROW_##group(ABSL_DECLARE_FLAG(type, name);)
#include "trainer/trainer_options.inc"
#undef KILN_HARDWARE_ROW_hardware
#undef KILN_HARDWARE_ROW_strategy
#undef KILN_HARDWARE_ROW_loop
#undef KILN_HARDWARE_ROW_checkpoint
#undef KILN_HARDWARE_ROW_output

#endif  // KILN_TRAINER_CLI_HARDWARE_FLAGS_H_
