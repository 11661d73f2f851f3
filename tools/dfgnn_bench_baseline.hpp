// Unfused float32 baseline of dfgnn-bench (forward only, Graph Transformer and GAT): cuSPARSE
// SDDMM (or an NVRTC gather kernel for GAT's additive scores), an NVRTC row-softmax kernel, then
// cuSPARSE SpMM, the way a framework without fused kernels computes graph attention.
//
// Heads: cuSPARSE has no head dimension, so the SDDMM and SpMM run once per head in a loop over
// strided [N, D] views of the [N, H, D] tensors (leading dimension H*D; no copies); the softmax
// and GAT scoring kernels cover all heads in one launch each. Scores take H*E floats, like the
// per-edge tensors of PyG.
#pragma once

#include "dfgnn_bench_common.hpp"

#include <cstdint>
#include <vector>

namespace bench {

// Device pointers of one input set of the baseline (float32 features [N, H, D]).
struct BaselineInputs {
  const float* q = nullptr;  // Transformer
  const float* k = nullptr;
  const float* v = nullptr;
  const float* h = nullptr;  // GAT
  const float* att_src = nullptr;
  const float* att_dst = nullptr;
};

struct BaselineProblem {
  dfgnn_model_t model = DFGNN_MODEL_TRANSFORMER;
  int64_t num_nodes = 0, num_edges = 0;
  int32_t heads = 1, dim = 1;
  float negative_slope = 0.2f;  // GAT
  float scale = 0;              // Transformer (1/sqrt(D) when 0)
  const int32_t* row_ptr = nullptr;  // device CSR by destination (from dfgnnGraphGetCsr)
  const int32_t* col_idx = nullptr;
  std::vector<BaselineInputs> sets;  // rotated input sets
  float* out = nullptr;              // [N, H, D] float32
};

class Baseline {
 public:
  // Compiles the helper kernels with NVRTC for compute capability arch (e.g. 90), loads them and
  // creates the cuSPARSE handle on stream.
  Baseline(cudaStream_t stream, int arch);
  ~Baseline();
  Baseline(const Baseline&) = delete;
  Baseline& operator=(const Baseline&) = delete;

  // Why a configuration has no baseline (empty when it has one).
  static std::string unsupported(dfgnn_model_t model, dfgnn_dtype_t dtype, int64_t num_edges);

  // Builds descriptors and scratch for one problem (replacing any earlier one).
  void prepare(const BaselineProblem& problem);
  // Enqueues the whole pipeline on the stream for input set `set`.
  void run(size_t set);
  // Frees the problem's descriptors and scratch.
  void release();

 private:
  void launch(void* kernel, int64_t warps, void** args);

  cudaStream_t stream_;
  cusparseHandle_t handle_ = nullptr;
  cudaLibrary_t library_ = nullptr;
  void* softmax_ = nullptr;
  void* node_scores_ = nullptr;
  void* edge_scores_ = nullptr;

  BaselineProblem problem_;
  DeviceBuffer scores_;             // [H, E]
  DeviceBuffer el_, er_;            // GAT: [H, N]
  DeviceBuffer sddmm_buffer_;       // per head, sddmm_stride_ bytes each
  size_t sddmm_stride_ = 0;
  DeviceBuffer spmm_buffer_;
  std::vector<cusparseSpMatDescr_t> csr_;             // per head, values = scores_ + h * E
  std::vector<cusparseDnMatDescr_t> a_, b_, v_, out_;  // per head [N, D] views, ld = H * D
};

}  // namespace bench
