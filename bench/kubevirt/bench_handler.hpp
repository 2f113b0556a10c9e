#pragma once
// kubevirt_bench's stand-in launcher core: answers from to_domain_json/to_stats_json and, for
// every Sync, hands the domain to `notify` (the transport under measurement sends it on).
#include <functional>
#include <string>

#include "kubevirt/cmd_handler.hpp"
#include "kubevirt/domain_json.hpp"
#include "kubevirt/stats_json.hpp"

namespace chl::bench {

class BenchHandler final : public kubevirt::CmdHandler {
 public:
  explicit BenchHandler(std::function<void(std::string)> notify) : notify_(std::move(notify)) {
    doc_.vmi_name = "vm1";
    doc_.vmi_namespace = "ns1";
    doc_.vmi_uid = "5b0c2a41-9e3d-4f1a-8b7c-6d5e4f3a2b10";
    doc_.uuid = "d7901662-86da-450a-a7f8-552214e3288c";
    doc_.memory_kib = 65536;
    doc_.machine = "pc-q35-10.0";
    doc_.interfaces.push_back({.name = "default",
                               .mac = "02:42:ac:11:00:02",
                               .type = "ethernet",
                               .target_device = "tap0",
                               .model = "virtio",
                               .mtu = 1500});
    doc_.state = events::DomainState::Running;
  }
  common::Status sync(std::string_view, const kubevirt::SyncOptions&) override {
    notify_(kubevirt::to_domain_json(doc_).dump());
    return {};
  }
  common::Status pause(std::string_view) override { return {}; }
  common::Status unpause(std::string_view) override { return {}; }
  common::Status shutdown(std::string_view) override { return {}; }
  common::Status kill(std::string_view) override { return {}; }
  common::Status delete_domain(std::string_view) override { return {}; }
  common::Status soft_reboot(std::string_view) override { return {}; }
  common::Status reset(std::string_view) override { return {}; }
  common::Status ping() override { return {}; }
  common::Result<std::string> get_domain() override {
    return kubevirt::to_domain_json(doc_).dump();
  }
  common::Result<std::string> get_domain_stats() override {
    kubevirt::DomainStatsDocument s;
    s.name = "ns1_vm1";
    s.cpu.time_ns = 1;
    s.vcpus.resize(2);
    return kubevirt::to_stats_json(s).dump();
  }
  common::Result<std::string> get_qemu_version() override { return std::string("v52.0"); }
  common::Status sync_cpus(std::string_view) override { return {}; }
  common::Status sync_memory(std::string_view) override { return {}; }

 private:
  std::function<void(std::string)> notify_;
  kubevirt::DomainDocument doc_;
};

// Wait for stdin to close (the bench reads /proc/<pid>/status meanwhile).
void wait_for_stdin_eof();

}  // namespace chl::bench
