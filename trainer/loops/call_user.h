// What every loop of the trainer shares (internal to //trainer): running user code so that an exception becomes a
// Status naming where it happened, merging metric maps, and clearing a module's metric sink however a loop leaves.
#ifndef KILN_TRAINER_LOOPS_CALL_USER_H_
#define KILN_TRAINER_LOOPS_CALL_USER_H_

#include <exception>
#include <stdexcept>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "c10/util/Exception.h"
#include "trainer/core/lightning_module.h"
#include "trainer/core/metrics.h"

namespace kiln {

// Runs user code (hooks, steps, callbacks). A c10::ValueError (TORCH_CHECK_VALUE, Python's ValueError) or a
// std::invalid_argument is a setting the user's code found wrong: InvalidArgument, a bad input. Any other
// exception is a failure: Internal.
template <typename Fn>
absl::Status CallUser(absl::string_view where, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const c10::ValueError& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " raised: ", e.what_without_backtrace()));
  } catch (const std::invalid_argument& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " raised: ", e.what()));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(where, " raised: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(where, " raised: ", e.what()));
  }
}

inline void Merge(MetricMap& into, const MetricMap& from) {
  for (const auto& [name, value] : from) into[name] = value;
}

// Clears the module's metric sink when a loop leaves, also by an exception.
class SinkGuard {
 public:
  explicit SinkGuard(LightningModule& model) : model_(model) {}
  ~SinkGuard() { model_.set_metric_sink(nullptr, 0); }
  SinkGuard(const SinkGuard&) = delete;
  SinkGuard& operator=(const SinkGuard&) = delete;

 private:
  LightningModule& model_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_CALL_USER_H_
