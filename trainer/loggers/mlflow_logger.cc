#include "trainer/loggers/mlflow_logger.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "trainer/io/durable_file.h"
#include "trainer/io/http_client.h"
#include "trainer/loggers/csv_logger.h"
#include "yaml-cpp/yaml.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr size_t kParamValueLength = 250;  // Lightning cuts each value here.
constexpr size_t kParamsPerBatch = 100;    // Lightning's batches, within MLflow's limit.
constexpr size_t kMetricsPerBatch = 1000;  // MLflow's limit per log-batch request.

struct MetricPoint {
  std::string key;
  double value = 0;
  int64_t timestamp = 0;
  int64_t step = 0;
};

int64_t NowMillis() { return absl::ToUnixMillis(absl::Now()); }

std::string UserName() {
  if (const char* user = std::getenv("USER"); user != nullptr && *user != '\0') return user;
  if (const passwd* entry = getpwuid(getuid()); entry != nullptr) return entry->pw_name;
  return "unknown";
}

std::string ProgramPath() {
  std::error_code error;
  const fs::path path = fs::read_symlink("/proc/self/exe", error);
  return error ? std::string("kiln") : path.string();
}

// 32 random hex digits: a version-4 UUID without its dashes, as MLflow names runs.
std::string NewRunId() {
  std::random_device device;
  std::string id;
  for (int i = 0; i < 32; ++i) {
    int digit = static_cast<int>(device() % 16);
    if (i == 12) digit = 4;                // The version.
    if (i == 16) digit = 8 | (digit & 3);  // The variant.
    id.push_back("0123456789abcdef"[digit]);
  }
  return id;
}

// 18 random decimal digits, the first not 0: MLflow's file store's experiment ids.
std::string NewExperimentId() {
  std::random_device device;
  std::string id(1, static_cast<char>('1' + device() % 9));
  while (id.size() < 18) id.push_back(static_cast<char>('0' + device() % 10));
  return id;
}

// A YAML single-quoted scalar: always read back as that text.
std::string Quoted(absl::string_view text) { return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "''"}}), "'"); }

// Lightning's rule: MLflow accepts letters, digits, and _ / . - and space in metric names.
std::string MetricKey(absl::string_view name, const std::string& prefix) {
  std::string key;
  const std::string full = prefix.empty() ? std::string(name) : absl::StrCat(prefix, "-", name);
  for (char c : full) {
    if (absl::ascii_isalnum(c) || c == '_' || c == '/' || c == '.' || c == ' ' || c == '-') key.push_back(c);
  }
  return key;
}

// A key becomes a file under the run's folder: one that would leave it is refused, as MLflow refuses it.
absl::Status CheckKeyAsPath(absl::string_view kind, absl::string_view key) {
  const bool escapes = key.empty() || absl::StartsWith(key, "/") || key == "." || key == ".." ||
                       absl::StrContains(absl::StrCat("/", key, "/"), "/../") ||
                       absl::StrContains(absl::StrCat("/", key, "/"), "/./") || absl::StrContains(key, "//");
  if (escapes) {
    return absl::InvalidArgumentError(
        absl::StrCat("MLflow ", kind, " name '", key, "' is not a relative path inside the run; rename it"));
  }
  return absl::OkStatus();
}

// The local folder of a file: URI (file:./mlruns, file:/abs, file:///abs).
std::string FileUriPath(absl::string_view uri) {
  absl::string_view path = uri;
  absl::ConsumePrefix(&path, "file:");
  if (absl::StartsWith(path, "//")) {
    path.remove_prefix(2);
    path = path.substr(std::min(path.find('/'), path.size()));  // file://host/path: the host is dropped.
  }
  return std::string(path);
}

std::string FileUri(const std::string& path) { return absl::StrCat("file://", path); }

// A file's bytes; NotFound naming it when it cannot be read.
absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", path));
  return out.str();
}

// Python's repr of a float, as Lightning's yaml.dump writes a score (near enough: the same value).
std::string ScoreText(std::optional<double> score) { return score.has_value() ? ShortestDouble(*score) : "null"; }

}  // namespace

