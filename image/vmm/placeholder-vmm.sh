#!/bin/sh
# ch-launcher-placeholder-vmm
# This image was built without Cloud Hypervisor: nothing was in image/vmm/ of the build context
# and no release was pinned (docs/deploy.md). ch-launcher recognizes this file by the marker on
# the second line and says at start that the image has no real VMM.
echo "cloud-hypervisor: this is ch-launcher's placeholder, not a VMM: the image was built without Cloud Hypervisor (docs/deploy.md: put the binary in image/vmm/ or pin a release, then rebuild)" >&2
exit 127
