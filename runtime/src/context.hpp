// Context internals: the compiled-module cache and per-device facts shared by all ops.
#pragma once

#include "dispatch.hpp"
#include "nvrtc.hpp"

#include <mutex>
#include <unordered_map>

namespace dfgnn {

// A cubin as the module store keeps it (zlib-compressed behind a magic) and back; unpacking a
// raw cubin (as databases before compression hold them) returns it unchanged, a damaged packed one
// throws std::runtime_error naming what is wrong.
std::vector<char> packed_module_image(const std::vector<char>& image);
std::vector<char> unpacked_module_image(std::vector<char> stored);

// Keeps compiled cubins in the dispatcher's tuning database (user layer written, all read).
class DatabaseModuleStore final : public ModuleStore {
 public:
  explicit DatabaseModuleStore(Dispatcher& dispatcher) : dispatcher_(dispatcher) {}
  std::optional<Cubin> load(const std::string& key, int arch) override;
  void save(const std::string& key, int arch, const Cubin& cubin) override;

 private:
  Dispatcher& dispatcher_;
};

struct Context {
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Whether the context with this serial still exists (graphs drop cached recipes of dead ones).
  static bool alive(uint64_t serial);

  // Unique for the life of the process (never reused), for caches keyed by context.
  const uint64_t serial = next_serial();
  Dispatcher dispatcher;
  DatabaseModuleStore module_store{dispatcher};
  ModuleCache modules;

  // Compute capability of the current device as major*10 + minor (90 on H100/H200); cached.
  int current_arch();

 private:
  static uint64_t next_serial();
  std::mutex arch_mutex_;
  std::unordered_map<int, int> arch_by_device_;
};

}  // namespace dfgnn
