#pragma once
// Hotplug through Sync (launcher_hotplug.cpp): KubeVirt's hotplug volumes in a VMI as
// virt-handler sends it. Internal to the kubevirt room.
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace chl::kubevirt {

// The names of the VMI's hotplug volumes (status.volumeStatus[] with hotplugVolume), with
// whether virt-handler has mounted them into the pod (phase HotplugVolumeMounted or Ready: what
// virt-launcher's converter attaches).
std::map<std::string, bool> hotplug_volumes(const nlohmann::json& vmi);

// The VMI without its hotplug volumes and their disks: what must not change while it runs.
nlohmann::json without_hotplug_volumes(nlohmann::json vmi);

}  // namespace chl::kubevirt
