// Float64 CPU reference of every op: the oracle for the GPU kernels, written for clarity.
//
// Every model shares one skeleton. For each destination row i and head h: compute the scores
// e_ij of the row's in-edges, softmax them with the row max subtracted, aggregate the value rows.
// The backward replays the same softmax, then
//   d value_j += alpha_ij * grad_out_i
//   d e_ij     = alpha_ij * (grad_out_i . value_j - sum_j' alpha_ij' grad_out_i . value_j')
// and each model pushes d e_ij into the inputs of its score. With attention dropout the aggregated
// weights are alpha_ij m_ij (m from params.cuh's dropout_factor, the kernels' own mask), so
// grad_out_i . value_j and d value_j carry m_ij too. An edge is named by its endpoints and its edge
// id e (the row of inputs.edge). A model is a small class with
//   score(i, j, e, h), aggregate(j, e, h, w, out): out += w value_ij      (forward)
//   start_backward(), value_dot(j, e, h, g) = g . value_ij, value_backward(j, e, h, w, g): the
//   gradient of value_ij += w g, score_backward(i, j, e, h, de), write(grads)      (backward)
// where value_ij is v_j (+ edge_ij for the Transformer with edge features), else h_j.
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
  // inputs.edge: [E, H, width] with width 1 (GAT) or D; null without edge features.
  int64_t edge_at(int64_t edge, int64_t head, int64_t width) const { return (edge * heads + head) * width; }
};

// Edge features of an op (GAT: [E, H] logit terms, GATv2/Transformer: [E, H, D]) and their
// gradient, owned by the model; absent (data null) without op.edge_features.
struct EdgeTerm {
  EdgeTerm(const Dims& dims, const dfgnn_op_t& op, const dfgnn_inputs_t& in, int64_t num_edges)
      : dims(dims),
        width(edge_width(op)),
        count(op.edge_features ? slot_elements(op, kEdgeSlot, dims.nodes, num_edges) : 0),
        data(op.edge_features ? static_cast<const double*>(in.edge) : nullptr) {}
  // Row of edge e, head h (null without edge features).
  const double* at(int64_t e, int64_t h) const { return data == nullptr ? nullptr : data + dims.edge_at(e, h, width); }
  double* grad_at(int64_t e, int64_t h) { return data == nullptr ? nullptr : grad.data() + dims.edge_at(e, h, width); }
  void start_backward() { grad.assign(count, 0.0); }
  void write(const dfgnn_grads_t& grads) const {
    if (data != nullptr) std::copy(grad.begin(), grad.end(), static_cast<double*>(grads.edge));
  }

  Dims dims;
  int64_t width, count;
  const double* data;
  std::vector<double> grad;
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
// e_ij = LeakyReLU(att_dst . h_i + att_src . h_j [+ edge_ij]). The two dot products depend on one
// node each, so they are computed once per (node, head) and their gradients gathered per (node,
// head) too.
class Gat {
 public:
  Gat(const Dims& dims, const dfgnn_op_t& op, const dfgnn_inputs_t& in, int64_t num_edges)
      : dims_(dims), slope_(op.negative_slope), h_(as_doubles(in.h)), att_src_(as_doubles(in.att_src)),
        att_dst_(as_doubles(in.att_dst)), src_term_(dims.nodes * dims.heads), dst_term_(dims.nodes * dims.heads),
        edge_(dims, op, in, num_edges) {
    for (int64_t n = 0; n < dims.nodes; ++n)
      for (int64_t h = 0; h < dims.heads; ++h) {
        src_term_[dims.scalar(n, h)] = dot(att_src_ + dims.att(h), h_ + dims.at(n, h), dims.dim);
        dst_term_[dims.scalar(n, h)] = dot(att_dst_ + dims.att(h), h_ + dims.at(n, h), dims.dim);
      }
  }

  double score(int32_t i, int32_t j, int64_t e, int64_t h) const { return leaky_relu(logit(i, j, e, h), slope_); }
  void aggregate(int32_t j, int64_t, int64_t h, double w, double* out) const { axpy(w, h_ + dims_.at(j, h), out, dims_.dim); }

