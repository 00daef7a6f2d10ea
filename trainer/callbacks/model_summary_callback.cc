#include "trainer/callbacks/model_summary_callback.h"

#include <cstdio>

#include "trainer/models/model_summary.h"
#include "trainer/trainer.h"

namespace kiln {

void ModelSummaryCallback::on_fit_start(Trainer& trainer, LightningModule& module) {
  if (!trainer.is_global_zero()) return;
  const std::string table = Summarize(module, max_depth_).ToString();
  std::fputs(table.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace kiln
