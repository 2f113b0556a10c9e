// Inputs fuzz/fuzz_vmi found (each also in fuzz/corpus/fuzz_vmi/regress-*): the parser must
// answer, not hang.
#include <doctest/doctest.h>

#include <string>

#include "vmi/validator.hpp"
#include "vmi/parser.hpp"

using namespace chl::vmi;

// yaml-cpp 0.7's LoadAll() loops forever (a null document per turn, memory growing without
// bound) on a stray ',' after a flow collection (jbeder/yaml-cpp#1040). The parser bounds the
// document count first: the manifest is refused with a syntax problem instead.
TEST_CASE("a stray comma after a flow map is refused, not looped on (yaml-cpp 1040)") {
  for (const std::string text :
       {"{k},", "{\"k\"},", "{\n  \"apiVersion\": \"kubevirt.io/v1\",\n  \"k\"},\n"}) {
    CAPTURE(text);
    const ParseOutcome out = parse_vmi(text);
    CHECK(out.fatal);
    REQUIRE(out.problems.size() == 1);
    CHECK(out.problems[0].message.find("not valid YAML or JSON") == 0);
    auto checked = check_vmi(text, "cloud-hypervisor");
    CHECK_FALSE(checked.has_value());
  }
}

TEST_CASE("multi-document streams still parse after the document bound") {
  const std::string text =
      "---\nkind: ConfigMap\napiVersion: v1\n---\n"
      "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: vm1\n"
      "spec:\n  domain:\n    devices: {}\n    resources:\n      requests:\n        memory: 1Gi\n";
  const ParseOutcome out = parse_vmi(text);
  CHECK_FALSE(out.fatal);
  CHECK(out.vmi.kind == "VirtualMachineInstance");
  CHECK(out.vmi.metadata.name == "vm1");
}
