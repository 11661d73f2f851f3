#include "context.hpp"

#include "cuda.hpp"

#include <atomic>
#include <unordered_set>

#include "logging.hpp"

namespace dfgnn {

uint64_t Context::next_serial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

namespace {
struct LiveSerials {
  std::mutex mutex;
  std::unordered_set<uint64_t> serials;
};
LiveSerials& live_serials() {
  static LiveSerials* live = new LiveSerials();  // never destroyed: contexts may outlive static teardown
  return *live;
}
}  // namespace

Context::Context() {
  modules.set_store(&module_store);
  LiveSerials& live = live_serials();
  std::lock_guard lock(live.mutex);
  live.serials.insert(serial);
}

Context::~Context() {
  LiveSerials& live = live_serials();
  std::lock_guard lock(live.mutex);
  live.serials.erase(serial);
}

bool Context::alive(uint64_t serial) {
  LiveSerials& live = live_serials();
  std::lock_guard lock(live.mutex);
  return live.serials.count(serial) != 0;
}

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

std::optional<Cubin> DatabaseModuleStore::load(const std::string& key, int arch) {
  try {
    const std::shared_ptr<db::LayeredDb> layers = dispatcher_.database();
    if (layers == nullptr) return std::nullopt;
    auto record = layers->get_module(key, kernel_source_hash(), nvrtc_version(), arch);
    if (!record) return std::nullopt;
    Cubin cubin;
    cubin.image = std::move(record->image);
    cubin.names = std::move(record->names);
    cubin.lowered = std::move(record->lowered);
    cubin.origin = fmt::format("{} database {}", record->layer, record->source);
    return cubin;
  } catch (const std::exception& e) {
    log().warn("compiled module {} not read from the tuning database: {}", key, e.what());
    return std::nullopt;
  }
}

void DatabaseModuleStore::save(const std::string& key, int arch, const Cubin& cubin) {
  try {
    const std::shared_ptr<db::LayeredDb> layers = dispatcher_.database();
    if (layers == nullptr || layers->user() == nullptr) return;
    db::ModuleRecord record;
    record.key = key;
    record.image = cubin.image;
    record.names = cubin.names;
    record.lowered = cubin.lowered;
    record.arch = arch;
    record.nvrtc_version = nvrtc_version();
    record.template_hash = kernel_source_hash();
    layers->put_module(record);
  } catch (const std::exception& e) {
    log().warn("compiled module {} not stored in the tuning database: {}", key, e.what());
  }
}

}  // namespace dfgnn
