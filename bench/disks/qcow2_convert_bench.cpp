// qcow2 -> raw: ch-launcher's converter against `qemu-img convert -O raw`, side by side on the
// same image in the same run.
//
// The image (generated here, never committed): 2 GiB virtual, half of it data. The first
// 512 MiB alternate 1 MiB of text-like data (compresses about 3x) with 1 MiB holes; the rest
// alternates 1 MiB of random data with 1 MiB holes. `qemu-img convert -c` turns it into a
// qcow2 whose text clusters are compressed and whose random clusters are stored plain (qemu
// keeps clusters that do not shrink uncompressed): 256 MiB compressed + 768 MiB plain data.
// Done for zlib and for zstd.
//
// usage: qcow2_convert_bench [WORKDIR] [RUNS] [--keep]   (WORKDIR default /tmp; needs ~7 GiB
// free; --keep leaves the generated images in WORKDIR/chl-qcow2-bench for profiling)
// "ours" writes aligned data with O_DIRECT (the default); the "--buffered" row writes through
// the page cache like qemu-img.
// Each timing is the median of RUNS (default 3) runs with a warm page cache; outputs are
// compared with cmp once. Every timed run starts after a sync(), so that no run pays for the
// write-back of the previous one. "ours, no sync" matches qemu-img, which does not fsync its
// output; "ours, fdatasync" (what `ch-launcher disk convert` does by default) is compared with
// "qemu-img convert; sync", the time until the data is on disk.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "disks/convert.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kSize = 2048 * kMiB;

int run(const std::vector<std::string>& argv) {
  chl::common::SpawnOptions opts;
  opts.argv = argv;
  auto path = chl::common::find_program(argv[0]);
  if (!path) {
    std::fprintf(stderr, "%s not found\n", argv[0].c_str());
    return -1;
  }
  opts.argv[0] = *path;
  opts.stderr_fd = STDERR_FILENO;
  opts.env = {"PATH=/usr/bin:/bin"};
  auto child = chl::common::ChildProcess::spawn(opts);
  if (!child) return -1;
  auto st = child->wait();
  return st && st->success() ? 0 : 1;
}

std::uint64_t xorshift(std::uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// Text-like bytes: words from a small vocabulary (deflate gets about 3x on it).
void fill_text(std::vector<char>& buf, std::uint64_t& seed) {
  static const char* words[] = {"qemu ",    "cloud ",  "hypervisor ", "kubevirt ", "launcher ",
                                "cluster ", "disk ",   "image ",      "raw ",      "sparse ",
                                "the ",     "of ",     "and ",        "virtual ",  "machine ",
                                "guest ",   "kernel ", "boot ",       "firmware ", "network ",
                                "%d ",      "\n"};
  std::size_t i = 0;
  while (i < buf.size()) {
    const char* w = words[xorshift(seed) % (sizeof words / sizeof *words)];
    char tmp[32];
    int n = std::snprintf(tmp, sizeof tmp, w, static_cast<int>(xorshift(seed) % 100000));
    for (int k = 0; k < n && i < buf.size(); ++k) buf[i++] = tmp[k];
  }
}

void fill_random(std::vector<char>& buf, std::uint64_t& seed) {
  for (std::size_t i = 0; i + 8 <= buf.size(); i += 8) {
    std::uint64_t v = xorshift(seed);
    std::memcpy(buf.data() + i, &v, 8);
  }
}

bool make_raw_source(const fs::path& p) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(kSize)) != 0) return false;
  std::vector<char> buf(kMiB);
  std::uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (std::uint64_t off = 0; off < kSize; off += 2 * kMiB) {
    if (off < 512 * kMiB) {
      fill_text(buf, seed);
    } else {
      fill_random(buf, seed);
    }
    if (::pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(off)) !=
        static_cast<ssize_t>(buf.size()))
      return false;
  }
  return ::close(fd) == 0;
}

