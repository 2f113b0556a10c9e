#include "disks/decompressor.hpp"

#include <libdeflate.h>
#include <zlib.h>
#include <zstd.h>

#include <string>

namespace chl::disks {

struct Decompressor::State {
  z_stream zs{};
  bool zs_ready = false;
  ZSTD_DCtx* zstd = nullptr;
  libdeflate_decompressor* deflate = nullptr;

  ~State() {
    if (deflate) libdeflate_free_decompressor(deflate);
    if (zs_ready) inflateEnd(&zs);
    if (zstd) ZSTD_freeDCtx(zstd);
  }
};

Decompressor::Decompressor() : state_(std::make_unique<State>()) {}
Decompressor::~Decompressor() = default;
Decompressor::Decompressor(Decompressor&&) noexcept = default;
Decompressor& Decompressor::operator=(Decompressor&&) noexcept = default;

namespace {

tl::unexpected<common::Error> short_output(const char* what, std::size_t got, std::size_t want) {
  return common::fail(std::errc::invalid_argument, std::string(what) + " data ended after " +
                                                       std::to_string(got) + " of " +
                                                       std::to_string(want) + " bytes");
}

}  // namespace

common::Status Decompressor::decompress(Qcow2Compression type, std::span<const std::uint8_t> in,
                                        std::span<std::uint8_t> out) {
  State& s = *state_;
  if (type == Qcow2Compression::Zlib) {
    // Fast path: libdeflate decodes the whole cluster in one call. Anything it does not accept
    // as "exactly a full cluster" (a stream longer than the cluster, truncated or invalid data)
    // goes to zlib below, whose answer (and error text) is the reference, as qemu uses zlib.
    if (!s.deflate) s.deflate = libdeflate_alloc_decompressor();
    if (s.deflate) {
      std::size_t in_used = 0, out_made = 0;
      const libdeflate_result r = libdeflate_deflate_decompress_ex(
          s.deflate, in.data(), in.size(), out.data(), out.size(), &in_used, &out_made);
      if (r == LIBDEFLATE_SUCCESS && out_made == out.size()) return {};
    }
    if (!s.zs_ready) {
      // Raw deflate (negative window bits); 15 accepts every window size a writer may use.
      if (inflateInit2(&s.zs, -15) != Z_OK)
        return common::fail(std::errc::not_enough_memory, "zlib: inflateInit2 failed");
      s.zs_ready = true;
    } else if (inflateReset(&s.zs) != Z_OK) {
      return common::fail(std::errc::io_error, "zlib: inflateReset failed");
    }
    s.zs.next_in = const_cast<Bytef*>(in.data());
    s.zs.avail_in = static_cast<uInt>(in.size());
    s.zs.next_out = out.data();
    s.zs.avail_out = static_cast<uInt>(out.size());
    int rc = inflate(&s.zs, Z_FINISH);
    if (s.zs.avail_out == 0 && (rc == Z_STREAM_END || rc == Z_OK || rc == Z_BUF_ERROR)) return {};
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_MEM_ERROR) {
      return common::fail(std::errc::invalid_argument,
                          std::string("deflate data invalid: ") +
                              (s.zs.msg ? s.zs.msg : "error " + std::to_string(rc)));
    }
    return short_output("deflate", out.size() - s.zs.avail_out, out.size());
  }

  if (!s.zstd) {
    s.zstd = ZSTD_createDCtx();
    if (!s.zstd) return common::fail(std::errc::not_enough_memory, "zstd: ZSTD_createDCtx failed");
  } else {
    ZSTD_DCtx_reset(s.zstd, ZSTD_reset_session_only);
  }
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  ZSTD_outBuffer output{out.data(), out.size(), 0};
  while (output.pos < output.size) {
    std::size_t in_before = input.pos, out_before = output.pos;
    std::size_t rc = ZSTD_decompressStream(s.zstd, &output, &input);
    if (ZSTD_isError(rc)) {
      return common::fail(std::errc::invalid_argument,
                          std::string("zstd data invalid: ") + ZSTD_getErrorName(rc));
    }
    if (output.pos == output.size) break;
    if (input.pos == in_before && output.pos == out_before) break;  // no progress: input exhausted
  }
  if (output.pos < output.size) return short_output("zstd", output.pos, output.size);
  return {};
}

}  // namespace chl::disks