// The store a run is logged to: MLflow's REST API, or its file store. Errors name the server or the folder.
class MLFlowLogger::Store {
 public:
  struct Run {
    std::string run_id;
    std::string experiment_id;
    std::string artifact_uri;
  };
  virtual ~Store() = default;
  // The active experiment named `name`; nullopt when there is none.
  virtual absl::StatusOr<std::optional<std::string>> ExperimentByName(const std::string& name) = 0;
  virtual absl::StatusOr<std::string> CreateExperiment(const std::string& name,
                                                       const std::optional<std::string>& artifact_location) = 0;
  virtual absl::StatusOr<Run> CreateRun(const std::string& experiment_id, int64_t start_time,
                                        const std::map<std::string, std::string>& tags,
                                        const std::optional<std::string>& run_name) = 0;
  virtual absl::StatusOr<Run> GetRun(const std::string& run_id) = 0;
  virtual absl::Status LogBatch(const std::string& run_id, const std::vector<MetricPoint>& metrics,
                                const std::vector<std::pair<std::string, std::string>>& params) = 0;
  virtual absl::Status Flush() { return absl::OkStatus(); }
  virtual absl::Status SetTerminated(const Run& run, const std::string& status, int64_t end_time) = 0;
  // Stores `contents` as the artifact <artifact_path>/<file_name> of `run`.
  virtual absl::Status LogArtifact(const Run& run, const std::string& artifact_path, const std::string& file_name,
                                   absl::string_view contents) = 0;
  // The run's folder in a file store; empty over REST.
  virtual std::string RunDir(const Run& run) const { return ""; }
};

namespace {

// MLflow's REST API (mlflow/server/handlers.py's routes, /api/2.0/mlflow/...).
class RestStore final : public MLFlowLogger::Store {
 public:
  RestStore(std::string base, absl::Duration timeout) : base_(std::move(base)), timeout_(timeout) {
    while (absl::EndsWith(base_, "/")) base_.pop_back();
  }

  absl::StatusOr<std::optional<std::string>> ExperimentByName(const std::string& name) override {
    absl::StatusOr<Reply> reply = Call("GET", "experiments/get-by-name?experiment_name=" + UrlEscape(name), nullptr,
                                       /*missing_ok=*/true);
    if (!reply.ok()) return reply.status();
    if (reply->missing) return std::optional<std::string>();
    const Json& experiment = reply->json["experiment"];
    if (experiment.value("lifecycle_stage", "active") == "deleted") return std::optional<std::string>();
    return std::optional<std::string>(experiment.value("experiment_id", ""));
  }

  absl::StatusOr<std::string> CreateExperiment(const std::string& name,
                                               const std::optional<std::string>& artifact_location) override {
    Json body = {{"name", name}};
    if (artifact_location.has_value()) body["artifact_location"] = *artifact_location;
    absl::StatusOr<Reply> reply = Call("POST", "experiments/create", &body);
    if (!reply.ok()) return reply.status();
    return reply->json.value("experiment_id", "");
  }

  absl::StatusOr<Run> CreateRun(const std::string& experiment_id, int64_t start_time,
                                const std::map<std::string, std::string>& tags,
                                const std::optional<std::string>& run_name) override {
    Json body = {{"experiment_id", experiment_id}, {"start_time", start_time}, {"user_id", UserName()}};
    body["tags"] = Json::array();
    for (const auto& [key, value] : tags) body["tags"].push_back({{"key", key}, {"value", value}});
    if (run_name.has_value()) body["run_name"] = *run_name;
    absl::StatusOr<Reply> reply = Call("POST", "runs/create", &body);
    if (!reply.ok()) return reply.status();
    return RunOf(reply->json);
  }

  absl::StatusOr<Run> GetRun(const std::string& run_id) override {
    absl::StatusOr<Reply> reply = Call("GET", "runs/get?run_id=" + UrlEscape(run_id), nullptr);
    if (!reply.ok()) return reply.status();
    return RunOf(reply->json);
  }

  absl::Status LogBatch(const std::string& run_id, const std::vector<MetricPoint>& metrics,
                        const std::vector<std::pair<std::string, std::string>>& params) override {
    Json body = {{"run_id", run_id}, {"metrics", Json::array()}, {"params", Json::array()}, {"tags", Json::array()}};
    for (const MetricPoint& metric : metrics) {
      Json value = metric.value;
      // Protocol buffers' JSON spells the values JSON has no numbers for.
      if (std::isnan(metric.value)) value = "NaN";
      if (std::isinf(metric.value)) value = metric.value > 0 ? "Infinity" : "-Infinity";
      body["metrics"].push_back(
          {{"key", metric.key}, {"value", value}, {"timestamp", metric.timestamp}, {"step", metric.step}});
    }
    for (const auto& [key, value] : params) body["params"].push_back({{"key", key}, {"value", value}});
    return Call("POST", "runs/log-batch", &body).status();
  }

