// The minimal PVH guest: its ELF note, and its behaviour under real QEMU (TCG always; KVM when
// /dev/kvm boots it): banner and command line on COM1, echo, typed commands, ACPI power-off,
// pvpanic (ISA and PCI), reset, the ACPI power button (QMP system_powerdown, and a GED register
// above 4 GiB declared as Cloud Hypervisor declares it).
#include <doctest/doctest.h>

#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "common/unique_fd.hpp"
#include "common/unix_socket.hpp"
#include "tests/support/serial_child.hpp"
#include "tests/support/test_support.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const char* kGuest = CHL_PVH_GUEST_PATH;
const char* kBanner = "ch-launcher PVH test guest: hello from COM1";

// A QEMU running the guest with COM1 on its stdin/stdout.
class Qemu : public chl::test::SerialChild {
 public:
  static std::optional<std::string> binary() { return chl::test::tool("qemu-system-x86_64"); }

  bool start(const std::string& accel, const std::string& cmdline, std::vector<std::string> extra = {}) {
    auto bin = binary();
    if (!bin) return false;
    std::vector<std::string> argv = {*bin, "-nodefaults", "-no-user-config", "-M", "q35", "-m", "64", "-display",
                                     "none", "-serial", "stdio", "-accel", accel, "-kernel", kGuest, "-append", cmdline};
    for (auto& e : extra) argv.push_back(e);
    return SerialChild::start(std::move(argv));
  }
};

// Read from `fd` until `out` holds a complete QMP answer line ("return" or "error").
bool qmp_read_answer(int fd, std::string& out, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    for (auto nl = out.find('\n'); nl != std::string::npos; nl = out.find('\n')) {
      std::string line = out.substr(0, nl);
      out.erase(0, nl + 1);
      if (line.find("\"return\"") != std::string::npos) return true;
      if (line.find("\"error\"") != std::string::npos) return false;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[1024];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

// Run one QMP command on QEMU's QMP socket at `path`; true when QEMU answered "return".
bool qmp_command(const fs::path& path, const std::string& command) {
  chl::common::UniqueFd fd;
  const bool connected = chl::test::wait_until(30s, [&] {
    auto c = chl::common::connect_unix(path);
    if (c) fd = std::move(*c);
    return c.has_value();
  }, 50ms);
  if (!connected) return false;
  std::string in;
  // The greeting has no "return": wait for its line, then negotiate and send the command.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (in.find('\n') == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    pollfd pf{fd.get(), POLLIN, 0};
    if (::poll(&pf, 1, 100) <= 0) continue;
    char buf[1024];
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) return false;
    in.append(buf, static_cast<std::size_t>(n));
  }
  in.erase(0, in.find('\n') + 1);
  for (const std::string& c : {std::string("qmp_capabilities"), command}) {
    const std::string msg = "{\"execute\":\"" + c + "\"}\n";
    if (::write(fd.get(), msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) return false;
    if (!qmp_read_answer(fd.get(), in, 30s)) return false;
  }
  return true;
}

bool have_qemu() {
  if (Qemu::binary()) return true;
  chl::test::skip("qemu-system-x86_64 not installed (scripts/setup.sh installs qemu-system-x86)");
  return false;
}

}  // namespace

TEST_CASE("the PVH guest is an ELF64 with the Xen PHYS32_ENTRY note inside its loaded image") {
  REQUIRE(fs::exists(kGuest));
  std::string img = chl::test::read_file(kGuest);
  REQUIRE(img.size() > sizeof(Elf64_Ehdr));
  Elf64_Ehdr eh;
  std::memcpy(&eh, img.data(), sizeof eh);
  CHECK(std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0);
  CHECK(eh.e_ident[EI_CLASS] == ELFCLASS64);
  CHECK(eh.e_machine == EM_X86_64);
  std::optional<std::uint64_t> entry;
  std::uint64_t load_lo = ~0ULL, load_hi = 0;
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    REQUIRE(eh.e_phoff + (i + 1) * sizeof ph <= img.size());
    std::memcpy(&ph, img.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_type == PT_LOAD) {
      load_lo = std::min<std::uint64_t>(load_lo, ph.p_paddr);
      load_hi = std::max<std::uint64_t>(load_hi, ph.p_paddr + ph.p_memsz);
    }
    if (ph.p_type != PT_NOTE) continue;
    std::size_t off = ph.p_offset, end = ph.p_offset + ph.p_filesz;
    while (off + sizeof(Elf64_Nhdr) <= end) {
      Elf64_Nhdr nh;
      std::memcpy(&nh, img.data() + off, sizeof nh);
      std::size_t name = off + sizeof nh;
      std::size_t desc = name + ((nh.n_namesz + 3) & ~3u);
      if (nh.n_type == 18 && nh.n_namesz == 4 && std::memcmp(img.data() + name, "Xen", 4) == 0) {
        CHECK(nh.n_descsz >= 4);
        std::uint32_t e32;
        std::memcpy(&e32, img.data() + desc, 4);
        entry = e32;
      }
      off = desc + ((nh.n_descsz + 3) & ~3u);
    }
  }
  REQUIRE(entry.has_value());
  CHECK(*entry >= load_lo);
  CHECK(*entry < load_hi);
  CHECK(load_lo == 0x100000);
}

