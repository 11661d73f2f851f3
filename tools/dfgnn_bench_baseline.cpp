#include "dfgnn_bench_baseline.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

namespace bench {
namespace {

// Helper kernels of the unfused pipeline. Scores are laid out [H, E] (head-major, edges in CSR
// order); per-node GAT terms [H, N]. One warp per (row, head) or (node, head).
constexpr const char* kSource = R"(
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// In-place softmax of each CSR row of each head: max, sum of exp, normalise.
extern "C" __global__ void row_softmax(const int* __restrict__ row_ptr, float* __restrict__ scores,
                                       int num_nodes, int heads, long long num_edges) {
  const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= (long long)num_nodes * heads) return;
  const int h = (int)(warp / num_nodes), i = (int)(warp % num_nodes);
  float* v = scores + h * num_edges;
  const int begin = row_ptr[i], end = row_ptr[i + 1];
  float m = __int_as_float(0xff800000);  // -inf
  for (int p = begin + lane; p < end; p += 32) m = fmaxf(m, v[p]);
  m = warp_max(m);
  float s = 0.f;
  for (int p = begin + lane; p < end; p += 32) s += expf(v[p] - m);
  s = warp_sum(s);
  const float inv = 1.f / s;
  for (int p = begin + lane; p < end; p += 32) v[p] = expf(v[p] - m) * inv;
}

// GAT per-node terms: el[h, j] = att_src[h] . h_j, er[h, i] = att_dst[h] . h_i.
extern "C" __global__ void gat_node_scores(const float* __restrict__ x, const float* __restrict__ att_src,
                                           const float* __restrict__ att_dst, float* __restrict__ el,
                                           float* __restrict__ er, int num_nodes, int heads, int dim) {
  const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= (long long)num_nodes * heads) return;
  const int i = (int)(warp / heads), h = (int)(warp % heads);
  const float* row = x + warp * dim;
  float a = 0.f, b = 0.f;
  for (int d = lane; d < dim; d += 32) {
    const float f = row[d];
    a += f * att_src[h * dim + d];
    b += f * att_dst[h * dim + d];
  }
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) {
    el[(long long)h * num_nodes + i] = a;
    er[(long long)h * num_nodes + i] = b;
  }
}

// GAT edge scores: scores[h, p] = LeakyReLU(er[h, i] + el[h, col_idx[p]]) for the edges p of row i.
extern "C" __global__ void gat_edge_scores(const int* __restrict__ row_ptr, const int* __restrict__ col_idx,
                                           const float* __restrict__ el, const float* __restrict__ er,
                                           float* __restrict__ scores, int num_nodes, int heads,
                                           long long num_edges, float slope) {
  const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= (long long)num_nodes * heads) return;
  const int h = (int)(warp / num_nodes), i = (int)(warp % num_nodes);
  const float r = er[(long long)h * num_nodes + i];
  const float* l = el + (long long)h * num_nodes;
  float* out = scores + h * num_edges;
  for (int p = row_ptr[i] + lane; p < row_ptr[i + 1]; p += 32) {
    const float e = r + l[col_idx[p]];
    out[p] = e > 0.f ? e : e * slope;
  }
}
)";

constexpr int kBlock = 256;  // threads per block, 8 warps

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  nvrtcGetProgramLog(program, log.data());
  log.resize(size - 1);
  return log;
}

std::vector<char> compile(int arch) {
  nvrtcProgram program = nullptr;
  BENCH_NVRTC(nvrtcCreateProgram(&program, kSource, "dfgnn_bench_baseline.cu", 0, nullptr, nullptr));
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&program, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });
  const std::string arch_option = fmt::format("-arch=sm_{}", arch);
  const char* options[] = {arch_option.c_str(), "-default-device", "-DNDEBUG"};
  const nvrtcResult result = nvrtcCompileProgram(program, 3, options);
  if (result != NVRTC_SUCCESS)
    throw Failure{fmt::format("nvrtcCompileProgram(baseline kernels, {}): {}\n{}", arch_option,
                              nvrtcGetErrorString(result), program_log(program))};
  size_t size = 0;
  BENCH_NVRTC(nvrtcGetCUBINSize(program, &size));
  std::vector<char> cubin(size);
  BENCH_NVRTC(nvrtcGetCUBIN(program, cubin.data()));
  return cubin;
}

}  // namespace

