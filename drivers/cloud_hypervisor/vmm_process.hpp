#pragma once
// Start Cloud Hypervisor the way libvirt's ch driver does: we create, bind and listen on the API
// socket and pass it as `--api-socket fd=N`; the event monitor is a pipe whose write end is
// `--event-monitor fd=M`. No polling for a socket to appear. The child gets a clean environment,
// only these fds, its own session, dies with the launcher, and its stdout/stderr go to a log.
#include <filesystem>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace chl::cloud_hypervisor {

struct VmmStartOptions {
  std::string binary;                    // cloud-hypervisor (or the VMM double)
  std::filesystem::path api_socket;      // bound here, by us
  std::filesystem::path log_file;        // the VMM's stdout+stderr
  bool seccomp = true;                   // `--seccomp true`
  int verbosity = 0;                     // number of -v
  std::vector<std::uint32_t> cpu_affinity;  // the VMM's CPUs from exec on; empty = the launcher's
};

struct VmmProcess {
  common::ChildProcess child;
  common::UniqueFd events;               // read end of the event-monitor pipe (non-blocking)
  std::filesystem::path api_socket;
};

common::Result<VmmProcess> start_vmm(const VmmStartOptions& opts);

}  // namespace chl::cloud_hypervisor
