// The double's VMM side of live migration: vm.send-migration / vm.receive-migration as CH v52's
// vmm/src/lib.rs vm_send_migration (lines 2558-2640) and vm_receive_migration (2502-2556) do
// them; the protocol itself is in migration.cpp.
#include <string>

#include "tests/vmm_double/vmm.hpp"

namespace chl::vmm_double {

namespace {
const char* const kSend = "Failed to send migratable component snapshot";
const char* const kReceive = "Failed to receive migratable component snapshot";

std::string join(const std::vector<std::string>& chain) {
  std::string s;
  for (const auto& c : chain) s += (s.empty() ? "" : ": ") + c;
  return s;
}
}  // namespace

Reply Vmm::vm_send_migration(const Json& body, std::uint64_t conn) {
  const std::string endpoint = "vm.send-migration";
  SendParams p;
  p.destination_url = body["destination_url"].get<std::string>();
  p.local = body["local"].get<bool>();
  p.downtime_ms = body["downtime_ms"].get<std::uint64_t>();
  p.timeout_s = body["timeout_s"].get<std::uint64_t>();
  p.timeout_ignore = body["timeout_strategy"] == "Ignore";
  p.connections = body["connections"].get<std::uint32_t>();
  // NonZeroU64 / NonZeroU32 fields: serde refuses 0 while deserializing.
  for (const char* f : {"downtime_ms", "timeout_s", "connections"}) {
    if (body[f].get<std::uint64_t>() == 0) {
      const char* type = std::string(f) == "connections" ? "u32" : "u64";
      return {400,
              Json(std::vector<std::string>{"Failed to deserialize JSON",
                                            std::string("invalid value: integer `0`, expected a "
                                                        "nonzero ") +
                                                type})
                  .dump(),
              false};
    }
  }
  // VmSendMigrationData::validate (api/mod.rs:442-470).
  const auto& url = p.destination_url;
  const bool tcp = url.rfind("tcp:", 0) == 0 && url.size() > 4;
  const bool unix_url = url.rfind("unix:", 0) == 0 && url.size() > 5;
  if ((!tcp && !unix_url) || (unix_url && p.connections > 1) || p.connections > 128) {
    return api_error(endpoint, {kSend, "Invalid send migration configuration",
                                "Error validating send migration parameters"});
  }
  // CH v52 unwraps vm_config here and panics without one (docs/vmm-double.md); the double
  // answers instead.
  if (!config_) return api_error(endpoint, {kSend, "VM is not running"});
  const auto& mem = (*config_)["memory"];
  const bool shared = (mem["shared"].is_boolean() && mem["shared"].get<bool>()) ||
                      (mem["hugepages"].is_boolean() && mem["hugepages"].get<bool>());
  if (p.local && !shared)
    return api_error(endpoint,
                     {kSend, "Local migration requires shared memory or hugepages enabled"});
  if (!vm_) return api_error(endpoint, {kSend, "VM is not running"});
  if (state_ != VmState::Running && state_ != VmState::Paused)
    return api_error(endpoint,
                     {kSend, std::string("VM is not running or paused: ") + to_string(state_)});
  migration_was_running_ = state_ == VmState::Running;
  p.running = migration_was_running_;
  events_.emit("vm", "migration-started");
  std::vector<std::string> chain;
  migration_ = Migration::send(*this, p, chain);
  if (!migration_) {
    events_.emit("vm", "migration-failed");
    return api_error(endpoint, chain);
  }
  migration_conn_ = conn;
  dirty_heartbeat_ = heartbeat_;
  return {204, "", true};
}

Reply Vmm::vm_receive_migration(const Json& body, std::uint64_t conn) {
  std::vector<std::string> chain;
  migration_ = Migration::receive(*this, body["receiver_url"].get<std::string>(), chain);
  if (!migration_) return api_error("vm.receive-migration", chain);
  migration_conn_ = conn;
  return {204, "", true};
}

void Vmm::migration_answer(int status, const std::string& body) {
  held_conn_.reset();
  http_.respond(migration_conn_, status, body);
}

void Vmm::migration_event(const std::string& event) { events_.emit("vm", event); }

void Vmm::migration_event(const std::string& event,
                          const std::map<std::string, std::string>& properties) {
  events_.emit("vm", event, properties);
}

Json Vmm::migration_config() {
  // VmMigrationConfig {vm_config, common_cpuid, memory_manager_data}; the double has no CPUID
  // and one RAM range.
  Json c;
  c["vm_config"] = *config_;
  // The double writes the name of a tap it was handed as fds into `tap` (vm.add-net, for the
  // tests); CH leaves it null, and so does the config it sends.
  if (c["vm_config"]["net"].is_array())
    for (auto& n : c["vm_config"]["net"])
      if (n["fds"].is_array()) n["tap"] = nullptr;
  c["common_cpuid"] = Json::array();
  c["memory_manager_data"] = {
      {"memory_ranges", {{"data", Json::array({{{"gpa", 0}, {"length", guest_ram()}}})}}}};
  return c;
}

std::uint64_t Vmm::guest_ram() { return (*config_)["memory"]["size"].get<std::uint64_t>(); }

std::uint64_t Vmm::dirty_bytes() {
  // The pretend guest writes one page when its heartbeat counter moves.
  if (heartbeat_ == dirty_heartbeat_) return 0;
  dirty_heartbeat_ = heartbeat_;
  return 4096;
}

bool Vmm::pause_for_migration() {
  if (state_ != VmState::Running) return false;
  events_.emit("vm", "pausing");
  enter_state(VmState::Paused);
  events_.emit("vm", "paused");
  return true;
}

Json Vmm::guest_snapshot() {
  events_.emit("vm", "snapshotting");
  events_.emit("vm", "snapshotted");
  Json s;
  s["vmm_double"] = {{"state", to_string(state_)},
                     {"guest_halted", guest_halted_},
                     {"heartbeat", heartbeat_},
                     {"ignore_acpi", ignore_acpi_},
                     {"no_eject", no_eject_},
                     {"hotplugged_ram", hotplugged_ram_},
                     {"note", "sent by vmm-double, a test double of Cloud Hypervisor"}};
  return s;
}

void Vmm::send_finished(const std::vector<std::string>& chain) {
  if (chain.empty()) {
    events_.emit("vm", "migration-finished");
    migration_answer(204, "");
    // "Shutdown the VM after the migration succeeded": exit_evt -> vmm_shutdown.
    vmm_shutdown_and_exit(0);
    return;
  }
  log(0, "migration failed: " + join(chain));
  events_.emit("vm", "migration-failed");
  // Only a VM that was running is resumed.
  if (migration_was_running_ && state_ == VmState::Paused && vm_) {
    events_.emit("vm", "resuming");
    enter_state(VmState::Running);
    events_.emit("vm", "resumed");
  }
  const Reply r = api_error("vm.send-migration", chain);
  migration_answer(r.status, r.body);
}

std::vector<std::string> Vmm::receive_config(const Json& mc) {
  if (!mc.contains("vm_config"))
    return {kReceive, "Error deserialising config: missing field `vm_config`"};
  auto cfg = deserialize(mc["vm_config"].dump(), vm_config_type());
  if (!cfg) {
    log(0, "Migration aborted as migration command Config failed: " + cfg.error());
    return {kReceive, "Error deserialising config: " + cfg.error()};
  }
  // NetConfig.fds deserialize to -1 on the receiver (CH vm_config.rs
  // deserialize_netconfig_fds): a NIC handed over as fds fails when its device is made
  // (Net::from_tap_fds: dup(-1), EBADF); one given by tap name is opened by name
  // (devices.cpp open_net_device).
  if ((*cfg)["net"].is_array()) {
    for (auto& n : (*cfg)["net"])
      if (n["fds"].is_array()) n["fds"] = Json(std::vector<int>(n["fds"].size(), -1));
  }
  config_ = std::move(*cfg);
  hotplugged_ram_ = 0;
  if (auto e = open_consoles(); !e.empty())
    return {kReceive, "Error creating console devices: " + join(e)};
  return {};
}

std::vector<std::string> Vmm::receive_state(const Json& snapshot) {
  if (!snapshot.contains("vmm_double") || !snapshot["vmm_double"].is_object())
    return {kReceive, "Error deserialising snapshot: not a snapshot of vmm-double"};
  if (auto e = check_bootable(); !e.empty()) {
    // CH: warn!("Migration aborted as migration command State failed: …")
    log(0, "Migration aborted as migration command State failed: " + join(e));
    return {kReceive, "Error creating VM from snapshot: " + join(e)};
  }
  assign_device_ids();
  vm_ = true;
  const Json& s = snapshot["vmm_double"];
  events_.emit("vm", "restoring");
  state_ = VmState::Paused;
  events_.emit("vm", "restored");
  guest_start(false);
  guest_halted_ = s.value("guest_halted", false);
  heartbeat_ = s.value("heartbeat", 0U);
  ignore_acpi_ = s.value("ignore_acpi", false);
  no_eject_ = s.value("no_eject", false);
  hotplugged_ram_ = s.value("hotplugged_ram", std::uint64_t{0});
  enter_state(VmState::Paused);
  return {};
}

std::vector<std::string> Vmm::receive_complete(bool resume) {
  if (!resume) return {};  // CompletePaused: the VM stays paused
  events_.emit("vm", "resuming");
  enter_state(VmState::Running);
  events_.emit("vm", "resumed");
  return {};
}

void Vmm::receive_finished(bool aborted, const std::vector<std::string>& chain) {
  if (aborted) {
    // vm_receive_migration: self.vm = None; self.vm_config = None.
    guest_stop();
    vm_ = false;
    close_consoles();
    config_.reset();
  }
  // A socket error returns early: no event, and whatever was received stays (a config).
  if (!chain.empty()) {
    log(0, "migration receive failed: " + join(chain));
    const Reply r = api_error("vm.receive-migration", chain);
    migration_answer(r.status, r.body);
    return;
  }
  migration_answer(204, "");
}

}  // namespace chl::vmm_double
