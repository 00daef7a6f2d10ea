// Deprecated forwarding header: this file moved to trainer/checkpoint/format/zip_checksums.h in 0.3.0 (the
// checkpoint package's three rooms). Include that path and depend on //trainer/checkpoint/format:zip_checksums
// instead; this one is kept by CHANGELOG.md's deprecation rule and then removed.
#ifndef KILN_TRAINER_CHECKPOINT_ZIP_CHECKSUMS_H_
#define KILN_TRAINER_CHECKPOINT_ZIP_CHECKSUMS_H_

#include "trainer/checkpoint/format/zip_checksums.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_CHECKPOINT_ZIP_CHECKSUMS_H_
