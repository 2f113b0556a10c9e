#pragma once
// The Kubernetes events virt-launcher reports through Notify.HandleK8sEvent: a core/v1 Event
// whose involvedObject is the VMI. virt-handler records it only when that VMI (and its uid) is
// the one it holds.
#include <nlohmann/json.hpp>
#include <string>

namespace chl::kubevirt {

struct VmiReference {
  std::string name;
  std::string namespace_;
  std::string uid;
};

struct K8sEvent {
  VmiReference vmi;
  std::string type;     // "Normal" | "Warning"
  std::string reason;   // one CamelCase word: "GuestPanicked", "IOerror", "SyncFailed"
  std::string message;  // for people
};

nlohmann::json to_event_json(const K8sEvent& e);

}  // namespace chl::kubevirt
