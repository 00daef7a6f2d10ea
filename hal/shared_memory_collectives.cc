#include "hal/shared_memory_collectives.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <utility>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hal/completed_work.h"

namespace kiln {
namespace {

constexpr uint64_t kMagic = 0x6b696c6e73686d31;  // "kilnshm1"
constexpr size_t kLine = 64;
constexpr size_t kPage = 4096;
// The buffers' whole size, both sets: a slot per rank and a result area each. 16 MiB fits Docker's default /dev/shm
// (64 MiB) several times over, and keeps rounds of about 1-4 MiB, where a round's meeting costs little beside its
// copies.
constexpr size_t kDataBytes = size_t{16} << 20;
constexpr size_t kMinSlotBytes = size_t{64} << 10;
constexpr size_t kMaxSlotBytes = size_t{4} << 20;
// A waiting rank spins this many times before it sleeps: enough for a peer that runs on another core, little for one
// that waits for the core this rank holds.
constexpr int kSpins = 200;
// How often a sleeping rank wakes to check that the ranks it waits for still live.
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

struct alignas(kLine) Word {
  std::atomic<uint32_t> value;
};
struct alignas(kLine) Counter {
  std::atomic<uint64_t> value;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the segment's counters are shared between processes: they must be lock-free");

// The segment's first page(s): then `world_size` Counters (each rank's meetings), then `world_size` pids.
struct Control {
  uint64_t magic;
  uint32_t world_size;
  uint32_t reserved;
  uint64_t slot_bytes;
  Word bell;      // Changes at every arrival and failure: what sleepers wait on.
  Word sleepers;  // How many ranks sleep on `bell` (arrivals wake them only then).
  Word failed;    // 0, or 1 + the rank that failed.
};

size_t RoundUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

size_t ControlBytes(int world_size) {
  return RoundUp(RoundUp(sizeof(Control), kLine) + world_size * sizeof(Counter) + world_size * sizeof(int32_t), kPage);
}

size_t SlotBytes(int world_size) {
  const size_t slot = kDataBytes / (2 * (static_cast<size_t>(world_size) + 1)) / kPage * kPage;
  return std::clamp(slot, kMinSlotBytes, kMaxSlotBytes);
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string LinkTarget(const std::string& path) {
  char buffer[256];
  const ssize_t n = readlink(path.c_str(), buffer, sizeof(buffer));
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
}

// What ranks that can share a segment and see each other's processes have in common.
std::string HostIdentity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(ReadFirstLine("/proc/sys/kernel/random/boot_id"), "|", host, "|",
                      LinkTarget("/proc/self/ns/pid"), "|", LinkTarget("/proc/self/ns/mnt"));
}

std::string StoreGet(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> value = store.get(key);
  return std::string(value.begin(), value.end());
}

void StoreSet(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

int FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  return static_cast<int>(syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0));
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// What the copies carry: any dtype, as bytes.
bool Carried(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_cpu() && tensor.layout() == at::kStrided && tensor.is_contiguous() &&
         !tensor.is_conj() && !tensor.is_neg();  // A lazily conjugated or negated view's bytes are not its values.
}

bool Reducible(const at::Tensor& tensor, c10d::ReduceOp op) {
  if (!Carried(tensor)) return false;
  // The types whose sums, products, minima and maxima ATen computes on the CPU (not bool, nor the wide unsigned
  // ones); the rest go to Gloo, which says what it takes.
  switch (tensor.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
      break;
    default:
      return false;
  }
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      return true;
    default:
      return false;
  }
}

// out = a op b, elementwise; `out` may be `a` or `b`.
void Combine(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, c10d::ReduceOp op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      at::add_out(out, a, b);
      break;
    case c10d::ReduceOp::PRODUCT:
      at::mul_out(out, a, b);
      break;
    case c10d::ReduceOp::MIN:
      at::minimum_out(out, a, b);
      break;
    default:
      at::maximum_out(out, a, b);
      break;
  }
}

at::Tensor View(const std::byte* data, int64_t numel, at::ScalarType type) {
  return at::from_blob(const_cast<std::byte*>(data), {numel}, at::TensorOptions().dtype(type));
}

std::byte* Bytes(const at::Tensor& tensor) { return static_cast<std::byte*>(tensor.data_ptr()); }

}  // namespace

