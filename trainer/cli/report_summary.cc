#include "trainer/cli/report_summary.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace kiln {
namespace {

bool ShellSafe(const std::string& arg) {
  if (arg.empty()) return false;
  for (char c : arg) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && std::string("_@%+=:,./-").find(c) == std::string::npos) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string ShellCommandLine(const std::vector<std::string>& args) {
  std::vector<std::string> quoted;
  for (const std::string& arg : args) {
    quoted.push_back(ShellSafe(arg) ? arg : absl::StrCat("'", absl::StrReplaceAll(arg, {{"'", "'\\''"}}), "'"));
  }
  return absl::StrJoin(quoted, " ");
}

ReportTable ReportSummary(const ReportSummaryFacts& facts) {
  ReportTable table{"summary", "Summary", {}};
  const std::string command = ShellCommandLine(facts.command_line);
  table.rows.emplace_back("command", command);
  const std::string expanded = ShellCommandLine(facts.expanded_command_line);
  if (!facts.expanded_command_line.empty() && expanded != command) {
    table.rows.emplace_back("command (flag files expanded)", expanded);
  }
  table.rows.emplace_back("run_folder", facts.run_dir);
  table.rows.emplace_back("status", facts.status);
  table.rows.emplace_back("data", facts.data);
  table.rows.emplace_back("epochs", absl::StrCat(facts.epochs));
  table.rows.emplace_back("global_step", absl::StrCat(facts.global_step));
  table.rows.emplace_back("wall_time_seconds", absl::StrFormat("%.2f", facts.wall_seconds));
  table.rows.emplace_back("last_checkpoint", facts.last_checkpoint.empty() ? "(none written)" : facts.last_checkpoint);
  std::string best = facts.best_checkpoint.empty() ? "(none written)" : facts.best_checkpoint;
  if (!facts.best_checkpoint.empty()) {
    if (facts.monitor.has_value() && facts.best_score.has_value()) {
      absl::StrAppend(&best, "  (", *facts.monitor, " = ", absl::StrFormat("%.6g", *facts.best_score), ")");
    } else if (!facts.monitor.has_value()) {
      absl::StrAppend(&best, "  (no monitor: the newest)");
    }
  }
  table.rows.emplace_back("best_checkpoint", best);
  table.rows.emplace_back("resumed_from", facts.resumed_from.empty() ? "(started fresh)" : facts.resumed_from);
  table.rows.emplace_back("params_sha256", facts.params_sha256);
  return table;
}

}  // namespace kiln
