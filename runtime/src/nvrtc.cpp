#include "nvrtc.hpp"

#include "cuda.hpp"
#include "error.hpp"
#include "logging.hpp"

#include <nvrtc.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace dfgnn {

extern const char kKernelSource[];

namespace {

// Options that change the binary; part of every cache key.
std::vector<std::string> options_for(int arch) {
  return {"-std=c++17", "-arch=sm_" + std::to_string(arch), "-default-device", "-lineinfo", "-DNDEBUG"};
}

void nvrtc_check(nvrtcResult result, const char* what) {
  if (result != NVRTC_SUCCESS) fail(DFGNN_STATUS_COMPILE_ERROR, "{}: {}", what, nvrtcGetErrorString(result));
}

struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle != nullptr) nvrtcDestroyProgram(&handle);
  }
};

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  nvrtcGetProgramLog(program, log.data());
  log.resize(size - 1);
  return log;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace

const std::string& kernel_source() {
  static const std::string source(kKernelSource);
  return source;
}

const std::string& kernel_source_hash() {
  static const std::string hash = hex64(XXH64(kernel_source().data(), kernel_source().size(), 0));
  return hash;
}

int nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return major * 1000 + minor * 10;
}

Cubin compile(const std::vector<std::string>& names, int arch) {
  Program program;
  nvrtc_check(nvrtcCreateProgram(&program.handle, kernel_source().c_str(), "dfgnn_kernels.cu", 0, nullptr, nullptr),
              "nvrtcCreateProgram");
  for (const std::string& name : names)
    nvrtc_check(nvrtcAddNameExpression(program.handle, name.c_str()), "nvrtcAddNameExpression");
  const std::vector<std::string> options = options_for(arch);
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  const nvrtcResult result = nvrtcCompileProgram(program.handle, static_cast<int>(argv.size()), argv.data());
  Cubin cubin;
  cubin.log = program_log(program.handle);
  if (result != NVRTC_SUCCESS) {
    std::string joined_names, joined_options;
    for (const auto& n : names) joined_names += "\n  " + n;
    for (const auto& o : options) joined_options += " " + o;
    fail(DFGNN_STATUS_COMPILE_ERROR, "NVRTC failed ({}) with options{} for:{}\n{}", nvrtcGetErrorString(result),
         joined_options, joined_names, cubin.log);
  }
  size_t size = 0;
  nvrtc_check(nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize");
  cubin.image.resize(size);
  nvrtc_check(nvrtcGetCUBIN(program.handle, cubin.image.data()), "nvrtcGetCUBIN");
  cubin.names = names;
  for (const std::string& name : names) {
    const char* lowered = nullptr;
    nvrtc_check(nvrtcGetLoweredName(program.handle, name.c_str(), &lowered), "nvrtcGetLoweredName");
    cubin.lowered.emplace_back(lowered);
  }
  if (!cubin.log.empty()) log().debug("NVRTC log for {} kernels: {}", names.size(), cubin.log);
  return cubin;
}

LoadedModule::LoadedModule(const Cubin& cubin) {
  cuda_check(cudaLibraryLoadData(&library_, cubin.image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
             "cudaLibraryLoadData");
  for (const std::string& name : cubin.lowered) {
    cudaKernel_t kernel = nullptr;
    cuda_check(cudaLibraryGetKernel(&kernel, library_, name.c_str()), "cudaLibraryGetKernel");
    kernels_.push_back(kernel);
  }
}

LoadedModule::~LoadedModule() {
  if (library_ != nullptr) cudaLibraryUnload(library_);
}

std::string ModuleCache::key(const std::vector<std::string>& names, int arch) {
  std::string key = fmt::format("{}|nvrtc{}|", kernel_source_hash(), nvrtc_version());
  for (const std::string& o : options_for(arch)) key += o + " ";
  for (const std::string& n : names) key += "|" + n;
  return key;
}

std::shared_ptr<const Cubin> ModuleCache::cubin(const std::vector<std::string>& names, int arch) {
  const std::string k = key(names, arch);
  {
    std::lock_guard lock(mutex_);
    auto it = cubins_.find(k);
    if (it != cubins_.end()) {
      ++counters_.hits;
      return it->second;
    }
  }
  // The persistent store, then NVRTC, both outside the lock so independent modules proceed in
  // parallel; a rare duplicate of the same key just loses the race below.
  ModuleStore* store = nullptr;
  {
    std::lock_guard lock(mutex_);
    store = store_;
  }
  const std::string content_key = hex64(XXH64(k.data(), k.size(), 0));
  if (store != nullptr) {
    if (std::optional<Cubin> found = store->load(content_key, arch); found && found->names == names) {
      auto cached = std::make_shared<const Cubin>(std::move(*found));
      std::lock_guard lock(mutex_);
      ++counters_.stored;
      return cubins_.emplace(k, std::move(cached)).first->second;
    }
  }
  auto compiled = std::make_shared<const Cubin>(compile(names, arch));
  if (store != nullptr) store->save(content_key, arch, *compiled);
  std::lock_guard lock(mutex_);
  ++counters_.compiles;
  return cubins_.emplace(k, std::move(compiled)).first->second;
}

std::shared_ptr<const LoadedModule> ModuleCache::loaded(const std::vector<std::string>& names, int arch) {
  const std::string k = key(names, arch);
  {
    std::lock_guard lock(mutex_);
    auto it = modules_.find(k);
    if (it != modules_.end()) {
      ++counters_.hits;
      return it->second;
    }
  }
  auto image = cubin(names, arch);
  auto module = std::make_shared<const LoadedModule>(*image);
  std::lock_guard lock(mutex_);
  ++counters_.loads;
  return modules_.emplace(k, std::move(module)).first->second;
}

void ModuleCache::set_store(ModuleStore* store) {
  std::lock_guard lock(mutex_);
  store_ = store;
}

CacheCounters ModuleCache::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace dfgnn
