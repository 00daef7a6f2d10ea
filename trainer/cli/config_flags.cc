// Config-file flags: LightningCLI's --config and --print_config (config_file.h reads and writes the file).
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, config, "",
          "A YAML file of settings in LightningCLI's layout (seed_everything, trainer:, model:, data:, ckpt_path); "
          "flags on the command line override it. May be given more than once (later files override earlier "
          "ones). Each run saves its own as <run folder>/config.yaml: --config=<run folder>/config.yaml repeats it.");
ABSL_FLAG(bool, print_config, false,
          "Print the resolved configuration (the --config files, then the command line) as a config file, and exit "
          "without running.");
