#include "disks/cloud_init_iso9660.hpp"
#include "disks/ucs2.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <set>

namespace chl::disks {

using common::fail;
using common::Result;

namespace {

constexpr std::uint32_t kSector = kIsoSectorSize;

// --- little helpers for the both-endian fields of ECMA-119 ---
void put_le16(std::string& s, std::size_t at, std::uint16_t v) {
  s[at] = static_cast<char>(v & 0xff);
  s[at + 1] = static_cast<char>(v >> 8);
}
void put_be16(std::string& s, std::size_t at, std::uint16_t v) {
  s[at] = static_cast<char>(v >> 8);
  s[at + 1] = static_cast<char>(v & 0xff);
}
void put_le32(std::string& s, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_be32(std::string& s, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * (3 - i))) & 0xff);
}
void put_both16(std::string& s, std::size_t at, std::uint16_t v) {
  put_le16(s, at, v);
  put_be16(s, at + 2, v);
}
void put_both32(std::string& s, std::size_t at, std::uint32_t v) {
  put_le32(s, at, v);
  put_be32(s, at + 4, v);
}
void append_both32(std::string& s, std::uint32_t v) {
  auto at = s.size();
  s.append(8, '\0');
  put_both32(s, at, v);
}

// 80 KiB: past the 68 KiB (0x11000) busybox reads before probing, like xorrisofs's padding.
constexpr std::uint32_t kMinSectors = 40;

std::uint32_t sectors_for(std::uint64_t bytes) {
  return static_cast<std::uint32_t>((bytes + kSector - 1) / kSector);
}

// 7-byte directory record time (UTC).
std::string record_time(std::int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  std::string s(7, '\0');
  s[0] = static_cast<char>(tm.tm_year);
  s[1] = static_cast<char>(tm.tm_mon + 1);
  s[2] = static_cast<char>(tm.tm_mday);
  s[3] = static_cast<char>(tm.tm_hour);
  s[4] = static_cast<char>(tm.tm_min);
  s[5] = static_cast<char>(tm.tm_sec);
  s[6] = 0;  // GMT offset in 15-minute units
  return s;
}

// 17-byte volume descriptor time "YYYYMMDDHHMMSScc" + offset (UTC).
std::string descriptor_time(std::int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d%02d%02d%02d00", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  std::string s(buf);
  s.resize(16, '0');
  s.push_back('\0');
  return s;
}

// UTF-8 -> UCS-2 big-endian (Joliet). Only the Basic Multilingual Plane.
Result<std::string> to_ucs2be(std::string_view utf8) {
  CHL_TRY(auto units, utf8_to_ucs2(utf8));
  std::string out;
  out.reserve(units.size() * 2);
  for (char16_t u : units) {
    out.push_back(static_cast<char>(u >> 8));
    out.push_back(static_cast<char>(u & 0xff));
  }
  return out;
}

// Identifier of a volume descriptor string field: padded with spaces (d/a-characters as given).
void put_text(std::string& s, std::size_t at, std::size_t len, std::string_view text) {
  for (std::size_t i = 0; i < len; ++i) s[at + i] = i < text.size() ? text[i] : ' ';
}
void put_text_ucs2(std::string& s, std::size_t at, std::size_t len, std::string_view ucs2) {
  for (std::size_t i = 0; i + 1 < len; i += 2) {
    if (i + 1 < ucs2.size()) {
      s[at + i] = ucs2[i];
      s[at + i + 1] = ucs2[i + 1];
    } else {
      s[at + i] = 0;
      s[at + i + 1] = ' ';
    }
  }
}

