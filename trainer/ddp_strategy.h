// Deprecated forwarding header: this file moved to trainer/strategies/ddp_strategy.h on 2026-12-02 (the trainer's packages). Include
// that path instead; this one is kept for one release (CHANGELOG.md) and then removed.
#ifndef KILN_TRAINER_DDP_STRATEGY_H_
#define KILN_TRAINER_DDP_STRATEGY_H_

#include "trainer/strategies/ddp_strategy.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_DDP_STRATEGY_H_
