#include "trainer/cli/config_file.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainer/cli/command_line.h"
#include "trainer/data/text_encoding.h"
#include "trainer/io/durable_file.h"
#include "trainer/loggers/hparams_yaml.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/yaml.h"

namespace kiln {
namespace {

using Section = ConfigKey::Section;

// The class names a config file's trainer.callbacks may name (with or without a module path:
// lightning.pytorch.callbacks.ModelCheckpoint), and the sections their init_args fill.
constexpr std::pair<const char*, Section> kCallbackClasses[] = {
    {"ModelCheckpoint", Section::kModelCheckpoint},
    {"EarlyStopping", Section::kEarlyStopping},
};

const char* SectionName(Section section) {
  switch (section) {
    case Section::kTop:
      return "";
    case Section::kTrainer:
      return "trainer";
    case Section::kModel:
      return "model";
    case Section::kData:
      return "data";
    case Section::kLrScheduler:
      return "lr_scheduler";
    case Section::kModelCheckpoint:
      return "trainer.callbacks[ModelCheckpoint].init_args";
    case Section::kEarlyStopping:
      return "trainer.callbacks[EarlyStopping].init_args";
  }
  return "";
}

// A key as errors write it: trainer.max_epochs, seed_everything.
std::string Dotted(Section section, absl::string_view key) {
  return section == Section::kTop ? std::string(key) : absl::StrCat(SectionName(section), ".", key);
}

const ConfigKey* FindKey(Section section, absl::string_view key) {
  for (const ConfigKey& entry : ConfigKeys()) {
    if (entry.section == section && entry.key == key) return &entry;
  }
  return nullptr;
}

// Sections a mapping at the top level opens.
constexpr std::pair<const char*, Section> kTopSections[] = {
    {"trainer", Section::kTrainer},
    {"model", Section::kModel},
    {"data", Section::kData},
    {"lr_scheduler", Section::kLrScheduler},
};

// What `flag` accepts, for a value it refused.
std::string Accepted(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "write true or false";
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>()) return "write an integer";
  if (flag.IsOfType<double>()) return "write a number";
  return "see --help";
}

class Reader {
 public:
  explicit Reader(absl::string_view source) : source_(source) {}

  absl::Status Read(const YAML::Node& root) {
    if (root.IsNull()) return absl::OkStatus();  // An empty file.
    if (!root.IsMap()) {
      return Error("", "the file must be a mapping of keys (seed_everything, trainer, model, data, lr_scheduler, ckpt_path, ...)");
    }
    for (const auto& item : root) {
      absl::StatusOr<std::string> key = KeyOf(item.first, "");
      if (!key.ok()) return key.status();
      if (absl::Status seen = Claim(*key); !seen.ok()) return seen;
      const auto section = std::find_if(std::begin(kTopSections), std::end(kTopSections),
                                        [&](const auto& s) { return *key == s.first; });
      if (section != std::end(kTopSections)) {
        if (absl::Status read = ReadSection(section->second, item.second); !read.ok()) return read;
        continue;
      }
      if (absl::Status read = ReadKey(Section::kTop, *key, item.second); !read.ok()) return read;
    }
    if (!unknown_.empty()) return Error("", absl::StrJoin(unknown_, "; also "));
    // Lightning's max_epochs=None: 1000 epochs, or no epoch limit when max_steps bounds the run.
    if (max_epochs_null_) args_.push_back(max_steps_set_ ? "--max_epochs=-1" : "--max_epochs=1000");
    return absl::OkStatus();
  }

  std::vector<std::string> args() && { return std::move(args_); }

 private:
  absl::Status Error(absl::string_view key, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("--config=", source_, ": ", key.empty() ? "" : absl::StrCat(key, ": "), message));
  }

  absl::StatusOr<std::string> KeyOf(const YAML::Node& node, absl::string_view where) const {
    if (!node.IsScalar()) return Error(where, "a key must be a name, not a list or a mapping");
    return node.Scalar();
  }

