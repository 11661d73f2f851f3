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
// NVRTC version as major*1000 + minor*10 (e.g. 13000). Loads NVRTC (below) on first use.
int nvrtc_version();

// NVRTC is opened with dlopen on first use rather than linked, so the library loads and runs its
// CPU parts on machines without the CUDA Toolkit, and finds NVRTC where this machine has it
// rather than at a path from the build machine. The candidates, in order: each entry of
// DFGNN_NVRTC_PATH (the user's: ':'-separated directories or files), $CUDA_HOME and $CUDA_PATH
// (lib64, lib), /usr/local/cuda (lib64, lib), the nvidia-cuda-nvrtc pip wheel (PyTorch's) beside
// this library (site-packages/nvidia/...) or where the Python package found it on sys.path
// (DFGNN_NVRTC_WHEEL_DIRS, set by dfgnn/_nvrtc.py), then the soname alone (the loader's default
// search: LD_LIBRARY_PATH, ld.so.cache). An NVRTC already loaded in the process is used first.
std::vector<std::string> nvrtc_candidates();
// Opens the first of the candidates that loads and has every NVRTC function dfgnn calls, and
// returns its path; throws Error(NOT_SUPPORTED) listing each candidate with why it failed.
std::string find_nvrtc(const std::vector<std::string>& candidates);
// The path of the NVRTC in use: nvrtc_candidates() searched once per process (thread-safe; a
// failure is remembered and thrown again by every later call).
const std::string& nvrtc_library();

struct Cubin {
  std::vector<char> image;
  std::vector<std::string> names;    // name expressions, in request order
  std::vector<std::string> lowered;  // their mangled names in the image
  std::string log;                   // compiler log (warnings)
  std::string origin;                // where it came from: "compiled", or the store's layer and file
};

// The NVRTC options every compile uses for sm_<arch> (part of every module key: changing them
// retires stored modules).
std::vector<std::string> nvrtc_options(int arch);

// Compiles the embedded source for sm_<arch> with the given name expressions.
// Throws Error(NOT_SUPPORTED) when NVRTC is missing or does not compile for sm_<arch> (naming the
// architecture and the range it does), Error(COMPILE_ERROR) carrying the NVRTC log, options and
// the expressions.
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

// Thread-safe cache of compiled (and, on a GPU, loaded) modules, keyed by source hash, options,
// architecture and name expressions (not the NVRTC version: any NVRTC's cubin for the
// architecture serves, and one the driver does not load is compiled again).
class ModuleCache {
 public:
  std::shared_ptr<const Cubin> cubin(const std::vector<std::string>& names, int arch);
  // Several modules at once (a backward's helpers, row pass and column pass), on threads: each is
  // one NVRTC program, so a cold first call waits for the slowest rather than for their sum.
  // Throws the first module's error after every compile has ended.
  void cubins(const std::vector<std::vector<std::string>>& lists, int arch);
  std::shared_ptr<const LoadedModule> loaded(const std::vector<std::string>& names, int arch);
  CacheCounters counters() const;
  // Where the module of `names` came from in this process (Cubin::origin); empty when not yet asked for.
  std::string origin(const std::vector<std::string>& names, int arch) const;
  // Consulted before compiling and fed after; may be null. Not owned.
  void set_store(ModuleStore* store);

 private:
  static std::string key(const std::vector<std::string>& names, int arch);
  // NVRTC for `names`, timed, logged with `why` and counted; origin "compiled".
  Cubin compile_logged(const std::vector<std::string>& names, int arch, const std::string& why);
  // NVRTC for `names`, each dropout kernel held at the resident blocks of its sibling without
  // dropout (kernel_names.hpp's held_resident), the kernel the tuner timed, whose module this cache
  // provides (from memory, the store or NVRTC) and whose registers it reads; a kernel that would
  // spill when held keeps its own occupancy. The lowered names are the compiled kernels'.
  Cubin compile_resident(const std::vector<std::string>& names, int arch);
  ModuleStore* store_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Cubin>> cubins_;
  std::unordered_map<std::string, std::shared_ptr<const LoadedModule>> modules_;
  CacheCounters counters_;
};

}  // namespace dfgnn
