// spec.domain: cpu, memory, resources, firmware, features, clock (devices: parse_devices.cpp).
#include <array>

#include "vmi/parse_support.hpp"

namespace chl::vmi {
namespace {

void parse_cpu(Reader& r, const YAML::Node& n, const std::string& p, Cpu& cpu) {
  r.unknown_keys(n, p,
                 {"cores", "sockets", "threads", "maxSockets", "model", "features",
                  "dedicatedCpuPlacement", "isolateEmulatorThread", "numa", "realtime"});
  cpu.cores = r.count(n, "cores", p).value_or(0);
  cpu.sockets = r.count(n, "sockets", p).value_or(0);
  cpu.threads = r.count(n, "threads", p).value_or(0);
  cpu.max_sockets = r.count(n, "maxSockets", p).value_or(0);
  cpu.model = r.str(n, "model", p).value_or("");
  cpu.dedicated_cpu_placement = r.boolean(n, "dedicatedCpuPlacement", p).value_or(false);
  cpu.isolate_emulator_thread = r.boolean(n, "isolateEmulatorThread", p).value_or(false);
  bool present = false;
  YAML::Node numa = r.object(n, "numa", p, present);
  if (present) {
    const std::string np = p + ".numa";
    r.unknown_keys(numa, np, {"guestMappingPassthrough"});
    bool gm = false;
    r.object(numa, "guestMappingPassthrough", np, gm);
    cpu.numa_guest_mapping_passthrough = gm;
  }
  YAML::Node rt = r.object(n, "realtime", p, cpu.realtime);
  if (cpu.realtime) {
    r.unknown_keys(rt, p + ".realtime", {"mask"});
    cpu.realtime_mask = r.str(rt, "mask", p + ".realtime").value_or("");
  }
  YAML::Node feats = Reader::child(n, "features");
  if (feats.IsDefined() && r.expect_list(feats, p + ".features")) {
    for (std::size_t i = 0; i < feats.size(); ++i) {
      const std::string fp = Reader::index(p + ".features", i);
      if (!r.expect_map(feats[i], fp)) continue;
      r.unknown_keys(feats[i], fp, {"name", "policy"});
      CpuFeature f;
      f.name = r.str(feats[i], "name", fp).value_or("");
      f.policy = r.str(feats[i], "policy", fp).value_or("require");
      cpu.features.push_back(std::move(f));
    }
  }
}

void parse_memory(Reader& r, const YAML::Node& n, const std::string& p, Memory& mem) {
  r.unknown_keys(n, p, {"guest", "maxGuest", "hugepages"});
  mem.guest = r.quantity(n, "guest", p);
  mem.max_guest = r.quantity(n, "maxGuest", p);
  bool present = false;
  YAML::Node hp = r.object(n, "hugepages", p, present);
  if (present) {
    r.unknown_keys(hp, p + ".hugepages", {"pageSize"});
    mem.hugepages_page_size = r.quantity(hp, "pageSize", p + ".hugepages");
    if (!mem.hugepages_page_size && !Reader::child(hp, "pageSize").IsDefined()) {
      r.problem(p + ".hugepages.pageSize", "required when hugepages is set (2Mi or 1Gi)", hp);
    }
  }
}

void parse_resources(Reader& r, const YAML::Node& n, const std::string& p, Resources& res) {
  r.unknown_keys(n, p, {"requests", "limits", "overcommitGuestOverhead"});
  bool present = false;
  YAML::Node req = r.object(n, "requests", p, present);
  if (present) {
    res.request_memory = r.quantity(req, "memory", p + ".requests");
    res.request_cpu = r.quantity(req, "cpu", p + ".requests");
  }
  YAML::Node lim = r.object(n, "limits", p, present);
  if (present) {
    res.limit_memory = r.quantity(lim, "memory", p + ".limits");
    res.limit_cpu = r.quantity(lim, "cpu", p + ".limits");
  }
}

void parse_firmware(Reader& r, const YAML::Node& n, const std::string& p, Firmware& fw) {
  r.unknown_keys(n, p, {"uuid", "serial", "bootloader", "kernelBoot", "acpi"});
  fw.uuid = r.str(n, "uuid", p).value_or("");
  fw.serial = r.str(n, "serial", p).value_or("");
  bool present = false;
  YAML::Node bl = r.object(n, "bootloader", p, present);
  if (present) {
    const std::string bp = p + ".bootloader";
    r.unknown_keys(bl, bp, {"bios", "efi"});
    bool bios = false, efi = false;
    YAML::Node b = r.object(bl, "bios", bp, bios);
    YAML::Node e = r.object(bl, "efi", bp, efi);
    if (bios && efi) r.problem(bp, "set either bios or efi, not both", bl);
    if (bios) {
      fw.bootloader = Bootloader::Bios;
      r.unknown_keys(b, bp + ".bios", {"useSerial"});
      (void)r.boolean(b, "useSerial", bp + ".bios");
    }
    if (efi) {
      fw.bootloader = Bootloader::Efi;
      r.unknown_keys(e, bp + ".efi", {"secureBoot", "persistent"});
      fw.efi_secure_boot = r.boolean(e, "secureBoot", bp + ".efi");
      fw.efi_persistent = r.boolean(e, "persistent", bp + ".efi").value_or(false);
    }
  }
  YAML::Node kb = r.object(n, "kernelBoot", p, fw.kernel_boot.present);
  if (fw.kernel_boot.present) {
    const std::string kp = p + ".kernelBoot";
    r.unknown_keys(kb, kp, {"kernelArgs", "container"});
    fw.kernel_boot.kernel_args = r.str(kb, "kernelArgs", kp).value_or("");
    YAML::Node c = r.object(kb, "container", kp, fw.kernel_boot.has_container);
    if (fw.kernel_boot.has_container) {
      const std::string cp = kp + ".container";
      r.unknown_keys(c, cp,
                     {"image", "kernelPath", "initrdPath", "imagePullPolicy", "imagePullSecret"});
      fw.kernel_boot.image = r.str(c, "image", cp).value_or("");
      fw.kernel_boot.kernel_path = r.str(c, "kernelPath", cp).value_or("");
      fw.kernel_boot.initrd_path = r.str(c, "initrdPath", cp).value_or("");
    }
  }
}

// features.hyperv: each entry an object with `enabled` (absent = true) and its extra values.
void parse_hyperv(Reader& r, const YAML::Node& n, const std::string& p, Features& f) {
  f.hyperv = r.expect_map(n, p);
  if (!f.hyperv) return;
  static constexpr std::array<std::string_view, 14> kKnown{
      "relaxed",    "vapic",     "vpindex",     "runtime",         "synic",
      "synictimer", "reset",     "frequencies", "reenlightenment", "ipi",
      "evmcs",      "spinlocks", "vendorid",    "tlbflush"};
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    const std::string hp = p + "." + key;
    if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
      CHL_LOG_DEBUG("ignoring unknown field {}", hp);
      continue;
    }
    if (kv.second.IsNull()) continue;
    if (!r.expect_map(kv.second, hp)) continue;
    HypervFeature h;
    h.name = key;
    h.enabled = r.boolean(kv.second, "enabled", hp).value_or(true);
    if (key == "spinlocks") {
      auto retries =
          r.integer(kv.second, "spinlocks", hp, 4095, std::numeric_limits<std::uint32_t>::max());
      if (retries) h.spinlocks = static_cast<std::uint32_t>(*retries);
    } else if (key == "vendorid") {
      h.vendor_id = r.str(kv.second, "vendorid", hp).value_or("");
    } else if (key == "synictimer" || key == "tlbflush") {
      for (const char* sub : {"direct", "extended"}) {
        if (std::string_view(sub) == "extended" && key != "tlbflush") continue;
        bool present = false;
        YAML::Node d = r.object(kv.second, sub, hp, present);
        if (!present) continue;
        bool on = r.boolean(d, "enabled", hp + "." + sub).value_or(true);
        (std::string_view(sub) == "direct" ? h.direct : h.extended) = on;
      }
    }
    f.hyperv_features.push_back(std::move(h));
  }
}

