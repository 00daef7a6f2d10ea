// What every loop of the trainer shares (internal to //trainer): running user code so that an exception becomes a
// Status naming where it happened, merging metric maps, and clearing a module's metric sink however a loop leaves.
#ifndef KILN_TRAINER_LOOPS_CALL_USER_H_
#define KILN_TRAINER_LOOPS_CALL_USER_H_

#include <exception>
#include <new>
#include <stdexcept>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "c10/util/Exception.h"
#include "trainer/core/lightning_module.h"
#include "trainer/core/metrics.h"

namespace kiln {

// The payload CallUser puts on the Internal error of an exception that says memory ran out (c10::OutOfMemoryError:
// a device's allocator, LibTorch's CPU allocator; std::bad_alloc), so that the batch-size finder (trainer/tuner.h)
// tells an out-of-memory trial from any other failure, as Lightning's is_oom_error does, without reading the text.
inline constexpr char kOutOfMemoryPayload[] = "type.kiln.dev/out_of_memory";

// Whether `status` came from an exception that said memory ran out (kOutOfMemoryPayload).
inline bool IsOutOfMemoryStatus(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kOutOfMemoryPayload).has_value();
}

// Runs user code (hooks, steps, callbacks). A c10::ValueError (TORCH_CHECK_VALUE, Python's ValueError) or a
// std::invalid_argument is a setting the user's code found wrong: InvalidArgument, a bad input. Any other
// exception is a failure: Internal (with kOutOfMemoryPayload when memory ran out).
template <typename Fn>
absl::Status CallUser(absl::string_view where, Fn&& fn) {
  const auto out_of_memory = [&](absl::string_view what) {
    absl::Status status = absl::InternalError(absl::StrCat(where, " raised: ", what));
    status.SetPayload(kOutOfMemoryPayload, absl::Cord(where));
    return status;
  };
  try {
    fn();
    return absl::OkStatus();
  } catch (const c10::ValueError& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " raised: ", e.what_without_backtrace()));
  } catch (const std::invalid_argument& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " raised: ", e.what()));
  } catch (const c10::OutOfMemoryError& e) {
    return out_of_memory(e.what_without_backtrace());
  } catch (const std::bad_alloc& e) {
    return out_of_memory(e.what());
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
