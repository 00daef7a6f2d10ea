#include "trainer/loggers/wandb_logger.h"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "trainer/io/durable_file.h"
#include "trainer/loggers/wandb_records.h"
#include "yaml-cpp/yaml.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using wandb::ProtoMessage;

// Field numbers of wandb_internal.proto (wandb 0.29), by message.
namespace record {  // Record
constexpr int kNum = 1, kHistory = 2, kSummary = 3, kConfig = 5, kFiles = 6, kMetric = 12, kRun = 17, kExit = 18,
              kHeader = 21;
}  // namespace record
namespace run {  // RunRecord
constexpr int kRunId = 1, kEntity = 2, kProject = 3, kRunGroup = 6, kJobType = 7, kDisplayName = 8, kNotes = 9,
              kTags = 10, kHost = 13, kStartTime = 17;
}  // namespace run
// HistoryItem, SummaryItem and ConfigItem: key 1, nested_key 2, value_json 16; HistoryRecord, SummaryRecord and
// ConfigRecord hold them as item/update 1; HistoryRecord's step is 2 (HistoryStep: num 1).
constexpr int kItemKey = 1, kItemNestedKey = 2, kItemValueJson = 16, kItems = 1, kHistoryStep = 2;
constexpr int kFilesItems = 1, kFilesItemPath = 1;                                      // FilesRecord, FilesItem
constexpr int kExitCode = 1, kExitRuntime = 2;                                          // RunExitRecord
constexpr int kVersionInfo = 1, kProducer = 1;                                          // HeaderRecord, VersionInfo
constexpr int kMetricName = 1, kMetricGlob = 2, kMetricStepMetric = 4, kMetricOptions = 6;  // MetricRecord
constexpr int kStepSync = 1, kDefined = 3;                                                  // MetricOptions
constexpr int kSeconds = 1, kNanos = 2;                                                      // Timestamp

constexpr absl::string_view kGlobalStep = "trainer/global_step";  // Lightning's step metric.
constexpr absl::string_view kIdCharacters = "abcdefghijklmnopqrstuvwxyz0123456789";

// 8 random lowercase letters and digits, as wandb makes a run id.
std::string NewRunId() {
  std::random_device device;
  std::string id;
  for (int i = 0; i < 8; ++i) id.push_back(kIdCharacters[device() % kIdCharacters.size()]);
  return id;
}

// A double as JSON, as wandb writes one: the shortest text that reads back as it; NaN and the infinities as
// Python's json writes them (wandb's readers accept them).
std::string JsonNumber(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// A hyper-parameter's text as a JSON value, typed as hparams.yaml types it (hparams_yaml.h): true/false and finite
// numbers bare, anything else a string.
std::string HparamJson(const std::string& text) {
  if (text == "true" || text == "false") return text;
  int64_t integer = 0;
  double number = 0;
  if (text.find_first_of(" \t") == std::string::npos) {
    if (absl::SimpleAtoi(text, &integer)) return absl::StrCat(integer);
    if (absl::SimpleAtod(text, &number) && std::isfinite(number)) return JsonNumber(number);
  }
  return Json(text).dump();
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

std::string ProgramPath() {
  std::error_code error;
  const fs::path path = fs::read_symlink("/proc/self/exe", error);
  return error ? std::string("kiln") : path.string();
}

ProtoMessage Item(absl::string_view key, const std::string& value_json, bool nested) {
  ProtoMessage item;
  item.Bytes(nested ? kItemNestedKey : kItemKey, key);
  item.Bytes(kItemValueJson, value_json);
  return item;
}

ProtoMessage Timestamp(absl::Time time) {
  const absl::Duration since = time - absl::UnixEpoch();
  const int64_t seconds = absl::ToInt64Seconds(since);
  ProtoMessage timestamp;
  timestamp.Varint(kSeconds, seconds);
  if (const int64_t nanos = absl::ToInt64Nanoseconds(since - absl::Seconds(seconds)); nanos != 0) {
    timestamp.Varint(kNanos, nanos);
  }
  return timestamp;
}

// What W&B refuses in a run id or a project's name (wandb.init: "/ \ # ? % :"), and a name that is no folder.
absl::Status CheckName(absl::string_view what, const std::string& value, absl::string_view example) {
  if (value.empty() || value.find_first_of("/\\#?%:") != std::string::npos || value == "." || value == "..") {
    return absl::InvalidArgumentError(absl::StrCat("WandbLogger ", what, " '", value,
                                                   "' is not one W&B accepts: it must be non-empty, without any of "
                                                   "/ \\ # ? % :; pass e.g. ",
                                                   example));
  }
  if (value.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("WandbLogger ", what, " '", value.substr(0, 40), "...' is ", value.size(),
                     " characters long; W&B accepts at most 128: pass a shorter one, e.g. ", example));
  }
  return absl::OkStatus();
}

// W&B's artifact names: letters, digits, '-', '_' and '.'.
absl::Status CheckCheckpointName(const std::string& name) {
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError(absl::StrCat(
          "WandbLogger checkpoint_name '", name,
          "' is not one W&B accepts: use letters, digits, '-', '_' and '.' only, e.g. model-best (or leave it "
          "unset for model-<run id>)"));
    }
  }
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("WandbLogger checkpoint_name '", name,
                                                   "' is empty; pass a name such as model-best, or leave it unset "
                                                   "for model-<run id>"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read checkpoint ", path, " to log it to W&B"));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read checkpoint ", path, " to log it to W&B"));
  return out.str();
}