TEST_CASE("PVH guest under QEMU (TCG): banner - command line - and power-off ends QEMU") {
  if (!have_qemu()) return;
  Qemu q;
  REQUIRE(q.start("tcg", "hello poweroff"));
  auto st = q.wait_exit(60s);
  INFO("output: " << q.output());
  REQUIRE(st.has_value());
  CHECK(st->success());
  CHECK(q.count(kBanner) == 1);
  CHECK(q.output().find("cmdline: hello poweroff\r\n") != std::string::npos);
  CHECK(q.output().find("guest: powering off") != std::string::npos);
  CHECK(q.output().find("still running") == std::string::npos);
}

TEST_CASE("PVH guest under QEMU (TCG): echoes typed input and obeys typed commands") {
  if (!have_qemu()) return;
  Qemu q;
  REQUIRE(q.start("tcg", "stay-up"));
  INFO("output: " << q.output());
  REQUIRE(q.wait_output("guest ready", 60s));
  const std::size_t ready = q.output().size();
  q.send("ping\r");
  REQUIRE(q.wait_output("ping\r\npong\r\n", 30s, ready));
  q.send("hello there\r");
  REQUIRE(q.wait_output("hello there\r\n", 30s, ready));
  q.send("ab\x7f" "c\n");  // a backspace is echoed and edits the line
  REQUIRE(q.wait_output("ab\x7f" "c\r\n", 30s, ready));
  q.send("poweroff\r");
  auto st = q.wait_exit(60s);
  REQUIRE(st.has_value());
  CHECK(st->success());
  CHECK(q.output().find("guest: powering off", ready) != std::string::npos);
}

TEST_CASE("PVH guest prints a heartbeat while idle") {
  if (!have_qemu()) return;
  Qemu q;
  REQUIRE(q.start("tcg", "stay-up"));
  INFO("output: " << q.output());
  CHECK(q.wait_output("heartbeat 1\r\n", 60s));
}

TEST_CASE("PVH guest panic reaches QEMU's pvpanic (ISA port 0x505 and the PCI device CH uses)") {
  if (!have_qemu()) return;
  for (const char* dev : {"pvpanic", "pvpanic-pci"}) {
    CAPTURE(dev);
    Qemu q;
    REQUIRE(q.start("tcg", "panic", {"-device", dev, "-action", "panic=exit-failure"}));
    auto st = q.wait_exit(60s);
    INFO("output: " << q.output());
    REQUIRE(st.has_value());
    // panic=exit-failure: QEMU exits 1 only when the guest-panicked event fired.
    CHECK(st->exited);
    CHECK(st->code == 1);
    CHECK(q.output().find("guest: panicking (pvpanic)") != std::string::npos);
  }
}

TEST_CASE("PVH guest reboot resets the machine") {
  if (!have_qemu()) return;
  Qemu q;
  REQUIRE(q.start("tcg", "reboot"));
  INFO("output: " << q.output());
  // The command line says reboot again after each reset: the banner comes back.
  REQUIRE(q.wait_output("guest: rebooting", 60s));
  const auto first = q.output().find(kBanner);
  REQUIRE(first != std::string::npos);
  CHECK(q.wait_output(kBanner, 60s, first + 1));
  CHECK(q.output().find("still running") == std::string::npos);
}

TEST_CASE("PVH guest under QEMU with KVM") {
  if (!have_qemu()) return;
  if (::access("/dev/kvm", R_OK | W_OK) != 0) {
    chl::test::skip("/dev/kvm is not accessible; the TCG cases cover the guest");
    return;
  }
  Qemu q;
  REQUIRE(q.start("kvm", "hello poweroff"));
  auto st = q.wait_exit(120s);
  if (!st) {
    // The nested KVM here (kvm_pvm) can be very slow to start a VM under load.
    chl::test::skip("QEMU/KVM did not finish within 120 s (nested KVM); output so far: " + q.output());
    return;
  }
  INFO("output: " << q.output());
  if (!st->success() && q.output().find(kBanner) == std::string::npos) {
    chl::test::skip("QEMU could not run a KVM guest here: " + q.output());
    return;
  }
  CHECK(st->success());
  CHECK(q.output().find("cmdline: hello poweroff\r\n") != std::string::npos);
  CHECK(q.output().find("guest: powering off") != std::string::npos);
}

