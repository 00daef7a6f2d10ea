#include "trainer/strategies/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

extern char** environ;

namespace kiln {
namespace {

// The children, for the signal handler (which may only use async-signal-safe calls).
constexpr int kMaxChildren = 256;
volatile sig_atomic_t g_child_count = 0;
pid_t g_children[kMaxChildren];

void ForwardSignal(int signal_number) {
  for (int i = 0; i < g_child_count; ++i) kill(g_children[i], signal_number);
  // End this process the way the signal would have.
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return "ended";
}

absl::StatusOr<std::vector<std::string>> CommandLine() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (raw.empty()) return absl::InternalError("cannot read this program's arguments from /proc/self/cmdline");
  std::vector<std::string> arguments = absl::StrSplit(raw, '\0');
  if (!arguments.empty() && arguments.back().empty()) arguments.pop_back();
  return arguments;
}

}  // namespace

absl::StatusOr<int> FindFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open a socket: ", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string error = std::strerror(errno);
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot find a free port: ", error));
  }
  ::close(fd);
  return static_cast<int>(ntohs(address.sin_port));
}

absl::StatusOr<std::unique_ptr<SubprocessLauncher>> SubprocessLauncher::Launch(const Plan& plan, int port) {
  absl::StatusOr<std::vector<std::string>> arguments = CommandLine();
  if (!arguments.ok()) return arguments.status();
  char executable[4096];
  const ssize_t length = ::readlink("/proc/self/exe", executable, sizeof(executable) - 1);
  if (length <= 0) return absl::InternalError("cannot find this program's executable (/proc/self/exe)");
  executable[length] = '\0';
  if (plan.num_devices() - 1 > kMaxChildren) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxChildren + 1, " local processes are supported"));
  }

  auto launcher = std::unique_ptr<SubprocessLauncher>(new SubprocessLauncher());
  const pid_t parent = ::getpid();
  for (int local_rank = 1; local_rank < plan.num_devices(); ++local_rank) {
    // Everything the child needs is prepared before fork: after it, only async-signal-safe calls are allowed.
    std::vector<std::string> environment;
    const std::vector<std::pair<std::string, std::string>> overrides = {
        {"LOCAL_RANK", absl::StrCat(local_rank)},
        {"NODE_RANK", absl::StrCat(plan.node_rank)},
        {"WORLD_SIZE", absl::StrCat(plan.world_size)},
        {"MASTER_ADDR", plan.main_address.empty() ? "127.0.0.1" : plan.main_address},
        {"MASTER_PORT", absl::StrCat(port)},
    };
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const bool overridden = std::any_of(overrides.begin(), overrides.end(), [&](const auto& pair) {
        return absl::StartsWith(*entry, pair.first + "=");
      });
      if (!overridden) environment.push_back(*entry);
    }
    for (const auto& [key, value] : overrides) environment.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (std::string& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::vector<char*> argv;
    for (std::string& argument : *arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);

    const pid_t pid = ::fork();
    if (pid < 0) {
      launcher->KillAll();
      return absl::InternalError(absl::StrCat("cannot start local rank ", local_rank, ": ", std::strerror(errno)));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);  // The parent died before the line above took effect.
      ::execve(executable, argv.data(), envp.data());
      ::_exit(127);
    }
    launcher->children_.push_back({pid, local_rank, plan.node_rank * plan.num_devices() + local_rank});
    g_children[g_child_count] = pid;
    g_child_count = g_child_count + 1;
  }
  ::signal(SIGINT, ForwardSignal);
  ::signal(SIGTERM, ForwardSignal);
  launcher->watcher_ = std::thread([raw = launcher.get()] { raw->Watch(); });
  return launcher;
}

void SubprocessLauncher::Watch() {
  while (!stop_watching_.load()) {
    for (const Child& child : children_) {
      int status = 0;
      const pid_t done = ::waitpid(child.pid, &status, WNOHANG);
      if (done != child.pid) continue;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        // A rank that finished early is fine only if training is over; Join decides. Keep watching the others.
        continue;
      }
      const std::string message =
          absl::StrCat("error: rank ", child.global_rank, " (local rank ", child.local_rank, ", pid ", child.pid, ") ",
                       Describe(status), "; stopping the other ranks\n");
      (void)!::write(STDERR_FILENO, message.data(), message.size());
      for (const Child& other : children_) {
        if (other.pid != child.pid) ::kill(other.pid, SIGKILL);
      }
      ::_exit(1);
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::Status SubprocessLauncher::Join(absl::Duration timeout) {
  stop_watching_ = true;
  if (watcher_.joinable()) watcher_.join();
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> failures;
  for (Child& child : children_) {
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(child.pid, &status, WNOHANG)) == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (done == 0) {
      ::kill(child.pid, SIGKILL);
      ::waitpid(child.pid, &status, 0);
      failures.push_back(absl::StrCat("rank ", child.global_rank, " did not finish within ",
                                      absl::FormatDuration(timeout)));
    } else if (done == child.pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      failures.push_back(absl::StrCat("rank ", child.global_rank, " ", Describe(status)));
    }
    child.pid = -1;
  }
  g_child_count = 0;
  if (failures.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrJoin(failures, "; "));
}

std::string SubprocessLauncher::KillAll() {
  stop_watching_ = true;
  if (watcher_.joinable()) watcher_.join();
  std::vector<std::string> failed;
  for (Child& child : children_) {
    int status = 0;
    if (child.pid > 0 && ::waitpid(child.pid, &status, WNOHANG) == child.pid) {
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        failed.push_back(absl::StrCat("rank ", child.global_rank, " (local rank ", child.local_rank, ", pid ",
                                      child.pid, ") ", Describe(status)));
      }
      child.pid = -1;
    }
  }
  for (const Child& child : children_) {
    if (child.pid > 0) ::kill(child.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  for (Child& child : children_) {
    if (child.pid <= 0) continue;
    int status = 0;
    while (::waitpid(child.pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        ::kill(child.pid, SIGKILL);
        ::waitpid(child.pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    child.pid = -1;
  }
  g_child_count = 0;
  return absl::StrJoin(failed, "; ");
}

SubprocessLauncher::~SubprocessLauncher() { KillAll(); }

}  // namespace kiln
