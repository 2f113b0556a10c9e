#include "disks/convert.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/syscall.hpp"
#include "disks/atomic_file.hpp"
#include "disks/file_io.hpp"
#include "disks/image_layer.hpp"

namespace chl::disks {

namespace {

using common::fail;

constexpr std::uint64_t kChunk = 16ull << 20;  // unit of work handed to a worker
constexpr std::uint64_t kBuffer = 4ull << 20;  // per-worker read buffer (>= the largest cluster)
constexpr auto kProgressInterval = std::chrono::milliseconds(250);

std::filesystem::path dir_of(const std::filesystem::path& p) {
  auto d = p.parent_path();
  return d.empty() ? std::filesystem::path(".") : d;
}

std::string human(std::uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  } else if (bytes >= (1ull << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1ull << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

common::Status check_space(const std::filesystem::path& dst, std::uint64_t need) {
  CHL_TRY(std::uint64_t avail, free_space(dir_of(dst)));
  if (need > avail) {
    return fail(std::errc::no_space_on_device, "not enough free space in '" + dir_of(dst).string() +
                                                   "' (" + std::strerror(ENOSPC) +
                                                   "): the image holds up to " + human(need) +
                                                   " of data, " + human(avail) + " available");
  }
  return {};
}

common::Status set_size(int fd, const std::filesystem::path& path, std::uint64_t size) {
  if (common::retry_eintr([&] { return ::ftruncate(fd, static_cast<off_t>(size)); }) != 0) {
    return common::fail_errno("setting the size of '" + path.string() + "' to " +
                              std::to_string(size) + " bytes");
  }
  return {};
}

// Buffers are page-aligned so that their blocks can be written with O_DIRECT.
struct FreeDeleter {
  void operator()(std::uint8_t* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::uint8_t, FreeDeleter>;
AlignedBuffer aligned_buffer() {
  return AlignedBuffer(static_cast<std::uint8_t*>(std::aligned_alloc(kDirectAlign, kBuffer)));
}

// A second descriptor of the temporary output opened with O_DIRECT, or none (-1) where the
// filesystem does not support it (tmpfs before Linux 6.6, ...): then everything is buffered.
common::UniqueFd open_direct(const AtomicFile& out, const ConvertOptions& opts) {
  if (!opts.direct) return {};
  // Reopened through /proc so that it is the very file `out` holds, whatever its name.
  const std::string self = "/proc/self/fd/" + std::to_string(out.fd());
  return common::UniqueFd(::open(self.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
}

unsigned worker_count(const ConvertOptions& opts, std::uint64_t chunks) {
  unsigned n = opts.threads;
  // With O_DIRECT a worker waits for its writes to reach the device: twice as many workers as
  // cores keep the CPUs busy meanwhile (measured: 2 workers on 2 cores 1.5-2.1 s, 4 workers
  // 1.3-1.6 s for the bench image).
  if (n == 0) n = std::clamp(std::thread::hardware_concurrency() * (opts.direct ? 2u : 1u), 1u,
                             opts.direct ? 8u : 4u);
  return static_cast<unsigned>(std::clamp<std::uint64_t>(chunks, 1, n));
}

// Work shared by the converter threads.
struct Job {
  const ImageLayer* top = nullptr;
  int out_fd = -1;
  OutputFile out;
  std::uint64_t size = 0;
  bool sync = true;
  std::atomic<std::uint64_t> next_chunk{0};
  std::atomic<std::uint64_t> done{0};
  std::atomic<std::uint64_t> written{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  unsigned running = 0;
  std::optional<common::Error> error;

  void fail_with(common::Error e) {
    std::lock_guard lock(mu);
    if (!error) error = std::move(e);
    stop = true;
  }
};

common::Status convert_chunk(Job& job, ReadContext& ctx, std::uint8_t* buf, std::uint64_t a,
                             std::uint64_t b) {
  std::uint64_t pos = a;
  while (pos < b && !job.stop.load(std::memory_order_relaxed)) {
    CHL_TRY(Extent e, job.top->status(ctx, pos, std::min(b - pos, kBuffer)));
    if (!e.zero) {
      CHL_TRY_VOID(job.top->read(ctx, pos, e.length, buf));
      CHL_TRY(std::uint64_t w, write_sparse(job.out, pos, buf, e.length));
      job.written.fetch_add(w, std::memory_order_relaxed);
    }
    pos += e.length;
  }
  // Start writing this chunk back now, so the final fdatasync has little left to wait for.
  if (job.sync)
    ::sync_file_range(job.out_fd, static_cast<off_t>(a), static_cast<off_t>(b - a),
                      SYNC_FILE_RANGE_WRITE);
  return {};
}

void worker(Job& job) {
  ReadContext ctx(job.top->chain_length());
  AlignedBuffer buf = aligned_buffer();
  if (!buf) {
    job.fail_with(common::Error{std::make_error_code(std::errc::not_enough_memory),
                                "allocating a read buffer"});
  }
  while (buf && !job.stop.load()) {
    const std::uint64_t a = job.next_chunk.fetch_add(1) * kChunk;
    if (a >= job.size) break;
    const std::uint64_t b = std::min(job.size, a + kChunk);
    if (auto r = convert_chunk(job, ctx, buf.get(), a, b); !r) {
      job.fail_with(std::move(r.error()).wrap("at guest offset " + std::to_string(a)));
      break;
    }
    job.done.fetch_add(b - a);
  }
  std::lock_guard lock(job.mu);
  --job.running;
  job.cv.notify_all();
}

// Run the workers; report progress from this thread.
common::Status run_workers(Job& job, unsigned threads, const ConvertOptions& opts) {
  std::vector<std::thread> pool;
  try {
    for (unsigned i = 0; i < threads; ++i) {
      {
        std::lock_guard lock(job.mu);
        ++job.running;
      }
      pool.emplace_back([&job] { worker(job); });
    }
  } catch (const std::system_error& e) {
    std::lock_guard lock(job.mu);
    --job.running;  // the thread that failed to start
    job.stop = true;
    if (!job.error)
      job.error = common::Error{e.code(), std::string("starting a worker thread: ") + e.what()};
  }
  {
    std::unique_lock lock(job.mu);
    while (job.running > 0) {
      job.cv.wait_for(lock, kProgressInterval, [&] { return job.running == 0; });
      if (opts.progress && job.running > 0) {
        lock.unlock();
        opts.progress({job.done.load(), job.size});
        lock.lock();
      }
    }
  }
  for (auto& t : pool) t.join();
  if (job.error) return tl::unexpected(*job.error);
  if (opts.progress) opts.progress({job.size, job.size});
  return {};
}

common::Result<ConvertStats> convert_chain(const ImageLayer& top, const std::filesystem::path& dst,
                                           const ConvertOptions& opts) {
  ConvertStats stats;
  stats.source_format = ImageFormat::Qcow2;
  stats.virtual_size = top.virtual_size();
  stats.chain_length = top.chain_length();
  {
    // Walk all metadata first: every table entry is checked before anything is written, and
    // the data it maps is what the destination needs at most.
    ReadContext ctx(top.chain_length());
    CHL_TRY(stats.allocated_bytes, top.allocated_bytes(ctx));
  }
  if (opts.check_free_space) CHL_TRY_VOID(check_space(dst, stats.allocated_bytes));
  CHL_TRY(AtomicFile out, AtomicFile::create(dst));
  CHL_TRY_VOID(set_size(out.fd(), dst, stats.virtual_size));

  common::UniqueFd direct = open_direct(out, opts);
  Job job;
  job.top = &top;
  job.out_fd = out.fd();
  job.out = OutputFile{out.fd(), direct ? direct.get() : -1};
  job.size = stats.virtual_size;
  job.sync = opts.sync;
  const std::uint64_t chunks = (job.size + kChunk - 1) / kChunk;
  stats.threads = worker_count(opts, chunks);
  CHL_TRY_VOID(run_workers(job, stats.threads, opts));
  stats.bytes_written = job.written.load();
  CHL_TRY_VOID(out.commit(opts.sync));
  return stats;
}

}  // namespace

common::Result<ConvertStats> convert_qcow2_to_raw(const std::filesystem::path& src,
                                                  const std::filesystem::path& dst,
                                                  const ConvertOptions& opts) {
  auto run = [&]() -> common::Result<ConvertStats> {
    CHL_TRY(ImageFormat format, detect_format(src));
    if (format == ImageFormat::Raw) {
      if (opts.copy_raw) return copy_raw_image(src, dst, opts);
      ConvertStats stats;
      stats.passthrough = true;
      stats.chain_length = 1;
      struct stat st {};
      if (::stat(src.c_str(), &st) == 0)
        stats.virtual_size = static_cast<std::uint64_t>(st.st_size);
      return stats;
    }
    if (format != ImageFormat::Qcow2) {
      return fail(std::errc::not_supported, "'" + src.string() + "' is a " +
                                                std::string(format_name(format)) +
                                                " image; only qcow2 and raw are supported");
    }
    {
      // Fail early on an existing destination, before any work.
      struct stat st {};
      if (::lstat(dst.c_str(), &st) == 0) {
        return fail(std::errc::file_exists,
                    "'" + dst.string() + "' already exists; refusing to overwrite it");
      }
    }
    CHL_TRY(auto top, open_image_chain(src.string(),
                                       OpenOptions{opts.allow_backing, opts.max_backing_depth}));
    return convert_chain(*top, dst, opts);
  };
  return common::wrap(run(), "converting '" + src.string() + "' to '" + dst.string() + "'");
}

common::Result<ConvertStats> copy_raw_image(const std::filesystem::path& src,
                                            const std::filesystem::path& dst,
                                            const ConvertOptions& opts) {
  common::UniqueFd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return common::fail_errno("opening '" + src.string() + "'");
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) return common::fail_errno("stat '" + src.string() + "'");
  if (!S_ISREG(st.st_mode))
    return fail(std::errc::invalid_argument, "'" + src.string() + "' is not a regular file");
  ConvertStats stats;
  stats.source_format = ImageFormat::Raw;
  stats.copied_raw = true;
  stats.chain_length = 1;
  stats.threads = 1;
  stats.virtual_size = static_cast<std::uint64_t>(st.st_size);
  stats.allocated_bytes =
      std::min<std::uint64_t>(stats.virtual_size, static_cast<std::uint64_t>(st.st_blocks) * 512);
  if (opts.check_free_space) CHL_TRY_VOID(check_space(dst, stats.allocated_bytes));
  CHL_TRY(AtomicFile out, AtomicFile::create(dst));
  CHL_TRY_VOID(set_size(out.fd(), dst, stats.virtual_size));

  AlignedBuffer buf = aligned_buffer();
  if (!buf) return fail(std::errc::not_enough_memory, "allocating a copy buffer");
  common::UniqueFd direct = open_direct(out, opts);
  const OutputFile dest{out.fd(), direct ? direct.get() : -1};
  const std::uint64_t size = stats.virtual_size;
  std::uint64_t pos = 0;
  while (pos < size) {
    // Next data extent [data, hole); no SEEK_DATA support means "all data".
    off_t data = ::lseek(in.get(), static_cast<off_t>(pos), SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;
    if (data < 0) data = static_cast<off_t>(pos);
    off_t hole = ::lseek(in.get(), data, SEEK_HOLE);
    if (hole < 0) hole = static_cast<off_t>(size);
    std::uint64_t p = static_cast<std::uint64_t>(data);
    const std::uint64_t end = std::min<std::uint64_t>(size, static_cast<std::uint64_t>(hole));
    while (p < end) {
      const std::size_t n = static_cast<std::size_t>(std::min(end - p, kBuffer));
      CHL_TRY_VOID(pread_full(in.get(), p, n, buf.get()));
      CHL_TRY(std::uint64_t w, write_sparse(dest, p, buf.get(), n));
      stats.bytes_written += w;
      p += n;
      if (opts.progress) opts.progress({p, size});
    }
    pos = std::max<std::uint64_t>(end, pos + 1);
  }
  CHL_TRY_VOID(out.commit(opts.sync));
  if (opts.progress) opts.progress({size, size});
  return stats;
}

}  // namespace chl::disks
