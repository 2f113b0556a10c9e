// disks::AtomicFile: written unnamed (O_TMPFILE) or under a hidden name, linked into place on
// commit, never over an existing file; a writer killed mid-write leaves nothing (O_TMPFILE) or a
// hidden temporary that remove_stale_temporaries() recognises.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "disks/atomic_file.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using chl::disks::AtomicFile;
using chl::test::TempDir;

namespace {

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

void write_text(const AtomicFile& f, const std::string& text) {
  REQUIRE(::pwrite(f.fd(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
}

}  // namespace

TEST_CASE("atomic file: unnamed until commit, then in place with its mode and contents") {
  TempDir dir("chl-atomic");
  const auto dest = dir.path() / "disk.raw";
  auto f = AtomicFile::create(dest, 0640);
  REQUIRE_MESSAGE(f, f.error().message());
  write_text(*f, "contents");
  // This machine's /tmp has O_TMPFILE: nothing has a name before commit.
  if (f->temp_path().empty()) CHECK(names_in(dir.path()).empty());
  else CHECK(names_in(dir.path()) == std::set<std::string>{f->temp_path().filename().string()});
  REQUIRE(f->commit());
  CHECK(names_in(dir.path()) == std::set<std::string>{"disk.raw"});
  CHECK(chl::test::read_file(dest) == "contents");
  struct stat st {};
  REQUIRE(::stat(dest.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
}

TEST_CASE("atomic file: an existing destination is refused at create and at commit") {
  TempDir dir("chl-atomic");
  const auto dest = dir.path() / "disk.raw";
  chl::test::write_file(dest, "precious");
  auto refused = AtomicFile::create(dest);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message().find("already exists; refusing to overwrite it") !=
        std::string::npos);

  const auto later = dir.path() / "later.raw";
  auto f = AtomicFile::create(later);
  REQUIRE(f);
  write_text(*f, "new");
  chl::test::write_file(later, "appeared");  // someone else's file, between create and commit
  auto st = f->commit(false);
  REQUIRE_FALSE(st);
  CHECK(st.error().message().find("appeared meanwhile; not overwriting it") != std::string::npos);
  CHECK(chl::test::read_file(later) == "appeared");
  CHECK(chl::test::read_file(dest) == "precious");
}

TEST_CASE("atomic file: dropped without commit, or its writer SIGKILLed, leaves no name behind") {
  TempDir dir("chl-atomic");
  {
    auto f = AtomicFile::create(dir.path() / "dropped.raw");
    REQUIRE(f);
    write_text(*f, "half");
  }
  CHECK(names_in(dir.path()).empty());

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto f = AtomicFile::create(dir.path() / "killed.raw");
    if (!f || ::write(f->fd(), "half", 4) != 4) ::_exit(1);
    ::raise(SIGKILL);  // mid-write: no destructor runs
    ::_exit(2);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  const auto left = names_in(dir.path());
  // O_TMPFILE: nothing at all. Without it, at most the hidden temporary, which the recovery
  // recognises and removes.
  CHECK(left.count("killed.raw") == 0);
  CHECK(chl::disks::remove_stale_temporaries(dir.path()) == left.size());
  CHECK(names_in(dir.path()).empty());
}

TEST_CASE("atomic file: remove_stale_temporaries removes only .<name>.tmp-XXXXXX files") {
  TempDir dir("chl-atomic");
  for (const char* n : {".root.raw.tmp-Ab3xYz", ".cloudinit.iso.tmp-000000", "root.raw",
                        ".root.raw.tmp-short", "x.tmp-ABCDEF", ".hidden", ".a.tmp-ABCDEFG"})
    chl::test::write_file(dir.path() / n, "x");
  fs::create_directory(dir.path() / ".dir.tmp-ABCDEF");
  fs::create_symlink("/etc/hostname", dir.path() / ".link.tmp-ABCDEF");
  CHECK(chl::disks::remove_stale_temporaries(dir.path()) == 2);
  CHECK(names_in(dir.path()) ==
        std::set<std::string>{"root.raw", ".root.raw.tmp-short", "x.tmp-ABCDEF", ".hidden",
                              ".a.tmp-ABCDEFG", ".dir.tmp-ABCDEF", ".link.tmp-ABCDEF"});
  CHECK(fs::exists("/etc/hostname"));
}