struct SharedMemoryCollectives::Segment {
  void* base = nullptr;
  size_t bytes = 0;
  int world_size = 1;
  size_t slot_bytes = 0;
  Control* control = nullptr;
  std::byte* data = nullptr;
  std::vector<int> pidfds;  // Per rank; -1 for this rank and where pidfd_open is not available.

  Counter& meetings(int q) const {
    return reinterpret_cast<Counter*>(reinterpret_cast<std::byte*>(control) + RoundUp(sizeof(Control), kLine))[q];
  }
  int32_t& pid(int q) const {
    return reinterpret_cast<int32_t*>(&meetings(world_size))[q];
  }
  // Whether rank q's process has exited (false when it cannot be told).
  bool Exited(int q) const {
    if (pidfds[q] >= 0) {
      struct pollfd p = {pidfds[q], POLLIN, 0};
      return poll(&p, 1, 0) == 1;
    }
    return kill(pid(q), 0) != 0 && errno == ESRCH;
  }

  ~Segment() {
    for (int fd : pidfds) {
      if (fd >= 0) close(fd);
    }
    if (base != nullptr) munmap(base, bytes);
  }
};

namespace {

// Maps the segment `name` of `bytes`; `create` makes it (and reserves its pages) first. Returns an empty message on
// success, else what failed.
std::string MapSegment(const std::string& name, size_t bytes, bool create, void** base) {
  const int fd = create ? shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600) : shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return absl::StrCat("shm_open(", name, "): ", std::strerror(errno));
  std::string error;
  if (create) {
    // posix_fallocate returns the error rather than setting errno.
    if (const int code = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); code != 0) {
      error = absl::StrCat("reserving ", bytes >> 20, " MiB in /dev/shm for ", name, ": ", std::strerror(code));
    }
  } else {
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
      error = absl::StrCat(name, " is smaller than the ", bytes, " bytes rank 0 made");
    }
  }
  if (error.empty()) {
    void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      error = absl::StrCat("mmap of ", name, ": ", std::strerror(errno));
    } else {
      *base = mapped;
    }
  }
  close(fd);
  if (!error.empty() && create) shm_unlink(name.c_str());
  return error;
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> SharedMemoryCollectives::Wrap(const CollectiveOptions& options,
                                                                c10::intrusive_ptr<c10d::Backend> gloo,
                                                                std::string* why_not) {
  const auto decline = [&](std::string why) {
    if (why_not != nullptr) *why_not = std::move(why);
    return gloo;
  };
  const int n = options.world_size;
  const int rank = options.rank;
  if (n <= 1) return decline("one rank has nothing to exchange");
  // The ranks decide together: a value every rank reads the same.
  if (const char* env = std::getenv(kSharedMemoryCollectivesEnv); env != nullptr && std::string(env) == "0") {
    return decline(absl::StrCat(kSharedMemoryCollectivesEnv, "=0"));
  }
  // Its gets wait within the store's own timeout (the join's). The prefix is this group's (as Gloo's own keys, which
  // a second group under the same prefix could not use either).
  c10d::Store& store = *options.store;
  const auto key = [&](absl::string_view what, int q) { return absl::StrCat("shm/", what, "/", q); };

  const std::string mine = HostIdentity();
  StoreSet(store, key("host", rank), mine);
  for (int q = 0; q < n; ++q) {
    if (StoreGet(store, key("host", q)) != mine) {
      return decline(absl::StrCat("rank ", q, " runs on another host (or in other namespaces) than rank ", rank));
    }
  }

  auto segment = std::make_unique<Segment>();
  segment->world_size = n;
  segment->slot_bytes = SlotBytes(n);
  segment->bytes = ControlBytes(n) + 2 * (static_cast<size_t>(n) + 1) * segment->slot_bytes;
  std::string name;
  std::string error;
  if (rank == 0) {
    std::random_device random;
    name = absl::StrCat("/kiln-", getpid(), "-", random(), random());
    error = MapSegment(name, segment->bytes, /*create=*/true, &segment->base);
    if (error.empty()) {
      auto* control = new (segment->base) Control{};
      control->magic = kMagic;
      control->world_size = static_cast<uint32_t>(n);
      control->slot_bytes = segment->slot_bytes;
    }
    StoreSet(store, key("name", 0), error.empty() ? name : "");
  } else {
    name = StoreGet(store, key("name", 0));
    if (name.empty()) {
      error = "rank 0 could not make the segment";
    } else {
      error = MapSegment(name, segment->bytes, /*create=*/false, &segment->base);
    }
  }
  if (error.empty()) {
    segment->control = static_cast<Control*>(segment->base);
    segment->data = static_cast<std::byte*>(segment->base) + ControlBytes(n);
    if (segment->control->magic != kMagic || segment->control->world_size != static_cast<uint32_t>(n) ||
        segment->control->slot_bytes != segment->slot_bytes) {
      error = absl::StrCat(name, " is not this group's segment");
    } else {
      segment->pid(rank) = getpid();
    }
  }
  StoreSet(store, key("mapped", rank), error);
  std::vector<std::string> failures;
  for (int q = 0; q < n; ++q) {
    std::string failed = StoreGet(store, key("mapped", q));
    if (!failed.empty()) failures.push_back(absl::StrCat("rank ", q, ": ", failed));
  }
  // Every rank has mapped it (or given up): its name is no longer needed.
  if (rank == 0 && !name.empty()) shm_unlink(name.c_str());
  if (!failures.empty()) return decline(absl::StrJoin(failures, "; "));

  segment->pidfds.assign(n, -1);
  for (int q = 0; q < n; ++q) {
    if (q != rank) segment->pidfds[q] = static_cast<int>(syscall(SYS_pidfd_open, segment->pid(q), 0));
  }
  auto wrapped = c10::make_intrusive<SharedMemoryCollectives>(rank, n, std::move(gloo), std::move(segment),
                                                              options.timeout);
  return wrapped;
}

