#include "vmi/parser.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <limits>
#include <sstream>

#include "common/log.hpp"
#include "common/syscall.hpp"
#include "common/unique_fd.hpp"
#include "vmi/parse_support.hpp"
#include "vmi/quantity.hpp"

namespace chl::vmi {
namespace {

void parse_metadata(Reader& r, const YAML::Node& n, ObjectMeta& m) {
  const std::string p = "metadata";
  if (!r.expect_map(n, p)) return;
  r.unknown_keys(
      n, p,
      {"name", "namespace", "uid", "labels", "annotations", "generateName", "creationTimestamp",
       "resourceVersion", "generation", "finalizers", "ownerReferences", "managedFields",
       "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"});
  m.name = r.str(n, "name", p).value_or("");
  m.namespace_ = r.str(n, "namespace", p).value_or("default");
  if (m.namespace_.empty()) m.namespace_ = "default";
  m.uid = r.str(n, "uid", p).value_or("");
  r.string_map(n, "labels", p, m.labels);
  r.string_map(n, "annotations", p, m.annotations);
}

// One spec.accessCredentials[i]: sshPublicKey or userPassword, each {source: {secret:
// {secretName}}, propagationMethod: {...}} (KubeVirt's api/core/v1 AccessCredential).
void parse_access_credential(Reader& r, const YAML::Node& n, const std::string& p,
                             AccessCredential& c) {
  r.unknown_keys(n, p, {"sshPublicKey", "userPassword"});
  for (const char* type : {"sshPublicKey", "userPassword"}) {
    bool present = false;
    YAML::Node t = r.object(n, type, p, present);
    if (!present) continue;
    const bool ssh = std::string_view(type) == "sshPublicKey";
    (ssh ? c.ssh_public_key : c.user_password) = true;
    const std::string tp = p + "." + type;
    r.unknown_keys(t, tp, {"source", "propagationMethod"});
    bool has_source = false;
    YAML::Node src = r.object(t, "source", tp, has_source);
    if (has_source) {
      r.unknown_keys(src, tp + ".source", {"secret"});
      YAML::Node secret = r.object(src, "secret", tp + ".source", c.has_secret);
      if (c.has_secret)
        c.secret_name = r.str(secret, "secretName", tp + ".source.secret").value_or("");
    }
    bool has_method = false;
    const std::string mp = tp + ".propagationMethod";
    YAML::Node m = r.object(t, "propagationMethod", tp, has_method);
    if (!has_method) continue;
    r.unknown_keys(m, mp, {"qemuGuestAgent", "noCloud", "configDrive"});
    YAML::Node qga = r.object(m, "qemuGuestAgent", mp, c.qemu_guest_agent);
    bool nc = false, cd = false;
    (void)r.object(m, "noCloud", mp, nc);
    (void)r.object(m, "configDrive", mp, cd);
    c.no_cloud = c.no_cloud || nc;
    c.config_drive = c.config_drive || cd;
    if (!c.qemu_guest_agent || !ssh) continue;
    YAML::Node users = Reader::child(qga, "users");
    const std::string up = mp + ".qemuGuestAgent.users";
    if (users.IsDefined() && r.expect_list(users, up)) {
      for (std::size_t i = 0; i < users.size(); ++i) {
        if (!users[i].IsScalar()) {
          r.problem(Reader::index(up, i), "expected a string, got " + describe(users[i]), users[i]);
          continue;
        }
        c.users.push_back(users[i].Scalar());
      }
    }
  }
}

void parse_spec(Reader& r, const YAML::Node& n, VmiSpec& s) {
  const std::string p = "spec";
  r.unknown_keys(n, p,
                 {"domain",
                  "volumes",
                  "networks",
                  "hypervisor",
                  "architecture",
                  "hostname",
                  "subdomain",
                  "terminationGracePeriodSeconds",
                  "nodeSelector",
                  "affinity",
                  "tolerations",
                  "evictionStrategy",
                  "accessCredentials",
                  "readinessProbe",
                  "livenessProbe",
                  "dnsPolicy",
                  "dnsConfig",
                  "priorityClassName",
                  "schedulerName",
                  "startStrategy",
                  "topologySpreadConstraints",
                  "resourceClaims"});
  bool present = false;
  YAML::Node d = r.object(n, "domain", p, present);
  if (present) {
    s.has_domain = true;
    parse_domain(r, d, s.domain);
  }
  YAML::Node vols = Reader::child(n, "volumes");
  if (vols.IsDefined() && r.expect_list(vols, p + ".volumes")) {
    for (std::size_t i = 0; i < vols.size(); ++i) {
      const std::string vp = Reader::index(p + ".volumes", i);
      Volume v;
      if (r.expect_map(vols[i], vp)) parse_volume(r, vols[i], vp, v);
      s.volumes.push_back(std::move(v));
    }
  }
  YAML::Node nets = Reader::child(n, "networks");
  if (nets.IsDefined() && r.expect_list(nets, p + ".networks")) {
    for (std::size_t i = 0; i < nets.size(); ++i) {
      const std::string np = Reader::index(p + ".networks", i);
      Network net;
      if (r.expect_map(nets[i], np)) parse_network(r, nets[i], np, net);
      s.networks.push_back(std::move(net));
    }
  }
  YAML::Node claims = Reader::child(n, "resourceClaims");
  if (claims.IsDefined() && r.expect_list(claims, p + ".resourceClaims")) {
    for (std::size_t i = 0; i < claims.size(); ++i) {
      const std::string cp = Reader::index(p + ".resourceClaims", i);
      if (!r.expect_map(claims[i], cp)) continue;
      s.resource_claims.push_back(r.str(claims[i], "name", cp).value_or(""));
    }
  }
  YAML::Node creds = Reader::child(n, "accessCredentials");
  if (creds.IsDefined() && r.expect_list(creds, p + ".accessCredentials")) {
    for (std::size_t i = 0; i < creds.size(); ++i) {
      const std::string cp = Reader::index(p + ".accessCredentials", i);
      AccessCredential c;
      if (r.expect_map(creds[i], cp)) parse_access_credential(r, creds[i], cp, c);
      s.access_credentials.push_back(std::move(c));
    }
  }
  s.hypervisor = r.str(n, "hypervisor", p).value_or("");
  s.architecture = r.str(n, "architecture", p).value_or("");
  s.hostname = r.str(n, "hostname", p).value_or("");
  s.subdomain = r.str(n, "subdomain", p).value_or("");
  s.termination_grace_period_seconds =
      r.integer(n, "terminationGracePeriodSeconds", p, std::numeric_limits<std::int64_t>::min() / 2,
                std::numeric_limits<std::int64_t>::max() / 2);
}

constexpr std::array<std::string_view, 2> kApiVersions{"kubevirt.io/v1", "kubevirt.io/v1alpha3"};

// Counts documents without building nodes.
class DocumentCounter final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// yaml-cpp 0.7 (bookworm) loops forever in LoadAll(), adding a null document per turn until
// memory runs out, on some malformed input such as `{k},` (jbeder/yaml-cpp#1040, fixed
// upstream by #1319). Walk the documents first with a bound: a stream of n bytes holds at most
// n + 1 documents. Throws what LoadAll would throw on a syntax error.
bool document_count_bounded(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  for (std::size_t docs = 0; docs <= text.size() + 1; ++docs) {
    if (!parser.HandleNextDocument(counter)) return true;
  }
  return false;
}

}  // namespace

ParseOutcome parse_vmi(std::string_view text) {
  ParseOutcome out;
  std::vector<YAML::Node> docs;
  try {
    const std::string copy(text);
    if (!document_count_bounded(copy)) {
      out.fatal = true;
      out.problems.push_back({"", "not valid YAML or JSON: the YAML parser makes no progress"});
      return out;
    }
    docs = YAML::LoadAll(copy);
  } catch (const YAML::ParserException& e) {
    out.fatal = true;
    out.problems.push_back({"", "not valid YAML or JSON: line " + std::to_string(e.mark.line + 1) +
                                    ", column " + std::to_string(e.mark.column + 1) + ": " +
                                    e.msg});
    return out;
  } catch (const YAML::Exception& e) {
    out.fatal = true;
    out.problems.push_back({"", std::string("not valid YAML or JSON: ") + e.what()});
    return out;
  }
  // The first VirtualMachineInstance; else the first document, to report its kind.
  const YAML::Node* doc = nullptr;
  for (const auto& d : docs) {
    if (d.IsMap() && d["kind"].IsDefined() && d["kind"].IsScalar() &&
        d["kind"].Scalar() == "VirtualMachineInstance") {
      doc = &d;
      break;
    }
  }
  if (!doc) {
    for (const auto& d : docs) {
      if (!d.IsNull()) {
        doc = &d;
        break;
      }
    }
  }
  if (!doc) {
    out.fatal = true;
    out.problems.push_back(
        {"", "empty document: expected a kubevirt.io/v1 VirtualMachineInstance"});
    return out;
  }
  Reader r(out.problems);
  if (!doc->IsMap()) {
    out.fatal = true;
    r.problem("", "expected a VirtualMachineInstance object, got " + describe(*doc), *doc);
    return out;
  }
  const YAML::Node& root = *doc;
  try {
    Vmi& vmi = out.vmi;
    vmi.kind = r.str(root, "kind", "").value_or("");
    vmi.api_version = r.str(root, "apiVersion", "").value_or("");
    if (vmi.kind != "VirtualMachineInstance") {
      out.fatal = true;
      std::string msg = vmi.kind.empty() ? "missing; expected VirtualMachineInstance"
                                         : "expected VirtualMachineInstance, got " + vmi.kind;
      if (vmi.kind == "VirtualMachine") msg += " (use the VMI in its spec.template)";
      r.problem("kind", msg, root["kind"].IsDefined() ? root["kind"] : root);
    }
    if (std::find(kApiVersions.begin(), kApiVersions.end(), vmi.api_version) ==
        kApiVersions.end()) {
      out.fatal = true;
      r.problem(
          "apiVersion",
          (vmi.api_version.empty() ? std::string("missing") : "unsupported " + vmi.api_version) +
              "; expected kubevirt.io/v1",
          root["apiVersion"].IsDefined() ? root["apiVersion"] : root);
    }
    if (out.fatal) return out;
    r.unknown_keys(root, "", {"apiVersion", "kind", "metadata", "spec", "status"});
    YAML::Node md = Reader::child(root, "metadata");
    if (md.IsDefined())
      parse_metadata(r, md, vmi.metadata);
    else
      vmi.metadata.namespace_ = "default";
    YAML::Node spec = Reader::child(root, "spec");
    if (!spec.IsDefined()) {
      r.problem("spec", "missing; a VirtualMachineInstance needs spec.domain", root);
    } else if (r.expect_map(spec, "spec")) {
      parse_spec(r, spec, vmi.spec);
    }
  } catch (const YAML::Exception& e) {
    // yaml-cpp throws on a few malformed shapes (e.g. keys that are not scalars).
    out.problems.push_back({"", std::string("malformed manifest: ") + e.what()});
  }
  return out;
}

common::Result<std::string> read_manifest(const std::string& path) {
  int fd = 0;
  common::UniqueFd owned;
  if (path != "-") {
    owned = common::UniqueFd(
        common::retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); }));
    if (!owned) return common::fail_errno("reading " + path);
    fd = owned.get();
  }
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = common::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (n < 0) return common::fail_errno("reading " + path);
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
    if (data.size() > (16u << 20)) {
      return common::fail(std::errc::file_too_large, "reading " + path + ": larger than 16 MiB");
    }
  }
  return data;
}

}  // namespace chl::vmi