  absl::Status SetTerminated(const Run& run, const std::string& status, int64_t end_time) override {
    Json body = {{"run_id", run.run_id}, {"status", status}, {"end_time", end_time}};
    return Call("POST", "runs/update", &body).status();
  }

  // Through the server's artifact proxy (mlflow server --serve-artifacts): PUT
  // <server>/api/2.0/mlflow-artifacts/artifacts/<the artifact URI's path>/<artifact_path>/<file_name>.
  absl::Status LogArtifact(const Run& run, const std::string& artifact_path, const std::string& file_name,
                           absl::string_view contents) override {
    absl::string_view uri = run.artifact_uri;
    if (!absl::ConsumePrefix(&uri, "mlflow-artifacts:")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MLflow run ", run.run_id, "'s artifact_uri ", run.artifact_uri, " on ", base_,
          " is not served by the tracking server (mlflow-artifacts:); Kiln uploads artifacts through the server "
          "alone: start it with --serve-artifacts (MLflow's default) and a new experiment, or leave log_model off"));
    }
    std::string server = base_;
    if (absl::ConsumePrefix(&uri, "//")) {  // mlflow-artifacts://host:port/path names its own server.
      const size_t slash = uri.find('/');
      server = absl::StrCat("http://", uri.substr(0, slash));
      uri = slash == absl::string_view::npos ? "" : uri.substr(slash);
    }
    std::string path = absl::StrCat(uri, "/", artifact_path.empty() ? "" : artifact_path + "/", file_name);
    while (absl::StrContains(path, "//")) path = absl::StrReplaceAll(path, {{"//", "/"}});
    HttpRequest request{.method = "PUT",
                        .url = absl::StrCat(server, "/api/2.0/mlflow-artifacts/artifacts", UrlEscape(path, true)),
                        .content_type = "application/octet-stream",
                        .body = std::string(contents),
                        .timeout = timeout_};
    absl::StatusOr<HttpResponse> response = SendHttpRequest(request);
    if (!response.ok()) return response.status();
    if (response->status != 200) {
      return absl::UnavailableError(absl::StrCat("MLflow server ", base_, " refused the artifact upload PUT ",
                                                 request.url, ": HTTP ", response->status, ": ",
                                                 response->body.substr(0, 500)));
    }
    return absl::OkStatus();
  }

 private:
  struct Reply {
    Json json;
    bool missing = false;
  };

  // One call of the API: the reply's JSON, or an error naming the URL and the server's error_code and message.
  absl::StatusOr<Reply> Call(const std::string& method, const std::string& endpoint, const Json* body,
                             bool missing_ok = false) {
    HttpRequest request{
        .method = method, .url = absl::StrCat(base_, "/api/2.0/mlflow/", endpoint), .timeout = timeout_};
    if (body != nullptr) {
      request.content_type = "application/json";
      request.body = body->dump();
    }
    absl::StatusOr<HttpResponse> response = SendHttpRequest(request);
    if (!response.ok()) {
      return absl::Status(response.status().code(),
                          absl::StrCat("MLflow tracking server ", base_, ": ", response.status().message()));
    }
    Reply reply;
    const Json parsed = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (response->status == 200 && !parsed.is_discarded()) {
      reply.json = parsed;
      return reply;
    }
    std::string error_code;
    std::string message = response->body.substr(0, 500);
    if (parsed.is_object()) {
      error_code = parsed.value("error_code", "");
      message = parsed.value("message", message);
    }
    if (missing_ok && (response->status == 404 || error_code == "RESOURCE_DOES_NOT_EXIST")) {
      reply.missing = true;
      return reply;
    }
    const std::string what =
        absl::StrCat("MLflow tracking server ", base_, " refused ", method, " ", request.url, ": HTTP ",
                     response->status, error_code.empty() ? "" : " ", error_code, ": ", message);
    if (response->status == 404 && error_code.empty()) {
      return absl::NotFoundError(absl::StrCat(what, " (is this an MLflow tracking server?)"));
    }
    return absl::Status(response->status >= 500 ? absl::StatusCode::kUnavailable : absl::StatusCode::kInvalidArgument,
                        what);
  }

  static absl::StatusOr<Run> RunOf(const Json& reply) {
    const Json& info = reply["run"]["info"];
    Run run{.run_id = info.value("run_id", ""),
            .experiment_id = info.value("experiment_id", ""),
            .artifact_uri = info.value("artifact_uri", "")};
    if (run.run_id.empty()) return absl::DataLossError(absl::StrCat("MLflow's reply has no run id: ", reply.dump()));
    return run;
  }

  std::string base_;
  const absl::Duration timeout_;
};

