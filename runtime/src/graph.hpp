// Graph handle internals: validated CSR by destination plus its transpose, fingerprint and device
// copies made once and cached on the handle.
#pragma once

#include <dfgnn/dfgnn.h>

#include "cuda.hpp"
#include "plan.hpp"
#include "recipe.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace dfgnn {

class Plan;

// Compressed rows of int32 indices. As CSR (by destination): row i lists sources j, eid = input
// edge id. As CSC: column j lists destinations i, eid = the edge's position in the CSR arrays.
struct Compressed {
  int32_t num_rows = 0;
  std::vector<int32_t> ptr{0};  // [num_rows + 1]
  std::vector<int32_t> idx;     // [nnz]
  std::vector<int32_t> eid;     // [nnz]

  int64_t nnz() const { return static_cast<int64_t>(idx.size()); }
  int32_t degree(int32_t row) const { return ptr[row + 1] - ptr[row]; }
};

// Transpose with stable order: within a column, entries keep increasing CSR position.
Compressed transpose(const Compressed& csr);

struct DeviceCompressed {
  DeviceBuffer ptr, idx, eid;
};

class Graph {
 public:
  // Host arrays; validated with a specific status per kind of bad input.
  static std::unique_ptr<Graph> from_csr(int64_t num_nodes, int64_t nnz, const void* row_ptr,
                                         const void* col_idx, dfgnn_index_type_t index_type,
                                         const dfgnn_graph_options_t& options);
  // Shape checks alone (enums, sizes, null pointers), run before any array is read or copied.
  static void check_csr_shape(int64_t num_nodes, int64_t nnz, const void* row_ptr, const void* col_idx,
                              dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options);
  static void check_coo_shape(int64_t num_nodes, int64_t num_edges, const void* edge_index,
                              dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options);
  // edge_index is [2, num_edges]: sources then destinations.
  static std::unique_ptr<Graph> from_coo(int64_t num_nodes, int64_t num_edges, const void* edge_index,
                                         dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options);
  // The same from arrays on the current device, built there on `stream` (device_build.hpp): the
  // same checks, messages and arrays; the host copies are made only if something asks for them.
  static std::unique_ptr<Graph> from_device_coo(int64_t num_nodes, int64_t num_edges, const void* edge_index,
                                                dfgnn_index_type_t index_type, const dfgnn_graph_options_t& options,
                                                cudaStream_t stream);
  static std::unique_ptr<Graph> from_device_csr(int64_t num_nodes, int64_t nnz, const void* row_ptr,
                                                const void* col_idx, dfgnn_index_type_t index_type,
                                                const dfgnn_graph_options_t& options, cudaStream_t stream);

  // Unique for the life of the process (never reused), for caches keyed by graph.
  uint64_t id() const { return id_; }
  int32_t num_nodes() const { return num_nodes_; }
  int64_t num_edges() const { return num_edges_; }
  // Host arrays; a device-built graph downloads them on first use (the reference ops need them).
  const Compressed& csr() const;
  const Compressed& csc() const;
  // What a planner reading `rows_read` (Solver::rows_read) needs of the CSR or the CSC. A
  // device-built graph downloads every row pointer only for rows_read == 0 (once per structure),
  // and otherwise selects the long rows on the device and downloads just them: never an E-sized
  // array.
  RowPointers plan_rows(bool csc, int32_t rows_read) const;

  // Computed once, thread-safe.
  const dfgnn_fingerprint_t& fingerprint() const;
  // Uploaded once to the current device, thread-safe. Throws NO_DEVICE without a GPU, and
  // INVALID_ARGUMENT when a device-built graph is used from another device than its own.
  // device_csr()'s eid stays empty until device_csr_edge_ids() uploads it: read it only there.
  const DeviceCompressed& device_csr() const;
  const int32_t* device_csr_edge_ids() const;
  const DeviceCompressed& device_csc() const;
  // Out-degree fingerprint (of the CSC), for column passes. Computed once.
  const dfgnn_fingerprint_t& csc_fingerprint() const;

  // Plans cached by key (plan.cpp builds them); make runs once per key.
  std::shared_ptr<const Plan> plan(const std::string& key,
                                   const std::function<std::shared_ptr<const Plan>()>& make) const;
  // Launch recipes cached by key (ops.cpp builds them); make runs outside the lock, so a recipe
  // may be built twice by racing threads (the first stored wins). Storing a recipe drops the same
  // context's recipes of older dispatcher generations and the recipes of destroyed contexts.
  std::shared_ptr<const Recipe> recipe(const RecipeKey& key) const;
  std::shared_ptr<const Recipe> store_recipe(const RecipeKey& key, std::shared_ptr<const Recipe> recipe) const;

 private:
  explicit Graph(Compressed csr);
  struct DeviceBuilt;
  explicit Graph(DeviceBuilt built);
  void require_own_device() const;
  uint64_t id_;
  int32_t num_nodes_ = 0;
  int64_t num_edges_ = 0;
  int device_ = -1;  // the device a device-built graph lives on; -1 for host-built graphs
  mutable std::once_flag host_once_, csr_rows_once_, csc_rows_once_;
  mutable Compressed csr_, csc_;            // host-built: set at construction
  mutable Compressed csr_rows_, csc_rows_;  // device-built: row pointers only
  mutable std::once_flag fingerprint_once_, csc_fingerprint_once_;
  mutable dfgnn_fingerprint_t fingerprint_{}, csc_fingerprint_{};
  mutable std::mutex plan_mutex_;
  mutable std::map<std::string, std::shared_ptr<const Plan>> plans_;
  mutable std::mutex recipe_mutex_;
  mutable std::unordered_map<RecipeKey, std::shared_ptr<const Recipe>, RecipeKeyHash> recipes_;
  mutable std::mutex device_mutex_;
  mutable std::optional<DeviceCompressed> device_csr_, device_csc_;
  mutable bool csr_edge_ids_on_device_ = false;  // device_csr_->eid holds them (guarded by device_mutex_)
  mutable int csr_upload_device_ = -1;           // where a host-built graph's CSR went (guarded by device_mutex_)
};

}  // namespace dfgnn
