#include "disks/convert.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
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

constexpr std::uint64_t kChunk = 2ull << 20;       // unit of work handed to a filler thread
constexpr std::uint64_t kBuffer = kChunk;          // one chunk's buffer (>= the largest cluster)
constexpr std::uint64_t kWriteback = 16ull << 20;  // with sync: handed to writeback at a time
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

// A buffer is one 2 MiB huge page where the kernel has one (MADV_HUGEPAGE; transparent huge
// pages in "madvise" mode, as Debian sets them), else 4 KiB pages: faulting 8 MiB of fresh
// buffers in 4 KiB pages took 3 ms on the development VM (1.4 us a fault, ~20 % of converting
// the 64 MiB bench image), in 2 MiB pages 0.2 ms. Aligned to 2 MiB, hence page-aligned for
// O_DIRECT too.
struct MapDeleter {
  void* base = nullptr;
  std::size_t len = 0;
  void operator()(std::uint8_t*) const { ::munmap(base, len); }
};
using AlignedBuffer = std::unique_ptr<std::uint8_t, MapDeleter>;
AlignedBuffer aligned_buffer() {
  constexpr std::size_t kHuge = 2u << 20;
  const std::size_t len = kBuffer + kHuge;  // room to align the start
  void* base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return AlignedBuffer(nullptr, MapDeleter{});
  const auto addr = reinterpret_cast<std::uintptr_t>(base);
  auto* p = reinterpret_cast<std::uint8_t*>((addr + kHuge - 1) / kHuge * kHuge);
  ::madvise(p, kBuffer, MADV_HUGEPAGE);  // a hint: without it, 4 KiB pages
  return AlignedBuffer(p, MapDeleter{base, len});
}

