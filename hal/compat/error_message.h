// The message of an exception caught from LibTorch or the standard library, for an error a user reads: a c10::Error's
// what() carries LibTorch's C++ backtrace (dozens of lines of frames), which belongs in a bug report, not in Kiln's
// one-line errors; its what_without_backtrace() is the message alone.
#ifndef KILN_HAL_COMPAT_ERROR_MESSAGE_H_
#define KILN_HAL_COMPAT_ERROR_MESSAGE_H_

#include <exception>
#include <string>

#include "c10/util/Exception.h"

namespace kiln::compat {

// `error`'s message without a backtrace. Never throws.
inline std::string ExceptionMessage(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) return c10_error->what_without_backtrace();
  return error.what();
}

}  // namespace kiln::compat

#endif  // KILN_HAL_COMPAT_ERROR_MESSAGE_H_
