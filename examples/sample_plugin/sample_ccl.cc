#include "examples/sample_plugin/sample_ccl.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "examples/sample_plugin/errors.h"

// The plugin's definition of the C API's opaque communicator.
struct KILN_Communicator {
  int32_t rank = 0;
  int32_t world_size = 1;
  std::chrono::milliseconds timeout{0};
  // Rank 0: peers[r] is the socket to rank r (peers[0] is -1). Other ranks: peers[0] is the socket to rank 0.
  std::vector<int> peers;
  std::string broken;  // Why the communicator no longer works; empty while it does.
};

namespace sample_plugin {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kIdPrefix[] = "sample_ccl/1";
constexpr char kHostVariable[] = "SAMPLE_CCL_HOST";
constexpr size_t kNonceChars = 32;
// Ranks other than 0 wait this much longer than the timeout for rank 0's answer, which names a missing rank.
constexpr std::chrono::milliseconds kReportGrace{1000};

std::string Str(long long value) { return std::to_string(value); }

// ---- Unique ids: "sample_ccl/1 <host> <port> <nonce>".

struct UniqueId {
  std::string host;
  int port = 0;
  std::string nonce;
};

bool ParseId(const uint8_t* bytes, size_t size, UniqueId* id) {
  const std::string text(reinterpret_cast<const char*>(bytes), size);
  char prefix[16] = {};
  char host[129] = {};
  char nonce[kNonceChars + 1] = {};
  int port = 0;
  if (std::sscanf(text.c_str(), "%15s %128s %d %32s", prefix, host, &port, nonce) != 4) return false;
  if (std::strcmp(prefix, kIdPrefix) != 0 || port <= 0 || port > 65535 || std::strlen(nonce) != kNonceChars) {
    return false;
  }
  *id = {host, port, nonce};
  return true;
}

std::string RandomNonce() {
  std::random_device random;  // /dev/urandom
  static constexpr char kHex[] = "0123456789abcdef";
  std::string nonce;
  while (nonce.size() < kNonceChars) {
    const unsigned bits = random();
    for (int i = 0; i < 8 && nonce.size() < kNonceChars; ++i) nonce.push_back(kHex[(bits >> (4 * i)) & 15]);
  }
  return nonce;
}

// Listening sockets that GetUniqueId opened, by nonce, until rank 0's CommInit takes its own.
struct Listeners {
  std::mutex mutex;
  std::map<std::string, int> by_nonce;
};

Listeners& PendingListeners() {
  static auto* const listeners = new Listeners();  // Never destroyed: the plugin is never unloaded.
  return *listeners;
}

int TakeListener(const std::string& nonce) {
  Listeners& listeners = PendingListeners();
  std::lock_guard<std::mutex> lock(listeners.mutex);
  const auto found = listeners.by_nonce.find(nonce);
  if (found == listeners.by_nonce.end()) return -1;
  const int fd = found->second;
  listeners.by_nonce.erase(found);
  return fd;
}

// ---- Socket I/O, bounded by a deadline.

int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

// 1 when `fd` is ready for `events`, 0 when the deadline passed, -1 on an error (errno).
int WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, MillisLeft(deadline));
    if (ready > 0) return 1;
    if (ready == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

void CloseSocket(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void Configure(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// What a transfer is part of, for its errors: "AllReduce" with rank 2.
struct Context {
  const char* call;
  std::chrono::milliseconds timeout;
};

KILN_Error* Timeout(const Context& context, int peer, const char* what) {
  return MakeError(KILN_ERROR_CODE_DEADLINE_EXCEEDED,
                   std::string(kCclName) + " " + context.call + ": rank " + Str(peer) + " did not " + what +
                       " within the timeout of " + Str(context.timeout.count()) +
                       " ms; check that its process is running and makes the same collective calls");
}

KILN_Error* Gone(const Context& context, int peer, int error) {
  return MakeError(KILN_ERROR_CODE_UNAVAILABLE,
                   std::string(kCclName) + " " + context.call + ": the connection to rank " + Str(peer) +
                       (error == 0 ? std::string(" was closed") : " failed: " + std::string(std::strerror(error))) +
                       " (its process ended, or its communicator was destroyed)");
}

KILN_Error* SendAll(int fd, const void* data, size_t size, Clock::time_point deadline, const Context& context,
                    int peer) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t sent = ::send(fd, bytes, size, MSG_NOSIGNAL);
    if (sent > 0) {
      bytes += sent;
      size -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Gone(context, peer, errno);
    const int ready = WaitFor(fd, POLLOUT, deadline);
    if (ready == 0) return Timeout(context, peer, "take its data");
    if (ready < 0) return Gone(context, peer, errno);
  }
  return nullptr;
}

KILN_Error* RecvAll(int fd, void* data, size_t size, Clock::time_point deadline, const Context& context, int peer) {
  auto* bytes = static_cast<uint8_t*>(data);
  while (size > 0) {
    const ssize_t got = ::recv(fd, bytes, size, 0);
    if (got > 0) {
      bytes += got;
      size -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return Gone(context, peer, 0);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Gone(context, peer, errno);
    const int ready = WaitFor(fd, POLLIN, deadline);
    if (ready == 0) return Timeout(context, peer, "arrive");
    if (ready < 0) return Gone(context, peer, errno);
  }
  return nullptr;
}

// ---- What travels: a rank's header before its data, and rank 0's reply before the result.

struct Hello {
  char nonce[kNonceChars];
  int32_t rank;
  int32_t world_size;
};

enum Kind : uint32_t { kAllReduce = 1, kBroadcast = 2, kAllGather = 3, kReduceScatter = 4, kBarrier = 5 };

struct Header {
  uint32_t kind;
  uint32_t data_type;
  int32_t op_or_root;
  uint32_t reserved;
  uint64_t count;
  bool operator==(const Header& other) const {
    return kind == other.kind && data_type == other.data_type && op_or_root == other.op_or_root && count == other.count;
  }
};

// Code 0: the result follows. Otherwise the error rank 0 met, which the rank reports as its own.
struct Reply {
  int32_t code;
  char message[252];
};

// ---- Data types and reductions.

size_t ElementSize(int32_t type) {
  switch (type) {
    case KILN_DATA_TYPE_FLOAT32:
    case KILN_DATA_TYPE_INT32:
      return 4;
    case KILN_DATA_TYPE_FLOAT64:
    case KILN_DATA_TYPE_INT64:
      return 8;
    case KILN_DATA_TYPE_BFLOAT16:
      return 2;
    case KILN_DATA_TYPE_INT8:
    case KILN_DATA_TYPE_UINT8:
    case KILN_DATA_TYPE_BOOL:
      return 1;
    default:
      return 0;  // FLOAT16, and anything the header does not define.
  }
}

template <typename T>
T Combine(KILN_Reduce_Op op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return (op == KILN_REDUCE_OP_SUM || op == KILN_REDUCE_OP_MAX) ? (a || b) : (a && b);
  } else {
    switch (op) {
      case KILN_REDUCE_OP_SUM:
        if constexpr (std::is_integral_v<T>) {  // Wraps, as the hardware's integers do (signed overflow is UB).
          using U = std::make_unsigned_t<T>;
          return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
        }
        return a + b;
      case KILN_REDUCE_OP_PRODUCT:
        if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
        }
        return a * b;
      case KILN_REDUCE_OP_MIN:
        return std::min(a, b);
      default:
        return std::max(a, b);
    }
  }
}

template <typename T>
void CombineInto(KILN_Reduce_Op op, void* accumulator, const void* values, size_t count) {
  T* into = static_cast<T*>(accumulator);
  const T* from = static_cast<const T*>(values);
  for (size_t i = 0; i < count; ++i) into[i] = Combine(op, into[i], from[i]);
}

float BFloat16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // A quiet NaN.
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);  // Round to nearest, ties to even.
}

