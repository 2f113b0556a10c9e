// qcow2 -> raw: `ch-launcher disk convert` against `qemu-img convert -O raw`, as a user meets
// them: both run as processes on the same image in the same run, alternating which goes first,
// each writing a new file (its previous output deleted right before it runs).
//
// Images (generated here, never committed), each a container-disk-like raw file made into a
// qcow2 by `qemu-img convert` (64 KiB clusters), uncompressed, `-c` zlib and `-c` zstd:
//   64 MiB virtual, 32 MiB data; 512 MiB virtual, 160 MiB data; 4 GiB virtual, 1 GiB data.
// The data is laid out as extents of 64 KiB to 4 MiB at random places, separated by holes; an
// extent holds, like the files of an OS image, text-like bytes (40 %: words, deflate gets ~3x),
// binary-like bytes (30 %: small-alphabet bytes, ~2x) or random bytes (30 %: already-compressed
// files; `qemu-img convert -c` stores those clusters uncompressed), with 1 in 32 of its 4 KiB
// blocks zero (qemu-img writes holes for them; so do we).
//
// Two modes, each alternating the two tools:
//   page cache: `qemu-img convert -O raw SRC DST` against `ch-launcher disk convert SRC DST`
//               (neither flushes; the output is in the page cache when they exit);
//   sync:       `qemu-img convert -O raw SRC DST` then fdatasync(DST) from this process, against
//               `ch-launcher disk convert --sync SRC DST` (the time until the data is on disk).
// Every timed run starts after a sync(), so that no run pays for the previous one's write-back.
// The first run of each cell warms the page cache (the source image) and is not counted. Wall
// time: median of RUNS runs with the spread (min-max); CPU (user+system of the child): median.
// Outputs are compared with `qemu-img compare` and their sizes with stat, every run.
//
// usage: qcow2_convert_bench [--work DIR] [--runs N] [--sizes 64M,512M,4G]
//                            [--types none,zlib,zstd] [--ch-launcher PATH] [--keep]
//                            [--ours-arg ARG]...   (ARG added to ch-launcher's arguments)
//        qcow2_convert_bench WORKDIR [RUNS]       (as bench/run.sh calls it)
// (DIR default /tmp; needs ~7 GiB free for the 4 GiB images; --keep leaves the images in
// DIR/chl-qcow2-bench-PID for profiling). Prints a table and RESULT lines for bench/run.sh.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/child_process.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

struct Size {
  std::string name;
  std::uint64_t virtual_bytes;
  std::uint64_t data_bytes;
};

const std::vector<Size> kSizes = {
    {"64M", 64 * kMiB, 32 * kMiB},
    {"512M", 512 * kMiB, 160 * kMiB},
    {"4G", 4096 * kMiB, 1024 * kMiB},
};

