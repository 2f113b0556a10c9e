#include "disks/qcow2_layer.hpp"

#include <algorithm>
#include <cstring>

#include "disks/byte_order.hpp"
#include "disks/file_io.hpp"

namespace chl::disks {

namespace {

using common::fail;

// Bits 9-55 of L1 entries and of standard L2 entries: a host offset.
constexpr std::uint64_t kOffsetMask = 0x00fffffffffffe00ull;
constexpr std::uint64_t kCompressedBit = 1ull << 62;
// L2 entries read at once into a thread's cache (32 KiB, or 64 KiB with extended entries).
constexpr std::uint64_t kL2SliceEntries = 4096;

tl::unexpected<common::Error> corrupt(const std::string& what) {
  return fail(std::errc::invalid_argument, what);
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

common::Result<std::unique_ptr<Qcow2Layer>> Qcow2Layer::open(common::UniqueFd fd, std::string path,
                                                             std::uint64_t file_size,
                                                             std::size_t depth) {
  CHL_TRY(Qcow2Header h, read_qcow2_header(fd.get(), file_size));
  std::unique_ptr<Qcow2Layer> layer(
      new Qcow2Layer(std::move(fd), std::move(path), file_size, depth, std::move(h)));
  CHL_TRY_VOID(layer->load_l1());
  CHL_TRY_VOID(layer->check_refcounts());
  return layer;
}

common::Status Qcow2Layer::load_l1() {
  const std::uint64_t cs = h_.cluster_size();
  const std::uint64_t per_l2 = h_.l2_entries() * cs;
  const std::uint64_t needed = h_.size / per_l2 + (h_.size % per_l2 != 0);
  std::vector<std::uint8_t> raw(needed * 8);
  if (auto r = pread_full(fd_.get(), h_.l1_table_offset, raw.size(), raw.data()); !r) {
    return tl::unexpected(r.error().wrap("reading the L1 table"));
  }
  l1_.resize(needed);
  for (std::uint64_t i = 0; i < needed; ++i) {
    std::uint64_t e = load_be64(raw.data() + i * 8);
    std::uint64_t l2 = e & kOffsetMask;
    if (l2 % cs != 0)
      return corrupt("L1 entry " + std::to_string(i) + ": L2 table offset " + hex(l2) +
                     " is not aligned to a cluster");
    if (l2 != 0 && (l2 >= file_size_ || cs > file_size_ - l2)) {
      return corrupt("L1 entry " + std::to_string(i) + ": L2 table at offset " + hex(l2) +
                     " is past the end of the file (" + std::to_string(file_size_) + " bytes)");
    }
    l1_[i] = l2;
  }
  return {};
}

common::Status Qcow2Layer::check_refcounts() const {
  const std::uint64_t cs = h_.cluster_size();
  const std::uint64_t bytes = std::uint64_t{h_.refcount_table_clusters} * cs;
  std::vector<std::uint8_t> table(bytes);
  if (auto r = pread_full(fd_.get(), h_.refcount_table_offset, bytes, table.data()); !r) {
    return tl::unexpected(r.error().wrap("reading the refcount table"));
  }
  for (std::uint64_t i = 0; i < bytes / 8; ++i) {
    std::uint64_t block = load_be64(table.data() + i * 8);
    if (block == 0) continue;
    if (block % cs != 0) {
      return corrupt("refcount table entry " + std::to_string(i) + ": block offset " + hex(block) +
                     " is not aligned to a cluster");
    }
    if (block >= file_size_ || cs > file_size_ - block) {
      return corrupt("refcount table entry " + std::to_string(i) + ": block at offset " +
                     hex(block) + " is past the end of the file (" + std::to_string(file_size_) +
                     " bytes)");
    }
  }
  if (h_.dirty()) return {};  // refcounts may lag behind (lazy refcounts): nothing more to say
  // The header cluster is always in use: its refcount being 0 means the refcounts are garbage.
  std::uint64_t block0 = load_be64(table.data());
  if (block0 == 0) return corrupt("refcount table has no block for the header cluster");
  std::uint8_t first[8] = {};
  if (auto r = pread_full(fd_.get(), block0, sizeof first, first); !r) {
    return tl::unexpected(r.error().wrap("reading refcount block 0"));
  }
  const unsigned bits = 1u << h_.refcount_order;
  std::uint64_t refcount = 0;
  if (bits < 8) {
    refcount = first[0] & ((1u << bits) - 1);
  } else {
    for (unsigned b = 0; b < bits / 8; ++b) refcount = (refcount << 8) | first[b];
  }
  if (refcount == 0) return corrupt("refcount of the header cluster is 0");
  return {};
}

common::Result<std::pair<std::uint64_t, std::uint64_t>> Qcow2Layer::l2_entry(
    ReadContext& ctx, std::uint64_t l2_offset, std::uint64_t index) const {
  LayerCache& c = ctx.caches[depth_];
  const std::uint64_t eb = h_.l2_entry_bytes();
  if (c.l2_offset != l2_offset || index < c.first || index >= c.first + c.count) {
    const std::uint64_t n = std::min(h_.l2_entries() - index, kL2SliceEntries);
    c.l2_offset = 0;
    c.raw.resize(n * eb);
    if (auto r = pread_full(fd_.get(), l2_offset + index * eb, c.raw.size(), c.raw.data()); !r) {
      return tl::unexpected(r.error().wrap("reading the L2 table at " + hex(l2_offset)));
    }
    c.words.resize(n * eb / 8);
    for (std::size_t k = 0; k < c.words.size(); ++k) c.words[k] = load_be64(c.raw.data() + k * 8);
    c.l2_offset = l2_offset;
    c.first = index;
    c.count = n;
  }
  const std::size_t k = (index - c.first) * (eb / 8);
  return std::make_pair(c.words[k], h_.extended_l2() ? c.words[k + 1] : 0);
}

common::Result<Qcow2Layer::Piece> Qcow2Layer::piece(ReadContext& ctx, std::uint64_t off,
                                                    std::uint64_t maxlen) const {
  const std::uint64_t cs = h_.cluster_size();
  const std::uint64_t in = off & (cs - 1);
  const std::uint64_t cap = std::min(maxlen, h_.size - off);
  const std::uint64_t ci = off >> h_.cluster_bits;
  const std::uint64_t l2n = h_.l2_entries();
  const std::uint64_t l1i = ci / l2n, l2i = ci % l2n;
  Piece p;
  if (l1i >= l1_.size() || l1_[l1i] == 0) {
    // No L2 table: everything it would map is unallocated.
    p.length = std::min(cap, (l2n - l2i) * cs - in);
    return p;
  }
  CHL_TRY(auto entry, l2_entry(ctx, l1_[l1i], l2i));
  const auto [w, bitmap] = entry;
  auto where = [&] { return "guest offset " + hex(off - in) + ": "; };

  if (w & kCompressedBit) {
    const unsigned x = 62 - (h_.cluster_bits - 8);
    p.kind = Kind::Compressed;
    p.host = w & ((1ull << x) - 1);
    if (p.host >> 56)
      return corrupt(where() + "compressed cluster offset " + hex(p.host) +
                     " has reserved bits set");
    const std::uint64_t sectors = ((w >> x) & ((1ull << (h_.cluster_bits - 8)) - 1)) + 1;
    p.csize = sectors * 512 - (p.host & 511);
    if (p.host >= file_size_) {
      return corrupt(where() + "compressed cluster at host offset " + hex(p.host) +
                     " is past the end of the file (" + std::to_string(file_size_) + " bytes)");
    }
    p.length = std::min(cap, cs - in);
    return p;
  }

  const std::uint64_t host = w & kOffsetMask;
  auto check_host = [&]() -> common::Status {
    if (host % cs != 0)
      return corrupt(where() + "data cluster offset " + hex(host) + " is not aligned to a cluster");
    if (host >= file_size_) {
      return corrupt(where() + "data cluster at host offset " + hex(host) +
                     " is past the end of the file (" + std::to_string(file_size_) + " bytes)");
    }
    return {};
  };
  if (!h_.extended_l2()) {
    p.length = std::min(cap, cs - in);
    if (w & 1) {
      p.kind = Kind::Zero;
    } else if (host != 0) {
      CHL_TRY_VOID(check_host());
      p.kind = Kind::Data;
      p.host = host + in;
    }
    return p;
  }

  // Extended L2: 32 subclusters, each allocated (data at host + i * sc), zero, or unallocated.
  const std::uint32_t alloc = static_cast<std::uint32_t>(bitmap);
  const std::uint32_t zero = static_cast<std::uint32_t>(bitmap >> 32);
  if (alloc & zero)
    return corrupt(where() + "subcluster bitmap " + hex(bitmap) +
                   " marks subclusters both allocated and zero");
  if (alloc != 0) {
    if (host == 0) return corrupt(where() + "allocated subclusters without a host cluster offset");
    CHL_TRY_VOID(check_host());
  }
  const unsigned sc_bits = h_.cluster_bits - 5;
  auto kind_of = [&](unsigned i) {
    if (alloc & (1u << i)) return Kind::Data;
    if (zero & (1u << i)) return Kind::Zero;
    return Kind::Unallocated;
  };
  const unsigned si = static_cast<unsigned>(in >> sc_bits);
  p.kind = kind_of(si);
  unsigned j = si + 1;
  while (j < 32 && kind_of(j) == p.kind) ++j;
  p.length = std::min(cap, (std::uint64_t{j} << sc_bits) - in);
  if (p.kind == Kind::Data) p.host = host + in;
  return p;
}

common::Result<Extent> Qcow2Layer::status(ReadContext& ctx, std::uint64_t off,
                                          std::uint64_t len) const {
  std::uint64_t done = 0;
  bool have = false, zero = false;
  while (done < len) {
    const std::uint64_t o = off + done;
    CHL_TRY(Piece p, piece(ctx, o, len - done));
    bool z = false;
    std::uint64_t n = p.length;
    if (p.kind == Kind::Zero) {
      z = true;
    } else if (p.kind == Kind::Unallocated) {
      if (backing_ && o < backing_->virtual_size()) {
        n = std::min(n, backing_->virtual_size() - o);
        CHL_TRY(Extent e, backing_->status(ctx, o, n));
        z = e.zero;
        n = e.length;
      } else {
        z = true;
      }
    }
    if (have && z != zero) break;
    have = true;
    zero = z;
    done += n;
  }
  return Extent{zero, done};
}

common::Status Qcow2Layer::read_unallocated(ReadContext& ctx, std::uint64_t off, std::uint64_t len,
                                            std::uint8_t* buf) const {
  std::uint64_t from_backing = 0;
  if (backing_ && off < backing_->virtual_size()) {
    from_backing = std::min(len, backing_->virtual_size() - off);
    CHL_TRY_VOID(backing_->read(ctx, off, from_backing, buf));
  }
  std::memset(buf + from_backing, 0, len - from_backing);
  return {};
}

common::Status Qcow2Layer::read_compressed(ReadContext& ctx, const Piece& p,
                                           std::uint64_t in_cluster, std::uint64_t len,
                                           std::uint8_t* buf) const {
  LayerCache& c = ctx.caches[depth_];
  const std::uint64_t cs = h_.cluster_size();
  const bool whole = in_cluster == 0 && len == cs;
  if (!whole && c.cluster_host == p.host) {
    std::memcpy(buf, c.cluster.data() + in_cluster, len);
    return {};
  }
  std::uint8_t* target = buf;
  if (!whole) {
    c.cluster_host = UINT64_MAX;
    c.cluster.resize(cs);
    target = c.cluster.data();
  }
  // The last sector may run past the end of the file: what is missing reads as zeros.
  c.compressed.resize(std::min(p.csize, file_size_ - p.host));
  if (auto r = pread_full(fd_.get(), p.host, c.compressed.size(), c.compressed.data()); !r) {
    return tl::unexpected(r.error().wrap("reading compressed cluster at " + hex(p.host)));
  }
  if (auto r = ctx.decompressor.decompress(h_.compression, c.compressed,
                                           std::span<std::uint8_t>(target, cs));
      !r) {
    return tl::unexpected(r.error().wrap("compressed cluster at host offset " + hex(p.host)));
  }
  if (!whole) {
    c.cluster_host = p.host;
    std::memcpy(buf, c.cluster.data() + in_cluster, len);
  }
  return {};
}

common::Status Qcow2Layer::read(ReadContext& ctx, std::uint64_t off, std::uint64_t len,
                                std::uint8_t* buf) const {
  // Consecutive data pieces that are also consecutive in the file become one pread.
  std::uint64_t run_host = 0, run_len = 0;
  std::uint8_t* run_buf = nullptr;
  auto flush = [&]() -> common::Status {
    if (run_len == 0) return {};
    auto r = pread_full(fd_.get(), run_host, run_len, run_buf);
    run_len = 0;
    if (!r) return tl::unexpected(r.error().wrap("reading data clusters"));
    return {};
  };
  const std::uint64_t cs = h_.cluster_size();
  std::uint64_t done = 0;
  while (done < len) {
    const std::uint64_t o = off + done;
    CHL_TRY(Piece p, piece(ctx, o, len - done));
    std::uint8_t* dst = buf + done;
    if (p.kind == Kind::Data) {
      if (run_len != 0 && run_host + run_len == p.host && run_buf + run_len == dst) {
        run_len += p.length;
      } else {
        CHL_TRY_VOID(flush());
        run_host = p.host;
        run_buf = dst;
        run_len = p.length;
      }
    } else {
      CHL_TRY_VOID(flush());
      if (p.kind == Kind::Zero) {
        std::memset(dst, 0, p.length);
      } else if (p.kind == Kind::Unallocated) {
        CHL_TRY_VOID(read_unallocated(ctx, o, p.length, dst));
      } else {
        CHL_TRY_VOID(read_compressed(ctx, p, o & (cs - 1), p.length, dst));
      }
    }
    done += p.length;
  }
  return flush();
}

common::Result<Mapping> Qcow2Layer::map(ReadContext& ctx, std::uint64_t off,
                                         std::uint64_t len) const {
  CHL_TRY(Piece p, piece(ctx, off, len));
  if (p.kind == Kind::Data) return Mapping{p.length, fd_.get(), p.host};
  if (p.kind == Kind::Unallocated && backing_ && off < backing_->virtual_size())
    return backing_->map(ctx, off, std::min(p.length, backing_->virtual_size() - off));
  return Mapping{p.length, -1, 0};
}

common::Result<Allocation> Qcow2Layer::allocation(ReadContext& ctx) const {
  Allocation a;
  std::uint64_t off = 0;
  while (off < h_.size) {
    CHL_TRY(Piece p, piece(ctx, off, h_.size - off));
    if (p.kind == Kind::Data || p.kind == Kind::Compressed) a.bytes += p.length;
    if (p.kind == Kind::Compressed) a.compressed += p.length;
    off += p.length;
  }
  if (backing_) {
    CHL_TRY(Allocation below, backing_->allocation(ctx));
    a.bytes += std::min(below.bytes, h_.size);
    a.compressed += std::min(below.compressed, h_.size);
  }
  a.bytes = std::min(a.bytes, h_.size);
  a.compressed = std::min(a.compressed, a.bytes);
  return a;
}

}  // namespace chl::disks