void parse_features(Reader& r, const YAML::Node& n, const std::string& p, Features& f) {
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    const std::string fp = p + "." + key;
    if (kv.second.IsNull()) continue;
    auto enabled = [&](std::optional<bool>& out) {
      if (!r.expect_map(kv.second, fp)) return;
      out = r.boolean(kv.second, "enabled", fp).value_or(true);
    };
    if (key == "acpi")
      enabled(f.acpi);
    else if (key == "apic")
      enabled(f.apic);
    else if (key == "smm")
      enabled(f.smm);
    else if (key == "pvspinlock")
      enabled(f.pvspinlock);
    else if (key == "hyperv")
      parse_hyperv(r, kv.second, fp, f);
    else if (key == "hypervPassthrough") {
      std::optional<bool> e;
      enabled(e);
      f.hyperv_passthrough = e.value_or(false);
    } else if (key == "kvm") {
      if (r.expect_map(kv.second, fp))
        f.kvm_hidden = r.boolean(kv.second, "hidden", fp).value_or(false);
    } else {
      f.others.push_back(key);
    }
  }
}

void parse_clock(Reader& r, const YAML::Node& n, const std::string& p, Clock& c) {
  r.unknown_keys(n, p, {"utc", "timezone", "timer"});
  c.present = true;
  bool utc = false;
  YAML::Node u = r.object(n, "utc", p, utc);
  if (utc) {
    c.utc = true;
    c.utc_offset_seconds =
        r.integer(u, "offsetSeconds", p + ".utc", std::numeric_limits<std::int32_t>::min(),
                  std::numeric_limits<std::int32_t>::max());
  } else if (n.IsMap() && n["utc"].IsDefined()) {
    c.utc = true;
  }
  c.timezone = r.str(n, "timezone", p).value_or("");
  YAML::Node t = r.object(n, "timer", p, c.timer);
  if (!c.timer) return;
  const std::string tp = p + ".timer";
  r.unknown_keys(t, tp, {"rtc", "pit", "kvm", "hpet", "hyperv"});
  for (const char* name : {"rtc", "pit", "kvm", "hpet", "hyperv"}) {
    bool present = false;
    YAML::Node e = r.object(t, name, tp, present);
    if (!present) continue;
    const std::string ep = tp + "." + name;
    ClockTimer timer;
    timer.name = name;
    timer.present = r.boolean(e, "present", ep).value_or(true);
    timer.tick_policy = r.str(e, "tickPolicy", ep).value_or("");
    timer.track = r.str(e, "track", ep).value_or("");
    c.timers.push_back(std::move(timer));
  }
}

}  // namespace

