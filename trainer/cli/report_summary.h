// The summary at the top of a fit's report.html: how to run it again (the command line), where its outputs are
// (the run folder, the last and the best checkpoint) and what it did (status, data, epochs, steps, wall time,
// resumption, the parameters' SHA-256). The machine-readable counterpart is run_summary.h's JSON.
//
// Values are plain text; the report escapes them (html_report.h). Pure functions, no state; they never throw.
#ifndef KILN_TRAINER_CLI_REPORT_SUMMARY_H_
#define KILN_TRAINER_CLI_REPORT_SUMMARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/report/html_report.h"

namespace kiln {

struct ReportSummaryFacts {
  std::vector<std::string> command_line;           // As typed, argv[0] first.
  std::vector<std::string> expanded_command_line;  // With flag files and --fromenv expanded (command_line.h).
  std::string run_dir;
  std::string status;  // "finished", or why the run stopped.
  std::string data;    // The data's description.
  int64_t epochs = 0;
  int64_t global_step = 0;
  double wall_seconds = 0;
  std::string resumed_from;  // Empty: started fresh.
  std::string params_sha256;
  // ModelCheckpoint's, empty when it wrote none (or checkpointing is off).
  std::string last_checkpoint;
  std::string best_checkpoint;
  std::optional<std::string> monitor;  // What "best" is measured by; unset: best is the newest.
  std::optional<double> best_score;
};

// The table with id "summary", rows in this order: command, command (flag files expanded) only when it differs,
// run_folder, status, data, epochs, global_step, wall_time_seconds, last_checkpoint, best_checkpoint,
// resumed_from, params_sha256.
ReportTable ReportSummary(const ReportSummaryFacts& facts);

// `args` as one line a POSIX shell reads back as the same arguments: an argument of only letters, digits and
// `_@%+=:,./-` as it is, any other in single quotes (a ' inside as '\'').
std::string ShellCommandLine(const std::vector<std::string>& args);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_REPORT_SUMMARY_H_
