// NVRTC name expressions of the kernel templates (kernel_templates/*.cuh), one function per
// kernel template, so solvers and the backward helpers spell a specialisation the same way.
#pragma once

#include <dfgnn/dfgnn.h>

#include "schedule.hpp"

#include <optional>
#include <string>

namespace dfgnn {

// The template arguments: element type, model functor and pass (kernel_templates/passes.cuh).
const char* element_type(dfgnn_dtype_t dtype);  // Error(NOT_SUPPORTED) for dtypes without kernels
const char* variant_type(dfgnn_model_t model);
// Lane groups of `lanes` lanes spanning `heads` heads (lanes / heads lanes per head), with edge
// features and attention dropout compiled in or not.
std::string geo_type(const dfgnn_op_t& op, int32_t lanes, int32_t heads, int32_t vec, bool edge_features,
                     bool dropout);
std::string pass_type(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t heads, int32_t vec);

// Lane groups as above, `groups` per block, `team` groups per row (schedules.cuh).
std::string rows_kernel(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t heads, int32_t vec, int32_t groups,
                        int32_t team);
// Split rows' partial states merged, 256 threads per block.
std::string merge_kernel(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t heads, int32_t vec);
// One block per row group of about equal edges.
std::string balanced_kernel(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t heads, int32_t vec,
                            int32_t groups);

// The backward's helpers: per-node prep, and the two stages of a parameter-gradient reduction
// (empty names when the model has no parameter to reduce).
std::string prep_kernel(const dfgnn_op_t& op);
std::string reduce_stage1_kernel(const dfgnn_op_t& op);
std::string reduce_stage2_kernel(const dfgnn_op_t& op);

// A kernel with dropout compiled in: the same kernel's name without it (its sibling, the kernel the
// tuner timed), or nullopt for a kernel without dropout.
std::optional<std::string> without_dropout(const std::string& kernel);
// A rows or balanced kernel with dropout (the kernels whose launch bounds ask for resident blocks)
// asked to keep `blocks` >= 1 blocks resident per SM (common.cuh's Resident); nullopt for any other.
std::optional<std::string> held_resident(const std::string& kernel, int blocks);

}  // namespace dfgnn
