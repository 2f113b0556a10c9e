#pragma once
// MAC addresses: parse/format "02:00:00:aa:bb:cc", and the stable generated address KubeVirt
// leaves to the hypervisor when spec.domain.devices.interfaces[].macAddress is empty.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace chl::network {

using Mac = std::array<std::uint8_t, 6>;

// "aa:bb:cc:dd:ee:ff" or "aa-bb-cc-dd-ee-ff" (any case); nullopt if malformed.
std::optional<Mac> parse_mac(std::string_view text);
// Lower case, colon separated.
std::string format_mac(const Mac& mac);
[[nodiscard]] inline bool is_multicast(const Mac& m) { return (m[0] & 0x01) != 0; }
// A locally administered unicast MAC (first octet xxxxxx10) derived from the VMI uid and the
// interface name: the same VMI gets the same MAC across launcher restarts, two interfaces of a
// VMI differ. FNV-1a 64 over "uid/name".
Mac generated_mac(std::string_view vmi_uid, std::string_view iface_name);

}  // namespace chl::network
