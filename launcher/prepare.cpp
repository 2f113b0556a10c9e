#include "launcher/prepare.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include <fstream>
#include <optional>
#include <sstream>

#include "vmi/hypervisor_capabilities.hpp"
#include "common/log.hpp"
#include "disks/cloud_init.hpp"
#include "disks/config_disk.hpp"
#include "disks/container_disk.hpp"
#include "disks/disk_file.hpp"
#include "disks/empty_disk.hpp"
#include "disks/qcow2_overlay.hpp"
#include "firmware/payload.hpp"

namespace chl::launcher {
namespace fs = std::filesystem;
using common::fail;
using common::Result;
using common::Status;

namespace {

Status make_parent(const fs::path& target) {
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) return fail(ec, "creating " + target.parent_path().string());
  ::chmod(target.parent_path().c_str(), 0700);
  return {};
}

// Does a listening Unix socket bound to `path` show in /proc/net/unix (the pod's network
// namespace, which the virtiofs containers share)? nullopt when that cannot be read. Paths are
// compared as written and, failing that, canonically (a /var/run -> /run symlink).
std::optional<bool> unix_listener_at(const std::string& path) {
  std::ifstream f("/proc/net/unix");
  if (!f) return std::nullopt;
  std::error_code ec;
  const fs::path ours = fs::weakly_canonical(path, ec);
  std::string line;
  std::getline(f, line);  // Num RefCount Protocol Flags Type St Inode Path
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string num, refs, proto, flags, type, st, inode, bound;
    if (!(in >> num >> refs >> proto >> flags >> type >> st >> inode >> bound)) continue;
    if (flags != "00010000") continue;  // __SO_ACCEPTCON: listening
    if (bound == path) return true;
    std::error_code bec;
    if (!ec && fs::weakly_canonical(bound, bec) == ours && !bec) return true;
  }
  return false;
}

// The virtiofs container (virt-controller's virtiofs-<name>, started beside the launcher, maybe
// after it) binds its vhost-user socket; wait for it, bounded, polling. Never by connecting:
// virtiofsd takes the first connection as the VMM's and exits when it closes. A socket file
// nobody listens on (a virtiofsd that died) is waited on too, and named as such at the end:
// Cloud Hypervisor would retry it for 60 s and fail the boot. The bound matches Cloud
// Hypervisor's own (vu_common_ctrl.rs connect_vhost_user: 60 s).
Status wait_virtiofs_socket(const Preparation& p, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  bool stale = false;
  for (;;) {
    struct stat st {};
    if (::stat(p.target.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode))
        return fail(std::errc::not_a_stream, "filesystem '" + p.volume + "': " + p.target + " is not a socket");
      const auto listening = unix_listener_at(p.target);
      if (!listening || *listening) {
        CHL_LOG_INFO("filesystem {}: virtiofs socket {} is there{}", p.volume, p.target,
                     listening ? "" : " (/proc/net/unix unreadable: not checked for a listener)");
        return {};
      }
      stale = true;
    } else if (errno != ENOENT) {
      return common::fail_errno("filesystem '" + p.volume + "': " + p.target);
    } else {
      stale = false;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    ::usleep(20 * 1000);
  }
  const auto secs = std::chrono::duration<double>(bound).count();
  char b[32];
  std::snprintf(b, sizeof b, "%g", secs);
  const std::string who = " (KubeVirt's container virtiofs-" + p.volume + " runs virtiofsd on it";
  if (stale)
    return fail(std::errc::connection_refused, "filesystem '" + p.volume + "': virtiofs socket " + p.target +
                                                   " is there but nothing listened on it within " + b + " s" + who +
                                                   ": has it exited?)");
  return fail(std::errc::timed_out, "filesystem '" + p.volume + "': virtiofs socket " + p.target +
                                        " did not appear within " + b + " s" + who +
                                        ": is it running, and does it share the socket directory?)");
}

