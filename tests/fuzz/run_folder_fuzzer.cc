// Fuzz target: claiming a run folder (trainer/loggers/log_dir.h: NextVersion, ClaimVersion, RunFolder), as every
// fit does in <default_root_dir>/<log_name>, whatever earlier runs, other programs or users left there.
//
// Input: one entry per line, created in a fresh folder before the claims: "d:NAME" a folder, "f:NAME" a file,
// anything else ignored (names with '/', NUL, "." or ".." are skipped). Then two runs claim a version.
//
// What must hold: no crash; each claim either fails with an error naming the folder or returns a folder that did
// not exist before, is a folder now, is named version_<N> with N above every version_<M> folder that existed, and
// differs from the other run's.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/fuzz/fuzz_support.h"
#include "trainer/loggers/log_dir.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string root = std::string(tmp != nullptr ? tmp : "/tmp") + "/run_folder_fuzz.XXXXXX";
  KILN_FUZZ_CHECK(::mkdtemp(root.data()) != nullptr, "mkdtemp");
  const std::string parent = root + "/lightning_logs";
  fs::create_directories(parent);

  int64_t highest = -1;  // The highest version_<M> folder made.
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const bool folder = absl::ConsumePrefix(&line, "d:");
    if (!folder && !absl::ConsumePrefix(&line, "f:")) continue;
    if (line.empty() || line.size() > 200 || absl::StrContains(line, '/') || absl::StrContains(line, '\0') ||
        line == "." || line == "..") {
      continue;
    }
    const std::string path = parent + "/" + std::string(line);
    std::error_code error;
    if (fs::exists(path, error)) continue;
    if (folder) {
      fs::create_directory(path, error);
      absl::string_view number = line;
      int64_t version = 0;
      if (!error && absl::ConsumePrefix(&number, "version_") && absl::SimpleAtoi(number, &version) && version >= 0) {
        highest = std::max(highest, version);
      }
    } else {
      std::ofstream(path) << "x";
    }
  }

  kiln::RunFolder first({.save_dir = root});
  kiln::RunFolder second({.save_dir = root});
  std::string claimed[2];
  for (int run = 0; run < 2; ++run) {
    const absl::StatusOr<std::string> path = (run == 0 ? first : second).Claim();
    if (!path.ok()) {
      KILN_FUZZ_CHECK(absl::StrContains(path.status().message(), parent), path.status().ToString());
      continue;
    }
    claimed[run] = *path;
    KILN_FUZZ_CHECK(fs::is_directory(*path), *path);
    absl::string_view name = *path;
    KILN_FUZZ_CHECK(absl::ConsumePrefix(&name, parent + "/version_"), *path);
    int64_t version = 0;
    KILN_FUZZ_CHECK(absl::SimpleAtoi(name, &version) && version > highest, *path);
    KILN_FUZZ_CHECK((run == 0 ? first : second).path() == *path, "path() after the claim");
  }
  KILN_FUZZ_CHECK(claimed[0].empty() || claimed[0] != claimed[1], "both runs claimed " + claimed[0]);
  fs::remove_all(root);
  return 0;
}
