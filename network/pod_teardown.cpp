#include "network/pod_teardown.hpp"

#include <arpa/inet.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>

#include "common/log.hpp"
#include "common/syscall.hpp"
#include "network/nft_ruleset.hpp"

namespace chl::network {

using common::Result;
using common::Status;

namespace {

// One netlink message (or a batch of them) being built: header, fixed part, attributes.
class Message {
 public:
  // Starts a message; returns its sequence number.
  std::uint32_t begin(std::uint16_t type, std::uint16_t flags, std::uint32_t seq) {
    start_ = buf_.size();
    nlmsghdr h{};
    h.nlmsg_type = type;
    h.nlmsg_flags = flags;
    h.nlmsg_seq = seq;
    put(&h, sizeof h);
    return seq;
  }
  template <class T>
  void fixed(const T& v) {
    put(&v, sizeof v);
  }
  void attr(std::uint16_t type, const void* data, std::size_t len) {
    nlattr a{};
    a.nla_type = type;
    a.nla_len = static_cast<std::uint16_t>(NLA_HDRLEN + len);
    put(&a, sizeof a);
    put(data, len);
  }
  void attr_str(std::uint16_t type, const std::string& s) { attr(type, s.c_str(), s.size() + 1); }
  void attr_u32(std::uint16_t type, std::uint32_t v) { attr(type, &v, sizeof v); }
  // Closes the message started last (its length).
  void end() {
    const auto len = static_cast<std::uint32_t>(buf_.size() - start_);
    std::memcpy(buf_.data() + start_ + offsetof(nlmsghdr, nlmsg_len), &len, sizeof len);
  }
  [[nodiscard]] const std::vector<char>& bytes() const { return buf_; }

 private:
  void put(const void* data, std::size_t len) {
    const auto* p = static_cast<const char*>(data);
    buf_.insert(buf_.end(), p, p + len);
    buf_.resize(NLMSG_ALIGN(buf_.size()), 0);
  }
  std::vector<char> buf_;
  std::size_t start_ = 0;
};

// Send `m` and read until the kernel acknowledges message `seq`: 0 or the (positive) errno.
// `on_reply` sees every other message for `seq` (a GET's answer). In a batch (sequence numbers
// from `first`), an error for any of its messages ends the wait too: the kernel may answer
// nothing more (a refused batch start).
template <class F>
Result<int> exchange(int fd, const Message& m, std::uint32_t seq, F&& on_reply,
                     std::uint32_t first = 0) {
  if (first == 0) first = seq;
  const auto& b = m.bytes();
  if (common::retry_eintr([&] { return ::send(fd, b.data(), b.size(), 0); }) < 0)
    return common::fail_errno("netlink: sending");
  alignas(nlmsghdr) char buf[16384];
  for (;;) {
    const ssize_t n = common::retry_eintr([&] { return ::recv(fd, buf, sizeof buf, 0); });
    if (n < 0) return common::fail_errno("netlink: waiting for the kernel's answer");
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq < first || h->nlmsg_seq > seq)
        continue;  // a late answer to an earlier request
      if (h->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        if (h->nlmsg_seq == seq || e->error != 0) return -e->error;
        continue;
      }
      if (h->nlmsg_seq == seq) on_reply(h);
    }
  }
}

Result<int> exchange(int fd, const Message& m, std::uint32_t seq) {
  return exchange(fd, m, seq, [](const nlmsghdr*) {});
}

Status check(Result<int> r, const std::string& what, std::initializer_list<int> fine = {}) {
  if (!r) return tl::unexpected(r.error().wrap(what));
  if (*r == 0) return {};
  for (int ok : fine)
    if (*r == ok) return {};
  return common::fail_errno(*r, what);
}

}  // namespace

Result<PodTeardown> PodTeardown::open() {
  auto open_one = [](int protocol, const char* what) -> Result<common::UniqueFd> {
    common::UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol));
    if (!fd) return common::fail_errno(std::string("netlink: opening a ") + what + " socket");
    // The kernel answers at once; never wait forever on a lost answer.
    timeval tv{5, 0};
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
      return common::fail_errno(std::string("netlink: ") + what + " socket: SO_RCVTIMEO");
    sockaddr_nl local{};
    local.nl_family = AF_NETLINK;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) < 0)
      return common::fail_errno(std::string("netlink: binding the ") + what + " socket");
    return fd;
  };
  CHL_TRY(auto route, open_one(NETLINK_ROUTE, "route"));
  CHL_TRY(auto netfilter, open_one(NETLINK_NETFILTER, "netfilter"));
  return PodTeardown(std::move(route), std::move(netfilter));
}

