# ch-launcher's container image: the launcher that KubeVirt starts as a VMI's pod (the compute
# container), running the VM on Cloud Hypervisor. See docs/deploy.md.
#
#   docker build -t ch-launcher:dev .                               # a builder with a registry
#   docker build --build-arg BASE=chl-base:bookworm -t ch-launcher:dev .   # without: scripts/image.sh
#
# One recipe for both: BASE is debian:bookworm-slim where a registry answers, or a base made with
# `mmdebstrap --variant=minbase bookworm` and `docker import` (scripts/image.sh) where none does.
# Checked by scripts/check-dockerfile.sh (lint), tests/deploy (the runtime library list against
# ldd) and the image lane (tests/image: built, then run as KubeVirt runs its pod).
ARG BASE=debian:bookworm-slim

# ---- build: the product only (no tests), Release ----------------------------------------------
# The launcher gets cap_net_bind_service as a file capability, as KubeVirt's virt-launcher-monitor
# does (cmd/virt-launcher/BUILD.bazel, "setcaps"): KubeVirt's non-root pod grants NET_BIND_SERVICE
# and sets no_new_privs, so only a file capability within that grant lets a uid-107 process
# bind the DHCP server's port 67 (docs/deploy.md).
FROM ${BASE} AS build
WORKDIR /src
# The build packages are scripts/setup.sh's own list (--build): CI and the image cannot drift.
COPY scripts/setup.sh scripts/setup.sh
RUN bash scripts/setup.sh --build && rm -rf /var/lib/apt/lists/*
COPY . .
# Release at -O2, the optimization CI's build and the benchmarks use (-O3 trips GCC 12's false
# -Wrestrict in libstdc++ under -Werror). Warnings are CI's to fail on, not a user's build.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DCHL_BUILD_TESTS=OFF \
 && cmake --build /build -j"$(nproc)" --target ch-launcher virt-probe chl-webhook \
 && mkdir -p /out/usr/bin /out/usr/lib/ch-launcher \
 && strip --strip-unneeded -o /out/usr/bin/ch-launcher /build/bin/ch-launcher \
 && strip --strip-unneeded -o /out/usr/lib/ch-launcher/libchl-network.so /build/bin/libchl-network.so \
 && strip --strip-unneeded -o /out/usr/lib/ch-launcher/libchl-kubevirt.so /build/bin/libchl-kubevirt.so \
 && strip --strip-unneeded -o /out/usr/bin/virt-probe /build/bin/virt-probe \
 && strip --strip-unneeded -o /out/usr/bin/chl-webhook /build/bin/chl-webhook \
 && setcap cap_net_bind_service=+ep /out/usr/bin/ch-launcher \
 && ln -s ch-launcher /out/usr/bin/virt-launcher \
 && ln -s ch-launcher /out/usr/bin/virt-launcher-monitor

# ---- vmm: Cloud Hypervisor and its firmware ---------------------------------------------------
# From the build context when image/vmm/ holds them (cloud-hypervisor, hypervisor-fw, CLOUDHV.fd;
# scripts/image.sh puts CLOUD_HYPERVISOR_BIN or ../shared/bin/cloud-hypervisor there for its build),
# checked to run in the base (it must link only what the runtime stage has: glibc, libgcc_s);
# else downloaded at the pinned release when its sums are pinned (scripts/pin-ch-release.sh, on a
# machine that reaches github.com); else a placeholder that says so, and the launcher says at
# start that this image has no real VMM.
FROM ${BASE} AS vmm
ARG CH_VERSION=v52.0
ARG CH_SHA256=
ARG HYPERVISOR_FW_VERSION=0.4.2
ARG HYPERVISOR_FW_SHA256=
ARG EDK2_VERSION=ch-a54f262b09
ARG CLOUDHV_SHA256=
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY image/vmm/ /context/
WORKDIR /out/usr/share/cloud-hypervisor
RUN mkdir -p /out/usr/bin \
 && if [ -f /context/cloud-hypervisor ]; then \
      install -m 0755 /context/cloud-hypervisor /out/usr/bin/cloud-hypervisor \
        && version=$(/out/usr/bin/cloud-hypervisor --version) \
        || { echo "vmm: image/vmm/cloud-hypervisor does not run in the base (it may link only glibc and libgcc_s)" >&2; exit 1; }; \
      echo "vmm: $version from the build context (image/vmm/)"; \
      for fw in hypervisor-fw CLOUDHV.fd; do \
        if [ -f "/context/$fw" ]; then install -m 0644 "/context/$fw" "$fw"; fi; \
      done; \
    elif [ -n "$CH_SHA256" ]; then \
      echo "vmm: Cloud Hypervisor $CH_VERSION, downloaded and checked"; \
      apt-get update \
      && apt-get install -y -t bookworm --no-install-recommends ca-certificates curl \
      && rm -rf /var/lib/apt/lists/* \
      && curl -fsSLo /out/usr/bin/cloud-hypervisor "https://github.com/cloud-hypervisor/cloud-hypervisor/releases/download/${CH_VERSION}/cloud-hypervisor-static" \
      && curl -fsSLo hypervisor-fw "https://github.com/cloud-hypervisor/rust-hypervisor-firmware/releases/download/${HYPERVISOR_FW_VERSION}/hypervisor-fw" \
      && curl -fsSLo CLOUDHV.fd "https://github.com/cloud-hypervisor/edk2/releases/download/${EDK2_VERSION}/CLOUDHV.fd" \
      && printf '%s  %s\n' "$CH_SHA256" /out/usr/bin/cloud-hypervisor "$HYPERVISOR_FW_SHA256" hypervisor-fw "$CLOUDHV_SHA256" CLOUDHV.fd \
         | sha256sum -c - \
      && chmod 0755 /out/usr/bin/cloud-hypervisor && chmod 0644 hypervisor-fw CLOUDHV.fd; \
    else \
      echo "vmm: no Cloud Hypervisor given and none pinned: a placeholder (docs/deploy.md)"; \
      install -m 0755 /context/placeholder-vmm.sh /out/usr/bin/cloud-hypervisor; \
    fi

# ---- bundle: the launcher self-contained, for a pod whose image is not ours ---------------------
# ch-launcher, its modules, virt-probe, this image's Cloud Hypervisor (or the placeholder) and
# firmware, every library they load and their own loader, each ELF's interpreter
# /opt/ch-launcher/lib/ld-linux-x86-64.so.2 and RUNPATH inside the bundle (scripts/bundle.sh, which
# fails on a library that resolves outside it). A mixed cluster's webhook adds an init container
# of this image that copies it into a pod volume mounted at /opt/ch-launcher in KubeVirt's own
# compute container (docs/deploy.md, "The launcher bundle").
FROM build AS bundle
COPY --from=vmm /out/ /vmm/
RUN bash scripts/bundle.sh /build/bin /vmm /out-bundle

# ---- runtime ----------------------------------------------------------------------------------
FROM ${BASE}
# Exactly the shared libraries ch-launcher, its modules, virt-probe and chl-webhook (the mixed
# clusters' admission webhook: libssl3) link (tests/deploy checks this list against ldd on the build machine; the image lane runs ldd inside the image). The pod-networking
# module libchl-network.so (libnl, libnftables…) is loaded only for a VMI with interfaces,
# libchl-kubevirt.so (libnghttp2, libprotobuf-lite) only in virt-launcher mode. The qemu-kvm
# module libchl-libvirt.so is not in this image: it has no libvirtd.
# BEGIN runtime-libraries
RUN apt-get update \
 && apt-get install -y -t bookworm --no-install-recommends \
      libc6 libdeflate0 libfmt9 libgcc-s1 libgmp10 libjansson4 libmnl0 libnftables1 libnftnl11 \
      libnettle8 libnghttp2-14 libnl-3-200 libnl-route-3-200 libprotobuf-lite32 libseccomp2 libspdlog1.10 libssl3 libstdc++6 \
      libxtables12 libyaml-cpp0.7 libzstd1 zlib1g \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
# END runtime-libraries
COPY --from=build /out/ /
COPY --from=vmm /out/ /
COPY --from=bundle /out-bundle/ /usr/lib/ch-launcher/bundle/
# KubeVirt's non-root launcher: uid/gid 107 (util.NonRootUID), its state in the pod's volumes
# (/var/run/kubevirt-private, /var/run/kubevirt-ephemeral-disks…), which the pod mounts writable
# over a read-only root. The directories exist here so that a bare `docker run` works too.
RUN groupadd --system --gid 107 qemu \
 && useradd --system --uid 107 --gid 107 --home-dir /var/run/kubevirt-private --no-create-home \
      --shell /usr/sbin/nologin qemu \
 && mkdir -p /var/run/kubevirt /var/run/kubevirt-private /var/run/kubevirt-ephemeral-disks \
 && chown 107:107 /var/run/kubevirt /var/run/kubevirt-private /var/run/kubevirt-ephemeral-disks
# KubeVirt's --hypervisor names the kernel's hypervisor (kvm, hyperv-direct); in this image the
# VMM on it is Cloud Hypervisor (docs/kubevirt/protocol.md, "virt-launcher mode").
ENV CHL_VMM=cloud-hypervisor
ENV XDG_RUNTIME_DIR=/var/run XDG_CONFIG_HOME=/var/run/kubevirt-private XDG_CACHE_HOME=/var/run/kubevirt-private
USER 107:107
# KubeVirt gives the command (/usr/bin/virt-launcher-monitor …); `docker run IMAGE run --vmi …` is ch-launcher.
ENTRYPOINT ["/usr/bin/ch-launcher"]
CMD ["--help"]
