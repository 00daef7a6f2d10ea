// Where to run: the hardware flags, named and resolved as Lightning's Trainer arguments are (see connector/).
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/hardware_flags.h"

// The Trainer's options of this group, from trainer/trainer_options.inc.
#define KILN_FLAG_GROUP_hardware(...) __VA_ARGS__
#include "trainer/cli/trainer_option_flags.h"

