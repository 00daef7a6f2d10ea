// The sample plugin's errors: what crosses the C API when something fails (kiln_plugin_c_api.h, "CALLING
// CONVENTION"). Every failure becomes a KILN_Error the caller owns and releases with Error_Destroy; nothing is thrown
// across the boundary.
#ifndef KILN_EXAMPLES_SAMPLE_PLUGIN_ERRORS_H_
#define KILN_EXAMPLES_SAMPLE_PLUGIN_ERRORS_H_

#include <cstddef>
#include <string>

#include "hal/plugin/kiln_plugin_c_api.h"

// The plugin's definition of the C API's opaque error.
struct KILN_Error {
  KILN_Error_Code code;
  std::string message;
};

namespace sample_plugin {

inline constexpr char kName[] = "sample_plugin";

// A new error whose message is "sample_plugin: " + `message`. Never NULL, never throws: when memory runs out it
// returns OutOfMemoryError().
KILN_Error* MakeError(KILN_Error_Code code, std::string message) noexcept;

// The one error that is never allocated (a NULL error would read as success); Error_Destroy leaves it alone.
KILN_Error* OutOfMemoryError() noexcept;

// Releases `error` (not NULL).
void DestroyError(KILN_Error* error) noexcept;

// INVALID_ARGUMENT when the caller's args struct is smaller than `needed`, the size plugin API `version` defines for
// `type`; NULL otherwise.
KILN_Error* CheckArgsSize(size_t struct_size, size_t needed, const char* type, const char* version) noexcept;

// Runs `body` (which returns a KILN_Error*) and turns anything it throws into an error value: the C API must never
// see an exception.
template <typename Body>
KILN_Error* NoThrow(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return MakeError(KILN_ERROR_CODE_INTERNAL, "unexpected C++ exception inside the plugin");
  }
}

}  // namespace sample_plugin

// Returns the error from the function it is in when `args` is shorter than `type` is in plugin API `version`.
#define SAMPLE_CHECK_ARGS(args, type, version)                                                     \
  if (KILN_Error* args_error =                                                                     \
          ::sample_plugin::CheckArgsSize((args)->struct_size, type##_STRUCT_SIZE, #type, version); \
      args_error != nullptr)                                                                       \
  return args_error

#endif  // KILN_EXAMPLES_SAMPLE_PLUGIN_ERRORS_H_
