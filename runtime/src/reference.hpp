// Float64 CPU reference of every op, forward and backward: the oracle for tests and the tuner.
#pragma once

#include <dfgnn/dfgnn.h>

namespace dfgnn {

class Graph;

// Inputs are validated by the caller (api.cpp): op checked, slots match the model, dtype FLOAT64.
void reference_forward(const Graph& graph, const dfgnn_op_t& op, const dfgnn_inputs_t& in, double* out,
                       double* lse);
void reference_backward(const Graph& graph, const dfgnn_op_t& op, const dfgnn_inputs_t& in,
                        const double* grad_out, const dfgnn_grads_t& grads);

}  // namespace dfgnn
