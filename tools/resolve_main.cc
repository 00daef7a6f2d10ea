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
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "connector/connector.h"
#include "trainer/accelerator_plugins.h"
#include "glog/logging.h"

// The hardware flags of //trainer:fit, with the same names, defaults and meanings.
ABSL_FLAG(std::string, accelerator, "auto",
          "Accelerator name or alias (see `bazel run //tools:accelerators`), or \"auto\" for the available one with "
          "the highest priority.");
ABSL_FLAG(std::string, devices, "auto",
          "Devices to use: \"auto\", a count N, -1 for all, or indices such as \"0,1\" or \"[0, 1]\". What a count "
          "means is the accelerator's decision.");
ABSL_FLAG(std::string, strategy, "auto", "\"auto\", \"single_device\" or \"ddp\".");
ABSL_FLAG(std::string, precision, "32-true",
          "32-true, 64-true, bf16-mixed, 16-mixed, bf16-true, 16-true (or the legacy 32, 64, 16, bf16).");
// Read as text so that a bad value gets the same `error: ` line and exit status 2 as every other bad input.
ABSL_FLAG(std::string, num_nodes, "1", "Number of machines (an int >= 1).");

namespace kiln {
namespace {

constexpr int kExitUsage = 2;

[[noreturn]] void UsageError(absl::string_view message) {
  std::cerr << "error: " << message << std::endl;
  std::exit(kExitUsage);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints the plan Kiln resolves from the hardware flags, as JSON, without training.\n\n"
      "  bazel run //tools:resolve -- --accelerator=auto --devices=2\n\n"
      "Warnings go to standard error. Exit status: 0 resolved, 2 bad flags or a rejected plan.");
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

  const std::string num_nodes_text = absl::GetFlag(FLAGS_num_nodes);
  int num_nodes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(num_nodes_text), &num_nodes)) {
    UsageError(absl::StrCat("--num_nodes='", num_nodes_text,
                            "' is not valid; pass an int >= 1 (1 for a single "
                            "machine)"));
  }

  ConnectorOptions options;
  options.accelerator = absl::GetFlag(FLAGS_accelerator);
  options.devices = absl::GetFlag(FLAGS_devices);
  options.strategy = absl::GetFlag(FLAGS_strategy);
  options.precision = absl::GetFlag(FLAGS_precision);
  options.num_nodes = num_nodes;
  absl::StatusOr<Plan> plan = ResolvePlan(options);
  if (!plan.ok()) {
    std::cerr << "error: " << plan.status().message() << std::endl;
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
