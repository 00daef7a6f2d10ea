// Deprecated forwarding header: this file moved to trainer/checkpoint/zip_checksums.h on 2026-12-02 (the trainer's
// packages), and on to trainer/checkpoint/format/zip_checksums.h in 0.3.0. Include that path instead; this one is
// kept for one release (CHANGELOG.md) and then removed.
#ifndef KILN_TRAINER_ZIP_CHECKSUMS_H_
#define KILN_TRAINER_ZIP_CHECKSUMS_H_

#include "trainer/checkpoint/format/zip_checksums.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_ZIP_CHECKSUMS_H_