  // A key may appear once: YAML leaves a repeated key to the reader, and silently taking one would hide a mistake.
  absl::Status Claim(const std::string& dotted) {
    if (!seen_.insert(dotted).second) return Error(dotted, "given twice; keep one");
    return absl::OkStatus();
  }

  absl::Status ReadSection(Section section, const YAML::Node& node) {
    if (node.IsNull()) return absl::OkStatus();
    if (!node.IsMap()) {
      return Error(SectionName(section), absl::StrCat("must be a mapping of ", SectionName(section), " keys"));
    }
    for (const auto& item : node) {
      absl::StatusOr<std::string> key = KeyOf(item.first, SectionName(section));
      if (!key.ok()) return key.status();
      if (absl::Status seen = Claim(Dotted(section, *key)); !seen.ok()) return seen;
      if (section == Section::kTrainer && *key == "callbacks") {
        if (absl::Status read = ReadCallbacks(item.second); !read.ok()) return read;
        continue;
      }
      if (absl::Status read = ReadKey(section, *key, item.second); !read.ok()) return read;
    }
    return absl::OkStatus();
  }

  // trainer.callbacks, as LightningCLI writes it: a list of {class_path, init_args}.
  absl::Status ReadCallbacks(const YAML::Node& node) {
    if (node.IsNull()) return absl::OkStatus();
    if (!node.IsSequence()) {
      return Error("trainer.callbacks", "must be a list of {class_path: ModelCheckpoint, init_args: {...}}");
    }
    std::set<Section> classes;
    for (const YAML::Node& callback : node) {
      if (!callback.IsMap() || !callback["class_path"] || !callback["class_path"].IsScalar()) {
        return Error("trainer.callbacks",
                     "each entry is {class_path: <ModelCheckpoint or EarlyStopping>, init_args: "
                     "{...}}");
      }
      for (const auto& item : callback) {
        const std::string key = item.first.IsScalar() ? item.first.Scalar() : "";
        if (key != "class_path" && key != "init_args") {
          return Error("trainer.callbacks",
                       absl::StrCat("unknown key '", key, "' in an entry; an entry has class_path and init_args"));
        }
      }
      const std::string class_path = callback["class_path"].Scalar();
      const std::vector<std::string> parts = absl::StrSplit(class_path, '.');
      const auto known = std::find_if(std::begin(kCallbackClasses), std::end(kCallbackClasses),
                                      [&](const auto& c) { return parts.back() == c.first; });
      if (known == std::end(kCallbackClasses)) {
        return Error("trainer.callbacks", absl::StrCat("class_path '", class_path,
                                                       "' is not a callback fit can make; it makes ModelCheckpoint "
                                                       "and EarlyStopping"));
      }
      const Section section = known->second;
      if (!classes.insert(section).second) {
        return Error("trainer.callbacks", absl::StrCat(known->first, " is listed twice; fit makes one"));
      }
      const YAML::Node init_args = callback["init_args"];
      if (init_args && !init_args.IsNull() && !init_args.IsMap()) {
        return Error(SectionName(section), "must be a mapping of the callback's arguments");
      }
      bool has_monitor = false;
      if (init_args && init_args.IsMap()) {
        for (const auto& item : init_args) {
          absl::StatusOr<std::string> key = KeyOf(item.first, SectionName(section));
          if (!key.ok()) return key.status();
          if (absl::Status seen = Claim(Dotted(section, *key)); !seen.ok()) return seen;
          if (absl::Status read = ReadKey(section, *key, item.second); !read.ok()) return read;
          has_monitor = has_monitor || (*key == "monitor" && !item.second.IsNull());
        }
      }
      // Lightning's EarlyStopping cannot be made without the metric it watches.
      if (section == Section::kEarlyStopping && !has_monitor) {
        return Error(SectionName(section),
                     "EarlyStopping needs monitor, the metric it watches (e.g. monitor: val_loss)");
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReadKey(Section section, const std::string& key, const YAML::Node& node) {
    const ConfigKey* entry = FindKey(section, key);
    if (entry == nullptr) {  // Every unknown key is reported, in one error (Read), so that one run shows them all.
      unknown_.push_back(UnknownKey(section, key));
      return absl::OkStatus();
    }
    const std::string dotted = Dotted(section, key);
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(entry->flag);
    if (flag == nullptr) return absl::InternalError(absl::StrCat("config key ", dotted, " names no flag"));
    std::string value;
    if (node.IsNull()) {
      if (std::string(entry->flag) == "max_epochs") {
        max_epochs_null_ = true;
        return absl::OkStatus();
      }
      value = flag->DefaultValue();  // null is the default, as in LightningCLI.
    } else if (node.IsScalar()) {
      value = node.Scalar();
      // Lightning's logger: false is no logger, true the default ones.
      if (std::string(entry->flag) == "logger" && node.Tag() != "!") {
        if (value == "false") value = "none";
        if (value == "true") value = flag->DefaultValue();
      }
    } else if (node.IsSequence() && entry->list) {
      std::vector<std::string> items;
      for (const YAML::Node& item : node) {
        if (!item.IsScalar()) return Error(dotted, "a list of single values is expected, not of lists or mappings");
        items.push_back(item.Scalar());
      }
      value = absl::StrJoin(items, ",");
    } else {
      return Error(dotted, absl::StrCat("expected one value, not a ", node.IsSequence() ? "list" : "mapping",
                                        entry->list ? " of lists" : ""));
    }
    // The flag's own parser decides; the flag keeps its value, so that reading a file changes nothing.
    const std::string saved = flag->CurrentValue();
    std::string error;
    const bool parsed = flag->ParseFrom(value, &error);
    flag->ParseFrom(saved, &error);
    if (!parsed) return Error(dotted, absl::StrCat("'", value, "' is not valid; ", Accepted(*flag)));
    args_.push_back(absl::StrCat("--", entry->flag, "=", value));
    if (std::string(entry->flag) == "max_steps") max_steps_set_ = true;
    return absl::OkStatus();
  }

  // What to write instead of `key` in `section`: "unknown key trainer.max_epoch; did you mean trainer.max_epochs?".
  std::string UnknownKey(Section section, const std::string& key) const {
    const std::string dotted = Dotted(section, key);
    // The right key in the wrong section: say where it belongs.
    std::vector<std::string> homes;
    for (const ConfigKey& entry : ConfigKeys()) {
      if (entry.key == key && entry.section != section) homes.push_back(Dotted(entry.section, key));
    }
    if (!homes.empty()) {
      return std::string(absl::StrCat("unknown key ", dotted, "; ", key, " is written ", absl::StrJoin(homes, " or ")));
    }
    std::vector<std::string> candidates;
    for (const ConfigKey& entry : ConfigKeys()) {
      if (entry.section == section) candidates.emplace_back(entry.key);
    }
    if (section == Section::kTop) {
      for (const auto& [name, unused] : kTopSections) candidates.emplace_back(name);
    }
    if (section == Section::kTrainer) candidates.emplace_back("callbacks");
    std::string closest = ClosestName(key, candidates);
    // A flag's name where the config file has Lightning's (checkpoint_monitor for ModelCheckpoint's monitor).
    if (closest.empty()) {
      for (const ConfigKey& entry : ConfigKeys()) {
        if (entry.flag == key) closest = Dotted(entry.section, entry.key);
      }
      if (!closest.empty()) {
        return std::string(absl::StrCat("unknown key ", dotted, "; the flag --", key, " is written ", closest,
                                      " in a config file"));
      }
    } else {
      closest = Dotted(section, closest);
    }
    return std::string(absl::StrCat("unknown key ", dotted,
                                  closest.empty() ? "; fit --print_config shows every key"
                                                  : absl::StrCat("; did you mean ", closest, "?")));
  }

  const std::string source_;
  std::vector<std::string> args_;
  std::set<std::string> seen_;
  std::vector<std::string> unknown_;  // What to do about each key fit does not have.
  bool max_epochs_null_ = false;      // trainer.max_epochs: null, Lightning's default (see Read).
  bool max_steps_set_ = false;
};

// Writes one flag's current value under its key.
void WriteValue(YAML::Emitter& out, const ConfigKey& entry) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(entry.flag);
  out << YAML::Key << entry.key << YAML::Value;
  if (flag == nullptr) {
    out << YAML::Null;
    return;
  }
  const std::string value = flag->CurrentValue();
  if (flag->IsOfType<bool>()) {
    out << (value == "true");
  } else if (!flag->IsOfType<std::string>()) {
    out << value;  // A number, written as the flag writes it.
  } else if (value.empty() && flag->DefaultValue().empty()) {
    out << YAML::Null;  // The default, which null means when read.
  } else if (value.empty() && entry.list) {
    out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;  // --hidden_sizes= (a linear model): not the default.
  } else if (value.empty()) {
    out << YAML::DoubleQuoted << "";
  } else if (std::string(entry.flag) == "logger" && value == "none") {
    out << false;
  } else if (entry.list) {
    out << YAML::Flow << YAML::BeginSeq;
    for (absl::string_view item : absl::StrSplit(value, ',')) WriteYamlScalar(out, std::string(item));
    out << YAML::EndSeq;
  } else {
    WriteYamlScalar(out, value);
  }
}

void WriteSection(YAML::Emitter& out, Section section) {
  for (const ConfigKey& entry : ConfigKeys()) {
    if (entry.section == section) WriteValue(out, entry);
  }
}

void WriteCallback(YAML::Emitter& out, const char* class_path, Section section) {
  out << YAML::BeginMap << YAML::Key << "class_path" << YAML::Value << class_path;
  out << YAML::Key << "init_args" << YAML::Value << YAML::BeginMap;
  WriteSection(out, section);
  out << YAML::EndMap << YAML::EndMap;
}

}  // namespace

const std::vector<ConfigKey>& ConfigKeys() {
  // The keys are Lightning's names: Trainer's arguments, ModelCheckpoint's and EarlyStopping's init_args and
  // LightningCLI's seed_everything and ckpt_path. Model and data keys are fit's own flags. lr_scheduler holds the
  // keys of Lightning's lr_scheduler config (scheduler, interval, frequency, monitor) and each schedule's settings
  // under fit's flag names, which are PyTorch's (plateau's prefixed, as they share a section).
  static const std::vector<ConfigKey>* keys = new std::vector<ConfigKey>{
      // The Trainer's options, as trainer/trainer_options.inc places them.
#define KILN_TRAINER_OPTION(group, type, name, fit_default, section, key, help) {#name, Section::section, key},
#include "trainer/trainer_options.inc"
      {"logger", Section::kTrainer, "logger", /*list=*/true},
      {"log_name", Section::kTrainer, "log_name"},
      {"log_version", Section::kTrainer, "log_version"},
      {"checkpoint_monitor", Section::kModelCheckpoint, "monitor"},
      {"checkpoint_mode", Section::kModelCheckpoint, "mode"},
      {"save_top_k", Section::kModelCheckpoint, "save_top_k"},
      {"checkpoint_filename", Section::kModelCheckpoint, "filename"},
      {"every_n_epochs", Section::kModelCheckpoint, "every_n_epochs"},
      {"every_n_train_steps", Section::kModelCheckpoint, "every_n_train_steps"},
      {"save_last", Section::kModelCheckpoint, "save_last"},
      {"early_stopping_monitor", Section::kEarlyStopping, "monitor"},
      {"early_stopping_mode", Section::kEarlyStopping, "mode"},
      {"patience", Section::kEarlyStopping, "patience"},
      {"min_delta", Section::kEarlyStopping, "min_delta"},
      {"model", Section::kModel, "model"},
      {"hidden_sizes", Section::kModel, "hidden_sizes", /*list=*/true},
      {"channels", Section::kModel, "channels", /*list=*/true},
      {"kernel_size", Section::kModel, "kernel_size"},
      {"input_shape", Section::kModel, "input_shape", /*list=*/true},
      {"optimizer", Section::kModel, "optimizer"},
      {"learning_rate", Section::kModel, "learning_rate"},
      {"fused_optimizer", Section::kModel, "fused_optimizer"},
      {"data", Section::kData, "data"},
      {"task", Section::kData, "task"},
      {"label_column", Section::kData, "label_column"},
      {"val_fraction", Section::kData, "val_fraction"},
      {"batch_size", Section::kData, "batch_size"},
      {"shuffle", Section::kData, "shuffle"},
      {"normalize", Section::kData, "normalize"},
      {"num_workers", Section::kData, "num_workers"},
      {"max_inflated_mib", Section::kData, "max_inflated_mib"},
      {"digits_path", Section::kData, "digits_path"},
      {"num_features", Section::kData, "num_features"},
      {"num_classes", Section::kData, "num_classes"},
      {"num_train", Section::kData, "num_train"},
      {"num_val", Section::kData, "num_val"},
      {"lr_scheduler", Section::kLrScheduler, "scheduler"},
      {"lr_scheduler_interval", Section::kLrScheduler, "interval"},
      {"lr_scheduler_frequency", Section::kLrScheduler, "frequency"},
      {"lr_scheduler_monitor", Section::kLrScheduler, "monitor"},
      {"warmup_iters", Section::kLrScheduler, "warmup_iters"},
      {"warmup_start_factor", Section::kLrScheduler, "warmup_start_factor"},
      {"step_size", Section::kLrScheduler, "step_size"},
      {"gamma", Section::kLrScheduler, "gamma"},
      {"T_max", Section::kLrScheduler, "T_max"},
      {"eta_min", Section::kLrScheduler, "eta_min"},
      {"max_lr", Section::kLrScheduler, "max_lr"},
      {"total_steps", Section::kLrScheduler, "total_steps"},
      {"pct_start", Section::kLrScheduler, "pct_start"},
      {"anneal_strategy", Section::kLrScheduler, "anneal_strategy"},
      {"div_factor", Section::kLrScheduler, "div_factor"},
      {"final_div_factor", Section::kLrScheduler, "final_div_factor"},
      {"three_phase", Section::kLrScheduler, "three_phase"},
      {"plateau_mode", Section::kLrScheduler, "plateau_mode"},
      {"plateau_factor", Section::kLrScheduler, "plateau_factor"},
      {"plateau_patience", Section::kLrScheduler, "plateau_patience"},
      {"plateau_threshold", Section::kLrScheduler, "plateau_threshold"},
      {"plateau_threshold_mode", Section::kLrScheduler, "plateau_threshold_mode"},
      {"plateau_cooldown", Section::kLrScheduler, "plateau_cooldown"},
      {"min_lr", Section::kLrScheduler, "min_lr"},
      {"ckpt_path", Section::kTop, "ckpt_path"},
      {"mode", Section::kTop, "mode"},
      {"predict_data", Section::kTop, "predict_data"},
      {"predictions", Section::kTop, "predictions"},
      {"report", Section::kTop, "report"},
      {"summary_json", Section::kTop, "summary_json"},
      {"verbose", Section::kTop, "verbose"},
  };
  return *keys;
}

// --accelerator_plugin repeats, and plugins load before the flags are parsed; a flag's value holds only the last
// one, so a config file could not hold them all. KILN_ACCELERATOR_PLUGINS keeps plugins across runs instead.
bool IsCommandLineOnlyFlag(absl::string_view flag) {
  return flag == "config" || flag == "print_config" || flag == "accelerator_plugin";
}

absl::StatusOr<std::vector<std::string>> ConfigFileArguments(absl::string_view text, absl::string_view source) {
  // YAML is Unicode: text in another encoding could not be written back to config.yaml as it was read.
  absl::StatusOr<absl::string_view> utf8 = Utf8Text(text, source);
  if (!utf8.ok()) return absl::InvalidArgumentError(absl::StrCat("--config=", utf8.status().message()));
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(*utf8));
  } catch (const YAML::DeepRecursion& error) {
    // yaml-cpp parses recursively and stops itself, with a message that says only "bad file".
    return absl::InvalidArgumentError(absl::StrCat("--config=", source, ": line ", error.mark.line + 1,
                                                   ": it nests deeper than the ", kMaxYamlDepth,
                                                   " levels YAML may nest here; a config file nests a few"));
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config=", source, ": line ", error.mark.line + 1, ": not valid YAML (", error.msg, ")"));
  }
  if (documents.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config=", source, " holds ", documents.size(), " YAML documents; a config file holds one"));
  }
  Reader reader(source);
  if (!documents.empty()) {
    if (absl::Status read = reader.Read(documents[0]); !read.ok()) return read;
  }
  return std::move(reader).args();
}

