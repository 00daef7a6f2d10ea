#include "hal/testing/rank_runner.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace kiln::testing {

std::string ThisProgram(const char* argv0) {
  char self[4096];
  const ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  return length > 0 ? std::string(self, length) : std::string(argv0);
}

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

double TestTimeoutSeconds(double fallback) {
  const char* limit = std::getenv("TEST_TIMEOUT");
  char* end = nullptr;
  const double seconds = limit != nullptr ? std::strtod(limit, &end) : 0;
  return limit != nullptr && end != limit && *end == '\0' && seconds > 0 ? seconds : fallback;
}

std::vector<RankRun> RunRanks(const std::vector<std::vector<std::string>>& argvs, const std::string& log_prefix,
                              double deadline_s) {
  std::vector<RankRun> runs(argvs.size());
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < argvs.size(); ++i) {
    runs[i].log = log_prefix + "_" + std::to_string(i) + ".log";
    std::vector<std::string> args = argvs[i];
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(runs[i].log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    runs[i].pid = pid;
  }
  size_t running = runs.size();
  bool failed = false;
  while (running > 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (RankRun& run : runs) {
      if (run.status != -1) continue;
      int status = 0;
      if (::waitpid(run.pid, &status, WNOHANG) == run.pid) {
        run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        run.seconds = elapsed;
        failed = failed || run.status != 0;
        --running;
      } else if (elapsed > deadline_s || failed) {
        ::kill(run.pid, SIGKILL);
        ::waitpid(run.pid, &status, 0);
        run.status = elapsed > deadline_s ? -2 : -3;
        run.seconds = elapsed;
        --running;
      }
    }
    ::usleep(20 * 1000);
  }
  return runs;
}

std::string RankExcerpt(const std::string& text) {
  constexpr size_t kTail = 2000;
  constexpr size_t kErrorLine = 600;
  if (text.size() <= kTail) return text;
  const size_t tail_start = text.size() - kTail;
  std::string excerpt;
  // The rank's own words lead its error line; LibTorch's backtrace after them can fill the whole tail.
  size_t error = text.rfind("\nerror: ", tail_start);
  if (error != std::string::npos) {
    ++error;
  } else if (text.compare(0, 7, "error: ") == 0) {
    error = 0;
  }
  if (error != std::string::npos && error < tail_start) {
    const size_t end = text.find('\n', error);
    excerpt = text.substr(error, std::min(kErrorLine, (end == std::string::npos ? text.size() : end) - error));
    excerpt += "\n[...]\n";
  }
  return excerpt + text.substr(tail_start);
}

std::string RankOutput(const RankRun& run) {
  std::ifstream file(run.log);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return RankExcerpt(text);
}

std::string RankEnding(const RankRun& run) {
  if (run.status == -2) return "did not finish in time";
  if (run.status == -3) return "was stopped after another rank had failed";
  return "failed (exit status " + std::to_string(run.status) + ")";
}

}  // namespace kiln::testing
