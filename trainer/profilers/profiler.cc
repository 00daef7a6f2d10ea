#include "trainer/profilers/profiler.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/io/durable_file.h"
#include "trainer/profilers/advanced_profiler.h"
#include "trainer/profilers/pytorch_profiler.h"
#include "trainer/profilers/simple_profiler.h"

namespace kiln {

Profiler::Profiler(std::string dirpath, std::string filename)
    : dirpath_(std::move(dirpath)), filename_(std::move(filename)) {}

Profiler::~Profiler() = default;

absl::Status Profiler::setup(const ProfilerSetup& setup) {
  stage_ = setup.stage;
  local_rank_ = setup.local_rank;
  if (dirpath_.empty()) dirpath_ = setup.log_dir;
  return absl::OkStatus();
}

absl::Status Profiler::teardown() { return absl::OkStatus(); }

std::string Profiler::PrepareFilename(absl::string_view action_name, absl::string_view extension) const {
  std::vector<std::string> parts;
  if (!stage_.empty()) parts.push_back(stage_);
  if (!filename_.empty()) parts.push_back(filename_);
  if (local_rank_.has_value()) parts.push_back(absl::StrCat(*local_rank_));
  if (!action_name.empty()) parts.emplace_back(action_name);
  std::string base;
  // Lightning's: each of \ / : * ? " < > | and the line breaks and tabs becomes '_', runs of '_' one '_'.
  for (char c : absl::StrJoin(parts, "-")) {
    const bool bad = absl::string_view("\\/:*?\"<>|\n\r\t").find(c) != absl::string_view::npos;
    const char out = bad ? '_' : c;
    if (out == '_' && !base.empty() && base.back() == '_') continue;
    base.push_back(out);
  }
  base = std::string(absl::StripAsciiWhitespace(base));
  if (base.empty()) base = "profile";
  return absl::StrCat(base, extension);
}

absl::StatusOr<std::string> Profiler::OutputPath(absl::string_view name) const {
  if (dirpath_.empty()) return std::string();
  std::error_code error;
  std::filesystem::create_directories(dirpath_, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("profiler: cannot make the folder '", dirpath_, "' (",
                                                    error.message(), "); pass a dirpath this process may write"));
  }
  return absl::StrCat(dirpath_, "/", name);
}

std::string Profiler::StatsToString(const std::vector<std::pair<std::string, std::string>>& stats) const {
  std::string stage = stage_.empty() ? "" : absl::StrCat(absl::AsciiStrToUpper(stage_), " ");
  std::vector<std::string> lines = {absl::StrCat(stage, "Profiler Report")};
  for (const auto& [action, text] : stats) {
    std::string header = absl::StrCat("Profile stats for: ", action);
    if (local_rank_.has_value()) absl::StrAppend(&header, " rank: ", *local_rank_);
    lines.push_back(std::move(header));
    lines.push_back(text);
  }
  return absl::StrJoin(lines, "\n");
}

absl::Status Profiler::describe() {
  const std::string report = summary();
  absl::Status status = absl::OkStatus();
  if (!report.empty()) {
    if (!filename_.empty() && !dirpath_.empty()) {
      absl::StatusOr<std::string> path = OutputPath(PrepareFilename());
      if (!path.ok()) {
        status = path.status();
      } else {
        // Lightning appends to the file (an earlier entry point's report stays); the whole is replaced at once.
        std::string contents;
        if (std::ifstream in(*path, std::ios::binary); in) {
          contents.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        contents += report;
        status = WriteFileDurably(*path, contents);
      }
    } else if (local_rank_.value_or(0) == 0) {
      std::fputs(report.c_str(), stderr);
      std::fputc('\n', stderr);
      std::fflush(stderr);
    }
  }
  if (absl::Status torn = teardown(); !torn.ok() && status.ok()) status = torn;
  return status;
}

const std::vector<std::string>& ProfilerNames() {
  static const auto* const names = new std::vector<std::string>{"simple", "advanced", "pytorch"};
  return *names;
}

absl::StatusOr<std::unique_ptr<Profiler>> MakeProfiler(absl::string_view name, std::string dirpath,
                                                       std::string filename) {
  if (name == "simple") return std::make_unique<SimpleProfiler>(std::move(dirpath), std::move(filename));
  if (name == "advanced") return std::make_unique<AdvancedProfiler>(std::move(dirpath), std::move(filename));
  if (name == "pytorch") return std::make_unique<PyTorchProfiler>(std::move(dirpath), std::move(filename));
  return absl::InvalidArgumentError(absl::StrCat("profiler '", name, "' is not one Kiln has; pass ",
                                                 absl::StrJoin(ProfilerNames(), ", "),
                                                 " (Lightning's names), or leave it empty for none"));
}

std::string ShortTypeName(absl::string_view type_name) {
  // The last "::" outside template arguments.
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < type_name.size(); ++i) {
    const char c = type_name[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (depth == 0 && c == ':' && i + 1 < type_name.size() && type_name[i + 1] == ':') start = i + 2;
  }
  return std::string(type_name.substr(start));
}

}  // namespace kiln
