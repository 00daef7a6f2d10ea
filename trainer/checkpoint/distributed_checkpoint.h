// Deprecated forwarding header: this file moved to trainer/checkpoint/sharded/sharded_checkpoint.h in 0.3.0 (the
// checkpoint package's three rooms). Include that path and depend on //trainer/checkpoint/sharded:sharded_checkpoint
// instead; this one is kept by CHANGELOG.md's deprecation rule and then removed.
#ifndef KILN_TRAINER_CHECKPOINT_DISTRIBUTED_CHECKPOINT_H_
#define KILN_TRAINER_CHECKPOINT_DISTRIBUTED_CHECKPOINT_H_

#include "trainer/checkpoint/sharded/sharded_checkpoint.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_CHECKPOINT_DISTRIBUTED_CHECKPOINT_H_