bool SharedMemoryCollectives::IsSharedMemory(const c10d::Backend& backend) {
  return dynamic_cast<const SharedMemoryCollectives*>(&backend) != nullptr;
}

SharedMemoryCollectives::SharedMemoryCollectives(int rank, int size, c10::intrusive_ptr<c10d::Backend> gloo,
                                                 std::unique_ptr<Segment> segment, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), gloo_(std::move(gloo)), segment_(std::move(segment)), timeout_(timeout) {}

SharedMemoryCollectives::~SharedMemoryCollectives() = default;

void SharedMemoryCollectives::setTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  timeout_ = timeout;
  gloo_->setTimeout(timeout);
}

void SharedMemoryCollectives::CheckUsable(const char* what) const {
  if (!failure_.empty()) {
    C10_THROW_ERROR(DistBackendError, absl::StrCat("shared-memory ", what, ": an earlier collective of this group "
                                                   "failed, so the group cannot be used (", failure_, ")"));
  }
}

void SharedMemoryCollectives::Fail(const std::string& message) {
  failure_ = message;
  Control& control = *segment_->control;
  uint32_t none = 0;
  control.failed.value.compare_exchange_strong(none, static_cast<uint32_t>(getRank() + 1));
  control.bell.value.fetch_add(1);
  FutexWakeAll(&control.bell.value);
  C10_THROW_ERROR(DistBackendError, message);
}

