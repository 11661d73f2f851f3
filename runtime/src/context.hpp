// Context internals: per-context state shared by ops (module cache and counters arrive with the
// NVRTC runtime).
#pragma once

namespace dfgnn {

struct Context {};

}  // namespace dfgnn
