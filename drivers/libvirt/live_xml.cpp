#include "drivers/libvirt/live_xml.hpp"

#include <charconv>

#include "common/xml_escape.hpp"

namespace chl::libvirt {
namespace {

// The element <name ...> or <name/> in `x` from `from` on: its opening tag, "" when absent.
std::string_view find_tag(std::string_view x, std::string_view name, std::size_t from = 0) {
  for (auto at = x.find('<', from); at != std::string_view::npos; at = x.find('<', at + 1)) {
    if (x.compare(at + 1, name.size(), name) != 0) continue;
    const char after = at + 1 + name.size() < x.size() ? x[at + 1 + name.size()] : '\0';
    if (after != ' ' && after != '>' && after != '/') continue;  // <diskX> is not <disk>
    auto end = x.find('>', at);
    if (end == std::string_view::npos) return {};
    return x.substr(at, end - at + 1);
  }
  return {};
}

// The value of attribute `name` in an opening tag, unescaped; nullopt when absent.
std::optional<std::string> attr(std::string_view tag, std::string_view name) {
  for (auto at = tag.find(name); at != std::string_view::npos; at = tag.find(name, at + 1)) {
    const auto eq = at + name.size();
    if (at == 0 || tag[at - 1] != ' ' || eq + 1 >= tag.size() || tag[eq] != '=') continue;
    const char q = tag[eq + 1];
    if (q != '\'' && q != '"') continue;
    const auto close = tag.find(q, eq + 2);
    if (close == std::string_view::npos) return std::nullopt;
    return common::xml_unescape(tag.substr(eq + 2, close - eq - 2));
  }
  return std::nullopt;
}

// The element blocks <name ...>...</name> (or <name .../>) in order.
std::vector<std::string_view> blocks(std::string_view x, std::string_view name) {
  std::vector<std::string_view> out;
  const std::string close = "</" + std::string(name) + ">";
  for (std::size_t from = 0;;) {
    auto tag = find_tag(x, name, from);
    if (tag.empty()) break;
    const auto start = static_cast<std::size_t>(tag.data() - x.data());
    std::size_t end = start + tag.size();
    if (tag.size() < 2 || tag[tag.size() - 2] != '/') {
      auto c = x.find(close, end);
      end = c == std::string_view::npos ? x.size() : c + close.size();
    }
    out.push_back(x.substr(start, end - start));
    from = end;
  }
  return out;
}

}  // namespace

std::vector<LiveDisk> live_disks(std::string_view xml) {
  std::vector<LiveDisk> out;
  auto devices = xml.find("<devices>");
  if (devices == std::string_view::npos) return out;
  for (auto b : blocks(xml.substr(devices), "disk")) {
    LiveDisk d;
    d.device = attr(find_tag(b, "disk"), "device").value_or("disk");
    auto source = find_tag(b, "source");
    for (const char* a : {"file", "dev", "name"})
      if (auto v = attr(source, a)) {
        d.path = *v;
        break;
      }
    d.target = attr(find_tag(b, "target"), "dev").value_or("");
    d.readonly = !find_tag(b, "readonly").empty();
    d.id = attr(find_tag(b, "alias"), "name").value_or("");
    if (d.id.rfind("ua-", 0) == 0) d.id.erase(0, 3);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<LiveInterface> live_interfaces(std::string_view xml) {
  std::vector<LiveInterface> out;
  auto devices = xml.find("<devices>");
  if (devices == std::string_view::npos) return out;
  for (auto b : blocks(xml.substr(devices), "interface")) {
    LiveInterface i;
    i.mac = attr(find_tag(b, "mac"), "address").value_or("");
    i.tap = attr(find_tag(b, "target"), "dev").value_or("");
    i.model = attr(find_tag(b, "model"), "type").value_or("");
    const std::string mtu = attr(find_tag(b, "mtu"), "size").value_or("");
    std::from_chars(mtu.data(), mtu.data() + mtu.size(), i.mtu);
    i.id = attr(find_tag(b, "alias"), "name").value_or("");
    if (i.id.rfind("ua-", 0) == 0) i.id.erase(0, 3);
    out.push_back(std::move(i));
  }
  return out;
}

std::string live_machine(std::string_view xml) {
  const auto os = find_tag(xml, "os");
  if (os.empty()) return {};
  return attr(find_tag(xml, "type", static_cast<std::size_t>(os.data() - xml.data())), "machine")
      .value_or("");
}

std::optional<std::uint64_t> live_size_kib(std::string_view xml, std::string_view element) {
  auto tag = find_tag(xml, element);
  if (tag.empty() || tag[tag.size() - 2] == '/') return std::nullopt;
  const auto start = static_cast<std::size_t>(tag.data() - xml.data()) + tag.size();
  const auto end = xml.find('<', start);
  if (end == std::string_view::npos) return std::nullopt;
  std::uint64_t v = 0;
  const auto text = xml.substr(start, end - start);
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  const std::string unit = attr(tag, "unit").value_or("KiB");
  if (unit == "KiB" || unit == "k") return v;
  if (unit == "b" || unit == "bytes") return v / 1024;
  if (unit == "MiB" || unit == "M") return v * 1024;
  if (unit == "GiB" || unit == "G") return v * 1024 * 1024;
  return std::nullopt;
}

std::optional<std::string> live_virtio_mem(std::string_view xml) {
  auto devices = xml.find("<devices>");
  if (devices == std::string_view::npos) return std::nullopt;
  for (auto b : blocks(xml.substr(devices), "memory"))
    if (attr(find_tag(b, "memory"), "model") == "virtio-mem") return std::string(b);
  return std::nullopt;
}

std::optional<std::string> live_serial_pty(std::string_view xml) {
  for (auto b : blocks(xml, "serial")) {
    if (attr(find_tag(b, "serial"), "type") != "pty") continue;
    return attr(find_tag(b, "source"), "path");
  }
  return std::nullopt;
}

}  // namespace chl::libvirt
