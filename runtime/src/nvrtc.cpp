#include "nvrtc.hpp"

#include "cubin_elf.hpp"
#include "cuda.hpp"
#include "error.hpp"
#include "kernel_names.hpp"
#include "logging.hpp"

#include <dlfcn.h>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <string_view>
#include <variant>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace dfgnn {

extern const char kKernelSource[];

namespace {

// ---------------------------------------------------------------- NVRTC, loaded at run time

// Every NVRTC function dfgnn calls; the table holds pointers of the header's own types.
#define DFGNN_NVRTC_FUNCTIONS(X)                                                                       \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcGetNumSupportedArchs) X(nvrtcGetSupportedArchs)        \
  X(nvrtcCreateProgram) X(nvrtcDestroyProgram) X(nvrtcAddNameExpression) X(nvrtcCompileProgram)        \
  X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)                 \
  X(nvrtcGetLoweredName)

struct NvrtcApi {
#define DFGNN_NVRTC_POINTER(name) decltype(&::name) name = nullptr;
  DFGNN_NVRTC_FUNCTIONS(DFGNN_NVRTC_POINTER)
#undef DFGNN_NVRTC_POINTER
};

// The NVRTC major version this library was built against (its ABI; the soname carries it).
constexpr int kNvrtcMajor = CUDART_VERSION / 1000;

std::string nvrtc_soname() { return fmt::format("libnvrtc.so.{}", kNvrtcMajor); }

// Opens one candidate and fills the table; returns why not, or "" on success.
std::string open_nvrtc(const std::string& candidate, NvrtcApi& api) {
  if (candidate.find('/') != std::string::npos && access(candidate.c_str(), F_OK) != 0) return "not present";
  void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return why != nullptr ? why : "dlopen failed";
  }
  NvrtcApi loaded;
  std::string missing;
#define DFGNN_NVRTC_RESOLVE(name)                                                     \
  loaded.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));            \
  if (loaded.name == nullptr) missing += missing.empty() ? #name : ", " #name;
  DFGNN_NVRTC_FUNCTIONS(DFGNN_NVRTC_RESOLVE)
#undef DFGNN_NVRTC_RESOLVE
  if (!missing.empty()) {
    dlclose(handle);
    return "lacks " + missing;
  }
  api = loaded;  // the handle stays open for the life of the process
  return {};
}

struct LoadedNvrtc {
  NvrtcApi api;
  std::string path;
};

LoadedNvrtc load_first(const std::vector<std::string>& candidates) {
  LoadedNvrtc loaded;
  std::string tried;
  for (const std::string& candidate : candidates) {
    const std::string why = open_nvrtc(candidate, loaded.api);
    if (why.empty()) {
      loaded.path = candidate;
      return loaded;
    }
    tried += fmt::format("\n  {}: {}", candidate, why);
  }
  fail(DFGNN_STATUS_NOT_SUPPORTED,
       "NVRTC ({}) was not found, and compiling kernels needs it. Install the CUDA Toolkit {} (or set CUDA_HOME), "
       "or the nvidia-cuda-nvrtc wheel (pip; PyTorch's CUDA builds bring it), or put its directory in "
       "DFGNN_NVRTC_PATH. Tried:{}",
       nvrtc_soname(), kNvrtcMajor, tried);
}

// Where a function of the table lives (the path the loader resolved).
std::string library_of(void* function, const std::string& otherwise) {
  Dl_info info{};
  if (dladdr(function, &info) != 0 && info.dli_fname != nullptr) return info.dli_fname;
  return otherwise;
}

// NVRTC, loaded once; a failure is kept (as an Error) and rethrown by every call.
const LoadedNvrtc& loaded_nvrtc() {
  static const std::variant<LoadedNvrtc, Error> loaded = []() -> std::variant<LoadedNvrtc, Error> {
    try {
      // One already in the process (PyTorch may have opened its own) is used rather than a second copy.
      const std::string soname = nvrtc_soname();
      LoadedNvrtc found;
      if (void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD); handle != nullptr) {
        dlclose(handle);
        if (open_nvrtc(soname, found.api).empty()) found.path = soname;
      }
      if (found.path.empty()) found = load_first(nvrtc_candidates());
      found.path = library_of(reinterpret_cast<void*>(found.api.nvrtcVersion), found.path);
      log().debug("NVRTC loaded from {}", found.path);
      return found;
    } catch (const Error& e) {
      return e;
    }
  }();
  if (const Error* e = std::get_if<Error>(&loaded)) throw *e;
  return std::get<LoadedNvrtc>(loaded);
}

