// libFuzzer target: the webhook's input side (webhook/): the HTTP request parser and the
// AdmissionReview → decision → JSONPatch path. Input layout: byte 0 seeds the chunk sizes;
// byte 1 bit 0 picks the mode: 0 = the rest is HTTP bytes (parsed whole and split, each complete
// request's body admitted), 1 = the rest is a review body (admitted directly, so the JSON
// mutations reach the pod logic).
// Properties checked: no crash/UB/leak; the parser's requests and verdict do not depend on how
// the bytes were split; every reply is JSON (an AdmissionReview echoing the uid when HTTP 200);
// a patch applies to the reviewed pod, and the patched pod admitted again gets no further patch.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "webhook/admission.hpp"
#include "webhook/http_request.hpp"

namespace {

using chl::fuzz::require;
using chl::fuzz::Rng;
using chl::webhook::RequestParser;
using nlohmann::json;

const chl::webhook::PatchConfig kConfig{"registry.example/ch-launcher:fuzz"};

std::string decode_base64(const std::string& in) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const auto pos = alphabet.find(c);
    require(pos != std::string::npos);
    v = (v << 6) | static_cast<unsigned>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

void admit_and_check(std::string_view body) {
  const auto r = chl::webhook::admit(body, kConfig);
  const json reply = json::parse(r.body, nullptr, false);
  require(!reply.is_discarded());
  if (r.http_status != 200) {
    require(r.http_status == 400 && r.outcome == chl::webhook::Outcome::malformed);
    return;
  }
  const json& resp = reply.at("response");
  require(resp.at("uid") == r.uid && !r.uid.empty());
  require(resp.at("allowed") == (r.outcome != chl::webhook::Outcome::refused));
  if (r.outcome != chl::webhook::Outcome::patched) {
    require(!resp.contains("patch"));
    return;
  }
  const json ops = json::parse(decode_base64(resp.at("patch").get<std::string>()));
  const json review = json::parse(body);
  json pod;
  try {
    pod = review.at("request").at("object").patch(ops);
  } catch (const json::exception&) {
    require(false);  // a patch that does not apply to the pod it was made for
  }
  json again = review;
  again["request"]["object"] = pod;
  const auto second = chl::webhook::admit(again.dump(), kConfig);
  require(second.outcome == chl::webhook::Outcome::unchanged);
}

std::vector<chl::webhook::HttpRequest> parse_all(std::string_view bytes, Rng* rng,
                                                 RequestParser::State& end, int& status) {
  RequestParser p;
  std::vector<chl::webhook::HttpRequest> out;
  std::size_t pos = 0;
  while (pos < bytes.size() && p.state() != RequestParser::State::error) {
    std::size_t n = bytes.size() - pos;
    if (rng != nullptr) {
      const std::uint32_t r = rng->next();
      n = std::min<std::size_t>(n, (r & 3) == 0 ? 1 + (r >> 2) % 4096 : 1 + (r >> 2) % 16);
    }
    p.feed(bytes.substr(pos, n));
    pos += n;
    while (p.state() == RequestParser::State::complete) out.push_back(p.take());
  }
  end = p.state();
  status = p.error_status();
  return out;
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
    admit_and_check(rest);
    return 0;
  }
  RequestParser::State e1{}, e2{};
  int s1 = 0, s2 = 0;
  const auto whole = parse_all(rest, nullptr, e1, s1);
  Rng rng{0x9e3779b9u ^ (std::uint32_t{data[0]} * 2654435761u)};
  const auto split = parse_all(rest, &rng, e2, s2);
  require(e1 == e2 && s1 == s2 && whole.size() == split.size());
  for (std::size_t i = 0; i < whole.size(); ++i) {
    require(whole[i].method == split[i].method && whole[i].target == split[i].target &&
            whole[i].headers == split[i].headers && whole[i].body == split[i].body &&
            whole[i].keep_alive == split[i].keep_alive);
    require(whole[i].body.size() <= RequestParser::kMaxBody);
    admit_and_check(whole[i].body);
  }
  return 0;
}