void SharedMemoryCollectives::Meet(const char* what) {
  Segment& s = *segment_;
  Control& control = *s.control;
  const uint64_t target = ++meetings_;
  s.meetings(getRank()).value.store(target, std::memory_order_release);
  control.bell.value.fetch_add(1);
  if (control.sleepers.value.load() > 0) FutexWakeAll(&control.bell.value);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  // What a failure's message starts with (made only then: a meeting is on every collective's path).
  const auto where = [&] {
    return absl::StrCat("shared-memory ", what, " on rank ", getRank(), " of ", getSize(), ": ");
  };
  // A rank that comes after the others gave up finds them all arrived: the mark tells it.
  if (const uint32_t failed = control.failed.value.load(); failed != 0) {
    Fail(absl::StrCat(where(), "rank ", failed - 1, " failed in a collective of this group before this rank came to "
                      "it (its own error says why)"));
  }
  for (int q = 0; q < getSize(); ++q) {
    int spins = 0;
    while (s.meetings(q).value.load(std::memory_order_acquire) < target) {
      if (++spins < kSpins) {
        CpuRelax();
        continue;
      }
      // A rank that has died is the cause, whoever noticed it first.
      if (s.Exited(q)) {
        Fail(absl::StrCat(where(), "rank ", q, " (pid ", s.pid(q), ") exited while this rank waited for it"));
      }
      if (const uint32_t failed = control.failed.value.load(); failed != 0) {
        Fail(absl::StrCat(where(), "rank ", failed - 1, " failed in a collective of this group (its own error says ",
                          "why) while this rank waited for rank ", q));
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        std::vector<int> missing;
        for (int m = 0; m < getSize(); ++m) {
          if (s.meetings(m).value.load() < target) missing.push_back(m);
        }
        Fail(absl::StrCat(where(), "timed out after ", timeout_.count(), " ms waiting for rank(s) ",
                          absl::StrJoin(missing, ", ")));
      }
      control.sleepers.value.fetch_add(1);
      const uint32_t bell = control.bell.value.load();
      if (s.meetings(q).value.load(std::memory_order_acquire) < target && control.failed.value.load() == 0) {
        FutexWait(&control.bell.value, bell, std::min<std::chrono::nanoseconds>(kLivenessPeriod, deadline - now));
      }
      control.sleepers.value.fetch_sub(1);
    }
  }
}

std::byte* SharedMemoryCollectives::Slot(int rank) const {
  const size_t set = round_ % 2;
  return segment_->data + (set * (getSize() + 1) + rank) * segment_->slot_bytes;
}

std::byte* SharedMemoryCollectives::Result() const { return Slot(getSize()); }

void SharedMemoryCollectives::AllReduce(at::Tensor& tensor, c10d::ReduceOp op) {
  const int n = getSize();
  const int64_t element = static_cast<int64_t>(tensor.element_size());
  const int64_t per_round = static_cast<int64_t>(segment_->slot_bytes) / element;
  const at::ScalarType type = tensor.scalar_type();
  std::byte* const data = Bytes(tensor);
  for (int64_t begin = 0; begin < tensor.numel(); begin += per_round) {
    ++round_;
    const int64_t count = std::min(per_round, tensor.numel() - begin);
    // Each rank reduces its part of the round, in rank order, into the result area. The others' parts go into this
    // rank's slot for them to read; its own part it reads where it is.
    const int64_t part = (count + n - 1) / n;
    const int64_t from = std::min<int64_t>(part * getRank(), count);
    const int64_t to = std::min<int64_t>(from + part, count);
    std::byte* const mine = data + begin * element;
    std::memcpy(Slot(getRank()), mine, static_cast<size_t>(from * element));
    std::memcpy(Slot(getRank()) + to * element, mine + to * element, static_cast<size_t>((count - to) * element));
    Meet("allreduce");
    if (to > from) {
      const auto piece = [&](int q) {
        return View((q == getRank() ? mine : Slot(q)) + from * element, to - from, type);
      };
      at::Tensor out = View(Result() + from * element, to - from, type);
      Combine(out, piece(0), piece(1), op);
      for (int q = 2; q < n; ++q) Combine(out, out, piece(q), op);
    }
    Meet("allreduce");
    std::memcpy(data + begin * element, Result(), static_cast<size_t>(count * element));
  }
}

