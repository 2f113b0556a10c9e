// libFuzzer target: the qcow2 reader (header and extensions, L1/L2 tables, extended L2,
// compressed clusters, refcount checks) on fuzzed image files, through the converter's path:
// open_image_chain, allocation (walks every table), then status/read over the virtual disk
// as the conversion workers do, into a scratch buffer. Small images (virtual size <= 4 MiB) are
// also converted for real with convert_qcow2_to_raw into a scratch directory under /dev/shm,
// and the output is removed. The input is the image file itself (held in a memfd).
// Properties checked: no crash/UB/leak/hang; every status() answer is within the asked range;
// reading a range said to be zero gives zeros; a failed conversion leaves no file behind.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "common/log.hpp"
#include "fuzz/fuzz_support.hpp"
#include "common/unique_fd.hpp"
#include "disks/convert.hpp"
#include "disks/image_layer.hpp"

namespace {

using chl::fuzz::require;

namespace fs = std::filesystem;


fs::path g_scratch;
// CHL_FUZZ_DEBUG=1: print why an input was refused (to check that the seeds get through).
const bool g_debug = std::getenv("CHL_FUZZ_DEBUG") != nullptr;

void note(const char* what, const chl::common::Error& e) {
  if (g_debug) std::fprintf(stderr, "fuzz_qcow2: %s: %s\n", what, e.message().c_str());
}

constexpr std::uint64_t kChunk = 64 * 1024;
constexpr std::uint64_t kMaxReadBytes = 4u << 20;  // per input: keeps executions fast
constexpr int kMaxSteps = 512;

// The conversion workers' loop over [a, b): status, then read what may hold data.
void walk(const chl::disks::ImageLayer& top, chl::disks::ReadContext& ctx, std::uint64_t a,
          std::uint64_t b, std::vector<std::uint8_t>& buf, std::uint64_t& read_budget, int& steps) {
  std::uint64_t pos = a;
  while (pos < b && steps-- > 0) {
    const std::uint64_t want = std::min(b - pos, kChunk);
    auto e = top.status(ctx, pos, want);
    if (!e) return;  // corrupt metadata: an error is the right answer
    require(e->length >= 1 && e->length <= want);
    if (read_budget < e->length) return;
    read_budget -= e->length;
    auto r = top.read(ctx, pos, e->length, buf.data());
    if (!r) return;
    if (e->zero) {
      require(std::all_of(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(e->length),
                          [](std::uint8_t c) { return c == 0; }));
    }
    pos += e->length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  chl::fuzz::quiet_logs();
  g_scratch = chl::fuzz::scratch_dir("qcow2");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace chl::disks;
  chl::common::UniqueFd fd(::memfd_create("fuzz-qcow2", MFD_CLOEXEC));
  require(static_cast<bool>(fd));
  std::size_t off = 0;
  while (off < size) {
    const ssize_t n = ::write(fd.get(), data + off, size - off);
    require(n > 0);
    off += static_cast<std::size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd.get());

  auto top = open_image_chain(path, OpenOptions{});
  if (!top) {
    require(!top.error().message().empty());
    note("open", top.error());
    return 0;
  }
  const std::uint64_t vsize = (*top)->virtual_size();
  ReadContext ctx((*top)->chain_length());
  if (auto a = (*top)->allocation(ctx); !a) {  // corrupt tables are refused first
    note("allocation", a.error());
    return 0;
  }

  std::vector<std::uint8_t> buf(kChunk);
  std::uint64_t budget = kMaxReadBytes;
  int steps = kMaxSteps;
  walk(**top, ctx, 0, std::min<std::uint64_t>(vsize, 1u << 20), buf, budget, steps);
  if (vsize > (1u << 20)) {  // the end of the disk, and a spot in the middle
    walk(**top, ctx, vsize - std::min<std::uint64_t>(vsize, 256 * 1024), vsize, buf, budget, steps);
    const std::uint64_t mid = (vsize / 2) & ~std::uint64_t{511};
    walk(**top, ctx, mid, std::min(vsize, mid + 256 * 1024), buf, budget, steps);
  }

  if (vsize <= (4u << 20)) {
    const fs::path dst = g_scratch / "out.raw";
    ConvertOptions opts;
    opts.threads = 1;
    opts.sync = false;
    opts.direct = false;
    opts.check_free_space = false;
    auto stats = convert_qcow2_to_raw(path, dst, opts);
    std::error_code ec;
    if (stats) {
      require(stats->virtual_size == vsize);
      if (!stats->passthrough) require(fs::file_size(dst, ec) == vsize && !ec);
    } else {
      note("convert", stats.error());
      require(!fs::exists(dst, ec));
    }
    fs::remove(dst, ec);
    // Nothing else may be left in the scratch directory (temporary files are cleaned up).
    require(fs::is_empty(g_scratch, ec));
  }
  return 0;
}