// MLflow's file store (mlflow/store/tracking/file_store.py's layout), every file written whole.
class FileStore final : public MLFlowLogger::Store {
 public:
  explicit FileStore(std::string root) : root_(std::move(root)) {}

  absl::Status Open() {
    std::error_code error;
    fs::path absolute = fs::absolute(root_, error);
    if (!error) root_ = absolute.lexically_normal().string();
    while (root_.size() > 1 && absl::EndsWith(root_, "/")) root_.pop_back();
    if (fs::exists(root_, error) && !fs::is_directory(root_, error)) {
      return absl::FailedPreconditionError(
          absl::StrCat("MLflow file store ", root_,
                       " is a file, not a folder; give save_dir or a file: tracking URI "
                       "that names a folder"));
    }
    if (!fs::exists(root_ + "/0/meta.yaml", error) && !fs::exists(root_, error)) {
      // A new store starts with MLflow's Default experiment, as MLflow's own FileStore makes it.
      if (absl::Status s = WriteExperimentMeta("0", "Default", std::nullopt); !s.ok()) return s;
    }
    fs::create_directories(root_ + "/.trash", error);
    if (error) {
      return absl::InternalError(absl::StrCat("cannot create the MLflow file store ", root_, ": ", error.message()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<std::string>> ExperimentByName(const std::string& name) override {
    std::error_code error;
    for (const fs::directory_entry& entry : fs::directory_iterator(root_, error)) {
      if (!entry.is_directory() || absl::StartsWith(entry.path().filename().string(), ".")) continue;
      absl::StatusOr<YAML::Node> meta = ReadMeta(entry.path().string() + "/meta.yaml");
      if (!meta.ok()) continue;  // Not an experiment (MLflow skips such folders too).
      if ((*meta)["name"] && (*meta)["name"].as<std::string>() == name &&
          (!(*meta)["lifecycle_stage"] || (*meta)["lifecycle_stage"].as<std::string>() == "active")) {
        return std::optional<std::string>(entry.path().filename().string());
      }
    }
    if (error) return absl::InternalError(absl::StrCat("cannot list MLflow file store ", root_, ": ", error.message()));
    return std::optional<std::string>();
  }

  absl::StatusOr<std::string> CreateExperiment(const std::string& name,
                                               const std::optional<std::string>& artifact_location) override {
    std::string id = NewExperimentId();
    if (absl::Status s = WriteExperimentMeta(id, name, artifact_location); !s.ok()) return s;
    return id;
  }

  absl::StatusOr<Run> CreateRun(const std::string& experiment_id, int64_t start_time,
                                const std::map<std::string, std::string>& tags,
                                const std::optional<std::string>& run_name) override {
    absl::StatusOr<YAML::Node> experiment = ReadMeta(absl::StrCat(root_, "/", experiment_id, "/meta.yaml"));
    if (!experiment.ok()) return experiment.status();
    Run run{.run_id = NewRunId(), .experiment_id = experiment_id};
    run.artifact_uri =
        absl::StrCat((*experiment)["artifact_location"].as<std::string>(), "/", run.run_id, "/artifacts");
    std::map<std::string, std::string> all = tags;
    // MLflow names a run that has no name.
    std::string name =
        run_name.value_or(all.count("mlflow.runName") > 0 ? all["mlflow.runName"] : "kiln-" + run.run_id.substr(0, 8));
    all["mlflow.runName"] = name;
    RunMeta meta{.run = run, .run_name = name, .user_id = UserName(), .start_time = start_time};
    metas_[run.run_id] = meta;
    if (absl::Status s = WriteRunMeta(meta); !s.ok()) return s;
    const std::string dir = RunDir(run);
    std::error_code error;
    for (const char* folder : {"metrics", "params", "artifacts", "tags"})
      fs::create_directories(dir + "/" + folder, error);
    if (error) return absl::InternalError(absl::StrCat("cannot create MLflow run folder ", dir, ": ", error.message()));
    for (const auto& [key, value] : all) {
      if (absl::Status s = CheckKeyAsPath("tag", key); !s.ok()) return s;
      if (absl::Status s = WriteFileDurably(dir + "/tags/" + key, value, {.what = "MLflow tag"}); !s.ok()) return s;
    }
    return run;
  }

  absl::StatusOr<Run> GetRun(const std::string& run_id) override {
    std::error_code error;
    for (const fs::directory_entry& entry : fs::directory_iterator(root_, error)) {
      if (!entry.is_directory() || absl::StartsWith(entry.path().filename().string(), ".")) continue;
      const std::string meta_path = absl::StrCat(entry.path().string(), "/", run_id, "/meta.yaml");
      if (!fs::exists(meta_path, error)) continue;
      absl::StatusOr<YAML::Node> meta = ReadMeta(meta_path);
      if (!meta.ok()) return meta.status();
      try {
        RunMeta run{.run = {.run_id = run_id,
                            .experiment_id = entry.path().filename().string(),
                            .artifact_uri = (*meta)["artifact_uri"].as<std::string>()},
                    .run_name = (*meta)["run_name"] ? (*meta)["run_name"].as<std::string>() : "",
                    .user_id = (*meta)["user_id"] ? (*meta)["user_id"].as<std::string>() : UserName(),
                    .start_time = (*meta)["start_time"] ? (*meta)["start_time"].as<int64_t>() : NowMillis()};
        metas_[run_id] = run;
        return run.run;
      } catch (const YAML::Exception& e) {
        return absl::DataLossError(
            absl::StrCat("MLflow run meta ", meta_path, " is not what MLflow writes: ", e.what()));
      }
    }
    return absl::NotFoundError(absl::StrCat("MLflow run '", run_id, "' is not in the file store ", root_,
                                            "; give the id of a run there (its folder's name), or no run_id"));
  }

  absl::Status LogBatch(const std::string& run_id, const std::vector<MetricPoint>& metrics,
                        const std::vector<std::pair<std::string, std::string>>& params) override {
    const std::string dir = RunDir(metas_.at(run_id).run);
    for (const auto& [key, value] : params) {
      if (absl::Status s = CheckKeyAsPath("param", key); !s.ok()) return s;
      const std::string path = dir + "/params/" + key;
      // MLflow keeps a param's first value: another one is refused, as MLflow refuses it.
      if (absl::StatusOr<std::string> old = ReadWhole(path); old.ok()) {
        if (*old == value) continue;
        return absl::InvalidArgumentError(absl::StrCat("MLflow param '", key, "' of run ", run_id, " is '", *old,
                                                       "' already; MLflow does not change a param's value (new: '",
                                                       value, "'): log to a new run"));
      }
      if (absl::Status s = WriteFileDurably(path, value, {.what = "MLflow param"}); !s.ok()) return s;
    }
    for (const MetricPoint& metric : metrics) {
      if (absl::Status s = CheckKeyAsPath("metric", metric.key); !s.ok()) return s;
      std::string& lines = metric_lines_[dir + "/metrics/" + metric.key];
      if (lines.empty()) lines = ReadWhole(dir + "/metrics/" + metric.key).value_or("");  // A continued run's.
      absl::StrAppend(&lines, metric.timestamp, " ", ShortestDouble(metric.value), " ", metric.step, "\n");
      pending_.insert(dir + "/metrics/" + metric.key);
    }
    return absl::OkStatus();
  }

  // Each metric file is written whole, with every line it has so far.
  absl::Status Flush() override {
    for (const std::string& path : pending_) {
      if (absl::Status s = WriteFileDurably(path, metric_lines_[path], {.what = "MLflow metric"}); !s.ok()) return s;
    }
    pending_.clear();
    return absl::OkStatus();
  }

  absl::Status SetTerminated(const Run& run, const std::string& status, int64_t end_time) override {
    RunMeta& meta = metas_.at(run.run_id);
    meta.status = status;
    meta.end_time = end_time;
    return WriteRunMeta(meta);
  }

  absl::Status LogArtifact(const Run& run, const std::string& artifact_path, const std::string& file_name,
                           absl::string_view contents) override {
    if (!absl::StartsWith(run.artifact_uri, "file:") && !absl::StartsWith(run.artifact_uri, "/")) {
      return absl::FailedPreconditionError(
          absl::StrCat("MLflow run ", run.run_id, "'s artifact_uri ", run.artifact_uri,
                       " is not a local folder; with a file store Kiln writes artifacts to local folders alone "
                       "(give an artifact_location of file:<folder>, or none)"));
    }
    if (!artifact_path.empty()) {
      if (absl::Status s = CheckKeyAsPath("artifact path", artifact_path); !s.ok()) return s;
    }
    const std::string path =
        absl::StrCat(FileUriPath(run.artifact_uri), "/", artifact_path.empty() ? "" : artifact_path + "/", file_name);
    return WriteFileDurably(path, contents, {.what = "MLflow artifact"});
  }

  std::string RunDir(const Run& run) const override {
    return absl::StrCat(root_, "/", run.experiment_id, "/", run.run_id);
  }

 private:
  struct RunMeta {
    Run run;
    std::string run_name;
    std::string user_id;
    int64_t start_time = 0;
    std::optional<int64_t> end_time;
    std::string status = "RUNNING";
  };

  static absl::StatusOr<YAML::Node> ReadMeta(const std::string& path) {
    try {
      YAML::Node node = YAML::LoadFile(path);
      if (!node.IsMap()) return absl::DataLossError(absl::StrCat(path, " is not a YAML mapping"));
      return node;
    } catch (const YAML::Exception& e) {
      return absl::NotFoundError(absl::StrCat("cannot read MLflow meta file ", path, ": ", e.what()));
    }
  }

  absl::Status WriteExperimentMeta(const std::string& id, const std::string& name,
                                   const std::optional<std::string>& artifact_location) {
    const int64_t now = NowMillis();
    std::string location = artifact_location.value_or(FileUri(absl::StrCat(root_, "/", id)));
    if (absl::StartsWith(location, "/")) location = FileUri(location);
    // yaml.safe_dump's form, keys in order.
    const std::string yaml =
        absl::StrCat("artifact_location: ", Quoted(location), "\ncreation_time: ", now, "\nexperiment_id: ", Quoted(id),
                     "\nlast_update_time: ", now, "\nlifecycle_stage: active\nname: ", Quoted(name), "\n");
    return WriteFileDurably(absl::StrCat(root_, "/", id, "/meta.yaml"), yaml, {.what = "MLflow experiment meta"});
  }

  absl::Status WriteRunMeta(const RunMeta& meta) {
    // MLflow's RunStatus numbers (mlflow/protos/service.proto).
    int status = 1;
    if (meta.status == "FINISHED") status = 3;
    if (meta.status == "FAILED") status = 4;
    if (meta.status == "KILLED") status = 5;
    const std::string yaml = absl::StrCat(
        "artifact_uri: ", Quoted(meta.run.artifact_uri),
        "\ndeleted_time: null\nend_time: ", meta.end_time.has_value() ? absl::StrCat(*meta.end_time) : "null",
        "\nentry_point_name: ''\nexperiment_id: ", Quoted(meta.run.experiment_id),
        "\nlifecycle_stage: active\nrun_id: ", Quoted(meta.run.run_id), "\nrun_name: ", Quoted(meta.run_name),
        "\nsource_name: ''\nsource_type: 4\nsource_version: ''\nstart_time: ", meta.start_time, "\nstatus: ", status,
        "\ntags: []\nuser_id: ", Quoted(meta.user_id), "\n");
    return WriteFileDurably(RunDir(meta.run) + "/meta.yaml", yaml, {.what = "MLflow run meta"});
  }

  std::string root_;
  std::map<std::string, RunMeta> metas_;             // By run id.
  std::map<std::string, std::string> metric_lines_;  // Each metric file's text, by path.
  std::set<std::string> pending_;                    // Metric files with lines not yet written.
};

}  // namespace

MLFlowLogger::MLFlowLogger(MLFlowLoggerOptions options) : options_(std::move(options)) {
  if (options_.tracking_uri.has_value() && !options_.tracking_uri->empty()) {
    tracking_uri_ = *options_.tracking_uri;
  } else if (const char* env = std::getenv("MLFLOW_TRACKING_URI"); env != nullptr && *env != '\0') {
    tracking_uri_ = env;  // Lightning's default argument.
  } else {
    tracking_uri_ = absl::StrCat("file:", options_.save_dir);
  }
}

MLFlowLogger::~MLFlowLogger() = default;

std::string MLFlowLogger::log_dir() const {
  return store_ == nullptr || run_id_.empty() ? ""
                                              : store_->RunDir({.run_id = run_id_, .experiment_id = experiment_id_});
}

absl::Status MLFlowLogger::setup() {
  if (store_ != nullptr) return absl::OkStatus();  // Set up already (fit, then test in one program).
  std::unique_ptr<Store> store;
  if (absl::StartsWith(tracking_uri_, "http://") || absl::StartsWith(tracking_uri_, "https://")) {
    if (absl::StatusOr<HttpUrl> url = ParseHttpUrl(tracking_uri_); !url.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("MLflow tracking_uri: ", url.status().message()));
    }
    store = std::make_unique<RestStore>(tracking_uri_, options_.timeout);
  } else if (absl::StartsWith(tracking_uri_, "file:") || !absl::StrContains(tracking_uri_, ":")) {
    auto file_store = std::make_unique<FileStore>(FileUriPath(tracking_uri_));
    if (absl::Status opened = file_store->Open(); !opened.ok()) return opened;
    store = std::move(file_store);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "MLflow tracking_uri '", tracking_uri_,
        "' is not one Kiln can log to: give http://host:port (an MLflow "
        "tracking server: mlflow server) or file:<folder> (MLflow's file store; or leave it out for save_dir)"));
  }

