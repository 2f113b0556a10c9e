// The HTTP layer of vmm_api: the incremental response parser, the request bytes, and the
// error helpers (status and CH's messages recovered from an Error).
#include <doctest/doctest.h>

#include "vmm_api/error.hpp"
#include "vmm_api/http_response_parser.hpp"
#include "vmm_api/unix_http.hpp"

using namespace chl::vmm_api;
using State = HttpResponseParser::State;

namespace {

// Feed `wire` split at every possible point into two pieces; all must give the same result.
void check_every_split(const std::string& wire, int status, const std::string& body) {
  for (std::size_t cut = 0; cut <= wire.size(); ++cut) {
    HttpResponseParser p;
    p.feed(std::string_view(wire).substr(0, cut));
    auto st = p.feed(std::string_view(wire).substr(cut));
    if (st == State::need_more) {
      st = p.finish_eof();
    }
    INFO("cut at " << cut);
    REQUIRE(st == State::done);
    CHECK(p.response().status == status);
    CHECK(p.response().body == body);
  }
}

}  // namespace

TEST_CASE("parser: CH's 204, 200 with body and 500 with error array, split anywhere") {
  check_every_split("HTTP/1.1 204 No Content\r\nServer: Cloud Hypervisor API\r\n\r\n", 204, "");
  const std::string ping =
      R"({"build_version":"v52.0.0","version":"52.0.0","pid":1,"features":["kvm"]})";
  check_every_split("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                        std::to_string(ping.size()) + "\r\n\r\n" + ping,
                    200, ping);
  const std::string err = R"(["Error from API","The VM could not boot","VM config is missing"])";
  check_every_split("HTTP/1.1 500 Internal Server Error\r\ncontent-length: " +
                        std::to_string(err.size()) + "\r\n\r\n" + err,
                    500, err);
}

TEST_CASE("parser: one byte at a time, chunked body with extensions and trailers") {
  const std::string wire =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: y\r\n\r\n";
  HttpResponseParser p;
  State st = State::need_more;
  for (char c : wire) {
    st = p.feed(std::string_view(&c, 1));
  }
  REQUIRE(st == State::done);
  CHECK(p.response().body == "hello, world");
  CHECK(p.response().headers.at("transfer-encoding") == "chunked");
  check_every_split(wire, 200, "hello, world");
}

TEST_CASE("parser: body to EOF, 1xx skipped, bytes after the response ignored") {
  HttpResponseParser p;
  CHECK(p.feed("HTTP/1.0 200 OK\r\n\r\nabc") == State::need_more);
  CHECK(p.feed("def") == State::need_more);
  CHECK(p.finish_eof() == State::done);
  CHECK(p.response().body == "abcdef");

  HttpResponseParser q;
  CHECK(
      q.feed("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA") ==
      State::done);
  CHECK(q.response().status == 200);
  CHECK(q.response().body == "ok");
}

TEST_CASE("parser: garbage and truncation are errors that say what was wrong") {
  HttpResponseParser a;
  CHECK(a.feed("garbage\r\n\r\n") == State::error);
  CHECK(a.error().find("status line") != std::string::npos);

  HttpResponseParser b;
  CHECK(b.feed("HTTP/1.1 2x0 OK\r\n\r\n") == State::error);
  CHECK(b.error().find("status code") != std::string::npos);

  HttpResponseParser c;
  CHECK(c.feed("HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n") == State::error);
  CHECK(c.error().find("Content-Length") != std::string::npos);

  HttpResponseParser d;
  CHECK(d.feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc") == State::need_more);
  CHECK(d.finish_eof() == State::error);
  CHECK(d.error().find("middle of the body") != std::string::npos);

  HttpResponseParser e;
  CHECK(e.finish_eof() == State::error);
  CHECK_FALSE(e.started());

  HttpResponseParser f;
  CHECK(f.feed(std::string(HttpResponseParser::kMaxHeaderBytes + 10, 'x')) == State::error);
}

TEST_CASE("request bytes: body-less actions carry no Content-Length, bodies do") {
  const std::string boot = format_request({"PUT", "/api/v1/vm.boot", std::nullopt, {}});
  CHECK(boot == "PUT /api/v1/vm.boot HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n");
  const std::string create =
      format_request({"PUT", "/api/v1/vm.create", std::string_view(R"({"payload":{}})"), {}});
  CHECK(create.find("Content-Length: 14\r\n") != std::string::npos);
  CHECK(create.substr(create.size() - 14) == R"({"payload":{}})");
}

TEST_CASE("http errors keep the status and CH's messages") {
  const auto msgs =
      parse_ch_error_body(R"(["Error from API","The VM could not boot","VM config is missing"])");
  REQUIRE(msgs.size() == 3);
  const auto e = http_error("PUT vm.boot", 500, "Internal Server Error", msgs);
  CHECK(e.context ==
        "PUT vm.boot: HTTP 500: Error from API: The VM could not boot: VM config is missing");
  CHECK(http_status(e) == 500);
  CHECK_FALSE(api_errc(e));
  CHECK(ch_messages(e) == msgs);
  CHECK(ch_message(e) == "Error from API: The VM could not boot: VM config is missing");
  // Still recoverable after the error rose through callers.
  const auto wrapped = e.wrap("starting VM default/vm1");
  CHECK(http_status(wrapped) == 500);
  CHECK(ch_messages(wrapped) == msgs);
  CHECK(wrapped.message().rfind("starting VM default/vm1: PUT vm.boot: HTTP 500: ", 0) == 0);

  // No body: the reason phrase is shown, no messages.
  const auto nf = http_error("GET vm.nope", 404, "Not Found", parse_ch_error_body(""));
  CHECK(nf.context == "GET vm.nope: HTTP 404 Not Found");
  CHECK(ch_messages(nf).empty());

  // A body that is not CH's array becomes one message; a backtrace is cut off.
  CHECK(parse_ch_error_body("  plain text\n") == std::vector<std::string>{"plain text"});
  CHECK(parse_ch_error_body(
            R"(["Cannot snapshot VM","GetNestedState(EINVAL)\n\nStack backtrace: 0: x"])") ==
        std::vector<std::string>{"Cannot snapshot VM", "GetNestedState(EINVAL)"});
  CHECK(parse_ch_error_body(R"({"a":1})") == std::vector<std::string>{R"({"a":1})"});

  // Transport errors are not HTTP errors.
  const chl::common::Error t{make_error_code(ApiErrc::timeout), "GET vm.info: timed out"};
  CHECK(is(t, ApiErrc::timeout));
  CHECK_FALSE(http_status(t));
  CHECK(ch_messages(t).empty());
}
