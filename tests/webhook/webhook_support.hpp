#pragma once
// What the webhook's tests share: the golden launcher pods virt-controller renders
// (../shared/reference/kubevirt-launcher-pods/, KubeVirt d923fdb), an AdmissionReview around a
// pod as the API server sends it, and the reply's patch decoded and applied (RFC 6902 through
// nlohmann::json::patch).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"
#include "webhook/admission.hpp"

namespace chl::test::webhook {

using nlohmann::json;

inline const chl::webhook::PatchConfig kConfig{"registry.example/ch-launcher:test"};

inline std::filesystem::path pods_dir() {
  return chl::test::source_dir() / ".." / "shared" / "reference" / "kubevirt-launcher-pods";
}

// The golden pods (*.json), sorted; empty when the reference is absent (the caller skips).
inline std::vector<std::filesystem::path> golden_pods() {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(pods_dir(), ec))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

inline json read_json(const std::filesystem::path& p) {
  return json::parse(chl::test::read_file(p));
}

inline json selected(json pod) {
  pod["metadata"]["labels"]["ch-launcher/hypervisor"] = "cloud-hypervisor";
  return pod;
}

// The AdmissionReview the API server sends for a pod CREATE (k8s.io/api/admission/v1 types.go).
inline json review_of(const json& pod,
                      const std::string& uid = "705ab4f5-6393-11e8-b7cc-42010a800002",
                      const std::string& operation = "CREATE") {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", uid},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
            {"requestKind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"requestResource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
            {"namespace", pod["metadata"].value("namespace", "default")},
            {"operation", operation},
            {"userInfo", {{"username", "system:serviceaccount:kubevirt:kubevirt-controller"}}},
            {"object", pod},
            {"oldObject", nullptr},
            {"dryRun", false},
            {"options", {{"kind", "CreateOptions"}, {"apiVersion", "meta.k8s.io/v1"}}}}}};
}

inline std::string base64_decode(const std::string& in) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const auto pos = alphabet.find(c);
    REQUIRE_MESSAGE(pos != std::string::npos, "not base64: " << in);
    v = (v << 6) | static_cast<unsigned>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

// The AdmissionReview's response (the reply checked to be an AdmissionReview v1 with HTTP 200).
inline json response_of(const chl::webhook::AdmissionReply& r) {
  REQUIRE_MESSAGE(r.http_status == 200, r.body);
  const json doc = json::parse(r.body);
  REQUIRE(doc.at("apiVersion") == "admission.k8s.io/v1");
  REQUIRE(doc.at("kind") == "AdmissionReview");
  return doc.at("response");
}

// The patch of a reply (an empty array when it carries none).
inline json patch_of(const json& response) {
  if (!response.contains("patch")) return json::array();
  REQUIRE(response.at("patchType") == "JSONPatch");
  return json::parse(base64_decode(response.at("patch").get<std::string>()));
}

}  // namespace chl::test::webhook
