#include "vmm_api/http_response_parser.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace chl::vmm_api {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

template <typename T>
bool parse_number(std::string_view s, T& out, int base = 10) {
  if (s.empty()) {
    return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

HttpResponseParser::State HttpResponseParser::fail(std::string why) {
  error_ = std::move(why);
  state_ = State::error;
  return state_;
}

bool HttpResponseParser::parse_head(std::string_view head) {
  // Status line: HTTP/1.x SP 3DIGIT [SP reason]
  auto eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  if (line.substr(0, 7) != "HTTP/1.") {
    fail("not an HTTP/1.x status line: '" + std::string(line.substr(0, 80)) + "'");
    return false;
  }
  auto sp = line.find(' ');
  if (sp == std::string_view::npos) {
    fail("status line without a status: '" + std::string(line) + "'");
    return false;
  }
  std::string_view rest = line.substr(sp + 1);
  auto sp2 = rest.find(' ');
  std::string_view code = rest.substr(0, sp2);
  int status = 0;
  if (code.size() != 3 || !parse_number(code, status) || status < 100) {
    fail("bad status code '" + std::string(code) + "'");
    return false;
  }
  resp_ = HttpResponse{};
  resp_.status = status;
  if (sp2 != std::string_view::npos) {
    resp_.reason = std::string(trim(rest.substr(sp2 + 1)));
  }

  std::string_view fields =
      eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 2);
  while (!fields.empty()) {
    auto e = fields.find("\r\n");
    std::string_view f = fields.substr(0, e);
    fields = e == std::string_view::npos ? std::string_view{} : fields.substr(e + 2);
    if (f.empty()) {
      continue;
    }
    auto colon = f.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      fail("bad header line '" + std::string(f.substr(0, 80)) + "'");
      return false;
    }
    resp_.headers[lower(trim(f.substr(0, colon)))] = std::string(trim(f.substr(colon + 1)));
  }
  return true;
}

bool HttpResponseParser::take_body() {
  const std::size_t take = std::min(remaining_, buf_.size());
  resp_.body.append(buf_, 0, take);
  buf_.erase(0, take);
  remaining_ -= take;
  return remaining_ == 0;
}

HttpResponseParser::State HttpResponseParser::feed(std::string_view data) {
  if (state_ != State::need_more) {
    return state_;
  }
  if (!data.empty()) {
    started_ = true;
  }
  buf_.append(data);
  return run();
}

HttpResponseParser::State HttpResponseParser::run() {
  for (;;) {
    switch (phase_) {
      case Phase::head: {
        auto end = buf_.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (buf_.size() > kMaxHeaderBytes) {
            return fail("response header larger than 64 KiB");
          }
          return state_;
        }
        if (!parse_head(std::string_view(buf_).substr(0, end + 2))) {
          return state_;
        }
        buf_.erase(0, end + 4);
        if (resp_.status < 200) {  // 1xx: an interim response, the real one follows
          continue;
        }
        // 204 and 304 never have a body.
        if (resp_.status == 204 || resp_.status == 304) {
          phase_ = Phase::complete;
          continue;
        }
        if (auto te = resp_.headers.find("transfer-encoding"); te != resp_.headers.end()) {
          if (lower(te->second).find("chunked") == std::string::npos) {
            return fail("unsupported transfer-encoding '" + te->second + "'");
          }
          phase_ = Phase::chunk_size;
          continue;
        }
        if (auto cl = resp_.headers.find("content-length"); cl != resp_.headers.end()) {
          std::size_t n = 0;
          if (!parse_number(std::string_view(cl->second), n)) {
            return fail("bad Content-Length '" + cl->second + "'");
          }
          if (n > kMaxBodyBytes) {
            return fail("response body larger than 64 MiB");
          }
          remaining_ = n;
          phase_ = Phase::body_length;
          continue;
        }
        phase_ = Phase::body_eof;
        continue;
      }
      case Phase::body_length:
        if (!take_body()) {
          return state_;
        }
        phase_ = Phase::complete;
        continue;
      case Phase::body_eof:
        if (resp_.body.size() + buf_.size() > kMaxBodyBytes) {
          return fail("response body larger than 64 MiB");
        }
        resp_.body.append(buf_);
        buf_.clear();
        return state_;
      case Phase::chunk_size: {
        auto e = buf_.find("\r\n");
        if (e == std::string::npos) {
          if (buf_.size() > 1024) {
            return fail("chunk size line too long");
          }
          return state_;
        }
        std::string_view line(buf_.data(), e);
        line = trim(line.substr(0, line.find(';')));  // drop chunk extensions
        std::size_t n = 0;
        if (!parse_number(line, n, 16)) {
          return fail("bad chunk size '" + std::string(line) + "'");
        }
        buf_.erase(0, e + 2);
        if (n == 0) {
          phase_ = Phase::trailers;
          continue;
        }
        if (resp_.body.size() + n > kMaxBodyBytes) {
          return fail("response body larger than 64 MiB");
        }
        remaining_ = n;
        phase_ = Phase::chunk_data;
        continue;
      }
      case Phase::chunk_data:
        if (!take_body()) {
          return state_;
        }
        phase_ = Phase::chunk_data_crlf;
        continue;
      case Phase::chunk_data_crlf:
        if (buf_.size() < 2) {
          return state_;
        }
        if (buf_.compare(0, 2, "\r\n") != 0) {
          return fail("chunk not followed by CRLF");
        }
        buf_.erase(0, 2);
        phase_ = Phase::chunk_size;
        continue;
      case Phase::trailers: {
        // Trailer fields end with an empty line; we ignore their content.
        auto e = buf_.find("\r\n");
        if (e == std::string::npos) {
          if (buf_.size() > kMaxHeaderBytes) {
            return fail("trailers larger than 64 KiB");
          }
          return state_;
        }
        buf_.erase(0, e + 2);
        if (e == 0) {
          phase_ = Phase::complete;
        }
        continue;
      }
      case Phase::complete:
        buf_.clear();
        state_ = State::done;
        return state_;
    }
  }
}

HttpResponseParser::State HttpResponseParser::finish_eof() {
  if (state_ != State::need_more) {
    return state_;
  }
  if (phase_ == Phase::body_eof) {
    phase_ = Phase::complete;
    return run();
  }
  if (!started_) {
    return fail("connection closed before any answer");
  }
  if (phase_ == Phase::head) {
    return fail("connection closed in the middle of the header");
  }
  return fail("connection closed in the middle of the body");
}

}  // namespace chl::vmm_api
