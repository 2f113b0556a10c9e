// `ch-launcher disk convert` and `ch-launcher disk create-empty` through the built binary:
// exit codes, messages, and what is (not) left on disk.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "tests/disks/qcow2_fixtures.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
namespace q = chl::test::qcow2;
using chl::test::launcher_binary;
using chl::test::run_command;
using chl::test::skip;
using chl::test::TempDir;

namespace {

chl::test::CommandResult launcher(std::vector<std::string> args) {
  args.insert(args.begin(), launcher_binary());
  return run_command(args);
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("cli disk convert: converts, refuses backing files, existing DST and corrupt input") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-cli");
  const fs::path img = tmp / "a.qcow2", out = tmp / "a.raw";
  q::create(img, "16M");
  q::io(img, q::mixed_writes(16ull << 20));

  auto ok = launcher({"disk", "convert", img.string(), out.string()});
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(contains(ok.output, "converted"));
  q::check_same_as_qemu(img, out);

  auto again = launcher({"disk", "convert", img.string(), out.string()});
  CHECK(again.exit_code == 1);
  CHECK(contains(again.output, "already exists; refusing to overwrite it"));

  auto usage = launcher({"disk", "convert", img.string()});
  CHECK(usage.exit_code == 2);
  CHECK(contains(usage.output, "expected SRC and DST"));
  auto unknown = launcher({"disk", "convert", "--frobnicate", img.string(), out.string()});
  CHECK(unknown.exit_code == 2);
  CHECK(contains(unknown.output, "unknown option --frobnicate"));
  auto help = launcher({"help", "disk", "convert"});
  CHECK(help.exit_code == 0);
  CHECK(contains(help.output, "--allow-backing"));

  const fs::path over = tmp / "over.qcow2", oout = tmp / "over.raw";
  q::must({"qemu-img", "create", "-q", "-f", "qcow2", "-b", "a.qcow2", "-F", "qcow2", over.string(),
           "16M"});
  q::io(over, {"write -P 0x99 2M 1M"});
  auto refused = launcher({"disk", "convert", over.string(), oout.string()});
  CHECK(refused.exit_code == 1);
  CHECK(contains(refused.output, "has a backing file 'a.qcow2'"));
  CHECK(contains(refused.output, "--allow-backing"));
  CHECK_FALSE(fs::exists(oout));
  auto allowed =
      launcher({"disk", "convert", "--allow-backing", "--quiet", over.string(), oout.string()});
  INFO(allowed.output);
  CHECK(allowed.exit_code == 0);
  CHECK(allowed.output.empty());
  q::check_same_as_qemu(over, oout);

  const fs::path bad = tmp / "bad.qcow2", bout = tmp / "bad.raw";
  fs::copy_file(img, bad);
  q::write_be(bad, 24, 8, 1ull << 62);
  auto corrupt = launcher({"disk", "convert", bad.string(), bout.string()});
  CHECK(corrupt.exit_code == 1);
  CHECK(contains(corrupt.output, "bad.qcow2"));
  CHECK(contains(corrupt.output, "L1 entries"));
  CHECK_FALSE(fs::exists(bout));

  auto missing = launcher({"disk", "convert", (tmp / "nope.qcow2").string(), bout.string()});
  CHECK(missing.exit_code == 1);
  CHECK(contains(missing.output, "No such file"));
}

TEST_CASE("cli disk convert: raw input is passed through unless --copy-raw") {
  if (!q::have_qemu_tools()) return skip("qemu-img/qemu-io not installed");
  TempDir tmp("chl-cli");
  const fs::path raw = tmp / "r.img", out = tmp / "copy.raw";
  q::must({"qemu-img", "create", "-q", "-f", "raw", raw.string(), "8M"});
  q::io(raw, {"write -P 0x42 1M 64k"}, "raw");
  auto pass = launcher({"disk", "convert", raw.string(), out.string()});
  CHECK(pass.exit_code == 0);
  CHECK(contains(pass.output, "already raw"));
  CHECK_FALSE(fs::exists(out));
  auto copy = launcher({"disk", "convert", "--copy-raw", raw.string(), out.string()});
  INFO(copy.output);
  CHECK(copy.exit_code == 0);
  CHECK(contains(copy.output, "copied"));
  CHECK(run_command({"cmp", raw.string(), out.string()}).exit_code == 0);
}

TEST_CASE("cli disk create-empty: sizes as quantities, reuse, refusal") {
  TempDir tmp("chl-cli");
  const fs::path p = tmp / "e.img";
  auto made = launcher({"disk", "create-empty", p.string(), "512Mi"});
  INFO(made.output);
  CHECK(made.exit_code == 0);
  CHECK(contains(made.output, "created"));
  CHECK(fs::file_size(p) == 512ull << 20);
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK(st.st_blocks == 0);

  auto reused = launcher({"disk", "create-empty", p.string(), "536870912"});
  CHECK(reused.exit_code == 0);
  CHECK(contains(reused.output, "reused existing"));

  auto other = launcher({"disk", "create-empty", p.string(), "1Gi"});
  CHECK(other.exit_code == 1);
  CHECK(contains(other.output, "exists with 536870912 bytes but 1073741824 were requested"));
  CHECK(fs::file_size(p) == 512ull << 20);

  auto bad = launcher({"disk", "create-empty", (tmp / "x.img").string(), "12XB"});
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.output, "invalid quantity '12XB'"));
  CHECK_FALSE(fs::exists(tmp / "x.img"));
  auto dec = launcher({"disk", "create-empty", (tmp / "g.img").string(), "10G"});
  CHECK(dec.exit_code == 0);
  CHECK(fs::file_size(tmp / "g.img") == 10000000000ull);
}
