#include "trainer/io/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace kiln {
namespace {

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Waits until `fd` is ready for `events`, at most `timeout`: DeadlineExceeded naming `what` and `url` after it.
absl::Status Wait(int fd, short events, absl::Duration timeout, absl::string_view what, absl::string_view url) {
  pollfd p{.fd = fd, .events = events, .revents = 0};
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("HTTP ", url, ": no answer while ", what, " within ",
                                                      absl::FormatDuration(timeout), "; is the server running?"));
    }
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready > 0) return absl::OkStatus();
    if (ready < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("HTTP ", url, ": poll failed while ", what, ": ", strerror(errno)));
    }
  }
}

absl::StatusOr<Socket*> Connect(const HttpUrl& target, absl::Duration timeout, absl::string_view url) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(target.port);
  if (int error = getaddrinfo(target.host.c_str(), port.c_str(), &hints, &found); error != 0) {
    return absl::UnavailableError(
        absl::StrCat("HTTP ", url, ": cannot resolve host '", target.host, "': ", gai_strerror(error)));
  }
  std::string reasons;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    auto socket = std::make_unique<Socket>(fd);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      absl::StrAppend(&reasons, reasons.empty() ? "" : "; ", strerror(errno));
      continue;
    }
    if (absl::Status waited = Wait(fd, POLLOUT, timeout, "connecting", url); !waited.ok()) {
      freeaddrinfo(found);
      return waited;
    }
    int error = 0;
    socklen_t size = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
    if (error != 0) {
      absl::StrAppend(&reasons, reasons.empty() ? "" : "; ", strerror(error));
      continue;
    }
    freeaddrinfo(found);
    return socket.release();
  }
  freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat("HTTP ", url, ": cannot connect to ", target.host, ":", target.port, ": ",
                                             reasons.empty() ? "no address" : reasons,
                                             "; is the server running there?"));
}

// The body of a chunked reply: hex sizes, each followed by its bytes.
absl::StatusOr<std::string> Unchunk(absl::string_view data, absl::string_view url) {
  std::string body;
  while (true) {
    const size_t end = data.find("\r\n");
    if (end == absl::string_view::npos) break;
    absl::string_view size_text = data.substr(0, end);
    size_text = size_text.substr(0, size_text.find(';'));
    uint64_t size = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size)) {
      return absl::DataLossError(absl::StrCat("HTTP ", url, ": a bad chunk size '", size_text, "' in the reply"));
    }
    data.remove_prefix(end + 2);
    if (size == 0) return body;
    if (data.size() < size) break;
    body.append(data.data(), size);
    data.remove_prefix(size);
    absl::ConsumePrefix(&data, "\r\n");
  }
  return absl::DataLossError(absl::StrCat("HTTP ", url, ": the reply ended inside a chunk"));
}

}  // namespace

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "' is not a URL Kiln's HTTP client can use: ", why,
                                                   "; write http://host:port[/path], e.g. http://127.0.0.1:5000"));
  };
  absl::string_view rest = url;
  if (absl::StartsWithIgnoreCase(rest, "https://")) {
    return bad(
        "https (TLS) is not supported; use a server on http:// (on this machine or a trusted network), or a "
        "local proxy that adds TLS");
  }
  if (!absl::ConsumePrefix(&rest, "http://")) return bad("it does not start with http://");
  HttpUrl parsed;
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  parsed.path = slash == absl::string_view::npos ? "" : std::string(rest.substr(slash));
  if (absl::StrContains(authority, '@')) return bad("user names and passwords in the URL are not supported");
  absl::string_view host = authority;
  if (absl::ConsumePrefix(&host, "[")) {  // [::1]:5000
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return bad("an IPv6 host without its ']'");
    absl::string_view after = host.substr(close + 1);
    host = host.substr(0, close);
    if (absl::ConsumePrefix(&after, ":") && !absl::SimpleAtoi(after, &parsed.port)) return bad("a bad port");
  } else if (const size_t colon = authority.rfind(':'); colon != absl::string_view::npos) {
    host = authority.substr(0, colon);
    if (!absl::SimpleAtoi(authority.substr(colon + 1), &parsed.port)) return bad("a bad port");
  }
  if (host.empty()) return bad("no host");
  if (parsed.port < 1 || parsed.port > 65535) return bad("a port outside 1..65535");
  parsed.host = std::string(host);
  return parsed;
}

