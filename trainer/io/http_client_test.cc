#include "trainer/io/http_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

// A one-connection server on a free port of 127.0.0.1: reads the request (up to its blank line and the body its
// Content-Length gives) and answers `reply`, or answers nothing for `silent`.
class OneShotServer {
 public:
  explicit OneShotServer(std::string reply, bool silent = false) : reply_(std::move(reply)), silent_(silent) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    socklen_t size = sizeof(address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    listen(fd_, 1);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneShotServer() {
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  const std::string& request() const { return request_; }

 private:
  void Serve() {
    const int client = accept(fd_, nullptr, nullptr);
    if (client < 0) return;
    char buffer[4096];
    while (true) {
      const ssize_t got = recv(client, buffer, sizeof(buffer), 0);
      if (got <= 0) break;
      request_.append(buffer, got);
      const size_t end = request_.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      size_t length = 0;
      const size_t at = request_.find("Content-Length: ");
      if (at != std::string::npos) length = std::stoul(request_.substr(at + 16));
      if (request_.size() >= end + 4 + length) break;
    }
    if (silent_) {
      usleep(600 * 1000);
    } else {
      send(client, reply_.data(), reply_.size(), MSG_NOSIGNAL);
    }
    close(client);
  }

  std::string reply_;
  bool silent_;
  int fd_ = -1;
  int port_ = 0;
  std::string request_;
  std::thread thread_;
};

TEST(HttpClientTest, SendsTheRequestAndReadsALengthDelimitedReply) {
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
  absl::StatusOr<HttpResponse> response =
      SendHttpRequest({.method = "POST",
                       .url = absl::StrCat("http://127.0.0.1:", server.port(), "/api/x?y=1"),
                       .content_type = "application/json",
                       .body = "{\"a\":1}"});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "hello");
  EXPECT_TRUE(absl::StartsWith(server.request(), "POST /api/x?y=1 HTTP/1.1\r\n")) << server.request();
  EXPECT_TRUE(absl::StrContains(server.request(), "Content-Type: application/json\r\n"));
  EXPECT_TRUE(absl::EndsWith(server.request(), "\r\n\r\n{\"a\":1}"));
}

TEST(HttpClientTest, ReadsAChunkedReplyAndAnErrorStatus) {
  OneShotServer server(
      "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nnot \r\n5\r\nfound\r\n0\r\n\r\n");
  absl::StatusOr<HttpResponse> response =
      SendHttpRequest({.url = absl::StrCat("http://localhost:", server.port(), "/")});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 404);
  EXPECT_EQ(response->body, "not found");
}

TEST(HttpClientTest, ReadsAReplyThatEndsWhenTheConnectionCloses) {
  OneShotServer server("HTTP/1.0 200 OK\r\n\r\nall of it");
  absl::StatusOr<HttpResponse> response = SendHttpRequest({.url = absl::StrCat("http://127.0.0.1:", server.port())});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->body, "all of it");
}

TEST(HttpClientTest, TimesOutNamingTheUrl) {
  OneShotServer server("", /*silent=*/true);
  const std::string url = absl::StrCat("http://127.0.0.1:", server.port(), "/slow");
  absl::StatusOr<HttpResponse> response = SendHttpRequest({.url = url, .timeout = absl::Milliseconds(200)});
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(response.status().message(), url)) << response.status();
}

TEST(HttpClientTest, RefusedConnectionNamesTheServer) {
  // A port that was free a moment ago: nothing listens there.
  int port = 0;
  {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t size = sizeof(address);
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    port = ntohs(address.sin_port);
    close(fd);
  }
  absl::StatusOr<HttpResponse> response = SendHttpRequest({.url = absl::StrCat("http://127.0.0.1:", port, "/")});
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(response.status().message(), absl::StrCat("127.0.0.1:", port))) << response.status();
}

TEST(HttpClientTest, ParsesUrlsAndRefusesOthersWithTheForm) {
  absl::StatusOr<HttpUrl> url = ParseHttpUrl("http://[::1]:5001/a/b");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 5001);
  EXPECT_EQ(url->path, "/a/b");
  url = ParseHttpUrl("http://example");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->port, 80);
  for (const char* bad : {"https://host:1", "ftp://x", "http://:80", "http://h:0", "http://h:99999", "http://u@h"}) {
    absl::StatusOr<HttpUrl> refused = ParseHttpUrl(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(refused.status().message(), bad)) << refused.status();
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "http://host:port")) << refused.status();
  }
  EXPECT_EQ(UrlEscape("a b/c%"), "a%20b%2Fc%25");
  EXPECT_EQ(UrlEscape("a b/c", true), "a%20b/c");
}

}  // namespace
}  // namespace kiln
