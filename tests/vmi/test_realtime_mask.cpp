// realtime.mask parsed as KubeVirt parses it: the shapes and errors of KubeVirt's own table
// (pkg/hypervisor/kvm/realtime_test.go "ParseCPUMask", d923fdb), checked as the vCPUs enabled.
#include <doctest/doctest.h>

#include "vmi/realtime_mask.hpp"

using chl::vmi::parse_realtime_mask;
using V = std::vector<std::uint32_t>;

namespace {

V enabled(const char* mask, std::uint32_t vcpus = 32) {
  auto m = parse_realtime_mask(mask);
  REQUIRE_MESSAGE(m.has_value(), mask << ": " << (m ? "" : m.error()));
  return m->enabled_among(vcpus);
}

std::string error_of(const char* mask) {
  auto m = parse_realtime_mask(mask);
  return m ? std::string("(parsed)") : m.error();
}

}  // namespace

TEST_CASE("realtime mask: KubeVirt's invalid expressions, with its messages") {
  CHECK(error_of("  ") == "invalid mask value '  ' in '  '");
  CHECK(error_of("a-b,33_") == "invalid mask value 'a-b' in 'a-b,33_'");
  CHECK(error_of("3,3a") == "invalid mask value '3a' in '3,3a'");
  CHECK(error_of("  ,   ") == "invalid mask value '  ' in '  ,   '");
  CHECK(error_of("^-1") == "invalid mask value '^-1' in '^-1'");
  CHECK(error_of("^3,^-1") == "invalid mask value '^-1' in '^3,^-1'");
  CHECK(error_of("1-0") == "invalid mask range `1-0`");
  CHECK(error_of("1-") == "invalid mask value '1-' in '1-'");
  CHECK(error_of("-1") == "invalid mask value '-1' in '-1'");
  CHECK(error_of("0,-1") == "invalid mask value '-1' in '0,-1'");
  CHECK(error_of("99999999999999999999") ==
        "invalid mask value '99999999999999999999' in '99999999999999999999'");
}

TEST_CASE("realtime mask: an empty mask enables every vCPU") {
  CHECK(enabled("", 4) == V{0, 1, 2, 3});
}

TEST_CASE("realtime mask: ranges and single vCPUs as KubeVirt reads them") {
  CHECK(enabled("0-0") == V{0});
  CHECK(enabled("0-2") == V{0, 1, 2});
  CHECK(enabled("0-2,5-6") == V{0, 1, 2, 5, 6});
  CHECK(enabled("0-2,2-3") == V{0, 1, 2, 3});
  CHECK(enabled("10-12") == V{10, 11, 12});
  CHECK(enabled("10-12,20,21") == V{10, 11, 12, 20, 21});
  CHECK(enabled("10-12 ,  20,21") == V{10, 11, 12, 20, 21});
  CHECK(enabled("  0-2  ") == V{0, 1, 2});
  CHECK(enabled("0") == V{0});
  CHECK(enabled("0,1,2") == V{0, 1, 2});
  CHECK(enabled("10") == V{10});
  // A range past the VM's vCPUs names nothing more (KubeVirt iterates the vCPU threads).
  CHECK(enabled("2-1000", 4) == V{2, 3});
}

TEST_CASE("realtime mask: a negated vCPU is left out wherever it stands") {
  CHECK(enabled("0-3,^1", 8) == V{0, 2, 3});
  CHECK(enabled("^1,0-3", 8) == V{0, 2, 3});
  CHECK(enabled("1,^1", 8).empty());
  // Only negations: the mask is not empty, so no vCPU is enabled (CPUMask.IsEnabled: a vCPU not
  // in a non-empty mask is disabled).
  CHECK(enabled("^3", 8).empty());
  CHECK(enabled("^0,^1,^0", 8).empty());
}

TEST_CASE("realtime mask: KubeVirt keys single items by their digits, so \"01\" names no vCPU") {
  CHECK(enabled("01", 4).empty());
  CHECK(enabled("0-3,^01", 4) == V{0, 1, 2, 3});
  CHECK(enabled("00-01", 4) == V{0, 1});  // a range's bounds are numbers (strconv.Itoa)
}
