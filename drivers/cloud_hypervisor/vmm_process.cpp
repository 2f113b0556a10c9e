#include "drivers/cloud_hypervisor/vmm_process.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/log.hpp"
#include "common/syscall.hpp"
#include "common/unix_socket.hpp"

namespace chl::cloud_hypervisor {
namespace fs = std::filesystem;
using common::fail;
using common::fail_errno;
using common::Result;
using common::UniqueFd;

namespace {
constexpr int kApiFdInChild = 3;
constexpr int kEventFdInChild = 4;
}  // namespace

Result<VmmProcess> start_vmm(const VmmStartOptions& opts) {
  VmmProcess vmm;
  vmm.api_socket = opts.api_socket;
  CHL_TRY(UniqueFd api, common::wrap(common::listen_unix(opts.api_socket), "API socket"));

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return fail_errno("event monitor pipe");
  UniqueFd ev_read(pipefd[0]), ev_write(pipefd[1]);
  // The VMM's end blocks (CH writes events synchronously); ours is non-blocking for the loop.
  if (::fcntl(ev_read.get(), F_SETFL, O_NONBLOCK) != 0) return fail_errno("event pipe O_NONBLOCK");
  // Room for bursts so a busy launcher never stalls the VMM's event writer.
  (void)::fcntl(ev_write.get(), F_SETPIPE_SZ, 1 << 20);

  UniqueFd log(::open(opts.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!log) return fail_errno("open VMM log " + opts.log_file.string());

  common::SpawnOptions so;
  so.argv = {opts.binary, "--api-socket", "fd=" + std::to_string(kApiFdInChild), "--event-monitor",
             "fd=" + std::to_string(kEventFdInChild), "--seccomp", opts.seccomp ? "true" : "false"};
  for (int i = 0; i < opts.verbosity; ++i) so.argv.push_back("-v");
  so.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
  so.pass_fds = {{api.get(), kApiFdInChild}, {ev_write.get(), kEventFdInChild}};
  so.stdout_fd = log.get();
  so.stderr_fd = log.get();
  so.new_session = true;
  so.die_with_parent = true;
  so.cpu_affinity = opts.cpu_affinity;
  CHL_TRY(vmm.child, common::wrap(common::ChildProcess::spawn(so), "starting " + opts.binary));
  vmm.events = std::move(ev_read);
  CHL_LOG_INFO("started VMM {} pid {} (api fd={}, event-monitor fd={})", opts.binary, vmm.child.pid(),
               kApiFdInChild, kEventFdInChild);
  return vmm;
}

}  // namespace chl::cloud_hypervisor
