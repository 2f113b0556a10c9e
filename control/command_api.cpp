#include "control/command_api.hpp"

#include <map>

#include "common/log.hpp"
#include "events/event_bus.hpp"

namespace chl::control {
using nlohmann::json;

namespace {

int status_for(const common::Error& e) {
  if (e.code == std::errc::operation_not_permitted) return 409;
  if (e.code == std::errc::invalid_argument || e.code == std::errc::file_exists) return 400;
  if (e.code == std::errc::operation_not_supported) return 501;
  return 500;
}

void reply_json(const std::shared_ptr<HttpConnection>& conn, const common::Result<json>& r) {
  if (r) {
    conn->respond(200, "application/json", r->dump());
  } else {
    conn->respond(status_for(r.error()), "application/json", json{{"error", r.error().message()}}.dump());
  }
}

}  // namespace

CommandApi::CommandApi(launcher::LauncherService& service, common::UniqueFd listener)
    : service_(service),
      server_(service.io(), std::move(listener),
              [this](std::shared_ptr<HttpConnection> c, HttpRequest r) { handle(std::move(c), std::move(r)); }) {}

CommandApi::~CommandApi() {
  server_.stop();
  for (auto& w : streams_)
    if (auto c = w.lock()) c->close();
}

void CommandApi::start() { server_.start(); }

void CommandApi::stop() {
  server_.stop();
  for (auto& w : streams_)
    if (auto c = w.lock()) c->finish();
}

void CommandApi::handle(std::shared_ptr<HttpConnection> conn, HttpRequest req) {
  std::string path = req.target.substr(0, req.target.find('?'));
  CHL_LOG_DEBUG("command socket: {} {}", req.method, path);
  auto reply = [conn](common::Result<json> r) { reply_json(conn, r); };
  json body = json::object();
  if (!req.body.empty()) {
    body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      conn->respond(400, "application/json", json{{"error", "request body is not a JSON object"}}.dump());
      return;
    }
  }
  auto need_string = [&](const char* key) -> std::optional<std::string> {
    if (body.contains(key) && body[key].is_string()) return body[key].get<std::string>();
    conn->respond(400, "application/json", json{{"error", std::string("missing string field \"") + key + "\""}}.dump());
    return std::nullopt;
  };

  struct Route {
    const char* method;
    std::function<void()> run;
  };
  const std::map<std::string, Route> routes = {
      {"/v1/ping", {"GET", [&] { conn->respond(200, "application/json", R"({"ok":true})"); }}},
      {"/v1/domain", {"GET", [&] { service_.status(reply); }}},
      {"/v1/events", {"GET", [&] { stream_events(conn); }}},
      {"/v1/pause", {"PUT", [&] { service_.pause(reply); }}},
      {"/v1/resume", {"PUT", [&] { service_.resume(reply); }}},
      {"/v1/reboot", {"PUT", [&] { service_.reboot(reply); }}},
      {"/v1/kill", {"PUT", [&] { service_.kill(reply); }}},
      {"/v1/shutdown", {"PUT", [&] {
         std::optional<std::chrono::seconds> grace;
         if (body.contains("grace_period_seconds")) {
           if (!body["grace_period_seconds"].is_number_integer() || body["grace_period_seconds"].get<long>() < 0) {
             conn->respond(400, "application/json", R"({"error":"grace_period_seconds must be a non-negative integer"})");
             return;
           }
           grace = std::chrono::seconds(body["grace_period_seconds"].get<long>());
         }
         service_.shutdown(grace, reply);
       }}},
      {"/v1/snapshot", {"PUT", [&] {
         if (auto d = need_string("destination")) service_.snapshot(*d, reply);
       }}},
      {"/v1/restore", {"PUT", [&] {
         if (auto d = need_string("source")) service_.restore(*d, reply);
       }}},
      {"/v1/add-disk", {"PUT", [&] { service_.add_disk(body, reply); }}},
      {"/v1/remove-device", {"PUT", [&] {
         if (auto id = need_string("id")) service_.remove_device(*id, reply);
       }}},
  };
  auto it = routes.find(path);
  if (it == routes.end()) {
    conn->respond(404, "application/json", json{{"error", "no such endpoint: " + path}}.dump());
    return;
  }
  if (req.method != it->second.method) {
    conn->respond(405, "application/json",
                  json{{"error", path + " takes " + it->second.method + ", not " + req.method}}.dump());
    return;
  }
  it->second.run();
}

void CommandApi::stream_events(const std::shared_ptr<HttpConnection>& conn) {
  conn->start_stream();
  std::erase_if(streams_, [](const std::weak_ptr<HttpConnection>& w) { return w.expired(); });
  streams_.push_back(conn);
  json current = service_.domain_json();
  current["type"] = "Current";
  conn->send_line(current.dump());
  // The subscription lives as long as the connection; a client that stops reading is dropped
  // by the connection's bounded queue, never slowing the others.
  auto sub = std::make_shared<events::Subscription>(service_.bus(), [weak = std::weak_ptr<HttpConnection>(conn)](
                                                                        const events::DomainEvent& e) {
    if (auto c = weak.lock()) c->send_line(events::to_json(e).dump());
  });
  conn->on_close([sub]() mutable { sub->reset(); });
}

}  // namespace chl::control
