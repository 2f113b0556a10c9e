#pragma once
// One layer of a disk image chain (a qcow2 image, or a raw file used as a backing file), read
// through a per-thread ReadContext. Layers are immutable after opening and may be shared by
// threads; everything a read changes (L2 slice cache, decompression state, scratch buffers)
// lives in the caller's ReadContext.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "disks/decompressor.hpp"

namespace chl::disks {

// Per-layer state of one reader thread.
struct LayerCache {
  std::uint64_t l2_offset = 0;              // L2 table the cached slice belongs to (0: none)
  std::uint64_t first = 0;                  // index of the first cached entry in that table
  std::uint64_t count = 0;                  // entries cached
  std::vector<std::uint64_t> words;         // decoded entries (two words each with extended L2)
  std::vector<std::uint8_t> raw;            // the slice as read
  std::uint64_t cluster_host = UINT64_MAX;  // compressed cluster decoded into `cluster`
  std::vector<std::uint8_t> cluster;
  std::vector<std::uint8_t> compressed;
};

struct ReadContext {
  explicit ReadContext(std::size_t layers) : caches(layers) {}
  std::vector<LayerCache> caches;  // indexed by ImageLayer::depth()
  Decompressor decompressor;
};

// Where the bytes of a range of the virtual disk are stored as they are (a plain data cluster,
// a raw backing file), so that they can be copied file to file without being read.
struct Mapping {
  std::uint64_t length = 0;  // bytes from the queried offset with this answer (>= 1)
  int fd = -1;               // the file holding them; -1: they must be read (decompressed, ...)
  std::uint64_t host = 0;    // their offset in `fd`
};

// What a range of the virtual disk holds.
struct Extent {
  bool zero = false;         // true: reads as zeros for sure; false: may hold data
  std::uint64_t length = 0;  // bytes from the queried offset with this answer
};

// What a chain's metadata says it holds.
struct Allocation {
  std::uint64_t bytes = 0;       // data it may hold (an upper bound of what a conversion writes)
  std::uint64_t compressed = 0;  // of those, in compressed clusters (at their decompressed size)
};

class ImageLayer {
 public:
  virtual ~ImageLayer() = default;
  [[nodiscard]] virtual std::uint64_t virtual_size() const = 0;
  [[nodiscard]] virtual const std::string& path() const = 0;
  // 0 for the top image, 1 for its backing file, ...
  [[nodiscard]] virtual std::size_t depth() const = 0;
  // Number of layers from this one down to the bottom of the chain.
  [[nodiscard]] virtual std::size_t chain_length() const = 0;

  // Classify [off, off+len) (len > 0, within the virtual size): the answer holds for the
  // returned length, which is at least 1 byte and at most len.
  virtual common::Result<Extent> status(ReadContext& ctx, std::uint64_t off,
                                        std::uint64_t len) const = 0;
  // Read [off, off+len) of the virtual disk into buf (within the virtual size).
  virtual common::Status read(ReadContext& ctx, std::uint64_t off, std::uint64_t len,
                              std::uint8_t* buf) const = 0;
  // Where [off, off+len) starts to be stored (len > 0, within the virtual size, not known to
  // read as zeros): the answer holds for the returned length, at least 1 byte and at most len.
  virtual common::Result<Mapping> map(ReadContext& ctx, std::uint64_t off,
                                      std::uint64_t len) const = 0;
  // What this chain may hold data for; walking all metadata also checks every table entry
  // against the file.
  virtual common::Result<Allocation> allocation(ReadContext& ctx) const = 0;
};

// A raw file at the bottom of a backing chain.
class RawLayer final : public ImageLayer {
 public:
  RawLayer(common::UniqueFd fd, std::string path, std::uint64_t size, std::size_t depth)
      : fd_(std::move(fd)), path_(std::move(path)), size_(size), depth_(depth) {}
  [[nodiscard]] std::uint64_t virtual_size() const override { return size_; }
  [[nodiscard]] const std::string& path() const override { return path_; }
  [[nodiscard]] std::size_t depth() const override { return depth_; }
  [[nodiscard]] std::size_t chain_length() const override { return 1; }
  common::Result<Extent> status(ReadContext& ctx, std::uint64_t off,
                                std::uint64_t len) const override;
  common::Status read(ReadContext& ctx, std::uint64_t off, std::uint64_t len,
                      std::uint8_t* buf) const override;
  common::Result<Mapping> map(ReadContext& ctx, std::uint64_t off,
                              std::uint64_t len) const override;
  common::Result<Allocation> allocation(ReadContext& ctx) const override;
  [[nodiscard]] int fd() const { return fd_.get(); }

 private:
  common::UniqueFd fd_;
  std::string path_;
  std::uint64_t size_;
  std::size_t depth_;
};

struct OpenOptions {
  bool allow_backing = false;       // refuse backing files unless set
  unsigned max_backing_depth = 16;  // layers below the top image
};

// Open an image chain by content: qcow2 (with its backing chain when allowed) or raw.
// Any other format is refused, naming it.
common::Result<std::unique_ptr<ImageLayer>> open_image_chain(const std::string& path,
                                                             const OpenOptions& opts);

}  // namespace chl::disks