const NvrtcApi& nvrtc_api() { return loaded_nvrtc().api; }

void nvrtc_check(nvrtcResult result, const char* what) {
  if (result != NVRTC_SUCCESS)
    fail(DFGNN_STATUS_COMPILE_ERROR, "{}: {}", what, nvrtc_api().nvrtcGetErrorString(result));
}

struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle != nullptr) nvrtc_api().nvrtcDestroyProgram(&handle);
  }
};

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtc_api().nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  nvrtc_api().nvrtcGetProgramLog(program, log.data());
  log.resize(size - 1);
  return log;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

// The architectures this NVRTC compiles for, ascending.
const std::vector<int>& supported_archs() {
  static const std::vector<int> archs = [] {
    const NvrtcApi& api = nvrtc_api();
    int count = 0;
    std::vector<int> list;
    if (api.nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      list.resize(static_cast<size_t>(count));
      if (api.nvrtcGetSupportedArchs(list.data()) != NVRTC_SUCCESS) list.clear();
    }
    std::sort(list.begin(), list.end());
    return list;
  }();
  return archs;
}

// A GPU outside NVRTC's range (older than the kernels' toolkit supports, or newer than it knows)
// fails here by name, rather than as an NVRTC option error.
void require_supported_arch(int arch) {
  const std::vector<int>& archs = supported_archs();
  if (archs.empty() || std::binary_search(archs.begin(), archs.end(), arch)) return;
  const int version = nvrtc_version();
  const char* relation = arch < archs.front() ? "older than the oldest" : arch > archs.back() ? "newer than the newest" : "not an";
  fail(DFGNN_STATUS_NOT_SUPPORTED,
       "GPU architecture sm_{} is {} architecture NVRTC {}.{} compiles for (sm_{} to sm_{}); dfgnn's kernels need a "
       "GPU in that range, or a CUDA Toolkit that supports sm_{}",
       arch, relation, version / 1000, version % 1000 / 10, archs.front(), archs.back(), arch);
}

}  // namespace

std::vector<std::string> nvrtc_candidates() {
  const std::string soname = nvrtc_soname();
  std::vector<std::string> candidates;
  const auto add = [&](const std::string& path) {
    if (std::find(candidates.begin(), candidates.end(), path) == candidates.end()) candidates.push_back(path);
  };
  const auto add_root = [&](const std::string& root) {
    add(root + "/lib64/" + soname);
    add(root + "/lib/" + soname);
  };
  // A ':'-separated list of directories (the soname inside) or files.
  const auto add_list = [&](const char* variable) {
    const char* value = std::getenv(variable);
    const std::string list = value != nullptr ? value : "";
    for (size_t start = 0; start < list.size();) {
      size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      const std::string entry = list.substr(start, end - start);
      std::error_code ec;
      if (!entry.empty()) add(std::filesystem::is_directory(entry, ec) ? entry + "/" + soname : entry);
      start = end + 1;
    }
  };
  add_list("DFGNN_NVRTC_PATH");
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(var); root != nullptr && *root != '\0') add_root(root);
  add_root("/usr/local/cuda");
  // The pip wheel (nvidia-cuda-nvrtc) in the site-packages that holds this library (site-packages/dfgnn/).
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&nvrtc_candidates), &self) != 0 && self.dli_fname != nullptr) {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::canonical(self.dli_fname, ec).parent_path();
    if (!ec) {
      const std::string nvidia = (dir.parent_path() / "nvidia").string();
      add(fmt::format("{}/cu{}/lib/{}", nvidia, kNvrtcMajor, soname));  // CUDA 13 wheels
      add(fmt::format("{}/cuda_nvrtc/lib/{}", nvidia, soname));         // CUDA 12 wheels
    }
  }
  add_list("DFGNN_NVRTC_WHEEL_DIRS");  // the Python package's: wheels elsewhere on sys.path
  add(soname);
  return candidates;
}

namespace {
// DFGNN_NVRTC_LINEINFO=1: modules carry source lines, for Nsight Compute's source view and
// compute-sanitizer's reports. Off by default: the machine code is the same, but the line tables
// and the PTX text they bring are 40-64% of a module's image, which a process inflates and loads
// for every module it runs (bench/results/2026-12-07h-module-images.md).
bool lineinfo_from_environment() {
  const char* v = std::getenv("DFGNN_NVRTC_LINEINFO");
  if (v == nullptr) return false;
  const std::string_view s(v);
  if (s == "1" || s == "on") return true;
  if (s != "0" && s != "off" && !s.empty())
    log().warn("DFGNN_NVRTC_LINEINFO='{}' is not '1' or '0'; modules are compiled without source lines", s);
  return false;
}
}  // namespace

