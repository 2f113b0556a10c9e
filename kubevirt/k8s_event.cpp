#include "kubevirt/k8s_event.hpp"

namespace chl::kubevirt {

nlohmann::json to_event_json(const K8sEvent& e) {
  return {
      {"metadata", {{"creationTimestamp", nullptr}}},
      {"involvedObject",
       {{"kind", "VirtualMachineInstance"},
        {"apiVersion", "kubevirt.io/v1"},
        {"namespace", e.vmi.namespace_},
        {"name", e.vmi.name},
        {"uid", e.vmi.uid}}},
      {"type", e.type},
      {"reason", e.reason},
      {"message", e.message},
      {"source", nlohmann::json::object()},
      {"firstTimestamp", nullptr},
      {"lastTimestamp", nullptr},
      {"eventTime", nullptr},
      {"reportingComponent", ""},
      {"reportingInstance", ""},
  };
}

}  // namespace chl::kubevirt