Baseline::Baseline(cudaStream_t stream, int arch) : stream_(stream) {
  const std::vector<char> cubin = compile(arch);
  BENCH_CUDA(cudaLibraryLoadData(&library_, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaKernel_t k = nullptr;
  BENCH_CUDA(cudaLibraryGetKernel(&k, library_, "row_softmax"));
  softmax_ = reinterpret_cast<void*>(k);
  BENCH_CUDA(cudaLibraryGetKernel(&k, library_, "gat_node_scores"));
  node_scores_ = reinterpret_cast<void*>(k);
  BENCH_CUDA(cudaLibraryGetKernel(&k, library_, "gat_edge_scores"));
  edge_scores_ = reinterpret_cast<void*>(k);
  BENCH_CUSPARSE(cusparseCreate(&handle_));
  BENCH_CUSPARSE(cusparseSetStream(handle_, stream_));
}

Baseline::~Baseline() {
  release();
  if (handle_ != nullptr) cusparseDestroy(handle_);
  if (library_ != nullptr) cudaLibraryUnload(library_);
}

std::string Baseline::unsupported(dfgnn_model_t model, dfgnn_dtype_t dtype, int64_t num_edges) {
  if (model != DFGNN_MODEL_TRANSFORMER && model != DFGNN_MODEL_GAT) return "baseline: Transformer and GAT only";
  if (dtype != DFGNN_DTYPE_FLOAT32) return "baseline: float32 only";
  if (num_edges == 0) return "baseline: graph has no edges";
  return {};
}

void Baseline::release() {
  for (auto* list : {&a_, &b_, &v_, &out_})
    for (cusparseDnMatDescr_t d : *list)
      if (d != nullptr) cusparseDestroyDnMat(d);
  for (cusparseSpMatDescr_t d : csr_)
    if (d != nullptr) cusparseDestroySpMat(d);
  a_.clear(), b_.clear(), v_.clear(), out_.clear(), csr_.clear();
  scores_.reset(), el_.reset(), er_.reset(), sddmm_buffer_.reset(), spmm_buffer_.reset();
  sddmm_stride_ = 0;
  problem_ = {};
}

void Baseline::launch(void* kernel, int64_t warps, void** args) {
  const int64_t blocks = (warps * 32 + kBlock - 1) / kBlock;
  if (blocks > INT32_MAX) throw Failure{"baseline: grid too large"};
  BENCH_CUDA(cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kBlock), args, 0, stream_));
}

