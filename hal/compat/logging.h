// LibTorch's LOG macros (c10/util/Logging.h) write through glog where LibTorch was built with it (Debian's 1.13 was)
// and through c10's own logger otherwise (the PyPI wheels), whose threshold is its own flag, WARNING by default. A Kiln
// file that includes LibTorch's headers gets whichever LOG LibTorch chose, so without this its INFO lines vanish
// under the wheel while the same program's glog INFO lines print. One call makes c10's logger print what glog's
// --minloglevel lets through.
//
// Call once, from main, after setting glog's flags; not thread-safe against concurrent logging set-up.
#ifndef KILN_HAL_COMPAT_LOGGING_H_
#define KILN_HAL_COMPAT_LOGGING_H_

namespace kiln::compat {

// Sets c10's log threshold to `glog_minloglevel` (0 INFO, 1 WARNING, 2 ERROR, 3 FATAL) where c10 has a logger of
// its own; where c10 logs through glog, glog's flag already rules and this does nothing.
void MatchLibTorchLoggingToGlog(int glog_minloglevel);

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_LOGGING_H_