void CombineBFloat16(KILN_Reduce_Op op, void* accumulator, const void* values, size_t count) {
  uint16_t* into = static_cast<uint16_t*>(accumulator);
  const uint16_t* from = static_cast<const uint16_t*>(values);
  for (size_t i = 0; i < count; ++i) {
    into[i] = FloatToBFloat16(Combine(op, BFloat16ToFloat(into[i]), BFloat16ToFloat(from[i])));
  }
}

// accumulator[i] = op(accumulator[i], values[i]); the type is one ElementSize supports.
void Reduce(KILN_Data_Type type, KILN_Reduce_Op op, void* accumulator, const void* values, size_t count) {
  switch (type) {
    case KILN_DATA_TYPE_FLOAT32:
      return CombineInto<float>(op, accumulator, values, count);
    case KILN_DATA_TYPE_FLOAT64:
      return CombineInto<double>(op, accumulator, values, count);
    case KILN_DATA_TYPE_BFLOAT16:
      return CombineBFloat16(op, accumulator, values, count);
    case KILN_DATA_TYPE_INT8:
      return CombineInto<int8_t>(op, accumulator, values, count);
    case KILN_DATA_TYPE_UINT8:
      return CombineInto<uint8_t>(op, accumulator, values, count);
    case KILN_DATA_TYPE_INT32:
      return CombineInto<int32_t>(op, accumulator, values, count);
    case KILN_DATA_TYPE_INT64:
      return CombineInto<int64_t>(op, accumulator, values, count);
    default:
      return CombineInto<bool>(op, accumulator, values, count);
  }
}

