// What a process can see of the machine it was launched on: environment variables, files and the host name.
//
// Cluster environments (SLURM, torchrun, ...) describe a process through these. The connector reads them only
// through a ProcessEnvironment, so that tests give it a map and a host name and never touch the real process
// environment; `ProcessEnvironment::Current()` is the real one (getenv, the file system, gethostname).
//
// Nothing here writes: unlike Lightning, Kiln never sets MASTER_ADDR or MASTER_PORT while resolving.
//
// Thread-safety: a ProcessEnvironment is immutable once built and may be shared between threads. Current() reads
// with getenv, so it races with a concurrent setenv in the same process (as any getenv does).
#ifndef KILN_CONNECTOR_PROCESS_ENVIRONMENT_H_
#define KILN_CONNECTOR_PROCESS_ENVIRONMENT_H_

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

class ProcessEnvironment {
 public:
  // The value of an environment variable, or nullopt when it is not set. Must not throw.
  using VariableReader = std::function<std::optional<std::string>(absl::string_view name)>;
  // The whole content of the file at `path`, or NotFound/PermissionDenied naming the path. Must not throw.
  using FileReader = std::function<absl::StatusOr<std::string>(absl::string_view path)>;
  // This machine's host name. Must not throw.
  using HostnameReader = std::function<absl::StatusOr<std::string>()>;

  // Empty readers are replaced by the real ones.
  explicit ProcessEnvironment(VariableReader variables, FileReader files = nullptr, HostnameReader hostname = nullptr);

  // The environment of this process. Never destroyed.
  static const ProcessEnvironment& Current();

  // Variables from `variables` only (an unset variable is one missing from the map), host name `hostname`, and
  // the real file system (so a test can point a variable at a temporary file).
  static ProcessEnvironment FromMap(std::map<std::string, std::string> variables, std::string hostname = "localhost");

  // The variable's value; nullopt when unset. A variable set to the empty string is set (as in Lightning, which
  // tests `name in os.environ`).
  std::optional<std::string> Get(absl::string_view name) const;
  bool Has(absl::string_view name) const { return Get(name).has_value(); }

  // The variable as an int >= 0; nullopt when unset or empty. InvalidArgument, naming the variable and its value,
  // when it is anything else.
  absl::StatusOr<std::optional<int>> GetNonNegativeInt(absl::string_view name) const;
  // As GetNonNegativeInt, with `fallback` when unset or empty.
  absl::StatusOr<int> GetNonNegativeIntOr(absl::string_view name, int fallback) const;
  // The variable as a TCP port (1..65535); nullopt when unset or empty.
  absl::StatusOr<std::optional<int>> GetPort(absl::string_view name) const;

  absl::StatusOr<std::string> ReadFile(absl::string_view path) const;
  absl::StatusOr<std::string> Hostname() const;

 private:
  VariableReader variables_;
  FileReader files_;
  HostnameReader hostname_;
};

}  // namespace kiln

#endif  // KILN_CONNECTOR_PROCESS_ENVIRONMENT_H_
