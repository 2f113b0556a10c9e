#include "sandbox/seccomp_filter.hpp"

#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "common/unique_fd.hpp"
#include "sandbox/seccomp_policy.hpp"

namespace chl::sandbox {

using common::fail;

struct SeccompFilter::Ctx {
  scmp_filter_ctx ctx = nullptr;
  ~Ctx() {
    if (ctx) seccomp_release(ctx);
  }
};

SeccompFilter::SeccompFilter(std::unique_ptr<Ctx> ctx, std::size_t rules) : ctx_(std::move(ctx)), rules_(rules) {}
SeccompFilter::SeccompFilter(SeccompFilter&&) noexcept = default;
SeccompFilter& SeccompFilter::operator=(SeccompFilter&&) noexcept = default;
SeccompFilter::~SeccompFilter() = default;

std::string to_string(SeccompMode m) {
  switch (m) {
    case SeccompMode::Off: return "off";
    case SeccompMode::Log: return "log";
    case SeccompMode::Enforce: return "enforce";
  }
  return "?";
}

common::Result<SeccompMode> parse_seccomp_mode(const std::string& text) {
  if (text == "off" || text == "false") return SeccompMode::Off;
  if (text == "log") return SeccompMode::Log;
  if (text == "enforce" || text == "true") return SeccompMode::Enforce;
  return fail(std::errc::invalid_argument, "seccomp mode '" + text + "': expected enforce, log or off");
}

namespace {

// libseccomp returns -errno.
common::Status check(int rc, const std::string& what) {
  if (rc < 0) return fail(std::error_code(-rc, std::generic_category()), what);
  return {};
}

}  // namespace

common::Status SeccompFilter::load() {
  if (!ctx_ || !ctx_->ctx) return fail(std::errc::invalid_argument, "seccomp: the filter was moved from");
  return check(seccomp_load(ctx_->ctx), "seccomp: loading the launcher's filter");
}

common::Result<std::vector<std::uint64_t>> SeccompFilter::export_bpf() const {
  if (!ctx_ || !ctx_->ctx) return fail(std::errc::invalid_argument, "seccomp: the filter was moved from");
  common::UniqueFd fd(::memfd_create("chl-seccomp-bpf", MFD_CLOEXEC));
  if (!fd) return common::fail_errno("seccomp: memfd_create for the exported filter");
  CHL_TRY_VOID(check(seccomp_export_bpf(ctx_->ctx, fd.get()), "seccomp: exporting the filter"));
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  if (size < 0 || size % 8 != 0) return fail(std::errc::io_error, "seccomp: exported filter of odd size");
  std::vector<std::uint64_t> prog(static_cast<std::size_t>(size) / 8);
  const ssize_t n = ::pread(fd.get(), prog.data(), static_cast<std::size_t>(size), 0);
  if (n != size) return common::fail_errno("seccomp: reading the exported filter");
  return prog;
}

common::Result<SeccompFilter> build_launcher_filter(SeccompMode mode, DriverKind kind) {
  if (mode == SeccompMode::Off) return fail(std::errc::invalid_argument, "seccomp: no filter for mode off");
  const std::uint32_t refuse = mode == SeccompMode::Enforce ? SCMP_ACT_ERRNO(EPERM) : SCMP_ACT_LOG;
  auto ctx = std::make_unique<SeccompFilter::Ctx>();
  ctx->ctx = seccomp_init(refuse);
  if (!ctx->ctx) return fail(std::errc::not_enough_memory, "seccomp: seccomp_init");
  scmp_filter_ctx c = ctx->ctx;
  // Every thread: the worker thread and the libraries' threads exist already.
  CHL_TRY_VOID(check(seccomp_attr_set(c, SCMP_FLTATR_CTL_TSYNC, 1), "seccomp: thread sync"));
  std::size_t rules = 0;

  auto resolve = [](std::string_view name) -> common::Result<int> {
    int nr = seccomp_syscall_resolve_name(std::string(name).c_str());
    if (nr == __NR_SCMP_ERROR) return fail(std::errc::invalid_argument, "seccomp: unknown syscall '" + std::string(name) + "'");
    return nr;
  };

  for (const SyscallRule& r : allow_list_for(kind)) {
    CHL_TRY(int nr, resolve(r.name));
    const std::string what = "seccomp: rule for " + std::string(r.name);
    switch (r.check) {
      case ArgCheck::None:
        CHL_TRY_VOID(check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 0), what));
        ++rules;
        break;
      case ArgCheck::UnixSocketOnly:
        CHL_TRY_VOID(check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX)), what));
        ++rules;
        break;
      case ArgCheck::ThreadsOnly:
        CHL_TRY_VOID(check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 1,
                                            SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD)),
                           what));
        ++rules;
        break;
      case ArgCheck::AnswerEnosys:
        CHL_TRY_VOID(check(seccomp_rule_add(c, SCMP_ACT_ERRNO(ENOSYS), nr, 0), what));
        ++rules;
        break;
      case ArgCheck::IoctlList:
        for (const IoctlRule& io : allowed_ioctls()) {
          CHL_TRY_VOID(check(seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 1,
                                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, io.request)),
                             what + " " + std::string(io.name)));
          ++rules;
        }
        break;
    }
  }
  if (mode == SeccompMode::Enforce) {
    for (std::string_view name : kill_list()) {
      CHL_TRY(int nr, resolve(name));
      CHL_TRY_VOID(check(seccomp_rule_add(c, SCMP_ACT_KILL_PROCESS, nr, 0), "seccomp: kill rule for " + std::string(name)));
      ++rules;
    }
  }
  return SeccompFilter(std::move(ctx), rules);
}

}  // namespace chl::sandbox
