#include "trainer/cli/output_locations.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trainer/loggers/log_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// What a run writes below --default_root_dir at most, e.g.
// "/lightning_logs/version_123/checkpoints/epoch=1234-step=1234567-v12.ckpt.tmp-1234567", with room to spare for a
// longer --log_name or filename (a --log_name longer than this is checked on its own, as a name).
constexpr size_t kRunFolderRoom = 160;

absl::Status Refuse(absl::string_view flag, const std::string& value, absl::string_view problem,
                    absl::string_view fix) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": ", problem, "; ", fix));
}

// Whether `a` and `b` name one file: the same inode when both exist (through symbolic and hard links alike),
// else the same path once links and "." and ".." are resolved.
bool SameFile(const std::string& a, const std::string& b) {
  struct stat first;
  struct stat second;
  if (::stat(a.c_str(), &first) == 0 && ::stat(b.c_str(), &second) == 0) {
    return first.st_dev == second.st_dev && first.st_ino == second.st_ino;
  }
  std::error_code error_a;
  std::error_code error_b;
  const fs::path canonical_a = fs::weakly_canonical(fs::absolute(a), error_a);
  const fs::path canonical_b = fs::weakly_canonical(fs::absolute(b), error_b);
  return !error_a && !error_b && canonical_a == canonical_b;
}

// The files `config` reads, as (flag, path): the data (or the digits file --data=digits reads), the model, the
// checkpoint, the rows to predict on.
std::vector<std::pair<std::string, std::string>> InputFiles(const FitConfig& config) {
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const std::string& file : config.config_files) inputs.emplace_back("config", file);
  if (config.data.data != "synthetic" && config.data.data != "digits") inputs.emplace_back("data", config.data.data);
  if (config.data.data == "digits") inputs.emplace_back("digits_path", config.data.digits_path);
  if (!config.data.predict_data.empty()) inputs.emplace_back("predict_data", config.data.predict_data);
  if (!config.data.val_data.empty()) inputs.emplace_back("val_data", config.data.val_data);
  if (config.model.model != "mlp" && config.model.model != "cnn") inputs.emplace_back("model", config.model.model);
  if (!config.ckpt_path.empty() && config.ckpt_path != "last" && config.ckpt_path != "best") {
    inputs.emplace_back("ckpt_path", config.ckpt_path);
  }
  return inputs;
}

