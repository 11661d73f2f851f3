// Context internals: the compiled-module cache and per-device facts shared by all ops.
#pragma once

#include "nvrtc.hpp"

#include <mutex>
#include <unordered_map>

namespace dfgnn {

struct Context {
  ModuleCache modules;

  // Compute capability of the current device as major*10 + minor (90 on H100/H200); cached.
  int current_arch();

 private:
  std::mutex arch_mutex_;
  std::unordered_map<int, int> arch_by_device_;
};

}  // namespace dfgnn