Result<std::string> read_secret(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(std::errc::no_such_file_or_directory, "cannot read secret file " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void set_disk_path(LaunchPlan& plan, const std::string& volume, const fs::path& path, bool readonly) {
  for (auto& d : plan.disks) {
    if (d.name == volume) {
      d.path = path.string();
      d.readonly = d.readonly || readonly;
    }
  }
}

Status write_cloud_init(const LaunchPlan& plan, const Preparation& p) {
  std::string user = p.user_data, network = p.network_data;
  if (!p.user_data_file.empty()) {
    CHL_TRY(user, read_secret(p.user_data_file));
  }
  if (!p.network_data_file.empty()) {
    CHL_TRY(network, read_secret(p.network_data_file));
  }
  CHL_TRY_VOID(make_parent(p.target));
  // Media generated by an earlier start of this VMI are ours: regenerate them from the spec.
  ::unlink(p.target.c_str());
  disks::CloudInitWriteOptions wo;
  wo.mtime = disks::kGeneratedMediaMtime;  // the same bytes on a migration's target
  wo.format = p.format == "vfat" ? disks::CloudInitFormat::vfat : disks::CloudInitFormat::iso9660;
  if (p.datasource == "configdrive") {
    disks::ConfigDriveData cd;
    cd.user_data = user;
    cd.network_data_json = network;
    // plan.name is "<namespace>/<name>".
    const auto slash = plan.name.find('/');
    const std::string ns = slash == std::string::npos ? "default" : plan.name.substr(0, slash);
    const std::string name = slash == std::string::npos ? plan.name : plan.name.substr(slash + 1);
    cd.meta_data_json = disks::config_drive_meta_data(name, ns, p.uuid, p.hostname);
    return disks::write_config_drive_image(p.target, std::move(cd), wo);
  }
  disks::NoCloudData nd;
  nd.user_data = user;
  nd.network_config = network;
  // As KubeVirt writes it: the firmware UUID (stable across restarts of the VM), else the uid.
  nd.meta_data = disks::nocloud_meta_data(disks::kubevirt_instance_id(plan.platform_uuid, p.uuid), p.hostname);
  return disks::write_nocloud_image(p.target, std::move(nd), wo);
}

Status run_one(LaunchPlan& plan, const Preparation& p, const PrepareOptions& opts) {
  switch (p.kind) {
    case PreparationKind::CreateEmptyDisk: {
      CHL_TRY_VOID(make_parent(p.target));
      CHL_TRY(auto d, disks::create_empty_disk(p.target, static_cast<std::uint64_t>(p.size_bytes)));
      CHL_LOG_INFO("emptyDisk {}: {} ({} bytes)", p.volume, d.created ? "created" : "reused", d.size);
      return {};
    }
    case PreparationKind::ConvertContainerDisk: {
      disks::ContainerDiskRequest req;
      req.volume_name = p.volume;
      req.source = p.source;
      req.state_dir = fs::path(p.target).parent_path();
      req.writable = true;  // KubeVirt's container disks are ephemeral but writable
      CHL_TRY_VOID(make_parent(p.target));
      CHL_TRY(auto d, disks::prepare_container_disk(req));
      set_disk_path(plan, p.volume, d.path, d.read_only);
      CHL_LOG_INFO("containerDisk {}: {} -> {}{}", p.volume, d.image.string(), d.path.string(),
                   d.reused ? " (reused)" : d.converted ? " (converted)" : "");
      return {};
    }
    case PreparationKind::CreateHostDisk: {
      disks::DiskFileRequest req;
      req.path = p.target;
      req.capacity = static_cast<std::uint64_t>(p.size_bytes);
      req.create_if_missing = true;
      CHL_TRY(auto d, disks::check_disk_file(req));
      CHL_LOG_INFO("hostDisk {}: {} {}", p.volume, d.path.string(), d.created ? "created" : "exists");
      return {};
    }
    case PreparationKind::WriteCloudInit:
      CHL_TRY_VOID(write_cloud_init(plan, p));
      CHL_LOG_INFO("cloud-init {} media written: {}", p.datasource, p.target);
      return {};
    case PreparationKind::FindFirmware: {
      firmware::PayloadRequest req;
      req.hypervisor = plan.hypervisor == "qemu-kvm" ? firmware::Hypervisor::qemu_kvm : firmware::Hypervisor::cloud_hypervisor;
      // EFI when the plan asks for the hypervisor's EFI firmware (CLOUDHV.fd, OVMF_CODE.fd).
      const vmi::HypervisorCapabilities* caps = vmi::find_hypervisor(plan.hypervisor);
      const bool efi = caps != nullptr && p.firmware == caps->efi_firmware;
      req.mode = efi ? firmware::BootMode::efi : firmware::BootMode::bios_or_none;
      req.search_dirs = opts.firmware_dirs;
      CHL_TRY(auto payload, firmware::select_payload(req));
      if (payload.ovmf_code && payload.ovmf_vars_template) {
        // QEMU UEFI: the code flash and the variable store template found beside it.
        plan.payload.firmware = payload.ovmf_code->string();
        plan.payload.firmware_vars = payload.ovmf_vars_template->string();
      } else if (payload.firmware) {
        plan.payload.firmware = payload.firmware->string();
      } else {
        return fail(std::errc::no_such_file_or_directory, "no firmware found for " + p.firmware);
      }
      CHL_LOG_INFO("firmware: {}", payload.summary);
      return {};
    }
    case PreparationKind::CreateOverlay: {
      // Ephemeral volume: a qcow2 overlay over the claim's raw image, reused across starts of
      // the same VMI (the state directory is per uid) and removed by remove_ephemeral_files().
      CHL_TRY_VOID(make_parent(p.target));
      CHL_TRY(auto o, disks::create_overlay({p.source, p.target}));
      CHL_LOG_INFO("ephemeral {}: overlay {} over {} ({} bytes){}", p.volume, p.target,
                   o.backing.string(), o.virtual_size, o.created ? "" : " (reused)");
      return {};
    }
    case PreparationKind::WriteConfigDisk: {
      CHL_TRY_VOID(make_parent(p.target));
      // An image from an earlier start of this VMI is ours: rebuilt from the volume as it is now.
      ::unlink(p.target.c_str());
      CHL_TRY(auto d, disks::write_config_disk({p.source, p.target, p.volume_label, {}, disks::kGeneratedMediaMtime}));
      CHL_LOG_INFO("config disk {}: {} files ({} bytes) from {} -> {}", p.volume, d.files,
                   d.data_bytes, p.source, p.target);
      return {};
    }
    case PreparationKind::WaitVirtiofsSocket:
      return wait_virtiofs_socket(p, opts.virtiofs_wait);
  }
  return {};
}

}  // namespace

Status remove_ephemeral_files(const LaunchPlan& plan) {
  Status result;
  for (const auto& p : plan.preparations) {
    if (p.kind != PreparationKind::CreateOverlay && p.kind != PreparationKind::WriteConfigDisk)
      continue;
    if (::unlink(p.target.c_str()) != 0 && errno != ENOENT && result) {
      result = common::fail_errno("removing " + p.target);
    }
  }
  return result;
}

Status run_preparations(LaunchPlan& plan, const PrepareOptions& opts) {
  for (const auto& p : plan.preparations) {
    std::string what = std::string(to_string(p.kind)) + (p.volume.empty() ? "" : " '" + p.volume + "'");
    CHL_TRY_VOID(common::wrap(run_one(plan, p, opts), "preparing: " + what));
  }
  return {};
}

}  // namespace chl::launcher
