#pragma once
// Access-credential Secrets for the virt-launcher tests on both paths: OpenSSH public key lines,
// a Secret volume laid out and changed as the kubelet's atomic writer does it, and the
// AccessCredential the launcher reports in its domain. Header-only, for tests.
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/kubevirt/scripted_agent.hpp"
#include "tests/kubevirt/test_notify_server.hpp"
#include "tests/support/test_support.hpp"

namespace chl::test {

// An OpenSSH public key line: "<type> <base64 of (string type, string 32 bytes)> <comment>".
inline std::string make_ssh_key(char seed, const std::string& comment) {
  std::string blob;
  auto put = [&](const std::string& s) {
    const auto n = static_cast<std::uint32_t>(s.size());
    blob += {char(n >> 24), char(n >> 16), char(n >> 8), char(n)};
    blob += s;
  };
  put("ssh-ed25519");
  put(std::string(32, seed));
  return "ssh-ed25519 " + ScriptedAgent::base64(blob) + " " + comment;
}

// The kubelet's atomic writer (k8s.io/kubernetes pkg/volume/util/atomic_writer.go): the data in
// ..<ts>/, ..data -> ..<ts> swapped by rename, each key a symlink through ..data.
inline void write_secret(const std::filesystem::path& dir,
                         const std::map<std::string, std::string>& data, int generation) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::string ts = "..2026_11_26_16_00_0" + std::to_string(generation) + ".1234";
  fs::create_directories(dir / ts);
  for (const auto& [k, v] : data) write_file(dir / ts / k, v);
  std::error_code ec;
  const fs::path old = fs::read_symlink(dir / "..data", ec);
  fs::remove(dir / "..data_tmp", ec);
  fs::create_directory_symlink(ts, dir / "..data_tmp");
  fs::rename(dir / "..data_tmp", dir / "..data");
  for (const auto& [k, v] : data)
    if (!fs::is_symlink(fs::symlink_status(dir / k)))
      fs::create_symlink(fs::path("..data") / k, dir / k);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("..", 0) != 0 && !data.count(name)) fs::remove(e.path());
  }
  if (!old.empty() && old != ts) fs::remove_all(dir / old);
}

// The newest domain notification's Spec.Metadata.KubeVirt.AccessCredential (null when none).
inline nlohmann::json access_credential(const TestNotifyServer& server) {
  nlohmann::json last = nullptr;
  for (const auto& n : server.received())
    if (!n.k8s) last = n.json["Spec"]["Metadata"]["KubeVirt"]["AccessCredential"];
  return last;
}

}  // namespace chl::test