// CPU seconds (user + system) used so far by this process or by its waited-for children.
double cpu_seconds(int who) {
  struct rusage ru {};
  ::getrusage(who, &ru);
  auto tv = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path work = fs::path(argc > 1 ? argv[1] : "/tmp") / "chl-qcow2-bench";
  const int runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  const bool keep = argc > 3 && std::string(argv[3]) == "--keep";
  fs::remove_all(work);
  fs::create_directories(work);
  const fs::path src = work / "source.raw";
  std::printf("generating the 2 GiB source (1 GiB data) in %s ...\n", work.c_str());
  if (!make_raw_source(src)) {
    std::perror("writing the source");
    return 1;
  }
  std::printf(
      "| compression | tool | median wall s | GiB/s (virtual) | MiB/s (data) | wall vs qemu-img | "
      "median CPU s | CPU vs qemu-img |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  int status = 0;
  for (const std::string type : {"zlib", "zstd"}) {
    const fs::path img = work / ("image-" + type + ".qcow2");
    if (run({"qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", "-o",
             "compression_type=" + type, src.string(), img.string()}) != 0) {
      return 1;
    }
    // One output per variant, each removed right before that variant runs again: every tool
    // writes into the page-cache pages its own previous output just freed. (On the development
    // VM, pages that were freed a while ago cost a host fault on first touch: whoever wrote
    // right after another tool's output was deleted ran 2-3x faster buffered.)
    const fs::path ref = work / "qemu.raw";
    const fs::path outs[3] = {work / "ours-direct.raw", work / "ours-sync.raw",
                              work / "ours-buffered.raw"};
    std::vector<double> tq, tqs, tn, ts, tb, cq, cn, cs, cb;
    unsigned threads = 0, buffered_threads = 0;
    for (int r = 0; r < runs + 1; ++r) {  // run 0 warms the page cache and is not counted
      fs::remove(ref);
      ::sync();  // every run starts without another run's dirty pages to write back
      auto t0 = Clock::now();
      const double c0 = cpu_seconds(RUSAGE_CHILDREN);
      if (run({"qemu-img", "convert", "-O", "raw", img.string(), ref.string()}) != 0) return 1;
      const double q = seconds_since(t0);
      if (r > 0) cq.push_back(cpu_seconds(RUSAGE_CHILDREN) - c0);
      // The same conversion until the data is on disk, to compare with our fdatasync default.
      ::sync();
      if (r > 0) tqs.push_back(seconds_since(t0));
      // 0: no sync, 1: fdatasync (both the default O_DIRECT writes), 2: buffered, no sync.
      for (int variant : {0, 1, 2}) {
        const bool sync = variant == 1;
        const fs::path& ours = outs[variant];
        fs::remove(ours);
        ::sync();
        chl::disks::ConvertOptions opts;
        opts.sync = sync;
        opts.direct = variant != 2;
        auto t1 = Clock::now();
        const double c1 = cpu_seconds(RUSAGE_SELF);
        auto stats = chl::disks::convert_qcow2_to_raw(img, ours, opts);
        const double o = seconds_since(t1);
        if (r > 0) (variant == 2 ? cb : sync ? cs : cn).push_back(cpu_seconds(RUSAGE_SELF) - c1);
        if (!stats) {
          std::fprintf(stderr, "convert: %s\n", stats.error().message().c_str());
          return 1;
        }
        if (variant == 0) threads = stats->threads;
        if (variant == 2) buffered_threads = stats->threads;
        if (r > 0) (variant == 2 ? tb : sync ? ts : tn).push_back(o);
      }
      if (r > 0) tq.push_back(q);
    }
    for (const auto& ours : outs) {
      if (run({"cmp", ref.string(), ours.string()}) != 0) {
        std::fprintf(stderr, "outputs differ!\n");
        status = 1;
      }
    }
    const double mq = median(tq), mn = median(tn), ms = median(ts);
    const double mcq = median(cq), mcn = median(cn), mcs = median(cs);
    auto row = [&](const std::string& tool, double t, double c) {
      std::printf("| %s | %s | %.3f | %.2f | %.0f | %.2fx | %.3f | %.2fx |\n", type.c_str(),
                  tool.c_str(), t, static_cast<double>(kSize) / t / (1ull << 30), 1024.0 / t,
                  mq / t, c, mcq / c);
    };
    row("qemu-img convert -O raw", mq, mcq);
    row("ours, no sync (O_DIRECT, " + std::to_string(threads) + " threads)", mn, mcn);
    row("ours, no sync, --buffered (" + std::to_string(buffered_threads) + " threads)",
        median(tb), median(cb));
    const double mqs = median(tqs);
    std::printf("| %s | %s | %.3f | %.2f | %.0f | %.2fx | | |\n", type.c_str(),
                "qemu-img convert -O raw; sync", mqs,
                static_cast<double>(kSize) / mqs / (1ull << 30), 1024.0 / mqs, mq / mqs);
    std::printf(
        "| %s | %s | %.3f | %.2f | %.0f | %.2fx (%.2fx vs qemu-img; sync) | %.3f | %.2fx |\n",
        type.c_str(), "ours, fdatasync (default)", ms,
        static_cast<double>(kSize) / ms / (1ull << 30), 1024.0 / ms, mq / ms, mqs / ms, mcs,
        mcq / mcs);
    // For bench/run.sh: times, so the speedup is qemu-img's time over ours (no sync on either:
    // qemu-img convert does not sync).
    std::printf("RESULT\tqcow2_%s\tqcow2->raw 2 GiB (%s clusters)\t%.3f\tqemu-img convert\t%.3f\ts\tfaster_ge\t1.5\n",
                type.c_str(), type.c_str(), mn, mq);
    fs::remove(ref);
    for (const auto& ours : outs) fs::remove(ours);
    if (!keep) fs::remove(img);
  }
  if (!keep) fs::remove_all(work);
  return status;
}
