// The webhook's admission decisions on the pods KubeVirt's own TemplateService renders
// (../shared/reference/kubevirt-launcher-pods/, issue #38): a labelled pod patched exactly as
// /work/helpers' pod contract says (docs/deploy.md, "Mixed clusters"), an unlabelled one left
// alone, a second pass a no-op, a migration target patched the same, and every review we cannot
// serve refused with a message naming what was wrong.
#include <doctest/doctest.h>

#include "tests/webhook/webhook_support.hpp"
#include "webhook/admission.hpp"

using namespace chl::test::webhook;
using chl::webhook::admit;
using chl::webhook::Outcome;

namespace {

const json& container(const json& list, const std::string& name) {
  for (const auto& c : list)
    if (c.value("name", "") == name) return c;
  FAIL("no container " << name);
  static json none;
  return none;
}

// Admit `pod` labelled, check the reply, return the patched pod.
json patched(const json& pod, json* ops_out = nullptr) {
  const auto r = admit(review_of(pod).dump(), kConfig);
  CHECK_MESSAGE(r.outcome == Outcome::patched, r.body);
  const json resp = response_of(r);
  CHECK(resp.at("uid") == "705ab4f5-6393-11e8-b7cc-42010a800002");
  CHECK(resp.at("allowed") == true);
  const json ops = patch_of(resp);
  REQUIRE(!ops.empty());
  if (ops_out != nullptr) *ops_out = ops;
  return pod.patch(ops);
}

}  // namespace

TEST_CASE("every golden launcher pod, labelled, is patched as the pod contract says") {
  const auto pods = golden_pods();
  if (pods.empty()) {
    chl::test::skip("no pods in " + pods_dir().string() +
                    " (the reference is not beside the checkout)");
    return;
  }
  int exec_probes = 0;
  for (const auto& file : pods) {
    CAPTURE(file.filename().string());
    const json pod = selected(read_json(file));
    const json out = patched(pod);
    const json& before = container(pod["spec"]["containers"], "compute");
    const json& after = container(out["spec"]["containers"], "compute");
    // The image virt-controller reads back (lifecycle.go:288-295) and its arguments: untouched.
    CHECK(after.at("image").get<std::string>() == before.at("image").get<std::string>());
    CHECK(after.at("args") == before.at("args"));
    CHECK(after.at("resources") == before.at("resources"));
    CHECK(after.at("securityContext") == before.at("securityContext"));
    CHECK(after.at("command") == json::array({"/opt/ch-launcher/bin/virt-launcher-monitor"}));
    // The bundle: volume, init container after KubeVirt's own, read-only mount, CHL_VMM.
    CHECK(out["spec"]["volumes"].back() ==
          json({{"name", "ch-launcher-bundle"}, {"emptyDir", json::object()}}));
    const json& inits_before = pod["spec"]["initContainers"];
    const json& inits_after = out["spec"]["initContainers"];
    REQUIRE(inits_after.size() == inits_before.size() + 1);
    for (std::size_t i = 0; i < inits_before.size(); ++i) CHECK(inits_after[i] == inits_before[i]);
    const json& init = inits_after.back();
    CHECK(init.at("name") == "ch-launcher-bundle");
    CHECK(init.at("image") == kConfig.bundle_image);
    CHECK(init.at("command") ==
          json::array({"/bin/cp", "-R", "/usr/lib/ch-launcher/bundle/.", "/opt/ch-launcher/"}));
    CHECK(init.at("volumeMounts") ==
          json::array({{{"name", "ch-launcher-bundle"}, {"mountPath", "/opt/ch-launcher"}}}));
    // The same securityContext as KubeVirt's own init containers (the pod's guest-console-log).
    CHECK(init.at("securityContext") ==
          container(inits_before, "guest-console-log").at("securityContext"));
    CHECK(after.at("volumeMounts").back() == json({{"name", "ch-launcher-bundle"},
                                                   {"mountPath", "/opt/ch-launcher"},
                                                   {"readOnly", true}}));
    CHECK(after.at("env").back() == json({{"name", "CHL_VMM"}, {"value", "cloud-hypervisor"}}));
    // Everything else of the compute container is as it was, probes apart.
    json rest_before = before, rest_after = after;
    for (const char* k :
         {"command", "volumeMounts", "env", "readinessProbe", "livenessProbe", "startupProbe"}) {
      rest_before.erase(k);
      rest_after.erase(k);
    }
    CHECK(rest_after == rest_before);
    CHECK(after.at("volumeMounts").size() == before.at("volumeMounts").size() + 1);
    CHECK(after.at("env").size() == before.at("env").size() + 1);
    // The sysctl, and the pod's own securityContext otherwise unchanged.
    const json& sc = out["spec"]["securityContext"];
    CHECK(sc.at("sysctls") ==
          json::array({{{"name", "net.ipv4.ip_unprivileged_port_start"}, {"value", "67"}}}));
    json sc_rest = sc;
    sc_rest.erase("sysctls");
    CHECK(sc_rest == pod["spec"]["securityContext"]);
    // Probes: an exec probe's virt-probe becomes the bundle's, its arguments kept; others
    // unchanged.
    for (const char* probe : {"readinessProbe", "livenessProbe", "startupProbe"}) {
      if (!before.contains(probe)) {
        CHECK(!after.contains(probe));
        continue;
      }
      json expect = before[probe];
      if (expect.contains("exec")) {
        REQUIRE(expect["exec"]["command"][0] == "virt-probe");
        expect["exec"]["command"][0] = "/opt/ch-launcher/bin/virt-probe";
        ++exec_probes;
      }
      CHECK(after[probe] == expect);
    }
    // Nothing else in the pod changed: metadata, other containers, the rest of the spec.
    json pod_rest = pod, out_rest = out;
    for (json* p : {&pod_rest, &out_rest}) {
      (*p)["spec"].erase("containers");
      (*p)["spec"].erase("initContainers");
      (*p)["spec"].erase("volumes");
      (*p)["spec"].erase("securityContext");
    }
    CHECK(out_rest == pod_rest);
    CHECK(out["spec"]["volumes"].size() == pod["spec"]["volumes"].size() + 1);
  }
  // vmi-probe-guestagentping.json: a guestAgentPing readiness and an exec liveness probe.
  CHECK(exec_probes == 2);
}

