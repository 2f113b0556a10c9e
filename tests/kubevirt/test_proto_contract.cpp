// The generated descriptors of kubevirt/proto/*.proto against the contract table of
// docs/kubevirt/protocol.md: every service/method and every message/field (name, number, type),
// both ways, so neither the .proto files nor the table can drift from KubeVirt's wire contract.
#include <doctest/doctest.h>
#include <google/protobuf/descriptor.h>

#include <fstream>
#include <set>
#include <string>

#include "kubevirt/proto/cmd.pb.h"
#include "kubevirt/proto/cmd_info.pb.h"
#include "kubevirt/proto/notify.pb.h"
#include "kubevirt/proto/notify_info.pb.h"
#include "tests/support/test_support.hpp"

namespace {

namespace pb = google::protobuf;

std::string type_of(const pb::FieldDescriptor* f) {
  auto scalar = [](const pb::FieldDescriptor* x) -> std::string {
    return x->type() == pb::FieldDescriptor::TYPE_MESSAGE ? x->message_type()->name()
                                                          : x->type_name();
  };
  if (f->is_map())
    return "map<" + scalar(f->message_type()->map_key()) + "," +
           scalar(f->message_type()->map_value()) + ">";
  return (f->is_repeated() ? "repeated " : "") + scalar(f);
}

// The rows the table would have, rendered from the generated descriptors.
std::set<std::string> rows_of(const pb::FileDescriptor* file) {
  std::set<std::string> rows;
  const std::string pkg = file->package();
  for (int s = 0; s < file->service_count(); ++s) {
    const auto* svc = file->service(s);
    for (int m = 0; m < svc->method_count(); ++m) {
      const auto* method = svc->method(m);
      REQUIRE_FALSE(method->client_streaming());
      REQUIRE_FALSE(method->server_streaming());
      rows.insert("| `" + svc->full_name() + "` | `" + method->name() + "` | `" +
                  method->input_type()->name() + "` | `" + method->output_type()->name() + "` |");
    }
  }
  for (int i = 0; i < file->message_type_count(); ++i) {
    const auto* msg = file->message_type(i);
    std::string fields;
    for (int f = 0; f < msg->field_count(); ++f) {
      const auto* field = msg->field(f);
      if (!fields.empty()) fields += "; ";
      fields += field->name() + " = " + std::to_string(field->number()) + " " + type_of(field);
    }
    rows.insert("| `" + msg->full_name() + "` | " + (fields.empty() ? "—" : fields) + " |");
  }
  return rows;
}

std::set<std::string> documented_rows() {
  std::ifstream in(chl::test::source_dir() / "docs" / "kubevirt" / "protocol.md");
  REQUIRE(in.good());
  std::set<std::string> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "<!-- contract:begin -->")
      inside = true;
    else if (line == "<!-- contract:end -->")
      inside = false;
    else if (inside && line.starts_with("| `"))
      rows.insert(line);
  }
  return rows;
}

}  // namespace

TEST_CASE("kubevirt proto: every service, method, message and field is the documented contract") {
  // Referencing each generated file's descriptor links it and registers it in the pool.
  const pb::FileDescriptor* files[] = {
      kubevirt::cmd::v1::VMIRequest::descriptor()->file(),
      kubevirt::cmd::info::CmdInfoResponse::descriptor()->file(),
      kubevirt::notify::v1::DomainEventRequest::descriptor()->file(),
      kubevirt::notify::info::NotifyInfoResponse::descriptor()->file(),
  };
  std::set<std::string> generated;
  for (const auto* f : files) {
    CHECK(f->syntax() == pb::FileDescriptor::SYNTAX_PROTO3);
    generated.merge(rows_of(f));
  }
  const std::set<std::string> documented = documented_rows();
  REQUIRE(documented.size() > 90);  // the table was found

  for (const auto& row : generated) {
    INFO("generated but not in docs/kubevirt/protocol.md: " << row);
    CHECK(documented.count(row) == 1);
  }
  for (const auto& row : documented) {
    INFO("in docs/kubevirt/protocol.md but not generated: " << row);
    CHECK(generated.count(row) == 1);
  }
  // The services virt-handler talks to, by the names it dials.
  const auto* pool = pb::DescriptorPool::generated_pool();
  REQUIRE(pool->FindServiceByName("kubevirt.cmd.v1.Cmd") != nullptr);
  CHECK(pool->FindServiceByName("kubevirt.cmd.v1.Cmd")->method_count() == 36);
  REQUIRE(pool->FindServiceByName("kubevirt.cmd.info.CmdInfo") != nullptr);
  REQUIRE(pool->FindServiceByName("kubevirt.notify.v1.Notify") != nullptr);
  CHECK(pool->FindMethodByName("kubevirt.notify.v1.Notify.HandleK8sEvent") != nullptr);
  REQUIRE(pool->FindServiceByName("kubevirt.notify.info.NotifyInfo") != nullptr);
}
