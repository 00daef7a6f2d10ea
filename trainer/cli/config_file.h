// Config files for `//trainer:fit`, in LightningCLI's layout: `fit --config=run.yaml` reads one, `--print_config`
// prints the resolved one, and every run saves its own as <run folder>/config.yaml, so that
// `--config=<run folder>/config.yaml` runs it again.
//
//   seed_everything: 42                # --seed; true draws one
//   trainer:                           # Lightning's Trainer arguments: --accelerator, --max_epochs, ...
//     max_epochs: 10
//     logger:                          # --logger, --log_name, --log_version; or false, or [csv, tensorboard]
//     - class_path: lightning.pytorch.loggers.CSVLogger
//       init_args: {save_dir: ., name: lightning_logs, version: null}
//     callbacks:                       # --checkpoint_monitor, --early_stopping_monitor, --swa_lrs, ...
//     - class_path: lightning.pytorch.callbacks.ModelCheckpoint
//       init_args: {monitor: val_loss, save_top_k: 2}
//   model: {model: mlp, hidden_sizes: [64, 64]}
//   data: {data: synthetic, batch_size: 64}
//   optimizer:                         # --optimizer, --learning_rate, --momentum, --weight_decay
//     class_path: torch.optim.SGD
//     init_args: {lr: 0.1, momentum: 0.9}
//   lr_scheduler:                      # --lr_scheduler and its settings; or fit's own {scheduler: cosine, ...}
//     class_path: torch.optim.lr_scheduler.StepLR
//     init_args: {step_size: 10, gamma: 0.1}
//     interval: step                   # fit's own, beside LightningCLI's: interval, frequency, warmup_iters
//   ckpt_path: null                    # and Kiln's own: mode, predict_data, predictions, report, summary_json, ...
//
// A config LightningCLI wrote runs as written: the classes and init arguments are lightning_classes.h's, and the
// Trainer's and LightningCLI's keys fit has no flag for are accepted at Lightning's default (what --print_config
// writes) and refused, with the fix, otherwise. Every key is one of fit's flags or one of those (ConfigKeys() is the
// table; a test checks it covers every flag), so a config file sets nothing a command line could not, and its values
// meet the same checks. `null` is Lightning's default: the flag's, and where fit's differs Lightning's
// (trainer.max_epochs: 1000 epochs, or no epoch limit when the file sets max_steps; ModelCheckpoint's save_last: no
// last.ckpt). An optimizer or scheduler argument left out is PyTorch's default (SGD's momentum 0). Flags on the
// command line override every config file, wherever they stand; later config files override earlier ones. Every
// key fit does not have is reported, in one error.
#ifndef KILN_TRAINER_CLI_CONFIG_FILE_H_
#define KILN_TRAINER_CLI_CONFIG_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

// Where one of fit's flags sits in a config file.
struct ConfigKey {
  enum class Section {
    kTop,
    kTrainer,
    kModel,
    kData,
    kLrScheduler,
    kModelCheckpoint,
    kEarlyStopping,
    kStochasticWeightAveraging,
    kEMAWeightAveraging,
    kOptimizer
  };
  const char* flag;  // fit's flag, without "--".
  Section section;
  const char* key;    // The key in its section: Lightning's argument name where Lightning has one.
  bool list = false;  // A comma-separated flag, written as a YAML list.
  // Written by ConfigYaml under this key; false: read there, written elsewhere (a logger's or callback's init_args).
  bool written = true;
};

// The deepest a config file may nest (mappings or lists in lists), as Debian's yaml-cpp 0.7 parses it: its parser
// recurses, and stops at this depth (measured); deeper is an error naming the line. A config file's size is bounded
// too (kMaxFlagFileBytes, command_line.h: 1 MiB).
inline constexpr int kMaxYamlDepth = 499;

// What a config file's aliases may expand it to, for the whole document: at most this many nodes (scalars, lists and
// mappings, each alias counted as the nodes it stands for) and this many bytes of scalars, and nested at most
// kMaxYamlDepth deep once expanded. A YAML alias is a reference: a file of 600 bytes whose anchors each repeat the
// one before ten times stands for 10^9 nodes, which reading its values would write out. Checked from the parser's
// events before any node is built; past a limit, an error names the file, the line where the document passes it
// and the limit. Without aliases a config file is within them (it is at most kMaxFlagFileBytes; a config holds a
// few hundred nodes).
inline constexpr int64_t kMaxYamlNodes = 100000;
inline constexpr int64_t kMaxYamlScalarBytes = int64_t{1} << 20;

// Every flag a config file can set, in the order --print_config writes them.
const std::vector<ConfigKey>& ConfigKeys();

// Flags that a config file cannot hold: --config itself, --print_config and --accelerator_plugin (it repeats, and
// plugins load before flags are parsed; KILN_ACCELERATOR_PLUGINS names plugins for every run).
bool IsCommandLineOnlyFlag(absl::string_view flag);

// The flags a config file's text holds, as "--name=value" arguments. `source` names the file in errors. Errors are
// InvalidArgument and name the file, the key and what is wrong: YAML that does not parse (with its line), a key
// that is not one of ConfigKeys() (with the closest known one, or the section it belongs to), a key given twice, a
// list or mapping where one value belongs, a value the flag refuses, an unknown callback class. Unknown keys are all
// named in one error, each with what to write instead.
absl::StatusOr<std::vector<std::string>> ConfigFileArguments(absl::string_view text, absl::string_view source);

// The files the command line's --config arguments name, in order (an empty --config= names none).
absl::StatusOr<std::vector<std::string>> ConfigFileNames(const std::vector<std::string>& args);

// The command line (argv[0] first, flag files already expanded) with the flags of every --config=F it names put
// before its own flags, so that the command line overrides them; later files override earlier ones. The --config
// arguments stay where they are. `resolve_path` turns a file's name into the path to open (fit: UserPath). Errors
// as ConfigFileArguments's, and for a file that is missing, not a regular file or larger than kMaxFlagFileBytes.
absl::StatusOr<std::vector<std::string>> ApplyConfigFiles(const std::vector<std::string>& args,
                                                          std::string (*resolve_path)(const std::string&));

// The current values of fit's flags as a config file (what --print_config prints and each run saves): every key of
// ConfigKeys(), EarlyStopping only when --early_stopping_monitor is set, StochasticWeightAveraging only with --swa_lrs,
// EMAWeightAveraging only with --ema_weight_averaging. ConfigFileArguments reads it back to the
// same flag values.
std::string ConfigYaml();

// Writes ConfigYaml() to `path` through a temporary file and a rename.
absl::Status WriteConfigYaml(const std::string& path);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_CONFIG_FILE_H_
