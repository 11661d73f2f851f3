// GPU ops: dispatch a schedule per pass, build/reuse its plan, specialise the kernels through
// NVRTC (cached), and launch on the caller's stream.
#pragma once

#include <dfgnn/dfgnn.h>

#include "schedule.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace dfgnn {

class Graph;
struct Context;

struct LaunchArgs {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Forced schedule text (parse_schedules), or null for the default rule.
  const char* schedule = nullptr;
  const uint64_t* dropout_seed_device = nullptr;  // overrides op.dropout_seed when set
};

// Schedules that would run (forced text validated, else the default rule). max_vec as allowed by
// the data's alignment (16 bytes / dtype size when unknown).
SchedulePair choose_schedules(Context& ctx, const Graph& graph, const dfgnn_op_t& op, dfgnn_direction_t direction,
                             const char* forced, int32_t max_vec);
PassProblem pass_problem(const Graph& graph, const dfgnn_op_t& op, PassKind pass, int32_t max_vec);

// NVRTC name expressions a pass may launch under a schedule (its solver's kernels()), and the
// helper kernels of a backward (prep, parameter reductions).
std::vector<std::string> pass_kernel_names(const dfgnn_op_t& op, PassKind pass, const Schedule& s);
std::vector<std::string> backward_helper_names(const dfgnn_op_t& op);
// The three modules of a backward (row pass, column pass, helpers), each one NVRTC program.
std::vector<std::vector<std::string>> backward_module_names(const dfgnn_op_t& op, const SchedulePair& s);

size_t workspace_size(const Graph& graph, const dfgnn_op_t& op, dfgnn_direction_t direction,
                      const SchedulePair& schedules);

void forward(Context& ctx, const Graph& graph, const dfgnn_op_t& op, const dfgnn_inputs_t& in, void* out,
             float* lse, const LaunchArgs& launch);
void backward(Context& ctx, const Graph& graph, const dfgnn_op_t& op, const dfgnn_inputs_t& in, const void* out,
              const float* lse, const void* grad_out, const dfgnn_grads_t& grads, const LaunchArgs& launch);

}  // namespace dfgnn
