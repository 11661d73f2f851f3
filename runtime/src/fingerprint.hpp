// Degree fingerprint of a graph: computation, versioned text form, distance and bucket key.
#pragma once

#include <dfgnn/dfgnn.h>

#include "degree_run.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dfgnn {

struct Compressed;

std::vector<DegreeRun> degree_runs(const Compressed& structure);

// Every statistic is computed from the runs alone, in exact integers where it can be, so a graph
// built on the host and one built on the device get bit-identical fingerprints.
dfgnn_fingerprint_t compute_fingerprint(int64_t num_rows, int64_t nnz, std::span<const DegreeRun> runs);
dfgnn_fingerprint_t compute_fingerprint(const Compressed& csr);
std::string serialize_fingerprint(const dfgnn_fingerprint_t& fp);
// Throws Error(PARSE_ERROR) naming the problem (bad JSON, missing key, unknown version).
dfgnn_fingerprint_t parse_fingerprint(const std::string& text);
double fingerprint_distance(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b);
std::string fingerprint_bucket_key(const dfgnn_fingerprint_t& fp);

}  // namespace dfgnn