void parse_domain(Reader& r, const YAML::Node& n, Domain& d) {
  const std::string p = "spec.domain";
  r.unknown_keys(n, p,
                 {"cpu", "memory", "resources", "firmware", "devices", "features", "clock",
                  "machine", "launchSecurity", "ioThreadsPolicy", "ioThreads", "chassis"});
  bool present = false;
  YAML::Node x = r.object(n, "cpu", p, present);
  if (present) parse_cpu(r, x, p + ".cpu", d.cpu);
  x = r.object(n, "memory", p, present);
  if (present) parse_memory(r, x, p + ".memory", d.memory);
  x = r.object(n, "resources", p, present);
  if (present) parse_resources(r, x, p + ".resources", d.resources);
  x = r.object(n, "firmware", p, present);
  if (present) parse_firmware(r, x, p + ".firmware", d.firmware);
  x = r.object(n, "devices", p, present);
  if (present) parse_devices(r, x, p + ".devices", d.devices);
  x = r.object(n, "features", p, present);
  if (present) parse_features(r, x, p + ".features", d.features);
  x = r.object(n, "clock", p, present);
  if (present) parse_clock(r, x, p + ".clock", d.clock);
  x = r.object(n, "machine", p, present);
  if (present) {
    r.unknown_keys(x, p + ".machine", {"type"});
    d.machine_type = r.str(x, "type", p + ".machine").value_or("");
  }
  r.object(n, "launchSecurity", p, d.launch_security);
  r.object(n, "chassis", p, d.chassis);
  auto policy = r.str(n, "ioThreadsPolicy", p);
  d.io_threads_policy = policy.has_value();
  d.io_threads_policy_name = policy.value_or("");
}

}  // namespace chl::vmi
