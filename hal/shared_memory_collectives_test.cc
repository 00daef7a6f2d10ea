// SharedMemoryCollectives across real processes: three forks of this test meet through a TCPStore, make Kiln's Gloo
// backend (MakeGlooCollectiveBackend, which wraps it), and check each collective against the result computed here
// from every rank's inputs (each rank can make every rank's inputs: they come from seeded generators), bit for bit.
#include "hal/shared_memory_collectives.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "hal/collectives.h"
#include "hal/testing/rank_runner.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"

namespace kiln {
namespace {

constexpr int kRanks = 3;

c10::intrusive_ptr<c10d::Store> JoinStore(int rank, int port) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = rank == 0;
  options.numWorkers = kRanks;
  options.timeout = std::chrono::seconds(30);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> MakeBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                              const std::string& prefix,
                                                              std::chrono::milliseconds timeout) {
  CollectiveOptions options;
  options.store = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  options.rank = rank;
  options.world_size = kRanks;
  options.timeout = timeout;
  options.host_endpoints.push_back({.is_interface = false, .name = "127.0.0.1"});
  return MakeGlooCollectiveBackend(options);
}

// Runs `checks` as rank 0 here and as ranks 1.. in forks started before any LibTorch thread exists; each returns
// how many of its checks failed (and prints which). Expects none, and every fork to exit 0.
void RunRanks(int (*checks)(int rank, int port)) {
  const int port = testing::FreeLoopbackPort();
  std::vector<pid_t> children;
  for (int rank = 1; rank < kRanks; ++rank) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(checks(rank, port) == 0 ? 0 : 1);
    children.push_back(child);
  }
  EXPECT_EQ(checks(0, port), 0) << "rank 0's checks failed (above)";
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    ASSERT_EQ(waitpid(children[i], &status, 0), children[i]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << i + 1 << " ended with status " << status;
  }
}

#define CHECK_OR_COUNT(condition, what)                                       \
  do {                                                                        \
    if (!(condition)) {                                                       \
      std::cerr << "rank " << rank << ": FAILED: " << what << std::endl;      \
      ++failures;                                                             \
    }                                                                         \
  } while (0)

// Rank `rank`'s input for a check: seeded by the rank and the check, so that every rank can make every rank's.
at::Tensor Input(int rank, int check, int64_t numel, at::ScalarType type) {
  at::manual_seed(1000 * check + rank);
  if (at::isFloatingType(type)) return at::randn({numel}).to(type);
  return at::randint(-1000, 1000, {numel}, at::kLong).to(type);
}

// ((x0 op x1) op x2) ..., elementwise, as the backend promises.
at::Tensor Reduced(int check, int64_t numel, at::ScalarType type, c10d::ReduceOp op) {
  at::Tensor result = Input(0, check, numel, type);
  for (int q = 1; q < kRanks; ++q) {
    const at::Tensor x = Input(q, check, numel, type);
    switch (op.op_) {
      case c10d::ReduceOp::SUM:
        result = result + x;
        break;
      case c10d::ReduceOp::PRODUCT:
        result = result * x;
        break;
      case c10d::ReduceOp::MIN:
        result = at::minimum(result, x);
        break;
      default:
        result = at::maximum(result, x);
        break;
    }
  }
  return result;
}

// Sizes around and across the rounds' sizes (a slot is 2 MiB at three ranks): one element, an odd count smaller
// than a round, and one of several rounds that does not end on a round's boundary.
const std::vector<int64_t> kSizes = {1, 4099, (int64_t{5} << 20) / 4 + 13};

