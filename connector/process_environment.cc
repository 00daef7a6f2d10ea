#include "connector/process_environment.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

std::optional<std::string> GetFromProcess(absl::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

absl::StatusOr<std::string> ReadFromDisk(absl::string_view path) {
  std::ifstream file{std::string(path)};
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read the file '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream content;
  content << file.rdbuf();
  return content.str();
}

absl::StatusOr<std::string> HostnameOfThisMachine() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot read this machine's host name: ", std::strerror(errno)));
  }
  return std::string(name);
}

}  // namespace

ProcessEnvironment::ProcessEnvironment(VariableReader variables, FileReader files, HostnameReader hostname)
    : variables_(variables ? std::move(variables) : GetFromProcess),
      files_(files ? std::move(files) : ReadFromDisk),
      hostname_(hostname ? std::move(hostname) : HostnameOfThisMachine) {}

const ProcessEnvironment& ProcessEnvironment::Current() {
  static const auto* const current = new ProcessEnvironment(GetFromProcess);
  return *current;
}

ProcessEnvironment ProcessEnvironment::FromMap(std::map<std::string, std::string> variables, std::string hostname) {
  auto shared = std::make_shared<const std::map<std::string, std::string>>(std::move(variables));
  return ProcessEnvironment(
      [shared](absl::string_view name) -> std::optional<std::string> {
        auto found = shared->find(std::string(name));
        if (found == shared->end()) return std::nullopt;
        return found->second;
      },
      ReadFromDisk, [hostname = std::move(hostname)]() -> absl::StatusOr<std::string> { return hostname; });
}

std::optional<std::string> ProcessEnvironment::Get(absl::string_view name) const { return variables_(name); }

absl::StatusOr<std::optional<int>> ProcessEnvironment::GetNonNegativeInt(absl::string_view name) const {
  std::optional<std::string> value = Get(name);
  if (!value.has_value() || value->empty()) return std::nullopt;
  int parsed = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*value), &parsed) || parsed < 0) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='", *value,
                                                   "' is not a non-negative integer; unset it or fix it"));
  }
  return parsed;
}

absl::StatusOr<int> ProcessEnvironment::GetNonNegativeIntOr(absl::string_view name, int fallback) const {
  absl::StatusOr<std::optional<int>> value = GetNonNegativeInt(name);
  if (!value.ok()) return value.status();
  return value->value_or(fallback);
}

absl::StatusOr<std::optional<int>> ProcessEnvironment::GetPort(absl::string_view name) const {
  std::optional<std::string> text = Get(name);
  absl::StatusOr<std::optional<int>> value = GetNonNegativeInt(name);
  const bool in_range = value.ok() && (!value->has_value() || (**value >= 1 && **value <= 65535));
  if (!in_range) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='", text.value_or(""),
                                                   "' is not a TCP port; set it to a port in 1..65535 or unset it"));
  }
  return *value;
}

absl::StatusOr<std::string> ProcessEnvironment::ReadFile(absl::string_view path) const { return files_(path); }

absl::StatusOr<std::string> ProcessEnvironment::Hostname() const { return hostname_(); }

}  // namespace kiln
