// The QEMU/KVM path is a module (drivers/libvirt/module.hpp): ch-launcher itself links no
// libvirt, loads libchl-libvirt.so (RTLD_NOW) only for a qemu-kvm VMI, and says clearly when the
// module is missing or broken. Lane unit: nothing here needs QEMU, libvirtd or root.
#include <cstdlib>

#include "tests/support/launcher_harness.hpp"
#include "tests/support/module_test_support.hpp"

using chl::test::LauncherRun;
using chl::test::ldd;
using chl::test::ScopedEnv;
namespace fs = std::filesystem;

namespace {

fs::path module_path() { return chl::test::built_module("libchl-libvirt.so"); }

struct QemuModuleRun : LauncherRun {
  QemuModuleRun() {
    hypervisor = "qemu-kvm";
    write_vmi("console=ttyS0");
  }
  // Run to its exit (these runs all fail before starting anything).
  chl::common::ExitStatus run_to_exit(const std::vector<std::string>& extra = {}) {
    start(extra);
    auto exit = wait_exit();
    REQUIRE_MESSAGE(exit, "the launcher did not exit; output:\n" << output());
    return *exit;
  }
};

}  // namespace

TEST_CASE("ch-launcher links no libvirt, the module next to it does") {
  auto launcher = ldd(chl::test::launcher_binary());
  if (!launcher) return;
  CHECK_MESSAGE(launcher->find("libvirt") == std::string::npos, "ch-launcher links:\n" << *launcher);
  REQUIRE_MESSAGE(fs::exists(module_path()), "no " << module_path() << " (target chl_libvirt_module)");
  auto module = ldd(module_path());
  REQUIRE(module);
  CHECK_MESSAGE(module->find("libvirt.so.0") != std::string::npos, "libchl-libvirt.so links:\n" << *module);
  // The module takes the launcher's own code from the executable (one logger, one of
  // everything): it must not carry a copy of it.
  CHECK_MESSAGE(module->find("libchl") == std::string::npos, *module);
}

TEST_CASE("qemu-kvm with CHL_LIBVIRT_MODULE naming a missing file: exit 1, says what to do, leaves nothing") {
  QemuModuleRun r;
  auto missing = r.dir.path() / "nowhere" / "libchl-libvirt.so";
  ScopedEnv env("CHL_LIBVIRT_MODULE", missing.string());
  auto exit = r.run_to_exit();
  CHECK(exit.exited);
  CHECK_MESSAGE(exit.code == 1, exit.describe() << "\n" << r.output());
  const std::string want = "qemu-kvm support is not installed: libchl-libvirt.so not found at " + missing.string();
  CHECK_MESSAGE(r.output().find(want) != std::string::npos, r.output());
  CHECK_MESSAGE(r.output().find("CHL_LIBVIRT_MODULE") != std::string::npos, r.output());
  // Loaded before anything is created: no state directory at all.
  CHECK_MESSAGE(!fs::exists(r.state_dir()), r.state_dir() << " was created");
}

TEST_CASE("qemu-kvm with a module that is not a shared library: exit 1 with dlopen's reason") {
  QemuModuleRun r;
  auto broken = r.dir.path() / "libchl-libvirt.so";
  chl::test::write_file(broken, "not an ELF file\n");
  ScopedEnv env("CHL_LIBVIRT_MODULE", r.dir.path().string());  // a directory holding the module works too
  auto exit = r.run_to_exit();
  CHECK_MESSAGE(exit.code == 1, exit.describe() << "\n" << r.output());
  CHECK_MESSAGE(r.output().find("qemu-kvm support is broken: loading " + broken.string() + ": ") != std::string::npos,
                r.output());
  CHECK_MESSAGE(!fs::exists(r.state_dir()), r.state_dir() << " was created");
}

TEST_CASE("qemu-kvm loads the module beside the launcher with every symbol bound (RTLD_NOW)") {
  QemuModuleRun r;
  ::unsetenv("CHL_LIBVIRT_MODULE");
  // A QEMU binary that does not exist stops the run after the module is loaded, before any
  // libvirt daemon is looked for.
  auto exit = r.run_to_exit({"--vmm-binary", (r.dir.path() / "no-such-qemu").string()});
  CHECK_MESSAGE(exit.code == 1, exit.describe() << "\n" << r.output());
  CHECK_MESSAGE(r.output().find("qemu-kvm support: loaded " + module_path().string()) != std::string::npos,
                r.output());
  CHECK_MESSAGE(r.output().find("no QEMU binary") != std::string::npos, r.output());
  CHECK_MESSAGE(r.output().find("qemu-kvm support is") == std::string::npos, r.output());
}

TEST_CASE("render --hypervisor qemu-kvm needs no module") {
  QemuModuleRun r;
  ScopedEnv env("CHL_LIBVIRT_MODULE", (r.dir.path() / "none.so").string());
  auto out = chl::test::run_command({chl::test::launcher_binary(), "render", "--vmi", r.vmi_file().string(),
                                     "--volume", "kernel-boot=" + (r.dir.path() / "kernel").string(),
                                     "--hypervisor", "qemu-kvm", "--state-dir", r.state_dir().string()});
  CHECK_MESSAGE(out.exit_code == 0, out.output);
  CHECK_MESSAGE(out.output.find("<domain type=") != std::string::npos, out.output);
}
