#include "trainer/cli/saved_run.h"

#include <charconv>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/cli/config_file.h"

namespace kiln {
namespace {

// A hyper-parameter fit saves (trainer/cli/model_factory.cc, fit_main.cc) is restored when it is one of the model's,
// the optimizer's or the data's flags (a config file's model, optimizer and data sections: one table, ConfigKeys),
// or the seed: what the model and its data were. The hardware, loop and output flags stay this run's own. The
// synthetic task's sizes are restored only for it (its classes are the model's outputs).
bool Restored(const std::string& name, bool synthetic) {
  if (name == "seed") return true;
  if (name == "num_features" || name == "num_classes" || name == "num_train" || name == "num_val") return synthetic;
  for (const ConfigKey& entry : ConfigKeys()) {
    if (entry.flag == name) {
      return entry.section == ConfigKey::Section::kModel || entry.section == ConfigKey::Section::kData ||
             entry.section == ConfigKey::Section::kOptimizer;
    }
  }
  return false;
}

bool Given(const std::vector<std::string>& args, const std::string& name) {
  for (const std::string& arg : args) {
    for (const std::string dashes : {"--", "-"}) {
      if (arg == dashes + name || arg == dashes + "no" + name || absl::StartsWith(arg, dashes + name + "=")) {
        return true;
      }
    }
  }
  return false;
}

// A hyper-parameter's value as the flag's text.
bool Text(const c10::IValue& value, std::string* text) {
  if (value.isString()) {
    *text = value.toStringRef();
  } else if (value.isInt()) {
    *text = absl::StrCat(value.toInt());
  } else if (value.isBool()) {
    *text = value.toBool() ? "true" : "false";
  } else if (value.isDouble()) {
    char buffer[32];
    const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value.toDouble());
    *text = std::string(buffer, result.ptr);
  } else {
    return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<SavedRun> ApplySavedRun(const std::string& ckpt_path, const std::string& default_root_dir,
                                       const std::vector<std::string>& args) {
  SavedRun run;
  if (ckpt_path == "last") {
    absl::StatusOr<std::string> last = FindLastCheckpoint(default_root_dir);
    if (!last.ok()) return last.status();
    run.path = *last;
  } else {
    run.path = ckpt_path;
  }
  absl::StatusOr<Checkpoint> checkpoint = ReadCheckpoint(run.path);
  if (!checkpoint.ok()) return checkpoint.status();
  if (checkpoint->format_version == 1) return run;  // Format 1 kept text hyper-parameters only for loggers.
  const c10::impl::GenericDict& contents = checkpoint->contents;
  auto data = contents.find(c10::IValue(std::string("TabularData")));
  if (data != contents.end()) run.data_state = data->value();
  auto hparams = contents.find(c10::IValue(std::string("hyper_parameters")));
  if (hparams == contents.end() || !hparams->value().isGenericDict()) return run;
  const c10::impl::GenericDict saved = hparams->value().toGenericDict();
  // The synthetic task is made from its sizes; its classes are the model's outputs.
  auto data_name = saved.find(c10::IValue(std::string("data")));
  const bool synthetic = data_name != saved.end() && data_name->value().isString() &&
                         data_name->value().toStringRef() == "synthetic" && !Given(args, "data");
  for (const auto& entry : saved) {
    if (!entry.key().isString()) continue;
    const std::string name = entry.key().toStringRef();
    std::string text;
    if (!Restored(name, synthetic) || Given(args, name) || !Text(entry.value(), &text)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    std::string error;
    if (!flag->ParseFrom(text, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", run.path, " has the hyper-parameter ", name, "=",
                                                     text, ", which --", name, " refuses: ", error, "; pass --", name,
                                                     " yourself"));
    }
    run.taken.push_back(absl::StrCat("--", name, "=", text));
  }
  auto outputs = saved.find(c10::IValue(std::string("num_outputs")));
  if (synthetic && outputs != saved.end() && outputs->value().isInt() && !Given(args, "num_classes")) {
    std::string error;
    const std::string text = absl::StrCat(outputs->value().toInt());
    if (absl::CommandLineFlag* flag = absl::FindCommandLineFlag("num_classes");
        flag != nullptr && flag->ParseFrom(text, &error)) {
      run.taken.push_back("--num_classes=" + text);
    }
  }
  return run;
}

}  // namespace kiln
