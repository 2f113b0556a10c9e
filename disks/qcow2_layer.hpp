#pragma once
// A qcow2 image (v2/v3, any cluster size, compressed clusters, extended L2 entries) as an
// ImageLayer, optionally over a backing layer.
#include <memory>

#include "disks/image_layer.hpp"
#include "disks/qcow2_header.hpp"

namespace chl::disks {

class Qcow2Layer final : public ImageLayer {
 public:
  // Open the qcow2 image on `fd`; the backing file (if any) is opened by open_image_chain().
  static common::Result<std::unique_ptr<Qcow2Layer>> open(common::UniqueFd fd, std::string path,
                                                          std::uint64_t file_size,
                                                          std::size_t depth);

  [[nodiscard]] const Qcow2Header& header() const { return h_; }
  void set_backing(std::unique_ptr<ImageLayer> backing) { backing_ = std::move(backing); }

  [[nodiscard]] std::uint64_t virtual_size() const override { return h_.size; }
  [[nodiscard]] const std::string& path() const override { return path_; }
  [[nodiscard]] std::size_t depth() const override { return depth_; }
  [[nodiscard]] std::size_t chain_length() const override {
    return 1 + (backing_ ? backing_->chain_length() : 0);
  }
  common::Result<Extent> status(ReadContext& ctx, std::uint64_t off,
                                std::uint64_t len) const override;
  common::Status read(ReadContext& ctx, std::uint64_t off, std::uint64_t len,
                      std::uint8_t* buf) const override;
  common::Result<Mapping> map(ReadContext& ctx, std::uint64_t off,
                              std::uint64_t len) const override;
  common::Result<Allocation> allocation(ReadContext& ctx) const override;

 private:
  enum class Kind { Unallocated, Zero, Data, Compressed };
  struct Piece {
    Kind kind = Kind::Unallocated;
    std::uint64_t length = 0;
    std::uint64_t host = 0;   // Data: host offset of the first byte; Compressed: start of the data
    std::uint64_t csize = 0;  // Compressed: bytes of compressed data
  };

  Qcow2Layer(common::UniqueFd fd, std::string path, std::uint64_t file_size, std::size_t depth,
             Qcow2Header h)
      : fd_(std::move(fd)),
        path_(std::move(path)),
        file_size_(file_size),
        depth_(depth),
        h_(std::move(h)) {}

  common::Status load_l1();
  common::Status check_refcounts() const;
  // What [off, off+maxlen) holds, up to the end of the cluster (or run of alike subclusters).
  common::Result<Piece> piece(ReadContext& ctx, std::uint64_t off, std::uint64_t maxlen) const;
  common::Result<std::pair<std::uint64_t, std::uint64_t>> l2_entry(ReadContext& ctx,
                                                                   std::uint64_t l2_offset,
                                                                   std::uint64_t index) const;
  common::Status read_compressed(ReadContext& ctx, const Piece& p, std::uint64_t in_cluster,
                                 std::uint64_t len, std::uint8_t* buf) const;
  common::Status read_unallocated(ReadContext& ctx, std::uint64_t off, std::uint64_t len,
                                  std::uint8_t* buf) const;

  common::UniqueFd fd_;
  std::string path_;
  std::uint64_t file_size_;
  std::size_t depth_;
  Qcow2Header h_;
  std::vector<std::uint64_t> l1_;
  std::unique_ptr<ImageLayer> backing_;
};

}  // namespace chl::disks
