// Degree fingerprint of a graph: computation, versioned text form, distance and bucket key.
#pragma once

#include <dfgnn/dfgnn.h>

#include <string>

namespace dfgnn {

struct Compressed;

dfgnn_fingerprint_t compute_fingerprint(const Compressed& csr);
std::string serialize_fingerprint(const dfgnn_fingerprint_t& fp);
// Throws Error(PARSE_ERROR) naming the problem (bad JSON, missing key, unknown version).
dfgnn_fingerprint_t parse_fingerprint(const std::string& text);
double fingerprint_distance(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b);
std::string fingerprint_bucket_key(const dfgnn_fingerprint_t& fp);

}  // namespace dfgnn
