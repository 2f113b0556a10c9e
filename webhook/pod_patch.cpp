#include "webhook/pod_patch.hpp"

#include <charconv>
#include <optional>

namespace chl::webhook {
namespace {

using nlohmann::json;

// JSON text; bytes that are not UTF-8 (from the review) become U+FFFD rather than an exception.
std::string text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// obj[key] when obj is an object holding key; else nullptr. Never throws.
const json* member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// The same through a chain: at(at(&pod, "spec"), "containers"); nullptr as soon as one is missing.
const json* at(const json* j, std::string_view key) {
  return j == nullptr ? nullptr : member(*j, key);
}

bool string_is(const json* j, std::string_view want) {
  return j != nullptr && j->is_string() && j->get_ref<const std::string&>() == want;
}

// A list field: absent is empty, present must be an array. nullopt: present and not an array.
std::optional<const json*> list_field(const json& obj, std::string_view key) {
  const json* j = member(obj, key);
  if (j == nullptr || j->is_null()) return static_cast<const json*>(nullptr);
  if (!j->is_array()) return std::nullopt;
  return j;
}

// Index of the entry named `name` in a list of named objects; -1 when none.
long find_named(const json* list, std::string_view name) {
  if (list == nullptr) return -1;
  for (std::size_t i = 0; i < list->size(); ++i)
    if (string_is(member((*list)[i], "name"), name)) return static_cast<long>(i);
  return -1;
}

std::string pointer(std::string_view base, std::size_t index, std::string_view rest = {}) {
  std::string p(base);
  p += '/';
  p += std::to_string(index);
  p += rest;
  return p;
}

// Append `value` to the list at `path` (which `list` is): `add path/-`, or `add path [value]`
// when the list is absent.
void append(json& ops, const std::string& path, const json* list, json value) {
  if (list == nullptr)
    ops.push_back({{"op", "add"}, {"path", path}, {"value", json::array({std::move(value)})}});
  else
    ops.push_back({{"op", "add"}, {"path", path + "/-"}, {"value", std::move(value)}});
}

PodDecision refuse(std::string message) {
  PodDecision d;
  d.verdict = Verdict::refuse;
  d.message = std::move(message);
  return d;
}

json string_array(std::initializer_list<std::string_view> items) {
  json a = json::array();
  for (auto s : items) a.push_back(std::string(s));
  return a;
}

const char* const kProbes[] = {"readinessProbe", "livenessProbe", "startupProbe"};

}  // namespace

bool is_selected(const json& labels) {
  return member(labels, kSelectorLabel) != nullptr &&
         string_is(member(labels, kAppLabel), kAppValue);
}

json bundle_init_container(const PatchConfig& config) {
  // KubeVirt's own init containers' securityContext (template.go: the container-disk and
  // guest-console-log containers, runAsUser 107) and small resources, requests = limits so a
  // Guaranteed (dedicated-CPU) pod stays Guaranteed.
  const json resources = {{"cpu", "100m"}, {"memory", "64Mi"}};
  return {
      {"name", std::string(kBundleName)},
      {"image", config.bundle_image},
      {"imagePullPolicy", "IfNotPresent"},
      {"command", string_array({"/bin/cp", "-R", kBundleSource, std::string(kBundleDir) + "/"})},
      {"volumeMounts",
       json::array({{{"name", std::string(kBundleName)}, {"mountPath", std::string(kBundleDir)}}})},
      {"resources", {{"requests", resources}, {"limits", resources}}},
      {"securityContext",
       {{"runAsUser", 107},
        {"runAsNonRoot", true},
        {"allowPrivilegeEscalation", false},
        {"capabilities", {{"drop", json::array({"ALL"})}}}}},
  };
}

PodDecision decide_pod(const json& pod, const PatchConfig& config) {
  const json* spec = member(pod, "spec");
  if (spec == nullptr || !spec->is_object()) return refuse("the pod has no spec object");
  const auto containers = list_field(*spec, "containers");
  const auto inits = list_field(*spec, "initContainers");
  const auto volumes = list_field(*spec, "volumes");
  if (!containers || !inits || !volumes)
    return refuse("spec.containers, spec.initContainers and spec.volumes must be lists");
  const long ci = find_named(*containers, kComputeName);
  if (ci < 0)
    return refuse("the pod has no container named 'compute' (not a KubeVirt launcher pod)");
  const auto c = static_cast<std::size_t>(ci);
  const json& compute = (**containers)[c];
  const json* command = member(compute, "command");
  const json kubevirt_command = string_array({kKubeVirtCommand});
  const json bundle_command = string_array({kBundleCommand});

  // Ours already (a second pass, or a reinvocation after another webhook): no further change.
  if (const long ii = find_named(*inits, kBundleName); ii >= 0) {
    const json& init = (**inits)[static_cast<std::size_t>(ii)];
    const json* init_command = member(init, "command");
    if (init_command == nullptr || *init_command != bundle_init_container(config)["command"])
      return refuse(
          "the init container name 'ch-launcher-bundle' is already taken by something else");
    if (command == nullptr || *command != bundle_command)
      return refuse("the pod has the bundle's init container but its compute command is " +
                    (command == nullptr ? std::string("absent") : text(*command)) +
                    " (changed after our patch?)");
    PodDecision d;
    d.verdict = Verdict::already_patched;
    return d;
  }
  if (find_named(*containers, kBundleName) >= 0)
    return refuse("the container name 'ch-launcher-bundle' is already taken by something else");
  if (command == nullptr || *command != kubevirt_command)
    return refuse("the compute container's command is " +
                  (command == nullptr ? std::string("absent") : text(*command)) +
                  ", not [\"/usr/bin/virt-launcher-monitor\"] as virt-controller writes it");
  if (find_named(*volumes, kBundleName) >= 0)
    return refuse("the volume name 'ch-launcher-bundle' is already taken by something else");
  const auto mounts = list_field(compute, "volumeMounts");
  const auto env = list_field(compute, "env");
  if (!mounts || !env) return refuse("the compute container's volumeMounts and env must be lists");
  if (*mounts != nullptr) {
    for (const auto& m : **mounts)
      if (string_is(member(m, "mountPath"), kBundleDir))
        return refuse("the compute container already mounts something at /opt/ch-launcher");
  }
  bool env_set = false;
  if (const long ei = find_named(*env, kVmmEnv); ei >= 0) {
    if (!string_is(member((**env)[static_cast<std::size_t>(ei)], "value"), kVmmValue))
      return refuse("the compute container sets CHL_VMM to something other than cloud-hypervisor");
    env_set = true;
  }
  // The pod's sysctl: absent gets added; present must already let port 67 be bound.
  const json* security = member(*spec, "securityContext");
  if (security != nullptr && !security->is_null() && !security->is_object())
    return refuse("spec.securityContext must be an object");
  const json* sysctls = nullptr;
  bool sysctl_set = false;
  if (security != nullptr && security->is_object()) {
    const auto s = list_field(*security, "sysctls");
    if (!s) return refuse("spec.securityContext.sysctls must be a list");
    sysctls = *s;
    if (const long si = find_named(sysctls, kPortSysctl); si >= 0) {
      const json* v = member((*sysctls)[static_cast<std::size_t>(si)], "value");
      int port = -1;
      if (v != nullptr && v->is_string()) {
        const auto& text = v->get_ref<const std::string&>();
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
        if (ec != std::errc() || end != text.data() + text.size()) port = -1;
      }
      if (port < 0 || port > kDhcpPort)
        return refuse(
            "the pod's sysctl net.ipv4.ip_unprivileged_port_start is set to a value above 67: the "
            "launcher's DHCP server could not bind port 67");
      sysctl_set = true;
    }
  }

  PodDecision d;
  d.verdict = Verdict::patch;
  json& ops = d.patch;
  append(ops, "/spec/volumes", *volumes,
         {{"name", std::string(kBundleName)}, {"emptyDir", json::object()}});
  append(ops, "/spec/initContainers", *inits, bundle_init_container(config));
  const std::string cpath = pointer("/spec/containers", c);
  ops.push_back({{"op", "replace"}, {"path", cpath + "/command"}, {"value", bundle_command}});
  append(ops, cpath + "/volumeMounts", *mounts,
         {{"name", std::string(kBundleName)},
          {"mountPath", std::string(kBundleDir)},
          {"readOnly", true}});
  if (!env_set)
    append(ops, cpath + "/env", *env,
           {{"name", std::string(kVmmEnv)}, {"value", std::string(kVmmValue)}});
  for (const char* probe : kProbes) {
    const json* cmd = at(at(at(&compute, probe), "exec"), "command");
    if (cmd != nullptr && cmd->is_array() && !cmd->empty() && string_is(&(*cmd)[0], kKubeVirtProbe))
      ops.push_back({{"op", "replace"},
                     {"path", cpath + "/" + probe + "/exec/command/0"},
                     {"value", std::string(kBundleProbe)}});
  }
  if (!sysctl_set) {
    const json sysctl = {{"name", std::string(kPortSysctl)}, {"value", std::to_string(kDhcpPort)}};
    if (security == nullptr || security->is_null())
      ops.push_back({{"op", "add"},
                     {"path", "/spec/securityContext"},
                     {"value", {{"sysctls", json::array({sysctl})}}}});
    else
      append(ops, "/spec/securityContext/sysctls", sysctls, sysctl);
  }
  return d;
}

}  // namespace chl::webhook
