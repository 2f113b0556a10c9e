#pragma once
// Cloud Hypervisor's request bodies as data: each struct with its fields in CH's serialization
// order, their types, and serde's defaults. normalize() does what CH's serde derive does to a
// body: checks types, reports the first problem with serde_json's wording and position, drops
// unknown fields silently, and fills defaults — so vm.info answers with the same config CH would.
// Field orders and defaults follow the vm.info CH v52 printed (see
// /work/shared/reference/cloud-hypervisor-v52-observed.md) and vmm/src/vm_config.rs.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/vmm_double/json_reader.hpp"

namespace chl::vmm_double {

using Json = nlohmann::ordered_json;

struct SchemaType;

struct SchemaField {
  enum class Presence {
    Required,  // serde: missing -> "missing field `name`"
    Option,    // Option<T>: missing or null -> null
    Default,   // #[serde(default)]: missing -> def (or make_default())
  };
  std::string name;
  const SchemaType* type = nullptr;
  Presence presence = Presence::Option;
  Json def;                            // for Presence::Default
  std::function<Json()> make_default;  // when the default is computed (a random MAC)
  bool skip_if_false = false;          // serialized only when true (CH's `iommu`)
  bool nullable = false;               // Default presence but Option<T> underneath
};

struct SchemaType {
  enum class Kind { Bool, Unsigned, Signed, String, Path, Struct, Seq, Enum, Any };
  Kind kind = Kind::Any;
  std::string expecting;             // serde's "expected ..." text: "u32", "struct CpusConfig", ...
  unsigned long long max = 0;        // Unsigned: the type's maximum
  std::vector<SchemaField> fields;   // Struct
  const SchemaType* elem = nullptr;  // Seq
  std::vector<std::string> variants;  // Enum
};

// The structs the API takes.
const SchemaType& vm_config_type();
const SchemaType& disk_config_type();
const SchemaType& net_config_type();
const SchemaType& fs_config_type();
const SchemaType& pmem_config_type();
const SchemaType& device_config_type();
const SchemaType& vsock_config_type();
const SchemaType& remove_device_type();
const SchemaType& resize_type();
const SchemaType& snapshot_config_type();
const SchemaType& restore_config_type();
const SchemaType& receive_migration_type();
const SchemaType& send_migration_type();

// Validate + fill defaults. Error text is serde_json's, with " at line L column C".
tl::expected<Json, std::string> normalize(const JsonNode& node, const SchemaType& type);

// Parse text and normalize; error text as CH's second array element
// ("missing field `max_vcpus` at line 1 column 26").
tl::expected<Json, std::string> deserialize(std::string_view body, const SchemaType& type);

}  // namespace chl::vmm_double