TEST_CASE("PVH guest powers off on the ACPI power button (QEMU system_powerdown)") {
  if (!have_qemu()) return;
  chl::test::TempDir dir("chl-pvh-pwrbtn");
  const fs::path qmp = dir / "qmp.sock";
  Qemu q;
  REQUIRE(q.start("tcg", "stay-up", {"-qmp", "unix:" + qmp.string() + ",server=on,wait=off"}));
  INFO("output: " << q.output());
  REQUIRE(q.wait_output("guest ready", 60s));
  REQUIRE(qmp_command(qmp, "system_powerdown"));
  auto st = q.wait_exit(60s);
  REQUIRE(st.has_value());
  CHECK(st->success());
  CHECK(q.output().find("guest: ACPI power button: powering off\r\n") != std::string::npos);
  CHECK(q.output().find("guest: powering off") != std::string::npos);
  CHECK(q.output().find("still running") == std::string::npos);
}

TEST_CASE("PVH guest with ignore-acpi keeps running after the power button") {
  if (!have_qemu()) return;
  chl::test::TempDir dir("chl-pvh-pwrbtn");
  const fs::path qmp = dir / "qmp.sock";
  Qemu q;
  REQUIRE(q.start("tcg", "stay-up ignore-acpi", {"-qmp", "unix:" + qmp.string() + ",server=on,wait=off"}));
  INFO("output: " << q.output());
  REQUIRE(q.wait_output("guest ready", 60s));
  const std::size_t ready = q.output().size();
  REQUIRE(qmp_command(qmp, "system_powerdown"));
  // The guest saw the press (it says so) and goes on echoing.
  REQUIRE(q.wait_output("guest: ignoring the power button\r\n", 30s, ready));
  q.send("still here\r");
  REQUIRE(q.wait_output("still here\r\n", 30s, ready));
  CHECK(q.output().find("ACPI power button: powering off") == std::string::npos);
  q.send("poweroff\r");
  auto st = q.wait_exit(60s);
  REQUIRE(st.has_value());
  CHECK(st->success());
  CHECK(q.output().find("guest: powering off", ready) != std::string::npos);
}

namespace {

// An SSDT holding only `OperationRegion (GDST, SystemMemory, <address>, 1)`, the AML Cloud
// Hypervisor's DSDT declares for its GED notification register (QWordPrefix: above 4 GiB).
std::string gdst_ssdt(std::uint64_t address) {
  std::string aml = std::string("\x5b\x80GDST\x00\x0e", 8);
  for (int i = 0; i < 8; ++i) aml.push_back(static_cast<char>((address >> (8 * i)) & 0xff));
  aml.push_back('\x01');  // length: OneOp
  std::string t = "SSDT";
  const auto len = static_cast<std::uint32_t>(36 + aml.size());
  for (int i = 0; i < 4; ++i) t.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  t += std::string("\x02\x00", 2) + "CHLTSTGEDTEST " + std::string("\x01\x00\x00\x00", 4) + "CHL " +
       std::string("\x01\x00\x00\x00", 4);
  t += aml;
  unsigned sum = 0;
  for (char c : t) sum += static_cast<unsigned char>(c);
  t[9] = static_cast<char>((0x100 - (sum & 0xff)) & 0xff);
  return t;
}

// QEMU arguments giving the guest a Cloud-Hypervisor-like GED register: a 2 MiB RAM DIMM at
// `dimm` (above 4 GiB), the SSDT naming `reg` inside it, and, when `pressed`, the power-button
// bit (0x08) already set there. (RAM, so the read does not clear it as CH's register does.)
std::vector<std::string> ged_args(const fs::path& ssdt, std::uint64_t dimm, std::uint64_t reg, bool pressed,
                                  const std::string& maxmem) {
  char dimm_hex[32], reg_hex[32];
  std::snprintf(dimm_hex, sizeof dimm_hex, "0x%llx", static_cast<unsigned long long>(dimm));
  std::snprintf(reg_hex, sizeof reg_hex, "0x%llx", static_cast<unsigned long long>(reg));
  chl::test::write_file(ssdt, gdst_ssdt(reg));
  std::vector<std::string> a = {"-m", "64M,slots=1,maxmem=" + maxmem, "-object", "memory-backend-ram,id=ged,size=2M",
                                "-device", std::string("pc-dimm,id=d0,memdev=ged,addr=") + dimm_hex,
                                "-acpitable", "file=" + ssdt.string()};
  if (pressed) {
    a.push_back("-device");
    a.push_back(std::string("loader,addr=") + reg_hex + ",data=0x08,data-len=1");
  }
  return a;
}

}  // namespace

