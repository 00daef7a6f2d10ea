#include "trainer/strategies/gloo_devices.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

std::string AddressText(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = address->sa_family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(address)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  return ::inet_ntop(address->sa_family, raw, text, sizeof(text)) != nullptr ? text : "";
}

}  // namespace

bool IsLoopbackAddress(const std::string& address) {
  return address == "localhost" || absl::StartsWith(address, "127.") || address == "::1";
}

HostFacts HostFacts::Probe(const std::string& main_address) {
  HostFacts facts;
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0) facts.hostname = name;
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (!facts.hostname.empty() && ::getaddrinfo(facts.hostname.c_str(), nullptr, &hints, &found) == 0) {
    for (addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
      const std::string text = AddressText(entry->ai_addr);
      if (!text.empty()) facts.hostname_addresses.push_back(text);
    }
    ::freeaddrinfo(found);
  }
  found = nullptr;
  if (::getaddrinfo(main_address.c_str(), nullptr, &hints, &found) == 0) {
    for (addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
      const std::string text = AddressText(entry->ai_addr);
      if (!text.empty()) facts.main_addresses.push_back(text);
    }
    ::freeaddrinfo(found);
  }
  hints.ai_socktype = SOCK_DGRAM;
  found = nullptr;
  if (::getaddrinfo(main_address.c_str(), "9", &hints, &found) == 0 && found != nullptr) {
    const int fd = ::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_storage local = {};
    socklen_t length = sizeof(local);
    // connect() on a UDP socket only picks the route and the source address; nothing is sent.
    if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      facts.route_address = AddressText(reinterpret_cast<const sockaddr*>(&local));
    }
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(found);
  }
  return facts;
}

absl::StatusOr<std::vector<GlooDevice>> ChooseGlooDevices(const std::string& main_address, const std::string& ifname,
                                                          const HostFacts& host) {
  std::vector<GlooDevice> devices;
  for (absl::string_view interface : absl::StrSplit(ifname, ',', absl::SkipWhitespace())) {
    devices.push_back({.is_interface = true, .name = std::string(absl::StripAsciiWhitespace(interface))});
  }
  if (!devices.empty()) return devices;
  const bool main_is_loopback =
      IsLoopbackAddress(main_address) ||
      (!host.main_addresses.empty() &&
       std::all_of(host.main_addresses.begin(), host.main_addresses.end(), IsLoopbackAddress));
  if (main_is_loopback) return std::vector<GlooDevice>{{.name = "127.0.0.1"}};
  const bool usable_name =
      !host.hostname.empty() && !host.hostname_addresses.empty() &&
      std::none_of(host.hostname_addresses.begin(), host.hostname_addresses.end(), IsLoopbackAddress);
  if (usable_name) return std::vector<GlooDevice>{{.name = host.hostname}};
  if (host.route_address.has_value() && !host.route_address->empty() && !IsLoopbackAddress(*host.route_address)) {
    return std::vector<GlooDevice>{{.name = *host.route_address}};
  }
  const std::string resolved = host.hostname_addresses.empty()
                                   ? "does not resolve to an address"
                                   : absl::StrCat("resolves to ", absl::StrJoin(host.hostname_addresses, ", "));
  return absl::FailedPreconditionError(absl::StrCat(
      "this host's name '", host.hostname, "' ", resolved, ", and no interface routes to MASTER_ADDR=", main_address,
      ", so the other hosts could not reach this one; set GLOO_SOCKET_IFNAME to the interface that reaches them (for "
      "example GLOO_SOCKET_IFNAME=eth0; `ip -brief address` lists them), or map the host name to that interface's "
      "address in /etc/hosts"));
}

}  // namespace kiln