  void start_backward() {
    grad_h_.assign(dims_.features(), 0.0);
    grad_src_term_.assign(src_term_.size(), 0.0);
    grad_dst_term_.assign(dst_term_.size(), 0.0);
    edge_.start_backward();
  }
  double value_dot(int32_t j, int64_t, int64_t h, const double* g) const { return dot(g, h_ + dims_.at(j, h), dims_.dim); }
  void value_backward(int32_t j, int64_t, int64_t h, double w, const double* g) {
    axpy(w, g, grad_h_.data() + dims_.at(j, h), dims_.dim);
  }
  void score_backward(int32_t i, int32_t j, int64_t e, int64_t h, double de) {
    const double dz = de * leaky_relu_grad(logit(i, j, e, h), slope_);
    grad_dst_term_[dims_.scalar(i, h)] += dz;
    grad_src_term_[dims_.scalar(j, h)] += dz;
    if (double* g = edge_.grad_at(e, h)) *g += dz;
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
    edge_.write(grads);
  }

 private:
  double logit(int32_t i, int32_t j, int64_t e, int64_t h) const {
    const double* edge = edge_.at(e, h);
    return dst_term_[dims_.scalar(i, h)] + src_term_[dims_.scalar(j, h)] + (edge != nullptr ? *edge : 0.0);
  }

  Dims dims_;
  double slope_;
  const double *h_, *att_src_, *att_dst_;
  std::vector<double> src_term_, dst_term_;  // [N, H]: att_src . h_n, att_dst . h_n
  std::vector<double> grad_h_, grad_src_term_, grad_dst_term_;
  EdgeTerm edge_;
};

// ---------------------------------------------------------------------------------------- GATv2
// e_ij = sum_d att[d] * LeakyReLU(h_dst_i[d] + h_j[d] [+ edge_ij[d]]); the nonlinearity sits inside
// the sum, so nothing factors per node and every edge works on D channels.
class GatV2 {
 public:
  GatV2(const Dims& dims, const dfgnn_op_t& op, const dfgnn_inputs_t& in, int64_t num_edges)
      : dims_(dims), slope_(op.negative_slope), h_(as_doubles(in.h)), h_dst_(as_doubles(in.h_dst)),
        att_(as_doubles(in.att_src)), edge_(dims, op, in, num_edges) {}

  double score(int32_t i, int32_t j, int64_t e, int64_t h) const {
    const double* a = att_ + dims_.att(h);
    double e_ij = 0.0;
    for (int64_t d = 0; d < dims_.dim; ++d) e_ij += a[d] * leaky_relu(z(i, j, e, h, d), slope_);
    return e_ij;
  }
  void aggregate(int32_t j, int64_t, int64_t h, double w, double* out) const { axpy(w, h_ + dims_.at(j, h), out, dims_.dim); }

  void start_backward() {
    grad_h_.assign(dims_.features(), 0.0);
    grad_h_dst_.assign(dims_.features(), 0.0);
    grad_att_.assign(dims_.heads * dims_.dim, 0.0);
    edge_.start_backward();
  }
  double value_dot(int32_t j, int64_t, int64_t h, const double* g) const { return dot(g, h_ + dims_.at(j, h), dims_.dim); }
  void value_backward(int32_t j, int64_t, int64_t h, double w, const double* g) {
    axpy(w, g, grad_h_.data() + dims_.at(j, h), dims_.dim);
  }
  void score_backward(int32_t i, int32_t j, int64_t e, int64_t h, double de) {
    const double* a = att_ + dims_.att(h);
    double *g_a = grad_att_.data() + dims_.att(h), *g_i = grad_h_dst_.data() + dims_.at(i, h),
           *g_j = grad_h_.data() + dims_.at(j, h), *g_e = edge_.grad_at(e, h);
    for (int64_t d = 0; d < dims_.dim; ++d) {
      const double z_d = z(i, j, e, h, d);
      g_a[d] += de * leaky_relu(z_d, slope_);
      const double dz = de * a[d] * leaky_relu_grad(z_d, slope_);
      g_i[d] += dz;
      g_j[d] += dz;
      if (g_e != nullptr) g_e[d] += dz;
    }
  }
  void write(const dfgnn_grads_t& grads) {
    copy_out(grad_h_, grads.h);
    copy_out(grad_h_dst_, grads.h_dst);
    copy_out(grad_att_, grads.att_src);
    edge_.write(grads);
  }

