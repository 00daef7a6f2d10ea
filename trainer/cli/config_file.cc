#include "trainer/cli/config_file.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainer/cli/command_line.h"
#include "trainer/cli/lightning_classes.h"
#include "trainer/data/text_encoding.h"
#include "trainer/io/durable_file.h"
#include "trainer/loggers/hparams_yaml.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/parser.h"
#include "yaml-cpp/yaml.h"

namespace kiln {
namespace {

using Section = ConfigKey::Section;

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
    case Section::kStochasticWeightAveraging:
      return "trainer.callbacks[StochasticWeightAveraging].init_args";
    case Section::kEMAWeightAveraging:
      return "trainer.callbacks[EMAWeightAveraging].init_args";
    case Section::kOptimizer:
      return "optimizer.init_args";
  }
  return "";
}

// A key as errors write it: trainer.max_epochs, seed_everything.
std::string Dotted(Section section, absl::string_view key) {
  return section == Section::kTop ? std::string(key) : absl::StrCat(SectionName(section), ".", key);
}

// Where earlier config files had a key that now sits elsewhere: still read there.
const ConfigKey kMovedKeys[] = {
    {"optimizer", Section::kModel, "optimizer"},
    {"learning_rate", Section::kModel, "learning_rate"},
};

const ConfigKey* FindKey(Section section, absl::string_view key) {
  for (const ConfigKey& entry : ConfigKeys()) {
    if (entry.section == section && entry.key == key) return &entry;
  }
  for (const ConfigKey& entry : kMovedKeys) {
    if (entry.section == section && entry.key == key) return &entry;
  }
  return nullptr;
}

// Whether fit's flag `flag` is a comma-separated list (written as a YAML list; a class argument such as
// StochasticWeightAveraging's swa_lrs takes one value or a list).
bool IsListFlag(absl::string_view flag) {
  for (const ConfigKey& entry : ConfigKeys()) {
    if (entry.flag == flag) return entry.list;
  }
  return false;
}

// A node as LightningCLI's defaults are written (lightning_classes.h): a scalar's text, "null", or "[a, b]".
std::string NodeText(const YAML::Node& node) {
  if (!node || node.IsNull()) return "null";
  if (node.IsScalar()) return node.Tag() == "!" || node.Scalar().empty() ? absl::StrCat("'", node.Scalar(), "'")
                                                                         : node.Scalar();
  if (node.IsSequence()) {
    std::vector<std::string> items;
    for (const YAML::Node& item : node) items.push_back(NodeText(item));
    return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
  }
  std::vector<std::string> items;
  for (const auto& item : node) items.push_back(absl::StrCat(NodeText(item.first), ": ", NodeText(item.second)));
  return absl::StrCat("{", absl::StrJoin(items, ", "), "}");
}

