#include "kubevirt/migration_stream.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace chl::kubevirt {

namespace {
// vm-migration/src/protocol.rs Command (repr u16).
constexpr std::uint16_t kStart = 1;
constexpr std::uint16_t kConfig = 2;

std::uint16_t command_of(std::string_view h) {
  return static_cast<std::uint16_t>(static_cast<unsigned char>(h[0]) |
                                    (static_cast<unsigned char>(h[1]) << 8));
}

std::uint64_t length_of(std::string_view h) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(h[8 + i]);
  return v;
}

void set_length(std::string& h, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) h[8 + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
}  // namespace

std::string MigrationStreamEditor::edited_config(std::string_view json, int& edited) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("vm_config")) return {};
  auto& cfg = j["vm_config"];
  if (!cfg.is_object() || !cfg.contains("net") || !cfg["net"].is_array()) return {};
  int n = 0;
  for (auto& net : cfg["net"]) {
    if (!net.is_object() || !net.contains("tap") || !net["tap"].is_string()) continue;
    if (!net.contains("host_mac") || net["host_mac"].is_null()) continue;
    net["host_mac"] = nullptr;
    ++n;
  }
  if (n == 0) return {};
  edited += n;
  return j.dump();
}

void MigrationStreamEditor::feed(std::string_view in, std::string& out) {
  while (!in.empty()) {
    if (stage_ == Stage::Through) {
      out.append(in);
      return;
    }
    const std::size_t want = stage_ == Stage::ConfigBody
                                 ? kHeader + config_length_ - pending_.size()
                                 : kHeader - pending_.size();
    const std::size_t take = std::min(want, in.size());
    pending_.append(in.substr(0, take));
    in.remove_prefix(take);
    if (take < want) return;  // more to come
    switch (stage_) {
      case Stage::StartHeader:
        // Not CH's Start: nothing here is ours to read.
        stage_ = command_of(pending_) == kStart ? Stage::ConfigHeader : Stage::Through;
        out.append(pending_);
        pending_.clear();
        break;
      case Stage::ConfigHeader:
        config_length_ = length_of(pending_);
        if (command_of(pending_) != kConfig || config_length_ > kMaxConfig) {
          stage_ = Stage::Through;
          out.append(pending_);
          pending_.clear();
        } else {
          stage_ = Stage::ConfigBody;  // the header stays until the length is known for good
        }
        break;
      case Stage::ConfigBody: {
        std::string body = edited_config(std::string_view(pending_).substr(kHeader), edited_);
        if (body.empty()) {
          out.append(pending_);
        } else {
          std::string header = pending_.substr(0, kHeader);
          set_length(header, body.size());
          out.append(header);
          out.append(body);
        }
        pending_.clear();
        stage_ = Stage::Through;
        break;
      }
      case Stage::Through:
        break;
    }
  }
}

}  // namespace chl::kubevirt