TEST_CASE("a patched pod passes again unchanged, and a migration target pod is patched the same") {
  const auto pods = golden_pods();
  if (pods.empty()) {
    chl::test::skip("no pods in " + pods_dir().string());
    return;
  }
  for (const auto& file : pods) {
    CAPTURE(file.filename().string());
    const json pod = selected(read_json(file));
    json ops;
    const json out = patched(pod, &ops);
    const auto again = admit(review_of(out, "second-pass").dump(), kConfig);
    CHECK_MESSAGE(again.outcome == Outcome::unchanged, again.body);
    const json resp = response_of(again);
    CHECK(resp.at("allowed") == true);
    CHECK(resp.at("uid") == "second-pass");
    CHECK(!resp.contains("patch"));
    // The target pod of a migration: the same VMI rendered again (RenderMigrationManifest,
    // template.go:324) with the migration's label and annotation (migration.go:962-963) and the
    // anti-affinity to the source node (createMigrationPodAntiAffinityRule).
    json target = pod;
    target["metadata"]["labels"]["kubevirt.io/migrationJobUID"] =
        "8ea1cd48-3c2f-4a34-ae0e-0c6e8a6a7f1a";
    target["metadata"]["annotations"]["kubevirt.io/migrationJobName"] =
        "kubevirt-workload-update-abcde";
    target["spec"]["affinity"]["podAntiAffinity"] = {
        {"requiredDuringSchedulingIgnoredDuringExecution",
         json::array(
             {{{"labelSelector", {{"matchLabels", {{"kubevirt.io/created-by", "c4887da1"}}}}},
               {"topologyKey", "kubernetes.io/hostname"}}})}};
    json target_ops;
    (void)patched(target, &target_ops);
    CHECK(target_ops == ops);
  }
}