// ---- The checks every rank makes before any data moves (the same arguments give the same answer on every rank).

KILN_Error* CheckCommunicator(const KILN_Communicator* comm, const char* call) {
  if (comm == nullptr) {
    return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT, std::string(kCclName) + " " + call + ": communicator is NULL");
  }
  if (!comm->broken.empty()) {
    return MakeError(KILN_ERROR_CODE_FAILED_PRECONDITION, std::string(kCclName) + " " + call +
                                                              ": the communicator is broken by an earlier error (" +
                                                              comm->broken + "); destroy it and make a new one");
  }
  return nullptr;
}

// The element size of `type`, or an error naming it.
KILN_Error* CheckType(int32_t type, const char* call, size_t* element_size) {
  *element_size = ElementSize(type);
  if (*element_size != 0) return nullptr;
  if (type == KILN_DATA_TYPE_FLOAT16) {
    return MakeError(KILN_ERROR_CODE_UNIMPLEMENTED,
                     std::string(kCclName) + " " + call +
                         ": data type FLOAT16 is not supported (it carries FLOAT32, FLOAT64, BFLOAT16, INT8, UINT8, "
                         "INT32, INT64 and BOOL)");
  }
  return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                   std::string(kCclName) + " " + call + ": data type " + Str(type) + " is not a KILN_Data_Type");
}

KILN_Error* CheckOp(int32_t op, const char* call) {
  if (op >= KILN_REDUCE_OP_SUM && op <= KILN_REDUCE_OP_MAX) return nullptr;
  return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                   std::string(kCclName) + " " + call + ": reduction " + Str(op) + " is not a KILN_Reduce_Op");
}

KILN_Error* CheckBuffer(const void* buffer, size_t bytes, const char* call, const char* name) {
  if (buffer != nullptr || bytes == 0) return nullptr;
  return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                   std::string(kCclName) + " " + call + ": " + name + " is NULL for " + Str(bytes) + " bytes");
}

KILN_Error* CheckBuffers(const void* send, size_t send_bytes, const void* receive, size_t receive_bytes,
                         const char* call) {
  KILN_Error* error = CheckBuffer(send, send_bytes, call, "send_buffer");
  return error != nullptr ? error : CheckBuffer(receive, receive_bytes, call, "recv_buffer");
}

// ---- One collective: every rank sends its part to rank 0, rank 0 answers each.

// A rank's part of a collective, as rank 0 sees it: how many bytes rank r sends, and what to do with them.
struct Collective {
  Context context;
  Header header;
  KILN_Communicator* comm;
  Clock::time_point deadline;
};

