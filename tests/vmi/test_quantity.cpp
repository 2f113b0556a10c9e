// Kubernetes quantities, parsed as apimachinery's resource.Quantity does.
#include <doctest/doctest.h>

#include "vmi/quantity.hpp"

using chl::vmi::format_bytes_quantity;
using chl::vmi::parse_quantity;
using chl::vmi::parse_quantity_milli;

TEST_CASE("binary suffixes multiply by powers of 1024") {
  CHECK(parse_quantity("1Ki").value() == 1024);
  CHECK(parse_quantity("512Mi").value() == 512LL << 20);
  CHECK(parse_quantity("1Gi").value() == 1LL << 30);
  CHECK(parse_quantity("16Ti").value() == 16LL << 40);
  CHECK(parse_quantity("1Pi").value() == 1LL << 50);
  CHECK(parse_quantity("2Ei").value() == 2LL << 60);
}

TEST_CASE("decimal suffixes multiply by powers of 1000") {
  CHECK(parse_quantity("1024M").value() == 1024000000);
  CHECK(parse_quantity("1G").value() == 1000000000);
  CHECK(parse_quantity("64M").value() == 64000000);
  CHECK(parse_quantity("3k").value() == 3000);
  CHECK(parse_quantity("1T").value() == 1000000000000LL);
  CHECK(parse_quantity("1E").value() == 1000000000000000000LL);
}

TEST_CASE("plain numbers, fractions and exponents") {
  CHECK(parse_quantity("1073741824").value() == 1073741824);
  CHECK(parse_quantity("0").value() == 0);
  CHECK(parse_quantity("1.5Gi").value() == 1610612736);
  CHECK(parse_quantity("0.5Ki").value() == 512);
  CHECK(parse_quantity("1e3").value() == 1000);
  CHECK(parse_quantity("1E3").value() == 1000);
  CHECK(parse_quantity("5e-1").value() == 1);  // rounded up like Quantity.Value()
  CHECK(parse_quantity("+2").value() == 2);
  CHECK(parse_quantity(".5").value() == 1);
  CHECK(parse_quantity("2.").value() == 2);
}

TEST_CASE("values round up to a whole unit, toward positive infinity") {
  CHECK(parse_quantity("100m").value() == 1);
  CHECK(parse_quantity("1.1").value() == 2);
  CHECK(parse_quantity("-1.5").value() == -1);
  CHECK(parse_quantity("-1Gi").value() == -(1LL << 30));
}

TEST_CASE("CPU quantities in thousandths") {
  CHECK(parse_quantity_milli("500m").value() == 500);
  CHECK(parse_quantity_milli("2").value() == 2000);
  CHECK(parse_quantity_milli("0.25").value() == 250);
  CHECK(parse_quantity_milli("1500u").value() == 2);  // 1.5m rounded up
  CHECK(parse_quantity("500m").value() == 1);
}

TEST_CASE("malformed quantities are refused with the reason") {
  for (const char* bad :
       {"", "Gi", "1GB", "1gi", "abc", "1.2.3", "1 Gi", "--1", "1e", "1e+", "0x10", "1K"}) {
    auto r = parse_quantity(bad);
    CHECK_MESSAGE(!r.has_value(), "accepted: " << bad);
    if (!r) CHECK(r.error().message().find(std::string("quantity \"") + bad + "\"") == 0);
  }
  CHECK(parse_quantity("1K").error().message().find("did you mean k or Ki") != std::string::npos);
}

TEST_CASE("quantities beyond 63 bits are refused, not wrapped") {
  CHECK(!parse_quantity("8Ei").has_value());
  CHECK(!parse_quantity("99999999999999999999").has_value());
  CHECK(!parse_quantity("1e40").has_value());
  CHECK(parse_quantity("7Ei").value() == 7LL << 60);
}

TEST_CASE("byte counts print in the shortest exact binary form") {
  CHECK(format_bytes_quantity(0) == "0");
  CHECK(format_bytes_quantity(1LL << 30) == "1Gi");
  CHECK(format_bytes_quantity(1536LL << 20) == "1536Mi");
  CHECK(format_bytes_quantity(4096) == "4Ki");
  CHECK(format_bytes_quantity(1000) == "1000");
  CHECK(format_bytes_quantity(16LL << 40) == "16Ti");
}