TEST_CASE(
    "pods without the label, or not KubeVirt's launcher, are allowed without a patch and without "
    "reading their spec") {
  const auto pods = golden_pods();
  if (pods.empty()) {
    chl::test::skip("no pods in " + pods_dir().string());
    return;
  }
  for (const auto& file : pods) {
    CAPTURE(file.filename().string());
    const json pod = read_json(file);
    const auto r = admit(review_of(pod).dump(), kConfig);
    CHECK(r.outcome == Outcome::unselected);
    const json resp = response_of(r);
    CHECK(resp.at("allowed") == true);
    CHECK(!resp.contains("patch"));
    CHECK(!resp.contains("patchType"));
    // The label on a pod that is not KubeVirt's launcher: not ours either.
    json other = selected(pod);
    other["metadata"]["labels"]["kubevirt.io"] = "hotplug-disk";
    CHECK(admit(review_of(other).dump(), kConfig).outcome == Outcome::unselected);
  }
  // A spec no pod could have: an unselected pod's spec is never looked at.
  const json odd = {{"metadata", {{"name", "x"}, {"labels", {{"app", "web"}}}}},
                    {"spec", "not an object"}};
  CHECK(admit(review_of(odd).dump(), kConfig).outcome == Outcome::unselected);
  const json no_labels = {{"metadata", {{"name", "x"}}}, {"spec", {{"containers", 5}}}};
  CHECK(admit(review_of(no_labels).dump(), kConfig).outcome == Outcome::unselected);
}

TEST_CASE("a selected pod the webhook cannot handle is refused, naming what was wrong") {
  const auto pods = golden_pods();
  if (pods.empty()) {
    chl::test::skip("no pods in " + pods_dir().string());
    return;
  }
  const json pod = selected(read_json(pods_dir() / "vmi-fedora.json"));
  auto compute_index = [&](const json& p) {
    for (std::size_t i = 0; i < p["spec"]["containers"].size(); ++i)
      if (p["spec"]["containers"][i]["name"] == "compute") return i;
    return std::size_t{0};
  };
  struct Case {
    const char* what;
    json pod;
    std::string operation = "CREATE";
    const char* message;
  };
  std::vector<Case> cases;
  {
    json p = pod;
    p["spec"]["containers"][compute_index(p)]["name"] = "vm";
    cases.push_back({"no compute container", p, "CREATE", "no container named 'compute'"});
  }
  {
    json p = pod;
    p["spec"]["containers"][compute_index(p)]["command"] = json::array({"/usr/bin/virt-launcher"});
    cases.push_back({"another command", p, "CREATE",
                     "the compute container's command is [\"/usr/bin/virt-launcher\"]"});
  }
  {
    json p = pod;
    p["spec"]["initContainers"].push_back(
        {{"name", "ch-launcher-bundle"}, {"image", "someone/else"}});
    cases.push_back({"init container name taken", p, "CREATE",
                     "init container name 'ch-launcher-bundle' is already taken"});
  }
  {
    json p = pod;
    p["spec"]["volumes"].push_back({{"name", "ch-launcher-bundle"}, {"emptyDir", json::object()}});
    cases.push_back(
        {"volume name taken", p, "CREATE", "volume name 'ch-launcher-bundle' is already taken"});
  }
  {
    json p = pod;
    p["metadata"]["labels"]["ch-launcher/hypervisor"] = "cloud-hypervsior";
    cases.push_back({"a misspelt value", p, "CREATE",
                     "the label ch-launcher/hypervisor is 'cloud-hypervsior'"});
  }
  {
    json p = pod;
    p["spec"]["securityContext"]["sysctls"] =
        json::array({{{"name", "net.ipv4.ip_unprivileged_port_start"}, {"value", "1024"}}});
    cases.push_back({"a sysctl keeping port 67 privileged", p, "CREATE",
                     "ip_unprivileged_port_start is set to a value above 67"});
  }
  cases.push_back({"an UPDATE", pod, "UPDATE", "only a v1 Pod CREATE is served"});
  for (const auto& c : cases) {
    CAPTURE(c.what);
    const auto r = admit(review_of(c.pod, "uid-refused", c.operation).dump(), kConfig);
    CHECK(r.outcome == Outcome::refused);
    const json resp = response_of(r);
    CHECK(resp.at("uid") == "uid-refused");
    CHECK(resp.at("allowed") == false);
    CHECK(!resp.contains("patch"));
    const std::string message = resp.at("status").at("message").get<std::string>();
    CHECK_MESSAGE(message.find(c.message) != std::string::npos, message);
    CHECK(message.find("ch-launcher webhook: default/virt-launcher-vmi-fedora-") == 0);
  }
  // A sysctl already at 67 or below is kept and not added twice.
  json low = pod;
  low["spec"]["securityContext"]["sysctls"] =
      json::array({{{"name", "net.ipv4.ip_unprivileged_port_start"}, {"value", "0"}}});
  const json out = patched(low);
  CHECK(out["spec"]["securityContext"]["sysctls"].size() == 1);
  CHECK(out["spec"]["securityContext"]["sysctls"][0]["value"] == "0");
  // A pod with no securityContext at all gets one holding the sysctl.
  json bare = pod;
  bare["spec"].erase("securityContext");
  CHECK(patched(bare)["spec"]["securityContext"] ==
        json({{"sysctls", json::array({{{"name", "net.ipv4.ip_unprivileged_port_start"},
                                        {"value", "67"}}})}}));
}

