#include "disks/cloud_init_vfat.hpp"
#include "disks/ucs2.hpp"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <set>

namespace chl::disks {

using common::fail;
using common::Result;

namespace {

constexpr std::uint32_t kSectorSize = 512;
constexpr std::uint32_t kMaxFat12Clusters = 4084;  // more clusters than this is FAT16
constexpr std::uint32_t kMaxFat16Clusters = 65524;
constexpr std::uint32_t kBoundaryMargin = 16;  // stay clear of the FAT12/16 boundary

void put16(std::string& s, std::size_t at, std::uint16_t v) {
  s[at] = static_cast<char>(v & 0xff);
  s[at + 1] = static_cast<char>(v >> 8);
}
void put32(std::string& s, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

bool short_char_ok(char c) {
  if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("$%'-_@~`!(){}^#&", c) != nullptr && c != '\0';
}

// Is `name` already a plain upper-case 8.3 name? Then it is stored without long name entries.
bool is_plain_short(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  auto dot = name.find('.');
  std::string base = name.substr(0, dot);
  std::string ext = dot == std::string::npos ? "" : name.substr(dot + 1);
  if (base.empty() || base.size() > 8 || ext.size() > 3) return false;
  if (dot != std::string::npos && ext.empty()) return false;
  for (char c : base)
    if (!short_char_ok(c)) return false;
  for (char c : ext)
    if (!short_char_ok(c)) return false;
  return true;
}

std::string short_field(const std::string& base, const std::string& ext) {
  std::string f(11, ' ');
  std::memcpy(f.data(), base.data(), std::min<std::size_t>(8, base.size()));
  std::memcpy(f.data() + 8, ext.data(), std::min<std::size_t>(3, ext.size()));
  return f;
}

std::string basis_chars(std::string_view in, std::size_t max) {
  std::string out;
  for (char c : in) {
    if (out.size() == max) break;
    if (c == ' ' || c == '.') continue;
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    out.push_back(short_char_ok(c) ? c : '_');
  }
  return out;
}

std::uint8_t lfn_checksum(const std::string& short11) {
  std::uint8_t sum = 0;
  for (char c : short11)
    sum = static_cast<std::uint8_t>(((sum & 1) << 7) + (sum >> 1) + static_cast<std::uint8_t>(c));
  return sum;
}

struct DosTime {
  std::uint16_t time, date;
};
DosTime dos_time(std::int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  if (tm.tm_year + 1900 < 1980)
    return DosTime{0, static_cast<std::uint16_t>((1 << 5) | 1)};  // 1980-01-01
  int year = std::min(tm.tm_year + 1900, 2107);
  return DosTime{
      static_cast<std::uint16_t>((tm.tm_hour << 11) | (tm.tm_min << 5) | (tm.tm_sec / 2)),
      static_cast<std::uint16_t>(((year - 1980) << 9) | ((tm.tm_mon + 1) << 5) | tm.tm_mday)};
}

struct Dir;
struct Item {
  std::string name;     // long name
  std::string short11;  // 8.3 field
  bool needs_lfn = false;
  std::size_t lfn_units = 0;  // UCS-2 code units of the long name
  Dir* dir = nullptr;         // a subdirectory, or
  const MediaFile* file = nullptr;
  std::uint32_t cluster = 0;
};
struct Dir {
  Dir* parent = nullptr;
  std::vector<Item> items;
  std::uint32_t cluster = 0;   // 0 for the root
  std::uint32_t clusters = 0;  // clusters the directory takes (not the root)
  [[nodiscard]] std::uint32_t entry_count(bool root) const {
    std::uint32_t n = root ? 1 : 2;  // the volume label, or "." and ".."
    for (const auto& it : items)
      n += 1 + (it.needs_lfn ? static_cast<std::uint32_t>((it.lfn_units + 12) / 13) : 0);
    return n;
  }
};

class FatBuilder {
 public:
  explicit FatBuilder(const VfatOptions& opts) : opts_(opts), when_(dos_time(opts.mtime)) {}

  Result<ImagePlan> build(const std::vector<MediaFile>& files) {
    if (opts_.label.empty() || opts_.label.size() > 11)
      return fail(std::errc::invalid_argument,
                  "FAT label '" + opts_.label + "' must be 1 to 11 bytes");
    CHL_TRY(MediaDir tree, build_media_tree(files));
    CHL_TRY(Dir * root, add_dir(tree, nullptr));
    std::vector<Dir*> dirs;
    collect(root, dirs);

    // Choose the cluster size: the smallest that keeps the count within FAT16.
    std::uint32_t spc = 1;
    std::uint32_t clusters = 0;
    for (;; spc *= 2) {
      if (spc > 64) return fail(std::errc::file_too_large, "the files do not fit a FAT16 volume");
      const std::uint64_t cs = std::uint64_t{spc} * kSectorSize;
      std::uint64_t need = 0;
      for (Dir* d : dirs)
        if (d != root)
          need +=
              std::max<std::uint64_t>(1, (std::uint64_t{d->entry_count(false)} * 32 + cs - 1) / cs);
      for (const auto* f : file_list_) need += (f->data.size() + cs - 1) / cs;
      // A little room, and a floor so that tiny volumes still look ordinary to every reader.
      std::uint64_t n = std::max<std::uint64_t>(need + need / 32 + 8, 64);
      if (n > kMaxFat12Clusters - kBoundaryMargin && n <= kMaxFat12Clusters + kBoundaryMargin)
        n = kMaxFat12Clusters + kBoundaryMargin + 1;
      if (n <= kMaxFat16Clusters - kBoundaryMargin) {
        clusters = static_cast<std::uint32_t>(n);
        break;
      }
    }
    fat12_ = clusters <= kMaxFat12Clusters;
    const std::uint32_t cs = spc * kSectorSize;
    const std::uint64_t fat_bytes =
        fat12_ ? (std::uint64_t{clusters} + 2) * 3 / 2 + 1 : (std::uint64_t{clusters} + 2) * 2;
    const std::uint32_t fat_sectors =
        static_cast<std::uint32_t>((fat_bytes + kSectorSize - 1) / kSectorSize);
    const std::uint32_t root_entries =
        std::max<std::uint32_t>(fat12_ ? 64 : 512, (root->entry_count(true) + 15) / 16 * 16);
    if (root_entries > 0xffff)
      return fail(std::errc::file_too_large, "too many files in the root directory");
    const std::uint32_t root_sectors = root_entries * 32 / kSectorSize;
    const std::uint32_t reserved = 1;
    const std::uint32_t root_start = reserved + 2 * fat_sectors;
    const std::uint32_t data_start = root_start + root_sectors;
    const std::uint64_t total_sectors = data_start + std::uint64_t{clusters} * spc;

    // Allocate: directories first (so the metadata is one contiguous region), then files.
    std::uint32_t next = 2;
    for (Dir* d : dirs) {
      if (d == root) continue;
      d->clusters = std::max<std::uint32_t>(1, (d->entry_count(false) * 32 + cs - 1) / cs);
      d->cluster = next;
      next += d->clusters;
    }
    const std::uint32_t meta_clusters_end = next;
    for (Dir* d : dirs)
      for (auto& it : d->items) {
        if (it.dir) {
          it.cluster = it.dir->cluster;
        } else if (!it.file->data.empty()) {
          it.cluster = next;
          next += static_cast<std::uint32_t>((it.file->data.size() + cs - 1) / cs);
        }
      }
    if (next - 2 > clusters)
      return fail(std::errc::no_space_on_device, "FAT layout: clusters overflow (bug)");

    const std::uint64_t meta_bytes =
        std::uint64_t{data_start} * kSectorSize + std::uint64_t{meta_clusters_end - 2} * cs;
    std::string meta(meta_bytes, '\0');
    write_boot_sector(meta, spc, root_entries, fat_sectors, total_sectors);

    // The FAT: chains for every directory and file.
    std::string fat(std::size_t{fat_sectors} * kSectorSize, '\0');
    set_fat(fat, 0, fat12_ ? 0xff8 : 0xfff8);
    set_fat(fat, 1, fat12_ ? 0xfff : 0xffff);
    auto chain = [&](std::uint32_t first, std::uint32_t count) {
      for (std::uint32_t k = 0; k < count; ++k)
        set_fat(fat, first + k, k + 1 == count ? (fat12_ ? 0xfff : 0xffff) : first + k + 1);
    };
    for (Dir* d : dirs)
      if (d != root) chain(d->cluster, d->clusters);
    for (Dir* d : dirs)
      for (const auto& it : d->items)
        if (it.file && !it.file->data.empty())
          chain(it.cluster, static_cast<std::uint32_t>((it.file->data.size() + cs - 1) / cs));
    std::memcpy(meta.data() + std::size_t{reserved} * kSectorSize, fat.data(), fat.size());
    std::memcpy(meta.data() + (std::size_t{reserved} + fat_sectors) * kSectorSize, fat.data(),
                fat.size());

    // Directories.
    for (Dir* d : dirs) {
      std::string entries = dir_entries(*d, d == root);
      std::size_t at =
          d == root ? std::size_t{root_start} * kSectorSize
                    : std::size_t{data_start} * kSectorSize + std::size_t{d->cluster - 2} * cs;
      std::memcpy(meta.data() + at, entries.data(), entries.size());
    }

    ImagePlan plan;
    plan.size = total_sectors * kSectorSize;
    plan.extents.push_back(ImageExtent{0, std::move(meta), {}});
    for (Dir* d : dirs)
      for (const auto& it : d->items)
        if (it.file && !it.file->data.empty())
          plan.extents.push_back(ImageExtent{
              std::uint64_t{data_start} * kSectorSize + std::uint64_t{it.cluster - 2} * cs,
              {},
              it.file->data});
    return plan;
  }

 private:
  Result<Dir*> add_dir(const MediaDir& src, Dir* parent) {
    dirs_.push_back(Dir{});
    Dir* d = &dirs_.back();
    d->parent = parent;
    std::set<std::string> used;
    auto add = [&](const std::string& name, Dir* sub, const MediaFile* file) -> common::Status {
      if (name.size() > 255)
        return fail(std::errc::filename_too_long, "name '" + name + "' is longer than 255");
      CHL_TRY(auto u16, utf8_to_ucs2(name));
      Item it;
      it.name = name;
      it.dir = sub;
      it.file = file;
      if (is_plain_short(name)) {
        auto dot = name.find('.');
        it.short11 =
            short_field(name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1));
        if (!used.insert(it.short11).second)
          return fail(std::errc::invalid_argument, "name '" + name + "' given twice");
      } else {
        it.needs_lfn = true;
        it.lfn_units = u16.size();
        lfn_units_[name] = u16;
        auto dot = name.rfind('.');
        bool has_ext = dot != std::string::npos && dot != 0;
        std::string base = basis_chars(
            has_ext ? std::string_view(name).substr(0, dot) : std::string_view(name), 8);
        std::string ext = has_ext ? basis_chars(std::string_view(name).substr(dot + 1), 3) : "";
        if (base.empty()) base = "_";
        for (int k = 1;; ++k) {
          std::string tail = "~" + std::to_string(k);
          std::string b = base.substr(0, std::min(base.size(), 8 - tail.size())) + tail;
          std::string f = short_field(b, ext);
          if (used.insert(f).second) {
            it.short11 = f;
            break;
          }
        }
      }
      d->items.push_back(std::move(it));
      return {};
    };
    for (const auto& sd : src.dirs) {
      CHL_TRY(Dir * child, add_dir(sd, d));
      CHL_TRY_VOID(add(sd.name, child, nullptr));
    }
    for (const auto& f : src.files) {
      CHL_TRY_VOID(add(f.name, nullptr, f.file));
      file_list_.push_back(f.file);
    }
    return d;
  }

  static void collect(Dir* d, std::vector<Dir*>& out) {
    out.push_back(d);
    for (auto& it : d->items)
      if (it.dir) collect(it.dir, out);
  }

  void set_fat(std::string& fat, std::uint32_t n, std::uint32_t v) const {
    if (fat12_) {
      std::size_t o = n + n / 2;
      if (n % 2 == 0) {
        fat[o] = static_cast<char>(v & 0xff);
        fat[o + 1] =
            static_cast<char>((static_cast<unsigned char>(fat[o + 1]) & 0xf0) | ((v >> 8) & 0x0f));
      } else {
        fat[o] = static_cast<char>((static_cast<unsigned char>(fat[o]) & 0x0f) | ((v & 0x0f) << 4));
        fat[o + 1] = static_cast<char>((v >> 4) & 0xff);
      }
    } else {
      put16(fat, std::size_t{n} * 2, static_cast<std::uint16_t>(v));
    }
  }

  std::string short_entry(const std::string& short11, std::uint8_t attr, std::uint32_t cluster,
                          std::uint32_t size) const {
    std::string e(32, '\0');
    std::memcpy(e.data(), short11.data(), 11);
    e[11] = static_cast<char>(attr);
    put16(e, 14, when_.time);  // creation
    put16(e, 16, when_.date);
    put16(e, 18, when_.date);  // last access
    put16(e, 20, static_cast<std::uint16_t>(cluster >> 16));
    put16(e, 22, when_.time);  // last write
    put16(e, 24, when_.date);
    put16(e, 26, static_cast<std::uint16_t>(cluster & 0xffff));
    put32(e, 28, size);
    return e;
  }

  std::string lfn_entries(const Item& it) const {
    const std::u16string& u = lfn_units_.at(it.name);
    const std::size_t count = (u.size() + 12) / 13;
    const std::uint8_t sum = lfn_checksum(it.short11);
    static constexpr int kOffsets[13] = {1, 3, 5, 7, 9, 14, 16, 18, 20, 22, 24, 28, 30};
    std::string out;
    for (std::size_t seq = count; seq >= 1; --seq) {  // last part first on disk
      std::string e(32, '\0');
      e[0] = static_cast<char>(seq | (seq == count ? 0x40 : 0));
      e[11] = 0x0f;
      e[13] = static_cast<char>(sum);
      for (std::size_t k = 0; k < 13; ++k) {
        std::size_t idx = (seq - 1) * 13 + k;
        std::uint16_t ch = idx < u.size() ? u[idx] : (idx == u.size() ? 0x0000 : 0xffff);
        put16(e, static_cast<std::size_t>(kOffsets[k]), ch);
      }
      out += e;
    }
    return out;
  }

  std::string dir_entries(const Dir& d, bool root) const {
    std::string out;
    if (root) {
      out += short_entry(label11(), 0x08, 0, 0);
    } else {
      out += short_entry(".          ", 0x10, d.cluster, 0);
      out +=
          short_entry("..         ", 0x10, d.parent && d.parent->parent ? d.parent->cluster : 0, 0);
    }
    for (const auto& it : d.items) {
      if (it.needs_lfn) out += lfn_entries(it);
      if (it.dir) {
        out += short_entry(it.short11, 0x10, it.cluster, 0);
      } else {
        out += short_entry(it.short11, 0x20, it.cluster,
                           static_cast<std::uint32_t>(it.file->data.size()));
      }
    }
    return out;
  }

  [[nodiscard]] std::string label11() const {
    std::string l(11, ' ');
    std::memcpy(l.data(), opts_.label.data(), opts_.label.size());
    return l;
  }

  void write_boot_sector(std::string& meta, std::uint32_t spc, std::uint32_t root_entries,
                         std::uint32_t fat_sectors, std::uint64_t total_sectors) const {
    std::string& b = meta;
    b[0] = static_cast<char>(0xeb);
    b[1] = 0x3c;
    b[2] = static_cast<char>(0x90);
    std::memcpy(b.data() + 3, "CHLAUNCH", 8);
    put16(b, 11, kSectorSize);
    b[13] = static_cast<char>(spc);
    put16(b, 14, 1);  // reserved sectors
    b[16] = 2;        // FATs
    put16(b, 17, static_cast<std::uint16_t>(root_entries));
    put16(b, 19, total_sectors < 0x10000 ? static_cast<std::uint16_t>(total_sectors) : 0);
    b[21] = static_cast<char>(0xf8);  // fixed disk
    put16(b, 22, static_cast<std::uint16_t>(fat_sectors));
    put16(b, 24, 32);  // sectors per track
    put16(b, 26, 64);  // heads
    put32(b, 28, 0);   // hidden sectors
    put32(b, 32, total_sectors < 0x10000 ? 0 : static_cast<std::uint32_t>(total_sectors));
    b[36] = static_cast<char>(0x80);
    b[38] = 0x29;  // extended boot signature: serial, label and type follow
    // Unsigned arithmetic: a signed product overflows for far-off mtimes (undefined).
    std::uint32_t serial =
        opts_.serial
            ? opts_.serial
            : static_cast<std::uint32_t>(static_cast<std::uint64_t>(opts_.mtime) * 2654435761u) |
                  1u;
    put32(b, 39, serial);
    std::string l = label11();
    std::memcpy(b.data() + 43, l.data(), 11);
    std::memcpy(b.data() + 54, fat12_ ? "FAT12   " : "FAT16   ", 8);
    // Not bootable: halt forever if someone tries.
    b[62] = static_cast<char>(0xf4);
    b[63] = static_cast<char>(0xeb);
    b[64] = static_cast<char>(0xfd);
    b[510] = 0x55;
    b[511] = static_cast<char>(0xaa);
  }

  VfatOptions opts_;
  DosTime when_;
  bool fat12_ = true;
  std::deque<Dir> dirs_;  // stable addresses
  std::vector<const MediaFile*> file_list_;
  std::map<std::string, std::u16string> lfn_units_;
};

}  // namespace

Result<ImagePlan> plan_vfat(const std::vector<MediaFile>& files, const VfatOptions& opts) {
  FatBuilder b(opts);
  return common::wrap(b.build(files), "FAT");
}

}  // namespace chl::disks