// The section a callback's init_args fill when fit's config table has it (ModelCheckpoint's, EarlyStopping's, the
// weight-averaging callbacks').
std::optional<Section> CallbackSection(const LightningClass& callback) {
  if (absl::string_view(callback.name) == "ModelCheckpoint") return Section::kModelCheckpoint;
  if (absl::string_view(callback.name) == "EarlyStopping") return Section::kEarlyStopping;
  if (absl::string_view(callback.name) == "StochasticWeightAveraging") return Section::kStochasticWeightAveraging;
  if (absl::string_view(callback.name) == "EMAWeightAveraging") return Section::kEMAWeightAveraging;
  return std::nullopt;
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

// The size of a document with its aliases expanded (kMaxYamlNodes, kMaxYamlScalarBytes, kMaxYamlDepth), counted
// from the parser's events: each node once as it is parsed, each alias as the nodes its anchor stands for (measured
// when the anchored node ended), so that counting costs what parsing does whatever the aliases stand for. The first
// limit passed, with the line where the document passes it, is kept; the rest of the document is then not counted.
class ExpansionBudget final : public YAML::EventHandler {
 public:
  // Empty while the document is within every limit; else what it passes, for the error.
  const std::string& exceeded() const { return exceeded_; }
  int line() const { return line_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { Leaf(mark, anchor, 0); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& value) override {
    Leaf(mark, anchor, static_cast<int64_t>(value.size()));
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto found = anchors_.find(anchor);
    // An alias of an anchor still open (its own node) or unknown: yaml-cpp refuses it on its own.
    if (found == anchors_.end()) return;
    Add(mark, found->second);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapEnd() override { Close(); }

 private:
  struct Size {
    int64_t nodes = 0;
    int64_t bytes = 0;
    int64_t height = 0;  // Levels of lists and mappings: 0 for a scalar.
  };
  struct OpenNode {
    YAML::anchor_t anchor;
    YAML::Mark mark;
    Size size;
  };

  void Leaf(const YAML::Mark& mark, YAML::anchor_t anchor, int64_t bytes) {
    const Size size{1, bytes, 0};
    if (anchor != YAML::NullAnchor) anchors_[anchor] = size;
    Add(mark, size);
  }
  void Open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    open_.push_back({anchor, mark, Size{}});
    Count(mark, Size{1, 0, 0});
  }
  void Close() {
    if (open_.empty()) return;
    OpenNode node = open_.back();
    open_.pop_back();
    node.size.nodes += 1;
    node.size.height += 1;
    if (node.anchor != YAML::NullAnchor) anchors_[node.anchor] = node.size;
    if (!open_.empty()) Within(open_.back().size, node.size);
  }
  // A node whole (a scalar, an alias) in the node open now, and in the document's count.
  void Add(const YAML::Mark& mark, const Size& size) {
    if (!open_.empty()) Within(open_.back().size, size);
    Count(mark, size);
    const int64_t depth = static_cast<int64_t>(open_.size()) + size.height;
    if (exceeded_.empty() && depth > kMaxYamlDepth) {
      Exceed(mark, absl::StrCat("its aliases nest it ", depth, " levels deep, past the ", kMaxYamlDepth,
                                " a config file may nest (kMaxYamlDepth)"));
    }
  }
  static void Within(Size& parent, const Size& child) {
    parent.nodes = Saturated(parent.nodes, child.nodes);
    parent.bytes = Saturated(parent.bytes, child.bytes);
    parent.height = std::max(parent.height, child.height);
  }
  void Count(const YAML::Mark& mark, const Size& size) {
    nodes_ = Saturated(nodes_, size.nodes);
    bytes_ = Saturated(bytes_, size.bytes);
    if (!exceeded_.empty()) return;
    if (nodes_ > kMaxYamlNodes) {
      Exceed(mark, absl::StrCat("its aliases expand it past ", kMaxYamlNodes,
                                " nodes, the most a config file may hold (kMaxYamlNodes)"));
    } else if (bytes_ > kMaxYamlScalarBytes) {
      Exceed(mark, absl::StrCat("its aliases expand it past ", kMaxYamlScalarBytes,
                                " bytes of values, the most a config file may hold (kMaxYamlScalarBytes)"));
    }
  }
  void Exceed(const YAML::Mark& mark, std::string what) {
    exceeded_ = std::move(what);
    line_ = mark.line + 1;
  }
  static int64_t Saturated(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

  std::vector<OpenNode> open_;
  std::unordered_map<YAML::anchor_t, Size> anchors_;
  int64_t nodes_ = 0;
  int64_t bytes_ = 0;
  std::string exceeded_;
  int line_ = 0;
};

class Reader {
 public:
  explicit Reader(absl::string_view source) : source_(source) {}

  absl::Status Read(const YAML::Node& root) {
    if (root.IsNull()) return absl::OkStatus();  // An empty file.
    if (!root.IsMap()) {
      return Error("", "the file must be a mapping of keys (seed_everything, trainer, model, data, optimizer, "
                       "lr_scheduler, ckpt_path, ...)");
    }
    for (const auto& item : root) {
      absl::StatusOr<std::string> key = KeyOf(item.first, "");
      if (!key.ok()) return key.status();
      if (absl::Status seen = Claim(*key); !seen.ok()) return seen;
      const auto section = std::find_if(std::begin(kTopSections), std::end(kTopSections),
                                        [&](const auto& s) { return *key == s.first; });
      if (*key == "lr_scheduler") {
        if (absl::Status read = ReadScheduler(item.second); !read.ok()) return read;
        continue;
      }
      if (*key == "optimizer") {
        if (absl::Status read = ReadTopClass(ClassKind::kOptimizer, "optimizer", "optimizer", item.second);
            !read.ok()) {
          return read;
        }
        continue;
      }
      if (section != std::end(kTopSections)) {
        if (absl::Status read = ReadSection(section->second, item.second); !read.ok()) return read;
        continue;
      }
      if (*key == "seed_everything" && item.second.IsScalar()) {
        // A drawn seed (true, false) is printed, so that the run can be repeated.
        bool drawn = false;
        const std::string seed = SeedEverything(item.second.Scalar(), &drawn);
        if (drawn) {
          std::fprintf(stderr, "--config=%s: seed_everything: %s: this run's seed is %s (write seed_everything: %s "
                       "to repeat it)\n", source_.c_str(), item.second.Scalar().c_str(), seed.c_str(), seed.c_str());
          args_.push_back(absl::StrCat("--seed=", seed));
          continue;
        }
      }
      if (absl::Status read = ReadKey(Section::kTop, *key, item.second); !read.ok()) return read;
    }
    FinishLoggers();
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
      if (section == Section::kTrainer && *key == "strategy" && item.second.IsMap()) {
        if (absl::Status read = ReadStrategy(item.second); !read.ok()) return read;
        continue;
      }
      if (section == Section::kTrainer && *key == "profiler" && IsProfilerClass(item.second)) {
        if (absl::Status read = ReadProfiler(item.second); !read.ok()) return read;
        continue;
      }
      if (section == Section::kTrainer && *key == "logger" && IsLoggerClasses(item.second)) {
        ReadLoggers(item.second);
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
    std::set<std::string> classes;
    for (const YAML::Node& callback : node) {
      absl::StatusOr<ClassRead> found = ClassEntry(ClassKind::kCallback, callback, "trainer.callbacks");
      if (!found.ok()) return found.status();
      if (found->named == nullptr) continue;  // Reported.
      const LightningClass& callback_class = *found->named;
      if (!classes.insert(callback_class.name).second) {
        return Error("trainer.callbacks", absl::StrCat(callback_class.name, " is listed twice; fit makes one"));
      }
      const std::optional<Section> section = CallbackSection(callback_class);
      const std::string where = section.has_value()
                                    ? std::string(SectionName(*section))
                                    : absl::StrCat("trainer.callbacks[", callback_class.name, "].init_args");
      std::map<std::string, std::string> given;
      if (absl::Status read = ReadClass(callback_class, found->init_args, where, &given); !read.ok()) return read;
      if (absl::string_view(callback_class.name) == "OnExceptionCheckpoint" &&
          (given.count("dirpath") == 0 || given["dirpath"] == "null" || given["dirpath"] == "''")) {
        return Error(where, "OnExceptionCheckpoint needs dirpath, the folder its checkpoint goes to (e.g. dirpath: "
                            "crash)");
      }
      // Lightning's EarlyStopping cannot be made without the metric it watches.
      if (absl::string_view(callback_class.name) == "EarlyStopping" &&
          (given.count("monitor") == 0 || given["monitor"] == "null")) {
        return Error(where, "EarlyStopping needs monitor, the metric it watches (e.g. monitor: val_loss)");
      }
      // Lightning's StochasticWeightAveraging cannot be made without its learning rate.
      if (absl::string_view(callback_class.name) == "StochasticWeightAveraging" &&
          (given.count("swa_lrs") == 0 || given["swa_lrs"] == "null")) {
        return Error(where, "StochasticWeightAveraging needs swa_lrs, the SWA learning rate (e.g. swa_lrs: 0.01)");
      }
      // Lightning's ModelCheckpoint saves every N steps or every N epochs: every_n_epochs left null with steps set
      // means no epoch checkpoints.
      if (absl::string_view(callback_class.name) == "ModelCheckpoint") {
        const auto steps = given.find("every_n_train_steps");
        const auto epochs = given.find("every_n_epochs");
        const auto interval = given.find("train_time_interval");
        int64_t n = 0;
        const bool other_trigger = (steps != given.end() && absl::SimpleAtoi(steps->second, &n) && n > 0) ||
                                   (interval != given.end() && interval->second != "null");
        if (other_trigger && (epochs == given.end() || epochs->second == "null")) {
          args_.push_back("--every_n_epochs=0");
        }
      }
    }
    return absl::OkStatus();
  }

  // trainer.strategy as LightningCLI writes a strategy object: {class_path: FSDPStrategy, init_args: {...}}. A switch
  // that is a strategy name in fit (DDP's find_unused_parameters, FSDP's cpu_offload: true or false) picks that name.
  absl::Status ReadStrategy(const YAML::Node& node) {
    absl::StatusOr<ClassRead> found = ClassEntry(ClassKind::kStrategy, node, "trainer.strategy");
    if (!found.ok()) return found.status();
    if (found->named == nullptr) return absl::OkStatus();  // Reported.
    const LightningClass& strategy = *found->named;
    const bool fsdp = absl::string_view(strategy.name) == "FSDPStrategy";
    const char* switch_name = fsdp ? "cpu_offload" : "find_unused_parameters";
    const std::string where = "trainer.strategy.init_args";
    YAML::Node init_args = found->init_args ? YAML::Clone(found->init_args) : YAML::Node();
    if (init_args.IsMap() && init_args[switch_name]) {
      const std::string text = NodeText(init_args[switch_name]);
      if (text == "true" || text == "True") {
        args_.push_back(absl::StrCat("--strategy=", fsdp ? "fsdp_cpu_offload" : "ddp_find_unused_parameters_true"));
      } else if (text != "false" && text != "False" && text != "null") {
        return Error(absl::StrCat(where, ".", switch_name),
                     absl::StrCat(text, " is not read; write true or false (", fsdp ? "true: strategy fsdp_cpu_offload"
                                                                                 : "true: strategy "
                                                                                   "ddp_find_unused_parameters_true",
                                  ")"));
      }
      if (absl::Status seen = Claim(absl::StrCat(where, ".", switch_name)); !seen.ok()) return seen;
      init_args.remove(switch_name);
    }
    std::map<std::string, std::string> given;
    return ReadClass(strategy, init_args, where, &given);
  }

  // trainer.profiler as LightningCLI writes a profiler object: {class_path: SimpleProfiler, init_args: {dirpath: ...,
  // filename: ...}}, or the class's name alone (SimpleProfiler, lightning.pytorch.profilers.AdvancedProfiler). fit's
  // own names (simple, advanced, pytorch) are the key's value as fit's flag reads it.
  static bool IsProfilerClass(const YAML::Node& node) {
    if (node.IsMap()) return true;
    return node.IsScalar() && FindLightningClass(ClassKind::kProfiler, node.Scalar()) != nullptr &&
           LightningClassOfValue(ClassKind::kProfiler, node.Scalar()) == nullptr;
  }

  absl::Status ReadProfiler(const YAML::Node& node) {
    absl::StatusOr<ClassRead> found = ClassEntry(ClassKind::kProfiler, node, "trainer.profiler");
    if (!found.ok()) return found.status();
    if (found->named == nullptr) return absl::OkStatus();  // Reported.
    std::map<std::string, std::string> given;
    return ReadClass(*found->named, found->init_args, "trainer.profiler.init_args", &given);
  }

  // A class a config names, and its init_args (absent when the entry names the class alone).
  struct ClassRead {
    const LightningClass* named = nullptr;  // Null: not a class Kiln has (reported with the others, Read).
    YAML::Node init_args;
  };

  // One {class_path, init_args} entry (or a bare class name) of `kind`, after setting the class's flag. An entry that
  // is not {class_path, init_args} is an error at once.
  absl::StatusOr<ClassRead> ClassEntry(ClassKind kind, const YAML::Node& entry, const std::string& where) {
    std::string class_path;
    if (entry.IsScalar()) {
      class_path = entry.Scalar();
    } else if (entry.IsMap() && entry["class_path"] && entry["class_path"].IsScalar()) {
      class_path = entry["class_path"].Scalar();
      for (const auto& item : entry) {
        const std::string key = item.first.IsScalar() ? item.first.Scalar() : "";
        if (key != "class_path" && key != "init_args" && kind != ClassKind::kScheduler) {
          return Error(where,
                       absl::StrCat("unknown key '", key, "' in an entry; an entry has class_path and init_args"));
        }
      }
    } else {
      return Error(where, absl::StrCat("each entry is {class_path: <", LightningClassNames(kind),
                                       ">, init_args: {...}}"));
    }
    ClassRead read{.named = FindLightningClass(kind, class_path),
                   .init_args = entry.IsMap() ? entry["init_args"] : YAML::Node()};
    if (read.named == nullptr) {
      unknown_.push_back(absl::StrCat(where, ": class_path '", class_path, "' is not one fit has; it has ",
                                      LightningClassNames(kind)));
      return read;
    }
    if (read.named->flag != nullptr && kind != ClassKind::kLogger) {
      args_.push_back(absl::StrCat("--", read.named->flag, "=", read.named->value));
    }
    if (read.init_args && !read.init_args.IsNull() && !read.init_args.IsMap()) {
      return Error(where, "init_args must be a mapping of the class's arguments");
    }
    return read;
  }

  // A class's init_args (a mapping, or absent): each argument with a flag sets it (null: Lightning's default, else
  // the flag's); each without one must be the value Kiln has (reported otherwise). Arguments not given take the
  // class's default where fit's flag has another one (SGD's momentum 0, not fit's 0.9). `given` gets each argument
  // given, as text.
  absl::Status ReadClass(const LightningClass& c, const YAML::Node& init_args, const std::string& where,
                         std::map<std::string, std::string>* given) {
    if (init_args && init_args.IsMap()) {
      for (const auto& item : init_args) {
        absl::StatusOr<std::string> key = KeyOf(item.first, where);
        if (!key.ok()) return key.status();
        const std::string dotted = absl::StrCat(where, ".", *key);
        if (absl::Status seen = Claim(dotted); !seen.ok()) return seen;
        const auto argument = std::find_if(c.arguments.begin(), c.arguments.end(),
                                           [&](const ClassArgument& a) { return *key == a.name; });
        if (argument == c.arguments.end()) {
          std::vector<std::string> names;
          for (const ClassArgument& a : c.arguments) names.emplace_back(a.name);
          const std::string closest = ClosestName(*key, names);
          unknown_.push_back(absl::StrCat("unknown key ", dotted,
                                          closest.empty() ? absl::StrCat("; ", c.class_path(), " has no such argument")
                                                          : absl::StrCat("; did you mean ", where, ".", closest, "?")));
          continue;
        }
        (*given)[*key] = NodeText(item.second);
        // CSV's and TensorBoard's: FinishLoggers (MLflow's save_dir is a flag of its own).
        if (absl::string_view(argument->name) == "save_dir" && argument->flag == nullptr) continue;
        if (argument->flag == nullptr) {
          const char* kiln = argument->kiln_value != nullptr ? argument->kiln_value : argument->lightning_default;
          if (!SameYamlValue(NodeText(item.second), kiln)) {
            unknown_.push_back(absl::StrCat(dotted, ": ", NodeText(item.second), " is not supported: Kiln's ",
                                            c.name, " runs as ", argument->name, "=", kiln, "; write ", kiln,
                                            " or leave it out"));
          }
          continue;
        }
        if (item.second.IsNull() && argument->lightning_default != nullptr &&
            absl::string_view(argument->lightning_default) != "null") {
          if (absl::Status set = SetFlag(dotted, argument->flag, YAML::Load(argument->lightning_default), false);
              !set.ok()) {
            return set;
          }
          continue;
        }
        if (absl::Status set = SetFlag(dotted, argument->flag, item.second, IsListFlag(argument->flag)); !set.ok()) {
          return set;
        }
      }
    }
    for (const ClassArgument& argument : c.arguments) {
      if (argument.flag == nullptr || given->count(argument.name) > 0 || argument.lightning_default == nullptr ||
          absl::string_view(argument.lightning_default) == "null") {
        continue;
      }
      // --weight_decay's default (-1) is already each optimizer's own.
      if (absl::string_view(argument.flag) == "weight_decay") continue;
      if (absl::Status set = SetFlag(absl::StrCat(where, ".", argument.name), argument.flag,
                                     YAML::Load(argument.lightning_default), false);
          !set.ok()) {
        return set;
      }
    }
    return absl::OkStatus();
  }

  // The top-level `key` (optimizer, lr_scheduler; `flag` is fit's flag for it): a class name, {class_path,
  // init_args}, or null (fit's flags as they are). A name that is no class of the table is fit's own value (none,
  // cosine; and a mistake in one, which fit's own check words, as on the command line).
  absl::Status ReadTopClass(ClassKind kind, const char* key, const char* flag, const YAML::Node& node) {
    if (node.IsNull()) return absl::OkStatus();
    if (node.IsScalar() && FindLightningClass(kind, node.Scalar()) == nullptr) return SetFlag(key, flag, node, false);
    absl::StatusOr<ClassRead> found = ClassEntry(kind, node, key);
    if (!found.ok() || found->named == nullptr) return found.status();
    std::map<std::string, std::string> given;
    return ReadClass(*found->named, found->init_args, absl::StrCat(key, ".init_args"), &given);
  }

  // lr_scheduler: LightningCLI's class (ReadTopClass), with fit's own interval, frequency and warm-up keys allowed
  // beside it, or fit's own mapping ({scheduler: cosine, ...}).
  absl::Status ReadScheduler(const YAML::Node& node) {
    if (node.IsMap() && !node["class_path"]) return ReadSection(Section::kLrScheduler, node);
    if (absl::Status read = ReadTopClass(ClassKind::kScheduler, "lr_scheduler", "lr_scheduler", node); !read.ok()) {
      return read;
    }
    if (!node.IsMap()) return absl::OkStatus();
    for (const auto& item : node) {
      absl::StatusOr<std::string> key = KeyOf(item.first, "lr_scheduler");
      if (!key.ok()) return key.status();
      if (*key == "class_path" || *key == "init_args") continue;
      if (*key == "scheduler") {
        unknown_.push_back("lr_scheduler.scheduler: the class_path names the scheduler; give one of them");
        continue;
      }
      if (absl::Status seen = Claim(Dotted(Section::kLrScheduler, *key)); !seen.ok()) return seen;
      if (absl::Status read = ReadKey(Section::kLrScheduler, *key, item.second); !read.ok()) return read;
    }
    return absl::OkStatus();
  }

  // trainer.logger as LightningCLI writes it: one {class_path, init_args}, or a list of them.
  static bool IsLoggerClasses(const YAML::Node& node) {
    if (node.IsMap()) return true;
    if (!node.IsSequence()) return false;
    for (const YAML::Node& item : node) {
      if (item.IsMap()) return true;
    }
    return false;
  }

  void ReadLoggers(const YAML::Node& node) {
    std::vector<YAML::Node> entries;
    if (node.IsMap()) {
      entries.push_back(node);
    } else {
      for (const YAML::Node& item : node) entries.push_back(item);
    }
    std::vector<std::string> names;
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string where = absl::StrCat("trainer.logger[", i, "]");
      absl::StatusOr<ClassRead> found = ClassEntry(ClassKind::kLogger, entries[i], where);
      if (!found.ok()) {
        unknown_.emplace_back(found.status().message());
        continue;
      }
      if (found->named == nullptr) continue;
      names.emplace_back(found->named->value);
      std::map<std::string, std::string> given;
      absl::Status read = ReadClass(*found->named, found->init_args, absl::StrCat(where, ".init_args"), &given);
      if (!read.ok()) unknown_.emplace_back(read.message());
      // fit's loggers with version folders (CSV's and TensorBoard's, whose version is --log_version) share one
      // save_dir, name and version; WandbLogger's are its own flags.
      const bool versioned =
          std::any_of(found->named->arguments.begin(), found->named->arguments.end(), [](const ClassArgument& a) {
            return absl::string_view(a.name) == "version" && a.flag != nullptr &&
                   absl::string_view(a.flag) == "log_version";
          });
      for (const char* shared : {"save_dir", "name", "version"}) {
        if (!versioned) break;
        const std::string value = given.count(shared) > 0 ? given[shared] : std::string("null");
        auto [it, inserted] = logger_settings_.emplace(shared, value);
        if (!inserted && !SameYamlValue(it->second, value)) {
          unknown_.push_back(absl::StrCat(where, ".init_args.", shared, ": ", value, " differs from the first "
                                          "logger's ", it->second, "; fit's loggers share one ", shared));
        }
      }
    }
    args_.push_back(absl::StrCat("--logger=", names.empty() ? "none" : absl::StrJoin(names, ",")));
  }

  // A logger's save_dir is the trainer's default_root_dir (Lightning puts the checkpoints under the first logger's
  // folder); both given must agree.
  void FinishLoggers() {
    auto save_dir = logger_settings_.find("save_dir");
    if (save_dir == logger_settings_.end() || save_dir->second == "null") return;
    // NodeText quotes a quoted scalar whole; a plain scalar never begins with a quote (it would be a quoted one), but
    // may end with one.
    const std::string& text = save_dir->second;
    const std::string dir = text.size() >= 2 && text.front() == '\'' && text.back() == '\''
                                ? text.substr(1, text.size() - 2)
                                : text;
    if (default_root_dir_.has_value() && !SameYamlValue(*default_root_dir_, dir)) {
      unknown_.push_back(absl::StrCat("trainer.logger's save_dir ", dir, " is not trainer.default_root_dir ",
                                      *default_root_dir_, "; fit keeps logs and checkpoints under one folder: give "
                                      "one of them"));
      return;
    }
    args_.push_back(absl::StrCat("--default_root_dir=", dir));
  }

  absl::Status ReadKey(Section section, const std::string& key, const YAML::Node& node) {
    const ConfigKey* entry = FindKey(section, key);
    if (entry == nullptr) {
      // Lightning's keys fit has no flag for: at Lightning's default they change nothing.
      for (const DefaultOnlyKey& only : DefaultOnlyKeys()) {
        if (only.section != section || key != only.key) continue;
        if (!SameYamlValue(NodeText(node), only.lightning_default)) {
          unknown_.push_back(absl::StrCat(Dotted(section, key), ": ", NodeText(node), " is not supported (", only.why,
                                          "); write ", only.lightning_default, ", Lightning's default, or leave it "
                                          "out"));
        }
        return absl::OkStatus();
      }
      // Every unknown key is reported, in one error (Read), so that one run shows them all.
      unknown_.push_back(UnknownKey(section, key));
      return absl::OkStatus();
    }
    if (std::string(entry->flag) == "default_root_dir" && node.IsScalar()) default_root_dir_ = node.Scalar();
    return SetFlag(Dotted(section, key), entry->flag, node, entry->list);
  }

  // Sets fit's flag `flag_name` from `node`, for the key `dotted`: null is its default.
  absl::Status SetFlag(const std::string& dotted, const std::string& flag_name, const YAML::Node& node, bool list) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(flag_name);
    if (flag == nullptr) return absl::InternalError(absl::StrCat("config key ", dotted, " names no flag"));
    std::string value;
    if (node.IsNull()) {
      if (flag_name == "max_epochs") {
        max_epochs_null_ = true;
        return absl::OkStatus();
      }
      value = flag->DefaultValue();  // null is the default, as in LightningCLI.
    } else if (node.IsScalar()) {
      value = node.Scalar();
      // Lightning's logger: false is no logger, true the default ones.
      if (flag_name == "logger" && node.Tag() != "!") {
        if (value == "false") value = "none";
        if (value == "true") value = flag->DefaultValue();
      }
    } else if (node.IsSequence() && list) {
      std::vector<std::string> items;
      for (const YAML::Node& item : node) {
        if (!item.IsScalar()) return Error(dotted, "a list of single values is expected, not of lists or mappings");
        items.push_back(item.Scalar());
      }
      value = absl::StrJoin(items, ",");
    } else {
      return Error(dotted, absl::StrCat("expected one value, not a ", node.IsSequence() ? "list" : "mapping",
                                        list ? " of lists" : ""));
    }
    // The flag's own parser decides; the flag keeps its value, so that reading a file changes nothing.
    const std::string saved = flag->CurrentValue();
    std::string error;
    const bool parsed = flag->ParseFrom(value, &error);
    flag->ParseFrom(saved, &error);
    if (!parsed) return Error(dotted, absl::StrCat("'", value, "' is not valid; ", Accepted(*flag)));
    args_.push_back(absl::StrCat("--", flag_name, "=", value));
    if (flag_name == "max_steps") max_steps_set_ = true;
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
  std::map<std::string, std::string> logger_settings_;  // The loggers' save_dir, name and version (ReadLoggers).
  std::optional<std::string> default_root_dir_;         // trainer.default_root_dir, when the file gives it.
};

// Writes a flag's current value under `key`.
void WriteFlag(YAML::Emitter& out, absl::string_view key, const char* flag_name, bool list) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(flag_name);
  out << YAML::Key << std::string(key) << YAML::Value;
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
  } else if (value.empty() && list) {
    out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;  // --hidden_sizes= (a linear model): not the default.
  } else if (value.empty()) {
    out << YAML::DoubleQuoted << "";
  } else if (list) {
    out << YAML::Flow << YAML::BeginSeq;
    for (absl::string_view item : absl::StrSplit(value, ',')) WriteYamlScalar(out, std::string(item));
    out << YAML::EndSeq;
  } else {
    WriteYamlScalar(out, value);
  }
}

void WriteValue(YAML::Emitter& out, const ConfigKey& entry) { WriteFlag(out, entry.key, entry.flag, entry.list); }

std::string FlagValue(const char* name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag == nullptr ? "" : flag->CurrentValue();
}

void WriteSection(YAML::Emitter& out, Section section) {
  for (const ConfigKey& entry : ConfigKeys()) {
    if (entry.section == section && entry.written) WriteValue(out, entry);
  }
}

// A default of lightning_classes.h ("null", "''", "[0.9, 0.999]", "0.0") as YAML.
void WriteLiteral(YAML::Emitter& out, absl::string_view literal) {
  if (literal == "null") {
    out << YAML::Null;
  } else if (literal == "''") {
    out << YAML::SingleQuoted << "";
  } else if (absl::StartsWith(literal, "[")) {
    out << YAML::Flow << YAML::BeginSeq;
    for (absl::string_view item : absl::StrSplit(literal.substr(1, literal.size() - 2), ',', absl::SkipWhitespace())) {
      out << std::string(absl::StripAsciiWhitespace(item));
    }
    out << YAML::EndSeq;
  } else {
    out << std::string(literal);
  }
}

// The class_path and init_args keys of `c`, as LightningCLI writes them, into the mapping `out` has open: every
// argument, those with a flag at its value (as `value_of` writes it, when given), the others at the value Kiln has.
void WriteClassKeys(YAML::Emitter& out, const LightningClass& c,
                    const std::function<void(const ClassArgument&, YAML::Emitter&)>& value_of = nullptr) {
  out << YAML::Key << "class_path" << YAML::Value << c.class_path();
  out << YAML::Key << "init_args" << YAML::Value << YAML::BeginMap;
  for (const ClassArgument& argument : c.arguments) {
    if (!argument.written) continue;
    if (value_of != nullptr) {
      out << YAML::Key << argument.name << YAML::Value;
      value_of(argument, out);
    } else if (argument.flag != nullptr) {
      // --weight_decay=-1 is the optimizer's own default: left to it.
      if (absl::string_view(argument.flag) == "weight_decay" && FlagValue("weight_decay") == "-1") continue;
      // A list flag of one item (swa_lrs: 0.01) is written as the one value, as LightningCLI writes a float.
      const bool list = IsListFlag(argument.flag) && absl::StrContains(FlagValue(argument.flag), ',');
      WriteFlag(out, argument.name, argument.flag, list);
    } else {
      out << YAML::Key << argument.name << YAML::Value;
      WriteLiteral(out, argument.kiln_value != nullptr ? argument.kiln_value : argument.lightning_default);
    }
  }
  out << YAML::EndMap;
}

// {class_path, init_args} of `c` (WriteClassKeys).
void WriteClass(YAML::Emitter& out, const LightningClass& c,
                const std::function<void(const ClassArgument&, YAML::Emitter&)>& value_of = nullptr) {
  out << YAML::BeginMap;
  WriteClassKeys(out, c, value_of);
  out << YAML::EndMap;
}

const LightningClass& ClassNamed(ClassKind kind, absl::string_view name) { return *FindLightningClass(kind, name); }

// trainer.logger: false, or each of --logger's loggers as a class, in their order. Returns whether the loggers were
// written as classes (which hold --log_name and --log_version).
bool WriteLoggers(YAML::Emitter& out) {
  out << YAML::Key << "logger" << YAML::Value;
  const std::string loggers = FlagValue("logger");
  if (loggers == "none" || loggers.empty()) {
    out << false;
    return false;
  }
  const std::vector<std::string> names = absl::StrSplit(loggers, ',', absl::SkipWhitespace());
  for (const std::string& name : names) {
    if (LightningClassOfValue(ClassKind::kLogger, name) == nullptr) {
      // A name fit refuses when the run starts: written as given, in fit's own list, so that it reads back.
      out << YAML::Flow << YAML::BeginSeq;
      for (const std::string& item : names) WriteYamlScalar(out, item);
      out << YAML::EndSeq;
      return false;
    }
  }
  out << YAML::BeginSeq;
  for (const std::string& name : names) {
    const LightningClass* logger = LightningClassOfValue(ClassKind::kLogger, name);
    WriteClass(out, *logger, [](const ClassArgument& argument, YAML::Emitter& emitter) {
      const absl::string_view name = argument.name;
      if (name == "save_dir" && argument.flag == nullptr) {
        WriteYamlScalar(emitter, FlagValue("default_root_dir"));
      } else if (name == "version" && argument.flag != nullptr && absl::string_view(argument.flag) == "log_version" &&
                 FlagValue("log_version") == "-1") {
        emitter << YAML::Null;
      } else if (argument.flag != nullptr && absl::string_view(argument.lightning_default) == "null" &&
                 FlagValue(argument.flag).empty()) {
        emitter << YAML::Null;  // An empty flag is Lightning's None (MLFlowLogger's run_name, run_id).
      } else if (argument.flag != nullptr) {
        const std::string value = FlagValue(argument.flag);
        if (absl::string_view(argument.flag) == "log_version") {
          emitter << value;
        } else {
          WriteYamlScalar(emitter, value);
        }
      } else {
        WriteLiteral(emitter, argument.lightning_default);
      }
    });
  }
  out << YAML::EndSeq;
  return true;
}

// trainer.profiler: null without one; LightningCLI's class of the profiler --profiler names, with --profiler_dirpath
// and --profiler_filename as its dirpath and filename (null when empty). Returns whether it was written as a class
// (which holds those two).
bool WriteProfiler(YAML::Emitter& out) {
  out << YAML::Key << "profiler" << YAML::Value;
  const std::string name = FlagValue("profiler");
  const LightningClass* profiler = LightningClassOfValue(ClassKind::kProfiler, name);
  if (profiler == nullptr) {
    // None, or a name fit refuses when the run starts (written as given, so that it reads back).
    if (name.empty()) {
      out << YAML::Null;
    } else {
      WriteYamlScalar(out, name);
    }
    return false;
  }
  WriteClass(out, *profiler, [](const ClassArgument& argument, YAML::Emitter& emitter) {
    if (argument.flag == nullptr) {
      WriteLiteral(emitter, argument.kiln_value != nullptr ? argument.kiln_value : argument.lightning_default);
      return;
    }
    const std::string value = FlagValue(argument.flag);
    if (value.empty()) {
      emitter << YAML::Null;
    } else {
      WriteYamlScalar(emitter, value);
    }
  });
  return true;
}

// lr_scheduler: null without one; LightningCLI's class with its arguments, and fit's own keys beside it where they
// are not their defaults (interval, frequency, warm-up); fit's own mapping for a warm-up alone.
void WriteScheduler(YAML::Emitter& out) {
  out << YAML::Key << "lr_scheduler" << YAML::Value;
  const LightningClass* scheduler = LightningClassOfValue(ClassKind::kScheduler, FlagValue("lr_scheduler"));
  std::vector<const ConfigKey*> own;
  for (const ConfigKey& entry : ConfigKeys()) {
    if (entry.section != Section::kLrScheduler || !entry.written) continue;
    bool in_class = absl::string_view(entry.flag) == "lr_scheduler";
    if (scheduler != nullptr) {
      for (const ClassArgument& argument : scheduler->arguments) {
        if (argument.flag != nullptr && absl::string_view(argument.flag) == entry.flag) in_class = true;
      }
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(entry.flag);
    if (!in_class && flag != nullptr && flag->CurrentValue() != flag->DefaultValue()) own.push_back(&entry);
  }
  if (scheduler == nullptr) {
    const bool none = FlagValue("lr_scheduler") == "none";
    if (none && own.empty()) {
      out << YAML::Null;
      return;
    }
    // fit's own mapping: a warm-up alone, or a value fit refuses when the run starts (written as given).
    out << YAML::BeginMap;
    if (!none) WriteFlag(out, "scheduler", "lr_scheduler", false);
    for (const ConfigKey* entry : own) WriteValue(out, *entry);
    out << YAML::EndMap;
    return;
  }
  // The class's mapping, then fit's own keys in it.
  out << YAML::BeginMap;
  WriteClassKeys(out, *scheduler);
  for (const ConfigKey* entry : own) WriteValue(out, *entry);
  out << YAML::EndMap;
}

}  // namespace

const std::vector<ConfigKey>& ConfigKeys() {
  // The keys are Lightning's names: Trainer's arguments, the callbacks' init_args (ModelCheckpoint's, EarlyStopping's,
  // StochasticWeightAveraging's, EMAWeightAveraging's) and
  // LightningCLI's seed_everything and ckpt_path. Model and data keys are fit's own flags. lr_scheduler holds the
  // keys of Lightning's lr_scheduler config (scheduler, interval, frequency, monitor) and each schedule's settings
  // under fit's flag names, which are PyTorch's (plateau's prefixed, as they share a section).
  static const std::vector<ConfigKey>* keys = new std::vector<ConfigKey>{
      // The Trainer's options, as trainer/trainer_options.inc places them.
#define KILN_TRAINER_OPTION(group, type, name, fit_default, section, key, help) {#name, Section::section, key},
#include "trainer/trainer_options.inc"
      {"logger", Section::kTrainer, "logger", /*list=*/true},
      // Read here; written as each logger's init_args (name, version).
      {"log_name", Section::kTrainer, "log_name", false, /*written=*/false},
      {"log_version", Section::kTrainer, "log_version", false, /*written=*/false},
      // Read here; written as the MLFlowLogger's init_args (all but tags, which --print_config leaves out for now).
      {"mlflow_experiment_name", Section::kTrainer, "mlflow_experiment_name", false, /*written=*/false},
      {"mlflow_run_name", Section::kTrainer, "mlflow_run_name", false, /*written=*/false},
      {"mlflow_tracking_uri", Section::kTrainer, "mlflow_tracking_uri", false, /*written=*/false},
      {"mlflow_tags", Section::kTrainer, "mlflow_tags", false, /*written=*/false},
      {"mlflow_save_dir", Section::kTrainer, "mlflow_save_dir", false, /*written=*/false},
      {"mlflow_log_model", Section::kTrainer, "mlflow_log_model", false, /*written=*/false},
      {"mlflow_prefix", Section::kTrainer, "mlflow_prefix", false, /*written=*/false},
      {"mlflow_artifact_location", Section::kTrainer, "mlflow_artifact_location", false, /*written=*/false},
      {"mlflow_run_id", Section::kTrainer, "mlflow_run_id", false, /*written=*/false},
      // Read here; written as the WandbLogger's init_args.
      {"wandb_name", Section::kTrainer, "wandb_name", false, /*written=*/false},
      {"wandb_save_dir", Section::kTrainer, "wandb_save_dir", false, /*written=*/false},
      {"wandb_version", Section::kTrainer, "wandb_version", false, /*written=*/false},
      {"wandb_offline", Section::kTrainer, "wandb_offline", false, /*written=*/false},
      {"wandb_dir", Section::kTrainer, "wandb_dir", false, /*written=*/false},
      {"wandb_id", Section::kTrainer, "wandb_id", false, /*written=*/false},
      {"wandb_project", Section::kTrainer, "wandb_project", false, /*written=*/false},
      {"wandb_log_model", Section::kTrainer, "wandb_log_model", false, /*written=*/false},
      {"wandb_prefix", Section::kTrainer, "wandb_prefix", false, /*written=*/false},
      {"wandb_checkpoint_name", Section::kTrainer, "wandb_checkpoint_name", false, /*written=*/false},
      // Read here; written as the DeviceStatsMonitor callback.
      {"device_stats_monitor", Section::kTrainer, "device_stats_monitor", false, /*written=*/false},
      // Read here; written as the OnExceptionCheckpoint callback (its dirpath and filename).
      {"on_exception_dirpath", Section::kTrainer, "on_exception_dirpath", false, /*written=*/false},
      {"on_exception_filename", Section::kTrainer, "on_exception_filename", false, /*written=*/false},

      // Read here; written as the ThroughputMonitor callback (its window_size) or not at all (Kiln's own peak).
      {"throughput_monitor", Section::kTrainer, "throughput_monitor", false, /*written=*/false},
      {"throughput_window_size", Section::kTrainer, "throughput_window_size", false, /*written=*/false},
      {"throughput_available_flops", Section::kTrainer, "throughput_available_flops", false, /*written=*/false},
      {"checkpoint_monitor", Section::kModelCheckpoint, "monitor"},
      {"checkpoint_mode", Section::kModelCheckpoint, "mode"},
      {"save_top_k", Section::kModelCheckpoint, "save_top_k"},
      {"checkpoint_filename", Section::kModelCheckpoint, "filename"},
      {"every_n_epochs", Section::kModelCheckpoint, "every_n_epochs"},
      {"every_n_train_steps", Section::kModelCheckpoint, "every_n_train_steps"},
      {"save_last", Section::kModelCheckpoint, "save_last"},
      {"save_weights_only", Section::kModelCheckpoint, "save_weights_only"},
      {"train_time_interval", Section::kModelCheckpoint, "train_time_interval"},
      {"save_on_train_epoch_end", Section::kModelCheckpoint, "save_on_train_epoch_end"},
      {"enable_version_counter", Section::kModelCheckpoint, "enable_version_counter"},
      {"early_stopping_monitor", Section::kEarlyStopping, "monitor"},
      {"early_stopping_mode", Section::kEarlyStopping, "mode"},
      {"patience", Section::kEarlyStopping, "patience"},
      {"min_delta", Section::kEarlyStopping, "min_delta"},
      {"swa_lrs", Section::kStochasticWeightAveraging, "swa_lrs", /*list=*/true},
      {"swa_epoch_start", Section::kStochasticWeightAveraging, "swa_epoch_start"},
      {"annealing_epochs", Section::kStochasticWeightAveraging, "annealing_epochs"},
      {"annealing_strategy", Section::kStochasticWeightAveraging, "annealing_strategy"},
      // Read here; written as the EMAWeightAveraging callback.
      {"ema_weight_averaging", Section::kTrainer, "ema_weight_averaging", false, /*written=*/false},
      {"ema_decay", Section::kEMAWeightAveraging, "decay"},
      {"ema_update_every_n_steps", Section::kEMAWeightAveraging, "update_every_n_steps"},
      {"ema_update_starting_at_step", Section::kEMAWeightAveraging, "update_starting_at_step"},
      {"ema_update_starting_at_epoch", Section::kEMAWeightAveraging, "update_starting_at_epoch"},
      {"ema_use_buffers", Section::kEMAWeightAveraging, "use_buffers"},
      {"model", Section::kModel, "model"},
      {"hidden_sizes", Section::kModel, "hidden_sizes", /*list=*/true},
      {"channels", Section::kModel, "channels", /*list=*/true},
      {"kernel_size", Section::kModel, "kernel_size"},
      {"input_shape", Section::kModel, "input_shape", /*list=*/true},
      {"fused_optimizer", Section::kModel, "fused_optimizer"},
      // Written as the optimizer's class and init_args (lightning_classes.h).
      {"optimizer", Section::kOptimizer, "class_path", false, /*written=*/false},
      {"learning_rate", Section::kOptimizer, "lr", false, /*written=*/false},
      {"momentum", Section::kOptimizer, "momentum", false, /*written=*/false},
      {"weight_decay", Section::kOptimizer, "weight_decay", false, /*written=*/false},
      {"data", Section::kData, "data"},
      {"task", Section::kData, "task"},
      {"label_column", Section::kData, "label_column"},
      {"val_fraction", Section::kData, "val_fraction"},
      {"batch_size", Section::kData, "batch_size"},
      {"shuffle", Section::kData, "shuffle"},
      {"normalize", Section::kData, "normalize"},
      {"streaming", Section::kData, "streaming"},
      {"val_data", Section::kData, "val_data"},
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
      {"auto_lr_find", Section::kTop, "auto_lr_find"},
      {"auto_scale_batch_size", Section::kTop, "auto_scale_batch_size"},
      {"lr_find_min_lr", Section::kTop, "lr_find_min_lr"},
      {"lr_find_max_lr", Section::kTop, "lr_find_max_lr"},
      {"lr_find_num_training", Section::kTop, "lr_find_num_training"},
      {"lr_find_mode", Section::kTop, "lr_find_mode"},
  };
  return *keys;
}

// --accelerator_plugin repeats, and plugins load before the flags are parsed; a flag's value holds only the last
// one, so a config file could not hold them all. KILN_ACCELERATOR_PLUGINS keeps plugins across runs instead.
// --accelerator_library registers its accelerator before a config file is read, as a plugin does. Whether to replace
// an earlier run's config.yaml is a choice about this command, not part of the run's configuration (LightningCLI
// takes it in code, not from the file).
bool IsCommandLineOnlyFlag(absl::string_view flag) {
  return flag == "config" || flag == "print_config" || flag == "accelerator_plugin" || flag == "accelerator_library" ||
         flag == "save_config_overwrite";
}

absl::StatusOr<std::vector<std::string>> ConfigFileArguments(absl::string_view text, absl::string_view source) {
  // YAML is Unicode: text in another encoding could not be written back to config.yaml as it was read.
  absl::StatusOr<absl::string_view> utf8 = Utf8Text(text, source);
  if (!utf8.ok()) return absl::InvalidArgumentError(absl::StrCat("--config=", utf8.status().message()));
  std::vector<YAML::Node> documents;
  try {
    // Measured before any node is built: reading the nodes' values expands every alias (ExpansionBudget).
    {
      std::istringstream stream{std::string(*utf8)};
      YAML::Parser parser(stream);
      ExpansionBudget budget;
      while (budget.exceeded().empty() && parser.HandleNextDocument(budget)) {
      }
      if (!budget.exceeded().empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--config=", source, ": line ", budget.line(), ": ",
                                                       budget.exceeded(), "; write the values out, or alias less"));
      }
    }
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
    try {
      if (absl::Status read = reader.Read(documents[0]); !read.ok()) return read;
    } catch (const YAML::Exception& error) {
      // A node read as what it is not (a scalar indexed as a mapping, ...): the file's shape is wrong there.
      return absl::InvalidArgumentError(absl::StrCat("--config=", source, ": line ", error.mark.line + 1,
                                                     ": not the layout of a config file (", error.msg, ")"));
    }
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
  for (const ConfigKey& entry : keys) {
    if (entry.section != Section::kTrainer || !entry.written) continue;
    const absl::string_view flag_name = entry.flag;
    if (flag_name == "logger") {
      if (!WriteLoggers(out)) {
        // No logger classes to hold them: fit's own keys, where they are not the defaults.
        for (const char* own : {"log_name", "log_version"}) {
          absl::CommandLineFlag* flag = absl::FindCommandLineFlag(own);
          if (flag != nullptr && flag->CurrentValue() != flag->DefaultValue()) WriteFlag(out, own, own, false);
        }
      }
    } else if (flag_name == "profiler") {
      if (!WriteProfiler(out)) {
        // No profiler class to hold them: fit's own keys, where they are not the defaults.
        for (const char* own : {"profiler_dirpath", "profiler_filename"}) {
          absl::CommandLineFlag* flag = absl::FindCommandLineFlag(own);
          if (flag != nullptr && flag->CurrentValue() != flag->DefaultValue()) WriteFlag(out, own, own, false);
        }
      }
    } else if (flag_name == "profiler_dirpath" || flag_name == "profiler_filename") {
      continue;  // Written with the profiler (WriteProfiler) or after it.
    } else {
      WriteValue(out, entry);
    }
  }
  // Lightning's Trainer arguments that fit has no flag for, at the value Kiln has.
  for (const DefaultOnlyKey& only : DefaultOnlyKeys()) {
    if (only.section != Section::kTrainer) continue;
    out << YAML::Key << only.key << YAML::Value;
    WriteLiteral(out, only.lightning_default);
  }
  out << YAML::Key << "callbacks" << YAML::Value << YAML::BeginSeq;
  WriteClass(out, ClassNamed(ClassKind::kCallback, "ModelCheckpoint"));
  if (!FlagValue("early_stopping_monitor").empty()) WriteClass(out, ClassNamed(ClassKind::kCallback, "EarlyStopping"));
  if (!FlagValue("swa_lrs").empty()) {
    WriteClass(out, ClassNamed(ClassKind::kCallback, "StochasticWeightAveraging"));
  }
  if (FlagValue("ema_weight_averaging") == "true") {
    WriteClass(out, ClassNamed(ClassKind::kCallback, "EMAWeightAveraging"));
  }
  if (FlagValue("device_stats_monitor") == "true") {
    WriteClass(out, ClassNamed(ClassKind::kCallback, "DeviceStatsMonitor"));
  }
  if (!FlagValue("on_exception_dirpath").empty()) {
    WriteClass(out, ClassNamed(ClassKind::kCallback, "OnExceptionCheckpoint"));
  }
  if (FlagValue("throughput_monitor") == "true") {
    WriteClass(out, ClassNamed(ClassKind::kCallback, "ThroughputMonitor"));
  }
  out << YAML::EndSeq << YAML::EndMap;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  WriteSection(out, Section::kModel);
  out << YAML::EndMap;
  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  WriteSection(out, Section::kData);
  out << YAML::EndMap;
  out << YAML::Key << "optimizer" << YAML::Value;
  const LightningClass* optimizer = LightningClassOfValue(ClassKind::kOptimizer, FlagValue("optimizer"));
  if (optimizer != nullptr) {
    WriteClass(out, *optimizer);
  } else {
    WriteYamlScalar(out, FlagValue("optimizer"));  // fit refuses it when the run starts.
  }
  WriteScheduler(out);
  for (const ConfigKey& key : keys) {
    if (key.section == Section::kTop && key.written && !is_seed(key)) WriteValue(out, key);
  }
  out << YAML::EndMap;
  return absl::StrCat(
      "# fit's configuration, in LightningCLI's layout. `fit --config=<this file>` runs it again; flags given with\n"
      "# it override it.\n",
      out.c_str(), "\n");
}

absl::Status WriteConfigYaml(const std::string& path) { return WriteFileDurably(path, ConfigYaml()); }

}  // namespace kiln
