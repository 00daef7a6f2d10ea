// The training loop: Lightning's loop arguments.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

// The Trainer's options of this group, from trainer/trainer_options.inc.
#define KILN_FLAG_GROUP_loop(...) __VA_ARGS__
#include "trainer/cli/trainer_option_flags.h"

