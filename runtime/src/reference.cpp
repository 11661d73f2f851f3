// PLACEHOLDER: being written (reference helper).
#include "reference.hpp"
#include "error.hpp"
namespace dfgnn {
void reference_forward(const Graph&, const dfgnn_op_t&, const dfgnn_inputs_t&, double*, double*) { fail(DFGNN_STATUS_NOT_SUPPORTED, "not yet"); }
void reference_backward(const Graph&, const dfgnn_op_t&, const dfgnn_inputs_t&, const double*, const dfgnn_grads_t&) { fail(DFGNN_STATUS_NOT_SUPPORTED, "not yet"); }
}  // namespace dfgnn