absl::StatusOr<std::vector<std::string>> ConfigFileNames(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    absl::string_view arg = args[i];
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    if (arg == "config") {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError("--config needs a value; write --config=<file>");
      if (!args[i + 1].empty()) files.push_back(args[i + 1]);
      ++i;
    } else if (absl::ConsumePrefix(&arg, "config=")) {
      if (!arg.empty()) files.emplace_back(arg);  // --config= : none.
    }
  }
  return files;
}

absl::StatusOr<std::vector<std::string>> ApplyConfigFiles(const std::vector<std::string>& args,
                                                          std::string (*resolve_path)(const std::string&)) {
  absl::StatusOr<std::vector<std::string>> files = ConfigFileNames(args);
  if (!files.ok()) return files.status();
  std::vector<std::string> out;
  if (args.empty()) return out;
  out.push_back(args[0]);
  for (const std::string& file : *files) {
    absl::StatusOr<std::string> text = ReadArgumentFile("config", file, resolve_path(file), "config file",
                                                        "a YAML file in LightningCLI's layout (see --print_config)");
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<std::string>> flags = ConfigFileArguments(*text, file);
    if (!flags.ok()) return flags.status();
    out.insert(out.end(), flags->begin(), flags->end());
  }
  out.insert(out.end(), args.begin() + 1, args.end());
  return out;
}