int RunCollectives(int rank, int port) {
  int failures = 0;
  c10::intrusive_ptr<c10d::Store> store = JoinStore(rank, port);
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> made = MakeBackend(store, rank, "shm", std::chrono::seconds(30));
  CHECK_OR_COUNT(made.ok(), "MakeGlooCollectiveBackend: " << made.status());
  if (!made.ok()) return failures;
  c10d::Backend& backend = **made;
  CHECK_OR_COUNT(SharedMemoryCollectives::IsSharedMemory(backend), "three ranks on one host were not wrapped");
  CHECK_OR_COUNT(backend.getBackendName() == "gloo", "named " << backend.getBackendName());

  int check = 0;
  for (const int64_t numel : kSizes) {
    const std::vector<std::pair<at::ScalarType, c10d::ReduceOp::RedOpType>> reductions = {
        {at::kFloat, c10d::ReduceOp::SUM},    {at::kBFloat16, c10d::ReduceOp::SUM}, {at::kDouble, c10d::ReduceOp::MIN},
        {at::kLong, c10d::ReduceOp::MAX},     {at::kInt, c10d::ReduceOp::PRODUCT}};
    for (const auto& [type, op] : reductions) {
      ++check;
      std::vector<at::Tensor> tensors = {Input(rank, check, numel, type)};
      c10d::AllreduceOptions options;
      options.reduceOp = op;
      backend.allreduce(tensors, options)->wait();
      CHECK_OR_COUNT(at::equal(tensors[0], Reduced(check, numel, type, op)),
                     "allreduce of " << numel << " " << type << " op " << static_cast<int>(op));
    }

    ++check;
    std::vector<at::Tensor> broadcast = {Input(rank, check, numel, at::kFloat)};
    c10d::BroadcastOptions root;
    root.rootRank = 1;
    backend.broadcast(broadcast, root)->wait();
    CHECK_OR_COUNT(at::equal(broadcast[0], Input(1, check, numel, at::kFloat)), "broadcast of " << numel);

    ++check;
    at::Tensor mine = Input(rank, check, numel, at::kHalf);
    at::Tensor flat = at::empty({kRanks * numel}, at::kHalf);
    backend._allgather_base(flat, mine)->wait();
    std::vector<std::vector<at::Tensor>> lists(1);
    for (int q = 0; q < kRanks; ++q) lists[0].push_back(at::empty({numel}, at::kHalf));
    std::vector<at::Tensor> inputs = {mine};
    backend.allgather(lists, inputs)->wait();
    for (int q = 0; q < kRanks; ++q) {
      const at::Tensor expected = Input(q, check, numel, at::kHalf);
      CHECK_OR_COUNT(at::equal(flat.slice(0, q * numel, (q + 1) * numel), expected),
                     "_allgather_base of " << numel << ", rank " << q << "'s part");
      CHECK_OR_COUNT(at::equal(lists[0][q], expected), "allgather of " << numel << ", rank " << q << "'s part");
    }

    ++check;
    at::Tensor whole = Input(rank, check, kRanks * numel, at::kFloat);
    at::Tensor chunk = at::empty({numel}, at::kFloat);
    backend._reduce_scatter_base(chunk, whole)->wait();
    const at::Tensor sums = Reduced(check, kRanks * numel, at::kFloat, c10d::ReduceOp::SUM);
    CHECK_OR_COUNT(at::equal(chunk, sums.slice(0, rank * numel, (rank + 1) * numel)),
                   "_reduce_scatter_base of " << numel);
    std::vector<std::vector<at::Tensor>> pieces(1);
    for (int q = 0; q < kRanks; ++q) pieces[0].push_back(whole.slice(0, q * numel, (q + 1) * numel).clone());
    std::vector<at::Tensor> outputs = {at::empty({numel}, at::kFloat)};
    backend.reduce_scatter(outputs, pieces)->wait();
    CHECK_OR_COUNT(at::equal(outputs[0], chunk), "reduce_scatter of " << numel);
    // In place: the output is this rank's own piece of the input.
    at::Tensor output = whole.slice(0, rank * numel, (rank + 1) * numel);
    backend._reduce_scatter_base(output, whole)->wait();
    CHECK_OR_COUNT(at::equal(output, chunk), "_reduce_scatter_base in place, of " << numel);
  }
  backend.barrier()->wait();

  // What it does not carry goes to Gloo, and still works: a non-contiguous tensor, and several tensors at once.
  std::vector<at::Tensor> strided = {at::full({4, 2}, static_cast<float>(rank + 1)).t()};
  backend.allreduce(strided)->wait();
  CHECK_OR_COUNT(strided[0].eq(kRanks * (kRanks + 1) / 2).all().item<bool>(), "a non-contiguous allreduce");
  return failures;
}

TEST(SharedMemoryCollectivesTest, EveryCollectiveGivesTheRankOrderResultAcrossThreeProcesses) {
  RunRanks(&RunCollectives);
}

// Names in /dev/shm that start with "kiln-<pid>-".
std::vector<std::string> SegmentsOf(pid_t pid) {
  std::vector<std::string> found;
  const std::string prefix = "kiln-" + std::to_string(pid) + "-";
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) {
      if (std::string(entry->d_name).rfind(prefix, 0) == 0) found.push_back(entry->d_name);
    }
    closedir(dir);
  }
  return found;
}