// Run a program, its output to /dev/null (stderr kept); 0 on success.
int run(std::vector<std::string> argv) {
  auto path = chl::common::find_program(argv[0]);
  if (!path) {
    std::fprintf(stderr, "%s not found\n", argv[0].c_str());
    return -1;
  }
  chl::common::SpawnOptions opts;
  opts.argv = std::move(argv);
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

void fill_text(char* buf, std::size_t len, std::uint64_t& seed) {
  static const char* words[] = {"qemu ",    "cloud ",  "hypervisor ", "kubevirt ", "launcher ",
                                "cluster ", "disk ",   "image ",      "raw ",      "sparse ",
                                "the ",     "of ",     "and ",        "virtual ",  "machine ",
                                "guest ",   "kernel ", "boot ",       "firmware ", "network ",
                                "%d ",      "\n"};
  std::size_t i = 0;
  while (i < len) {
    const char* w = words[xorshift(seed) % (sizeof words / sizeof *words)];
    char tmp[32];
    int n = std::snprintf(tmp, sizeof tmp, w, static_cast<int>(xorshift(seed) % 100000));
    for (int k = 0; k < n && i < len; ++k) buf[i++] = tmp[k];
  }
}

// Bytes from a 16-letter alphabet in short repeats: about 2x with deflate, like executables.
void fill_binary(char* buf, std::size_t len, std::uint64_t& seed) {
  std::size_t i = 0;
  while (i < len) {
    std::uint64_t v = xorshift(seed);
    const std::size_t rep = 1 + (v >> 60) % 3;
    for (int k = 0; k < 8 && i < len; ++k, v >>= 4) {
      for (std::size_t r = 0; r < rep && i < len; ++r)
        buf[i++] = static_cast<char>(0x40 + (v & 15));
    }
  }
}

void fill_random(char* buf, std::size_t len, std::uint64_t& seed) {
  for (std::size_t i = 0; i + 8 <= len; i += 8) {
    std::uint64_t v = xorshift(seed);
    std::memcpy(buf + i, &v, 8);
  }
}

bool make_raw_source(const fs::path& p, const Size& s) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(s.virtual_bytes)) != 0) return false;
  std::vector<char> buf(4 * kMiB);
  std::uint64_t seed = 0x9e3779b97f4a7c15ull ^ s.virtual_bytes;
  std::uint64_t data = 0, off = 0;
  // Holes between extents sized so that data/virtual comes out as asked.
  const std::uint64_t hole_share = (s.virtual_bytes - s.data_bytes) * 1000 / s.data_bytes;
  while (data < s.data_bytes) {
    const std::uint64_t len =
        std::min<std::uint64_t>((1 + xorshift(seed) % 64) * 64 * 1024, s.data_bytes - data);
    const std::uint64_t gap = len * hole_share / 1000 * (xorshift(seed) % 200) / 100;
    off += gap / 65536 * 65536;
    if (off + len > s.virtual_bytes) off = s.virtual_bytes - len;
    const std::uint64_t kind = xorshift(seed) % 10;
    if (kind < 4) {
      fill_text(buf.data(), len, seed);
    } else if (kind < 7) {
      fill_binary(buf.data(), len, seed);
    } else {
      fill_random(buf.data(), len, seed);
    }
    for (std::uint64_t b = 0; b < len; b += 4096) {
      if (xorshift(seed) % 32 == 0)
        std::memset(buf.data() + b, 0, std::min<std::uint64_t>(4096, len - b));
    }
    if (::pwrite(fd, buf.data(), len, static_cast<off_t>(off)) != static_cast<ssize_t>(len))
      return false;
    off += len;
    data += len;
  }
  return ::close(fd) == 0;
}

double cpu_children() {
  struct rusage ru {};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  auto tv = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Samples {
  std::vector<double> wall, cpu;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string spread(const std::vector<double>& v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f (%.3f-%.3f)", median(v),
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  return buf;
}

bool fdatasync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fdatasync(fd) == 0;
  ::close(fd);
  return ok;
}

std::uint64_t allocated(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_blocks) * 512 : 0;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

fs::path default_ch_launcher() {
  // build/bench/disks/qcow2_convert_bench -> build/bin/ch-launcher
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return self.parent_path().parent_path().parent_path() / "bin" / "ch-launcher";
}

}  // namespace

