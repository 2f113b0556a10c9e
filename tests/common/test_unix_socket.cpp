// Tests for common/unix_socket: addresses, connecting, and listening over a stale socket.
#include <sys/socket.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include <doctest/doctest.h>

#include "common/unix_socket.hpp"
#include "tests/support/test_support.hpp"

using namespace chl::common;

TEST_CASE("unix_address refuses an empty path and one longer than sun_path") {
  CHECK(unix_address("").error().code == std::errc::invalid_argument);
  const auto too_long = unix_address("/tmp/" + std::string(120, 'x'));
  REQUIRE_FALSE(too_long);
  CHECK(too_long.error().code == std::errc::filename_too_long);
  CHECK(too_long.error().message().find("is 125 bytes, the limit is 107") != std::string::npos);
  auto ok = unix_address("/run/x.sock");
  REQUIRE(ok);
  CHECK(std::string(ok->sun_path) == "/run/x.sock");
}

TEST_CASE("connect_unix keeps connect's errno: no socket, nobody listening, a listener") {
  chl::test::TempDir dir;
  const auto path = dir.path() / "s.sock";
  auto absent = connect_unix(path);
  REQUIRE_FALSE(absent);
  CHECK(absent.error().code == std::errc::no_such_file_or_directory);
  CHECK_FALSE(unix_socket_answers(path));

  auto l = listen_unix(path);
  REQUIRE(l);
  CHECK(connect_unix(path));
  CHECK(unix_socket_answers(path));
  l->reset();  // closed: the file stays, nobody listens (what a killed process leaves)
  auto refused = connect_unix(path);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == std::errc::connection_refused);
}

TEST_CASE("listen_unix: 0600, replaces a stale socket, never removes another kind of file") {
  chl::test::TempDir dir;
  const auto path = dir.path() / "api.sock";
  {
    auto first = listen_unix(path);
    REQUIRE(first);
  }
  auto second = listen_unix(path);  // over the first one's stale file
  REQUIRE(second);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);

  const auto file = dir.path() / "disk.img";
  std::ofstream(file) << "precious";
  auto refused = listen_unix(file);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == std::errc::file_exists);
  CHECK(chl::test::read_file(file) == "precious");
}
