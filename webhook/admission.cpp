#include "webhook/admission.hpp"

#include <nlohmann/json.hpp>

namespace chl::webhook {
namespace {

using nlohmann::json;

// JSON text; bytes that are not UTF-8 (from the review) become U+FFFD rather than an exception.
std::string text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The deepest nesting of [ and { outside strings; stops counting past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\')
        ++i;
      else if (ch == '"')
        in_string = false;
      continue;
    }
    if (ch == '"')
      in_string = true;
    else if (ch == '[' || ch == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if (ch == ']' || ch == '}')
      --depth;
  }
  return deepest;
}

const json* member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string string_of(const json* j) {
  return j != nullptr && j->is_string() ? j->get<std::string>() : std::string();
}

AdmissionReply malformed(std::string message) {
  AdmissionReply r;
  r.http_status = 400;
  r.outcome = Outcome::malformed;
  r.body = text(json{{"error", "ch-launcher webhook: " + message}});
  r.message = std::move(message);
  return r;
}

json review(json response) {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"response", std::move(response)}};
}

void refuse(AdmissionReply& r, int code, std::string message) {
  r.outcome = Outcome::refused;
  r.message = message;
  r.body = text(
      review({{"uid", r.uid},
              {"allowed", false},
              {"status",
               {{"code", code}, {"message", "ch-launcher webhook: " + r.pod + ": " + message}}}}));
}

void allow(AdmissionReply& r, Outcome outcome) {
  r.outcome = outcome;
  r.body = text(review({{"uid", r.uid}, {"allowed", true}}));
}

}  // namespace

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::malformed:
      return "malformed";
    case Outcome::refused:
      return "refused";
    case Outcome::unselected:
      return "unselected";
    case Outcome::unchanged:
      return "unchanged";
    case Outcome::patched:
      return "patched";
  }
  return "?";
}

std::string base64_encode(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(data[i]) << 16) |
                       (static_cast<unsigned char>(data[i + 1]) << 8) |
                       static_cast<unsigned char>(data[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < data.size()) {
    unsigned v = static_cast<unsigned char>(data[i]) << 16;
    if (i + 1 < data.size()) v |= static_cast<unsigned char>(data[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < data.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

AdmissionReply admit(std::string_view body, const PatchConfig& config) {
  if (nesting_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
    return malformed("the body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return malformed("the body is not JSON");
  if (!doc.is_object()) return malformed("the body is not a JSON object");
  const json* request = member(doc, "request");
  if (request == nullptr || !request->is_object())
    return malformed("the AdmissionReview has no request object");
  const json* uid = member(*request, "uid");
  if (uid == nullptr || !uid->is_string() || uid->get_ref<const std::string&>().empty())
    return malformed("the AdmissionReview's request has no uid");

  AdmissionReply r;
  r.uid = uid->get<std::string>();
  const json* object = member(*request, "object");
  const json* metadata = object != nullptr ? member(*object, "metadata") : nullptr;
  {
    std::string ns = string_of(member(*request, "namespace"));
    if (ns.empty() && metadata != nullptr) ns = string_of(member(*metadata, "namespace"));
    std::string name = string_of(member(*request, "name"));
    if (name.empty() && metadata != nullptr) name = string_of(member(*metadata, "name"));
    if (name.empty() && metadata != nullptr) name = string_of(member(*metadata, "generateName"));
    r.pod = (ns.empty() ? std::string("?") : ns) + "/" + (name.empty() ? std::string("?") : name);
  }
  if (string_of(member(doc, "apiVersion")) != "admission.k8s.io/v1" ||
      string_of(member(doc, "kind")) != "AdmissionReview") {
    refuse(r, 400,
           "not an admission.k8s.io/v1 AdmissionReview (apiVersion '" +
               string_of(member(doc, "apiVersion")) + "', kind '" + string_of(member(doc, "kind")) +
               "')");
    return r;
  }
  const json* labels = metadata != nullptr ? member(*metadata, "labels") : nullptr;
  if (labels == nullptr || !is_selected(*labels)) {
    allow(r, Outcome::unselected);
    return r;
  }
  // Selected: from here a VMI asked for Cloud Hypervisor, and must never silently start on QEMU.
  const json* kind = member(*request, "kind");
  const bool pod_kind = kind != nullptr && string_of(member(*kind, "group")).empty() &&
                        string_of(member(*kind, "version")) == "v1" &&
                        string_of(member(*kind, "kind")) == "Pod";
  const std::string operation = string_of(member(*request, "operation"));
  if (!pod_kind || operation != "CREATE") {
    refuse(r, 400,
           "only a v1 Pod CREATE is served (this is " +
               (kind != nullptr ? text(*kind) : std::string("no kind")) + " " +
               (operation.empty() ? std::string("with no operation") : operation) + ")");
    return r;
  }
  if (const std::string value = string_of(member(*labels, kSelectorLabel));
      value != kSelectorValue) {
    refuse(r, 403,
           "the label ch-launcher/hypervisor is '" + value +
               "'; the only value served is 'cloud-hypervisor'");
    return r;
  }
  const PodDecision d = decide_pod(*object, config);
  switch (d.verdict) {
    case Verdict::refuse:
      refuse(r, 403, d.message + ": refusing rather than start this VMI on QEMU");
      break;
    case Verdict::already_patched:
      allow(r, Outcome::unchanged);
      break;
    case Verdict::patch:
      r.outcome = Outcome::patched;
      r.body = text(review({{"uid", r.uid},
                            {"allowed", true},
                            {"patchType", "JSONPatch"},
                            {"patch", base64_encode(text(d.patch))}}));
      break;
  }
  return r;
}

}  // namespace chl::webhook