int64_t ModificationNanos(const struct stat& info) {
  return static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
}

}  // namespace

absl::Status CheckWandbLoggerOptions(const WandbLoggerOptions& options) {
  if (!options.offline) {
    const char* mode = std::getenv("WANDB_MODE");
    const std::string wandb_mode = mode != nullptr ? mode : "";
    if (wandb_mode != "offline" && wandb_mode != "dryrun") {
      const std::string save_dir = !options.save_dir.empty() ? options.save_dir : options.dir.value_or(".");
      return absl::InvalidArgumentError(absl::StrCat(
          "WandbLogger offline=False streams the run to W&B's servers, which Kiln does not do: Kiln writes offline "
          "runs only",
          wandb_mode.empty() ? "" : absl::StrCat(" ($WANDB_MODE is '", wandb_mode, "'; offline or dryrun would do)"),
          ". Pass offline=True (fit: --wandb_offline=true) or set WANDB_MODE=offline, and upload the run "
          "afterwards with `wandb sync ",
          (fs::path(save_dir) / "wandb").string(), "/offline-run-<time>-<id>`"));
    }
  }
  for (const auto& [what, value] : {std::pair{"version", &options.version}, std::pair{"id", &options.id}}) {
    if (value->has_value() && !(*value)->empty()) {
      if (absl::Status s = CheckName(what, **value, "run-1 (or leave it unset for a random one)"); !s.ok()) return s;
    }
  }
  if (options.project.has_value()) {
    if (absl::Status s = CheckName("project", *options.project, "lightning_logs"); !s.ok()) return s;
  }
  if (options.checkpoint_name.has_value()) {
    if (absl::Status s = CheckCheckpointName(*options.checkpoint_name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

WandbLogger::WandbLogger(WandbLoggerOptions options) : options_(std::move(options)) {
  // Lightning: project, else $WANDB_PROJECT, else lightning_logs; id is version, else id; dir is save_dir, else dir.
  if (options_.project.has_value()) {
    project_ = *options_.project;
  } else if (const char* env = std::getenv("WANDB_PROJECT"); env != nullptr && *env != '\0') {
    project_ = env;
  } else {
    project_ = "lightning_logs";
  }
  if (options_.version.has_value() && !options_.version->empty()) {
    id_ = *options_.version;
  } else if (options_.id.has_value() && !options_.id->empty()) {
    id_ = *options_.id;
  } else {
    id_ = NewRunId();
  }
  save_dir_ = !options_.save_dir.empty() ? options_.save_dir : options_.dir.value_or("");
  if (save_dir_.empty()) {
    const char* env = std::getenv("WANDB_DIR");  // wandb.init's own default.
    save_dir_ = env != nullptr && *env != '\0' ? env : ".";
  }
}

WandbLogger::~WandbLogger() = default;

std::string WandbLogger::log_dir() const { return (fs::path(save_dir_) / project_ / id_).string(); }

absl::Status WandbLogger::AppendRecord(int field, const std::string& message) {
  ProtoMessage record;
  record.Varint(record::kNum, ++records_);
  record.Bytes(field, message);
  return file_->Append(record.bytes());
}

absl::Status WandbLogger::setup() {
  if (finalized_) {  // A stage after the end of one (fit, then test): the run goes on, its end written again.
    absl::StatusOr<std::unique_ptr<wandb::RecordLogFile>> file =
        wandb::RecordLogFile::ContinueAt(file_->path(), end_offset_);
    if (!file.ok()) return file.status();
    file_ = *std::move(file);
    records_ = end_records_;
    finalized_ = false;
    return absl::OkStatus();
  }
  if (file_ != nullptr) return absl::OkStatus();  // Set up already.
  if (absl::Status s = CheckWandbLoggerOptions(options_); !s.ok()) return s;
  // Set here from $WANDB_PROJECT or made up: checked again.
  if (absl::Status s = CheckName("project", project_, "lightning_logs"); !s.ok()) return s;
  if (absl::Status s = CheckName("id", id_, "run-1 (or leave it unset for a random one)"); !s.ok()) return s;

  start_ = absl::Now();
  const std::string wandb_dir = (fs::path(save_dir_) / "wandb").string();
  const std::string folder =
      absl::StrCat("offline-run-", absl::FormatTime("%Y%m%d_%H%M%S", start_, absl::LocalTimeZone()), "-", id_);
  const std::string run_dir = (fs::path(wandb_dir) / folder).string();
  std::error_code error;
  fs::create_directories(fs::path(run_dir) / "files", error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot create the W&B run folder ", run_dir, ": ", error.message()));
  }
  absl::StatusOr<std::unique_ptr<wandb::RecordLogFile>> file =
      wandb::RecordLogFile::Create((fs::path(run_dir) / absl::StrCat("run-", id_, ".wandb")).string());
  if (!file.ok()) return file.status();
  file_ = *std::move(file);
  run_dir_ = run_dir;

  ProtoMessage header;
  header.Message(kVersionInfo, ProtoMessage().Bytes(kProducer, "kiln"));
  if (absl::Status s = AppendRecord(record::kHeader, header.bytes()); !s.ok()) return s;

  ProtoMessage run;
  run.Bytes(run::kRunId, id_);
  if (options_.entity.has_value()) run.Bytes(run::kEntity, *options_.entity);
  run.Bytes(run::kProject, project_);
  if (options_.group.has_value()) run.Bytes(run::kRunGroup, *options_.group);
  if (options_.job_type.has_value()) run.Bytes(run::kJobType, *options_.job_type);
  if (options_.name.has_value()) run.Bytes(run::kDisplayName, *options_.name);
  if (options_.notes.has_value()) run.Bytes(run::kNotes, *options_.notes);
  for (const std::string& tag : options_.tags) run.Bytes(run::kTags, tag);
  run.Bytes(run::kHost, HostName());
  run.Message(run::kStartTime, Timestamp(start_));
  if (absl::Status s = AppendRecord(record::kRun, run.bytes()); !s.ok()) return s;

  // Lightning's define_metric calls: trainer/global_step, and every other metric stepped by it.
  ProtoMessage step_metric;
  step_metric.Bytes(kMetricName, kGlobalStep).Message(kMetricOptions, ProtoMessage().Bool(kDefined, true));
  if (absl::Status s = AppendRecord(record::kMetric, step_metric.bytes()); !s.ok()) return s;
  ProtoMessage every_metric;
  every_metric.Bytes(kMetricGlob, "*")
      .Bytes(kMetricStepMetric, kGlobalStep)
      .Message(kMetricOptions, ProtoMessage().Bool(kStepSync, true).Bool(kDefined, true));
  if (absl::Status s = AppendRecord(record::kMetric, every_metric.bytes()); !s.ok()) return s;
  if (absl::Status s = file_->Sync(); !s.ok()) return s;

  // wandb-metadata.json, with the keys wandb writes that Kiln knows.
  struct utsname system {};
  uname(&system);
  Json metadata;
  metadata["os"] = absl::StrCat(system.sysname, "-", system.release, "-", system.machine);
  metadata["startedAt"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", start_, absl::UTCTimeZone());
  metadata["program"] = ProgramPath();
  metadata["root"] = save_dir_;
  metadata["host"] = HostName();
  metadata["executable"] = ProgramPath();
  metadata["cpu_count_logical"] = std::thread::hardware_concurrency();
  metadata["writer"] = "kiln";
  if (absl::Status s = WriteFileDurably((fs::path(run_dir_) / "files" / "wandb-metadata.json").string(),
                                        metadata.dump(2) + "\n", {.what = "W&B run file"});
      !s.ok()) {
    return s;
  }
  // latest-run, as wandb points it: a link beside the run folders, replaced in one rename.
  const fs::path latest = fs::path(wandb_dir) / "latest-run";
  const fs::path temporary = fs::path(wandb_dir) / absl::StrCat("latest-run.tmp-", getpid());
  fs::remove(temporary, error);
  fs::create_directory_symlink(folder, temporary, error);
  if (!error) fs::rename(temporary, latest, error);
  if (error) fs::remove(temporary, error);  // Only a convenience: the run goes on without it.
  return SyncFolder(wandb_dir);
}

absl::Status WandbLogger::log_hyperparams(const std::map<std::string, std::string>& params) {
  if (absl::Status s = setup(); !s.ok()) return s;
  if (params.empty()) return absl::OkStatus();
  ProtoMessage config;
  for (const auto& [key, value] : params) {
    config_[key] = HparamJson(value);
    config.Message(kItems, Item(key, config_[key], /*nested=*/false));
  }
  return AppendRecord(record::kConfig, config.bytes());
}

absl::Status WandbLogger::log_metrics(const MetricMap& metrics, int64_t step) {
  if (absl::Status s = setup(); !s.ok()) return s;
  const absl::Time now = absl::Now();
  std::vector<std::pair<std::string, std::string>> row;  // Key, JSON value, as wandb orders a row.
  for (const auto& [name, value] : metrics) {
    row.emplace_back(options_.prefix.empty() ? name : absl::StrCat(options_.prefix, "-", name), JsonNumber(value));
  }
  row.emplace_back(std::string(kGlobalStep), absl::StrCat(step));
  row.emplace_back("_step", absl::StrCat(rows_));
  row.emplace_back("_timestamp", JsonNumber(absl::ToDoubleSeconds(now - absl::UnixEpoch())));
  row.emplace_back("_runtime", JsonNumber(absl::ToDoubleSeconds(now - start_)));
  ProtoMessage history;
  ProtoMessage summary;
  for (const auto& [key, value] : row) {
    history.Message(kItems, Item(key, value, /*nested=*/true));
    summary.Message(kItems, Item(key, value, /*nested=*/true));
    summary_[key] = value;
  }
  ProtoMessage history_step;
  if (rows_ != 0) history_step.Varint(1, rows_);
  history.Message(kHistoryStep, history_step);
  ++rows_;
  if (absl::Status s = AppendRecord(record::kHistory, history.bytes()); !s.ok()) return s;
  return AppendRecord(record::kSummary, summary.bytes());
}

absl::Status WandbLogger::save() {
  if (file_ == nullptr) return absl::OkStatus();
  if (absl::Status s = file_->Sync(); !s.ok()) return s;
  return WriteFiles();
}

// files/config.yaml (each key's value under `value`, as wandb writes it) and files/wandb-summary.json.
absl::Status WandbLogger::WriteFiles() {
  YAML::Emitter config;
  config << YAML::BeginMap;
  config << YAML::Key << "_wandb" << YAML::Value << YAML::BeginMap << YAML::Key << "value" << YAML::Value
         << YAML::BeginMap << YAML::Key << "writer" << YAML::Value << "kiln" << YAML::EndMap << YAML::EndMap;
  for (const auto& [key, value] : config_) {
    config << YAML::Key << key << YAML::Value << YAML::BeginMap << YAML::Key << "value" << YAML::Value;
    const Json parsed = Json::parse(value);
    if (parsed.is_string()) {
      config << YAML::DoubleQuoted << parsed.get<std::string>();
    } else {
      config << value;  // A bool or a number: the same text in YAML.
    }
    config << YAML::EndMap;
  }
  config << YAML::EndMap;
  const fs::path files = fs::path(run_dir_) / "files";
  if (absl::Status s = WriteFileDurably((files / "config.yaml").string(), absl::StrCat(config.c_str(), "\n"),
                                        {.what = "W&B run file"});
      !s.ok()) {
    return s;
  }
  std::string summary = "{";
  for (const auto& [key, value] : summary_) absl::StrAppend(&summary, Json(key).dump(), ": ", value, ", ");
  absl::StrAppend(&summary, "\"_wandb\": {\"runtime\": ", absl::ToInt64Seconds(absl::Now() - start_), "}}\n");
  return WriteFileDurably((files / "wandb-summary.json").string(), summary, {.what = "W&B run file"});
}

absl::Status WandbLogger::after_save_checkpoint(const SavedCheckpoints& checkpoints) {
  // Lightning: "all" logs at every save, True at every save when every checkpoint is kept, otherwise at the end.
  if (options_.log_model == LogModel::kAll || (options_.log_model == LogModel::kTrue && checkpoints.save_top_k == -1)) {
    // Kiln's checkpoint writer may still be writing: wait for this save's files (each appears whole, under its name,
    // when written), so that one the next save replaces is logged too.
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (const std::string& path : checkpoints.written) {
      while (true) {
        struct stat info {};
        const bool there = stat(path.c_str(), &info) == 0;
        auto logged = logged_.find(path);
        if (there && (logged == logged_.end() || logged->second < ModificationNanos(info))) break;
        if (absl::Now() > deadline) {
          return absl::DeadlineExceededError(absl::StrCat(
              "checkpoint ", path, " was not on the disk a minute after it was saved; it cannot be logged to W&B"));
        }
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    if (absl::Status s = LogCheckpoints(checkpoints); !s.ok()) return s;
  }
  if (options_.log_model != LogModel::kFalse) checkpoints_ = checkpoints;
  return absl::OkStatus();
}

// Lightning's _scan_checkpoints and _scan_and_log_checkpoints: the callback's latest, best and top-k files on the
// disk, oldest first, each not logged yet (or changed since), each as files/<checkpoint_name>/v<N>/model.ckpt with
// metadata.json beside it, in one files record.
absl::Status WandbLogger::LogCheckpoints(const SavedCheckpoints& checkpoints) {
  if (absl::Status s = setup(); !s.ok()) return s;
  std::map<std::string, std::optional<double>> found;  // Path -> score.
  if (!checkpoints.last_model_path.empty()) found[checkpoints.last_model_path] = checkpoints.current_score;
  if (!checkpoints.best_model_path.empty()) found[checkpoints.best_model_path] = checkpoints.best_model_score;
  for (const auto& [path, score] : checkpoints.best_k_models) found[path] = score;
  std::vector<std::pair<int64_t, std::string>> files;  // Modification time (ns), path.
  for (const auto& [path, unused] : found) {
    struct stat info {};
    if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;  // Not written yet, or removed.
    auto logged = logged_.find(path);
    if (logged != logged_.end() && logged->second >= ModificationNanos(info)) continue;
    files.emplace_back(ModificationNanos(info), path);
  }
  if (files.empty()) return absl::OkStatus();
  std::sort(files.begin(), files.end());
  const std::string name = options_.checkpoint_name.value_or(absl::StrCat("model-", id_));
  ProtoMessage record;
  for (const auto& [mtime, path] : files) {
    const std::string version = absl::StrCat("v", versions_);
    const fs::path folder = fs::path(run_dir_) / "files" / name / version;
    std::error_code error;
    fs::create_directories(folder, error);
    if (error) {
      return absl::InternalError(absl::StrCat("cannot create ", folder.string(), " for checkpoint ", path, ": ",
                                              error.message()));
    }
    const fs::path model = folder / "model.ckpt";
    fs::create_hard_link(path, model, error);  // The checkpoint's bytes as they are now: a rename replaces the file.
    if (error) {
      absl::StatusOr<std::string> contents = ReadWhole(path);
      if (!contents.ok()) return contents.status();
      if (absl::Status s = WriteFileDurably(model.string(), *contents, {.what = "W&B checkpoint file"}); !s.ok()) {
        return s;
      }
    } else if (absl::Status s = SyncFolder(folder.string()); !s.ok()) {
      return s;
    }
    // Lightning's artifact metadata, and the aliases it logs the artifact with.
    Json metadata;
    const std::optional<double>& score = found[path];
    metadata["score"] = score.has_value() ? Json::parse(JsonNumber(*score), nullptr, true, false) : Json();
    metadata["original_filename"] = fs::path(path).filename().string();
    Json callback;
    callback["monitor"] = checkpoints.monitor.has_value() ? Json(*checkpoints.monitor) : Json();
    callback["mode"] = checkpoints.mode;
    callback["save_last"] = checkpoints.save_last;
    callback["save_top_k"] = checkpoints.save_top_k;
    callback["save_weights_only"] = checkpoints.save_weights_only;
    callback["_every_n_train_steps"] = checkpoints.every_n_train_steps;
    metadata["ModelCheckpoint"] = callback;
    metadata["aliases"] = path == checkpoints.best_model_path ? Json::array({"latest", "best"}) : Json::array({"latest"});
    if (absl::Status s = WriteFileDurably((folder / "metadata.json").string(), metadata.dump(2) + "\n",
                                          {.what = "W&B run file"});
        !s.ok()) {
      return s;
    }
    for (const char* file : {"model.ckpt", "metadata.json"}) {
      record.Message(kFilesItems, ProtoMessage().Bytes(kFilesItemPath, absl::StrCat(name, "/", version, "/", file)));
    }
    logged_[path] = mtime;
    ++versions_;
  }
  return AppendRecord(record::kFiles, record.bytes());
}

absl::Status WandbLogger::finalize_with_status(absl::string_view status) {
  if (file_ == nullptr || finalized_) return absl::OkStatus();
  absl::Status result = absl::OkStatus();
  // Lightning logs the checkpoints kept for the end only after a successful run.
  if (checkpoints_.has_value() && status == "success") result = LogCheckpoints(*checkpoints_);
  const absl::Time now = absl::Now();
  end_offset_ = file_->offset();
  end_records_ = records_;
  ProtoMessage summary;
  for (const auto& [key, value] : summary_) summary.Message(kItems, Item(key, value, /*nested=*/true));
  if (absl::Status s = AppendRecord(record::kSummary, summary.bytes()); !s.ok() && result.ok()) result = s;
  ProtoMessage exit;
  if (status == "failed") exit.Varint(kExitCode, 1);
  if (const int64_t runtime = absl::ToInt64Seconds(now - start_); runtime != 0) exit.Varint(kExitRuntime, runtime);
  if (absl::Status s = AppendRecord(record::kExit, exit.bytes()); !s.ok() && result.ok()) result = s;
  if (absl::Status s = file_->Close(); !s.ok() && result.ok()) result = s;
  if (absl::Status s = WriteFiles(); !s.ok() && result.ok()) result = s;
  finalized_ = true;
  return result;
}

}  // namespace kiln