// Cloud Hypervisor puts its GED register at the top of the guest physical address space (near
// 2^phys_bits), out of reach of the guest's unpaged 32-bit code: the guest turns on paging to
// poll it. No CH here, so QEMU plays the part with RAM where CH has the register.
TEST_CASE("PVH guest polls a GED register above 4 GiB (as Cloud Hypervisor places it) and powers off on its bit") {
  if (!have_qemu()) return;
  struct Case {
    const char* what;
    std::string accel;
    std::vector<std::string> cpu;
    std::uint64_t dimm, reg;
    std::string maxmem;
  };
  std::vector<Case> cases = {
      {"just above 4 GiB, last bytes of a 2 MiB frame", "tcg", {}, 0x100000000ULL, 0x1001ffff8ULL, "1G"},
      {"above 2^40 (phys-bits 46, as on CH's hosts)", "tcg", {"-cpu", "max,phys-bits=46"}, 0x10000e00000ULL,
       0x10000fffff8ULL, "1000G"},
      {"near the top of a 46-bit space (62 TiB; CH's is just below 64 TiB)", "tcg", {"-cpu", "max,phys-bits=46"},
       0x3e0000e00000ULL, 0x3e0000fefff8ULL, "62T"},
  };
  if (::access("/dev/kvm", R_OK | W_OK) == 0)
    cases.push_back({"just above 4 GiB, under KVM", "kvm", {}, 0x100000000ULL, 0x1001ffff8ULL, "1G"});
  for (const auto& c : cases) {
    CAPTURE(c.what);
    chl::test::TempDir dir("chl-pvh-ged");
    auto args = ged_args(dir / "ssdt.aml", c.dimm, c.reg, true, c.maxmem);
    args.insert(args.end(), c.cpu.begin(), c.cpu.end());
    Qemu q;
    REQUIRE(q.start(c.accel, "stay-up", args));
    auto st = q.wait_exit(c.accel == "kvm" ? 120s : 60s);
    INFO("output: " << q.output());
    if (c.accel == "kvm" && (!st || (!st->success() && q.output().find(kBanner) == std::string::npos))) {
      chl::test::skip_part(st ? "QEMU could not run a KVM guest here: " + q.output()
                              : std::string("QEMU/KVM did not finish within 120 s (nested KVM)"));
      continue;
    }
    REQUIRE(st.has_value());
    CHECK(st->success());
    char reg_hex[32];
    std::snprintf(reg_hex, sizeof reg_hex, "%016llx", static_cast<unsigned long long>(c.reg));
    CHECK(q.output().find(std::string("Cloud Hypervisor GED register at 0x") + reg_hex + "\r\n") != std::string::npos);
    const auto pressed = q.output().find("guest: ACPI power button: powering off\r\n");
    REQUIRE(pressed != std::string::npos);
    CHECK(q.output().find("guest ready") < pressed);
    CHECK(q.output().find("guest: powering off") != std::string::npos);
    CHECK(q.output().find("still running") == std::string::npos);
  }
}

TEST_CASE("PVH guest with a GED register above 4 GiB and no press keeps running and obeys typed commands") {
  if (!have_qemu()) return;
  chl::test::TempDir dir("chl-pvh-ged");
  Qemu q;
  REQUIRE(q.start("tcg", "stay-up", ged_args(dir / "ssdt.aml", 0x100000000ULL, 0x100001000ULL, false, "1G")));
  INFO("output: " << q.output());
  REQUIRE(q.wait_output("guest ready", 60s));
  CHECK(q.output().find("GED register at 0x0000000100001000") != std::string::npos);
  const std::size_t ready = q.output().size();
  // Paging is on now: the console, the heartbeat and the QEMU power-off ports still work.
  q.send("ping\r");
  REQUIRE(q.wait_output("ping\r\npong\r\n", 30s, ready));
  REQUIRE(q.wait_output("heartbeat 1\r\n", 60s));
  CHECK(q.output().find("ACPI power button: powering off") == std::string::npos);
  q.send("poweroff\r");
  auto st = q.wait_exit(60s);
  REQUIRE(st.has_value());
  CHECK(st->success());
}
