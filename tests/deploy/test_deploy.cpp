// The container image (Dockerfile), checked without a Docker engine (none runs on our machines):
// its runtime stage installs exactly the Debian packages whose libraries ch-launcher links, and
// it passes the lint (scripts/check-dockerfile.sh, which stands in for hadolint: Debian has none).
#include <doctest/doctest.h>

#include <set>
#include <sstream>
#include <string>

#include "tests/support/test_support.hpp"

namespace {

using chl::test::run_command;

std::set<std::string> words(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

std::string joined(const std::set<std::string>& s) {
  std::string out;
  for (const auto& w : s) out += (out.empty() ? "" : " ") + w;
  return out;
}

// The packages named between the BEGIN/END runtime-libraries markers of the Dockerfile.
std::set<std::string> dockerfile_runtime_packages(const std::string& dockerfile) {
  auto begin = dockerfile.find("# BEGIN runtime-libraries");
  auto end = dockerfile.find("# END runtime-libraries");
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  std::string block = dockerfile.substr(begin, end - begin);
  auto install = block.find("--no-install-recommends");
  REQUIRE(install != std::string::npos);
  std::string list = block.substr(install + std::string("--no-install-recommends").size());
  list = list.substr(0, list.find("&&"));
  std::set<std::string> out;
  for (const auto& w : words(list))
    if (w != "\\") out.insert(w);
  return out;
}

}  // namespace

TEST_CASE("the image installs exactly the Debian packages of the libraries ch-launcher and its network and KubeVirt modules link") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  chl::test::skip("a sanitizer build links the sanitizer runtimes (libasan, libubsan, libtsan), which the image rightly leaves out");
  return;
#endif
  if (!chl::test::tool("ldd") || !chl::test::tool("dpkg-query")) {
    chl::test::skip("ldd or dpkg-query missing: cannot map the binary's libraries to packages");
    return;
  }
  // ldd of the launcher and of the pod-networking module the image ships beside it
  // (libchl-network.so, loaded for VMIs with interfaces), then the package that owns each
  // library file (resolving /lib → /usr/lib links).
  const auto network_module = std::filesystem::path(chl::test::launcher_binary()).parent_path() / "libchl-network.so";
  REQUIRE_MESSAGE(std::filesystem::exists(network_module), network_module);
  // And KubeVirt's protocol, libchl-kubevirt.so (loaded in virt-launcher mode).
  const auto kubevirt_module = network_module.parent_path() / "libchl-kubevirt.so";
  REQUIRE_MESSAGE(std::filesystem::exists(kubevirt_module), kubevirt_module);
  // And virt-probe (/usr/bin/virt-probe, KubeVirt's exec-probe binary).
  const auto virt_probe = network_module.parent_path() / "virt-probe";
  REQUIRE_MESSAGE(std::filesystem::exists(virt_probe), virt_probe);
  // And chl-webhook (/usr/bin/chl-webhook, the admission webhook of mixed clusters: libssl3).
  const auto webhook = network_module.parent_path() / "chl-webhook";
  REQUIRE_MESSAGE(std::filesystem::exists(webhook), webhook);
  auto r = run_command({"bash", "-c",
                        "set -o pipefail; for f in \"$@\"; do ldd \"$f\"; done | awk '$2 == \"=>\" && $3 ~ /^\\// {print $3}' | "
                        "sort -u | while read -r lib; do dpkg -S \"$(readlink -f \"$lib\")\" 2>/dev/null || dpkg -S \"$lib\"; done | "
                        "cut -d: -f1 | sort -u",
                        "ldd-packages", chl::test::launcher_binary(), network_module.string(),
                        kubevirt_module.string(), virt_probe.string(), webhook.string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  auto linked = words(r.output);
  REQUIRE_FALSE(linked.empty());
  CHECK(linked.count("libc6") == 1);
  auto listed = dockerfile_runtime_packages(chl::test::read_file(chl::test::source_dir() / "Dockerfile"));
  CHECK_MESSAGE(listed == linked, "Dockerfile lists: " << joined(listed) << "\nch-launcher, libchl-network.so, libchl-kubevirt.so, virt-probe and chl-webhook link: " << joined(linked));
}

TEST_CASE("the Dockerfile passes the lint, and the lint catches what it is for") {
  auto lint = (chl::test::source_dir() / "scripts" / "check-dockerfile.sh").string();
  auto r = run_command({"bash", lint, (chl::test::source_dir() / "Dockerfile").string()});
  CHECK_MESSAGE(r.exit_code == 0, r.output);

  chl::test::TempDir dir("chldf");
  chl::test::write_file(dir / "Dockerfile",
                        "FROM debian\n"
                        "ADD x /x\n"
                        "RUN apt-get update && apt-get install foo | tee log\n"
                        "RUN curl -fsSLo vmm https://example.invalid/vmm\n"
                        "ENTRYPOINT ch-launcher\n");
  r = run_command({"bash", lint, (dir / "Dockerfile").string()});
  CHECK(r.exit_code == 1);
  for (const char* rule : {"DL3006", "DL3020", "DL3014", "DL3015", "CHL001", "DL3009", "DL4006", "CHL002", "DL3025",
                           "DL3002"}) {
    CAPTURE(rule);
    CHECK(r.output.find(rule) != std::string::npos);
  }
  r = run_command({"bash", lint, (dir / "missing").string()});
  CHECK(r.exit_code == 2);
}

TEST_CASE("the image downloads only pinned release files and checks every one") {
  auto df = chl::test::read_file(chl::test::source_dir() / "Dockerfile");
  for (const char* pin : {"ARG CH_VERSION=v52.0", "ARG HYPERVISOR_FW_VERSION=", "ARG EDK2_VERSION=", "sha256sum -c",
                          "ENTRYPOINT [\"/usr/bin/ch-launcher\"]", "ARG BASE=debian:bookworm-slim", "FROM ${BASE}", "/usr/share/cloud-hypervisor", "placeholder-vmm.sh"}) {
    const std::string wanted = pin;
    CAPTURE(wanted);
    CHECK(df.find(pin) != std::string::npos);
  }
}
