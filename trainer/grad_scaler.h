// Deprecated forwarding header: this file moved to trainer/plugins/precision/grad_scaler.h on 2026-12-02 (the trainer's packages). Include
// that path instead; this one is kept for one release (CHANGELOG.md) and then removed.
#ifndef KILN_TRAINER_GRAD_SCALER_H_
#define KILN_TRAINER_GRAD_SCALER_H_

#include "trainer/plugins/precision/grad_scaler.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_GRAD_SCALER_H_
