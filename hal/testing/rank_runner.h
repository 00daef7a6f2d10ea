// Runs the ranks of a multi-process check: each rank is a program started with its own arguments, its output in a
// file of its own, watched until a deadline. The accelerator conformance suite's collective checks
// (conformance_suite.cc) and its fsdp training (trainer/testing/fsdp_conformance.cc) start their ranks with it.
// Test support: production code never links it. Thread-compatible; forks and waits from the calling thread.
#ifndef KILN_HAL_TESTING_RANK_RUNNER_H_
#define KILN_HAL_TESTING_RANK_RUNNER_H_

#include <string>
#include <vector>

namespace kiln::testing {

struct RankRun {
  int pid = -1;
  std::string log;      // Its standard output and error.
  int status = -1;      // The exit status (128 + the signal when one ended it); -1 while it runs; -2 when killed at
                        // the deadline; -3 when stopped because another rank had failed.
  double seconds = 0;   // From the start to its exit.
};

// The running program's own path (/proc/self/exe), for starting it again as a rank; `argv0` where that cannot be
// read.
std::string ThisProgram(const char* argv0);

// The test's own time limit in seconds, as Bazel gives it (TEST_TIMEOUT: the size's or the `timeout` attribute's
// limit), or `fallback` outside Bazel. A check that starts ranks sizes its deadlines and its ranks' timeouts as shares
// of it, so that a rank that never comes fails the check, with every rank's output, before Bazel kills the test
// without any.
double TestTimeoutSeconds(double fallback = 300);

// A TCP port on loopback that was free a moment ago.
int FreeLoopbackPort();

// Starts one process per entry of `argvs` (argvs[r][0] is the program), waits for them until `deadline_s`, and kills
// what is left. Once a rank has exited with a non-zero status the run has failed, and the ranks still running are
// stopped rather than left to wait out their timeouts for a peer that is gone. Rank r's output goes to
// `log_prefix`_r.log.
std::vector<RankRun> RunRanks(const std::vector<std::vector<std::string>>& argvs, const std::string& log_prefix,
                              double deadline_s);

// The last 2000 characters of a rank's output, after the rank's last `error: ` line when the tail does not hold it
// (a failing step's message followed by LibTorch's backtrace): what the rank said, then how it ended.
std::string RankOutput(const RankRun& run);
// The same excerpt of `text`.
std::string RankExcerpt(const std::string& text);

// What an unsuccessful run's status says, after "rank R of W".
std::string RankEnding(const RankRun& run);

}  // namespace kiln::testing

#endif  // KILN_HAL_TESTING_RANK_RUNNER_H_