  Store::Run run;
  if (options_.run_id.has_value()) {
    absl::StatusOr<Store::Run> found = store->GetRun(*options_.run_id);
    if (!found.ok()) return found.status();
    run = *found;
  } else {
    absl::StatusOr<std::optional<std::string>> experiment = store->ExperimentByName(options_.experiment_name);
    if (!experiment.ok()) return experiment.status();
    std::string experiment_id;
    if (experiment->has_value()) {
      experiment_id = **experiment;
    } else {
      absl::StatusOr<std::string> created =
          store->CreateExperiment(options_.experiment_name, options_.artifact_location);
      if (!created.ok()) return created.status();
      experiment_id = *created;
    }
    // Lightning's tags: the user's, run_name as mlflow.runName (over one given among the tags), and MLflow's
    // context (resolve_tags): who ran what, from where.
    std::map<std::string, std::string> tags = options_.tags;
    if (options_.run_name.has_value()) tags["mlflow.runName"] = *options_.run_name;
    tags.emplace("mlflow.user", UserName());
    tags.emplace("mlflow.source.name", ProgramPath());
    tags.emplace("mlflow.source.type", "LOCAL");
    absl::StatusOr<Store::Run> created = store->CreateRun(experiment_id, NowMillis(), tags, options_.run_name);
    if (!created.ok()) return created.status();
    run = *created;
  }
  store_ = std::move(store);
  experiment_id_ = run.experiment_id;
  run_id_ = run.run_id;
  artifact_uri_ = run.artifact_uri;
  return absl::OkStatus();
}

