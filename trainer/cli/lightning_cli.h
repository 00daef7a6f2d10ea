// LightningCLI's command line, as `fit` reads it: what a Lightning user types, turned into fit's own flags before
// anything else checks them, so that every value then meets the same checks and errors as fit's flags.
//
//   fit fit --trainer.max_epochs=3 --model.hidden_sizes=32,32 --data.batch_size=128
//   fit validate --ckpt_path=last          # the subcommand is --mode
//   fit --optimizer=SGD --optimizer.lr=0.1 --lr_scheduler=StepLR --lr_scheduler.step_size=2 --seed_everything=7
//
// The config file's sections give the names (config_file.h, ConfigKeys): --trainer.KEY, --model.KEY, --data.KEY,
// --lr_scheduler.KEY (init_args. may be written before a key, as LightningCLI allows); --optimizer and
// --lr_scheduler take PyTorch's class names (torch.optim.Adam or Adam); --optimizer.lr (or .init_args.lr) is
// --learning_rate; --seed_everything is --seed, and `true` or `false` draw a seed (printed). fit's own flags keep
// working, and may be mixed with these.
#ifndef KILN_TRAINER_CLI_LIGHTNING_CLI_H_
#define KILN_TRAINER_CLI_LIGHTNING_CLI_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

// `args` (argv[0] first, flag files already expanded) with LightningCLI's spellings replaced by fit's flags. Errors
// are InvalidArgument and say what to write instead: a --trainer./--model./--data./--lr_scheduler. key the config
// file does not have (with the closest one), a subcommand that disagrees with --mode, an optimizer or scheduler
// class Kiln does not have, an optimizer argument other than lr. `notes` gets what was chosen for the user (the
// seed drawn for --seed_everything=true).
absl::StatusOr<std::vector<std::string>> LightningCliArguments(const std::vector<std::string>& args,
                                                              std::vector<std::string>* notes);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_LIGHTNING_CLI_H_