Status PodTeardown::run(const std::vector<NetworkPlan>& plans) {
  Status first;
  auto keep = [&first](Status st) {
    if (!st) {
      CHL_LOG_WARN("network teardown: {}", st.error().message());
      if (first) first = std::move(st);
    }
  };
  const int rt = route_.get();

  // 1. delete table inet ch_launcher, as one nf_tables batch.
  {
    Message m;
    nfgenmsg batch{AF_UNSPEC, NFNETLINK_V0, htons(NFNL_SUBSYS_NFTABLES)};
    const auto first_seq = m.begin(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq_++);
    m.fixed(batch);
    m.end();
    const auto seq =
        m.begin((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE, NLM_F_REQUEST | NLM_F_ACK, seq_++);
    m.fixed(nfgenmsg{NFPROTO_INET, NFNETLINK_V0, 0});
    m.attr_str(NFTA_TABLE_NAME, kNftTable);
    m.end();
    m.begin(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq_++);
    m.fixed(batch);
    m.end();
    keep(check(exchange(
                   netfilter_.get(), m, seq, [](const nlmsghdr*) {}, first_seq),
               std::string("nftables: deleting table inet ") + kNftTable, {ENOENT}));
  }

  auto delete_link = [&](const std::string& name) {
    Message m;
    const auto seq = m.begin(RTM_DELLINK, NLM_F_REQUEST | NLM_F_ACK, seq_++);
    m.fixed(ifinfomsg{});
    m.attr_str(IFLA_IFNAME, name);
    m.end();
    return check(exchange(rt, m, seq), "netlink: deleting link " + name, {ENODEV});
  };
  // The index of link `name`; 0 when there is none.
  auto index_of = [&](const std::string& name) -> Result<int> {
    Message m;
    const auto seq = m.begin(RTM_GETLINK, NLM_F_REQUEST | NLM_F_ACK, seq_++);
    m.fixed(ifinfomsg{});
    m.attr_str(IFLA_IFNAME, name);
    m.end();
    int index = 0;
    auto r = exchange(rt, m, seq, [&index](const nlmsghdr* h) {
      if (h->nlmsg_type == RTM_NEWLINK)
        index = static_cast<const ifinfomsg*>(NLMSG_DATA(h))->ifi_index;
    });
    if (!r) return tl::unexpected(r.error().wrap("netlink: looking up link " + name));
    if (*r == ENODEV) return 0;
    if (*r != 0) return common::fail_errno(*r, "netlink: looking up link " + name);
    return index;
  };
  auto give_back = [&](const NetworkPlan& p, int index) {
    const std::string& pod = p.pod_iface;
    {
      Message m;
      const auto seq = m.begin(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq_++);
      ifinfomsg ifi{};
      ifi.ifi_index = index;
      m.fixed(ifi);
      m.attr_u32(IFLA_MASTER, 0);
      m.end();
      keep(check(exchange(rt, m, seq), "netlink: releasing " + pod + " from its bridge"));
    }
    if (p.lease.address.address.value == 0) return;
    const std::string cidr = format_ipv4_cidr(p.lease.address);
    {
      Message m;
      const auto seq =
          m.begin(RTM_NEWADDR, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, seq_++);
      ifaddrmsg ifa{};
      ifa.ifa_family = AF_INET;
      ifa.ifa_prefixlen = static_cast<std::uint8_t>(p.lease.address.prefix);
      ifa.ifa_index = static_cast<std::uint32_t>(index);
      m.fixed(ifa);
      const std::uint32_t addr = htonl(p.lease.address.address.value);
      m.attr(IFA_LOCAL, &addr, sizeof addr);
      m.attr(IFA_ADDRESS, &addr, sizeof addr);
      m.end();
      keep(check(exchange(rt, m, seq), "netlink: adding " + cidr + " to " + pod, {EEXIST}));
    }
    for (const auto& r : p.lease.routes) {
      Message m;
      const auto seq = m.begin(RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE, seq_++);
      rtmsg rtm{};
      rtm.rtm_family = AF_INET;
      rtm.rtm_dst_len = static_cast<std::uint8_t>(r.destination.prefix);
      rtm.rtm_table = RT_TABLE_MAIN;
      rtm.rtm_protocol = RTPROT_BOOT;
      rtm.rtm_scope = r.gateway ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
      rtm.rtm_type = RTN_UNICAST;
      m.fixed(rtm);
      const std::uint32_t dst = htonl(r.destination.address.value);
      if (r.destination.prefix > 0) m.attr(RTA_DST, &dst, sizeof dst);
      if (r.gateway) {
        const std::uint32_t gw = htonl(r.gateway->value);
        m.attr(RTA_GATEWAY, &gw, sizeof gw);
      }
      m.attr_u32(RTA_OIF, static_cast<std::uint32_t>(index));
      m.end();
      keep(check(exchange(rt, m, seq),
                 "netlink: adding route " + format_ipv4_cidr(r.destination) + " via " + pod,
                 {EEXIST}));
    }
  };

  // 2. The devices, last wired first.
  for (auto it = plans.rbegin(); it != plans.rend(); ++it) {
    const NetworkPlan& p = *it;
    if (p.binding == PlanBinding::Sriov) continue;
    keep(delete_link(p.tap));
    if (p.binding == PlanBinding::Bridge) {
      auto index = index_of(p.pod_iface);
      if (!index)
        keep(tl::unexpected(index.error()));
      else if (*index > 0)
        give_back(p, *index);
    }
    keep(delete_link(p.bridge));
  }
  return first;
}

}  // namespace chl::network
