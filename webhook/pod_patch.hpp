#pragma once
// What the webhook does to a launcher pod (docs/deploy.md, "Mixed clusters: Cloud Hypervisor per
// VMI"): the selection of a pod by its labels, and for a selected pod the JSONPatch (RFC 6902)
// that makes it run our launcher bundle while the compute container's image stays exactly as
// virt-controller wrote it (virt-controller reads that image back: lifecycle.go:288-295, :846).
// Pure functions of the pod's JSON: no I/O, fuzzed (fuzz/fuzz_webhook.cpp).
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace chl::webhook {

// The names both ends of the contract use (the bundle's init container and image layout).
inline constexpr std::string_view kSelectorLabel = "ch-launcher/hypervisor";
inline constexpr std::string_view kSelectorValue = "cloud-hypervisor";
inline constexpr std::string_view kAppLabel =
    "kubevirt.io";  // virt-controller: template.go podLabels
inline constexpr std::string_view kAppValue = "virt-launcher";
inline constexpr std::string_view kBundleName = "ch-launcher-bundle";  // volume and init container
inline constexpr std::string_view kBundleDir = "/opt/ch-launcher";
inline constexpr std::string_view kBundleSource = "/usr/lib/ch-launcher/bundle/.";
inline constexpr std::string_view kComputeName = "compute";
inline constexpr std::string_view kKubeVirtCommand = "/usr/bin/virt-launcher-monitor";
inline constexpr std::string_view kBundleCommand = "/opt/ch-launcher/bin/virt-launcher-monitor";
inline constexpr std::string_view kKubeVirtProbe = "virt-probe";
inline constexpr std::string_view kBundleProbe = "/opt/ch-launcher/bin/virt-probe";
inline constexpr std::string_view kVmmEnv = "CHL_VMM";
inline constexpr std::string_view kVmmValue = "cloud-hypervisor";
inline constexpr std::string_view kPortSysctl = "net.ipv4.ip_unprivileged_port_start";
inline constexpr int kDhcpPort = 67;

struct PatchConfig {
  std::string bundle_image;  // the init container's image: our ch-launcher image
};

// Whether the labels (metadata.labels, any JSON) select a pod: `ch-launcher/hypervisor` present
// (whatever its value: a wrong value is refused, never silently QEMU) and `kubevirt.io:
// virt-launcher`. Nothing else of the object is looked at.
bool is_selected(const nlohmann::json& labels);

enum class Verdict {
  already_patched,  // allowed, no patch (a second pass, or a reinvocation)
  patch,            // allowed with `patch`
  refuse,           // allowed:false, `message` says what was wrong
};

struct PodDecision {
  Verdict verdict = Verdict::refuse;
  nlohmann::json patch = nlohmann::json::array();  // the RFC 6902 operations (Verdict::patch)
  std::string message;                             // why (Verdict::refuse)
};

// The decision for a selected pod (the object of a Pod CREATE). Every field it reads is
// type-checked: any JSON gives a decision, never an exception.
PodDecision decide_pod(const nlohmann::json& pod, const PatchConfig& config);

// The init container the patch appends (also what a second pass recognises as ours).
nlohmann::json bundle_init_container(const PatchConfig& config);

}  // namespace chl::webhook
