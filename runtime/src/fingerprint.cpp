// PLACEHOLDER: being written (fingerprint helper).
#include "fingerprint.hpp"
#include "error.hpp"
#include "graph.hpp"
namespace dfgnn {
dfgnn_fingerprint_t compute_fingerprint(const Compressed&) { fail(DFGNN_STATUS_NOT_SUPPORTED, "fingerprint: not yet"); }
std::string serialize_fingerprint(const dfgnn_fingerprint_t&) { fail(DFGNN_STATUS_NOT_SUPPORTED, "not yet"); }
dfgnn_fingerprint_t parse_fingerprint(const std::string&) { fail(DFGNN_STATUS_NOT_SUPPORTED, "not yet"); }
double fingerprint_distance(const dfgnn_fingerprint_t&, const dfgnn_fingerprint_t&) { fail(DFGNN_STATUS_NOT_SUPPORTED, "not yet"); }
std::string fingerprint_bucket_key(const dfgnn_fingerprint_t&) { fail(DFGNN_STATUS_NOT_SUPPORTED, "not yet"); }
}  // namespace dfgnn
