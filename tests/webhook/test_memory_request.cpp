// Issue #38, item 5: the memory request virt-controller gives a launcher pod (guest memory plus
// KubeVirt's QEMU estimate, GetMemoryOverhead; the estimate is the annotation
// kubevirt.io/memory-overhead-bytes, VmiMemoryOverheadReport) must cover what the same VMI needs on
// Cloud Hypervisor through our launcher (vmi/overhead.cpp, `ch-launcher overhead`). Each golden pod
// against an equivalent VMI: its own manifest where the reference has it (the probe VMIs), else one
// with the pod's guest memory and KubeVirt's default single vCPU (the examples set no CPU).
#include <doctest/doctest.h>

#include <cstdio>

#include "tests/webhook/webhook_support.hpp"
#include "vmi/overhead.hpp"
#include "vmi/quantity.hpp"
#include "vmi/validator.hpp"

using namespace chl::test::webhook;

TEST_CASE(
    "every golden launcher pod's memory request covers Cloud Hypervisor's overhead for the same "
    "VMI") {
  const auto pods = golden_pods();
  if (pods.empty()) {
    chl::test::skip("no pods in " + pods_dir().string());
    return;
  }
  for (const auto& file : pods) {
    CAPTURE(file.filename().string());
    const json pod = read_json(file);
    const json* compute = nullptr;
    for (const auto& c : pod["spec"]["containers"])
      if (c["name"] == "compute") compute = &c;
    REQUIRE(compute != nullptr);
    const auto request =
        chl::vmi::parse_quantity((*compute)["resources"]["requests"]["memory"].get<std::string>());
    REQUIRE(request.has_value());
    const auto kubevirt = chl::vmi::parse_quantity(
        pod["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"].get<std::string>());
    REQUIRE(kubevirt.has_value());
    const std::int64_t guest = *request - *kubevirt;
    REQUIRE(guest > 0);
    auto manifest = file;
    manifest.replace_extension(".yaml");
    std::string text;
    if (std::filesystem::exists(manifest)) {
      text = chl::test::read_file(manifest);
    } else {
      text = "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: " +
             pod["metadata"]["annotations"]["kubevirt.io/domain"].get<std::string>() +
             "\n  namespace: default\nspec:\n  domain:\n    devices: {}\n    memory:\n      guest: "
             "\"" +
             std::to_string(guest) + "\"\n";
    }
    auto checked = chl::vmi::check_vmi(text, "cloud-hypervisor");
    REQUIRE_MESSAGE(checked.has_value(), text);
    REQUIRE(std::string(checked->caps->name) == "cloud-hypervisor");
    CHECK(chl::vmi::guest_memory_bytes(checked->vmi).value_or(0) == guest);
    const auto ours = chl::vmi::memory_overhead(checked->vmi, *checked->caps);
    // The figure for the report: KubeVirt's QEMU estimate, ours on CH, and the margin.
    std::printf(
        "memory: %s: request %s = guest %s + KubeVirt overhead %s; CH overhead %s; margin %s\n",
        file.filename().c_str(), chl::vmi::format_bytes_quantity(*request).c_str(),
        chl::vmi::format_bytes_quantity(guest).c_str(),
        chl::vmi::format_bytes_quantity(*kubevirt).c_str(),
        chl::vmi::format_bytes_quantity(ours.total).c_str(),
        chl::vmi::format_bytes_quantity(*kubevirt - ours.total).c_str());
    CHECK_MESSAGE(ours.total <= *kubevirt, chl::vmi::format_overhead(ours));
  }
}