// Options that change the binary; part of every cache key.
// Compile-time levers, measured with tools/dfgnn_nvrtc_levers.cpp (bench/results/2026-12-05-nvrtc-levers.md):
// of a module's NVRTC time, about 10% is the front end, 55% NVVM and 35% ptxas. The options that
// leave the machine code as it is gain 2-6% each (-minimal, -lineinfo off, a PCH of the source);
// -default-device, --extra-device-vectorization and -Xptxas=-O2 change neither code nor time.
// Only options that change the code gain more (-Ofast-compile=min/max 33-44%): none is used
// until GPU timings show the kernels no slower.
std::vector<std::string> nvrtc_options(int arch) {
  static const bool lineinfo = lineinfo_from_environment();
  std::vector<std::string> options{"-std=c++17", "-arch=sm_" + std::to_string(arch), "-default-device", "-DNDEBUG"};
  if (lineinfo) options.push_back("-lineinfo");
  return options;
}

std::string find_nvrtc(const std::vector<std::string>& candidates) { return load_first(candidates).path; }

const std::string& nvrtc_library() { return loaded_nvrtc().path; }

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
  nvrtc_api().nvrtcVersion(&major, &minor);
  return major * 1000 + minor * 10;
}

Cubin compile(const std::vector<std::string>& names, int arch) {
  const NvrtcApi& api = nvrtc_api();
  require_supported_arch(arch);
  Program program;
  nvrtc_check(api.nvrtcCreateProgram(&program.handle, kernel_source().c_str(), "dfgnn_kernels.cu", 0, nullptr, nullptr),
              "nvrtcCreateProgram");
  for (const std::string& name : names)
    nvrtc_check(api.nvrtcAddNameExpression(program.handle, name.c_str()), "nvrtcAddNameExpression");
  const std::vector<std::string> options = nvrtc_options(arch);
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  const nvrtcResult result = api.nvrtcCompileProgram(program.handle, static_cast<int>(argv.size()), argv.data());
  Cubin cubin;
  cubin.log = program_log(program.handle);
  if (result != NVRTC_SUCCESS) {
    std::string joined_names, joined_options;
    for (const auto& n : names) joined_names += "\n  " + n;
    for (const auto& o : options) joined_options += " " + o;
    fail(DFGNN_STATUS_COMPILE_ERROR, "NVRTC failed ({}) with options{} for:{}\n{}", api.nvrtcGetErrorString(result),
         joined_options, joined_names, cubin.log);
  }
  size_t size = 0;
  nvrtc_check(api.nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize");
  cubin.image.resize(size);
  nvrtc_check(api.nvrtcGetCUBIN(program.handle, cubin.image.data()), "nvrtcGetCUBIN");
  cubin.names = names;
  for (const std::string& name : names) {
    const char* lowered = nullptr;
    nvrtc_check(api.nvrtcGetLoweredName(program.handle, name.c_str(), &lowered), "nvrtcGetLoweredName");
    cubin.lowered.emplace_back(lowered);
  }
  if (!cubin.log.empty()) log().debug("NVRTC log for {} kernels: {}", names.size(), cubin.log);
  return cubin;
}

LoadedModule::LoadedModule(const Cubin& cubin) {
  const Span span("module loaded onto the GPU");
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

namespace {
// "kernel" or "kernel and N more": a module's names for a log line.
std::string describe_names(const std::vector<std::string>& names) {
  if (names.empty()) return "no kernel";
  return names.size() == 1 ? names[0] : fmt::format("{} and {} more", names[0], names.size() - 1);
}
}  // namespace

std::string ModuleCache::key(const std::vector<std::string>& names, int arch) {
  // Not the NVRTC version: a cubin is machine code for one architecture, whichever NVRTC made it,
  // so a module compiled by the packager's NVRTC (the shipped modules) serves every user's.
  std::string key = fmt::format("{}|", kernel_source_hash());
  for (const std::string& o : nvrtc_options(arch)) key += o + " ";
  for (const std::string& n : names) key += "|" + n;
  return key;
}

std::string ModuleCache::origin(const std::vector<std::string>& names, int arch) const {
  const std::string k = key(names, arch);
  std::lock_guard lock(mutex_);
  const auto it = cubins_.find(k);
  return it == cubins_.end() ? std::string() : it->second->origin;
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
  const Span span("module image from the store or NVRTC");
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
  auto compiled = std::make_shared<const Cubin>(
      compile_logged(names, arch, store != nullptr ? "no module for it in memory or in the tuning database's layers"
                                                   : "no module for it in memory (no module store)"));
  if (store != nullptr) store->save(content_key, arch, *compiled);
  std::lock_guard lock(mutex_);
  return cubins_.emplace(k, std::move(compiled)).first->second;
}

Cubin ModuleCache::compile_resident(const std::vector<std::string>& names, int arch) {
  std::vector<std::string> siblings = names;
  bool dropout = false;
  for (std::string& kernel : siblings)
    if (std::optional<std::string> sibling = without_dropout(kernel)) {
      kernel = std::move(*sibling);
      dropout = true;
    }
  if (!dropout) return compile(names, arch);
  const std::shared_ptr<const Cubin> sibling = cubin(siblings, arch);
  std::map<std::string, KernelResources> timed;
  try {
    timed = CubinElf(sibling->image).resources();
  } catch (const std::exception& e) {
    log().warn("dropout kernels compiled at their own occupancy: the module without dropout is unreadable ({})",
               e.what());
    return compile(names, arch);
  }
  std::vector<std::string> held = names;
  for (size_t k = 0; k < names.size(); ++k) {
    const auto it = timed.find(sibling->lowered.at(k));
    if (it == timed.end()) continue;
    if (std::optional<std::string> h =
            held_resident(names[k], resident_blocks(it->second.registers, it->second.max_threads, arch)))
      held[k] = std::move(*h);
  }
  if (held == names) return compile(names, arch);
  Cubin made = compile(held, arch);
  // A kernel held into spilling (a larger stack frame than its sibling's) is not what was timed
  // either: it keeps its own occupancy instead.
  std::map<std::string, KernelResources> mine;
  try {
    mine = CubinElf(made.image).resources();
  } catch (const std::exception&) {
  }
  bool spilled = false;
  for (size_t k = 0; k < names.size(); ++k) {
    if (held[k] == names[k]) continue;
    const auto a = mine.find(made.lowered[k]), b = timed.find(sibling->lowered[k]);
    if (a == mine.end() || b == timed.end() || a->second.frame_bytes > b->second.frame_bytes) {
      held[k] = names[k];
      spilled = true;
    }
  }
  size_t kept = 0;
  for (size_t k = 0; k < names.size(); ++k) kept += held[k] != names[k];
  log().debug("{}: {} dropout kernel(s) held at their sibling's resident blocks{}", describe_names(names), kept,
              spilled ? ", others at their own (held, they spill)" : "");
  return spilled ? compile(held, arch) : made;
}

Cubin ModuleCache::compile_logged(const std::vector<std::string>& names, int arch, const std::string& why) {
  const auto start = std::chrono::steady_clock::now();
  // The module keeps the names asked for: the lowered names lead to the held kernels.
  Cubin made = compile_resident(names, arch);
  made.names = names;
  made.origin = "compiled";
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // A first call that waits on NVRTC says so once: what, why and how long.
  log().info("compiled {} for sm_{} in {:.0f} ms: {}", describe_names(names), arch, ms, why);
  std::lock_guard lock(mutex_);
  ++counters_.compiles;
  return made;
}

void ModuleCache::cubins(const std::vector<std::vector<std::string>>& lists, int arch) {
  // Threads only for what is not in memory yet: a warm recipe build starts none.
  std::vector<const std::vector<std::string>*> missing;
  {
    std::lock_guard lock(mutex_);
    for (const std::vector<std::string>& names : lists) {
      if (cubins_.count(key(names, arch)) == 0) missing.push_back(&names);
      else ++counters_.hits;
    }
  }
  std::vector<std::future<std::shared_ptr<const Cubin>>> others;
  for (size_t k = 1; k < missing.size(); ++k)
    others.push_back(std::async(std::launch::async, [this, names = missing[k], arch] { return cubin(*names, arch); }));
  std::exception_ptr first;
  try {
    if (!missing.empty()) cubin(*missing[0], arch);
  } catch (...) {
    first = std::current_exception();
  }
  for (auto& f : others) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
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
  std::shared_ptr<const LoadedModule> module;
  try {
    module = std::make_shared<const LoadedModule>(*image);
  } catch (const Error& e) {
    if (image->origin == "compiled") throw;
    // A stored cubin this driver does not load (made by a newer NVRTC than it knows): compile here.
    log().warn("module from {} does not load ({}); compiling it", image->origin, e.what());
    auto fresh = std::make_shared<const Cubin>(compile_logged(names, arch, "the stored module does not load here"));
    module = std::make_shared<const LoadedModule>(*fresh);
    std::lock_guard lock(mutex_);
    cubins_[k] = std::move(fresh);
  }
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
