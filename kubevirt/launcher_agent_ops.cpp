// What the launcher does to the guest through its agent, on both paths (docs/guest-agent.md):
// the filesystem freeze with its safety thaw (KubeVirt manager.go FreezeVMI / UnfreezeVMI /
// scheduleSafetyVMIUnfreeze), the soft reboot through the agent when it is connected
// (SoftRebootVMI), and the guest's clock set after unpause (setGuestTime). AgentLink's half runs
// on the service's loop and never waits there; LauncherHandler's half is the RPCs, whose threads
// wait for the answer, bounded.
#include <boost/asio/post.hpp>

#include "common/log.hpp"
#include "kubevirt/launcher_agent.hpp"
#include "kubevirt/launcher_handler.hpp"
#include "launcher/launcher_service.hpp"

namespace chl::kubevirt {

using common::fail;
using common::Result;
using common::Status;
using Json = nlohmann::json;

namespace {

// guest-fsfreeze-freeze may wait for the guest's applications (Windows VSS takes up to ~60 s;
// cmd-client gives FreezeVirtualMachine 60 s).
constexpr std::chrono::seconds kFreezeTimeout{55};
constexpr std::chrono::seconds kAgentCallTimeout{10};
// setGuestTime: every second, for up to 60 s.
constexpr std::chrono::seconds kSetTimeEvery{1};
constexpr std::chrono::seconds kSetTimeFor{60};

}  // namespace

void AgentLink::freeze(std::chrono::seconds unfreeze_timeout, Done done) {
  if (!client_) return done(fail(std::errc::not_connected, "this VM has no guest agent channel"));
  std::weak_ptr<char> alive = alive_;
  client_->execute(
      "guest-fsfreeze-status", nullptr, kAgentCallTimeout,
      [this, alive, unfreeze_timeout, done = std::move(done)](Result<Json> st) mutable {
        if (alive.expired()) return done(fail(std::errc::no_such_process, "the VM is gone"));
        if (!st) return done(tl::unexpected(st.error().wrap("reading the freeze status")));
        // Idempotent: already frozen is success (FreezeVMI).
        if (st->is_string() && *st == "frozen") {
          poller_->set_fs_freeze("frozen");
          return done({});
        }
        client_->execute(
            "guest-fsfreeze-freeze", nullptr, kFreezeTimeout,
            [this, alive, unfreeze_timeout, done = std::move(done)](Result<Json> r) mutable {
              if (alive.expired()) return done(fail(std::errc::no_such_process, "the VM is gone"));
              if (!r) return done(tl::unexpected(r.error()));
              CHL_LOG_INFO("guest agent: {} filesystems frozen", r->is_number() ? r->dump() : "?");
              poller_->set_fs_freeze("frozen");
              safety_thaw_->cancel();
              if (unfreeze_timeout.count() > 0) {
                safety_thaw_->expires_after(unfreeze_timeout);
                safety_thaw_->async_wait(
                    [this, alive, unfreeze_timeout](const boost::system::error_code& ec) {
                      if (ec || alive.expired()) return;
                      CHL_LOG_WARN(
                          "guest agent: Unfreeze was not called within {} s: thawing the guest's "
                          "filesystems",
                          unfreeze_timeout.count());
                      unfreeze([](const Status& s) {
                        if (!s) CHL_LOG_WARN("guest agent: safety thaw: {}", s.error().message());
                      });
                    });
              }
              done({});
            });
      });
}

void AgentLink::unfreeze(Done done) {
  safety_thaw_->cancel();
  if (!client_) return done(fail(std::errc::not_connected, "this VM has no guest agent channel"));
  std::weak_ptr<char> alive = alive_;
  client_->execute("guest-fsfreeze-status", nullptr, kAgentCallTimeout,
                   [this, alive, done = std::move(done)](Result<Json> st) mutable {
                     if (alive.expired())
                       return done(fail(std::errc::no_such_process, "the VM is gone"));
                     if (!st)
                       return done(tl::unexpected(st.error().wrap("reading the freeze status")));
                     if (st->is_string() && *st == "thawed") {
                       poller_->set_fs_freeze("thawed");
                       return done({});
                     }
                     client_->execute(
                         "guest-fsfreeze-thaw", nullptr, kFreezeTimeout,
                         [this, alive, done = std::move(done)](Result<Json> r) mutable {
                           if (alive.expired())
                             return done(fail(std::errc::no_such_process, "the VM is gone"));
                           if (!r) return done(tl::unexpected(r.error()));
                           poller_->set_fs_freeze("thawed");
                           done({});
                         });
                   });
}

void AgentLink::reboot(Done done) {
  if (!client_) return done(fail(std::errc::not_connected, "this VM has no guest agent channel"));
  // qemu-ga answers nothing to a guest-shutdown that works (qga/qapi-schema.json).
  client_->execute(
      "guest-shutdown", Json{{"mode", "reboot"}}, kAgentCallTimeout,
      [done = std::move(done)](Result<Json> r) {
        if (!r) return done(tl::unexpected(r.error()));
        done({});
      },
      /*expect_reply=*/false);
}

void AgentLink::set_guest_time() {
  if (!client_) return;
  set_time_->cancel();
  set_time_attempt(++set_time_gen_, std::chrono::steady_clock::now() + kSetTimeFor);
}

void AgentLink::set_time_attempt(std::uint64_t gen, std::chrono::steady_clock::time_point until) {
  if (gen != set_time_gen_) return;
  std::weak_ptr<char> alive = alive_;
  auto again = [this, alive, gen, until] {
    if (alive.expired() || gen != set_time_gen_) return;
    if (std::chrono::steady_clock::now() + kSetTimeEvery > until) {
      CHL_LOG_WARN("guest agent: failed to sync guest time");
      return;
    }
    set_time_->expires_after(kSetTimeEvery);
    set_time_->async_wait([this, alive, gen, until](const boost::system::error_code& ec) {
      if (!ec && !alive.expired()) set_time_attempt(gen, until);
    });
  };
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  client_->execute("guest-set-time", Json{{"time", ns}}, kAgentCallTimeout,
                   [alive, again](Result<Json> r) {
                     if (alive.expired()) return;
                     if (r) return CHL_LOG_INFO("guest agent: guest VM time sync finished");
                     // Not supported, or disabled in the agent: no retry (setGuestTime's
                     // ERR_OPERATION_UNSUPPORTED / ERR_ARGUMENT_UNSUPPORTED).
                     const auto& m = r.error().message();
                     if (r.error().code == std::errc::operation_not_supported ||
                         m.find("CommandNotFound") != std::string::npos ||
                         m.find("has been disabled") != std::string::npos)
                       return CHL_LOG_WARN("guest agent: failed to set time: {}", m);
                     again();
                   });
}

// ---- the RPCs ----

Status LauncherHandler::freeze(std::string_view, std::int32_t unfreeze_timeout_seconds) {
  AgentLink* a;
  {
    std::lock_guard lock(mu_);
    // FreezeVMI: "Failed to freeze VMI, VMI is currently during migration".
    if (migrating_)
      return fail(std::errc::operation_in_progress,
                  "Failed to freeze VMI, VMI is currently during migration");
    a = agent_.get();
  }
  const auto safety = std::chrono::seconds(std::max(0, unfreeze_timeout_seconds));
  auto r = on_service(
      "freeze",
      [a, safety](auto&, auto reply) {
        if (!a) return reply(fail(std::errc::not_connected, "this VM has no guest agent"));
        a->freeze(safety, [reply = std::move(reply)](const Status& s) {
          if (!s) return reply(tl::unexpected(s.error()));
          reply(Json::object());
        });
      },
      std::chrono::seconds(60));
  if (!r) return tl::unexpected(r.error());
  return {};
}

Status LauncherHandler::unfreeze(std::string_view) {
  AgentLink* a;
  {
    std::lock_guard lock(mu_);
    a = agent_.get();
  }
  auto r = on_service(
      "unfreeze",
      [a](auto&, auto reply) {
        if (!a) return reply(fail(std::errc::not_connected, "this VM has no guest agent"));
        a->unfreeze([reply = std::move(reply)](const Status& s) {
          if (!s) return reply(tl::unexpected(s.error()));
          reply(Json::object());
        });
      },
      std::chrono::seconds(60));
  if (!r) return tl::unexpected(r.error());
  return {};
}

Status LauncherHandler::unpause(std::string_view) {
  AgentLink* a;
  {
    std::lock_guard lock(mu_);
    a = agent_.get();
  }
  return command("unpause", [a](auto& s, auto reply) {
    s.resume([a, reply = std::move(reply)](Result<Json> r) {
      // The clock stood still while paused: set it (best effort, in the background).
      if (r && a) a->set_guest_time();
      reply(std::move(r));
    });
  });
}

Status LauncherHandler::soft_reboot(std::string_view) {
  AgentLink* a;
  {
    std::lock_guard lock(mu_);
    a = agent_.get();
  }
  // SoftRebootVMI (pkg/virt-launcher/virtwrap/manager.go): through the agent when AgentConnected,
  // else an ACPI reboot (libvirt DOMAIN_REBOOT_ACPI_POWER_BTN; Cloud Hypervisor has none: its
  // vm.reboot, Driver::acpi_reboot).
  return command("soft reboot", [a](auto& s, auto reply) {
    if (a && a->connected())
      return a->reboot([reply = std::move(reply)](const Status& st) {
        if (!st) return reply(tl::unexpected(st.error()));
        reply(Json{{"rebooting", true}, {"through", "guest agent"}});
      });
    s.reboot(std::move(reply), launcher::LauncherService::Reboot::Acpi);
  });
}

}  // namespace chl::kubevirt
