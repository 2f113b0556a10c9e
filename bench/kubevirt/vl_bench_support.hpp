#pragma once
// What the virt-launcher-mode benches share (bench_virt_launcher, bench_mass_start): the VMI they
// Sync, a launcher in virt-launcher mode in its own pod directory with a notify server of ours
// standing in for virt-handler's, waiting for its Running event, and the /proc readings.
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "tests/kubevirt/test_notify_server.hpp"

namespace chl::bench {

// A tiny PVH guest booted as a kernel from the container disk, no pod network (the VMI of
// ../shared/reference/kubevirt-observed-launcher/vmi.yaml, after virt-api's defaulting).
// `name`/`uid` tell pods apart (a mass start: one VMI per pod).
std::string vl_vmi_json(const std::string& name = "benchvm",
                        const std::string& uid = "5b1e0c2a-0000-4000-8000-00000000beef");

// `argv` with this process's environment, stdout and stderr into `out`; exits on failure.
common::ChildProcess spawn_logged(const std::vector<std::string>& argv,
                                  const std::filesystem::path& out);

// One pod: the launcher in virt-launcher mode on the CH path (`--vmm-binary vmm`), its share,
// private and ephemeral directories under `dir`, the notify server on its
// domain-notify-pipe.sock, and a gRPC stub on its launcher-sock once that exists (connected).
struct VlPod {
  std::filesystem::path dir;
  std::unique_ptr<test::TestNotifyServer> notify;
  common::ChildProcess child;
  std::unique_ptr<::kubevirt::cmd::v1::Cmd::Stub> cmd;
};
// `name` is the VMI's (the launcher serves only that one).
VlPod start_vl_pod(const std::filesystem::path& dir, const std::string& launcher,
                   const std::string& vmm, const std::filesystem::path& container_disks,
                   const std::string& name = "benchvm");

// A MODIFIED (or ADDED) domain event with this Status (and Reason, unless empty) arrived.
bool has_domain_status(const test::TestNotifyServer& n, const std::string& status,
                       const std::string& reason = "");
// Wait (event-driven) until `status` arrives; false after `timeout`.
bool wait_domain_status(const test::TestNotifyServer& n, const std::string& status,
                        std::chrono::milliseconds timeout);

double median(std::vector<double> v);
// The p-th quantile (0..1) by rank, 0 for no samples.
double percentile(std::vector<double> v, double p);

// /proc readings of one process (all its threads); -1 when unreadable.
long rss_kib(pid_t pid);
long pss_kib(pid_t pid);        // smaps_rollup's Pss
long ctxt_switches(pid_t pid);  // voluntary + involuntary, all threads
long voluntary_ctxt_switches(pid_t pid);
long cpu_ticks(pid_t pid);    // utime + stime (clock ticks), all threads
long run_time_ns(pid_t pid);  // schedstat's time on a CPU (ns), all threads: finer than a tick
std::vector<pid_t> children_of(pid_t pid);  // direct children, all threads'

}  // namespace chl::bench
