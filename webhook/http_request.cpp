#include "webhook/http_request.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace chl::webhook {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) ||
           std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
  });
}

}  // namespace

RequestParser::State RequestParser::fail(int status, std::string why) {
  error_status_ = status;
  error_ = std::move(why);
  buf_.clear();
  return state_ = State::error;
}

RequestParser::State RequestParser::feed(std::string_view bytes) {
  if (state_ == State::error) return state_;
  buf_.append(bytes);
  if (state_ == State::complete) return state_;
  return parse();
}

HttpRequest RequestParser::take() {
  HttpRequest out = std::move(req_);
  buf_.erase(0, head_end_ + body_length_);
  req_ = HttpRequest{};
  head_end_ = 0;
  body_length_ = 0;
  state_ = State::need_more;
  parse();
  return out;
}

RequestParser::State RequestParser::parse() {
  if (head_end_ == 0) {
    // Leading empty lines before a request are allowed (RFC 9112 §2.2).
    while (buf_.size() >= 2 && buf_[0] == '\r' && buf_[1] == '\n') buf_.erase(0, 2);
    const auto end = buf_.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (buf_.size() > kMaxHead)
        return fail(431, "the request head is over " + std::to_string(kMaxHead) + " bytes");
      return state_ = State::need_more;
    }
    if (end + 4 > kMaxHead)
      return fail(431, "the request head is over " + std::to_string(kMaxHead) + " bytes");
    const std::string_view head(buf_.data(), end);
    const auto line_end = head.find("\r\n");
    const std::string_view line = head.substr(0, line_end);
    const auto sp1 = line.find(' ');
    const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
      return fail(400, "malformed request line");
    req_.method = std::string(line.substr(0, sp1));
    req_.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
    const std::string_view version = line.substr(sp2 + 1);
    if (!is_token(req_.method) || req_.target.empty() || req_.target[0] != '/')
      return fail(400, "malformed request line");
    if (version != "HTTP/1.1" && version != "HTTP/1.0")
      return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
    req_.path = req_.target.substr(0, req_.target.find('?'));
    std::size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      auto e = head.find("\r\n", pos);
      if (e == std::string_view::npos) e = head.size();
      const std::string_view h = head.substr(pos, e - pos);
      const auto colon = h.find(':');
      if (colon == std::string_view::npos || !is_token(h.substr(0, colon)))
        return fail(400, "malformed header line");
      std::string name = lower(h.substr(0, colon));
      std::string value(trim(h.substr(colon + 1)));
      auto [it, inserted] = req_.headers.emplace(name, value);
      if (!inserted) {
        if (name == "content-length" && it->second != value)
          return fail(400, "conflicting Content-Length headers");
        it->second += ", " + value;
      }
      pos = e + 2;
    }
    if (req_.headers.count("transfer-encoding") != 0)
      return fail(501, "Transfer-Encoding bodies are not served");
    body_length_ = 0;
    if (auto it = req_.headers.find("content-length"); it != req_.headers.end()) {
      const std::string& v = it->second;
      std::size_t n = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (v.empty() || ec != std::errc() || p != v.data() + v.size())
        return fail(400, "bad Content-Length");
      if (n > kMaxBody) return fail(413, "the body is over " + std::to_string(kMaxBody) + " bytes");
      body_length_ = n;
    }
    const std::string connection =
        lower(req_.headers.count("connection") ? req_.headers["connection"] : "");
    req_.keep_alive = version == "HTTP/1.1" ? connection.find("close") == std::string::npos
                                            : connection.find("keep-alive") != std::string::npos;
    head_end_ = end + 4;
  }
  if (buf_.size() < head_end_ + body_length_) return state_ = State::need_more;
  req_.body = buf_.substr(head_end_, body_length_);
  return state_ = State::complete;
}

}  // namespace chl::webhook
