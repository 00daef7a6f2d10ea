// Deprecated forwarding header: this file moved to trainer/io/memory_budget.h (target //trainer/io:memory_budget) in
// 2026-12, below every package that reads input. Include that path instead; this one is kept for one release
// (CHANGELOG.md) and then removed.
#ifndef KILN_TRAINER_DATA_MEMORY_BUDGET_H_
#define KILN_TRAINER_DATA_MEMORY_BUDGET_H_

#include "trainer/io/memory_budget.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_DATA_MEMORY_BUDGET_H_
