#pragma once
// Reading the images our writers make with the real tools, for the disks tests.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "tests/support/test_support.hpp"

namespace chl::test {

// blkid's low-level probe value for a tag ("LABEL", "TYPE"), "" if none.
inline std::string blkid(const std::filesystem::path& img, const std::string& tag) {
  auto r = run_command({*tool("blkid"), "-p", "-o", "value", "-s", tag, img.string()});
  std::string v = r.output;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

// One file out of an ISO image with isoinfo (`mode` "-R" Rock Ridge or "-J" Joliet names),
// captured through a file to keep binary data intact.
inline std::string iso_extract(const std::filesystem::path& img, const std::string& path, const std::string& mode,
                               const std::filesystem::path& out) {
  auto r = run_command({"/bin/sh", "-c",
                        "isoinfo " + mode + " -i '" + img.string() + "' -x '" + path + "' > '" + out.string() + "'"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return read_file(out);
}

}  // namespace chl::test
