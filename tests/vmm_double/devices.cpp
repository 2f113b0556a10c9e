// The device creation of Cloud Hypervisor v52's DeviceManager that touches host resources the
// double is handed: taps (vmm/src/device_manager.rs make_virtio_net_device) and persistent-memory
// files (make_virtio_pmem_device). Disks are opened in vmm.cpp (check_bootable, vm_add).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "tests/vmm_double/vmm.hpp"

namespace chl::vmm_double {

namespace {
// A field of a device config, null when absent (never inserting it; a const operator[] on a
// missing key is undefined).
Json val(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) ? j[key] : Json();
}
}  // namespace

std::vector<std::string> Vmm::open_net_device(Json& net, const std::string& fds_key) {
  if (val(net, "vhost_user").is_boolean() && val(net, "vhost_user").get<bool>()) return {};
  TapRequest req;
  if (val(net, "tap").is_string()) req.name = val(net, "tap").get<std::string>();
  if (auto it = net_fds_.find(fds_key); it != net_fds_.end()) {
    for (const auto& fd : it->second) req.fds.push_back(fd.get());
  } else if (val(net, "fds").is_array() && !val(net, "tap").is_string()) {
    // fds in the config with none handed over: a received VM's (-1 each), used as they are.
    for (const auto& f : val(net, "fds")) req.fds.push_back(f.get<int>());
  }
  // CH: a `tap` name wins over fds (make_virtio_net_device); neither: a new tap "vmtap%d".
  // The double writes the name of a tap it got as an fd into `tap` (vm.add-net): that one was
  // handed over as fds, so those count.
  if (!req.fds.empty()) req.name.reset();
  if (!req.name && req.fds.empty()) req.name = "vmtap%d";
  if (val(net, "mtu").is_number_unsigned()) req.mtu = val(net, "mtu").get<std::uint16_t>();
  if (val(net, "host_mac").is_string()) req.host_mac = val(net, "host_mac").get<std::string>();
  if (val(net, "ip").is_string()) req.ip = val(net, "ip").get<std::string>();
  if (val(net, "mask").is_string()) req.mask = val(net, "mask").get<std::string>();
  const auto queues =
      val(net, "num_queues").is_number_unsigned() ? val(net, "num_queues").get<unsigned>() : 2u;
  req.queue_pairs = std::max(1u, queues / 2);
  auto taps = open_ch_taps(req);
  if (!taps.error.empty()) {
    std::vector<std::string> chain = {"Error from device manager",
                                      "Cannot create virtio-net device"};
    chain.insert(chain.end(), taps.error.begin(), taps.error.end());
    return chain;
  }
  // By name CH writes the tap's MAC back into the config (open_tap's `host_mac: &mut`).
  if (req.name && taps.host_mac) net["host_mac"] = *taps.host_mac;
  log(0, "net " + fds_key + ": tap '" + taps.if_name + "' opened as CH v52 does (" +
             std::to_string(taps.queues.size()) + " queue(s))");
  net_devices_[fds_key] = std::move(taps);
  return {};
}

std::vector<std::string> Vmm::open_net_devices() {
  net_devices_.clear();
  if (!(*config_)["net"].is_array()) return {};
  std::size_t i = 0;
  for (auto& n : (*config_)["net"]) {
    const std::string key =
        n["id"].is_string() ? n["id"].get<std::string>() : "#" + std::to_string(i);
    ++i;
    if (auto err = open_net_device(n, key); !err.empty()) {
      net_devices_.clear();
      return err;
    }
  }
  return {};
}

std::vector<std::string> Vmm::open_disk(const Json& d) {
  const std::string p = d["path"].get<std::string>();
  const bool ro = val(d, "readonly").is_boolean() && val(d, "readonly").get<bool>();
  const bool direct = val(d, "direct").is_boolean() && val(d, "direct").get<bool>();
  common::UniqueFd fd(
      ::open(p.c_str(), (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC | (direct ? O_DIRECT : 0)));
  if (!fd) {
    return {"Error from device manager", "Cannot open disk path",
            "I/O error (path=" + p + " op=open)", rust_os_error(errno)};
  }
  DiskFile f;
  f.fd = std::move(fd);
  f.path = p;
  f.readonly = ro;
  f.byte_range = val(d, "lock_granularity") != "Full";
  disk_files_.push_back(std::move(f));
  return {};
}

std::vector<std::string> Vmm::lock_disk(std::size_t index) {
  // virtio-devices/src/block.rs try_lock_image, block/src/fcntl.rs try_acquire_lock: F_OFD_SETLK,
  // a read lock for a read-only disk, else a write lock; ByteRange covers [0, max(logical,
  // physical size)), Full the whole file.
  const DiskFile& f = disk_files_.at(index);
  struct flock fl {};
  fl.l_type = f.readonly ? F_RDLCK : F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (f.byte_range) {
    struct stat st {};
    if (::fstat(f.fd.get(), &st) == 0)
      fl.l_len = std::max<off_t>(st.st_size, static_cast<off_t>(st.st_blocks) * 512);
  }
  if (::fcntl(f.fd.get(), F_OFD_SETLK, &fl) == 0) return {};
  const int e = errno;
  std::vector<std::string> tail = {std::string("Failed to get ") + (f.readonly ? "Read" : "Write") +
                                   " lock for disk image: " + f.path};
  if (e == EAGAIN || e == EACCES) {
    tail.push_back("The file is already locked");
  } else {
    tail.push_back("The lock state could not be checked or set");
    tail.push_back(rust_os_error(e));
  }
  return tail;
}

std::vector<std::string> Vmm::lock_disks() {
  for (std::size_t i = 0; i < disk_files_.size(); ++i) {
    if (auto tail = lock_disk(i); !tail.empty()) {
      tail.insert(tail.begin(), {"Error locking disk images: Another instance likely holds a lock",
                                 "Cannot lock images of all block devices"});
      return tail;
    }
  }
  return {};
}

std::vector<std::string> Vmm::open_pmem(const Json& pmem) {
  const std::vector<std::string> dm = {"Error from device manager"};
  auto with = [&](std::vector<std::string> tail) {
    tail.insert(tail.begin(), dm.begin(), dm.end());
    return tail;
  };
  const std::string path = pmem["file"].get<std::string>();
  const bool discard =
      val(pmem, "discard_writes").is_boolean() && val(pmem, "discard_writes").get<bool>();
  const bool has_size = val(pmem, "size").is_number_unsigned();
  struct stat st {};
  const bool dir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (dir && !has_size) return with({"Trying to use a directory for pmem but no size specified"});
  const int flags = (discard ? O_RDONLY : O_RDWR) | O_CLOEXEC | (dir ? O_TMPFILE : 0);
  common::UniqueFd fd(::open(path.c_str(), flags, 0600));
  if (!fd) return with({"Cannot open persistent memory file", rust_os_error(errno)});
  std::uint64_t size = 0;
  if (has_size) {
    size = val(pmem, "size").get<std::uint64_t>();
    if (dir && ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
      return with({"Cannot set persistent memory file size", rust_os_error(errno)});
  } else {
    const off_t end = ::lseek(fd.get(), 0, SEEK_END);
    if (end < 0) return with({"Cannot set persistent memory file size", rust_os_error(errno)});
    size = static_cast<std::uint64_t>(end);
  }
  if (size % 0x200000 != 0) return with({"Trying to use a size that is not multiple of 2MiB"});
  return {};
}

}  // namespace chl::vmm_double
