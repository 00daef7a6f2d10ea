// Deprecated forwarding header: this file moved to trainer/plugins/precision/true_precision.h on 2026-12-02 (the trainer's packages). Include
// that path instead; this one is kept for one release (CHANGELOG.md) and then removed.
#ifndef KILN_TRAINER_TRUE_PRECISION_H_
#define KILN_TRAINER_TRUE_PRECISION_H_

#include "trainer/plugins/precision/true_precision.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_TRUE_PRECISION_H_
