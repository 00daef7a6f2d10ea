#include "hal/compat/c10d.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "ATen/ops/full.h"
#include "gtest/gtest.h"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"
#include "torch/csrc/distributed/c10d/comm.hpp"

namespace kiln::compat {
namespace {

// A port that was free a moment ago on loopback.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// Rank `rank` of two on loopback, joined through a TCPStore that rank 0 serves, with Gloo `options` whose timeout
// serves both for joining and for collectives.
c10::intrusive_ptr<c10d::ProcessGroup> JoinGroup(int rank, int port,
                                                 const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(port);
  store_options.isServer = rank == 0;
  store_options.numWorkers = 2;
  store_options.timeout = std::chrono::seconds(30);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return MakeGlooProcessGroup(store, rank, 2, options, options->timeout);
}

// Runs `rank_checks` as rank 0 here and as rank 1 in a fork started before any LibTorch thread exists, on a port
// that was free; each returns how many of its checks failed. Expects none, in either process.
void RunTwoProcesses(int (*rank_checks)(int rank, int port), const std::string& what_failed) {
  const int port = FreePort();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(rank_checks(1, port) == 0 ? 0 : 1);
  const int failures = rank_checks(0, port);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(failures, 0) << what_failed;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank 1 ended with status " << status;
}

// Rank `rank` of two: all-reduces rank + 1 (the sum is 3 on both) and receives rank 0's tensor by
// broadcast_coalesced. Returns how many checks failed.
int RunRank(int rank, int port) {
  c10::intrusive_ptr<c10d::ProcessGroup> group =
      JoinGroup(rank, port, c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30)));
  int failures = 0;
  if (group->getRank() != rank || group->getSize() != 2) ++failures;

  std::vector<at::Tensor> sum = {at::full({3}, static_cast<float>(rank + 1))};
  group->allreduce(sum)->wait();
  if (!sum[0].eq(3).all().item<bool>()) ++failures;

  std::vector<at::Tensor> states = {at::full({2}, rank == 0 ? 7.0f : -1.0f), at::full({5}, rank == 0 ? 1.5f : 0.0f)};
  c10d::broadcast_coalesced(group, states, /*buffer_size=*/1 << 20, /*rank=*/0);
  if (!states[0].eq(7).all().item<bool>() || !states[1].eq(1.5).all().item<bool>()) ++failures;
  return failures;
}

// Two real processes on loopback.
TEST(C10dTest, GlooGroupAllReducesAndBroadcastsAcrossTwoProcesses) {
  RunTwoProcesses(&RunRank, "rank 0's checks failed");
}

// Rank `rank` of two, with a timeout of 3 s for joining and for collectives: rank 1 reaches the all-reduce 1.5 s
// after rank 0. Gloo connects with a fifth of the timeout (c10d.cc), so rank 0 waits out this gap only if the
// group's collectives have the whole timeout back. Returns how many checks failed.
int RunLateRank(int rank, int port) {
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(3));
  c10::intrusive_ptr<c10d::ProcessGroup> group = JoinGroup(rank, port, options);
  int failures = options->timeout == std::chrono::seconds(3) ? 0 : 1;  // The caller's options stay as they were.
  if (rank == 1) usleep(1500 * 1000);
  std::vector<at::Tensor> sum = {at::full({1}, static_cast<float>(rank + 1))};
  try {
    group->allreduce(sum)->wait();
    if (!sum[0].eq(3).all().item<bool>()) ++failures;
  } catch (const std::exception&) {
    ++failures;
  }
  return failures;
}

TEST(C10dTest, CollectivesWaitTheWholeTimeoutAfterConnecting) {
  RunTwoProcesses(&RunLateRank, "rank 0 gave up on a peer 1.5 s late, within its 3 s timeout");
}

}  // namespace
}  // namespace kiln::compat