 private:
  double z(int32_t i, int32_t j, int64_t e, int64_t h, int64_t d) const {
    const double* edge = edge_.at(e, h);
    return h_dst_[dims_.at(i, h) + d] + h_[dims_.at(j, h) + d] + (edge != nullptr ? edge[d] : 0.0);
  }

  Dims dims_;
  double slope_;
  const double *h_, *h_dst_, *att_;
  std::vector<double> grad_h_, grad_h_dst_, grad_att_;
  EdgeTerm edge_;
};

// ---------------------------------------------------------------------------------- Transformer
// e_ij = scale * q_i . (k_j [+ edge_ij]); aggregates v_j [+ edge_ij] (PyG adds the projected edge
// features to both key and value).
class Transformer {
 public:
  Transformer(const Dims& dims, const dfgnn_op_t& op, const dfgnn_inputs_t& in, int64_t num_edges)
      : dims_(dims), scale_(effective_scale(op)), q_(as_doubles(in.q)), k_(as_doubles(in.k)), v_(as_doubles(in.v)),
        edge_(dims, op, in, num_edges) {}

  double score(int32_t i, int32_t j, int64_t e, int64_t h) const {
    const double* q = q_ + dims_.at(i, h);
    const double* edge = edge_.at(e, h);
    return scale_ * (dot(q, k_ + dims_.at(j, h), dims_.dim) + (edge != nullptr ? dot(q, edge, dims_.dim) : 0.0));
  }
  void aggregate(int32_t j, int64_t e, int64_t h, double w, double* out) const {
    axpy(w, v_ + dims_.at(j, h), out, dims_.dim);
    if (const double* edge = edge_.at(e, h)) axpy(w, edge, out, dims_.dim);
  }

  void start_backward() {
    grad_q_.assign(dims_.features(), 0.0);
    grad_k_.assign(dims_.features(), 0.0);
    grad_v_.assign(dims_.features(), 0.0);
    edge_.start_backward();
  }
  double value_dot(int32_t j, int64_t e, int64_t h, const double* g) const {
    const double* edge = edge_.at(e, h);
    return dot(g, v_ + dims_.at(j, h), dims_.dim) + (edge != nullptr ? dot(g, edge, dims_.dim) : 0.0);
  }
  void value_backward(int32_t j, int64_t e, int64_t h, double w, const double* g) {
    axpy(w, g, grad_v_.data() + dims_.at(j, h), dims_.dim);
    if (double* g_e = edge_.grad_at(e, h)) axpy(w, g, g_e, dims_.dim);
  }
  void score_backward(int32_t i, int32_t j, int64_t e, int64_t h, double de) {
    const double* q = q_ + dims_.at(i, h);
    double* g_q = grad_q_.data() + dims_.at(i, h);
    axpy(de * scale_, k_ + dims_.at(j, h), g_q, dims_.dim);
    axpy(de * scale_, q, grad_k_.data() + dims_.at(j, h), dims_.dim);
    if (const double* edge = edge_.at(e, h)) {
      axpy(de * scale_, edge, g_q, dims_.dim);
      axpy(de * scale_, q, edge_.grad_at(e, h), dims_.dim);
    }
  }
  void write(const dfgnn_grads_t& grads) {
    copy_out(grad_q_, grads.q);
    copy_out(grad_k_, grads.k);
    copy_out(grad_v_, grads.v);
    edge_.write(grads);
  }

 private:
  Dims dims_;
  double scale_;
  const double *q_, *k_, *v_;
  std::vector<double> grad_q_, grad_k_, grad_v_;
  EdgeTerm edge_;
};

// ----------------------------------------------------------------------------------------- AGNN
// e_ij = beta * u_i . u_j with u = h / max(|h|, eps) per (node, head), as F.normalize does.
// Gradients are first gathered for u, then chained through the normalisation once per row.
class Agnn {
 public:
  static constexpr double kNormEps = 1e-12;

