#include "trainer/strategies/distributed_program.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "hal/compat/error_message.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"
#include "trainer/strategies/launcher.h"

namespace kiln {
namespace {

constexpr char kJoinedKey[] = "kiln/ranks_joined";

std::string EntryKey(int entry, int rank) { return absl::StrCat("kiln/program/entry/", entry, "/", rank); }
std::string ExitKey(int rank) { return absl::StrCat("kiln/program/exit/", rank); }

std::chrono::milliseconds Millis(absl::Duration duration) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(duration));
}

// What is left until `deadline`, at least a millisecond (c10d treats 0 as "no timeout").
std::chrono::milliseconds Remaining(absl::Time deadline) {
  return std::max(std::chrono::milliseconds(1), Millis(deadline - absl::Now()));
}

std::string Text(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }

std::string EntryPoints(int count) { return count == 1 ? "1 entry point" : absl::StrCat(count, " entry points"); }

// Waits until something accepts TCP connections at address:port, or the deadline passes. Each attempt is a
// non-blocking connect bounded by the time left, so a host that drops packets cannot hold it past the deadline.
absl::Status WaitForListener(const std::string& address, int port, absl::Time deadline) {
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found); error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve MASTER_ADDR '", address, "': ", gai_strerror(error)));
  }
  std::string last_error = "nothing answered";
  while (true) {
    for (addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
      const int fd = ::socket(entry->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      int error = ::connect(fd, entry->ai_addr, entry->ai_addrlen) == 0 ? 0 : errno;
      if (error == EINPROGRESS) {
        pollfd poll_fd = {fd, POLLOUT, 0};
        const int wait_ms = static_cast<int>(std::min<int64_t>(1000, Remaining(deadline).count()));
        if (::poll(&poll_fd, 1, wait_ms) == 1) {
          socklen_t length = sizeof(error);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
        } else {
          error = ETIMEDOUT;
        }
      }
      ::close(fd);
      if (error == 0) {
        ::freeaddrinfo(found);
        return absl::OkStatus();
      }
      last_error = absl::StrCat("connect to ", address, ":", port, ": ", std::strerror(error));
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ::freeaddrinfo(found);
  return absl::DeadlineExceededError(absl::StrCat("rank 0's store never answered: ", last_error));
}

}  // namespace

DistributedProgram& DistributedProgram::Get() {
  static DistributedProgram* const program = new DistributedProgram();
  return *program;
}

void DistributedProgram::BeginEntryPoint(absl::string_view name) { entry_ = std::string(name); }

absl::Status DistributedProgram::Launch(Plan& plan) {
  if (launcher_ != nullptr || stopped_.has_value()) {
    return absl::FailedPreconditionError(
        "this program already started its other processes; every later entry point meets them (its cluster "
        "environment must read LOCAL_RANK, as Kiln's own do)");
  }
  if (!plan.main_port.has_value()) {
    if (plan.num_nodes > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_nodes=", plan.num_nodes,
                       " needs MASTER_ADDR and MASTER_PORT set (the same on every node) so that "
                       "the nodes can meet; set them, and NODE_RANK on each node"));
    }
    absl::StatusOr<int> port = FindFreePort();
    if (!port.ok()) return port.status();
    plan.main_port = *port;
  }
  if (plan.num_devices() > 1) {
    absl::StatusOr<std::unique_ptr<SubprocessLauncher>> launcher = SubprocessLauncher::Launch(plan, *plan.main_port);
    if (!launcher.ok()) return launcher.status();
    launcher_ = *std::move(launcher);
  }
  // Lightning's launcher sets these in its own process too: every later plan of this program (on this Trainer or
  // another) then sees processes that already exist, at this port, as the started ones do.
  const std::pair<const char*, std::string> variables[] = {
      {"MASTER_ADDR", plan.main_address.empty() ? "127.0.0.1" : plan.main_address},
      {"MASTER_PORT", absl::StrCat(*plan.main_port)},
      {"NODE_RANK", absl::StrCat(plan.node_rank)},
      {"LOCAL_RANK", absl::StrCat(plan.local_rank)},
      {"WORLD_SIZE", absl::StrCat(plan.world_size)},
  };
  for (const auto& [name, value] : variables) ::setenv(name, value.c_str(), /*overwrite=*/1);
  if (!exit_registered_) exit_registered_ = std::atexit(&DistributedProgram::ExitHandler) == 0;
  return absl::OkStatus();
}

