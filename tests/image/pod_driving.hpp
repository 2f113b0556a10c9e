#pragma once
// What the image lane's tests (test_image.cpp, test_bundle.cpp) share to drive a pod as
// virt-handler does: a gRPC call with a deadline, a state seen on the notify socket, and the
// container-disk directory filled with the PVH guest (kernel boot) and a qcow2 disk_0.img.

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "tests/image/pod.hpp"
#include "tests/kubevirt/test_notify_server.hpp"
#include "tests/support/launcher_harness.hpp"
#include "tests/support/test_support.hpp"

namespace chl::test::image {

template <typename F>
grpc::Status call(F&& f, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  return f(ctx);
}

inline bool has_state(const chl::test::TestNotifyServer& server, const std::string& status) {
  for (const auto& n : server.received())
    if (!n.k8s && n.event_type == "MODIFIED" && n.json["Status"].value("Status", "") == status) return true;
  return false;
}

inline void fill_container_disks(const Pod& pod) {
  const auto kb = pod.container_disks() / "kernel-boot";
  std::filesystem::create_directories(kb);
  std::filesystem::copy_file(chl::test::guest_kernel(), kb / "guest.elf");
  auto r = chl::test::run_command(
      {"qemu-img", "create", "-q", "-f", "qcow2", (pod.container_disks() / "disk_0.img").string(), "64M"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
}

}  // namespace chl::test::image
