#pragma once
// What every libFuzzer target here shares: failing an input, a reproducible chunk-size generator,
// quiet logs, and a scratch directory removed at exit.
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "common/log.hpp"

namespace chl::fuzz {

// An invariant broken by this input: libFuzzer reports it as a crash.
inline void require(bool ok) {
  if (!ok) std::abort();
}

// xorshift: chunk sizes from a seed byte, reproducible per input.
struct Rng {
  std::uint32_t s;
  std::uint32_t next() {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    return s;
  }
};

// For LLVMFuzzerInitialize: the launcher's logs would only slow the target down.
inline void quiet_logs() { chl::common::log::logger()->set_level(spdlog::level::off); }

// A fresh directory (in /dev/shm when there is one) for the files a target writes, removed when
// the fuzzer exits.
inline const std::filesystem::path& scratch_dir(const std::string& name) {
  static std::filesystem::path dir;
  if (dir.empty()) {
    namespace fs = std::filesystem;
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    std::string tmpl = (base / ("chl-fuzz-" + name + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    dir = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
  }
  return dir;
}

}  // namespace chl::fuzz