absl::Status MLFlowLogger::log_hyperparams(const std::map<std::string, std::string>& params) {
  if (absl::Status s = setup(); !s.ok()) return s;
  std::vector<std::pair<std::string, std::string>> batch;
  for (const auto& [key, value] : params) {
    batch.emplace_back(key, value.substr(0, kParamValueLength));
    if (batch.size() == kParamsPerBatch) {
      if (absl::Status s = store_->LogBatch(run_id_, {}, batch); !s.ok()) return s;
      batch.clear();
    }
  }
  if (batch.empty()) return absl::OkStatus();
  return store_->LogBatch(run_id_, {}, batch);
}

absl::Status MLFlowLogger::log_metrics(const MetricMap& metrics, int64_t step) {
  if (absl::Status s = setup(); !s.ok()) return s;
  const int64_t now = NowMillis();
  std::vector<MetricPoint> points;
  for (const auto& [name, value] : metrics) {
    points.push_back({.key = MetricKey(name, options_.prefix), .value = value, .timestamp = now, .step = step});
    if (points.size() == kMetricsPerBatch) {
      if (absl::Status s = store_->LogBatch(run_id_, points, {}); !s.ok()) return s;
      points.clear();
    }
  }
  if (points.empty()) return absl::OkStatus();
  return store_->LogBatch(run_id_, points, {});
}

