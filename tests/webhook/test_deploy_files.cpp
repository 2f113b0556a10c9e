// deploy/webhook/ and scripts/webhook-cert.sh: the certificate's names are the Service's, the
// filled MutatingWebhookConfiguration carries the CA, the manifests pass the schema check
// (scripts/check-k8s-manifests.py over Debian's python3-kubernetes models), and the chl-webhook
// binary started as the Deployment starts it answers curl, which verifies it with that CA.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <csignal>

#include "common/child_process.hpp"
#include "tests/webhook/webhook_support.hpp"

using namespace chl::test::webhook;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> manifests() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(chl::test::source_dir() / "deploy" / "webhook"))
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A free loopback port (bound, read, released).
unsigned short free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_CASE(
    "the webhook's manifests and the script's output pass the schema check, and the check catches "
    "errors") {
  const char* python = "/usr/bin/python3";  // Debian's, where python3-kubernetes is installed
  const std::string check =
      (chl::test::source_dir() / "scripts" / "check-k8s-manifests.py").string();
  auto probe = chl::test::run_command({python, "-c", "import kubernetes.client, yaml"});
  if (probe.exit_code != 0) {
    chl::test::skip(
        "Debian's python3-kubernetes is not installed (scripts/setup.sh installs it): " +
        probe.output);
    return;
  }
  std::vector<std::string> argv = {python, check};
  for (const auto& m : manifests()) argv.push_back(m);
  REQUIRE(argv.size() == 2 + 5);
  chl::test::TempDir dir("chlhook");
  if (chl::test::tool("openssl")) {
    auto cert = chl::test::run_command(
        {"bash", (chl::test::source_dir() / "scripts" / "webhook-cert.sh").string(),
         dir.path().string()});
    REQUIRE_MESSAGE(cert.exit_code == 0, cert.output);
    argv.push_back((dir / "secret.yaml").string());
    argv.push_back((dir / "mutatingwebhookconfiguration.yaml").string());
  } else {
    chl::test::skip_part("openssl is not installed: the script's Secret is not checked");
  }
  auto r = chl::test::run_command(argv);
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  CHECK(r.output.find("objects valid") != std::string::npos);
  // The check is not a rubber stamp: a misspelt field, a wrong type, a bad enum, a missing field.
  chl::test::write_file(
      dir / "bad.yaml",
      "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n"
      "metadata: {name: x}\nwebhooks:\n- name: a.b.c\n  admissionReviewVersions: [v1]\n"
      "  clientConfig: {service: {name: s, namespace: n, port: \"443\"}}\n"
      "  sideEffects: Some\n  timeoutSecond: 5\n---\n"
      "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
      "spec: {template: {spec: {containers: [{name: c, image: i}]}}}\n");
  auto bad = chl::test::run_command({python, check, (dir / "bad.yaml").string()});
  CHECK(bad.exit_code == 1);
  for (const char* want : {"port: int expected", "sideEffects: 'Some' is not one of",
                           "timeoutSecond: no such field", "`selector`, must not be `None`"})
    CHECK_MESSAGE(bad.output.find(want) != std::string::npos, bad.output);
}

