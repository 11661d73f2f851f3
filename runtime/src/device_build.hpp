// Graphs built where their arrays live: a device edge_index or CSR becomes CSR + CSC + degree runs
// on the GPU (CUB sorts and scans on the caller's stream), with the same validation, the same
// messages and bit-identical arrays as the host build (graph.cpp). Only fixed-size summaries come
// back to the host: validation flags, counts, and the degree runs of the fingerprints.
#pragma once

#include <dfgnn/dfgnn.h>

#include "cuda.hpp"
#include "degree_run.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace dfgnn {

struct DeviceCompressed;

struct DeviceGraph {
  int32_t num_nodes = 0;
  int64_t nnz = 0;
  DeviceBuffer csr_ptr, csr_idx, csr_eid;  // [N + 1], [nnz], [nnz]: as Compressed (graph.hpp)
  DeviceBuffer csc_ptr, csc_idx, csc_eid;
  std::vector<DegreeRun> csr_runs, csc_runs;  // in-degree and out-degree distributions
};

// Shapes, enums and null pointers are checked by the caller (Graph::check_*_shape) first; these
// check every array entry and throw Error with the status and message of the host build.
DeviceGraph build_device_coo(int64_t num_nodes, int64_t num_edges, const void* edge_index,
                             dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options,
                             cudaStream_t stream);
DeviceGraph build_device_csr(int64_t num_nodes, int64_t nnz, const void* row_ptr, const void* col_idx,
                             dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options,
                             cudaStream_t stream);

// The rows of a device CSR or CSC (ptr: rows + 1 entries) of degree >= min_degree, ascending, as
// (row, begin, end) triples: selected on the device (CUB) on the legacy default stream, after
// which only they come to the host (the planners of split rows read nothing else).
std::vector<int32_t> device_long_rows(const DeviceBuffer& ptr, int32_t rows, int32_t min_degree);

}  // namespace dfgnn