// A transfer failed: the communicator is broken. Rank 0 tells every rank why before it closes their connections, so
// that they fail now, with the same cause, instead of at their own deadline.
KILN_Error* Break(Collective& collective, KILN_Error* error) {
  KILN_Communicator& comm = *collective.comm;
  comm.broken = error->message;
  if (comm.rank == 0) {
    Reply reply{};
    reply.code = error->code;
    std::snprintf(reply.message, sizeof(reply.message), "%s", error->message.c_str());
    const Clock::time_point soon = Clock::now() + std::chrono::milliseconds(100);
    for (int r = 1; r < comm.world_size; ++r) {
      if (comm.peers[r] < 0) continue;
      KILN_Error* ignored = SendAll(comm.peers[r], &reply, sizeof(reply), soon, collective.context, r);
      if (ignored != nullptr) DestroyError(ignored);
    }
  }
  for (int& fd : comm.peers) CloseSocket(fd);
  return error;
}

// Rank 0: receives each other rank's header and `bytes(r)` bytes, in rank order, and hands them to `take`.
template <typename Bytes, typename Take>
KILN_Error* GatherAtRoot(Collective& collective, Bytes bytes, Take take) {
  KILN_Communicator& comm = *collective.comm;
  std::vector<uint8_t> scratch;
  for (int r = 1; r < comm.world_size; ++r) {
    Header header{};
    if (KILN_Error* error = RecvAll(comm.peers[r], &header, sizeof(header), collective.deadline, collective.context, r);
        error != nullptr) {
      return Break(collective, error);
    }
    if (!(header == collective.header)) {
      return Break(collective, MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                                         std::string(kCclName) + " " + collective.context.call + ": rank " + Str(r) +
                                             " made another call than rank 0 (call " + Str(header.kind) + ", type " +
                                             Str(header.data_type) + ", op or root " + Str(header.op_or_root) +
                                             ", count " + Str(static_cast<long long>(header.count)) +
                                             "); every rank must make the same "
                                             "calls in the same order"));
    }
    scratch.resize(bytes(r));
    if (KILN_Error* error =
            RecvAll(comm.peers[r], scratch.data(), scratch.size(), collective.deadline, collective.context, r);
        error != nullptr) {
      return Break(collective, error);
    }
    take(r, scratch.data());
  }
  return nullptr;
}

// Rank 0: sends rank r a success reply and `size` bytes of its result.
KILN_Error* ReplyFromRoot(Collective& collective, int r, const void* result, size_t size) {
  KILN_Communicator& comm = *collective.comm;
  const Reply reply{};
  KILN_Error* error = SendAll(comm.peers[r], &reply, sizeof(reply), collective.deadline, collective.context, r);
  if (error == nullptr) error = SendAll(comm.peers[r], result, size, collective.deadline, collective.context, r);
  return error == nullptr ? nullptr : Break(collective, error);
}

// Any other rank: sends its header and `sent` bytes to rank 0, then receives rank 0's reply and `received` bytes.
KILN_Error* ExchangeWithRoot(Collective& collective, const void* send, size_t sent, void* receive, size_t received) {
  KILN_Communicator& comm = *collective.comm;
  const int fd = comm.peers[0];
  KILN_Error* error =
      SendAll(fd, &collective.header, sizeof(collective.header), collective.deadline, collective.context, 0);
  if (error == nullptr) error = SendAll(fd, send, sent, collective.deadline, collective.context, 0);
  Reply reply{};
  if (error == nullptr) {
    error = RecvAll(fd, &reply, sizeof(reply), collective.deadline + kReportGrace, collective.context, 0);
  }
  if (error == nullptr && reply.code != 0) {
    reply.message[sizeof(reply.message) - 1] = '\0';
    error = MakeError(static_cast<KILN_Error_Code>(reply.code), std::string("rank 0 reports: ") + reply.message);
  }
  if (error == nullptr) error = RecvAll(fd, receive, received, collective.deadline, collective.context, 0);
  return error == nullptr ? nullptr : Break(collective, error);
}

Collective Start(KILN_Communicator* comm, const char* call, Header header) {
  return Collective{{call, comm->timeout}, header, comm, Clock::now() + comm->timeout};
}

// ---- Joining: rank 0 accepts a connection from every other rank.

