#include "hal/version.h"

namespace kiln {
namespace {

#define KILN_VERSION_TEXT_(major, minor, patch) #major "." #minor "." #patch
#define KILN_VERSION_TEXT(major, minor, patch) KILN_VERSION_TEXT_(major, minor, patch)

constexpr char kVersion[] = KILN_VERSION_TEXT(KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH);

}  // namespace

std::string_view Version() { return kVersion; }

}  // namespace kiln
