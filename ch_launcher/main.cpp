// ch-launcher: runs a KubeVirt VirtualMachineInstance on Cloud Hypervisor (or QEMU/KVM via
// libvirt). This file only parses the command line and calls into the libraries.
#include <cstdio>

int main(int, char**) {
  std::fprintf(stderr, "ch-launcher: not implemented yet\n");
  return 1;
}