void Baseline::prepare(const BaselineProblem& p) {
  release();
  if (p.sets.empty()) throw Failure{"baseline: no input sets"};
  problem_ = p;
  const int64_t n = p.num_nodes, e = p.num_edges, ld = int64_t{p.heads} * p.dim;
  const bool gat = p.model == DFGNN_MODEL_GAT;
  scores_ = DeviceBuffer(sizeof(float) * static_cast<size_t>(e) * p.heads);
  if (gat) {
    el_ = DeviceBuffer(sizeof(float) * static_cast<size_t>(n) * p.heads);
    er_ = DeviceBuffer(sizeof(float) * static_cast<size_t>(n) * p.heads);
  }
  const BaselineInputs& s0 = p.sets[0];
  for (int32_t h = 0; h < p.heads; ++h) {
    cusparseSpMatDescr_t csr = nullptr;
    BENCH_CUSPARSE(cusparseCreateCsr(&csr, n, n, e, const_cast<int32_t*>(p.row_ptr), const_cast<int32_t*>(p.col_idx),
                                     scores_.get<float>() + static_cast<size_t>(h) * e, CUSPARSE_INDEX_32I,
                                     CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    csr_.push_back(csr);
    const size_t off = static_cast<size_t>(h) * p.dim;
    auto view = [&](const float* base) {
      cusparseDnMatDescr_t d = nullptr;
      BENCH_CUSPARSE(cusparseCreateDnMat(&d, n, p.dim, ld, const_cast<float*>(base + off), CUDA_R_32F, CUSPARSE_ORDER_ROW));
      return d;
    };
    if (gat) {
      v_.push_back(view(s0.h));
    } else {
      a_.push_back(view(s0.q));
      b_.push_back(view(s0.k));
      v_.push_back(view(s0.v));
    }
    out_.push_back(view(p.out));
  }
  const float one = 1.f, zero = 0.f;
  if (!gat) {
    // scores = scale * (Q K^T) masked to the graph's pattern, one SDDMM per head; each head's
    // descriptor gets its own preprocessed buffer (the pattern is fixed; data pointers rotate).
    const float scale = p.scale != 0 ? p.scale : 1.f / std::sqrt(static_cast<float>(p.dim));
    size_t bytes = 0;
    BENCH_CUSPARSE(cusparseSDDMM_bufferSize(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_TRANSPOSE,
                                            &scale, a_[0], b_[0], &zero, csr_[0], CUDA_R_32F,
                                            CUSPARSE_SDDMM_ALG_DEFAULT, &bytes));
    sddmm_stride_ = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    sddmm_buffer_ = DeviceBuffer(sddmm_stride_ * p.heads);
    for (int32_t h = 0; h < p.heads; ++h)
      BENCH_CUSPARSE(cusparseSDDMM_preprocess(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_TRANSPOSE,
                                              &scale, a_[h], b_[h], &zero, csr_[h], CUDA_R_32F,
                                              CUSPARSE_SDDMM_ALG_DEFAULT, sddmm_buffer_.get<char>() + h * sddmm_stride_));
    problem_.scale = scale;
  }
  size_t bytes = 0;
  BENCH_CUSPARSE(cusparseSpMM_bufferSize(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                         &one, csr_[0], v_[0], &zero, out_[0], CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT,
                                         &bytes));
  spmm_buffer_ = DeviceBuffer(std::max<size_t>(bytes, 1));
  BENCH_CUDA(cudaStreamSynchronize(stream_));
}

void Baseline::run(size_t set) {
  const BaselineProblem& p = problem_;
  const BaselineInputs& in = p.sets.at(set % p.sets.size());
  const bool gat = p.model == DFGNN_MODEL_GAT;
  const size_t stride = static_cast<size_t>(p.dim);
  int32_t n = static_cast<int32_t>(p.num_nodes), heads = p.heads, dim = p.dim;
  long long e = p.num_edges;
  float* scores = scores_.get<float>();
  const int64_t warps = int64_t{n} * heads;
  // Point the per-head views at this set (host-side descriptor updates only).
  for (int32_t h = 0; h < heads; ++h) {
    if (gat) {
      BENCH_CUSPARSE(cusparseDnMatSetValues(v_[h], const_cast<float*>(in.h + h * stride)));
    } else {
      BENCH_CUSPARSE(cusparseDnMatSetValues(a_[h], const_cast<float*>(in.q + h * stride)));
      BENCH_CUSPARSE(cusparseDnMatSetValues(b_[h], const_cast<float*>(in.k + h * stride)));
      BENCH_CUSPARSE(cusparseDnMatSetValues(v_[h], const_cast<float*>(in.v + h * stride)));
    }
  }
  const float one = 1.f, zero = 0.f;
  if (gat) {
    const float* x = in.h;
    const float* att_src = in.att_src;
    const float* att_dst = in.att_dst;
    float* el = el_.get<float>();
    float* er = er_.get<float>();
    const int* row_ptr = p.row_ptr;
    const int* col_idx = p.col_idx;
    float slope = p.negative_slope;
    void* node_args[] = {&x, &att_src, &att_dst, &el, &er, &n, &heads, &dim};
    launch(node_scores_, warps, node_args);
    void* edge_args[] = {&row_ptr, &col_idx, &el, &er, &scores, &n, &heads, &e, &slope};
    launch(edge_scores_, warps, edge_args);
  } else {
    for (int32_t h = 0; h < heads; ++h)
      BENCH_CUSPARSE(cusparseSDDMM(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_TRANSPOSE, &p.scale,
                                   a_[h], b_[h], &zero, csr_[h], CUDA_R_32F, CUSPARSE_SDDMM_ALG_DEFAULT,
                                   sddmm_buffer_.get<char>() + h * sddmm_stride_));
  }
  const int* row_ptr = p.row_ptr;
  void* softmax_args[] = {&row_ptr, &scores, &n, &heads, &e};
  launch(softmax_, warps, softmax_args);
  for (int32_t h = 0; h < heads; ++h)
    BENCH_CUSPARSE(cusparseSpMM(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one,
                                csr_[h], v_[h], &zero, out_[h], CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT,
                                spmm_buffer_.get()));
}

}  // namespace bench
