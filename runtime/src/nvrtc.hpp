// Run-time specialisation of the embedded kernel templates, as staged steps:
//   source + name expressions --compile()--> Cubin (NVRTC, lowered names)
//   Cubin --load()--> LoadedModule (cudaLibraryLoadData, cudaLibraryGetKernel; needs a GPU)
// The ModuleCache keys compiled cubins by everything that changes the binary and counts
// compiles and hits.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace dfgnn {

// The embedded template source and its content hash (xxHash64, hex).
const std::string& kernel_source();
const std::string& kernel_source_hash();
// NVRTC version as major*1000 + minor*10 (e.g. 13000).
int nvrtc_version();

struct Cubin {
  std::vector<char> image;
  std::vector<std::string> names;    // name expressions, in request order
  std::vector<std::string> lowered;  // their mangled names in the image
  std::string log;                   // compiler log (warnings)
};

// Compiles the embedded source for sm_<arch> with the given name expressions.
// Throws Error(COMPILE_ERROR) carrying the NVRTC log, options and the expressions.
Cubin compile(const std::vector<std::string>& names, int arch);

class LoadedModule {
 public:
  explicit LoadedModule(const Cubin& cubin);  // needs a device
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  // Kernel for a name expression given at compile time.
  cudaKernel_t kernel(size_t index) const { return kernels_.at(index); }

 private:
  cudaLibrary_t library_ = nullptr;
  std::vector<cudaKernel_t> kernels_;
};

struct CacheCounters {
  uint64_t compiles = 0;  // NVRTC runs
  uint64_t hits = 0;      // answered from memory
  uint64_t loads = 0;     // modules loaded on a GPU
  uint64_t stored = 0;    // cubins taken from the persistent store (no compile)
};

// A persistent home for compiled cubins (the tuning database), keyed by a content hash of
// everything that changes the binary. Implementations must not throw.
class ModuleStore {
 public:
  virtual ~ModuleStore() = default;
  virtual std::optional<Cubin> load(const std::string& key, int arch) = 0;
  virtual void save(const std::string& key, int arch, const Cubin& cubin) = 0;
};

// Thread-safe cache of compiled (and, on a GPU, loaded) modules, keyed by source hash, NVRTC
// version, options, architecture and name expressions.
class ModuleCache {
 public:
  std::shared_ptr<const Cubin> cubin(const std::vector<std::string>& names, int arch);
  std::shared_ptr<const LoadedModule> loaded(const std::vector<std::string>& names, int arch);
  CacheCounters counters() const;
  // Consulted before compiling and fed after; may be null. Not owned.
  void set_store(ModuleStore* store);

 private:
  static std::string key(const std::vector<std::string>& names, int arch);
  ModuleStore* store_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Cubin>> cubins_;
  std::unordered_map<std::string, std::shared_ptr<const LoadedModule>> modules_;
  CacheCounters counters_;
};

}  // namespace dfgnn
