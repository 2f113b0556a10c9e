#include "disks/file_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/syscall.hpp"

namespace chl::disks {

common::Status pread_full(int fd, std::uint64_t offset, std::size_t len, std::uint8_t* buf) {
  std::size_t got = 0;
  while (got < len) {
    ssize_t n = common::retry_eintr(
        [&] { return ::pread(fd, buf + got, len - got, static_cast<off_t>(offset + got)); });
    if (n < 0)
      return common::fail_errno("reading " + std::to_string(len) + " bytes at offset " +
                                std::to_string(offset));
    if (n == 0) {
      std::memset(buf + got, 0, len - got);
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  return {};
}

bool all_zero(const std::uint8_t* p, std::size_t n) {
  if (n == 0) return true;
  // Most data blocks differ from zero within their first bytes.
  const std::size_t head = n < 16 ? n : 16;
  for (std::size_t i = 0; i < head; ++i) {
    if (p[i] != 0) return false;
  }
  return n <= 16 || std::memcmp(p, p + 16, n - 16) == 0;
}

common::Status pwrite_full(int fd, std::uint64_t offset, const std::uint8_t* buf, std::size_t len) {
  std::size_t done = 0;
  while (done < len) {
    ssize_t n = common::retry_eintr(
        [&] { return ::pwrite(fd, buf + done, len - done, static_cast<off_t>(offset + done)); });
    if (n < 0)
      return common::fail_errno("writing " + std::to_string(len) + " bytes at offset " +
                                std::to_string(offset));
    done += static_cast<std::size_t>(n);
  }
  return {};
}

namespace {

bool aligned(std::uint64_t v) { return v % kDirectAlign == 0; }

// A long run to be written buffered: allocate it first (see OutputFile::preallocate_min).
void preallocate(OutputFile& out, std::uint64_t offset, std::size_t len) {
  if (out.preallocate_min == 0 || len < out.preallocate_min) return;
  const int r = common::retry_eintr([&] {
    return ::fallocate(out.fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                       static_cast<off_t>(len));
  });
  if (r == 0) {
    out.preallocated += len;
  } else if (errno == EOPNOTSUPP || errno == ENOSYS) {
    out.preallocate_min = 0;
  }
}

// One run of data blocks: its aligned middle through the direct fd when there is one.
common::Status write_run(OutputFile& out, std::uint64_t offset, const std::uint8_t* buf,
                         std::size_t len) {
  if (out.direct_fd >= 0 && len >= kDirectAlign && aligned(offset) &&
      aligned(reinterpret_cast<std::uintptr_t>(buf))) {
    const std::size_t body = len - len % kDirectAlign;
    std::size_t done = 0;
    while (done < body) {
      ssize_t n = common::retry_eintr([&] {
        return ::pwrite(out.direct_fd, buf + done, body - done, static_cast<off_t>(offset + done));
      });
      if (n < 0 && errno == EINVAL) break;  // not for this filesystem after all: buffered below
      if (n < 0)
        return common::fail_errno("writing " + std::to_string(body) + " bytes at offset " +
                                  std::to_string(offset) + " (O_DIRECT)");
      done += static_cast<std::size_t>(n);
      if (done % kDirectAlign != 0) break;  // a short direct write: finish buffered
    }
    return pwrite_full(out.fd, offset + done, buf + done, len - done);
  }
  preallocate(out, offset, len);
  return pwrite_full(out.fd, offset, buf, len);
}

}  // namespace

common::Result<std::uint64_t> write_sparse(OutputFile& out, std::uint64_t offset,
                                           const std::uint8_t* buf, std::size_t len) {
  std::uint64_t written = 0;
  std::size_t i = 0, run_start = 0;
  bool in_run = false;
  while (i < len) {
    const std::uint64_t abs = offset + i;
    const std::size_t n = static_cast<std::size_t>(
        std::min<std::uint64_t>(len - i, kSparseBlock - abs % kSparseBlock));
    const bool zero = all_zero(buf + i, n);
    if (!zero && !in_run) {
      run_start = i;
      in_run = true;
    } else if (zero && in_run) {
      CHL_TRY_VOID(write_run(out, offset + run_start, buf + run_start, i - run_start));
      written += i - run_start;
      in_run = false;
    }
    i += n;
  }
  if (in_run) {
    CHL_TRY_VOID(write_run(out, offset + run_start, buf + run_start, len - run_start));
    written += len - run_start;
  }
  return written;
}

namespace {

// copy_file_range errors that mean "not between these two files": the caller reads and writes.
bool refusal(int err) {
  return err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == EBADF ||
         err == EPERM || err == ETXTBSY;
}

}  // namespace

common::Result<CopyOutcome> copy_range(int src_fd, std::uint64_t src_off, int dst_fd,
                                       std::uint64_t dst_off, std::uint64_t len) {
  CopyOutcome out;
  const std::uint64_t end = src_off + len;
  std::uint64_t q = src_off;
  while (q < end) {
    // The next data extent of the source; without SEEK_DATA support, everything is data.
    off_t data = ::lseek(src_fd, static_cast<off_t>(q), SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole (or the end of the file) is left
    if (data < 0) data = static_cast<off_t>(q);
    if (static_cast<std::uint64_t>(data) >= end) break;
    off_t hole = ::lseek(src_fd, data, SEEK_HOLE);
    const std::uint64_t stop = hole < 0 ? end : std::min(end, static_cast<std::uint64_t>(hole));
    loff_t in = data,
           to = static_cast<loff_t>(dst_off + (static_cast<std::uint64_t>(data) - src_off));
    while (static_cast<std::uint64_t>(in) < stop) {
      const ssize_t n = common::retry_eintr([&] {
        return ::copy_file_range(src_fd, &in, dst_fd, &to,
                                 static_cast<std::size_t>(stop - static_cast<std::uint64_t>(in)),
                                 0);
      });
      if (n < 0 && refusal(errno)) {
        out.refused = true;
        return out;
      }
      if (n < 0)
        return common::fail_errno("writing " + std::to_string(len) + " bytes at offset " +
                                  std::to_string(dst_off) + " (copy_file_range)");
      if (n == 0) return out;  // the source ended: the rest reads as zeros, a hole
      out.copied += static_cast<std::uint64_t>(n);
    }
    q = stop;
  }
  return out;
}

}  // namespace chl::disks
