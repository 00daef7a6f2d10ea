#include "hal/compat/logging.h"

#include "c10/util/Logging.h"

namespace kiln::compat {

void MatchLibTorchLoggingToGlog(int glog_minloglevel) {
  if (!c10::IsUsingGoogleLogging()) ::FLAGS_caffe2_log_level = glog_minloglevel;
}

}  // namespace kiln::compat
