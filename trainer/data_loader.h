// Deprecated forwarding header: this file moved to trainer/core/data_loader.h on 2026-12-02 (the trainer's packages). Include
// that path instead; this one is kept for one release (CHANGELOG.md) and then removed.
#ifndef KILN_TRAINER_DATA_LOADER_H_
#define KILN_TRAINER_DATA_LOADER_H_

#include "trainer/core/data_loader.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_DATA_LOADER_H_
