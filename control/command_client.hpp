#pragma once
// The CLI's side of the command socket: one blocking request per connection, with a timeout,
// and a streaming read of JSON lines for `events`.
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include "common/error.hpp"

namespace chl::control {

struct CommandResponse {
  int status = 0;
  std::string body;
};

common::Result<CommandResponse> command_request(const std::filesystem::path& socket,
                                                const std::string& method, const std::string& target,
                                                const std::string& body = {},
                                                std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Stream JSON lines from `target` until the server closes or `on_line` returns false.
common::Status command_stream(const std::filesystem::path& socket, const std::string& target,
                              const std::function<bool(const std::string&)>& on_line);

}  // namespace chl::control
