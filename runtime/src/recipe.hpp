// Launch recipes: everything a call of an op direction needs that does not depend on the caller's
// pointers (the dispatched schedules, the workspace size, plans, loaded kernels and grid shapes).
// Built by the first call for a (context, op, direction, alignment, forced schedule) and cached on
// the graph beside its plans, so a warm call only validates, packs the arguments and launches.
#pragma once

#include "ops.hpp"

#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dfgnn {

class Plan;
class LoadedModule;

struct RecipeKey {
  uint64_t context = 0;     // Context::serial
  uint64_t generation = 0;  // the dispatcher's: a database change or tuning retires old recipes
  int32_t model = 0, dtype = 0, heads = 0, dim = 0, edge_features = 0, direction = 0, max_vec = 0, device = 0;
  std::string forced;       // the forced schedule text ("" = dispatch)
  bool operator==(const RecipeKey&) const = default;
};

struct RecipeKeyHash {
  size_t operator()(const RecipeKey& k) const noexcept;
};

// One kernel launch of a pass, with the Params fields that differ between its launches.
struct KernelLaunch {
  cudaKernel_t kernel = nullptr;
  unsigned grid = 0, block = 0;
  size_t smem = 0;
  const int4* list = nullptr;  // rows kernel: chunk segments (null: whole rows); merge: hub list
  int32_t count = 0;           // rows kernel: items (rows or segments); merge: hubs
  int32_t min_degree = 0, max_degree = 0;
};

struct PassRecipe {
  const int* ptr = nullptr;  // the pass's structure on the device (CSR, or CSC for the column pass)
  const int* idx = nullptr;
  const int* eid = nullptr;  // column pass: CSR positions of the CSC entries (dropout's edge ids)
  const int* edge_id = nullptr;  // ops with edge features: the CSR's edge ids (rows of the edge features)
  std::vector<KernelLaunch> rows;
  std::optional<KernelLaunch> merge;  // split rows' partial states merged
  int32_t slots = 0;                  // partial-state slots per head
  std::shared_ptr<const Plan> plan;   // keeps the work lists and kernels alive
  std::shared_ptr<const LoadedModule> module;
};

struct Recipe {
  OpSchedules schedules;
  size_t workspace_bytes = 0;
  PassRecipe first;   // forward, or the backward's row pass
  PassRecipe second;  // the backward's column pass
  std::shared_ptr<const LoadedModule> helpers;  // backward: prep and parameter reductions
};

}  // namespace dfgnn