absl::Status DistributedProgram::Join(const Plan& plan, absl::Duration timeout) {
  // Every wait below shares one deadline, so that joining fails within the timeout, not once per phase.
  const absl::Time deadline = absl::Now() + timeout;
  const std::string address = plan.main_address.empty() ? "127.0.0.1" : plan.main_address;
  const int port = *plan.main_port;
  const bool launcher_store = plan.launcher_store_prefix.has_value();
  const bool serves_store = !launcher_store && plan.global_rank == 0;
  if (!serves_store) {
    // TCPStore's own connect is bounded by the kernel's SYN retries (minutes) for a host that does not answer.
    if (absl::Status answered = WaitForListener(address, port, deadline); !answered.ok()) return answered;
  }
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(port);
  // torchrun's agent (its default, static rendezvous) already serves the store: every rank joins it as a client,
  // under this attempt's prefix, as torch.distributed's env:// rendezvous does. Otherwise rank 0 serves it.
  store_options.isServer = serves_store;
  store_options.numWorkers = static_cast<size_t>(plan.world_size);
  store_options.waitWorkers = false;  // The check-in below waits, against the deadline.
  store_options.timeout = Remaining(deadline);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(address, store_options);
    if (launcher_store) store = c10::make_intrusive<c10d::PrefixStore>(*plan.launcher_store_prefix, store);
    // Every rank checks in; Gloo then connects peers that are all there, so its own wait is short.
    store->add(kJoinedKey, 1);
    for (int64_t joined = 0; (joined = store->add(kJoinedKey, 0)) < plan.world_size;) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(joined, " of ", plan.world_size, " ranks joined"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    // Later waits (each entry point's agreement, the process groups') have the whole timeout each.
    store->setTimeout(Millis(timeout));
  } catch (const std::exception& e) {
    const std::string message = compat::ExceptionMessage(e);
    if (absl::StrContains(message, "ddress already in use")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MASTER_PORT=", port, " is already in use on this machine; pick another port, or unset MASTER_PORT to "
          "let Kiln choose a free one (", message, ")"));
    }
    // A launcher's store speaks its own PyTorch's protocol (torchrun from another PyTorch resets the connection).
    return absl::DeadlineExceededError(
        launcher_store ? absl::StrCat(message, "; the launcher serves this store: it must come from a PyTorch of the "
                                               "same version as Kiln's LibTorch, or use torchrun "
                                               "--rdzv_backend=c10d, where rank 0 serves it")
                       : message);
  }
  store_ = std::move(store);
  serves_store_ = serves_store;
  where_ = absl::StrCat(address, ":", port);
  rank_ = plan.global_rank;
  world_size_ = plan.world_size;
  if (!exit_registered_) exit_registered_ = std::atexit(&DistributedProgram::ExitHandler) == 0;
  return absl::OkStatus();
}

absl::StatusOr<c10::intrusive_ptr<c10d::Store>> DistributedProgram::Meet(const Plan& plan, absl::Duration timeout) {
  const std::string& entry = entry_;
  if (stopped_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this program's other processes were stopped when an entry point failed (", *stopped_, "), so ", entry,
        " cannot run on them; a program on several processes cannot go on after a failed entry point: end it, "
        "mend the cause and start it again"));
  }
  if (!plan.main_port.has_value()) {
    return absl::FailedPreconditionError(
        "the processes need a main port to meet: set MASTER_PORT (and MASTER_ADDR) on every node");
  }
  timeout_ = timeout;
  if (store_ == nullptr) {
    if (absl::Status joined = Join(plan, timeout); !joined.ok()) return joined;
  } else {
    const std::string where =
        absl::StrCat(plan.main_address.empty() ? "127.0.0.1" : plan.main_address, ":", *plan.main_port);
    if (where != where_ || plan.global_rank != rank_ || plan.world_size != world_size_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this program's processes met at ", where_, " as ", world_size_, " ranks (this one rank ", rank_,
          ") in their first entry point, but ", entry, " asks for rank ", plan.global_rank, " of ", plan.world_size,
          " at ", where, "; every Trainer of a program on several processes must use the same devices and "
          "num_nodes (the processes are started once, for the whole program)"));
    }
  }
  ++entries_;
  const absl::Time deadline = absl::Now() + timeout;
  if (absl::Status agreed = Agree(deadline); !agreed.ok()) return agreed;
  last_entry_ = entry;
  return c10::intrusive_ptr<c10d::Store>(
      c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("kiln/", entries_), store_));
}

