#pragma once
// One AdmissionReview (admission.k8s.io/v1) in, one out: the request's uid echoed, and for a
// selected launcher pod the JSONPatch of pod_patch.hpp (patchType JSONPatch, base64). A review
// that cannot be read gets HTTP 400 (no uid to answer to) or allowed:false naming what was wrong.
// Pure: no I/O, never throws, bounded nesting (fuzz/fuzz_webhook.cpp).
#include <string>
#include <string_view>

#include "webhook/pod_patch.hpp"

namespace chl::webhook {

enum class Outcome {
  malformed,   // HTTP 400: not an AdmissionReview with a request uid
  refused,     // allowed:false (a review with a uid we cannot serve, or a selected pod we cannot
               // handle)
  unselected,  // allowed, no patch, spec never read
  unchanged,   // selected and already patched: allowed, no patch
  patched,     // allowed with a patch
};
const char* outcome_name(Outcome o);

struct AdmissionReply {
  int http_status = 200;
  std::string body;  // the AdmissionReview (or a JSON error for 400)
  Outcome outcome = Outcome::malformed;
  std::string uid;
  std::string pod;      // namespace/name (or generateName) for the log
  std::string message;  // why, for refusals
};

// JSON nesting deeper than this is refused before parsing (a pod is ~10 deep).
inline constexpr int kMaxJsonDepth = 64;

AdmissionReply admit(std::string_view body, const PatchConfig& config);

std::string base64_encode(std::string_view data);

}  // namespace chl::webhook
