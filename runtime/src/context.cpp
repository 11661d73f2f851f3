#include "context.hpp"

#include "cuda.hpp"

namespace dfgnn {

int Context::current_arch() {
  require_device("launching a kernel");
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard lock(arch_mutex_);
  auto it = arch_by_device_.find(device);
  if (it != arch_by_device_.end()) return it->second;
  int major = 0, minor = 0;
  cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  return arch_by_device_[device] = major * 10 + minor;
}

}  // namespace dfgnn
