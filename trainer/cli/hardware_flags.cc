// Where to run: the hardware flags, named and resolved as Lightning's Trainer arguments are (see connector/).
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

ABSL_FLAG(std::string, accelerator, "auto",
          "Accelerator name or alias (`bazel run //tools:accelerators` lists them), or \"auto\" for the available "
          "one with the highest priority.");
ABSL_FLAG(std::string, devices, "auto",
          "Devices to use: \"auto\", a count N, -1 for all, or indices such as \"0,1\" or \"[0, 1]\".");
ABSL_FLAG(std::string, strategy, "auto",
          "\"auto\", \"single_device\", \"ddp\", \"ddp_find_unused_parameters_true\" (parameters a step may leave "
          "without a gradient), \"ddp_find_unused_parameters_false\", or a registered strategy's name.");
ABSL_FLAG(std::string, precision, "32-true",
          "32-true, 64-true, bf16-mixed, 16-mixed, bf16-true, 16-true (or the legacy 32, 64, 16, bf16), as the "
          "accelerator declares them: cpu runs 32-true, 64-true, bf16-mixed and bf16-true, and 16-mixed as "
          "bf16-mixed (with Lightning's warning).");
ABSL_FLAG(int, num_nodes, 1, "Number of machines.");
ABSL_FLAG(std::string, process_group_backend, "",
          "ddp: the collective backend; empty for the accelerator's own (nccl for cuda, gloo for cpu, a vendor's for "
          "its device). \"gloo\" carries CUDA tensors too, and lets several processes share one GPU.");
ABSL_FLAG(double, process_group_timeout, 1800,
          "ddp: seconds that joining the other processes, and each collective, may take before the run fails.");
