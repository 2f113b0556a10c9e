// The webhook's incremental HTTP/1.1 request parser: any split of the bytes gives the same
// requests, pipelined requests come out one by one, and every limit or malformation is an error
// with the status to answer (webhook/http_request.hpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "webhook/http_request.hpp"

using chl::webhook::RequestParser;
using State = RequestParser::State;

namespace {

const std::string kReview = R"({"apiVersion":"admission.k8s.io/v1"})";
std::string post(const std::string& body, const std::string& extra = "") {
  return "POST /mutate?timeout=5s HTTP/1.1\r\nHost: "
         "chl-webhook.chl-webhook.svc:443\r\nContent-Type: application/json\r\n" +
         extra + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace

TEST_CASE(
    "a request split at every byte parses as the whole, and pipelined requests come out in order") {
  const std::string two = post(kReview) + "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n";
  for (std::size_t cut = 0; cut <= two.size(); ++cut) {
    CAPTURE(cut);
    RequestParser p;
    p.feed(two.substr(0, cut));
    p.feed(two.substr(cut));
    REQUIRE(p.state() == State::complete);
    auto a = p.take();
    CHECK(a.method == "POST");
    CHECK(a.target == "/mutate?timeout=5s");
    CHECK(a.path == "/mutate");
    CHECK(a.body == kReview);
    CHECK(a.keep_alive);
    CHECK(a.headers.at("content-type") == "application/json");
    REQUIRE(p.state() == State::complete);
    auto b = p.take();
    CHECK(b.method == "GET");
    CHECK(b.path == "/healthz");
    CHECK(b.body.empty());
    CHECK_FALSE(b.keep_alive);
    CHECK(p.idle());
  }
  // Byte by byte.
  RequestParser p;
  const std::string one = post(kReview);
  for (std::size_t i = 0; i + 1 < one.size(); ++i)
    CHECK(p.feed(one.substr(i, 1)) == State::need_more);
  CHECK(p.feed(one.substr(one.size() - 1)) == State::complete);
}

TEST_CASE("HTTP/1.0 closes unless it asks for keep-alive") {
  RequestParser p;
  p.feed("GET /healthz HTTP/1.0\r\n\r\n");
  CHECK_FALSE(p.take().keep_alive);
  p.feed("GET /healthz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
  CHECK(p.take().keep_alive);
}

TEST_CASE("malformed or oversized requests are errors with the status to answer") {
  struct Case {
    const char* what;
    std::string bytes;
    int status;
    const char* why;
  };
  const std::vector<Case> cases = {
      {"no target", "POST\r\n\r\n", 400, "malformed request line"},
      {"a relative target", "GET healthz HTTP/1.1\r\n\r\n", 400, "malformed request line"},
      {"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, "malformed request line"},
      {"HTTP/0.9-ish", "GET /x HTTP/3.0\r\n\r\n", 505, "only HTTP/1.0 and HTTP/1.1"},
      {"a header without colon", "GET / HTTP/1.1\r\nnonsense\r\n\r\n", 400,
       "malformed header line"},
      {"a bad length",
       post("").replace(post("").find("Content-Length: 0"), 17, "Content-Length: -1"), 400,
       "bad Content-Length"},
      {"two lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400,
       "conflicting Content-Length"},
      {"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501,
       "Transfer-Encoding"},
      {"a huge body", "POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413,
       "the body is over"},
      {"a huge head", "GET / HTTP/1.1\r\nX: " + std::string(20000, 'a'), 431,
       "the request head is over"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    RequestParser p;
    CHECK(p.feed(c.bytes) == State::error);
    CHECK(p.error_status() == c.status);
    CHECK_MESSAGE(p.error().find(c.why) != std::string::npos, p.error());
    CHECK(p.feed("GET / HTTP/1.1\r\n\r\n") == State::error);  // stays an error: the peer is closed
  }
}
