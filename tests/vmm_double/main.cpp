// vmm-double: a test double of Cloud Hypervisor. Placeholder until it lands.
#include <cstdio>
int main() {
  std::fprintf(stderr, "vmm-double: not implemented yet\n");
  return 1;
}
