#include "cuda.hpp"

#include "error.hpp"

#include <utility>

namespace dfgnn {

const DeviceStatus& device_status() {
  static const DeviceStatus status = [] {
    DeviceStatus s;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      s.reason = fmt::format("no CUDA device: cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(err),
                             cudaGetErrorName(err));
      cudaGetLastError();  // clear the sticky-free error so later probes start clean
    } else if (count == 0) {
      s.reason = "no CUDA device: the driver reports 0 devices";
    } else {
      s.available = true;
    }
    return s;
  }();
  return status;
}

std::string device_name(int device) {
  // Driver API signatures (cuda.h), stable since CUDA 4.1; int stands for CUresult and CUdevice.
  using GetByPciBusId = int (*)(int* dev, const char* bus_id);
  using GetName = int (*)(char* name, int length, int dev);
  void* by_bus = nullptr;
  void* get_name = nullptr;
  cudaDriverEntryPointQueryResult found_bus{}, found_name{};
  char bus_id[64] = {};
  if (cudaGetDriverEntryPointByVersion("cuDeviceGetByPCIBusId", &by_bus, 12000, cudaEnableDefault, &found_bus) ==
          cudaSuccess &&
      cudaGetDriverEntryPointByVersion("cuDeviceGetName", &get_name, 12000, cudaEnableDefault, &found_name) ==
          cudaSuccess &&
      found_bus == cudaDriverEntryPointSuccess && found_name == cudaDriverEntryPointSuccess &&
      cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) == cudaSuccess) {
    int dev = 0;
    char name[256] = {};
    if (reinterpret_cast<GetByPciBusId>(by_bus)(&dev, bus_id) == 0 &&
        reinterpret_cast<GetName>(get_name)(name, sizeof name - 1, dev) == 0 && name[0] != '\0')
      return name;
  }
  cudaGetLastError();  // a failed probe leaves no error behind for the next call
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return prop.name;
}

void require_device(const char* what) {
  const DeviceStatus& s = device_status();
  if (!s.available) fail(DFGNN_STATUS_NO_DEVICE, "{} needs a GPU: {}", what, s.reason);
}

void cuda_check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error (out of memory), so the next call does not see it
  if (status == cudaErrorMemoryAllocation)
    fail(DFGNN_STATUS_OUT_OF_MEMORY, "{}: out of device memory", what);
  fail(DFGNN_STATUS_CUDA_ERROR, "{}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  require_device("device allocation");
  cuda_check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
}

DeviceBuffer DeviceBuffer::on_stream(size_t bytes, cudaStream_t stream) {
  DeviceBuffer b;
  b.bytes_ = bytes;
  b.stream_ordered_ = true;
  b.stream_ = stream;
  if (bytes == 0) return b;
  require_device("device allocation");
  cuda_check(cudaMallocAsync(&b.ptr_, bytes, stream), "cudaMallocAsync");
  return b;
}

void DeviceBuffer::release() noexcept {
  if (ptr_ == nullptr) return;
  if (stream_ordered_) cudaFreeAsync(ptr_, stream_);
  else cudaFree(ptr_);
  ptr_ = nullptr;
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)),
      stream_ordered_(other.stream_ordered_), stream_(other.stream_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    stream_ordered_ = other.stream_ordered_;
    stream_ = other.stream_;
  }
  return *this;
}

DeviceBuffer upload(const void* host, size_t bytes) {
  DeviceBuffer buffer(bytes);
  if (bytes > 0) cuda_check(cudaMemcpy(buffer.get(), host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  return buffer;
}

}  // namespace dfgnn
