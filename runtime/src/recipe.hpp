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
#include <string>
#include <vector>

namespace dfgnn {

class Plan;
class LoadedModule;

struct RecipeKey {
  uint64_t context = 0;     // Context::serial
  uint64_t generation = 0;  // the dispatcher's: a database change or tuning retires old recipes
  int32_t model = 0, dtype = 0, heads = 0, dim = 0, edge_features = 0, direction = 0, max_vec = 0, device = 0;
  int32_t dropout = 0;      // 1 where the op's dropout is compiled in (its kernels differ; the rate is a Param)
  std::string forced;       // the forced schedule text ("" = dispatch)
  bool operator==(const RecipeKey&) const = default;
};

struct RecipeKeyHash {
  size_t operator()(const RecipeKey& k) const noexcept;
};

// One kernel launch of a pass (a solver's Launch, resolved), with the Params fields that differ
// between its launches.
struct KernelLaunch {
  std::string what;  // "<role> kernel launch (<solver>)", for launch errors
  cudaKernel_t kernel = nullptr;
  unsigned grid = 0, block = 0;
  size_t smem = 0;
  bool merge = false;          // over the split rows to merge (Params::hubs), else over a plan part
  const int4* list = nullptr;  // a part's segments (null: whole rows), or the hub list
  int32_t count = 0;           // items (rows or segments), or hubs
  int32_t min_degree = 0, max_degree = 0;
};

struct PassRecipe {
  const int* ptr = nullptr;  // the pass's structure on the device (CSR, or CSC for the column pass)
  const int* idx = nullptr;
  const int* eid = nullptr;  // column pass: CSR positions of the CSC entries (dropout's edge ids)
  const int* edge_id = nullptr;  // ops with edge features: the CSR's edge ids (rows of the edge features)
  std::vector<KernelLaunch> launches;  // in launch order
  int32_t slots = 0;                  // partial-state slots per head
  std::shared_ptr<const Plan> plan;   // keeps the work lists and kernels alive
  std::shared_ptr<const LoadedModule> module;
};

struct Recipe {
  SchedulePair schedules;
  size_t workspace_bytes = 0;
  PassRecipe first;   // forward, or the backward's row pass
  PassRecipe second;  // the backward's column pass
  // Backward: the prep kernel and the parameter reduction's two stages (null when the model has
  // no parameter to reduce), and the module that holds them.
  std::shared_ptr<const LoadedModule> helpers;
  cudaKernel_t prep = nullptr, reduce_stage1 = nullptr, reduce_stage2 = nullptr;
};

}  // namespace dfgnn