std::string ConfigYaml() {
  YAML::Emitter out;
  out.SetNullFormat(YAML::LowerNull);
  out << YAML::BeginMap;
  const std::vector<ConfigKey>& keys = ConfigKeys();
  const auto is_seed = [](const ConfigKey& key) { return absl::string_view(key.flag) == "seed"; };
  for (const ConfigKey& key : keys) {
    if (is_seed(key)) WriteValue(out, key);  // seed_everything first, as LightningCLI writes it.
  }
  out << YAML::Key << "trainer" << YAML::Value << YAML::BeginMap;
  WriteSection(out, Section::kTrainer);
  out << YAML::Key << "callbacks" << YAML::Value << YAML::BeginSeq;
  WriteCallback(out, "ModelCheckpoint", Section::kModelCheckpoint);
  absl::CommandLineFlag* early_stopping = absl::FindCommandLineFlag("early_stopping_monitor");
  if (early_stopping != nullptr && !early_stopping->CurrentValue().empty()) {
    WriteCallback(out, "EarlyStopping", Section::kEarlyStopping);
  }
  out << YAML::EndSeq << YAML::EndMap;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  WriteSection(out, Section::kModel);
  out << YAML::EndMap;
  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  WriteSection(out, Section::kData);
  out << YAML::EndMap;
  out << YAML::Key << "lr_scheduler" << YAML::Value << YAML::BeginMap;
  WriteSection(out, Section::kLrScheduler);
  out << YAML::EndMap;
  for (const ConfigKey& key : keys) {
    if (key.section == Section::kTop && !is_seed(key)) WriteValue(out, key);
  }
  out << YAML::EndMap;
  return absl::StrCat(
      "# fit's configuration, in LightningCLI's layout. `fit --config=<this file>` runs it again; flags given with\n"
      "# it override it.\n",
      out.c_str(), "\n");
}

absl::Status WriteConfigYaml(const std::string& path) { return WriteFileDurably(path, ConfigYaml()); }

}  // namespace kiln