// A second descriptor of the temporary output opened with O_DIRECT, or none (-1) where the
// filesystem does not support it (tmpfs before Linux 6.6, ...): then everything is buffered.
common::UniqueFd open_direct(const AtomicFile& out, const ConvertOptions& opts) {
  if (!opts.direct) return {};
  // Reopened through /proc so that it is the very file `out` holds, whatever its name.
  const std::string self = "/proc/self/fd/" + std::to_string(out.fd());
  return common::UniqueFd(::open(self.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
}

// Runs of data at least this long are allocated with fallocate before they are written
// (OutputFile::preallocate_min), on ext4 only: measured there (docs/disks/qcow2.md), and elsewhere
// plain clusters are reflinked (XFS, btrfs) or fallocate allocates memory (tmpfs).
constexpr std::uint64_t kPreallocateMin = 64ull << 10;

std::uint64_t preallocate_min(int fd, const ConvertOptions& opts) {
  if (!opts.preallocate || opts.direct) return 0;
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0 || fs.f_type != EXT4_SUPER_MAGIC) return 0;
  return kPreallocateMin;
}

// Below this much compressed data a conversion runs on the calling thread alone: starting
// threads and handing buffers over costs more than it saves. Plain data never pays for them:
// copying it is the writer's work (reading it is a memcpy from the source's page cache), and
// on the bench's plain images one thread was as fast as two fillers and a writer (64 MiB:
// 12-13 ms against 14-18 ms; 4 GiB: 0.27-0.30 s against 0.29-0.32 s) for ~20 % less CPU.
constexpr std::uint64_t kParallelMin = 8ull << 20;

unsigned filler_count(const ConvertOptions& opts, std::uint64_t compressed, std::uint64_t chunks) {
  unsigned n = opts.threads;
  if (n == 0)
    n = compressed < kParallelMin ? 1u : std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
  return static_cast<unsigned>(std::clamp<std::uint64_t>(chunks, 1, n));
}

// CopyMethod::Auto: does the destination's filesystem share extents with the source? Tried with
// FICLONERANGE on the first plain data cluster (cloned where it will be anyway).
bool clones_extents(const ImageLayer& top, int out_fd) {
  ReadContext ctx(top.chain_length());
  const std::uint64_t size = top.virtual_size();
  std::uint64_t pos = 0;
  for (int steps = 0; pos < size && steps < 4096; ++steps) {
    auto e = top.status(ctx, pos, size - pos);
    if (!e) return false;
    if (e->zero) {
      pos += e->length;
      continue;
    }
    auto m = top.map(ctx, pos, e->length);
    if (!m) return false;
    if (m->fd >= 0) {
      struct stat st {};
      const std::uint64_t len = std::min<std::uint64_t>(m->length, 1u << 20) / 4096 * 4096;
      if (len == 0 || pos % 4096 != 0 || m->host % 4096 != 0 || ::fstat(m->fd, &st) != 0 ||
          m->host + len > static_cast<std::uint64_t>(st.st_size))
        return false;
      file_clone_range r{};
      r.src_fd = m->fd;
      r.src_offset = m->host;
      r.src_length = len;
      r.dest_offset = pos;
      return ::ioctl(out_fd, FICLONERANGE, &r) == 0;
    }
    pos += m->length;
  }
  return false;
}

// One range of a chunk for the writer: bytes in the slot's buffer (src_fd < 0), or bytes to
// copy file to file.
struct Op {
  std::uint64_t off = 0;  // virtual (= output) offset
  std::uint64_t len = 0;
  int src_fd = -1;
  std::uint64_t src_off = 0;
};

// A chunk being filled or waiting to be written.
struct Slot {
  AlignedBuffer buf;
  std::vector<Op> ops;
  std::uint64_t chunk = UINT64_MAX;  // the chunk it holds once ready
  bool ready = false;
  std::optional<common::Error> error;
};

// Chunks are filled by `fillers` threads (or by the writer itself with one) into a ring of
// slots, and written strictly in order by the calling thread.
class Pipeline {
 public:
  Pipeline(const ImageLayer& top, OutputFile out, const ConvertOptions& opts, unsigned fillers,
           bool copy)
      : top_(top), out_(std::move(out)), opts_(opts), fillers_(fillers), copy_(copy) {
    size_ = top.virtual_size();
    chunks_ = (size_ + kChunk - 1) / kChunk;
  }

  common::Status run();
  [[nodiscard]] std::uint64_t written() const { return written_; }
  [[nodiscard]] std::uint64_t copied() const { return copied_; }
  [[nodiscard]] std::uint64_t preallocated() const { return out_.preallocated; }

 private:
  common::Status fill(ReadContext& ctx, std::uint64_t chunk, Slot& slot) const;
  common::Status write(const Slot& slot);
  void filler();
  common::Status write_all();

  const ImageLayer& top_;
  OutputFile out_;
  const ConvertOptions& opts_;
  unsigned fillers_;
  bool copy_;
  bool copy_refused_ = false;
  std::uint64_t size_ = 0, chunks_ = 0;
  std::uint64_t written_ = 0, copied_ = 0;
  std::vector<Slot> slots_;
  std::atomic<std::uint64_t> next_{0};
  std::mutex mu_;
  std::condition_variable ready_cv_, free_cv_;
  std::uint64_t done_ = 0;  // chunks written (under mu_)
  bool stop_ = false;       // (under mu_)
};

common::Status Pipeline::fill(ReadContext& ctx, std::uint64_t chunk, Slot& slot) const {
  const std::uint64_t a = chunk * kChunk, b = std::min(size_, a + kChunk);
  slot.ops.clear();
  auto add = [&](Op op) {
    Op* last = slot.ops.empty() ? nullptr : &slot.ops.back();
    if (last && last->off + last->len == op.off && (last->src_fd < 0) == (op.src_fd < 0) &&
        (op.src_fd < 0 || (last->src_fd == op.src_fd && last->src_off + last->len == op.src_off))) {
      last->len += op.len;
    } else {
      slot.ops.push_back(op);
    }
  };
  std::uint64_t pos = a;
  while (pos < b) {
    CHL_TRY(Extent e, top_.status(ctx, pos, b - pos));
    const std::uint64_t end = pos + e.length;
    if (e.zero) {
      pos = end;
      continue;
    }
    if (!copy_) {
      CHL_TRY_VOID(top_.read(ctx, pos, e.length, slot.buf.get() + (pos - a)));
      add({pos, e.length, -1, 0});
      pos = end;
      continue;
    }
    while (pos < end) {
      CHL_TRY(Mapping m, top_.map(ctx, pos, end - pos));
      if (m.fd >= 0) {
        add({pos, m.length, m.fd, m.host});
      } else {
        CHL_TRY_VOID(top_.read(ctx, pos, m.length, slot.buf.get() + (pos - a)));
        add({pos, m.length, -1, 0});
      }
      pos += m.length;
    }
  }
  return {};
}

common::Status Pipeline::write(const Slot& slot) {
  const std::uint64_t a = slot.chunk * kChunk;
  for (const Op& op : slot.ops) {
    std::uint8_t* bytes = slot.buf.get() + (op.off - a);
    if (op.src_fd >= 0 && !copy_refused_) {
      CHL_TRY(CopyOutcome c, copy_range(op.src_fd, op.src_off, out_.fd, op.off, op.len));
      if (!c.refused) {
        written_ += c.copied;
        copied_ += c.copied;
        continue;
      }
      copy_refused_ = true;  // read and write from now on
    }
    if (op.src_fd >= 0) CHL_TRY_VOID(pread_full(op.src_fd, op.src_off, op.len, bytes));
    CHL_TRY(std::uint64_t w, write_sparse(out_, op.off, bytes, op.len));
    written_ += w;
  }
  return {};
}

void Pipeline::filler() {
  ReadContext ctx(top_.chain_length());
  for (;;) {
    const std::uint64_t k = next_.fetch_add(1);
    if (k >= chunks_) return;
    Slot& slot = slots_[k % slots_.size()];
    {
      std::unique_lock lock(mu_);
      free_cv_.wait(lock, [&] { return stop_ || k < done_ + slots_.size(); });
      if (stop_) return;
    }
    auto r = fill(ctx, k, slot);
    std::lock_guard lock(mu_);
    slot.chunk = k;
    if (!r) slot.error = std::move(r.error());
    slot.ready = true;
    ready_cv_.notify_all();
  }
}

common::Status Pipeline::write_all() {
  auto last_progress = std::chrono::steady_clock::now();
  ReadContext ctx(top_.chain_length());  // used when this thread fills too
  for (std::uint64_t k = 0; k < chunks_; ++k) {
    Slot& slot = slots_[k % slots_.size()];
    if (fillers_ <= 1) {
      slot.chunk = k;
      CHL_TRY_VOID(
          common::wrap(fill(ctx, k, slot), "at guest offset " + std::to_string(k * kChunk)));
    } else {
      std::unique_lock lock(mu_);
      ready_cv_.wait(lock, [&] { return slot.ready && slot.chunk == k; });
      if (slot.error)
        return tl::unexpected(
            std::move(*slot.error).wrap("at guest offset " + std::to_string(k * kChunk)));
    }
    CHL_TRY_VOID(write(slot));
    if (opts_.sync && ((k + 1) * kChunk) % kWriteback == 0) {
      // Start writing these 16 MiB back now, so the final fdatasync has little left to wait for.
      ::sync_file_range(out_.fd, static_cast<off_t>((k + 1) * kChunk - kWriteback),
                        static_cast<off_t>(kWriteback), SYNC_FILE_RANGE_WRITE);
    }
    {
      std::lock_guard lock(mu_);
      slot.ready = false;
      done_ = k + 1;
      free_cv_.notify_all();
    }
    const auto now = std::chrono::steady_clock::now();
    if (opts_.progress && now - last_progress >= kProgressInterval) {
      last_progress = now;
      opts_.progress({std::min(size_, (k + 1) * kChunk), size_});
    }
  }
  return {};
}

common::Status Pipeline::run() {
  slots_.resize(fillers_ <= 1 ? 1 : fillers_ + 2);
  for (Slot& s : slots_) {
    s.buf = aligned_buffer();
    if (!s.buf) return fail(std::errc::not_enough_memory, "allocating a read buffer");
  }
  std::vector<std::thread> pool;
  common::Status result;
  try {
    for (unsigned i = 0; fillers_ > 1 && i < fillers_; ++i) pool.emplace_back([this] { filler(); });
  } catch (const std::system_error& e) {
    result = common::fail(e.code(), std::string("starting a worker thread: ") + e.what());
  }
  if (result) result = write_all();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    free_cv_.notify_all();
  }
  for (auto& t : pool) t.join();
  if (result && opts_.progress) opts_.progress({size_, size_});
  return result;
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
    CHL_TRY(Allocation a, top.allocation(ctx));
    stats.allocated_bytes = a.bytes;
    stats.compressed_bytes = a.compressed;
  }
  if (opts.check_free_space) CHL_TRY_VOID(check_space(dst, stats.allocated_bytes));
  CHL_TRY(AtomicFile out, AtomicFile::create(dst));
  CHL_TRY_VOID(set_size(out.fd(), dst, stats.virtual_size));

  common::UniqueFd direct = open_direct(out, opts);
  const OutputFile dest{out.fd(), direct ? direct.get() : -1, preallocate_min(out.fd(), opts)};
  const bool copy = opts.copy == CopyMethod::CopyFileRange ||
                    (opts.copy == CopyMethod::Auto && clones_extents(top, out.fd()));
  stats.threads =
      filler_count(opts, stats.compressed_bytes, (stats.virtual_size + kChunk - 1) / kChunk);
  Pipeline pipeline(top, dest, opts, stats.threads, copy);
  CHL_TRY_VOID(pipeline.run());
  stats.bytes_written = pipeline.written();
  stats.bytes_copied = pipeline.copied();
  stats.bytes_preallocated = pipeline.preallocated();
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
  OutputFile dest{out.fd(), direct ? direct.get() : -1, preallocate_min(out.fd(), opts)};
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
  stats.bytes_preallocated = dest.preallocated;
  CHL_TRY_VOID(out.commit(opts.sync));
  if (opts.progress) opts.progress({size, size});
  return stats;
}

}  // namespace chl::disks
