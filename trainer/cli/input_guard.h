// Loading what the user named (a data set, a model) under one guard: whatever LibTorch or the standard library
// throws while doing it (std::bad_alloc when sizes the checks accepted still do not fit in memory, c10::Error, any
// std::exception) becomes an error that names the input, so that fit ends with its one `error:` line and exit 2
// instead of an abort.
#ifndef KILN_TRAINER_CLI_INPUT_GUARD_H_
#define KILN_TRAINER_CLI_INPUT_GUARD_H_

#include <exception>
#include <new>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "c10/util/Exception.h"
#include "hal/compat/error_message.h"

namespace kiln {

// `load()`, or, when it throws, ResourceExhausted (out of memory) or InvalidArgument: "<what> (<reason>); <fix>",
// where `what` names the input and what was done with it ("--data=big.csv: cannot load it").
template <typename T>
absl::StatusOr<T> GuardedLoad(absl::string_view what, absl::string_view fix,
                              absl::FunctionRef<absl::StatusOr<T>()> load) {
  std::string reason;
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  try {
    return load();
  } catch (const std::bad_alloc&) {
    reason = "out of memory";
    code = absl::StatusCode::kResourceExhausted;
  } catch (const c10::Error& error) {
    reason = error.what_without_backtrace();
    if (reason.find("allocate") != std::string::npos || reason.find("overflow") != std::string::npos) {
      code = absl::StatusCode::kResourceExhausted;
    }
  } catch (const std::exception& error) {
    reason = compat::ExceptionMessage(error);
  }
  return absl::Status(code, absl::StrCat(what, " (", reason, "); ", fix));
}

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_INPUT_GUARD_H_