TEST_CASE("malformed and hostile reviews get a clear refusal, never a crash") {
  struct Case {
    const char* what;
    std::string body;
    int status;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"empty", "", 400, "not JSON"},
      {"not JSON", "{\"apiVersion\":", 400, "not JSON"},
      {"an array", "[1,2,3]", 400, "not a JSON object"},
      {"no request", R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"})", 400,
       "no request object"},
      {"no uid",
       R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"object":{}}})",
       400, "no uid"},
      {"a numeric uid",
       R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}})", 400,
       "no uid"},
      {"deep nesting", std::string(100000, '[') + std::string(100000, ']'), 400,
       "nests deeper than 64"},
      {"v1beta1",
       R"({"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u1"}})",
       200, "not an admission.k8s.io/v1 AdmissionReview"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    const auto r = admit(c.body, kConfig);
    CHECK(r.http_status == c.status);
    const json doc = json::parse(r.body);  // always JSON
    const std::string text = doc.dump();
    CHECK_MESSAGE(text.find(c.message) != std::string::npos, text);
    if (c.status == 200) {
      CHECK(doc["response"]["allowed"] == false);
      CHECK(doc["response"]["uid"] == "u1");
    }
  }
  // Labels of the wrong types, a selected pod whose fields are all the wrong type, bytes that are
  // not UTF-8 in what the message quotes: refused, with a reply that is valid JSON.
  const std::string sel =
      R"("labels":{"ch-launcher/hypervisor":"cloud-hypervisor","kubevirt.io":"virt-launcher"})";
  const json hostile_pods[] = {
      json::parse(
          R"({"metadata":{"labels":{"ch-launcher/hypervisor":5,"kubevirt.io":"virt-launcher"}}})"),
      json::parse(R"({"metadata":{)" + sel +
                  R"(},"spec":{"containers":[{"name":"compute","command":[{"a":1}],"env":"x"}]}})"),
      json::parse(
          R"({"metadata":{)" + sel +
          R"(},"spec":{"containers":[{"name":"compute","command":["/usr/bin/virt-launcher-monitor"],"env":"x"}]}})"),
      json::parse(
          R"({"metadata":{)" + sel +
          R"(},"spec":{"containers":[{"name":"compute","command":["/usr/bin/virt-launcher-monitor"]}],"securityContext":3}})"),
      json::parse(R"({"metadata":{)" + sel + R"(},"spec":null})"),
      json::parse(R"({"metadata":{)" + sel + R"(},"spec":{"containers":{"name":"compute"}}})"),
  };
  for (const auto& p : hostile_pods) {
    CAPTURE(p.dump());
    const auto r = admit(review_of(p).dump(), kConfig);
    CHECK(r.outcome == Outcome::refused);
    CHECK(response_of(r).at("allowed") == false);
  }
  std::string bad_utf8 = review_of(hostile_pods[0]).dump();
  const auto at = bad_utf8.find("\"virt-launcher\"");
  REQUIRE(at != std::string::npos);
  bad_utf8.replace(at + 1, 4, "\xff\xfe\x80q");
  const auto r = admit(bad_utf8, kConfig);
  CHECK(r.http_status == 400);  // nlohmann's parser refuses strings that are not UTF-8
  CHECK(!json::parse(r.body, nullptr, false).is_discarded());
}