TEST_CASE(
    "webhook-cert.sh makes a serving certificate for the Service's names and fills the caBundle") {
  if (!chl::test::tool("openssl")) {
    chl::test::skip("openssl is not installed");
    return;
  }
  chl::test::TempDir dir("chlhook");
  auto r = chl::test::run_command(
      {"bash", (chl::test::source_dir() / "scripts" / "webhook-cert.sh").string(),
       dir.path().string(), "--namespace", "virt-ch", "--service", "hook"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  auto text = chl::test::run_command(
      {"openssl", "x509", "-in", (dir / "tls.crt").string(), "-noout", "-text"});
  REQUIRE(text.exit_code == 0);
  for (const char* san : {"DNS:hook.virt-ch.svc", "DNS:hook.virt-ch.svc.cluster.local",
                          "TLS Web Server Authentication"})
    CHECK_MESSAGE(text.output.find(san) != std::string::npos, text.output);
  auto verify = chl::test::run_command(
      {"openssl", "verify", "-CAfile", (dir / "ca.crt").string(), (dir / "tls.crt").string()});
  CHECK_MESSAGE(verify.exit_code == 0, verify.output);
  const std::string config = chl::test::read_file(dir / "mutatingwebhookconfiguration.yaml");
  auto b64 = chl::test::run_command({"base64", "-w0", (dir / "ca.crt").string()});
  CHECK(config.find("caBundle: " + b64.output) != std::string::npos);
  CHECK(config.find("namespace: virt-ch") != std::string::npos);
  CHECK(config.find("caBundle: \"\"") == std::string::npos);
  const std::string secret = chl::test::read_file(dir / "secret.yaml");
  CHECK(secret.find("namespace: virt-ch") != std::string::npos);
  CHECK(secret.find("type: kubernetes.io/tls") != std::string::npos);
  CHECK((fs::status(dir / "ca.key").permissions() & fs::perms::others_read) == fs::perms::none);
}

TEST_CASE(
    "chl-webhook, started as the Deployment starts it, answers curl over verified TLS and stops on "
    "SIGTERM") {
  if (!chl::test::tool("openssl") || !chl::test::tool("curl")) {
    chl::test::skip("openssl or curl is not installed");
    return;
  }
  chl::test::TempDir dir("chlhook");
  auto cert = chl::test::run_command(
      {"bash", (chl::test::source_dir() / "scripts" / "webhook-cert.sh").string(),
       dir.path().string()});
  REQUIRE_MESSAGE(cert.exit_code == 0, cert.output);
  const auto port = std::to_string(free_port());
  const std::string binary = (chl::test::binary_dir() / "bin" / "chl-webhook").string();
  // Bad flags: a usage error naming the flag, exit 2.
  auto usage = chl::test::run_command(
      {binary, "--cert", (dir / "tls.crt").string(), "--key", (dir / "tls.key").string()});
  CHECK(usage.exit_code == 2);
  CHECK(usage.output.find("--bundle-image is required") != std::string::npos);
  auto no_cert = chl::test::run_command({binary, "--cert", (dir / "missing.crt").string(), "--key",
                                         (dir / "tls.key").string(), "--bundle-image", "x",
                                         "--listen", "127.0.0.1:" + port});
  CHECK(no_cert.exit_code == 1);
  CHECK(no_cert.output.find("missing.crt") != std::string::npos);

  const fs::path log = dir / "webhook.log";
  chl::common::UniqueFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  REQUIRE(log_fd.get() >= 0);
  chl::common::SpawnOptions o;
  o.argv = {binary, "--listen=127.0.0.1:" + port, "--cert=" + (dir / "tls.crt").string(),
            "--key=" + (dir / "tls.key").string(), "--bundle-image=" + kConfig.bundle_image};
  o.stderr_fd = log_fd.get();
  auto child = chl::common::ChildProcess::spawn(o);
  REQUIRE_MESSAGE(child.has_value(), child.error().message());
  const std::string url = "https://chl-webhook.chl-webhook.svc:" + port;
  const std::string resolve = "chl-webhook.chl-webhook.svc:" + port + ":127.0.0.1";
  const std::string ca = (dir / "ca.crt").string();
  CHECK(chl::test::wait_until(std::chrono::seconds(20), [&] {
    return chl::test::run_command(
               {"curl", "-sf", "--cacert", ca, "--resolve", resolve, url + "/healthz"})
               .output == "ok";
  }));
  json pod = {
      {"metadata",
       {{"name", "p"}, {"namespace", "default"}, {"labels", {{"kubevirt.io", "virt-launcher"}}}}},
      {"spec",
       {{"containers",
         {{{"name", "compute"},
           {"image", "i"},
           {"command", {"/usr/bin/virt-launcher-monitor"}}}}}}}};
  if (fs::exists(pods_dir() / "vmi-fedora.json")) pod = read_json(pods_dir() / "vmi-fedora.json");
  chl::test::write_file(dir / "review.json", review_of(selected(pod)).dump());
  auto r =
      chl::test::run_command({"curl", "-sS", "--fail-with-body", "--cacert", ca, "--resolve",
                              resolve, "-H", "Content-Type: application/json", "--data-binary",
                              "@" + (dir / "review.json").string(), url + "/mutate?timeout=5s"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const json resp = json::parse(r.output).at("response");
  CHECK(resp.at("allowed") == true);
  CHECK(resp.at("patchType") == "JSONPatch");
  // curl trusting only the system's CAs refuses the webhook's certificate (exit 60).
  auto untrusted = chl::test::run_command({"curl", "-sS", "--resolve", resolve, url + "/healthz"});
  CHECK(untrusted.exit_code == 60);
  REQUIRE(child->signal(SIGTERM).has_value());
  auto st = child->wait_for(std::chrono::seconds(20));
  REQUIRE(st.has_value());
  REQUIRE(st->has_value());
  CHECK((*st)->success());
  // Its log: JSON lines, the patched admission among them.
  const std::string lines = chl::test::read_file(log);
  CHECK(lines.find(R"("component":"chl-webhook")") != std::string::npos);
  CHECK(lines.find("admission patched uid 705ab4f5-6393-11e8-b7cc-42010a800002") !=
        std::string::npos);
}
