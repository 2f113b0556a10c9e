# syntax=docker/dockerfile:1
# ch-launcher's container image: the launcher that runs one KubeVirt VMI per pod on Cloud
# Hypervisor. See docs/deploy.md. Checked without a Docker engine by scripts/check-dockerfile.sh
# (lint rules) and tests/deploy (the runtime library list against what the binary links).

# ---- build: the same setup script and build as CI -------------------------------------------
FROM debian:bookworm AS build
WORKDIR /src
COPY . .
RUN bash scripts/setup.sh \
 && cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHL_WERROR=ON \
 && cmake --build /build -j"$(nproc)" --target ch-launcher \
 && strip --strip-debug -o /ch-launcher /build/bin/ch-launcher \
 && strip --strip-debug -o /libchl-network.so /build/bin/libchl-network.so \
 && strip --strip-debug -o /libchl-kubevirt.so /build/bin/libchl-kubevirt.so

# ---- fetch: Cloud Hypervisor and its firmware, pinned and checked ---------------------------
FROM debian:bookworm-slim AS fetch
# Pinned releases. The sha256 sums are filled in by scripts/pin-ch-release.sh on a machine that
# can reach github.com (ours cannot); the build refuses to go on without them.
ARG CH_VERSION=v52.0
ARG CH_SHA256=
ARG HYPERVISOR_FW_VERSION=0.4.2
ARG HYPERVISOR_FW_SHA256=
ARG EDK2_VERSION=ch-a54f262b09
ARG CLOUDHV_SHA256=
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y -t bookworm --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /fetch
RUN for pin in CH_SHA256 HYPERVISOR_FW_SHA256 CLOUDHV_SHA256; do \
      if [ -z "${!pin}" ]; then echo "Dockerfile: $pin is not pinned; run scripts/pin-ch-release.sh" >&2; exit 1; fi; \
    done \
 && curl -fsSLo cloud-hypervisor "https://github.com/cloud-hypervisor/cloud-hypervisor/releases/download/${CH_VERSION}/cloud-hypervisor-static" \
 && curl -fsSLo hypervisor-fw "https://github.com/cloud-hypervisor/rust-hypervisor-firmware/releases/download/${HYPERVISOR_FW_VERSION}/hypervisor-fw" \
 && curl -fsSLo CLOUDHV.fd "https://github.com/cloud-hypervisor/edk2/releases/download/${EDK2_VERSION}/CLOUDHV.fd" \
 && printf '%s  %s\n' "$CH_SHA256" cloud-hypervisor "$HYPERVISOR_FW_SHA256" hypervisor-fw "$CLOUDHV_SHA256" CLOUDHV.fd \
    | sha256sum -c - \
 && chmod 0755 cloud-hypervisor && chmod 0644 hypervisor-fw CLOUDHV.fd

# ---- runtime --------------------------------------------------------------------------------
FROM debian:bookworm-slim
# Exactly the shared libraries ch-launcher and its pod-networking module libchl-network.so link
# (tests/deploy checks this list against ldd). The module (libnl, libnftables…) is loaded only for
# a VMI with interfaces, libchl-kubevirt.so (libnghttp2, libprotobuf-lite) only in virt-launcher
# mode; the qemu-kvm module libchl-libvirt.so is not in this image.
# BEGIN runtime-libraries
RUN apt-get update \
 && apt-get install -y -t bookworm --no-install-recommends \
      libc6 libdeflate0 libfmt9 libgcc-s1 libgmp10 libjansson4 libmnl0 libnftables1 libnftnl11 \
      libnghttp2-14 libnl-3-200 libnl-route-3-200 libprotobuf-lite32 libseccomp2 libspdlog1.10 libstdc++6 \
      libxtables12 libyaml-cpp0.7 libzstd1 zlib1g \
 && rm -rf /var/lib/apt/lists/*
# END runtime-libraries
COPY --from=build /ch-launcher /usr/bin/ch-launcher
COPY --from=build /libchl-network.so /usr/lib/ch-launcher/libchl-network.so
COPY --from=build /libchl-kubevirt.so /usr/lib/ch-launcher/libchl-kubevirt.so
COPY --from=fetch /fetch/cloud-hypervisor /usr/bin/cloud-hypervisor
COPY --from=fetch /fetch/hypervisor-fw /fetch/CLOUDHV.fd /usr/share/cloud-hypervisor/
# A non-root user for pods that grant /dev/kvm to it (the device plugin's group) and
# CAP_NET_ADMIN only where networking needs it; run as root where the pod requires.
# State directories (sockets, console log, disks made for the VM) go under
# $XDG_RUNTIME_DIR/ch-launcher/<namespace>/<name> for a non-root launcher.
RUN useradd --system --uid 107 --user-group --home-dir /var/run/kubevirt-private --no-create-home launcher \
 && mkdir -p /var/run/kubevirt-private \
 && chown launcher:launcher /var/run/kubevirt-private \
 && chmod 0700 /var/run/kubevirt-private
ENV XDG_RUNTIME_DIR=/var/run/kubevirt-private
USER 107:107
ENTRYPOINT ["ch-launcher"]
CMD ["--help"]
