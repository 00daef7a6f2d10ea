// Which network addresses Gloo's process group uses, chosen as PyTorch users expect, and safe on a default Debian
// install, whose /etc/hosts maps the host's own name to the loopback address 127.0.1.1:
//   1. GLOO_SOCKET_IFNAME (a comma-separated list of interfaces, as torch.distributed reads it): those interfaces.
//   2. A MASTER_ADDR that is, or resolves only to, a loopback address (one machine: "localhost", or the host's own
//      name under SLURM on a default install): 127.0.0.1.
//   3. This host's name, when it resolves to an address that is not loopback (PyTorch's default device).
//   4. Otherwise the address of the interface that routes to MASTER_ADDR: PyTorch would bind the loopback address
//      here, tell the other hosts to connect to it, and strand the run until its timeout.
//   5. With no such route: an error that says which variable to set.
// NCCL reads its own variables (NCCL_SOCKET_IFNAME, ...); Kiln passes them through untouched.
#ifndef KILN_TRAINER_STRATEGIES_GLOO_DEVICES_H_
#define KILN_TRAINER_STRATEGIES_GLOO_DEVICES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

struct GlooDevice {
  bool is_interface = false;  // `name` is an interface (eth0) rather than a host name or address.
  std::string name;
};

// What the choice depends on, as the machine answers (HostFacts::Probe) or a test states it.
struct HostFacts {
  std::string hostname;
  std::vector<std::string> hostname_addresses;  // What the host name resolves to (IPv4 and IPv6, as text).
  std::optional<std::string> route_address;     // The local address of the route to the main address.
  std::vector<std::string> main_addresses;      // What the main address resolves to.

  // gethostname, getaddrinfo on it and on `main_address`, and the source address a UDP socket connected to `main_address` gets (no
  // packet is sent). Never fails: what cannot be found is left empty.
  static HostFacts Probe(const std::string& main_address);
};

bool IsLoopbackAddress(const std::string& address);

// The devices, by the rules above. `ifname` is GLOO_SOCKET_IFNAME's value ("" when unset).
absl::StatusOr<std::vector<GlooDevice>> ChooseGlooDevices(const std::string& main_address, const std::string& ifname,
                                                          const HostFacts& host);

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_GLOO_DEVICES_H_
