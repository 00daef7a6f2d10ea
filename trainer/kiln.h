// Kiln's library in one include: the Trainer and everything a training program names (LightningModule, DataModule,
// TensorDataLoader, callbacks, loggers, strategies, precision, profilers). Depend on @kiln//trainer, and link one
// @kiln//backends:linked into each program that trains.
//
//   #include "trainer/kiln.h"
//
// The headers below are Kiln's public C++ API (docs/library.md, "The public API"): they move only with a forwarding
// header left behind, and a changed signature keeps its old form, deprecated, for one release (CHANGELOG.md). Any
// other header of the repository is internal to its package.
#ifndef KILN_TRAINER_KILN_H_
#define KILN_TRAINER_KILN_H_

#include "trainer/callbacks/device_stats_monitor.h"   // IWYU pragma: export
#include "trainer/callbacks/early_stopping.h"         // IWYU pragma: export
#include "trainer/callbacks/learning_rate_monitor.h"  // IWYU pragma: export
#include "trainer/callbacks/model_checkpoint.h"       // IWYU pragma: export
#include "trainer/callbacks/model_summary_callback.h"  // IWYU pragma: export
#include "trainer/callbacks/on_exception_checkpoint.h"  // IWYU pragma: export
#include "trainer/callbacks/throughput_monitor.h"     // IWYU pragma: export
#include "trainer/callbacks/timer.h"                  // IWYU pragma: export
#include "trainer/core/batch.h"                       // IWYU pragma: export
#include "trainer/core/callback.h"                    // IWYU pragma: export
#include "trainer/core/data_loader.h"                 // IWYU pragma: export
#include "trainer/core/flop_counter.h"                // IWYU pragma: export
#include "trainer/core/lightning_module.h"            // IWYU pragma: export
#include "trainer/core/logger.h"                      // IWYU pragma: export
#include "trainer/core/sync_batch_norm.h"             // IWYU pragma: export
#include "trainer/loggers/csv_logger.h"               // IWYU pragma: export
#include "trainer/loggers/mlflow_logger.h"            // IWYU pragma: export
#include "trainer/loggers/wandb_logger.h"             // IWYU pragma: export
#include "trainer/loggers/tensorboard_logger.h"       // IWYU pragma: export
#include "trainer/plugins/precision/precision_plugin.h"  // IWYU pragma: export
#include "trainer/profilers/profiler.h"               // IWYU pragma: export
#include "trainer/strategies/ddp_strategy.h"          // IWYU pragma: export
#include "trainer/strategies/fsdp_strategy.h"         // IWYU pragma: export
#include "trainer/strategies/strategy.h"              // IWYU pragma: export
#include "trainer/trainer.h"                          // IWYU pragma: export

#endif  // KILN_TRAINER_KILN_H_
