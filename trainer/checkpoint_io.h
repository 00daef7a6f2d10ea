// Deprecated forwarding header: this file moved to trainer/checkpoint/checkpoint_io.h on 2026-12-02 (the trainer's packages). Include
// that path instead; this one is kept for one release (CHANGELOG.md) and then removed.
#ifndef KILN_TRAINER_CHECKPOINT_IO_H_
#define KILN_TRAINER_CHECKPOINT_IO_H_

#include "trainer/checkpoint/checkpoint_io.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_CHECKPOINT_IO_H_