KILN_Error* AcceptRanks(KILN_Communicator& comm, int listener, const std::string& nonce, Clock::time_point deadline) {
  const Context context{"CommInit", comm.timeout};
  int joined = 1;
  while (joined < comm.world_size) {
    const int ready = WaitFor(listener, POLLIN, deadline);
    if (ready <= 0) {
      std::string missing;
      for (int r = 1; r < comm.world_size; ++r) {
        if (comm.peers[r] < 0) missing += (missing.empty() ? "" : ", ") + Str(r);
      }
      return MakeError(KILN_ERROR_CODE_DEADLINE_EXCEEDED,
                       std::string(kCclName) + " CommInit: rank(s) " + missing + " of " + Str(comm.world_size) +
                           " did not join rank 0 within the timeout of " + Str(comm.timeout.count()) +
                           " ms; check that every rank was started and reached the same point");
    }
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // The connection went away before it was accepted.
    Configure(fd);
    Hello hello{};
    if (KILN_Error* error = RecvAll(fd, &hello, sizeof(hello), deadline, context, -1); error != nullptr) {
      DestroyError(error);  // A stranger, or a rank that died while joining: the timeout will name what is missing.
      CloseSocket(fd);
      continue;
    }
    if (std::memcmp(hello.nonce, nonce.data(), kNonceChars) != 0) {
      CloseSocket(fd);  // Not this communicator's: a stale rank of another job.
      continue;
    }
    if (hello.world_size != comm.world_size || hello.rank <= 0 || hello.rank >= comm.world_size ||
        comm.peers[hello.rank] >= 0) {
      CloseSocket(fd);
      return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                       std::string(kCclName) + " CommInit: a rank joined as rank " + Str(hello.rank) + " of " +
                           Str(hello.world_size) + ", which rank 0 of " + Str(comm.world_size) +
                           " cannot take (out of range, taken twice, or another world size)");
    }
    comm.peers[hello.rank] = fd;
    ++joined;
  }
  // Every rank is here: tell each of them.
  const Reply welcome{};
  for (int r = 1; r < comm.world_size; ++r) {
    if (KILN_Error* error = SendAll(comm.peers[r], &welcome, sizeof(welcome), deadline, context, r); error != nullptr) {
      return error;
    }
  }
  return nullptr;
}

KILN_Error* ConnectToRoot(KILN_Communicator& comm, const UniqueId& id, Clock::time_point deadline) {
  const Context context{"CommInit", comm.timeout};
  const std::string where = id.host + ":" + Str(id.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int failed = ::getaddrinfo(id.host.c_str(), Str(id.port).c_str(), &hints, &found); failed != 0) {
    return MakeError(KILN_ERROR_CODE_UNAVAILABLE, std::string(kCclName) + " CommInit: rank 0's address " + where +
                                                      " cannot be resolved: " + ::gai_strerror(failed));
  }
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int result = fd < 0 ? -1 : ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (result < 0 && errno == EINPROGRESS) {
    const int ready = WaitFor(fd, POLLOUT, deadline);
    if (ready == 0) {
      CloseSocket(fd);
      return Timeout(context, 0, ("accept the connection at " + where).c_str());
    }
    int error = 0;
    socklen_t length = sizeof(error);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    errno = error;
    result = error == 0 ? 0 : -1;
  }
  if (result < 0) {
    const int error = errno;
    CloseSocket(fd);
    return MakeError(KILN_ERROR_CODE_UNAVAILABLE, std::string(kCclName) + " CommInit: cannot reach rank 0 at " + where +
                                                      ": " + std::strerror(error) +
                                                      " (its process ended, or the unique id is stale)");
  }
  Configure(fd);
  comm.peers[0] = fd;
  Hello hello{};
  std::memcpy(hello.nonce, id.nonce.data(), kNonceChars);
  hello.rank = comm.rank;
  hello.world_size = comm.world_size;
  if (KILN_Error* error = SendAll(fd, &hello, sizeof(hello), deadline, context, 0); error != nullptr) return error;
  Reply welcome{};
  if (KILN_Error* error = RecvAll(fd, &welcome, sizeof(welcome), deadline + kReportGrace, context, 0);
      error != nullptr) {
    return error;
  }
  return nullptr;
}

