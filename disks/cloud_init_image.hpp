#pragma once
// The small filesystem images the cloud-init media are made of, described as a plan before a
// byte is written: the image size plus the extents that hold data (metadata the writer built,
// or file contents borrowed from the caller without copying). Everything else is zero, and is
// left as a hole in the output file.
//
// write_image_file() writes a plan atomically: into a temporary file beside the destination,
// then renamed onto a name that must not exist yet (RENAME_NOREPLACE), so a reader never sees a
// half-written image and an existing file is never replaced. On any error nothing is left.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace chl::disks {

// One file to put on the media. `path` is relative, '/'-separated ("openstack/latest/user_data");
// the directories on the way are created implicitly.
struct MediaFile {
  std::string path;
  std::string data;
  unsigned mode = 0;  // permission bits (ISO Rock Ridge PX); 0 = the writer's default
};

struct ImageExtent {
  std::uint64_t offset = 0;
  std::string owned;      // bytes built by the writer, or
  std::string_view view;  // bytes borrowed from a MediaFile (used when `owned` is empty)
  [[nodiscard]] std::string_view bytes() const {
    return owned.empty() ? view : std::string_view(owned);
  }
};

struct ImagePlan {
  std::uint64_t size = 0;            // total image size in bytes
  std::vector<ImageExtent> extents;  // non-overlapping, within `size`
};

struct ImageWriteOptions {
  bool durable = true;  // fsync the file (and its directory) before/after the rename
  unsigned mode = 0644;
};

// The whole image in memory (tests, small images).
std::string render_image(const ImagePlan& plan);

// Write `plan` to `dest` atomically; fails with EEXIST (nothing touched) if `dest` exists.
common::Status write_image_file(const std::filesystem::path& dest, const ImagePlan& plan,
                                const ImageWriteOptions& opts = {});

// Checks shared by the writers: a relative path of non-empty components without "." / "..",
// each path once.
common::Status check_media_paths(const std::vector<MediaFile>& files);

// The directory tree the files make (names in the order given; writers sort as they need).
struct MediaDir {
  std::string name;  // "" for the root
  std::vector<MediaDir> dirs;
  struct Entry {
    std::string name;
    const MediaFile* file;
  };
  std::vector<Entry> files;
};
// Checks the paths, then builds the tree; a name used both as a file and a directory is an error.
common::Result<MediaDir> build_media_tree(const std::vector<MediaFile>& files);

}  // namespace chl::disks
