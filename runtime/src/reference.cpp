// Float64 CPU reference of every op: the oracle for the GPU kernels, written for clarity.
//
// Every model shares one skeleton. For each destination row i and head h: compute the scores
// e_ij of the row's in-edges, softmax them with the row max subtracted, aggregate the value rows.
// The backward replays the same softmax, then
//   d value_j += alpha_ij * grad_out_i
//   d e_ij     = alpha_ij * (grad_out_i . value_j - sum_j' alpha_ij' grad_out_i . value_j')
// and each model pushes d e_ij into the inputs of its score. With attention dropout the aggregated
// weights are alpha_ij m_ij (m from params.cuh's dropout_factor, the kernels' own mask), so
// grad_out_i . value_j and d value_j carry m_ij too. A model is a small class with
//   score(i, j, h), value(j, h)                          (forward)
//   start_backward(), value_grad(j, h), score_backward(i, j, h, de), write(grads)   (backward)
// Gradients accumulate in buffers owned by the model and are copied out at the end, so the
// caller's arrays are overwritten (not added to) everywhere, also for rows no edge touches.
#include "reference.hpp"

#include "error.hpp"
#include "graph.hpp"
#include "op.hpp"
#include "params.cuh"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dfgnn {
namespace {

// Offsets into [N, H, D] features, [N, H] per-(node, head) scalars and [H, D] attention vectors.
struct Dims {
  int64_t nodes, heads, dim;
  int64_t features() const { return nodes * heads * dim; }
  int64_t at(int64_t node, int64_t head) const { return (node * heads + head) * dim; }
  int64_t scalar(int64_t node, int64_t head) const { return node * heads + head; }
  int64_t att(int64_t head) const { return head * dim; }
};

const double* as_doubles(const void* p) { return static_cast<const double*>(p); }

double dot(const double* a, const double* b, int64_t n) {
  double sum = 0.0;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// y += a * x
void axpy(double a, const double* x, double* y, int64_t n) {
  for (int64_t d = 0; d < n; ++d) y[d] += a * x[d];
}

double leaky_relu(double z, double slope) { return z > 0.0 ? z : slope * z; }
// PyTorch's convention: the derivative at z = 0 is the slope.
double leaky_relu_grad(double z, double slope) { return z > 0.0 ? 1.0 : slope; }

void copy_out(const std::vector<double>& from, void* to) {
  std::copy(from.begin(), from.end(), static_cast<double*>(to));
}

// ------------------------------------------------------------------------------------------ GAT
// e_ij = LeakyReLU(att_dst . h_i + att_src . h_j). The two dot products depend on one node each,
// so they are computed once per (node, head) and their gradients gathered per (node, head) too.
class Gat {
 public:
  Gat(const Dims& dims, const dfgnn_op_t& op, const dfgnn_inputs_t& in)
      : dims_(dims), slope_(op.negative_slope), h_(as_doubles(in.h)), att_src_(as_doubles(in.att_src)),
        att_dst_(as_doubles(in.att_dst)), src_term_(dims.nodes * dims.heads), dst_term_(dims.nodes * dims.heads) {
    for (int64_t n = 0; n < dims.nodes; ++n)
      for (int64_t h = 0; h < dims.heads; ++h) {
        src_term_[dims.scalar(n, h)] = dot(att_src_ + dims.att(h), h_ + dims.at(n, h), dims.dim);
        dst_term_[dims.scalar(n, h)] = dot(att_dst_ + dims.att(h), h_ + dims.at(n, h), dims.dim);
      }
  }

  double score(int32_t i, int32_t j, int64_t h) const { return leaky_relu(logit(i, j, h), slope_); }
  const double* value(int32_t j, int64_t h) const { return h_ + dims_.at(j, h); }

  void start_backward() {
    grad_h_.assign(dims_.features(), 0.0);
    grad_src_term_.assign(src_term_.size(), 0.0);
    grad_dst_term_.assign(dst_term_.size(), 0.0);
  }
  double* value_grad(int32_t j, int64_t h) { return grad_h_.data() + dims_.at(j, h); }
  void score_backward(int32_t i, int32_t j, int64_t h, double de) {
    const double dz = de * leaky_relu_grad(logit(i, j, h), slope_);
    grad_dst_term_[dims_.scalar(i, h)] += dz;
    grad_src_term_[dims_.scalar(j, h)] += dz;
  }
  void write(const dfgnn_grads_t& grads) {
    // Chain the per-(node, head) dot-product gradients into h and the attention vectors.
    std::vector<double> grad_att_src(dims_.heads * dims_.dim, 0.0), grad_att_dst(grad_att_src.size(), 0.0);
    for (int64_t n = 0; n < dims_.nodes; ++n)
      for (int64_t h = 0; h < dims_.heads; ++h) {
        const double g_src = grad_src_term_[dims_.scalar(n, h)], g_dst = grad_dst_term_[dims_.scalar(n, h)];
        const double* x = h_ + dims_.at(n, h);
        double* gx = grad_h_.data() + dims_.at(n, h);
        axpy(g_src, att_src_ + dims_.att(h), gx, dims_.dim);
        axpy(g_dst, att_dst_ + dims_.att(h), gx, dims_.dim);
        axpy(g_src, x, grad_att_src.data() + dims_.att(h), dims_.dim);
        axpy(g_dst, x, grad_att_dst.data() + dims_.att(h), dims_.dim);
      }
    copy_out(grad_h_, grads.h);
    copy_out(grad_att_src, grads.att_src);
    copy_out(grad_att_dst, grads.att_dst);
  }

 private:
  double logit(int32_t i, int32_t j, int64_t h) const {
    return dst_term_[dims_.scalar(i, h)] + src_term_[dims_.scalar(j, h)];
  }

  Dims dims_;
  double slope_;
  const double *h_, *att_src_, *att_dst_;
  std::vector<double> src_term_, dst_term_;  // [N, H]: att_src . h_n, att_dst . h_n
  std::vector<double> grad_h_, grad_src_term_, grad_dst_term_;
};

// ---------------------------------------------------------------------------------------- GATv2
// e_ij = sum_d att[d] * LeakyReLU(h_dst_i[d] + h_j[d]); the nonlinearity sits inside the sum, so
// nothing factors per node and every edge works on D channels.
class GatV2 {
 public:
  GatV2(const Dims& dims, const dfgnn_op_t& op, const dfgnn_inputs_t& in)
      : dims_(dims), slope_(op.negative_slope), h_(as_doubles(in.h)), h_dst_(as_doubles(in.h_dst)),
        att_(as_doubles(in.att_src)) {}

  double score(int32_t i, int32_t j, int64_t h) const {
    const double *a = att_ + dims_.att(h), *x_i = h_dst_ + dims_.at(i, h), *x_j = h_ + dims_.at(j, h);
    double e = 0.0;
    for (int64_t d = 0; d < dims_.dim; ++d) e += a[d] * leaky_relu(x_i[d] + x_j[d], slope_);
    return e;
  }
  const double* value(int32_t j, int64_t h) const { return h_ + dims_.at(j, h); }

  void start_backward() {
    grad_h_.assign(dims_.features(), 0.0);
    grad_h_dst_.assign(dims_.features(), 0.0);
    grad_att_.assign(dims_.heads * dims_.dim, 0.0);
  }
  double* value_grad(int32_t j, int64_t h) { return grad_h_.data() + dims_.at(j, h); }
  void score_backward(int32_t i, int32_t j, int64_t h, double de) {
    const double *a = att_ + dims_.att(h), *x_i = h_dst_ + dims_.at(i, h), *x_j = h_ + dims_.at(j, h);
    double *g_a = grad_att_.data() + dims_.att(h), *g_i = grad_h_dst_.data() + dims_.at(i, h),
           *g_j = grad_h_.data() + dims_.at(j, h);
    for (int64_t d = 0; d < dims_.dim; ++d) {
      const double z = x_i[d] + x_j[d];
      g_a[d] += de * leaky_relu(z, slope_);
      const double dz = de * a[d] * leaky_relu_grad(z, slope_);
      g_i[d] += dz;
      g_j[d] += dz;
    }
  }
  void write(const dfgnn_grads_t& grads) {
    copy_out(grad_h_, grads.h);
    copy_out(grad_h_dst_, grads.h_dst);
    copy_out(grad_att_, grads.att_src);
  }

 private:
  Dims dims_;
  double slope_;
  const double *h_, *h_dst_, *att_;
  std::vector<double> grad_h_, grad_h_dst_, grad_att_;
};

// ---------------------------------------------------------------------------------- Transformer
// e_ij = scale * q_i . k_j; aggregates v.
class Transformer {
 public:
  Transformer(const Dims& dims, const dfgnn_op_t& op, const dfgnn_inputs_t& in)
      : dims_(dims), scale_(effective_scale(op)), q_(as_doubles(in.q)), k_(as_doubles(in.k)), v_(as_doubles(in.v)) {}

  double score(int32_t i, int32_t j, int64_t h) const {
    return scale_ * dot(q_ + dims_.at(i, h), k_ + dims_.at(j, h), dims_.dim);
  }
  const double* value(int32_t j, int64_t h) const { return v_ + dims_.at(j, h); }

  void start_backward() {
    grad_q_.assign(dims_.features(), 0.0);
    grad_k_.assign(dims_.features(), 0.0);
    grad_v_.assign(dims_.features(), 0.0);
  }
  double* value_grad(int32_t j, int64_t h) { return grad_v_.data() + dims_.at(j, h); }
  void score_backward(int32_t i, int32_t j, int64_t h, double de) {
    axpy(de * scale_, k_ + dims_.at(j, h), grad_q_.data() + dims_.at(i, h), dims_.dim);
    axpy(de * scale_, q_ + dims_.at(i, h), grad_k_.data() + dims_.at(j, h), dims_.dim);
  }
  void write(const dfgnn_grads_t& grads) {
    copy_out(grad_q_, grads.q);
    copy_out(grad_k_, grads.k);
    copy_out(grad_v_, grads.v);
  }

 private:
  Dims dims_;
  double scale_;
  const double *q_, *k_, *v_;
  std::vector<double> grad_q_, grad_k_, grad_v_;
};

// ----------------------------------------------------------------------------------------- AGNN
// e_ij = beta * u_i . u_j with u = h / max(|h|, eps) per (node, head), as F.normalize does.
// Gradients are first gathered for u, then chained through the normalisation once per row.
class Agnn {
 public:
  static constexpr double kNormEps = 1e-12;

  Agnn(const Dims& dims, const dfgnn_op_t&, const dfgnn_inputs_t& in)
      : dims_(dims), h_(as_doubles(in.h)), beta_(*as_doubles(in.beta)), unit_(dims.features()),
        norm_(dims.nodes * dims.heads) {
    for (int64_t n = 0; n < dims.nodes; ++n)
      for (int64_t h = 0; h < dims.heads; ++h) {
        const double* x = h_ + dims.at(n, h);
        const double norm = l2_norm(x, dims.dim);
        norm_[dims.scalar(n, h)] = norm;
        const double denom = std::max(norm, kNormEps);
        for (int64_t d = 0; d < dims.dim; ++d) unit_[dims.at(n, h) + d] = x[d] / denom;
      }
  }

  double score(int32_t i, int32_t j, int64_t h) const { return beta_ * cosine(i, j, h); }
  const double* value(int32_t j, int64_t h) const { return h_ + dims_.at(j, h); }

  void start_backward() {
    grad_h_.assign(dims_.features(), 0.0);
    grad_unit_.assign(dims_.features(), 0.0);
    grad_beta_ = 0.0;
  }
  double* value_grad(int32_t j, int64_t h) { return grad_h_.data() + dims_.at(j, h); }
  void score_backward(int32_t i, int32_t j, int64_t h, double de) {
    grad_beta_ += de * cosine(i, j, h);
    axpy(de * beta_, unit_.data() + dims_.at(j, h), grad_unit_.data() + dims_.at(i, h), dims_.dim);
    axpy(de * beta_, unit_.data() + dims_.at(i, h), grad_unit_.data() + dims_.at(j, h), dims_.dim);
  }
  void write(const dfgnn_grads_t& grads) {
    // u = x / |x| has Jacobian (I - u u^T) / |x|. Below eps the norm is the constant eps and
    // u = x / eps (torch's clamp_min passes the gradient where norm >= eps).
    for (int64_t n = 0; n < dims_.nodes; ++n)
      for (int64_t h = 0; h < dims_.heads; ++h) {
        const int64_t at = dims_.at(n, h);
        const double norm = norm_[dims_.scalar(n, h)];
        const double* u = unit_.data() + at;
        const double* gu = grad_unit_.data() + at;
        double* gx = grad_h_.data() + at;
        if (norm >= kNormEps) {
          const double radial = dot(u, gu, dims_.dim);
          for (int64_t d = 0; d < dims_.dim; ++d) gx[d] += (gu[d] - radial * u[d]) / norm;
        } else {
          axpy(1.0 / kNormEps, gu, gx, dims_.dim);
        }
      }
    copy_out(grad_h_, grads.h);
    *static_cast<double*>(grads.beta) = grad_beta_;
  }

 private:
  // Scaled by the largest magnitude so that neither tiny nor huge entries under/overflow.
  static double l2_norm(const double* x, int64_t n) {
    double big = 0.0;
    for (int64_t d = 0; d < n; ++d) big = std::max(big, std::abs(x[d]));
    if (big == 0.0 || !std::isfinite(big)) return big;
    double sum = 0.0;
    for (int64_t d = 0; d < n; ++d) sum += (x[d] / big) * (x[d] / big);
    return big * std::sqrt(sum);
  }
  double cosine(int32_t i, int32_t j, int64_t h) const {
    return dot(unit_.data() + dims_.at(i, h), unit_.data() + dims_.at(j, h), dims_.dim);
  }

  Dims dims_;
  const double* h_;
  double beta_;
  std::vector<double> unit_;  // [N, H, D]
  std::vector<double> norm_;  // [N, H], unclamped
  std::vector<double> grad_h_, grad_unit_;
  double grad_beta_ = 0.0;
};

// ------------------------------------------------------------------------------ shared skeleton

// Softmax of row i's scores for head h into alpha (row max subtracted, so no overflow for large
// scores); returns the row's log-sum-exp. The row must have at least one edge.
template <typename Model>
double row_softmax(const Model& model, const Compressed& csr, int32_t i, int64_t h, std::vector<double>& alpha) {
  const int32_t begin = csr.ptr[i], degree = csr.degree(i);
  alpha.resize(degree);
  double max = -std::numeric_limits<double>::infinity();
  for (int32_t k = 0; k < degree; ++k) {
    alpha[k] = model.score(i, csr.idx[begin + k], h);
    max = std::max(max, alpha[k]);
  }
  double sum = 0.0;
  for (double& a : alpha) sum += (a = std::exp(a - max));
  for (double& a : alpha) a /= sum;
  return max + std::log(sum);
}

// Attention dropout factors of row i's edges in head h (all 1 without dropout): the kernels' mask.
void row_dropout(const dfgnn_op_t& op, const Compressed& csr, int32_t i, int64_t h, std::vector<double>& keep) {
  const uint32_t threshold = dropout_threshold(op);
  const float scale = dropout_scale(op);
  keep.assign(csr.degree(i), 1.0);
  if (threshold == 0) return;
  for (int32_t k = 0; k < csr.degree(i); ++k)
    keep[k] = dropout_factor(op.dropout_seed, threshold, scale, csr.ptr[i] + k, op.heads, static_cast<int>(h));
}

template <typename Model>
void forward(const Graph& graph, const Dims& dims, const dfgnn_op_t& op, const Model& model, double* out, double* lse) {
  const Compressed& csr = graph.csr();
  std::vector<double> alpha, keep;
  for (int32_t i = 0; i < graph.num_nodes(); ++i)
    for (int64_t h = 0; h < dims.heads; ++h) {
      double* o = out + dims.at(i, h);
      std::fill(o, o + dims.dim, 0.0);
      if (csr.degree(i) == 0) {  // nothing to attend over: out = 0, empty log-sum-exp
        if (lse != nullptr) lse[dims.scalar(i, h)] = -std::numeric_limits<double>::infinity();
        continue;
      }
      const double row_lse = row_softmax(model, csr, i, h, alpha);
      if (lse != nullptr) lse[dims.scalar(i, h)] = row_lse;
      row_dropout(op, csr, i, h, keep);
      for (int32_t k = 0; k < csr.degree(i); ++k)
        axpy(alpha[k] * keep[k], model.value(csr.idx[csr.ptr[i] + k], h), o, dims.dim);
    }
}

template <typename Model>
void backward(const Graph& graph, const Dims& dims, const dfgnn_op_t& op, Model& model, const double* grad_out,
              const dfgnn_grads_t& grads) {
  const Compressed& csr = graph.csr();
  model.start_backward();
  std::vector<double> alpha, dots, keep;  // per edge of the row: alpha_ij, m_ij grad_out_i . value_j, m_ij
  for (int32_t i = 0; i < graph.num_nodes(); ++i)
    for (int64_t h = 0; h < dims.heads; ++h) {
      const int32_t begin = csr.ptr[i], degree = csr.degree(i);
      if (degree == 0) continue;  // out_i is the constant 0: no gradient flows from grad_out_i
      row_softmax(model, csr, i, h, alpha);
      const double* go = grad_out + dims.at(i, h);
      dots.resize(degree);
      row_dropout(op, csr, i, h, keep);
      double expected = 0.0;  // sum_j alpha_ij m_ij grad_out_i . value_j
      for (int32_t k = 0; k < degree; ++k) {
        dots[k] = keep[k] * dot(go, model.value(csr.idx[begin + k], h), dims.dim);
        expected += alpha[k] * dots[k];
      }
      for (int32_t k = 0; k < degree; ++k) {
        const int32_t j = csr.idx[begin + k];
        axpy(alpha[k] * keep[k], go, model.value_grad(j, h), dims.dim);
        model.score_backward(i, j, h, alpha[k] * (dots[k] - expected));
      }
    }
  model.write(grads);
}

// Builds the model for op.model and hands it to f.
template <typename F>
void with_model(const Dims& dims, const dfgnn_op_t& op, const dfgnn_inputs_t& in, F&& f) {
  switch (op.model) {
    case DFGNN_MODEL_GAT: { Gat m(dims, op, in); return f(m); }
    case DFGNN_MODEL_GATV2: { GatV2 m(dims, op, in); return f(m); }
    case DFGNN_MODEL_TRANSFORMER: { Transformer m(dims, op, in); return f(m); }
    case DFGNN_MODEL_AGNN: { Agnn m(dims, op, in); return f(m); }
  }
  fail(DFGNN_STATUS_INTERNAL_ERROR, "reference op: unhandled model {}", static_cast<int>(op.model));
}

Dims dims_of(const Graph& graph, const dfgnn_op_t& op) { return {graph.num_nodes(), op.heads, op.dim}; }

}  // namespace

void reference_forward(const Graph& graph, const dfgnn_op_t& op, const dfgnn_inputs_t& in, double* out,
                       double* lse) {
  const Dims dims = dims_of(graph, op);
  with_model(dims, op, in, [&](auto& model) { forward(graph, dims, op, model, out, lse); });
}

void reference_backward(const Graph& graph, const dfgnn_op_t& op, const dfgnn_inputs_t& in,
                        const double* grad_out, const dfgnn_grads_t& grads) {
  const Dims dims = dims_of(graph, op);
  with_model(dims, op, in, [&](auto& model) { backward(graph, dims, op, model, grad_out, grads); });
}

}  // namespace dfgnn
