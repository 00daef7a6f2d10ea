// Deprecated forwarding header: this file moved to trainer/callbacks/model_summary_callback.h on 2026-12-02, into
// @kiln//trainer. Include that path and depend on @kiln//trainer; this one (target
// //trainer/models:model_summary_callback) is kept for one release (CHANGELOG.md) and then removed.
#ifndef KILN_TRAINER_MODELS_MODEL_SUMMARY_CALLBACK_H_
#define KILN_TRAINER_MODELS_MODEL_SUMMARY_CALLBACK_H_

#include "trainer/callbacks/model_summary_callback.h"  // IWYU pragma: export

#endif  // KILN_TRAINER_MODELS_MODEL_SUMMARY_CALLBACK_H_