// Level-1 name: d-characters (A-Z 0-9 _), 8.3 for files (with ";1"), 8 for directories.
std::string d_chars(std::string_view in, std::size_t max) {
  std::string out;
  for (char c : in) {
    if (out.size() == max) break;
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    bool ok = (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out.push_back(ok ? c : '_');
  }
  return out;
}

// Rock Ridge entries.
std::string rr_px(unsigned mode, std::uint32_t nlink) {
  std::string s = {'P', 'X', 36, 1};
  append_both32(s, mode);
  append_both32(s, nlink);
  append_both32(s, 0);  // uid
  append_both32(s, 0);  // gid
  return s;
}
std::string rr_tf(const std::string& t7) {
  std::string s = {'T', 'F', 26, 1, 0x0e};  // modify, access, attributes
  s += t7;
  s += t7;
  s += t7;
  return s;
}
std::string rr_nm(std::string_view name) {
  std::string s = {'N', 'M', static_cast<char>(5 + name.size()), 1, 0};
  s.append(name);
  return s;
}
std::string rr_sp() {
  return std::string{'S', 'P', 7, 1, static_cast<char>(0xbe), static_cast<char>(0xef), 0};
}
std::string rr_ce(std::uint32_t block, std::uint32_t offset, std::uint32_t length) {
  std::string s = {'C', 'E', 28, 1};
  append_both32(s, block);
  append_both32(s, offset);
  append_both32(s, length);
  return s;
}
std::string rr_er() {
  static constexpr std::string_view id = "RRIP_1991A";
  static constexpr std::string_view des =
      "THE ROCK RIDGE INTERCHANGE PROTOCOL PROVIDES SUPPORT FOR POSIX FILE SYSTEM SEMANTICS";
  static constexpr std::string_view src =
      "PLEASE CONTACT DISC PUBLISHER FOR SPECIFICATION SOURCE.  SEE PUBLISHER IDENTIFIER IN "
      "PRIMARY "
      "VOLUME DESCRIPTOR FOR CONTACT INFORMATION.";
  std::string s = {'E',
                   'R',
                   static_cast<char>(8 + id.size() + des.size() + src.size()),
                   1,
                   static_cast<char>(id.size()),
                   static_cast<char>(des.size()),
                   static_cast<char>(src.size()),
                   1};
  s.append(id).append(des).append(src);
  return s;
}

std::string dir_record(std::uint32_t extent, std::uint32_t size, bool is_dir,
                       std::string_view ident, std::string_view system_use, const std::string& t7) {
  std::size_t len = 33 + ident.size() + (ident.size() % 2 == 0 ? 1 : 0) + system_use.size();
  if (len % 2) ++len;
  std::string r(len, '\0');
  r[0] = static_cast<char>(len);
  put_both32(r, 2, extent);
  put_both32(r, 10, size);
  std::memcpy(r.data() + 18, t7.data(), 7);
  r[25] = is_dir ? 0x02 : 0x00;
  put_both16(r, 28, 1);
  r[32] = static_cast<char>(ident.size());
  std::memcpy(r.data() + 33, ident.data(), ident.size());
  // An empty string_view may hold a null pointer: memcpy(…, nullptr, 0) is undefined.
  if (!system_use.empty()) {
    std::memcpy(r.data() + 33 + ident.size() + (ident.size() % 2 == 0 ? 1 : 0), system_use.data(),
                system_use.size());
  }
  return r;
}

// One directory of one tree (primary or Joliet), the entries it holds and where it goes.
struct Node;
struct Entry {
  std::string ident;     // on-disk identifier (level-1 name or UCS-2BE)
  std::string rr_name;   // Rock Ridge NM (primary tree only)
  Node* dir = nullptr;   // a subdirectory, or
  std::size_t file = 0;  // index into the file table
};
struct Node {
  std::string ident;  // identifier in the parent (path table)
  Node* parent = nullptr;
  std::vector<Entry> entries;
  std::uint32_t number = 0;  // path table number, 1-based
  std::uint32_t extent = 0;
  std::uint32_t size = 0;  // bytes, a multiple of the sector size
  std::uint32_t subdirs = 0;
};

struct FileSlot {
  const MediaFile* file;
  std::uint32_t extent = 0;
};

class IsoBuilder {
 public:
  IsoBuilder(const Iso9660Options& opts) : opts_(opts), t7_(record_time(opts.mtime)) {}

  Result<ImagePlan> build(const std::vector<MediaFile>& files) {
    if (opts_.volume_id.empty() || opts_.volume_id.size() > 32)
      return fail(std::errc::invalid_argument,
                  "ISO 9660 volume id '" + opts_.volume_id + "' must be 1 to 32 bytes");
    CHL_TRY(auto jvol, to_ucs2be(opts_.volume_id));
    if (jvol.size() > 32)
      return fail(std::errc::invalid_argument,
                  "Joliet volume id '" + opts_.volume_id + "' is longer than 16 characters");
    for (const auto& f : files)
      if (f.data.size() > 0xffffffffULL)
        return fail(std::errc::file_too_large, "'" + f.path + "' does not fit one ISO 9660 extent");
    CHL_TRY(MediaDir tree, build_media_tree(files));
    CHL_TRY(primary_root_, add_tree(tree, nullptr, false));
    CHL_TRY(joliet_root_, add_tree(tree, nullptr, true));
    std::vector<Node*> pdirs = ordered(primary_root_);
    std::vector<Node*> jdirs = ordered(joliet_root_);

    // Sizes that do not depend on locations.
    for (Node* d : pdirs) d->size = sectors_for(dir_bytes(*d, false)) * kSector;
    for (Node* d : jdirs) d->size = sectors_for(dir_bytes(*d, true)) * kSector;
    std::uint32_t ppt_size = path_table_bytes(pdirs), jpt_size = path_table_bytes(jdirs);

    // Layout: 16 descriptors' system area, PVD, SVD, terminator, 4 path tables, the Rock Ridge
    // continuation area (ER), the directories, then the file data.
    std::uint32_t next = 19;
    std::uint32_t ppt_l = next;
    next += sectors_for(ppt_size);
    std::uint32_t ppt_m = next;
    next += sectors_for(ppt_size);
    std::uint32_t jpt_l = next;
    next += sectors_for(jpt_size);
    std::uint32_t jpt_m = next;
    next += sectors_for(jpt_size);
    ce_sector_ = next++;
    for (Node* d : pdirs) {
      d->extent = next;
      next += d->size / kSector;
    }
    for (Node* d : jdirs) {
      d->extent = next;
      next += d->size / kSector;
    }
    const std::uint32_t meta_end = next;
    for (auto& f : files_) {
      f.extent = f.file->data.empty() ? meta_end : next;  // empty files: a valid block, length 0
      next += sectors_for(f.file->data.size());
    }
    // At least kMinSectors: busybox's volume_id (findfs, mdev) reads the first 0x11000 bytes in
    // one go before it probes for ISO 9660 and gives up on a shorter disk, so an image that ends
    // earlier is never found by LABEL there (blkid finds it). The padding is sparse.
    const std::uint32_t total = std::max({next, meta_end + 1, kMinSectors});

    std::string meta(static_cast<std::size_t>(meta_end) * kSector, '\0');
    write_descriptor(meta, 16, false, opts_.volume_id, total, ppt_size, ppt_l, ppt_m,
                     *primary_root_);
    write_descriptor(meta, 17, true, jvol, total, jpt_size, jpt_l, jpt_m, *joliet_root_);
    const std::size_t term = std::size_t{18} * kSector;
    meta[term] = static_cast<char>(0xff);
    std::memcpy(meta.data() + term + 1, "CD001", 5);
    meta[term + 6] = 1;
    write_path_table(meta, ppt_l, pdirs, true);
    write_path_table(meta, ppt_m, pdirs, false);
    write_path_table(meta, jpt_l, jdirs, true);
    write_path_table(meta, jpt_m, jdirs, false);
    std::string er = rr_er();
    std::memcpy(meta.data() + static_cast<std::size_t>(ce_sector_) * kSector, er.data(), er.size());
    for (Node* d : pdirs) write_dir(meta, *d, false);
    for (Node* d : jdirs) write_dir(meta, *d, true);

    ImagePlan plan;
    plan.size = static_cast<std::uint64_t>(total) * kSector;
    plan.extents.push_back(ImageExtent{0, std::move(meta), {}});
    for (const auto& f : files_)
      if (!f.file->data.empty())
        plan.extents.push_back(
            ImageExtent{static_cast<std::uint64_t>(f.extent) * kSector, {}, f.file->data});
    return plan;
  }

 private:
  Result<Node*> add_tree(const MediaDir& src, Node* parent, bool joliet) {
    nodes_.push_back(Node{});
    Node* n = &nodes_.back();
    n->parent = parent;
    std::set<std::string> used;
    auto unique = [&](std::string base, const std::string& ext, bool is_dir) {
      for (int k = 1;; ++k) {
        std::string id = base;
        if (!is_dir) id.append(".").append(ext).append(";1");
        if (used.insert(id).second) return id;
        std::string suffix = std::to_string(k);
        base.resize(std::min(base.size(), 8 - suffix.size()));
        base += suffix;
      }
    };
    for (const auto& d : src.dirs) {
      if (d.name.size() > 100)
        return fail(std::errc::filename_too_long, "name '" + d.name + "' is too long");
      CHL_TRY(Node * child, add_tree(d, n, joliet));
      Entry e;
      if (joliet) {
        CHL_TRY(e.ident, joliet_name(d.name));
      } else {
        std::string base = d_chars(d.name, 8);
        e.ident = unique(base.empty() ? "_" : base, "", true);
        e.rr_name = d.name;
      }
      child->ident = e.ident;
      e.dir = child;
      n->entries.push_back(std::move(e));
      ++n->subdirs;
    }
    for (const auto& f : src.files) {
      Entry e;
      if (joliet) {
        CHL_TRY(e.ident, joliet_name(f.name));
      } else {
        auto dot = f.name.rfind('.');
        std::string base =
            d_chars(dot == std::string::npos || dot == 0 ? f.name : f.name.substr(0, dot), 8);
        std::string ext =
            dot == std::string::npos || dot == 0 ? "" : d_chars(f.name.substr(dot + 1), 3);
        e.ident = unique(base, ext, false);
        e.rr_name = f.name;
        if (f.name.size() > 100)
          return fail(std::errc::filename_too_long, "name '" + f.name + "' is too long");
      }
      e.file = file_index(f.file);
      n->entries.push_back(std::move(e));
    }
    std::sort(n->entries.begin(), n->entries.end(),
              [](const Entry& a, const Entry& b) { return a.ident < b.ident; });
    return n;
  }

  Result<std::string> joliet_name(const std::string& name) {
    CHL_TRY(auto u, to_ucs2be(name));
    if (u.size() > 128)
      return fail(std::errc::filename_too_long,
                  "name '" + name + "' is longer than Joliet's 64 characters");
    return u;
  }

  std::size_t file_index(const MediaFile* f) {
    for (std::size_t i = 0; i < files_.size(); ++i)
      if (files_[i].file == f) return i;
    files_.push_back(FileSlot{f});
    return files_.size() - 1;
  }

  // Directories in path table order: by level, then parent number, then identifier.
  static std::vector<Node*> ordered(Node* root) {
    std::vector<Node*> out{root};
    root->number = 1;
    for (std::size_t i = 0; i < out.size(); ++i) {
      for (auto& e : out[i]->entries) {
        if (!e.dir) continue;
        out.push_back(e.dir);
        e.dir->number = static_cast<std::uint32_t>(out.size());
      }
    }
    return out;
  }

  std::string system_use(const Node& dir, const Entry* e, bool is_self, bool joliet) const {
    if (joliet) return {};
    std::string su;
    bool root_self = is_self && dir.parent == nullptr;
    if (root_self) su += rr_sp();
    const Node* target = e ? e->dir : (is_self ? &dir : (dir.parent ? dir.parent : &dir));
    if (e && !e->dir) {
      const unsigned own = files_[e->file].file->mode;
      const unsigned mode = own != 0 ? (own & 07777) : opts_.file_mode;
      su += rr_px(0100000 | mode, 1);
    } else {
      su += rr_px(0040000 | opts_.dir_mode, 2 + target->subdirs);
    }
    su += rr_tf(t7_);
    if (e) su += rr_nm(e->rr_name);
    if (root_self) su += rr_ce(ce_sector_, 0, static_cast<std::uint32_t>(rr_er().size()));
    return su;
  }

  std::vector<std::string> records(const Node& d, bool joliet) const {
    std::vector<std::string> out;
    const Node* parent = d.parent ? d.parent : &d;
    out.push_back(dir_record(d.extent, d.size, true, std::string_view("\0", 1),
                             system_use(d, nullptr, true, joliet), t7_));
    out.push_back(dir_record(parent->extent, parent->size, true, std::string_view("\1", 1),
                             system_use(d, nullptr, false, joliet), t7_));
    for (const auto& e : d.entries) {
      if (e.dir) {
        out.push_back(dir_record(e.dir->extent, e.dir->size, true, e.ident,
                                 system_use(d, &e, false, joliet), t7_));
      } else {
        const auto& f = files_[e.file];
        out.push_back(dir_record(f.extent, static_cast<std::uint32_t>(f.file->data.size()), false,
                                 e.ident, system_use(d, &e, false, joliet), t7_));
      }
    }
    return out;
  }

  // Bytes a directory needs: records never cross a sector boundary.
  std::uint64_t dir_bytes(const Node& d, bool joliet) const {
    std::uint64_t pos = 0;
    for (const auto& r : records(d, joliet)) {
      if (pos % kSector + r.size() > kSector) pos = (pos / kSector + 1) * kSector;
      pos += r.size();
    }
    return pos;
  }

  void write_dir(std::string& meta, const Node& d, bool joliet) const {
    std::uint64_t pos = 0;
    std::size_t base = static_cast<std::size_t>(d.extent) * kSector;
    for (const auto& r : records(d, joliet)) {
      if (pos % kSector + r.size() > kSector) pos = (pos / kSector + 1) * kSector;
      std::memcpy(meta.data() + base + pos, r.data(), r.size());
      pos += r.size();
    }
  }

  static std::uint32_t path_table_bytes(const std::vector<Node*>& dirs) {
    std::uint32_t n = 0;
    for (const Node* d : dirs) {
      std::size_t len = d->parent ? d->ident.size() : 1;
      n += static_cast<std::uint32_t>(8 + len + (len % 2));
    }
    return n;
  }

  static void write_path_table(std::string& meta, std::uint32_t sector,
                               const std::vector<Node*>& dirs, bool little) {
    std::size_t at = static_cast<std::size_t>(sector) * kSector;
    for (const Node* d : dirs) {
      std::string_view id = d->parent ? std::string_view(d->ident) : std::string_view("\0", 1);
      meta[at] = static_cast<char>(id.size());
      meta[at + 1] = 0;
      std::uint16_t parent = static_cast<std::uint16_t>(d->parent ? d->parent->number : 1);
      if (little) {
        put_le32(meta, at + 2, d->extent);
        put_le16(meta, at + 6, parent);
      } else {
        put_be32(meta, at + 2, d->extent);
        put_be16(meta, at + 6, parent);
      }
      std::memcpy(meta.data() + at + 8, id.data(), id.size());
      at += 8 + id.size() + (id.size() % 2);
    }
  }

  void write_descriptor(std::string& meta, std::uint32_t sector, bool joliet,
                        std::string_view volume_id, std::uint32_t total, std::uint32_t pt_size,
                        std::uint32_t pt_l, std::uint32_t pt_m, const Node& root) const {
    std::string d(kSector, '\0');
    d[0] = joliet ? 2 : 1;
    std::memcpy(d.data() + 1, "CD001", 5);
    d[6] = 1;
    auto text = [&](std::size_t at, std::size_t len, std::string_view ascii) {
      if (joliet) {
        auto u = to_ucs2be(ascii);
        put_text_ucs2(d, at, len, u ? *u : std::string());
      } else {
        put_text(d, at, len, ascii);
      }
    };
    text(8, 32, "");  // system identifier
    if (joliet) {
      put_text_ucs2(d, 40, 32, volume_id);
    } else {
      put_text(d, 40, 32, volume_id);
    }
    put_both32(d, 80, total);
    if (joliet) {
      d[88] = '%';
      d[89] = '/';
      d[90] = 'E';  // UCS-2 level 3
    }
    put_both16(d, 120, 1);
    put_both16(d, 124, 1);
    put_both16(d, 128, static_cast<std::uint16_t>(kSector));
    put_both32(d, 132, pt_size);
    put_le32(d, 140, pt_l);
    put_be32(d, 148, pt_m);
    std::string rootrec =
        dir_record(root.extent, root.size, true, std::string_view("\0", 1), {}, t7_);
    std::memcpy(d.data() + 156, rootrec.data(), 34);
    text(190, 128, "");             // volume set
    text(318, 128, "");             // publisher
    text(446, 128, "CH-LAUNCHER");  // data preparer
    text(574, 128, "");             // application
    text(702, 37, "");
    text(739, 37, "");
    text(776, 37, "");
    std::string now = descriptor_time(opts_.mtime);
    std::string unset = std::string(16, '0') + std::string(1, '\0');
    std::memcpy(d.data() + 813, now.data(), 17);
    std::memcpy(d.data() + 830, now.data(), 17);
    std::memcpy(d.data() + 847, unset.data(), 17);
    std::memcpy(d.data() + 864, now.data(), 17);
    d[881] = 1;
    std::memcpy(meta.data() + static_cast<std::size_t>(sector) * kSector, d.data(), kSector);
  }

  Iso9660Options opts_;
  std::string t7_;
  std::deque<Node> nodes_;  // stable addresses
  std::vector<FileSlot> files_;
  Node* primary_root_ = nullptr;
  Node* joliet_root_ = nullptr;
  std::uint32_t ce_sector_ = 0;
};

}  // namespace

Result<ImagePlan> plan_iso9660(const std::vector<MediaFile>& files, const Iso9660Options& opts) {
  IsoBuilder b(opts);
  return common::wrap(b.build(files), "ISO 9660");
}

}  // namespace chl::disks
