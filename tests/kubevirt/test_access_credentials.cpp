// What the access-credential Secrets hold, read as KubeVirt reads them
// (access_credentials.go readKeysFromDirectory / readAndAddPasswordsFromDirectory), from the
// kubelet's atomic-writer layout, and the bad input named (kubevirt/access_credentials.cpp).
#include <doctest/doctest.h>

#include <filesystem>

#include "kubevirt/access_credentials.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using chl::kubevirt::CredentialSource;
using chl::kubevirt::read_credentials;

namespace {

// ..data -> ..<ts>, each key a symlink through ..data (atomic_writer.go).
void secret(const fs::path& base, const std::string& name,
            const std::map<std::string, std::string>& data) {
  const fs::path dir = base / (name + "-access-cred");
  fs::create_directories(dir / "..2026_11_26_16_00_00.1");
  for (const auto& [k, v] : data) chl::test::write_file(dir / "..2026_11_26_16_00_00.1" / k, v);
  fs::create_directory_symlink("..2026_11_26_16_00_00.1", dir / "..data");
  for (const auto& [k, v] : data) fs::create_symlink(fs::path("..data") / k, dir / k);
}

constexpr const char* kKeyA =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFh "
    "alice@example";
constexpr const char* kKeyB =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJi bob@example";

}  // namespace

TEST_CASE(
    "access credentials: keys per user from all its Secrets, passwords by file name, ..data "
    "skipped") {
  chl::test::TempDir t("chl-acred");
  secret(t.path(), "k1", {{"a", std::string(kKeyA) + "\n\n  \n"}});
  secret(t.path(), "k2", {{"b", std::string("  ") + kKeyB + "  \n"}});
  secret(t.path(), "pw", {{"fedora", "s3cret\n"}, {"root", "  \n"}});
  std::vector<CredentialSource> src = {
      {CredentialSource::Kind::SshPublicKey, "k1", {"fedora", "root"}},
      {CredentialSource::Kind::SshPublicKey, "k2", {"root"}},
      {CredentialSource::Kind::UserPassword, "pw", {}}};
  auto set = read_credentials(t.path(), src);
  CHECK(set.errors.empty());
  CHECK(set.keys["fedora"] == std::vector<std::string>{kKeyA});
  CHECK(set.keys["root"] == std::vector<std::string>{kKeyA, kKeyB});
  CHECK(set.passwords.size() == 1);  // an empty password file is skipped, as KubeVirt does
  CHECK(set.passwords["fedora"] == "s3cret");
}

TEST_CASE(
    "access credentials: a malformed key, a comment, an empty Secret and a missing mount are "
    "named") {
  chl::test::TempDir t("chl-acred");
  secret(t.path(), "bad",
         {{"id_rsa.pub", std::string(kKeyA) + "\n# a comment\nssh-rsa bm90IGEga2V5 x\n"}});
  secret(t.path(), "empty", {});
  secret(t.path(), "nopw", {});
  std::vector<CredentialSource> src = {{CredentialSource::Kind::SshPublicKey, "bad", {"root"}},
                                       {CredentialSource::Kind::SshPublicKey, "empty", {"fedora"}},
                                       {CredentialSource::Kind::SshPublicKey, "gone", {"admin"}},
                                       {CredentialSource::Kind::UserPassword, "nopw", {}}};
  auto set = read_credentials(t.path(), src);
  std::string all;
  for (const auto& e : set.errors) all += e + "\n";
  INFO(all);
  CHECK(all.find("Secret bad: key id_rsa.pub line 2") != std::string::npos);
  CHECK(all.find("Secret bad: key id_rsa.pub line 3") !=
        std::string::npos);  // the blob names no ssh-rsa
  CHECK(all.find("Secret empty (") != std::string::npos);
  CHECK(all.find("no SSH public key") != std::string::npos);
  CHECK(all.find("Secret gone: error occurred while reading the list of secrets files from the "
                 "base directory") != std::string::npos);
  CHECK(all.find("Secret nopw (") != std::string::npos);
  // Users of a bad Secret get no list at all (not an empty one that would wipe their keys).
  CHECK(set.keys["root"].empty());
  CHECK(set.keys["fedora"].empty());
}
