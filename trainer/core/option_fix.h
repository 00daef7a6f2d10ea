// How an error names its fix: in the terms of the program that gets it. A program that uses Kiln as a library sets
// options in C++ (`.strategy = "ddp_find_unused_parameters_true"`), fit's user on its command line
// (`--strategy=ddp_find_unused_parameters_true`); an error that tells a library user to pass a flag names something
// they cannot type. Library terms are the default; fit's main selects its flags, once, before anything runs.
//
// Thread-safety: UseFlagSpelling is called once, before any other thread starts; OptionFix may be called from any
// thread.
#ifndef KILN_TRAINER_CORE_OPTION_FIX_H_
#define KILN_TRAINER_CORE_OPTION_FIX_H_

#include <string>

#include "absl/strings/string_view.h"

namespace kiln {

// Makes OptionFix name fit's flags from now on (//trainer:fit calls it).
void UseFlagSpelling();

// `library` in a library program, `flag` in fit: the same fix, as each program's user writes it.
std::string OptionFix(absl::string_view library, absl::string_view flag);

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_OPTION_FIX_H_
