// `bazel run //tools:resolve -- <the hardware flags of //trainer:fit>`: prints the plan the connector resolves,
// as one JSON object on standard output, without touching any device or starting any process.
//
// It resolves through the same function as the trainer (ResolvePlan, with the default registries and this
// process's environment), so `resolve` shows what `fit` would do with the same flags, here.
//
// Standard error gets each warning as a `warning: ` line and each note (why "auto" skipped an accelerator) as a
// `note: ` line. Exit status: 0 with a plan; 2 for a bad flag or a plan the connector rejects, with one line that
// starts with `error: `; 1 when an accelerator misbehaves (an internal error).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "connector/connector.h"
#include "glog/logging.h"
#include "trainer/accelerator_plugins.h"
#include "trainer/cli/command_line.h"
#include "trainer/cli/hardware_flags.h"  // fit's hardware flags, the same definitions (trainer/trainer_options.inc).
#include "trainer/io/user_path.h"

namespace kiln {
namespace {

constexpr int kExitUsage = 2;

[[noreturn]] void UsageError(absl::string_view message) {
  std::cerr << "error: " << OneLine(message) << std::endl;
  std::exit(kExitUsage);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints the plan Kiln resolves from the hardware flags, as JSON, without training.\n\n"
      "  bazel run //tools:resolve -- --accelerator=auto --devices=2\n\n"
      "Warnings go to standard error. Exit status: 0 resolved, 2 bad flags or a rejected plan.");
  // Every bad flag ends as fit's do: one `error: ` line and exit status 2 (Abseil's parser would exit 1). Flag files
  // and --fromenv first, as fit reads them, so that their flags meet the same checks.
  absl::StatusOr<std::vector<std::string>> args = ExpandCommandLine({argv, argv + argc}, UserPath);
  if (!args.ok()) UsageError(args.status().message());
  std::vector<char*> expanded = ArgvOf(*args);
  argc = static_cast<int>(args->size());
  argv = expanded.data();
  if (!WantsHelp(argc, argv)) {
    if (absl::Status checked = CheckCommandLine(argc, argv); !checked.ok()) UsageError(checked.message());
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    UsageError(absl::StrCat("unexpected argument '", positional[1], "'; flags are written --name=value (see --help)"));
  }
  // Plugins register their accelerators as fit loads them (--accelerator_plugin, KILN_ACCELERATOR_PLUGINS).
  if (absl::Status loaded = kiln::LoadAcceleratorPluginsFromCommandLine(argc, argv); !loaded.ok()) {
    UsageError(std::string(loaded.message()));
  }
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_WARNING;  // The connector's INFO lines are printed below as notes.
  google::InitGoogleLogging(argv[0]);

  ConnectorOptions options;
  options.accelerator = absl::GetFlag(FLAGS_accelerator);
  options.devices = absl::GetFlag(FLAGS_devices);
  options.strategy = absl::GetFlag(FLAGS_strategy);
  options.precision = absl::GetFlag(FLAGS_precision);
  options.num_nodes = absl::GetFlag(FLAGS_num_nodes);
  options.process_group_backend = absl::GetFlag(FLAGS_process_group_backend);
  absl::StatusOr<Plan> plan = ResolvePlan(options);
  if (!plan.ok()) {
    std::cerr << "error: " << OneLine(plan.status().message()) << std::endl;
    return plan.status().code() == absl::StatusCode::kInternal ? 1 : kExitUsage;
  }
  for (const std::string& note : plan->notes) std::cerr << "note: " << note << "\n";
  for (const std::string& warning : plan->warnings) std::cerr << "warning: " << warning << "\n";
  std::printf("%s\n", plan->ToJson().c_str());
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::Main(argc, argv); }