int main(int argc, char** argv) {
  fs::path work_root = "/tmp";
  int runs = 5;
  std::vector<std::string> sizes = {"64M", "512M", "4G"}, types = {"none", "zlib", "zstd"};
  fs::path chl = default_ch_launcher();
  bool keep = false;
  std::vector<std::string> ours_args;  // extra arguments for ch-launcher (experiments)
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--work") {
      work_root = value();
    } else if (a == "--runs") {
      runs = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--sizes") {
      sizes = split(value());
    } else if (a == "--types") {
      types = split(value());
    } else if (a == "--ch-launcher") {
      chl = value();
    } else if (a == "--ours-arg") {
      ours_args.push_back(value());
    } else if (a == "--keep") {
      keep = true;
    } else if (a[0] != '-' && positional < 2) {
      // bench/run.sh's form: WORKDIR [RUNS]
      if (positional++ == 0) {
        work_root = a;
      } else {
        runs = std::max(1, std::atoi(a.c_str()));
      }
    } else {
      std::fprintf(stderr,
                   "usage: qcow2_convert_bench [--work DIR] [--runs N] [--sizes 64M,512M,4G] "
                   "[--types none,zlib,zstd] [--ch-launcher PATH] [--keep] [--ours-arg ARG]...\n");
      return 2;
    }
  }
  if (::access(chl.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "ch-launcher not found at %s (--ch-launcher PATH)\n", chl.c_str());
    return 1;
  }
  // One directory per run: another bench in the same WORKDIR must not delete our images.
  const fs::path work = work_root / ("chl-qcow2-bench-" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  std::printf(
      "%d timed runs per cell (+1 warm-up), tools alternating; wall s: median (min-max)\n\n", runs);
  std::printf(
      "| image | clusters | mode | qemu-img wall s | ours wall s | ours faster by | "
      "CPU s qemu-img / ours |\n|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  std::vector<std::string> results;
  int status = 0;
  for (const auto& size_name : sizes) {
    auto it = std::find_if(kSizes.begin(), kSizes.end(),
                           [&](const Size& s) { return s.name == size_name; });
    if (it == kSizes.end()) {
      std::fprintf(stderr, "unknown size %s (64M, 512M, 4G)\n", size_name.c_str());
      return 2;
    }
    const Size& size = *it;
    const fs::path src = work / ("source-" + size.name + ".raw");
    if (!make_raw_source(src, size)) {
      std::perror("writing the source");
      return 1;
    }
    for (const auto& type : types) {
      const fs::path img = work / ("image-" + size.name + "-" + type + ".qcow2");
      std::vector<std::string> mk{"qemu-img", "convert", "-f", "raw", "-O", "qcow2"};
      if (type != "none") {
        mk.insert(mk.end(), {"-c", "-o", "compression_type=" + type});
      }
      mk.insert(mk.end(), {src.string(), img.string()});
      if (run(mk) != 0) return 1;
      const fs::path q_out = work / "qemu.raw", o_out = work / "ours.raw";
      for (const bool sync : {false, true}) {
        Samples q, o;
        for (int r = 0; r <= runs; ++r) {
          for (int turn = 0; turn < 2; ++turn) {
            const bool ours = (turn == 0) == (r % 2 == 1);  // alternate who goes first
            const fs::path& out = ours ? o_out : q_out;
            fs::remove(out);
            ::sync();
            std::vector<std::string> cmd =
                ours ? std::vector<std::string>{chl.string(), "disk", "convert", "--quiet"}
                     : std::vector<std::string>{"qemu-img", "convert", "-O", "raw"};
            if (ours && sync) cmd.push_back("--sync");
            if (ours) cmd.insert(cmd.end(), ours_args.begin(), ours_args.end());
            cmd.push_back(img.string());
            cmd.push_back(out.string());
            const double c0 = cpu_children();
            const auto t0 = Clock::now();
            if (run(cmd) != 0) return 1;
            if (!ours && sync && !fdatasync_path(out)) return 1;
            const double wall = seconds_since(t0);
            const double cpu = cpu_children() - c0;
            if (r > 0) {
              (ours ? o : q).wall.push_back(wall);
              (ours ? o : q).cpu.push_back(cpu);
            }
          }
          if (fs::file_size(q_out) != fs::file_size(o_out) ||
              run({"qemu-img", "compare", "-q", "-f", "raw", "-F", "raw", q_out.string(),
                   o_out.string()}) != 0) {
            std::fprintf(stderr, "outputs differ: %s %s\n", size.name.c_str(), type.c_str());
            status = 1;
          }
          // Same holes: our output allocates no more than qemu-img's, give or take a few blocks
          // of filesystem metadata (ext4's extent tree).
          if (allocated(o_out) > allocated(q_out) + 64 * 1024 + allocated(q_out) / 1000) {
            std::fprintf(stderr, "ours allocates %llu bytes, qemu-img %llu\n",
                         static_cast<unsigned long long>(allocated(o_out)),
                         static_cast<unsigned long long>(allocated(q_out)));
            status = 1;
          }
        }
        const double mq = median(q.wall), mo = median(o.wall);
        const std::string clusters = type == "none" ? "uncompressed" : type;
        const std::string mode = sync ? "sync" : "page cache";
        std::printf("| %s (%llu MiB data) | %s | %s | %s | %s | %.2fx | %.3f / %.3f |\n",
                    size.name.c_str(), static_cast<unsigned long long>(size.data_bytes / kMiB),
                    clusters.c_str(), mode.c_str(), spread(q.wall).c_str(), spread(o.wall).c_str(),
                    mq / mo, median(q.cpu), median(o.cpu));
        std::fflush(stdout);
        char line[256];
        std::snprintf(
            line, sizeof line,
            "RESULT\tqcow2_%s_%s%s\tqcow2->raw %s (%s)%s\t%.3f\tqemu-img convert%s\t%.3f\ts\t"
            "faster_ge\t%s\n",
            size.name.c_str(), type.c_str(), sync ? "_sync" : "", size.name.c_str(),
            clusters.c_str(), sync ? ", synced" : "", mo, sync ? " + fdatasync" : "", mq,
            sync ? "1.0" : "1.5");
        results.push_back(line);
      }
      fs::remove(q_out);
      fs::remove(o_out);
      if (!keep) fs::remove(img);
    }
    if (!keep) fs::remove(src);
  }
  std::printf("\n");
  for (const auto& l : results) std::fputs(l.c_str(), stdout);
  if (!keep) fs::remove_all(work);
  return status;
}
