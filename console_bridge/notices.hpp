#pragma once
// The lines the bridge writes to a console connection itself (not guest output). The client
// recognises the refusal to exit with an error.
#include <string_view>

namespace chl::console_bridge {

inline constexpr std::string_view kSessionActiveNotice = "console session already active\r\n";
inline constexpr std::string_view kTakenOverNotice = "\r\nconsole session taken over by another connection\r\n";

}  // namespace chl::console_bridge