std::string UrlEscape(absl::string_view text, bool keep_slashes) {
  std::string out;
  for (unsigned char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slashes && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

absl::StatusOr<HttpResponse> SendHttpRequest(const HttpRequest& request) {
  const std::string& url = request.url;
  absl::StatusOr<HttpUrl> target = ParseHttpUrl(url);
  if (!target.ok()) return target.status();
  absl::StatusOr<Socket*> connected = Connect(*target, request.timeout, url);
  if (!connected.ok()) return connected.status();
  std::unique_ptr<Socket> socket(*connected);

  std::string head = absl::StrCat(request.method, " ", target->path.empty() ? "/" : target->path, " HTTP/1.1\r\n",
                                  "Host: ", target->host, ":", target->port, "\r\n",
                                  "User-Agent: kiln\r\nAccept: */*\r\nConnection: close\r\n");
  if (!request.content_type.empty()) absl::StrAppend(&head, "Content-Type: ", request.content_type, "\r\n");
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT") {
    absl::StrAppend(&head, "Content-Length: ", request.body.size(), "\r\n");
  }
  absl::StrAppend(&head, "\r\n");
  for (absl::string_view piece : {absl::string_view(head), absl::string_view(request.body)}) {
    while (!piece.empty()) {
      if (absl::Status waited = Wait(socket->fd(), POLLOUT, request.timeout, "sending the request", url);
          !waited.ok()) {
        return waited;
      }
      const ssize_t sent = send(socket->fd(), piece.data(), piece.size(), MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return absl::UnavailableError(absl::StrCat("HTTP ", request.method, " ", url,
                                                   ": the connection failed while sending: ", strerror(errno)));
      }
      piece.remove_prefix(sent);
    }
  }

  // Read to the end: the server closes the connection after its reply (Connection: close), or the reply says its
  // length, whichever comes first.
  std::string data;
  size_t header_end = std::string::npos;
  std::optional<size_t> content_length;
  char buffer[65536];
  while (true) {
    if (header_end != std::string::npos && content_length.has_value() &&
        data.size() >= header_end + 4 + *content_length) {
      break;
    }
    if (absl::Status waited = Wait(socket->fd(), POLLIN, request.timeout, "waiting for the reply", url); !waited.ok()) {
      return waited;
    }
    const ssize_t got = recv(socket->fd(), buffer, sizeof(buffer), 0);
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("HTTP ", request.method, " ", url,
                                                 ": the connection failed while reading the reply: ", strerror(errno)));
    }
    if (got == 0) break;
    data.append(buffer, got);
    if (header_end == std::string::npos) {
      header_end = data.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        for (absl::string_view line : absl::StrSplit(absl::string_view(data).substr(0, header_end), "\r\n")) {
          absl::string_view value = line;
          if (absl::StartsWithIgnoreCase(line, "content-length:")) {
            value.remove_prefix(strlen("content-length:"));
            size_t length = 0;
            if (absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &length)) content_length = length;
          }
        }
      }
    }
  }
  if (header_end == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("HTTP ", request.method, " ", url, ": the server closed the connection ",
                                               data.empty() ? "without a reply" : "inside the reply's headers"));
  }
  const absl::string_view headers = absl::string_view(data).substr(0, header_end);
  HttpResponse response;
  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> status_line = absl::StrSplit(headers.substr(0, headers.find("\r\n")), ' ');
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/") ||
      !absl::SimpleAtoi(status_line[1], &response.status)) {
    return absl::DataLossError(absl::StrCat("HTTP ", request.method, " ", url, ": not an HTTP reply: '",
                                            headers.substr(0, std::min<size_t>(80, headers.find("\r\n"))), "'"));
  }
  absl::string_view body = absl::string_view(data).substr(header_end + 4);
  bool chunked = false;
  for (absl::string_view line : absl::StrSplit(headers, "\r\n")) {
    if (absl::StartsWithIgnoreCase(line, "transfer-encoding:") &&
        absl::StrContains(absl::AsciiStrToLower(line), "chunked")) {
      chunked = true;
    }
  }
  if (chunked) {
    absl::StatusOr<std::string> whole = Unchunk(body, absl::StrCat(request.method, " ", url));
    if (!whole.ok()) return whole.status();
    response.body = *std::move(whole);
  } else {
    if (content_length.has_value()) {
      if (body.size() < *content_length) {
        return absl::UnavailableError(absl::StrCat("HTTP ", request.method, " ", url, ": the reply ended after ",
                                                   body.size(), " of its ", *content_length, " bytes"));
      }
      body = body.substr(0, *content_length);
    }
    response.body = std::string(body);
  }
  return response;
}

}  // namespace kiln
