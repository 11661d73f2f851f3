// PLACEHOLDER: being written (graph io helper).
#include "graph_io.hpp"
#include "error.hpp"
namespace dfgnn {
EdgeList read_graph_file(const std::string&) { fail(DFGNN_STATUS_NOT_SUPPORTED, "not yet"); }
EdgeList generate_rmat(int32_t, int64_t, double, double, double, uint32_t, uint64_t) { fail(DFGNN_STATUS_NOT_SUPPORTED, "not yet"); }
EdgeList generate_planted_hubs(int64_t, int32_t, int32_t, int64_t, uint64_t) { fail(DFGNN_STATUS_NOT_SUPPORTED, "not yet"); }
}  // namespace dfgnn
