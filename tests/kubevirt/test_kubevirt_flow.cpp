// The two endpoints together, driven as virt-handler drives a launcher: a stand-in core
// (implementing CmdHandler, feeding NotifyClient as the launcher will) behind the command
// socket, our notify server standing in for virt-handler's. Info → Sync → ADDED, MODIFIED
// Running → GetDomain → Pause → Delete → the final MODIFIED NoState/NonExistent with
// deletionTimestamp, delivered before "exit" (flush).
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include "kubevirt/cmd_server.hpp"
#include "kubevirt/domain_json.hpp"
#include "kubevirt/notify_client.hpp"
#include "kubevirt/proto/cmd.grpc.pb.h"
#include "kubevirt/proto/cmd_info.grpc.pb.h"
#include "tests/kubevirt/test_notify_server.hpp"
#include "tests/support/test_support.hpp"

namespace {

using namespace chl::kubevirt;
using namespace std::chrono_literals;
namespace v1 = ::kubevirt::cmd::v1;
using S = chl::events::DomainState;
using R = chl::events::StateReason;
using chl::common::Result;
using chl::common::Status;

// What the launcher core will do, reduced to the domain document and its notifications.
class StandInCore final : public CmdHandler {
 public:
  explicit StandInCore(NotifyClient& notify) : notify_(notify) {
    doc_.vmi_name = "vm1";
    doc_.vmi_namespace = "ns1";
    doc_.vmi_uid = "uid-1";
    doc_.uuid = "6a1a24a1-4061-4607-8bf4-a3963d0c5895";
    doc_.grace_period_seconds = 30;
    doc_.memory_kib = 65536;
  }
  Status sync(std::string_view vmi, const SyncOptions&) override {
    if (vmi.find("\"uid-1\"") == std::string_view::npos)
      return chl::common::fail(std::errc::invalid_argument,
                               "metadata.uid: not this launcher's VMI");
    std::lock_guard lock(mu_);
    if (!defined_) {
      defined_ = true;
      publish(S::Shutoff, R::Unknown, DomainEventType::Added);
      publish(S::Paused, R::StartingUp);
      publish(S::Running, R::Booted);
    }
    return {};
  }
  Status pause(std::string_view) override { return set(S::Paused, R::User); }
  Status unpause(std::string_view) override { return set(S::Running, R::Unpaused); }
  Status shutdown(std::string_view) override { return set(S::Shutoff, R::Shutdown); }
  Status kill(std::string_view) override { return set(S::Shutoff, R::Destroyed); }
  Status delete_domain(std::string_view) override {
    std::lock_guard lock(mu_);
    doc_.deletion_timestamp = std::chrono::system_clock::now();
    publish(S::NoState, R::NonExistent);
    return {};
  }
  Status soft_reboot(std::string_view) override { return {}; }
  Status reset(std::string_view) override { return {}; }
  Status ping() override { return {}; }
  Result<std::string> get_domain() override {
    std::lock_guard lock(mu_);
    return defined_ ? to_domain_json(doc_).dump() : std::string();
  }
  Result<std::string> get_domain_stats() override { return std::string("{}"); }
  Result<std::string> get_qemu_version() override { return std::string("v52.0"); }
  Status sync_cpus(std::string_view) override { return {}; }
  Status sync_memory(std::string_view) override { return {}; }

 private:
  Status set(S s, R r) {
    std::lock_guard lock(mu_);
    publish(s, r);
    return {};
  }
  void publish(S s, R r, DomainEventType type = DomainEventType::Modified) {
    doc_.state = s;
    doc_.reason = r;
    notify_.send_domain_event(to_domain_json(doc_).dump(), type);
  }
  NotifyClient& notify_;
  std::mutex mu_;
  DomainDocument doc_;
  bool defined_ = false;
};

std::vector<std::string> states(const std::vector<chl::test::ReceivedNotification>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs)
    out.push_back(r.event_type + " " + r.json["Status"]["Status"].get<std::string>() + "/" +
                  r.json["Status"]["Reason"].get<std::string>());
  return out;
}

}  // namespace

TEST_CASE("kubevirt flow: virt-handler's sequence through both sockets") {
  chl::test::TempDir share("kvf");
  chl::test::TestNotifyServer handler_side(share / "domain-notify-pipe.sock");
  NotifyClient notify({.socket_path = (share / "domain-notify-pipe.sock").string()});
  StandInCore core(notify);
  auto server = CmdServer::start({.share_dir = share.path()}, core);
  REQUIRE(server.has_value());

  auto channel = grpc::CreateChannel("unix:" + ready_socket_path(share.path()).string(),
                                     grpc::InsecureChannelCredentials());
  auto info = ::kubevirt::cmd::info::CmdInfo::NewStub(channel);
  auto cmd = v1::Cmd::NewStub(channel);
  auto call = [](auto&& rpc) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    return rpc(ctx);
  };
  v1::VMIRequest vmi;
  vmi.mutable_vmi()->set_vmijson(R"({"metadata":{"name":"vm1","namespace":"ns1","uid":"uid-1"}})");
  v1::Response r;

  ::kubevirt::cmd::info::CmdInfoResponse versions;
  REQUIRE(call([&](auto& c) { return info->Info(&c, {}, &versions); }).ok());
  CHECK(versions.supportedcmdversions(0) == 1);

  v1::DomainResponse domain;
  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, {}, &domain); }).ok());
  CHECK(domain.response().success());
  CHECK(domain.domain().empty());  // no domain before the first Sync

  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE(r.success());
  REQUIRE(notify.flush(std::chrono::steady_clock::now() + 5s));
  // Coalescing may fold the start-up states together; what virt-handler must see is an ADDED
  // first and Running last.
  auto seen = states(handler_side.received());
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.front().starts_with("ADDED "));
  CHECK(seen.back().ends_with("Running/Unknown"));

  REQUIRE(call([&](auto& c) { return cmd->GetDomain(&c, {}, &domain); }).ok());
  const auto doc = nlohmann::json::parse(domain.domain());
  CHECK(doc["Status"]["Status"] == "Running");
  CHECK(doc["ObjectMeta"]["uid"] == "uid-1");

  // A VMI that is not this launcher's: refused, and nothing changes.
  v1::VMIRequest other;
  other.mutable_vmi()->set_vmijson(R"({"metadata":{"uid":"uid-2"}})");
  REQUIRE(call([&](auto& c) { return cmd->SyncVirtualMachine(&c, other, &r); }).ok());
  CHECK_FALSE(r.success());
  CHECK(r.message() == "metadata.uid: not this launcher's VMI");

  REQUIRE(call([&](auto& c) { return cmd->PauseVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE(notify.flush(std::chrono::steady_clock::now() + 5s));
  CHECK(states(handler_side.received()).back() == "MODIFIED Paused/User");

  REQUIRE(call([&](auto& c) { return cmd->KillVirtualMachine(&c, vmi, &r); }).ok());
  REQUIRE(call([&](auto& c) { return cmd->DeleteVirtualMachine(&c, vmi, &r); }).ok());
  // The launcher is about to exit: the final notification must be out first.
  REQUIRE(notify.flush(std::chrono::steady_clock::now() + 5s));
  const auto received = handler_side.received();
  const auto& last = received.back();
  CHECK(last.event_type == "MODIFIED");  // never DELETED
  CHECK(last.json["Status"]["Status"] == "NoState");
  CHECK(last.json["Status"]["Reason"] == "NonExistent");
  CHECK(last.json["ObjectMeta"].contains("deletionTimestamp"));
  for (const auto& n : received) CHECK(n.event_type != "DELETED");
}