void Destroy(KILN_Communicator* comm) {
  for (int& fd : comm->peers) CloseSocket(fd);
  delete comm;
}

}  // namespace

// ---- The C API's functions.

KILN_Error* CollectivesGetUniqueId(KILN_Collectives_GetUniqueId_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Collectives_GetUniqueId_Args, "1.1");
  return NoThrow([&]() -> KILN_Error* {
    const char* advertised = std::getenv(kHostVariable);
    const bool any_interface = advertised != nullptr && *advertised != '\0';
    const std::string host = any_interface ? advertised : "127.0.0.1";
    if (host.size() > 64 || host.find(' ') != std::string::npos) {
      return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT, std::string(kHostVariable) + "='" + host +
                                                             "' is not a host name or address of at most 64 "
                                                             "characters without spaces");
    }
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(any_interface ? INADDR_ANY : INADDR_LOOPBACK);
    address.sin_port = 0;  // An ephemeral port.
    socklen_t length = sizeof(address);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::listen(fd, SOMAXCONN) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      const int error = errno;
      CloseSocket(fd);
      return MakeError(KILN_ERROR_CODE_UNAVAILABLE,
                       std::string(kCclName) + " GetUniqueId: cannot listen on a TCP port: " + std::strerror(error));
    }
    const std::string nonce = RandomNonce();
    const std::string id = std::string(kIdPrefix) + " " + host + " " + Str(ntohs(address.sin_port)) + " " + nonce;
    std::memcpy(args->unique_id, id.data(), id.size());
    args->unique_id_size = id.size();  // At most 12 + 1 + 64 + 1 + 5 + 1 + 32 bytes.
    Listeners& listeners = PendingListeners();
    std::lock_guard<std::mutex> lock(listeners.mutex);
    listeners.by_nonce[nonce] = fd;
    return nullptr;
  });
}

KILN_Error* CollectivesCommInit(KILN_Collectives_CommInit_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Collectives_CommInit_Args, "1.1");
  return NoThrow([&]() -> KILN_Error* {
    args->communicator = nullptr;
    UniqueId id;
    if (args->unique_id_size > KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES ||
        !ParseId(args->unique_id, args->unique_id_size, &id)) {
      return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                       std::string(kCclName) + " CommInit: the unique id is not one of sample_ccl's ('" +
                           std::string(reinterpret_cast<const char*>(args->unique_id),
                                       std::min<size_t>(args->unique_id_size, KILN_COLLECTIVES_UNIQUE_ID_MAX_BYTES)) +
                           "'); pass the bytes Collectives_GetUniqueId gave rank 0");
    }
    if (args->world_size < 1 || args->rank < 0 || args->rank >= args->world_size || args->timeout_ms <= 0 ||
        args->device_index != 0) {
      return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT,
                       std::string(kCclName) + " CommInit: rank " + Str(args->rank) + " of " + Str(args->world_size) +
                           " on device " + Str(args->device_index) + " with a timeout of " + Str(args->timeout_ms) +
                           " ms; the rank must be below the world size, the device 0 (each process has one) and "
                           "the timeout more than 0");
    }
    auto* comm = new KILN_Communicator();
    comm->rank = args->rank;
    comm->world_size = args->world_size;
    comm->timeout = std::chrono::milliseconds(args->timeout_ms);
    comm->peers.assign(args->rank == 0 ? args->world_size : 1, -1);
    const Clock::time_point deadline = Clock::now() + comm->timeout;
    KILN_Error* error = nullptr;
    if (args->rank == 0) {
      int listener = TakeListener(id.nonce);
      if (listener < 0) {
        error =
            MakeError(KILN_ERROR_CODE_FAILED_PRECONDITION, std::string(kCclName) +
                                                               " CommInit: rank 0 must pass a unique id that its own "
                                                               "Collectives_GetUniqueId made in this process, once");
      } else {
        error = AcceptRanks(*comm, listener, id.nonce, deadline);
        CloseSocket(listener);
      }
    } else {
      error = ConnectToRoot(*comm, id, deadline);
    }
    if (error != nullptr) {
      Destroy(comm);
      return error;
    }
    args->communicator = comm;
    return nullptr;
  });
}