absl::Status DistributedProgram::Agree(absl::Time deadline) {
  const std::string& mine = entry_;
  const std::string rule =
      "; every process of a program must call the same entry points (fit, validate, test, predict), in the same order";
  try {
    store_->set(EntryKey(entries_, rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
    // What each other rank said: nothing yet, the same entry point, another one, or that its program ended. The
    // report names the lowest rank that disagrees, once every rank below it has answered, so that it does not
    // depend on which answer the store gave first.
    enum class Answer { kNone, kSame, kOther, kEnded };
    std::vector<Answer> answers(world_size_, Answer::kNone);
    std::vector<std::string> said(world_size_);
    answers[rank_] = Answer::kSame;
    absl::Duration pause = absl::Milliseconds(1);
    while (true) {
      for (int rank = 0; rank < world_size_; ++rank) {
        if (answers[rank] != Answer::kNone) continue;
        // A rank writes its entry point before its exit, so the exit is read first: a rank seen to have ended has
        // its entry point (if it reached this one) already in the store, and that answer, not the end, is named.
        const bool ended = store_->check({ExitKey(rank)});
        if (const std::string key = EntryKey(entries_, rank); store_->check({key})) {
          said[rank] = Text(store_->get(key));
          answers[rank] = said[rank] == mine ? Answer::kSame : Answer::kOther;
        } else if (ended) {
          said[rank] = Text(store_->get(ExitKey(rank)));  // "<entry points met> <the last one's name>"
          answers[rank] = Answer::kEnded;
        }
      }
      std::vector<int> waiting;
      for (int rank = 0; rank < world_size_; ++rank) {
        if (answers[rank] == Answer::kSame) continue;
        if (answers[rank] == Answer::kNone) {
          waiting.push_back(rank);
          continue;
        }
        if (!waiting.empty()) break;  // A lower rank has not answered: it may be the one to name.
        if (answers[rank] == Answer::kOther) {
          return absl::FailedPreconditionError(absl::StrCat("entry point ", entries_, " of this program differs "
                                                            "between the ranks: rank ", rank_, " (this one) called ",
                                                            mine, ", rank ", rank, " called ", said[rank], rule));
        }
        const std::vector<std::string> ended = absl::StrSplit(said[rank], absl::MaxSplits(' ', 1));
        int count = 0;
        (void)absl::SimpleAtoi(ended[0], &count);
        const std::string last =
            ended.size() > 1 && !ended[1].empty() ? absl::StrCat(" (the last: ", ended[1], ")") : "";
        return absl::FailedPreconditionError(absl::StrCat(
            "rank ", rank, " ended its program after ", EntryPoints(count), last, ", while rank ", rank_,
            " (this one) called ", mine, " as entry point ", entries_, rule));
      }
      if (waiting.empty()) return absl::OkStatus();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            waiting.size() == 1 ? "rank " : "ranks ", absl::StrJoin(waiting, ", "), " did not come to entry point ",
            entries_, " of this program (", mine, ")", rule));
      }
      absl::SleepFor(pause);
      pause = std::min(pause * 2, absl::Milliseconds(50));
    }
  } catch (const std::exception& e) {
    return absl::DeadlineExceededError(absl::StrCat("the program's store stopped answering while the ranks agreed on "
                                                    "entry point ", entries_, " (", mine, "): ",
                                                    compat::ExceptionMessage(e), "; rank 0 has probably ended"));
  }
}

std::string DistributedProgram::Stop(const absl::Status& why) {
  if (launcher_ == nullptr) return "";
  std::string failed = launcher_->KillAll();
  launcher_.reset();
  stopped_ = std::string(why.message());
  return failed;
}

void DistributedProgram::ExitHandler() { Get().Exit(); }

void DistributedProgram::Exit() {
  if (store_ != nullptr) {
    // The peers waiting for this rank at an entry point it will never call fail at once, naming it.
    const std::string ended = absl::StrCat(entries_, " ", last_entry_);
    try {
      store_->set(ExitKey(rank_), std::vector<uint8_t>(ended.begin(), ended.end()));
    } catch (const std::exception& e) {
      LOG(INFO) << "could not tell the other ranks that rank " << rank_ << " ended: " << compat::ExceptionMessage(e);
    }
  }
  if (launcher_ != nullptr) {
    // The started processes die with this one: wait for them to end their program first.
    if (absl::Status joined = launcher_->Join(timeout_); !joined.ok()) {
      std::fprintf(stderr, "error: this program's other processes did not end well: %s\n",
                   std::string(joined.message()).c_str());
      std::fflush(nullptr);
      ::_exit(1);
    }
    launcher_.reset();
  } else if (serves_store_ && store_ != nullptr && !stopped_.has_value()) {
    // The others may still use the store this rank serves (their last entry point's end, their exit): keep it until
    // every rank has ended, within the timeout (unless Stop ended them).
    const absl::Time deadline = absl::Now() + timeout_;
    for (int rank = 0; rank < world_size_; ++rank) {
      try {
        while (!store_->check({ExitKey(rank)}) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
      } catch (const std::exception& e) {
        break;
      }
    }
  }
  // Closed here, while the process is whole: the store's threads must not outlive LibTorch's statics.
  store_.reset();
}

}  // namespace kiln
