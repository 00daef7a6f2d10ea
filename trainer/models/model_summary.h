// ModelSummary: Lightning's model summary table: one row per submodule down to `max_depth` (index, name, type,
// parameter count), then trainable, non-trainable and total parameters and the parameters' size in MB.
//
//     | Name       | Type       | Params
//   ----------------------------------------
//   0 | features   | Sequential | 4.8 K
//   1 | classifier | Sequential | 5.1 K
//   ----------------------------------------
//   9.9 K     Trainable params
//   0         Non-trainable params
//   9.9 K     Total params
//   0.040     Total estimated model params size (MB)
//
// Counts follow Lightning's human-readable form ("123", "5.6 K", "1.2 M"). The size is the parameters' actual
// bytes (numel x element size) / 1e6, which is Lightning's estimate for 32-bit parameters.
#ifndef KILN_TRAINER_MODELS_MODEL_SUMMARY_H_
#define KILN_TRAINER_MODELS_MODEL_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "torch/nn/module.h"

namespace kiln {

struct LayerSummary {
  std::string name;  // Dotted path from the root ("features.0").
  std::string type;  // The module's class without namespace or "Impl" ("Conv2d").
  int64_t parameters = 0;
};

struct ModelSummary {
  std::vector<LayerSummary> layers;
  int64_t trainable_parameters = 0;
  int64_t non_trainable_parameters = 0;
  int64_t total_parameters() const { return trainable_parameters + non_trainable_parameters; }
  double size_megabytes = 0;

  // The table above, ending with a newline.
  std::string ToString() const;
};

// Summarises `module` with rows down to `max_depth` (1: its direct children; 0: totals only).
ModelSummary Summarize(const torch::nn::Module& module, int max_depth = 1);

// Lightning's get_human_readable_count: 999 -> "999", 5600 -> "5.6 K", 1234567 -> "1.2 M", 123456 -> "123 K".
std::string HumanReadableCount(int64_t count);

}  // namespace kiln

#endif  // KILN_TRAINER_MODELS_MODEL_SUMMARY_H_