KILN_Error* CollectivesCommDestroy(KILN_Collectives_CommDestroy_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Collectives_CommDestroy_Args, "1.1");
  if (args->communicator != nullptr) Destroy(args->communicator);
  return nullptr;
}

KILN_Error* CollectivesAllReduce(KILN_Collectives_AllReduce_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Collectives_AllReduce_Args, "1.1");
  return NoThrow([&]() -> KILN_Error* {
    size_t element = 0;
    if (KILN_Error* error = CheckCommunicator(args->communicator, "AllReduce"); error != nullptr) return error;
    if (KILN_Error* error = CheckType(args->data_type, "AllReduce", &element); error != nullptr) return error;
    if (KILN_Error* error = CheckOp(args->op, "AllReduce"); error != nullptr) return error;
    const size_t bytes = args->count * element;
    if (KILN_Error* error = CheckBuffers(args->send_buffer, bytes, args->recv_buffer, bytes, "AllReduce");
        error != nullptr) {
      return error;
    }
    KILN_Communicator* comm = args->communicator;
    Collective collective =
        Start(comm, "AllReduce",
              {kAllReduce, static_cast<uint32_t>(args->data_type), static_cast<int32_t>(args->op), 0, args->count});
    if (comm->rank != 0) return ExchangeWithRoot(collective, args->send_buffer, bytes, args->recv_buffer, bytes);
    if (args->recv_buffer != args->send_buffer && bytes > 0) std::memmove(args->recv_buffer, args->send_buffer, bytes);
    KILN_Error* error = GatherAtRoot(
        collective, [&](int) { return bytes; },
        [&](int, const uint8_t* data) { Reduce(args->data_type, args->op, args->recv_buffer, data, args->count); });
    for (int r = 1; error == nullptr && r < comm->world_size; ++r) {
      error = ReplyFromRoot(collective, r, args->recv_buffer, bytes);
    }
    return error;
  });
}

KILN_Error* CollectivesBroadcast(KILN_Collectives_Broadcast_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Collectives_Broadcast_Args, "1.1");
  return NoThrow([&]() -> KILN_Error* {
    size_t element = 0;
    if (KILN_Error* error = CheckCommunicator(args->communicator, "Broadcast"); error != nullptr) return error;
    if (KILN_Error* error = CheckType(args->data_type, "Broadcast", &element); error != nullptr) return error;
    const size_t bytes = args->count * element;
    if (KILN_Error* error = CheckBuffer(args->buffer, bytes, "Broadcast", "buffer"); error != nullptr) return error;
    KILN_Communicator* comm = args->communicator;
    const int root = args->root;
    if (root < 0 || root >= comm->world_size) {
      return MakeError(KILN_ERROR_CODE_INVALID_ARGUMENT, std::string(kCclName) + " Broadcast: root " + Str(root) +
                                                             " is not a rank of " + Str(comm->world_size));
    }
    Collective collective =
        Start(comm, "Broadcast", {kBroadcast, static_cast<uint32_t>(args->data_type), root, 0, args->count});
    if (comm->rank != 0) {
      const bool sends = comm->rank == root;
      return ExchangeWithRoot(collective, args->buffer, sends ? bytes : 0, args->buffer, sends ? 0 : bytes);
    }
    KILN_Error* error = GatherAtRoot(
        collective, [&](int r) { return r == root ? bytes : 0; },
        [&](int r, const uint8_t* data) {
          if (r == root && bytes > 0) std::memcpy(args->buffer, data, bytes);
        });
    for (int r = 1; error == nullptr && r < comm->world_size; ++r) {
      error = ReplyFromRoot(collective, r, args->buffer, r == root ? 0 : bytes);
    }
    return error;
  });
}

