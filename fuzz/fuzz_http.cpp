// libFuzzer target: vmm_api's HTTP response parsing and the typed bodies (VmInfo, VmConfig,
// ping, counters, CH's error arrays). Input layout: byte 0 seeds the chunk sizes; byte 1 bit 0
// picks the mode: 0 = the rest is a whole HTTP response (parsed split, then its body decoded),
// 1 = the rest is a body (decoded directly, so the JSON decoders get the mutations).
// Properties checked: no crash/UB/leak; the parser's verdict and response do not depend on how
// the bytes were split; a body that decodes re-encodes and decodes to the same JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/log.hpp"
#include "fuzz/fuzz_support.hpp"
#include "vmm_api/error.hpp"
#include "vmm_api/http_response_parser.hpp"
#include "vmm_api/types.hpp"

namespace {

using chl::fuzz::require;
using chl::fuzz::Rng;

using chl::vmm_api::HttpResponseParser;



// Decoded, the body re-encodes to JSON that decodes to the same value.
template <typename T, typename Parse>
void round_trip(std::string_view body, Parse parse) {
  auto v = parse(body);
  if (!v) {
    require(!v.error().message().empty());
    return;
  }
  const std::string once = chl::vmm_api::to_json_text(*v);
  auto again = parse(once);
  require(again.has_value());
  require(chl::vmm_api::to_json_text(*again) == once);
}

void decode_body(std::string_view body, int status) {
  using namespace chl::vmm_api;
  round_trip<VmInfo>(body, parse_vm_info);
  round_trip<VmConfig>(body, parse_vm_config);
  round_trip<VmmPingResponse>(body, parse_vmm_ping);
  (void)parse_pci_device_info(body);
  (void)parse_vm_counters(body);
  const auto messages = parse_ch_error_body(body);
  const chl::common::Error e = http_error("vm.info", status, "Reason", messages);
  require(http_status(e) == status);
  (void)ch_messages(e);
  (void)ch_message(e);
}

HttpResponseParser::State run_parser(HttpResponseParser& p, std::string_view bytes, Rng* rng) {
  std::size_t pos = 0;
  while (pos < bytes.size() && p.state() == HttpResponseParser::State::need_more) {
    std::size_t n = bytes.size() - pos;
    if (rng != nullptr) {
      const std::uint32_t r = rng->next();
      n = std::min<std::size_t>(n, (r & 3) == 0 ? 1 + (r >> 2) % 4096 : 1 + (r >> 2) % 16);
    }
    p.feed(bytes.substr(pos, n));
    pos += n;
  }
  if (p.state() == HttpResponseParser::State::need_more) p.finish_eof();
  return p.state();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  chl::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  if (data[1] & 1) {
    decode_body(rest, 400 + data[0] % 200);
    return 0;
  }
  HttpResponseParser whole;
  const auto s1 = run_parser(whole, rest, nullptr);
  Rng rng{0x9e3779b9u ^ (std::uint32_t{data[0]} * 2654435761u)};
  HttpResponseParser split;
  const auto s2 = run_parser(split, rest, &rng);
  require(s1 == s2);
  require(s1 != HttpResponseParser::State::need_more);
  if (s1 == HttpResponseParser::State::error) {
    require(!whole.error().empty());
    return 0;
  }
  const auto& a = whole.response();
  const auto& b = split.response();
  require(a.status == b.status && a.reason == b.reason && a.headers == b.headers &&
          a.body == b.body);
  require(a.body.size() <= HttpResponseParser::kMaxBodyBytes);
  decode_body(a.body, a.status);
  return 0;
}
