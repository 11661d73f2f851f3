// One entry of a degree distribution (C++17: also included by the nvcc-compiled graph build).
#pragma once

#include <cstdint>

namespace dfgnn {

// `count` rows of degree `degree`. A graph's degree distribution is its runs in ascending degree
// order: at most about sqrt(2E) + 2 of them, so a device-built graph copies back only these.
struct DegreeRun {
  int32_t degree;
  int64_t count;
};

}  // namespace dfgnn