int RunSetUpLeavesNothing(int rank, int port) {
  int failures = 0;
  c10::intrusive_ptr<c10d::Store> store = JoinStore(rank, port);
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> made = MakeBackend(store, rank, "a", std::chrono::seconds(30));
  CHECK_OR_COUNT(made.ok() && SharedMemoryCollectives::IsSharedMemory(**made), "not wrapped");
  if (!made.ok()) return failures;
  // Once made, the segment has no name left: a killed run leaves nothing in /dev/shm.
  if (rank == 0) CHECK_OR_COUNT(SegmentsOf(getpid()).empty(), "a /dev/shm/kiln-" << getpid() << "-* file remains");
  std::vector<at::Tensor> one = {at::ones({8})};
  (*made)->allreduce(one)->wait();
  CHECK_OR_COUNT(one[0].eq(kRanks).all().item<bool>(), "the allreduce");

  // KILN_SHARED_MEMORY_COLLECTIVES=0 (in every rank) keeps Gloo's connections.
  setenv(kSharedMemoryCollectivesEnv, "0", 1);
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> plain = MakeBackend(store, rank, "b", std::chrono::seconds(30));
  unsetenv(kSharedMemoryCollectivesEnv);
  CHECK_OR_COUNT(plain.ok() && !SharedMemoryCollectives::IsSharedMemory(**plain),
                 kSharedMemoryCollectivesEnv << "=0 still wrapped Gloo");
  if (!plain.ok()) return failures;
  std::vector<at::Tensor> two = {at::ones({8})};
  (*plain)->allreduce(two)->wait();
  CHECK_OR_COUNT(two[0].eq(kRanks).all().item<bool>(), "plain Gloo's allreduce");
  return failures;
}

TEST(SharedMemoryCollectivesTest, SetUpLeavesNoFileAndCanBeTurnedOff) { RunRanks(&RunSetUpLeavesNothing); }

// What `collective` threw ("" when it returned).
std::string ErrorOf(const std::function<void()>& collective) {
  try {
    collective();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Rank 2 exits without taking part; ranks 0 and 1 must say so at once, naming it, long before their 60 s timeout.
int RunDeadPeer(int rank, int port) {
  int failures = 0;
  c10::intrusive_ptr<c10d::Store> store = JoinStore(rank, port);
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> made = MakeBackend(store, rank, "d", std::chrono::seconds(60));
  CHECK_OR_COUNT(made.ok(), made.status());
  if (!made.ok()) return failures;
  std::vector<at::Tensor> warm = {at::ones({4})};
  (*made)->allreduce(warm)->wait();
  if (rank == 2) _exit(0);
  const auto start = std::chrono::steady_clock::now();
  const std::string message = ErrorOf([&] {
    std::vector<at::Tensor> value = {at::ones({4})};
    (*made)->allreduce(value)->wait();
  });
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK_OR_COUNT(message.find("rank 2 (pid") != std::string::npos &&
                     message.find("exited while this rank waited for it") != std::string::npos,
                 "the error does not name the dead rank: '" << message << "'");
  CHECK_OR_COUNT(waited < std::chrono::seconds(10), "noticed the dead rank only after "
                                                        << std::chrono::duration<double>(waited).count() << " s");
  // The group stays failed, saying why.
  const std::string after = ErrorOf([&] { (*made)->barrier()->wait(); });
  CHECK_OR_COUNT(after.find("an earlier collective of this group failed") != std::string::npos,
                 "a barrier after the failure: '" << after << "'");
  return failures;
}

TEST(SharedMemoryCollectivesTest, ARankThatExitsIsNamedAtOnce) { RunRanks(&RunDeadPeer); }

// Rank 2 comes 4 s late to a group whose timeout is 1 s: rank 0 and 1 time out naming it, and rank 2, arriving
// after them, fails too (the segment is marked) instead of waiting for ranks that have given up.
int RunLatePeer(int rank, int port) {
  int failures = 0;
  c10::intrusive_ptr<c10d::Store> store = JoinStore(rank, port);
  absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> made = MakeBackend(store, rank, "t", std::chrono::seconds(30));
  CHECK_OR_COUNT(made.ok(), made.status());
  if (!made.ok()) return failures;
  (*made)->setTimeout(std::chrono::seconds(1));
  if (rank == 2) usleep(4 * 1000 * 1000);
  const std::string message = ErrorOf([&] { (*made)->barrier()->wait(); });
  if (rank == 2) {
    CHECK_OR_COUNT(message.find("failed in a collective of this group") != std::string::npos,
                   "the late rank: '" << message << "'");
  } else {
    // The first to time out says so; the other may see that first (both wait for the same rank).
    const bool timed_out = message.find("timed out after 1000 ms waiting for rank(s) 2") != std::string::npos;
    const bool saw_it = message.find("failed in a collective of this group") != std::string::npos &&
                        message.find("waited for rank 2") != std::string::npos;
    CHECK_OR_COUNT(timed_out || saw_it, "a waiting rank: '" << message << "'");
  }
  return failures;
}

TEST(SharedMemoryCollectivesTest, ATimeoutNamesTheMissingRankAndFailsTheLateOne) { RunRanks(&RunLatePeer); }

}  // namespace
}  // namespace kiln