void SharedMemoryCollectives::Broadcast(at::Tensor& tensor, int root) {
  std::byte* const data = Bytes(tensor);
  const size_t total = tensor.nbytes();
  for (size_t begin = 0; begin < total; begin += segment_->slot_bytes) {
    ++round_;
    const size_t count = std::min(segment_->slot_bytes, total - begin);
    if (getRank() == root) std::memcpy(Slot(root), data + begin, count);
    Meet("broadcast");
    if (getRank() != root) std::memcpy(data + begin, Slot(root), count);
  }
}

void SharedMemoryCollectives::AllGather(const std::vector<std::byte*>& outputs, const at::Tensor& input) {
  const std::byte* const data = static_cast<const std::byte*>(input.data_ptr());
  const size_t total = input.nbytes();
  for (size_t begin = 0; begin < total; begin += segment_->slot_bytes) {
    ++round_;
    const size_t count = std::min(segment_->slot_bytes, total - begin);
    std::memcpy(Slot(getRank()), data + begin, count);
    Meet("allgather");
    for (int q = 0; q < getSize(); ++q) std::memcpy(outputs[q] + begin, Slot(q), count);
  }
}

void SharedMemoryCollectives::ReduceScatter(at::Tensor& output, const std::vector<const std::byte*>& inputs,
                                            c10d::ReduceOp op) {
  const int n = getSize();
  const int64_t element = static_cast<int64_t>(output.element_size());
  const int64_t per_round = static_cast<int64_t>(segment_->slot_bytes) / element / n;
  const at::ScalarType type = output.scalar_type();
  std::byte* const data = Bytes(output);
  // An output that is this rank's own input piece (a reduce-scatter in place) would be written before it is read.
  const std::byte* const own = inputs[getRank()];
  const bool in_place = own < data + output.nbytes() && data < own + output.nbytes();
  for (int64_t begin = 0; begin < output.numel(); begin += per_round) {
    ++round_;
    const int64_t count = std::min(per_round, output.numel() - begin);
    // Rank q's slot holds, at piece r, what q contributes to rank r's output; its own piece it reads where it is.
    for (int r = 0; r < n; ++r) {
      if (r == getRank() && !in_place) continue;
      std::memcpy(Slot(getRank()) + r * count * element, inputs[r] + begin * element,
                  static_cast<size_t>(count * element));
    }
    Meet("reduce_scatter");
    const auto piece = [&](int q) {
      return q == getRank() && !in_place ? View(inputs[q] + begin * element, count, type)
                            : View(Slot(q) + getRank() * count * element, count, type);
    };
    at::Tensor out = View(data + begin * element, count, type);
    Combine(out, piece(0), piece(1), op);
    for (int q = 2; q < n; ++q) Combine(out, out, piece(q), op);
  }
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::allreduce(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceOptions& opts) {
  if (tensors.size() != 1 || !Reducible(tensors[0], opts.reduceOp)) return gloo_->allreduce(tensors, opts);
  std::lock_guard<std::mutex> lock(mutex_);
  CheckUsable("allreduce");
  AllReduce(tensors[0], opts.reduceOp);
  return CompletedWork(getRank(), c10d::OpType::ALLREDUCE, tensors);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::broadcast(std::vector<at::Tensor>& tensors,
                                                                  const c10d::BroadcastOptions& opts) {
  if (tensors.size() != 1 || !Carried(tensors[0]) || opts.rootTensor != 0 || opts.rootRank < 0 ||
      opts.rootRank >= getSize()) {
    return gloo_->broadcast(tensors, opts);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  CheckUsable("broadcast");
  Broadcast(tensors[0], static_cast<int>(opts.rootRank));
  return CompletedWork(getRank(), c10d::OpType::BROADCAST, tensors);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions& opts) {
  bool carried = inputs.size() == 1 && outputs.size() == 1 && Carried(inputs[0]) &&
                 outputs[0].size() == static_cast<size_t>(getSize());
  std::vector<std::byte*> destinations;
  for (size_t q = 0; carried && q < outputs[0].size(); ++q) {
    const at::Tensor& output = outputs[0][q];
    carried = Carried(output) && output.scalar_type() == inputs[0].scalar_type() &&
              output.numel() == inputs[0].numel();
    if (carried) destinations.push_back(Bytes(output));
  }
  if (!carried) return gloo_->allgather(outputs, inputs, opts);
  std::lock_guard<std::mutex> lock(mutex_);
  CheckUsable("allgather");
  AllGather(destinations, inputs[0]);
  return CompletedWork(getRank(), c10d::OpType::ALLGATHER, outputs[0]);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::AllgatherOptions& opts) {
  if (!Carried(output) || !Carried(input) || output.scalar_type() != input.scalar_type() ||
      output.numel() != input.numel() * getSize()) {
    return gloo_->_allgather_base(output, input, opts);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  CheckUsable("_allgather_base");
  std::vector<std::byte*> destinations;
  for (int q = 0; q < getSize(); ++q) destinations.push_back(Bytes(output) + q * input.nbytes());
  AllGather(destinations, input);
  return CompletedWork(getRank(), c10d::OpType::_ALLGATHER_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                                       const c10d::ReduceScatterOptions& opts) {
  bool carried = outputs.size() == 1 && inputs.size() == 1 && Reducible(outputs[0], opts.reduceOp) &&
                 inputs[0].size() == static_cast<size_t>(getSize());
  std::vector<const std::byte*> sources;
  for (size_t q = 0; carried && q < inputs[0].size(); ++q) {
    const at::Tensor& input = inputs[0][q];
    carried = Carried(input) && input.scalar_type() == outputs[0].scalar_type() && input.numel() == outputs[0].numel();
    if (carried) sources.push_back(Bytes(input));
  }
  if (!carried) return gloo_->reduce_scatter(outputs, inputs, opts);
  std::lock_guard<std::mutex> lock(mutex_);
  CheckUsable("reduce_scatter");
  ReduceScatter(outputs[0], sources, opts.reduceOp);
  return CompletedWork(getRank(), c10d::OpType::REDUCE_SCATTER, outputs);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                             const c10d::ReduceScatterOptions& opts) {
  if (!Reducible(output, opts.reduceOp) || !Carried(input) || input.scalar_type() != output.scalar_type() ||
      input.numel() != output.numel() * getSize()) {
    return gloo_->_reduce_scatter_base(output, input, opts);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  CheckUsable("_reduce_scatter_base");
  std::vector<const std::byte*> sources;
  for (int q = 0; q < getSize(); ++q) sources.push_back(Bytes(input) + q * output.nbytes());
  ReduceScatter(output, sources, opts.reduceOp);
  return CompletedWork(getRank(), c10d::OpType::_REDUCE_SCATTER_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::barrier(const c10d::BarrierOptions& opts) {
  std::lock_guard<std::mutex> lock(mutex_);
  CheckUsable("barrier");
  ++round_;
  Meet("barrier");
  return CompletedWork(getRank(), c10d::OpType::BARRIER, {});
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return gloo_->allreduce_coalesced(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::reduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::ReduceOptions& opts) {
  return gloo_->reduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return gloo_->allgather_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  return gloo_->allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::GatherOptions& opts) {
  return gloo_->gather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ScatterOptions& opts) {
  return gloo_->scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  return gloo_->reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                      std::vector<int64_t>& output_split_sizes,
                                                                      std::vector<int64_t>& input_split_sizes,
                                                                      const c10d::AllToAllOptions& opts) {
  return gloo_->alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::alltoall(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllToAllOptions& opts) {
  return gloo_->alltoall(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  return gloo_->send(tensors, dst_rank, tag);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  return gloo_->recv(tensors, src_rank, tag);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return gloo_->recvAnysource(tensors, tag);
}

void SharedMemoryCollectives::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  gloo_->monitoredBarrier(opts, wait_all_ranks);
}

}  // namespace kiln