  Agnn(const Dims& dims, const dfgnn_op_t&, const dfgnn_inputs_t& in, int64_t)
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

  double score(int32_t i, int32_t j, int64_t, int64_t h) const { return beta_ * cosine(i, j, h); }
  void aggregate(int32_t j, int64_t, int64_t h, double w, double* out) const { axpy(w, h_ + dims_.at(j, h), out, dims_.dim); }

  void start_backward() {
    grad_h_.assign(dims_.features(), 0.0);
    grad_unit_.assign(dims_.features(), 0.0);
    grad_beta_ = 0.0;
  }
  double value_dot(int32_t j, int64_t, int64_t h, const double* g) const { return dot(g, h_ + dims_.at(j, h), dims_.dim); }
  void value_backward(int32_t j, int64_t, int64_t h, double w, const double* g) {
    axpy(w, g, grad_h_.data() + dims_.at(j, h), dims_.dim);
  }
  void score_backward(int32_t i, int32_t j, int64_t, int64_t h, double de) {
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
    alpha[k] = model.score(i, csr.idx[begin + k], csr.eid[begin + k], h);
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
  const unsigned key = dropout_key(op.dropout_seed, static_cast<int>(h));
  for (int32_t k = 0; k < csr.degree(i); ++k) keep[k] = dropout_factor(key, threshold, scale, csr.ptr[i] + k);
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
      for (int32_t pos = csr.ptr[i]; pos < csr.ptr[i + 1]; ++pos) {
        const int32_t k = pos - csr.ptr[i];
        model.aggregate(csr.idx[pos], csr.eid[pos], h, alpha[k] * keep[k], o);
      }
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
        dots[k] = keep[k] * model.value_dot(csr.idx[begin + k], csr.eid[begin + k], h, go);
        expected += alpha[k] * dots[k];
      }
      for (int32_t k = 0; k < degree; ++k) {
        const int32_t j = csr.idx[begin + k], e = csr.eid[begin + k];
        model.value_backward(j, e, h, alpha[k] * keep[k], go);
        model.score_backward(i, j, e, h, alpha[k] * (dots[k] - expected));
      }
    }
  model.write(grads);
}

// Builds the model for op.model and hands it to f.
template <typename F>
void with_model(const Dims& dims, const dfgnn_op_t& op, const dfgnn_inputs_t& in, int64_t num_edges, F&& f) {
  switch (op.model) {
    case DFGNN_MODEL_GAT: { Gat m(dims, op, in, num_edges); return f(m); }
    case DFGNN_MODEL_GATV2: { GatV2 m(dims, op, in, num_edges); return f(m); }
    case DFGNN_MODEL_TRANSFORMER: { Transformer m(dims, op, in, num_edges); return f(m); }
    case DFGNN_MODEL_AGNN: { Agnn m(dims, op, in, num_edges); return f(m); }
  }
  fail(DFGNN_STATUS_INTERNAL_ERROR, "reference op: unhandled model {}", static_cast<int>(op.model));
}

Dims dims_of(const Graph& graph, const dfgnn_op_t& op) { return {graph.num_nodes(), op.heads, op.dim}; }

}  // namespace

void reference_forward(const Graph& graph, const dfgnn_op_t& op, const dfgnn_inputs_t& in, double* out,
                       double* lse) {
  const Dims dims = dims_of(graph, op);
  with_model(dims, op, in, graph.num_edges(), [&](auto& model) { forward(graph, dims, op, model, out, lse); });
}

void reference_backward(const Graph& graph, const dfgnn_op_t& op, const dfgnn_inputs_t& in,
                        const double* grad_out, const dfgnn_grads_t& grads) {
  const Dims dims = dims_of(graph, op);
  with_model(dims, op, in, graph.num_edges(), [&](auto& model) { backward(graph, dims, op, model, grad_out, grads); });
}

}  // namespace dfgnn
