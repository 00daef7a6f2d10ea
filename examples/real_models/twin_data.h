// What the examples of examples/real_models share: the data lightning_twin.py wrote (DIR/data.pt, a scripted
// module's buffers) and the Trainer options both sides use (one CPU thread, every step logged to
// DIR/kiln/version_0/metrics.csv, as the Lightning side logs to DIR/lightning/version_0/metrics.csv).
#ifndef KILN_EXAMPLES_REAL_MODELS_TWIN_DATA_H_
#define KILN_EXAMPLES_REAL_MODELS_TWIN_DATA_H_

#include <map>
#include <memory>
#include <string>

#include "ATen/Parallel.h"
#include "torch/script.h"
#include "trainer/kiln.h"

namespace kiln::examples {

inline std::map<std::string, at::Tensor> LoadTwinData(const std::string& dir) {
  std::map<std::string, at::Tensor> tensors;
  for (const auto& buffer : torch::jit::load(dir + "/data.pt").named_buffers()) tensors[buffer.name] = buffer.value;
  return tensors;
}

inline TrainerOptions TwinOptions(const std::string& dir) {
  at::set_num_threads(1);
  TrainerOptions options;
  options.accelerator = "cpu";
  options.devices = 1;
  options.num_sanity_val_steps = 0;
  options.log_every_n_steps = 1;
  options.loggers = {std::make_shared<CsvLogger>(LogDirOptions{.save_dir = dir, .name = "kiln", .version = 0})};
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  return options;
}

}  // namespace kiln::examples

#endif  // KILN_EXAMPLES_REAL_MODELS_TWIN_DATA_H_
