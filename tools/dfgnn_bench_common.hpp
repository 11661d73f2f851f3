// Shared helpers of dfgnn-bench: error checks that name the failing call, and an owning device
// buffer. Uses only the public C API of dfgnn plus CUDA, cuSPARSE and NVRTC.
#pragma once

#include "cli_common.hpp"

#include <dfgnn/dfgnn.h>

#include <cuda_runtime.h>
#include <cusparse.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <cstddef>
#include <string>
#include <utility>

namespace bench {

// Any failure while benchmarking: main prints the message and exits 1.
using Failure = cli::Failure;

inline void check_dfgnn(dfgnn_status_t status, const char* call) { cli::check(status, call); }

inline void check_cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    throw Failure{fmt::format("{}: {} ({})", call, cudaGetErrorString(status), cudaGetErrorName(status))};
}

inline void check_cusparse(cusparseStatus_t status, const char* call) {
  if (status != CUSPARSE_STATUS_SUCCESS)
    throw Failure{fmt::format("{}: {} ({})", call, cusparseGetErrorString(status), cusparseGetErrorName(status))};
}

inline void check_nvrtc(nvrtcResult status, const char* call) {
  if (status != NVRTC_SUCCESS) throw Failure{fmt::format("{}: {}", call, nvrtcGetErrorString(status))};
}

// The call text is the failing expression itself, so a failure names it exactly.
#define BENCH_DFGNN(call) ::bench::check_dfgnn((call), #call)
#define BENCH_CUDA(call) ::bench::check_cuda((call), #call)
#define BENCH_CUSPARSE(call) ::bench::check_cusparse((call), #call)
#define BENCH_NVRTC(call) ::bench::check_nvrtc((call), #call)

// Owning cudaMalloc'd buffer (256-byte aligned by cudaMalloc).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) check_cuda(cudaMalloc(&ptr_, bytes), fmt::format("cudaMalloc({} bytes)", bytes).c_str());
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);  // error ignored: destructors must not throw
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Median and 10th / 90th percentiles (nearest rank) of a sample, in the sample's unit.
struct Stats {
  double median = 0, p10 = 0, p90 = 0;
  int count = 0;
};

}  // namespace bench
