// Thin CUDA runtime helpers. dfgnn links cudart (never libcuda directly), so the library loads on
// machines without a driver; device_status() says whether GPU entry points can run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace dfgnn {

struct DeviceStatus {
  bool available = false;
  std::string reason;  // why not, when !available
};

// Probed once per process (cudaGetDeviceCount), cached.
const DeviceStatus& device_status();
// Throws Error(NO_DEVICE) with the reason when no device is usable.
void require_device(const char* what);

// The device's name (cudaDeviceProp::name) without cudaGetDeviceProperties, which reads every
// property and takes milliseconds (a process's first dispatch waited on it): the driver's
// cuDeviceGetName, reached through the runtime's entry points (dfgnn never links libcuda), for the
// driver device at this device's PCI bus id. Falls back to cudaGetDeviceProperties.
std::string device_name(int device);
// Throws Error(CUDA_ERROR) naming the call when status != cudaSuccess.
void cuda_check(cudaError_t status, const char* what);

// Owning device allocation: cudaMalloc / cudaFree, or stream-ordered (cudaMallocAsync and
// cudaFreeAsync on one stream, which must outlive the buffer): a graph built and dropped per
// mini-batch then never makes cudaFree synchronise the device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  static DeviceBuffer on_stream(size_t bytes, cudaStream_t stream);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void release() noexcept;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool stream_ordered_ = false;
  cudaStream_t stream_ = nullptr;
};

// Copies host -> new device buffer.
DeviceBuffer upload(const void* host, size_t bytes);

}  // namespace dfgnn
