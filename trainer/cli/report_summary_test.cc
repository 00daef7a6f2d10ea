#include "trainer/cli/report_summary.h"

#include "gtest/gtest.h"

namespace kiln {
namespace {

std::string Row(const ReportTable& table, const std::string& key) {
  for (const auto& [name, value] : table.rows) {
    if (name == key) return value;
  }
  return "(no row " + key + ")";
}

std::vector<std::string> Keys(const ReportTable& table) {
  std::vector<std::string> keys;
  for (const auto& row : table.rows) keys.push_back(row.first);
  return keys;
}

ReportSummaryFacts Facts() {
  ReportSummaryFacts facts;
  facts.command_line = {"/bin/fit", "--max_epochs=5", "--default_root_dir=/tmp/rep"};
  facts.expanded_command_line = facts.command_line;
  facts.run_dir = "/tmp/rep/lightning_logs/version_0";
  facts.status = "finished";
  facts.data = "synthetic";
  facts.epochs = 5;
  facts.global_step = 320;
  facts.wall_seconds = 1.234;
  facts.params_sha256 = "ab";
  facts.last_checkpoint = "/tmp/rep/lightning_logs/version_0/checkpoints/last.ckpt";
  facts.best_checkpoint = "/tmp/rep/lightning_logs/version_0/checkpoints/epoch=4-step=320.ckpt";
  return facts;
}

TEST(ReportSummaryTest, CarriesTheCommandLineAndTheCheckpoints) {
  const ReportTable table = ReportSummary(Facts());
  EXPECT_EQ(table.id, "summary");
  EXPECT_EQ(Keys(table), (std::vector<std::string>{"command", "run_folder", "status", "data", "epochs", "global_step",
                                                   "wall_time_seconds", "last_checkpoint", "best_checkpoint",
                                                   "resumed_from", "params_sha256"}));
  EXPECT_EQ(Row(table, "command"), "/bin/fit --max_epochs=5 --default_root_dir=/tmp/rep");
  EXPECT_EQ(Row(table, "last_checkpoint"), Facts().last_checkpoint);
  EXPECT_EQ(Row(table, "best_checkpoint"), Facts().best_checkpoint + "  (no monitor: the newest)");
  EXPECT_EQ(Row(table, "run_folder"), Facts().run_dir);
  EXPECT_EQ(Row(table, "epochs"), "5");
  EXPECT_EQ(Row(table, "global_step"), "320");
  EXPECT_EQ(Row(table, "wall_time_seconds"), "1.23");
  EXPECT_EQ(Row(table, "resumed_from"), "(started fresh)");
}

TEST(ReportSummaryTest, BestCheckpointNamesItsMonitorAndScore) {
  ReportSummaryFacts facts = Facts();
  facts.monitor = "val_loss";
  facts.best_score = 0.25;
  EXPECT_EQ(Row(ReportSummary(facts), "best_checkpoint"), facts.best_checkpoint + "  (val_loss = 0.25)");
  facts.last_checkpoint.clear();
  facts.best_checkpoint.clear();
  EXPECT_EQ(Row(ReportSummary(facts), "last_checkpoint"), "(none written)");
  EXPECT_EQ(Row(ReportSummary(facts), "best_checkpoint"), "(none written)");
}

TEST(ReportSummaryTest, ExpandedCommandLineOnlyWhenItDiffers) {
  ReportSummaryFacts facts = Facts();
  facts.command_line = {"fit", "--flagfile=run.flags"};
  facts.expanded_command_line = {"fit", "--max_epochs=3"};
  const ReportTable table = ReportSummary(facts);
  EXPECT_EQ(Row(table, "command"), "fit --flagfile=run.flags");
  EXPECT_EQ(Row(table, "command (flag files expanded)"), "fit --max_epochs=3");
  EXPECT_EQ(Keys(ReportSummary(Facts()))[1], "run_folder");
}

TEST(ShellCommandLineTest, Table) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"fit", "--data=a.csv", "--label_column=price"}, "fit --data=a.csv --label_column=price"},
      {{"fit", "--data=my data.csv"}, "fit '--data=my data.csv'"},
      {{"fit", "--name=it's"}, "fit '--name=it'\\''s'"},
      {{"fit", ""}, "fit ''"},
      {{"fit", "--data=<b>x</b>.csv"}, "fit '--data=<b>x</b>.csv'"},
      {{"fit", "--x=$HOME", "--y=a;b"}, "fit '--x=$HOME' '--y=a;b'"},
      {{}, ""},
  };
  for (const auto& [args, line] : cases) EXPECT_EQ(ShellCommandLine(args), line);
}

}  // namespace
}  // namespace kiln