// No output file may be an input (writing it would destroy what the run reads, or read what it half wrote) or
// another output.
absl::Status CheckOutputsSpareInputs(const FitConfig& config) {
  std::vector<std::pair<std::string, std::string>> outputs;
  if (config.mode == "predict") outputs.emplace_back("predictions", config.outputs.predictions);
  if (!config.outputs.summary_json.empty()) outputs.emplace_back("summary_json", config.outputs.summary_json);
  const std::vector<std::pair<std::string, std::string>> inputs = InputFiles(config);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag, path] = outputs[i];
    for (const auto& [input_flag, input] : inputs) {
      if (SameFile(path, input)) {
        return Refuse(flag, path,
                      absl::StrCat("it is the file --", input_flag, " names (", input, "), which the run reads"),
                      "write it to another file");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (SameFile(path, outputs[j].second)) {
        return Refuse(flag, path, absl::StrCat("it is the file --", outputs[j].first, " writes"),
                      "write the two to different files");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFolderLocation(absl::string_view flag, const std::string& folder, size_t room) {
  if (folder.size() + room >= PATH_MAX) {
    return Refuse(flag, folder, absl::StrCat("the path is ", folder.size(), " characters, and with what fit writes "
                                             "inside it, paths would pass the system's limit of ", PATH_MAX),
                  "pass a shorter path");
  }
  std::error_code error;
  const fs::path absolute = fs::absolute(folder, error);
  if (error) return Refuse(flag, folder, error.message(), "pass another folder");
  const long name_max = ::pathconf("/", _PC_NAME_MAX);
  for (const fs::path& part : absolute) {
    if (name_max > 0 && part.native().size() > static_cast<size_t>(name_max)) {
      return Refuse(flag, folder,
                    absl::StrCat("the name '", part.native().substr(0, 40), "...' is ", part.native().size(),
                                 " characters, more than the file system's ", name_max),
                    "pass shorter names");
    }
  }
  // The nearest part of the path that exists must be a folder that takes new entries.
  fs::path existing = absolute;
  while (!fs::exists(existing, error) && existing.has_parent_path() && existing != existing.parent_path()) {
    existing = existing.parent_path();
  }
  if (!fs::is_directory(existing, error)) {
    return Refuse(flag, folder, absl::StrCat("'", existing.string(), "' is a file, not a folder"),
                  "pass a folder (or a path where one can be created)");
  }
  std::string probe = (existing / ".kiln-write-check-XXXXXX").string();
  if (::mkdtemp(probe.data()) == nullptr) {
    const int code = errno;
    return Refuse(flag, folder, absl::StrCat("cannot create anything in '", existing.string(), "' (",
                                             std::strerror(code), ")"),
                  "pass a folder you can write to");
  }
  ::rmdir(probe.c_str());
  return absl::OkStatus();
}

absl::Status CheckFileLocation(absl::string_view flag, const std::string& file) {
  std::error_code error;
  if (fs::is_directory(file, error)) {
    return Refuse(flag, file, "it is a folder", "pass the path of a file to write (it is replaced if it exists)");
  }
  if (file.size() >= PATH_MAX) {
    return Refuse(flag, file, absl::StrCat("the path is longer than the system's limit of ", PATH_MAX),
                  "pass a shorter path");
  }
  const fs::path parent = fs::path(file).parent_path();
  // Room for the file's name and the temporary name it is written under.
  return CheckFolderLocation(flag, parent.empty() ? "." : parent.string(),
                             fs::path(file).filename().native().size() + 32);
}

// The run folder's config.yaml, when fit will write it and its folder is known before the run (--log_version names
// it; otherwise the run claims a new folder, which holds nothing): never one of the --config files (a path, a symbolic
// or a hard link to it), and never an existing file unless --save_config_overwrite, as LightningCLI refuses.
absl::Status CheckSavedConfig(const FitConfig& config) {
  const OutputSpec& outputs = config.outputs;
  if (config.mode != "fit" || outputs.loggers.empty() || config.trainer.fast_dev_run != 0 ||
      !outputs.log_dir.version.has_value()) {
    return absl::OkStatus();
  }
  const std::string saved = VersionDir(outputs.log_dir) + "/config.yaml";
  for (const std::string& input : config.config_files) {
    if (SameFile(saved, input)) {
      return Refuse("config", input,
                    absl::StrCat("it is the run folder's config.yaml (", saved, "), which fit writes for --log_version=",
                                 *outputs.log_dir.version, "; fit would replace the file you wrote"),
                    "copy it elsewhere and pass the copy, or pass another --log_version (or none: a new folder)");
    }
  }
  std::error_code error;
  // A folder another run holds now is that run's to name (its process), before its files.
  const std::string folder = VersionDir(outputs.log_dir);
  if (fs::is_directory(folder, error)) {
    absl::StatusOr<FolderHold> hold = HoldRunFolder(folder);
    if (!hold.ok()) return Refuse("log_version", absl::StrCat(*outputs.log_dir.version), hold.status().message(),
                                  "wait for it to end, or pass another --log_version");
    ReleaseRunFolder(*hold);
  }
  if (fs::exists(saved, error) && !outputs.save_config_overwrite) {
    return Refuse("log_version", absl::StrCat(*outputs.log_dir.version),
                  absl::StrCat(saved, " exists already: another run's configuration"),
                  "pass another --log_version (or none: a new folder), or --save_config_overwrite=true to replace it");
  }
  return absl::OkStatus();
}

absl::Status CheckOutputLocations(const FitConfig& config) {
  if (absl::Status spared = CheckOutputsSpareInputs(config); !spared.ok()) return spared;
  if (absl::Status saved = CheckSavedConfig(config); !saved.ok()) return saved;
  const OutputSpec& outputs = config.outputs;
  if (config.mode == "fit" && config.trainer.fast_dev_run == 0 &&
      (!outputs.loggers.empty() || outputs.report || config.trainer.enable_checkpointing)) {
    const long name_max = ::pathconf("/", _PC_NAME_MAX);
    if (name_max > 0 && outputs.log_dir.name.size() > static_cast<size_t>(name_max)) {
      return Refuse("log_name", outputs.log_dir.name.substr(0, 40) + "...",
                    absl::StrCat("the name is ", outputs.log_dir.name.size(), " characters, more than the file "
                                 "system's ", name_max),
                    "pass a shorter name");
    }
    if (absl::Status checked = CheckFolderLocation("default_root_dir", config.trainer.default_root_dir,
                                                   kRunFolderRoom + outputs.log_dir.name.size());
        !checked.ok()) {
      return checked;
    }
  }
  if (config.mode == "predict") {
    if (absl::Status checked = CheckFileLocation("predictions", outputs.predictions); !checked.ok()) return checked;
  }
  if (!outputs.summary_json.empty()) {
    if (absl::Status checked = CheckFileLocation("summary_json", outputs.summary_json); !checked.ok()) return checked;
  }
  return absl::OkStatus();
}

}  // namespace kiln
