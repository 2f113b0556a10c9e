#pragma once
// Resolving a path from the VMI (kernelBoot.container.kernelPath / initrdPath) inside the
// kernel-boot directory without ever leaving it. The path is taken relative to the directory
// (a leading '/' means the directory's root, as inside the container image); '..' components
// are refused outright; the lookup uses openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so a
// symlink that points out of the directory (absolute, or climbing with '..') is refused by the
// kernel. Where openat2 is missing (Linux < 5.6) the fallback is realpath() and a prefix check.
#include <filesystem>
#include <string_view>

#include "common/error.hpp"

namespace chl::firmware {

// The canonical absolute path of `rel` inside `dir`, which must be a regular file.
common::Result<std::filesystem::path> resolve_confined(const std::filesystem::path& dir,
                                                       std::string_view rel);

}  // namespace chl::firmware