absl::Status MLFlowLogger::save() {
  if (store_ == nullptr) return absl::OkStatus();
  return store_->Flush();
}

absl::Status MLFlowLogger::after_save_checkpoint(const SavedCheckpoints& checkpoints) {
  // Lightning: "all" uploads at every save, True at every save when every checkpoint is kept, otherwise at the end.
  if (options_.log_model == LogModel::kAll || (options_.log_model == LogModel::kTrue && checkpoints.save_top_k == -1)) {
    // Lightning saves before it calls this; Kiln's writer may still be writing: wait for this save's files (each
    // appears whole, under its name, when written), so that one the next save replaces is uploaded too.
    const absl::Time deadline = absl::Now() + options_.timeout;
    for (const std::string& path : checkpoints.written) {
      while (true) {
        struct stat info {};
        const bool there = stat(path.c_str(), &info) == 0;
        const int64_t mtime = static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
        auto uploaded = uploaded_.find(path);
        if (there && (uploaded == uploaded_.end() || uploaded->second < mtime)) break;
        if (absl::Now() > deadline) {
          return absl::DeadlineExceededError(absl::StrCat("checkpoint ", path, " was not on the disk ",
                                                          absl::FormatDuration(options_.timeout),
                                                          " after it was saved; it cannot be logged to MLflow"));
        }
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    if (absl::Status s = UploadCheckpoints(checkpoints); !s.ok()) return s;
  }
  if (options_.log_model != LogModel::kFalse) checkpoints_ = checkpoints;
  return absl::OkStatus();
}

absl::Status MLFlowLogger::finalize_with_status(absl::string_view status) {
  if (store_ == nullptr || finalized_) return absl::OkStatus();
  absl::Status result = store_->Flush();
  if (checkpoints_.has_value() && result.ok()) result = UploadCheckpoints(*checkpoints_);
  const std::string mlflow_status = status == "failed" ? "FAILED" : "FINISHED";
  Store::Run run{.run_id = run_id_, .experiment_id = experiment_id_, .artifact_uri = artifact_uri_};
  if (absl::Status s = store_->SetTerminated(run, mlflow_status, NowMillis()); !s.ok() && result.ok()) result = s;
  finalized_ = true;
  return result;
}

// Lightning's _scan_checkpoints and _scan_and_log_checkpoints: the callback's latest, best and top-k files that are
// on the disk, oldest first, each not uploaded yet (or changed since), as <stem>/<file>, <stem>/metadata.yaml and
// <stem>/aliases.txt.
absl::Status MLFlowLogger::UploadCheckpoints(const SavedCheckpoints& checkpoints) {
  std::map<std::string, std::pair<std::optional<double>, std::string>> found;  // Path -> score, tag.
  if (!checkpoints.last_model_path.empty()) {
    found[checkpoints.last_model_path] = {checkpoints.current_score, "latest"};
  }
  if (!checkpoints.best_model_path.empty()) {
    found[checkpoints.best_model_path] = {checkpoints.best_model_score, "best"};
  }
  for (const auto& [path, score] : checkpoints.best_k_models) found[path] = {score, "best_k"};
  std::vector<std::pair<int64_t, std::string>> files;  // Modification time (ns), path.
  for (const auto& [path, unused] : found) {
    struct stat info {};
    if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;  // Not written yet, or removed.
    const int64_t mtime = static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
    auto uploaded = uploaded_.find(path);
    if (uploaded != uploaded_.end() && uploaded->second >= mtime) continue;
    files.emplace_back(mtime, path);
  }
  std::sort(files.begin(), files.end());
  Store::Run run{.run_id = run_id_, .experiment_id = experiment_id_, .artifact_uri = artifact_uri_};
  for (const auto& [mtime, path] : files) {
    absl::StatusOr<std::string> contents = ReadWhole(path);
    if (!contents.ok()) return contents.status();
    const fs::path file(path);
    const std::string stem = file.stem().string();
    if (absl::Status s = store_->LogArtifact(run, stem, file.filename().string(), *contents); !s.ok()) return s;
    // metadata.yaml, as Lightning's yaml.dump writes it (keys sorted).
    YAML::Emitter out;
    out << YAML::BeginMap;
    out << YAML::Key << "Checkpoint" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "_every_n_train_steps" << YAML::Value << checkpoints.every_n_train_steps;
    out << YAML::Key << "mode" << YAML::Value << checkpoints.mode;
    out << YAML::Key << "monitor" << YAML::Value;
    if (checkpoints.monitor.has_value()) {
      out << *checkpoints.monitor;
    } else {
      out << YAML::Null;
    }
    out << YAML::Key << "save_last" << YAML::Value << checkpoints.save_last;
    out << YAML::Key << "save_top_k" << YAML::Value << checkpoints.save_top_k;
    out << YAML::Key << "save_weights_only" << YAML::Value << checkpoints.save_weights_only;
    out << YAML::EndMap;
    out << YAML::Key << "original_filename" << YAML::Value << file.filename().string();
    out << YAML::Key << "score" << YAML::Value << YAML::Load(ScoreText(found[path].first));
    out << YAML::EndMap;
    const std::string metadata = absl::StrCat(out.c_str(), "\n");
    if (absl::Status s = store_->LogArtifact(run, stem, "metadata.yaml", metadata); !s.ok()) return s;
    // Python's str() of the list.
    const std::string aliases = path == checkpoints.best_model_path ? "['latest', 'best']" : "['latest']";
    if (absl::Status s = store_->LogArtifact(run, stem, "aliases.txt", aliases); !s.ok()) return s;
    uploaded_[path] = mtime;
  }
  return absl::OkStatus();
}

}  // namespace kiln