KILN_Error* CollectivesAllGather(KILN_Collectives_AllGather_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Collectives_AllGather_Args, "1.1");
  return NoThrow([&]() -> KILN_Error* {
    size_t element = 0;
    if (KILN_Error* error = CheckCommunicator(args->communicator, "AllGather"); error != nullptr) return error;
    if (KILN_Error* error = CheckType(args->data_type, "AllGather", &element); error != nullptr) return error;
    KILN_Communicator* comm = args->communicator;
    const size_t bytes = args->count * element;
    const size_t all = bytes * comm->world_size;
    if (KILN_Error* error = CheckBuffers(args->send_buffer, bytes, args->recv_buffer, all, "AllGather");
        error != nullptr) {
      return error;
    }
    Collective collective =
        Start(comm, "AllGather", {kAllGather, static_cast<uint32_t>(args->data_type), 0, 0, args->count});
    if (comm->rank != 0) return ExchangeWithRoot(collective, args->send_buffer, bytes, args->recv_buffer, all);
    auto* gathered = static_cast<uint8_t*>(args->recv_buffer);
    if (bytes > 0) std::memcpy(gathered, args->send_buffer, bytes);
    KILN_Error* error = GatherAtRoot(
        collective, [&](int) { return bytes; },
        [&](int r, const uint8_t* data) {
          if (bytes > 0) std::memcpy(gathered + r * bytes, data, bytes);
        });
    for (int r = 1; error == nullptr && r < comm->world_size; ++r) error = ReplyFromRoot(collective, r, gathered, all);
    return error;
  });
}

KILN_Error* CollectivesReduceScatter(KILN_Collectives_ReduceScatter_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Collectives_ReduceScatter_Args, "1.1");
  return NoThrow([&]() -> KILN_Error* {
    size_t element = 0;
    if (KILN_Error* error = CheckCommunicator(args->communicator, "ReduceScatter"); error != nullptr) return error;
    if (KILN_Error* error = CheckType(args->data_type, "ReduceScatter", &element); error != nullptr) return error;
    if (KILN_Error* error = CheckOp(args->op, "ReduceScatter"); error != nullptr) return error;
    KILN_Communicator* comm = args->communicator;
    const size_t bytes = args->count * element;
    const size_t all = bytes * comm->world_size;
    if (KILN_Error* error = CheckBuffers(args->send_buffer, all, args->recv_buffer, bytes, "ReduceScatter");
        error != nullptr) {
      return error;
    }
    Collective collective =
        Start(comm, "ReduceScatter",
              {kReduceScatter, static_cast<uint32_t>(args->data_type), static_cast<int32_t>(args->op), 0, args->count});
    if (comm->rank != 0) return ExchangeWithRoot(collective, args->send_buffer, all, args->recv_buffer, bytes);
    const auto* send = static_cast<const uint8_t*>(args->send_buffer);
    std::vector<uint8_t> sums(send, send + all);
    const size_t elements = args->count * comm->world_size;
    KILN_Error* error = GatherAtRoot(
        collective, [&](int) { return all; },
        [&](int, const uint8_t* data) { Reduce(args->data_type, args->op, sums.data(), data, elements); });
    for (int r = 1; error == nullptr && r < comm->world_size; ++r) {
      error = ReplyFromRoot(collective, r, sums.data() + r * bytes, bytes);
    }
    if (error == nullptr && bytes > 0) std::memcpy(args->recv_buffer, sums.data(), bytes);
    return error;
  });
}

KILN_Error* CollectivesBarrier(KILN_Collectives_Barrier_Args* args) {
  SAMPLE_CHECK_ARGS(args, KILN_Collectives_Barrier_Args, "1.1");
  return NoThrow([&]() -> KILN_Error* {
    if (KILN_Error* error = CheckCommunicator(args->communicator, "Barrier"); error != nullptr) return error;
    KILN_Communicator* comm = args->communicator;
    Collective collective = Start(comm, "Barrier", {kBarrier, 0, 0, 0, 0});
    if (comm->rank != 0) return ExchangeWithRoot(collective, nullptr, 0, nullptr, 0);
    KILN_Error* error = GatherAtRoot(
        collective, [&](int) { return size_t{0}; }, [&](int, const uint8_t*) {});
    for (int r = 1; error == nullptr && r < comm->world_size; ++r) error = ReplyFromRoot(collective, r, nullptr, 0);
    return error;
  });
}

}  // namespace sample_plugin
