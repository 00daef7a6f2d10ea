// A small HTTP/1.1 client over a TCP socket, for the loggers that talk to a tracking server (MLflow's REST API): one
// request per connection (`Connection: close`), plain `http://` only, with a deadline on connecting and on every read
// and write. Kiln's tests and users run such a server on their own machine or network; TLS (https://) is refused with
// the fix (a local server, or a proxy), rather than sent in the clear.
//
// Every error names the URL, what failed and the system's reason: Unavailable when the server cannot be reached (or
// stops answering before the deadline), DeadlineExceeded on the deadline, InvalidArgument for a URL this client cannot
// use. A reply is returned whatever its status code; the caller decides what a 4xx or 5xx means.
//
// Thread-safety: the functions share no state; call them from any thread.
#ifndef KILN_TRAINER_IO_HTTP_CLIENT_H_
#define KILN_TRAINER_IO_HTTP_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kiln {

// An http:// URL taken apart: "http://127.0.0.1:5000/api" -> host 127.0.0.1, port 5000, path /api (a bare
// "http://host" has port 80 and path "").
struct HttpUrl {
  std::string host;
  int port = 80;
  std::string path;
};

// InvalidArgument naming `url` and the form expected when it is not http://host[:port][/path].
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

struct HttpResponse {
  int status = 0;  // 200, 404, ...
  std::string body;
};

struct HttpRequest {
  std::string method = "GET";  // GET, POST, PUT, ...
  // The full URL: http://host:port/path?query (the path and query already escaped: see UrlEscape).
  std::string url;
  std::string content_type;  // Sent as Content-Type when not empty.
  std::string body;
  absl::Duration timeout = absl::Seconds(30);  // For connecting, and for each read and write after it.
};

absl::StatusOr<HttpResponse> SendHttpRequest(const HttpRequest& request);

// `text` with every byte other than letters, digits and -._~ (and '/' when keep_slashes) written as %XX.
std::string UrlEscape(absl::string_view text, bool keep_slashes = false);

}  // namespace kiln

#endif  // KILN_TRAINER_IO_HTTP_CLIENT_H_
