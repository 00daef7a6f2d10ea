#include "trainer/core/option_fix.h"

#include <atomic>

namespace kiln {
namespace {

std::atomic<bool> flag_spelling{false};

}  // namespace

void UseFlagSpelling() { flag_spelling.store(true, std::memory_order_relaxed); }

std::string OptionFix(absl::string_view library, absl::string_view flag) {
  return std::string(flag_spelling.load(std::memory_order_relaxed) ? flag : library);
}

}  // namespace kiln
