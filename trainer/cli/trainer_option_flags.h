// Defines, in the *_flags.cc file that includes it, the flags of the Trainer's options of one group
// (trainer/trainer_options.inc), with the row's type, name, default and help:
//
//   #define KILN_FLAG_GROUP_loop(...) __VA_ARGS__   // this file's group
//   #include "trainer/cli/trainer_option_flags.h"
//
// Abseil records the row's file, trainer/trainer_options.inc (trainer/strategies/fsdp_options.inc for the strategy
// group's), as each flag's file; help.h's IsFitFlag and --help's
// groups read the group from the table.
#ifndef KILN_FLAG_GROUP_hardware
#define KILN_FLAG_GROUP_hardware(...)
#endif
#ifndef KILN_FLAG_GROUP_strategy
#define KILN_FLAG_GROUP_strategy(...)
#endif
#ifndef KILN_FLAG_GROUP_loop
#define KILN_FLAG_GROUP_loop(...)
#endif
#ifndef KILN_FLAG_GROUP_checkpoint
#define KILN_FLAG_GROUP_checkpoint(...)
#endif
#ifndef KILN_FLAG_GROUP_output
#define KILN_FLAG_GROUP_output(...)
#endif

#define KILN_TRAINER_OPTION(group, type, name, fit_default, section, key, help) \
  KILN_FLAG_GROUP_##group(ABSL_FLAG(type, name, fit_default, help);)
#include "trainer/trainer_options.inc"
