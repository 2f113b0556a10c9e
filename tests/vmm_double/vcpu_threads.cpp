#include "tests/vmm_double/vcpu_threads.hpp"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

namespace chl::vmm_double {

bool VcpuThreads::start(const nlohmann::json& cpus) {
  stop();
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
    settled_ = 0;
    failed_ = false;
  }
  const std::uint64_t boot = cpus.value("boot_vcpus", std::uint64_t{1});
  std::map<std::uint64_t, std::vector<std::uint64_t>> affinity;
  if (cpus.contains("affinity") && cpus["affinity"].is_array()) {
    for (const auto& a : cpus["affinity"]) {
      if (!a.is_object() || !a.contains("vcpu") || !a["vcpu"].is_number_unsigned()) continue;
      auto& set = affinity[a["vcpu"].get<std::uint64_t>()];
      if (a.contains("host_cpus") && a["host_cpus"].is_array())
        for (const auto& c : a["host_cpus"])
          if (c.is_number_unsigned()) set.push_back(c.get<std::uint64_t>());
    }
  }
  for (std::uint64_t id = 0; id < boot; ++id) {
    const auto it = affinity.find(id);
    const bool pin = it != affinity.end();
    const std::vector<std::uint64_t> host = pin ? it->second : std::vector<std::uint64_t>{};
    threads_.emplace_back([this, id, pin, host] {
      const std::string name = "vcpu" + std::to_string(id);
      ::pthread_setname_np(::pthread_self(), name.c_str());
      if (pin) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (std::uint64_t c : host)
          if (c < CPU_SETSIZE) CPU_SET(c, &set);
        if (::sched_setaffinity(0, sizeof set, &set) != 0) {
          const int err = errno;
          // CH's error! line (io::Error's Display: "<strerror> (os error N)").
          std::fprintf(
              stderr, "Failed scheduling the vCPU %llu on the expected CPU set: %s (os error %d)\n",
              static_cast<unsigned long long>(id), std::strerror(err), err);
          std::lock_guard lock(mu_);
          ++settled_;
          failed_ = true;
          cv_.notify_all();
          return;
        }
      }
      std::unique_lock lock(mu_);
      ++settled_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return stopping_; });
    });
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return settled_ == threads_.size(); });
  return !failed_;
}

void VcpuThreads::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

}  // namespace chl::vmm_double
