// The baseline of kubevirt_bench's memory figures: a trivial process linking what every
// launcher links (chl_common: spdlog, fmt), without gRPC. It logs one line, then waits for its
// stdin to close, so the bench can read its /proc/<pid>/status meanwhile.
#include <unistd.h>

#include "common/log.hpp"

int main() {
  CHL_LOG_INFO("rss baseline up");
  char buf[64];
  while (::read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  return 0;
}
