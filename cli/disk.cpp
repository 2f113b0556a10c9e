// `ch-launcher disk convert` and `ch-launcher disk create-empty`: argument parsing and output
// only; the work is in disks/.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "disks/convert.hpp"
#include "disks/empty_disk.hpp"
#include "disks/quantity.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::string gib(std::uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1ull << 20));
  }
  return buf;
}

// A progress line on stderr, only on a terminal and only once a conversion has run for a
// second (short conversions print nothing).
class ProgressLine {
 public:
  ProgressLine() : tty_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()) {}
  void update(const chl::disks::ConvertProgress& p) {
    if (!tty_ || p.total == 0) return;
    const auto now = Clock::now();
    if (now - start_ < std::chrono::seconds(1) || now - last_ < std::chrono::milliseconds(200))
      return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r  %5.1f%%  %s of %s  %.0f MiB/s   ",
                 100.0 * static_cast<double>(p.done) / static_cast<double>(p.total),
                 gib(p.done).c_str(), gib(p.total).c_str(),
                 static_cast<double>(p.done) / (1 << 20) / secs);
    shown_ = true;
  }
  void finish() {
    if (shown_) std::fprintf(stderr, "\r%60s\r", "");
  }

 private:
  bool tty_;
  bool shown_ = false;
  Clock::time_point start_;
  Clock::time_point last_{};
};

int run_convert(const std::vector<std::string>& argv) {
  const std::string cmd = "disk convert";
  chl::cli::Args args({"--threads"}, {"--allow-backing", "--copy-raw", "--quiet", "--sync",
                                        "--no-sync", "--direct", "--buffered"});
  if (!args.parse(argv)) return chl::cli::usage_error(cmd, args.error());
  if (args.positionals().size() != 2)
    return chl::cli::usage_error(cmd, "expected SRC and DST (see --help)");
  const std::string src = args.positionals()[0], dst = args.positionals()[1];
  chl::disks::ConvertOptions opts;
  opts.allow_backing = args.has("--allow-backing");
  opts.copy_raw = args.has("--copy-raw");
  opts.sync = args.has("--sync");      // --no-sync and --buffered: the defaults, still accepted
  opts.direct = args.has("--direct");
  if (auto t = args.get("--threads")) {
    char* end = nullptr;
    unsigned long n = std::strtoul(t->c_str(), &end, 10);
    if (t->empty() || *end != '\0' || n == 0 || n > 64)
      return chl::cli::usage_error(cmd, "--threads needs a number from 1 to 64");
    opts.threads = static_cast<unsigned>(n);
  }
  ProgressLine progress;
  if (!args.has("--quiet"))
    opts.progress = [&](const chl::disks::ConvertProgress& p) { progress.update(p); };
  const auto start = Clock::now();
  auto stats = chl::disks::convert_qcow2_to_raw(src, dst, opts);
  progress.finish();
  if (!stats) {
    std::fprintf(stderr, "ch-launcher %s: %s\n", cmd.c_str(), stats.error().message().c_str());
    return 1;
  }
  if (stats->passthrough) {
    std::printf(
        "%s is already raw: use it as it is (nothing written; --copy-raw copies it to %s)\n",
        src.c_str(), dst.c_str());
    return 0;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (!args.has("--quiet")) {
    std::printf(
        "%s %s (%s, %s virtual, %zu layer%s) to %s: %s of data written in %.2f s (%u thread%s)\n",
        stats->copied_raw ? "copied" : "converted", src.c_str(),
        std::string(chl::disks::format_name(stats->source_format)).c_str(),
        gib(stats->virtual_size).c_str(), stats->chain_length, stats->chain_length == 1 ? "" : "s",
        dst.c_str(), gib(stats->bytes_written).c_str(), secs, stats->threads,
        stats->threads == 1 ? "" : "s");
  }
  return 0;
}

int run_create_empty(const std::vector<std::string>& argv) {
  const std::string cmd = "disk create-empty";
  chl::cli::Args args({}, {});
  if (!args.parse(argv)) return chl::cli::usage_error(cmd, args.error());
  if (args.positionals().size() != 2)
    return chl::cli::usage_error(cmd, "expected PATH and SIZE (see --help)");
  auto bytes = chl::disks::parse_quantity(args.positionals()[1]);
  if (!bytes) return chl::cli::usage_error(cmd, bytes.error().message());
  auto disk = chl::disks::create_empty_disk(args.positionals()[0], *bytes);
  if (!disk) {
    std::fprintf(stderr, "ch-launcher %s: %s\n", cmd.c_str(), disk.error().message().c_str());
    return 1;
  }
  std::printf("%s %s (%llu bytes, sparse)\n", disk->created ? "created" : "reused existing",
              disk->path.c_str(), static_cast<unsigned long long>(disk->size));
  return 0;
}

chl::cli::Registrar convert_reg({
    "disk convert",
    "convert a qcow2 image to a sparse raw image (like qemu-img convert -O raw)",
    "usage: ch-launcher disk convert SRC DST [--allow-backing] [--copy-raw] [--threads N] "
    "[--sync]\n"
    "                                 [--direct] [--quiet]\n\n"
    "Converts SRC (format detected by content) to a raw image at DST. DST must not exist: it is\n"
    "written under a temporary name in its directory and renamed when complete.\n"
    "  --allow-backing  resolve SRC's backing chain (refused by default)\n"
    "  --copy-raw       when SRC is already raw, copy it (sparse); by default nothing is written\n"
    "  --threads N      decompression threads (default: one per core, at most 4, for images with\n"
    "                   enough compressed data to pay for them)\n"
    "  --sync           fdatasync the output before the rename (default: no flush, as qemu-img)\n"
    "  --direct         write aligned data with O_DIRECT (default: through the page cache)\n"
    "  --quiet          no progress line, no summary\n"
    "Exit status: 0 done (or SRC already raw), 1 conversion failed, 2 usage error.",
    run_convert,
});

chl::cli::Registrar create_empty_reg({
    "disk create-empty",
    "create a sparse raw disk (emptyDisk) unless it exists with that size",
    "usage: ch-launcher disk create-empty PATH SIZE\n\n"
    "SIZE is a Kubernetes quantity (10Gi, 512Mi, 10G) or bytes, rounded up to 512-byte sectors.\n"
    "An existing file of that size is reused; any other existing file is left untouched and is\n"
    "an error. Exit status: 0 created or reused, 1 failed, 2 usage error.",
    run_create_empty,
});

}  // namespace
