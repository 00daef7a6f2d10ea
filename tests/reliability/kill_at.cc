// Runs a command and sends it SIGKILL at a chosen moment, judged by what appears in its checkpoint folder.
//
//   kill_at --watch=DIR --after_checkpoint_ms=N -- COMMAND...   # N ms after the first *.ckpt appears in DIR
//   kill_at --watch=DIR --during_write=K --delay_us=D -- COMMAND...
//                                    # D us after the K-th checkpoint write starts (a "*.tmp-<pid>" file appears)
//
// Checkpoints are written by a background thread through a temporary file and a rename (trainer/checkpoint/checkpoint_io.h),
// so a temporary file in DIR means a write is in progress. The folder is polled every 100 us.
//
// Prints one line, `killed_ms=<ms since start> in_write=<0|1> tmp_files=<n> checkpoints=<names,...>`, where
// in_write says whether a temporary file was there when the kill landed. Exit status: 0 after a kill, 3 when the
// command ended before the moment came (the line then says `missed exit=<status>`), 2 for bad arguments.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Folder {
  std::vector<std::string> checkpoints;
  int temporary = 0;
};

Folder Scan(const std::string& dir) {
  Folder folder;
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) return folder;
  while (const dirent* entry = ::readdir(handle)) {
    const std::string name = entry->d_name;
    if (name.find(".tmp-") != std::string::npos) {
      ++folder.temporary;
    } else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".ckpt") == 0) {
      folder.checkpoints.push_back(name);
    }
  }
  ::closedir(handle);
  std::sort(folder.checkpoints.begin(), folder.checkpoints.end());
  return folder;
}

bool Flag(const char* argument, const char* name, std::string* value) {
  const size_t length = std::strlen(name);
  if (std::strncmp(argument, name, length) != 0 || argument[length] != '=') return false;
  *value = argument + length + 1;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string watch, after_ms, during_write, delay_us = "0";
  int command = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      command = i + 1;
      break;
    }
    if (!Flag(argv[i], "--watch", &watch) && !Flag(argv[i], "--after_checkpoint_ms", &after_ms) &&
        !Flag(argv[i], "--during_write", &during_write) && !Flag(argv[i], "--delay_us", &delay_us)) {
      std::fprintf(stderr, "kill_at: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (command < 0 || command >= argc || watch.empty() || after_ms.empty() == during_write.empty()) {
    std::fprintf(stderr,
                 "usage: kill_at --watch=DIR (--after_checkpoint_ms=N | --during_write=K [--delay_us=D]) "
                 "-- COMMAND...\n");
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const pid_t child = ::fork();
  if (child == 0) {
    ::execvp(argv[command], argv + command);
    std::perror("kill_at: exec");
    ::_exit(127);
  }
  const long write_index = during_write.empty() ? 0 : std::atol(during_write.c_str());
  const auto wait_after_checkpoint = std::chrono::milliseconds(std::atol(after_ms.c_str()));
  const auto wait_after_write = std::chrono::microseconds(std::atol(delay_us.c_str()));
  long writes_seen = 0;
  bool writing = false;
  bool armed = false;
  Clock::time_point deadline;
  while (true) {
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) {
      std::printf("missed exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      return 3;
    }
    const Folder folder = Scan(watch);
    if (!armed) {
      if (write_index == 0 && !folder.checkpoints.empty()) {
        armed = true;
        deadline = Clock::now() + wait_after_checkpoint;
      }
      if (write_index > 0) {
        if (folder.temporary > 0 && !writing && ++writes_seen == write_index) {
          armed = true;
          deadline = Clock::now() + wait_after_write;
        }
        writing = folder.temporary > 0;
      }
    }
    if (armed && Clock::now() >= deadline) break;
    const timespec pause{0, 100 * 1000};
    ::nanosleep(&pause, nullptr);
  }
  ::kill(child, SIGKILL);
  const auto killed = Clock::now();
  int status = 0;
  ::waitpid(child, &status, 0);
  const Folder folder = Scan(watch);
  std::string names;
  for (const std::string& name : folder.checkpoints) names += (names.empty() ? "" : ",") + name;
  std::printf("killed_ms=%lld in_write=%d tmp_files=%d checkpoints=%s\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(killed - start).count()),
              folder.temporary > 0 ? 1 : 0, folder.temporary, names.c_str());
  return 0;
}
