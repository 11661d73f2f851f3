#include "context.hpp"

#include "cuda.hpp"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <unordered_set>

#include <zlib.h>

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

namespace {
// Stored images are zlib-compressed (cubins shrink about 4x; the shipped modules file is in the
// package): a magic, the raw size (8 bytes, little-endian), the zlib stream. An image without the
// magic is a raw cubin, as databases before compression hold them.
constexpr char kPackedMagic[8] = {'D', 'F', 'G', 'N', 'N', 'Z', '1', '\0'};
constexpr uint64_t kMaxImageBytes = uint64_t{1} << 30;  // far above any module; bounds a bad size field
}  // namespace

std::vector<char> packed_module_image(const std::vector<char>& image) {
  uLongf bound = compressBound(static_cast<uLong>(image.size()));
  std::vector<char> out(sizeof kPackedMagic + 8 + bound);
  std::memcpy(out.data(), kPackedMagic, sizeof kPackedMagic);
  const uint64_t raw = image.size();
  for (int i = 0; i < 8; ++i) out[sizeof kPackedMagic + i] = static_cast<char>((raw >> (8 * i)) & 0xff);
  if (compress2(reinterpret_cast<Bytef*>(out.data() + sizeof kPackedMagic + 8), &bound,
                reinterpret_cast<const Bytef*>(image.data()), static_cast<uLong>(image.size()), 9) != Z_OK)
    return image;  // stored raw, read back raw
  out.resize(sizeof kPackedMagic + 8 + bound);
  return out;
}

std::vector<char> unpacked_module_image(std::vector<char> stored) {
  if (stored.size() < sizeof kPackedMagic || std::memcmp(stored.data(), kPackedMagic, sizeof kPackedMagic) != 0)
    return stored;
  if (stored.size() < sizeof kPackedMagic + 8) throw std::runtime_error("compressed image shorter than its header");
  uint64_t raw = 0;
  for (int i = 0; i < 8; ++i) raw |= uint64_t{static_cast<unsigned char>(stored[sizeof kPackedMagic + i])} << (8 * i);
  if (raw == 0 || raw > kMaxImageBytes) throw std::runtime_error(fmt::format("compressed image claims {} bytes", raw));
  std::vector<char> out(raw);
  uLongf size = static_cast<uLongf>(raw);
  const Bytef* data = reinterpret_cast<const Bytef*>(stored.data() + sizeof kPackedMagic + 8);
  if (uncompress(reinterpret_cast<Bytef*>(out.data()), &size, data,
                 static_cast<uLong>(stored.size() - sizeof kPackedMagic - 8)) != Z_OK || size != raw)
    throw std::runtime_error("compressed image does not inflate to its stated size");
  return out;
}

std::optional<Cubin> DatabaseModuleStore::load(const std::string& key, int arch) {
  try {
    const std::shared_ptr<db::LayeredDb> layers = dispatcher_.database();
    if (layers == nullptr) return std::nullopt;
    // Any NVRTC's cubin for this source and architecture serves (a shipped module was compiled by
    // the packager's); one the driver cannot load is compiled again (ModuleCache::loaded).
    auto record = layers->get_module(key, kernel_source_hash(), 0, arch);
    if (!record) return std::nullopt;
    Cubin cubin;
    cubin.image = unpacked_module_image(std::move(record->image));
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
    record.image = packed_module_image(cubin.image);
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
