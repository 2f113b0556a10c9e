#include "firmware/image_check.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/syscall.hpp"
#include "common/unique_fd.hpp"

namespace chl::firmware {

using common::fail;
using common::fail_errno;
using common::Result;
using common::Status;
using common::UniqueFd;

std::string_view to_string(KernelFormat f) {
  return f == KernelFormat::elf_pvh ? "ELF with PVH note" : "bzImage";
}

namespace {

constexpr std::uint32_t kPtNote = 4;
constexpr std::uint32_t kXenElfnotePhys32Entry = 18;

struct OpenFile {
  UniqueFd fd;
  std::uint64_t size = 0;
};

Result<OpenFile> open_regular(const std::filesystem::path& p) {
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno("opening '" + p.string() + "'");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_errno("stat '" + p.string() + "'");
  if (!S_ISREG(st.st_mode))
    return fail(std::errc::invalid_argument, "'" + p.string() + "' is not a regular file");
  return OpenFile{std::move(fd), static_cast<std::uint64_t>(st.st_size)};
}

// Read exactly n bytes at offset (fewer only at end of file: then an error).
Result<std::string> read_at(int fd, std::uint64_t off, std::size_t n,
                            const std::filesystem::path& p) {
  std::string buf(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = common::retry_eintr(
        [&] { return ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(off + got)); });
    if (r < 0) return fail_errno("reading '" + p.string() + "'");
    if (r == 0) return fail(std::errc::invalid_argument, "'" + p.string() + "' is truncated");
    got += static_cast<std::size_t>(r);
  }
  return buf;
}

std::uint64_t le(const std::string& b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

// Is `f` a little-endian ELF64 with a PVH entry note? Returns an error text when not ("" when yes).
Result<std::string> elf_pvh_problem(const OpenFile& f, const std::filesystem::path& p) {
  if (f.size < 64) return std::string("too small for an ELF header");
  CHL_TRY(auto eh, read_at(f.fd.get(), 0, 64, p));
  if (eh.compare(0, 4,
                 "\x7f"
                 "ELF") != 0)
    return std::string("not an ELF file");
  if (eh[4] != 2 || eh[5] != 1) return std::string("not a little-endian 64-bit ELF");
  const std::uint64_t phoff = le(eh, 32, 8);
  const std::uint64_t phentsize = le(eh, 54, 2);
  const std::uint64_t phnum = le(eh, 56, 2);
  if (phentsize < 56 || phnum == 0 || phnum > 256 || phoff + phentsize * phnum > f.size)
    return std::string("ELF program headers are missing or out of bounds");
  CHL_TRY(auto ph, read_at(f.fd.get(), phoff, static_cast<std::size_t>(phentsize * phnum), p));
  for (std::uint64_t i = 0; i < phnum; ++i) {
    const std::size_t at = static_cast<std::size_t>(i * phentsize);
    if (le(ph, at, 4) != kPtNote) continue;
    const std::uint64_t off = le(ph, at + 8, 8), sz = le(ph, at + 32, 8);
    if (sz > (1u << 20) || off + sz > f.size) return std::string("ELF note segment out of bounds");
    CHL_TRY(auto notes, read_at(f.fd.get(), off, static_cast<std::size_t>(sz), p));
    std::size_t pos = 0;
    while (pos + 12 <= notes.size()) {
      const std::uint64_t namesz = le(notes, pos, 4), descsz = le(notes, pos + 4, 4),
                          type = le(notes, pos + 8, 4);
      const std::size_t name_at = pos + 12;
      const std::size_t desc_at = name_at + ((namesz + 3) & ~std::uint64_t{3});
      const std::size_t next = desc_at + ((descsz + 3) & ~std::uint64_t{3});
      if (next > notes.size() || next <= pos) break;
      if (type == kXenElfnotePhys32Entry && namesz == 4 &&
          notes.compare(name_at, 4, std::string("Xen\0", 4)) == 0)
        return std::string();
      pos = next;
    }
  }
  return std::string(
      "an ELF without a PVH note (XEN_ELFNOTE_PHYS32_ENTRY): build the kernel with CONFIG_PVH=y");
}

Result<bool> is_bzimage(const OpenFile& f, const std::filesystem::path& p) {
  if (f.size < 0x210) return false;
  CHL_TRY(auto h, read_at(f.fd.get(), 0x1fe, 8, p));
  return static_cast<unsigned char>(h[0]) == 0x55 && static_cast<unsigned char>(h[1]) == 0xaa &&
         h.compare(4, 4, "HdrS") == 0;
}

}  // namespace

Result<KernelFormat> check_kernel(const std::filesystem::path& path) {
  const std::string what = "kernel '" + path.string() + "'";
  auto f = open_regular(path);
  if (!f) return tl::unexpected(f.error().wrap("kernel"));
  CHL_TRY(bool bz, is_bzimage(*f, path));
  if (bz) return KernelFormat::bzimage;
  CHL_TRY(std::string problem, elf_pvh_problem(*f, path));
  if (problem.empty()) return KernelFormat::elf_pvh;
  if (problem == "not an ELF file")
    return fail(std::errc::invalid_argument,
                what + " is neither a bzImage (no 'HdrS' at 0x202) nor an ELF vmlinux");
  return fail(std::errc::invalid_argument, what + " is " + problem);
}

Status check_uefi_flash(const std::filesystem::path& path) {
  const std::string what = "UEFI firmware '" + path.string() + "'";
  auto f = open_regular(path);
  if (!f) return tl::unexpected(f.error().wrap("UEFI firmware"));
  if (f->size < (64u << 10) || f->size > (64u << 20) || f->size % 4096 != 0)
    return fail(std::errc::invalid_argument,
                what + " has an implausible size of " + std::to_string(f->size) +
                    " bytes (a flash image is a multiple of 4 KiB between 64 KiB and 64 MiB)");
  CHL_TRY(auto sig, read_at(f->fd.get(), 0x28, 4, path));
  if (sig != "_FVH")
    return fail(std::errc::invalid_argument,
                what + " does not start with an EFI firmware volume ('_FVH' at 0x28)");
  return {};
}

Status check_pvh_firmware(const std::filesystem::path& path) {
  const std::string what = "firmware '" + path.string() + "'";
  auto f = open_regular(path);
  if (!f) return tl::unexpected(f.error().wrap("firmware"));
  if (f->size < (16u << 10) || f->size > (16u << 20))
    return fail(std::errc::invalid_argument, what + " has an implausible size of " +
                                                 std::to_string(f->size) +
                                                 " bytes (16 KiB to 16 MiB)");
  CHL_TRY(std::string problem, elf_pvh_problem(*f, path));
  if (!problem.empty()) return fail(std::errc::invalid_argument, what + " is " + problem);
  return {};
}

Status check_initrd(const std::filesystem::path& path) {
  auto f = open_regular(path);
  if (!f) return tl::unexpected(f.error().wrap("initrd"));
  if (f->size == 0)
    return fail(std::errc::invalid_argument, "initrd '" + path.string() + "' is empty");
  return {};
}

}  // namespace chl::firmware
