#include "examples/sample_plugin/errors.h"

#include <new>
#include <utility>

namespace sample_plugin {

KILN_Error* OutOfMemoryError() noexcept {
  // Made on first use (Plugin_Initialize calls this while memory is plentiful), never freed.
  static KILN_Error* const error = new KILN_Error{KILN_ERROR_CODE_RESOURCE_EXHAUSTED, "sample_plugin: out of memory"};
  return error;
}

KILN_Error* MakeError(KILN_Error_Code code, std::string message) noexcept {
  try {
    return new KILN_Error{code, std::string(kName) + ": " + std::move(message)};
  } catch (...) {
    return OutOfMemoryError();
  }
}

void DestroyError(KILN_Error* error) noexcept {
  if (error != OutOfMemoryError()) delete error;
}

KILN_Error* CheckArgsSize(size_t struct_size, size_t needed, const char* type, const char* version) noexcept {
  if (struct_size >= needed) return nullptr;
  try {
    return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                     std::string(type) + " is " + std::to_string(struct_size) + " bytes, but plugin API " + version +
                         " defines " + std::to_string(needed) + ": the caller was built against a modified header");
  } catch (...) {
    return OutOfMemoryError();
  }
}

}  // namespace sample_plugin
