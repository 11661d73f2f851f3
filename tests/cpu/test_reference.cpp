// The float64 reference ops, through the C API, against references that share no code with them:
// hand-worked examples, a naive test-side forward over the edge list, central finite differences,
// closed forms on a 10^5-degree hub, and structural invariants (neighbour order, head slicing).
#include "test_util.hpp"

#include <vector_types.h>  // int4, used by params.cuh

#include "params.cuh"  // dropout_factor, shared by the kernels and the reference

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dfgnn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr dfgnn_model_t kGat = DFGNN_MODEL_GAT, kGatV2 = DFGNN_MODEL_GATV2, kTransformer = DFGNN_MODEL_TRANSFORMER,
                        kAgnn = DFGNN_MODEL_AGNN;

// ------------------------------------------------------------------------------ slots, problems

// Slots in dfgnn_inputs_t / dfgnn_grads_t field order.
enum Slot { kH, kHDst, kQ, kK, kV, kAttSrc, kAttDst, kBeta, kEdge, kNumSlots };
constexpr const char* kSlotName[kNumSlots] = {"h", "h_dst", "q", "k", "v", "att_src", "att_dst", "beta", "edge"};
constexpr const void* dfgnn_inputs_t::*kInputField[kNumSlots] = {
    &dfgnn_inputs_t::h,       &dfgnn_inputs_t::h_dst,   &dfgnn_inputs_t::q,    &dfgnn_inputs_t::k,   &dfgnn_inputs_t::v,
    &dfgnn_inputs_t::att_src, &dfgnn_inputs_t::att_dst, &dfgnn_inputs_t::beta, &dfgnn_inputs_t::edge};
constexpr void* dfgnn_grads_t::*kGradField[kNumSlots] = {
    &dfgnn_grads_t::h,       &dfgnn_grads_t::h_dst,   &dfgnn_grads_t::q,    &dfgnn_grads_t::k,   &dfgnn_grads_t::v,
    &dfgnn_grads_t::att_src, &dfgnn_grads_t::att_dst, &dfgnn_grads_t::beta, &dfgnn_grads_t::edge};

// Written out here rather than taken from op.hpp, so that a mix-up there shows.
std::vector<int> slots_read_by(dfgnn_model_t model) {
  switch (model) {
    case kGat: return {kH, kAttSrc, kAttDst};
    case kGatV2: return {kH, kHDst, kAttSrc};
    case kTransformer: return {kQ, kK, kV};
    case kAgnn: return {kH, kBeta};
  }
  return {};
}

// The model's slots, plus the edge features when the op has them.
std::vector<int> slots_of(const dfgnn_op_t& op) {
  std::vector<int> slots = slots_read_by(op.model);
  if (op.edge_features) slots.push_back(kEdge);
  return slots;
}

bool is_feature_slot(int s) { return s == kH || s == kHDst || s == kQ || s == kK || s == kV; }

// Which slot is aggregated (the "value" side).
int value_slot(dfgnn_model_t model) { return model == kTransformer ? kV : kH; }

std::string model_label(dfgnn_model_t model) {
  switch (model) {
    case kGat: return "gat";
    case kGatV2: return "gatv2";
    case kTransformer: return "transformer";
    case kAgnn: return "agnn";
  }
  return "unknown";
}

// An op with host arrays for the slots its model reads (other slots stay empty, passed as null).
struct Problem {
  dfgnn_op_t op;
  int64_t n;
  std::array<std::vector<double>, kNumSlots> x;
  int64_t e = 0;  // edges (for edge features)

  int64_t heads() const { return op.heads; }
  int64_t dim() const { return op.dim; }
  int64_t features() const { return n * op.heads * op.dim; }
  // Element d of (node, head) in a feature slot, and of head in an attention slot.
  double feature(int s, int64_t node, int64_t head, int64_t d) const { return x[s][(node * heads() + head) * dim() + d]; }
  double att(int s, int64_t head, int64_t d) const { return x[s][head * dim() + d]; }
  // Edge features of edge id k: GAT's logit term (d = 0), else element d.
  double edge(int64_t k, int64_t head, int64_t d) const {
    const int64_t width = op.model == kGat ? 1 : dim();
    return x[kEdge][(k * heads() + head) * width + d];
  }

  dfgnn_inputs_t inputs() const {
    dfgnn_inputs_t in{};
    for (int s : slots_of(op)) in.*kInputField[s] = x[s].data();
    return in;
  }
};

int64_t slot_size(int s, int64_t n, int64_t heads, int64_t dim) {
  if (s == kBeta) return 1;
  return is_feature_slot(s) ? n * heads * dim : heads * dim;
}

Problem random_problem(dfgnn_model_t model, int64_t n, int heads, int dim, uint64_t seed) {
  Problem p{dfgnnOpDefault(model, DFGNN_DTYPE_FLOAT64, heads, dim), n, {}};
  for (int s : slots_read_by(model)) p.x[s] = random_vector(slot_size(s, n, heads, dim), seed * 1000 + s);
  if (model == kAgnn) p.x[kBeta] = {1.3};
  return p;
}

// The problem with random edge features for a graph of `edges` edges (edge ids 0..edges-1).
Problem with_edge_features(Problem p, int64_t edges, uint64_t seed) {
  p.op.edge_features = 1;
  p.e = edges;
  p.x[kEdge] = random_vector(edges * p.heads() * (p.op.model == kGat ? 1 : p.dim()), seed);
  return p;
}

// ------------------------------------------------------------------------------ graphs

struct EdgeList {
  int64_t n = 0;
  std::vector<int64_t> src, dst;
  void add(int64_t j, int64_t i) {
    src.push_back(j);
    dst.push_back(i);
  }
};

// A small graph with every awkward feature: a self-loop, a duplicated edge, node n-2 without
// in-edges that still sends, node n-1 fully isolated, random edges elsewhere.
EdgeList mixed_edges(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> source(0, n - 2);
  std::uniform_int_distribution<int> degree(1, 4);
  EdgeList e{n, {}, {}};
  for (int64_t i = 0; i < n - 2; ++i)
    for (int k = degree(rng); k > 0; --k) e.add(source(rng), i);
  e.add(0, 0);
  e.add(1, 2);
  e.add(1, 2);
  e.add(n - 2, 0);
  return e;
}

GraphPtr make_graph(dfgnn_context_t ctx, const EdgeList& e) { return graph_from_edges(ctx, e.n, e.src, e.dst); }

// ------------------------------------------------------------------------------ running the ops

struct Forward {
  std::vector<double> out, lse;
};

// Output arrays start as NaN so any element the library leaves unwritten shows.
Forward run_forward(dfgnn_graph_t graph, const Problem& p) {
  Forward f{std::vector<double>(p.features(), kNaN), std::vector<double>(p.n * p.heads(), kNaN)};
  const dfgnn_inputs_t in = p.inputs();
  const dfgnn_status_t s = dfgnnReferenceForward(graph, &p.op, &in, f.out.data(), f.lse.data());
  EXPECT_EQ(s, DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
  return f;
}

using Grads = std::array<std::vector<double>, kNumSlots>;

Grads run_backward(dfgnn_graph_t graph, const Problem& p, const std::vector<double>& grad_out, double fill = kNaN) {
  Grads g;
  dfgnn_grads_t slots{};
  for (int s : slots_of(p.op)) {
    g[s].assign(p.x[s].size(), fill);
    slots.*kGradField[s] = g[s].data();
  }
  const dfgnn_inputs_t in = p.inputs();
  const dfgnn_status_t s = dfgnnReferenceBackward(graph, &p.op, &in, grad_out.data(), &slots);
  EXPECT_EQ(s, DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
  return g;
}

// The scalar whose gradient the backward computes: sum(grad_out * out).
double loss(dfgnn_graph_t graph, const Problem& p, const std::vector<double>& grad_out) {
  const std::vector<double> out = run_forward(graph, p).out;
  double sum = 0.0;
  for (size_t k = 0; k < out.size(); ++k) sum += grad_out[k] * out[k];
  return sum;
}

// |actual - expected| <= tol * max(1, |expected|) element-wise (equal infinities pass); reports
// the first few mismatches.
void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, double tol,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  for (size_t k = 0; k < actual.size() && reported < 5; ++k) {
    const double a = actual[k], b = expected[k];
    if (a == b || std::abs(a - b) <= tol * std::max(1.0, std::abs(b))) continue;
    ADD_FAILURE() << what << "[" << k << "]: got " << a << ", expected " << b << " (diff " << a - b << ")";
    ++reported;
  }
}

// The backward's gradient of every input against central finite differences of loss().
void expect_gradients_match_finite_differences(dfgnn_graph_t graph, Problem p, const std::vector<double>& grad_out,
                                               const std::string& label) {
  const Grads grads = run_backward(graph, p, grad_out);
  constexpr double step = 1e-5;
  for (int s : slots_of(p.op)) {
    std::vector<double> numeric(p.x[s].size());
    for (size_t k = 0; k < p.x[s].size(); ++k) {
      const double saved = p.x[s][k];
      p.x[s][k] = saved + step;
      const double up = loss(graph, p, grad_out);
      p.x[s][k] = saved - step;
      const double down = loss(graph, p, grad_out);
      p.x[s][k] = saved;
      numeric[k] = (up - down) / (2 * step);
    }
    expect_close(grads[s], numeric, 1e-7, label + kSlotName[s]);
  }
}

void expect_all_finite(const std::vector<double>& v, const std::string& what) {
  const auto bad = std::find_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); });
  EXPECT_EQ(bad, v.end()) << what << "[" << (bad - v.begin()) << "] = " << (bad == v.end() ? 0.0 : *bad);
}

// ------------------------------------------------------------------------------ naive forward

double leaky_relu(double z, double slope) { return z > 0 ? z : slope * z; }

// Score of edge j -> i (edge id k, for edge features) in one head, straight from the formula (no
// precomputed terms).
double naive_score(const Problem& p, int64_t i, int64_t j, int64_t h, int64_t k = -1) {
  const double slope = p.op.negative_slope;
  const bool edge = p.op.edge_features != 0;
  double e = 0.0;
  switch (p.op.model) {
    case kGat:
      for (int64_t d = 0; d < p.dim(); ++d)
        e += p.att(kAttDst, h, d) * p.feature(kH, i, h, d) + p.att(kAttSrc, h, d) * p.feature(kH, j, h, d);
      return leaky_relu(e + (edge ? p.edge(k, h, 0) : 0.0), slope);
    case kGatV2:
      for (int64_t d = 0; d < p.dim(); ++d)
        e += p.att(kAttSrc, h, d) *
             leaky_relu(p.feature(kHDst, i, h, d) + p.feature(kH, j, h, d) + (edge ? p.edge(k, h, d) : 0.0), slope);
      return e;
    case kTransformer: {
      const double scale = p.op.scale > 0 ? p.op.scale : 1.0 / std::sqrt(static_cast<double>(p.dim()));
      for (int64_t d = 0; d < p.dim(); ++d)
        e += p.feature(kQ, i, h, d) * (p.feature(kK, j, h, d) + (edge ? p.edge(k, h, d) : 0.0));
      return scale * e;
    }
    case kAgnn: {
      double ii = 0, jj = 0;
      for (int64_t d = 0; d < p.dim(); ++d) {
        e += p.feature(kH, i, h, d) * p.feature(kH, j, h, d);
        ii += p.feature(kH, i, h, d) * p.feature(kH, i, h, d);
        jj += p.feature(kH, j, h, d) * p.feature(kH, j, h, d);
      }
      return p.x[kBeta][0] * e / (std::max(std::sqrt(ii), 1e-12) * std::max(std::sqrt(jj), 1e-12));
    }
  }
  return kNaN;
}

// Forward over the edge list in long double with the max subtracted: independent of the
// library's CSR, order and arithmetic.
Forward naive_forward(const EdgeList& edges, const Problem& p) {
  const int64_t H = p.heads(), D = p.dim();
  // In-edges of each node as (source, edge id = position in the list), duplicates kept.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> sources(p.n);
  for (size_t k = 0; k < edges.src.size(); ++k) sources[edges.dst[k]].push_back({edges.src[k], static_cast<int64_t>(k)});
  // The Transformer aggregates v_j + edge_ij with edge features.
  const bool value_edge = p.op.edge_features && p.op.model == kTransformer;
  Forward f{std::vector<double>(p.features(), 0.0), std::vector<double>(p.n * H, -kInf)};
  for (int64_t i = 0; i < p.n; ++i)
    for (int64_t h = 0; h < H; ++h) {
      if (sources[i].empty()) continue;
      std::vector<long double> e;
      for (auto [j, k] : sources[i]) e.push_back(naive_score(p, i, j, h, k));
      const long double max = *std::max_element(e.begin(), e.end());
      long double sum = 0;
      std::vector<long double> acc(D, 0);
      for (size_t k = 0; k < e.size(); ++k) {
        const long double w = std::exp(e[k] - max);
        sum += w;
        const auto [j, id] = sources[i][k];
        for (int64_t d = 0; d < D; ++d)
          acc[d] += w * (p.feature(value_slot(p.op.model), j, h, d) + (value_edge ? p.edge(id, h, d) : 0.0));
      }
      for (int64_t d = 0; d < D; ++d) f.out[(i * H + h) * D + d] = static_cast<double>(acc[d] / sum);
      f.lse[i * H + h] = static_cast<double>(max + std::log(sum));
    }
  return f;
}

// ------------------------------------------------------------------------------ tiny, by hand

// Graph 1 -> 0, 2 -> 0, 0 -> 1; node 2 receives nothing. H = 1, D = 2.
EdgeList tiny_edges() {
  EdgeList e{3, {}, {}};
  e.add(1, 0);
  e.add(2, 0);
  e.add(0, 1);
  return e;
}

// Checks out and lse of the tiny graph given the hand-worked scores and the value rows.
void expect_tiny_result(const Problem& p, double e01, double e02, double e10, const std::vector<double>& value) {
  auto ctx = make_context();
  auto g = make_graph(ctx.get(), tiny_edges());
  const Forward f = run_forward(g.get(), p);
  const double a01 = 1.0 / (1.0 + std::exp(e02 - e01)), a02 = 1.0 / (1.0 + std::exp(e01 - e02));
  const std::vector<double> out = {a01 * value[2] + a02 * value[4], a01 * value[3] + a02 * value[5],  // row 0
                                   value[0], value[1],                                                // row 1: alpha = 1
                                   0.0, 0.0};                                                         // row 2: empty
  expect_close(f.out, out, 1e-14, "out");
  expect_close(f.lse, {std::log(std::exp(e01) + std::exp(e02)), e10, -kInf}, 1e-14, "lse");
}

TEST(ReferenceTiny, Gat) {
  Problem p{dfgnnOpDefault(kGat, DFGNN_DTYPE_FLOAT64, 1, 2), 3, {}};
  p.x[kH] = {1, 2, 0.5, -1, -3, 1};
  p.x[kAttSrc] = {0.3, -0.2};
  p.x[kAttDst] = {0.1, 0.4};
  const double slope = p.op.negative_slope;  // float 0.2f, as the library sees it
  // att_dst.h0 = 0.9, att_dst.h1 = -0.35; att_src.h0 = -0.1, att_src.h1 = 0.35, att_src.h2 = -1.1.
  expect_tiny_result(p, 0.9 + 0.35, slope * (0.9 - 1.1), slope * (-0.35 - 0.1), p.x[kH]);
}

TEST(ReferenceTiny, GatV2) {
  Problem p{dfgnnOpDefault(kGatV2, DFGNN_DTYPE_FLOAT64, 1, 2), 3, {}};
  p.op.negative_slope = 0.1f;
  p.x[kH] = {1, 2, 0.5, -1, -3, 1};
  p.x[kHDst] = {0.2, -0.5, 1, 1, 0, 0};
  p.x[kAttSrc] = {0.3, -0.2};
  const double s = p.op.negative_slope;
  // h_dst0 + h1 = (0.7, -1.5); h_dst0 + h2 = (-2.8, 0.5); h_dst1 + h0 = (2, 3).
  expect_tiny_result(p, 0.3 * 0.7 - 0.2 * (s * -1.5), 0.3 * (s * -2.8) - 0.2 * 0.5, 0.3 * 2 - 0.2 * 3, p.x[kH]);
}

TEST(ReferenceTiny, Transformer) {
  Problem p{dfgnnOpDefault(kTransformer, DFGNN_DTYPE_FLOAT64, 1, 2), 3, {}};
  p.x[kQ] = {1, 0.5, -1, 2, 9, 9};
  p.x[kK] = {0.3, 0.3, 2, -1, 0.5, 1};
  p.x[kV] = {1, 1, 2, 0, -1, 4};
  // q0.k1 = 1.5, q0.k2 = 1, q1.k0 = 0.3; default scale 1/sqrt(D).
  const double r = 1.0 / std::sqrt(2.0);
  expect_tiny_result(p, 1.5 * r, 1.0 * r, 0.3 * r, p.x[kV]);
  p.op.scale = 0.5f;
  expect_tiny_result(p, 1.5 * 0.5, 1.0 * 0.5, 0.3 * 0.5, p.x[kV]);
}

TEST(ReferenceTiny, Agnn) {
  Problem p{dfgnnOpDefault(kAgnn, DFGNN_DTYPE_FLOAT64, 1, 2), 3, {}};
  p.x[kH] = {3, 4, 1, 0, 0, 0};  // h2 = 0: its norm is clamped to 1e-12, its cosine is 0
  p.x[kBeta] = {2};
  // cos(h0, h1) = 3/5.
  expect_tiny_result(p, 2 * 0.6, 0.0, 2 * 0.6, p.x[kH]);
}

// No nodes: nothing to compute, out and grad_out may be null.
TEST(ReferenceTiny, EmptyGraph) {
  auto ctx = make_context();
  auto g = graph_from_edges(ctx.get(), 0, {}, {});
  const dfgnn_op_t op = dfgnnOpDefault(kAgnn, DFGNN_DTYPE_FLOAT64, 2, 3);
  const double h = 0, beta = 1;
  double grad_h = 0, grad_beta = kNaN;
  dfgnn_inputs_t in{};
  in.h = &h;
  in.beta = &beta;
  dfgnn_grads_t grads{};
  grads.h = &grad_h;
  grads.beta = &grad_beta;
  DFGNN_ASSERT_OK(dfgnnReferenceForward(g.get(), &op, &in, nullptr, nullptr));
  DFGNN_ASSERT_OK(dfgnnReferenceBackward(g.get(), &op, &in, nullptr, &grads));
  EXPECT_EQ(grad_beta, 0.0);
}

// No nodes: the empty [N, H, D] arrays may be null too (as an empty tensor's data pointer is);
// parameter gradients are written (zero).
TEST(ReferenceTiny, EmptyGraphTakesNullFeatures) {
  auto ctx = make_context();
  auto g = graph_from_edges(ctx.get(), 0, {}, {});
  const dfgnn_op_t op = dfgnnOpDefault(kGat, DFGNN_DTYPE_FLOAT64, 2, 3);
  const std::vector<double> att(6, 0.5);
  std::vector<double> grad_src(6, kNaN), grad_dst(6, kNaN);
  dfgnn_inputs_t in{};
  in.att_src = att.data();
  in.att_dst = att.data();
  dfgnn_grads_t grads{};
  grads.att_src = grad_src.data();
  grads.att_dst = grad_dst.data();
  DFGNN_ASSERT_OK(dfgnnReferenceForward(g.get(), &op, &in, nullptr, nullptr));
  DFGNN_ASSERT_OK(dfgnnReferenceBackward(g.get(), &op, &in, nullptr, &grads));
  EXPECT_EQ(grad_src, std::vector<double>(6, 0.0));
  EXPECT_EQ(grad_dst, std::vector<double>(6, 0.0));
  in.att_dst = nullptr;  // parameters are never empty: still required
  EXPECT_EQ(dfgnnReferenceForward(g.get(), &op, &in, nullptr, nullptr), DFGNN_STATUS_NULL_POINTER);
}

// At the LeakyReLU kink (z = 0 exactly) the derivative is the slope, as in PyTorch. Graph
// 1 -> 0, 2 -> 0 with D = 1: z_01 = 0 and z_02 = 3 for both GAT and GATv2 below, grad_out_0 = 1.
TEST(ReferenceTiny, LeakyReluKinkUsesSlope) {
  auto ctx = make_context();
  auto g = graph_from_edges(ctx.get(), 3, {1, 2}, {0, 0});
  const std::vector<double> grad_out = {1, 0, 0};
  // Softmax backward by hand: scores 0 and 3, values h1 = -1 and h2 = 2.
  const double a1 = 1 / (1 + std::exp(3.0)), a2 = 1 - a1, out0 = -a1 + 2 * a2;
  const double de1 = a1 * (-1 - out0), de2 = a2 * (2 - out0);

  Problem gat{dfgnnOpDefault(kGat, DFGNN_DTYPE_FLOAT64, 1, 1), 3, {}};
  gat.x[kH] = {1, -1, 2};
  gat.x[kAttSrc] = {1};
  gat.x[kAttDst] = {1};
  const double slope = gat.op.negative_slope;
  const double dz1 = slope * de1, dz2 = de2;  // dz1: the kink
  Grads grads = run_backward(g.get(), gat, grad_out);
  expect_close(grads[kH], {dz1 + dz2, a1 + dz1, a2 + dz2}, 1e-15, "gat grad h");
  expect_close(grads[kAttSrc], {-dz1 + 2 * dz2}, 1e-15, "gat grad att_src");
  expect_close(grads[kAttDst], {dz1 + dz2}, 1e-15, "gat grad att_dst");

  Problem v2{dfgnnOpDefault(kGatV2, DFGNN_DTYPE_FLOAT64, 1, 1), 3, {}};
  v2.x[kH] = {5, -1, 2};
  v2.x[kHDst] = {1, 7, 7};
  v2.x[kAttSrc] = {1};
  grads = run_backward(g.get(), v2, grad_out);
  expect_close(grads[kH], {0, a1 + dz1, a2 + dz2}, 1e-15, "gatv2 grad h");
  expect_close(grads[kHDst], {dz1 + dz2, 0, 0}, 1e-15, "gatv2 grad h_dst");
  expect_close(grads[kAttSrc], {3 * de2}, 1e-15, "gatv2 grad att");
}

// Scores around +-1000 overflow a naive exp; the row max must be subtracted.
TEST(ReferenceTiny, LargeScoresDoNotOverflow) {
  auto ctx = make_context();
  auto g = graph_from_edges(ctx.get(), 3, {1, 2, 1, 2}, {0, 0, 1, 1});
  Problem p{dfgnnOpDefault(kTransformer, DFGNN_DTYPE_FLOAT64, 1, 1), 3, {}};  // scale 1/sqrt(1) = 1
  p.x[kQ] = {1, -1, 0};
  p.x[kK] = {0, 1000, 1001};
  p.x[kV] = {0, 1, 0};
  const Forward f = run_forward(g.get(), p);
  // Row 0: scores 1000, 1001; row 1: -1000, -1001.
  const double small = 1.0 / (1.0 + std::exp(1.0)), big = 1.0 / (1.0 + std::exp(-1.0));
  expect_close(f.out, {small, big, 0.0}, 1e-14, "out");
  expect_close(f.lse, {1001 + std::log1p(std::exp(-1.0)), -1000 + std::log1p(std::exp(-1.0)), -kInf}, 1e-14,
               "lse");
  const Grads grads = run_backward(g.get(), p, {1, 1, 1});
  for (int s : slots_read_by(kTransformer)) expect_all_finite(grads[s], kSlotName[s]);
}

// ------------------------------------------------------------------------------ every model

class ReferenceModel : public ::testing::TestWithParam<dfgnn_model_t> {
 protected:
  ContextPtr ctx_ = make_context();
};

TEST_P(ReferenceModel, MatchesNaiveForward) {
  const EdgeList edges = mixed_edges(11, 3);
  auto g = make_graph(ctx_.get(), edges);
  const Problem p = random_problem(GetParam(), edges.n, 3, 5, 4);
  const Forward f = run_forward(g.get(), p), want = naive_forward(edges, p);
  expect_close(f.out, want.out, 1e-13, "out");
  expect_close(f.lse, want.lse, 1e-13, "lse");
}

// sum_j exp(e_ij - lse_i) = 1 for every non-empty row, with e_ij computed by the test.
TEST_P(ReferenceModel, SoftmaxRowsSumToOne) {
  const EdgeList edges = mixed_edges(12, 5);
  auto g = make_graph(ctx_.get(), edges);
  Problem p = random_problem(GetParam(), edges.n, 3, 4, 6);
  const Forward f = run_forward(g.get(), p);
  for (int64_t i = 0; i < p.n; ++i)
    for (int64_t h = 0; h < p.heads(); ++h) {
      double sum = 0.0;
      int degree = 0;
      for (size_t k = 0; k < edges.src.size(); ++k)
        if (edges.dst[k] == i) {
          sum += std::exp(naive_score(p, i, edges.src[k], h) - f.lse[i * p.heads() + h]);
          ++degree;
        }
      if (degree > 0) {
        EXPECT_NEAR(sum, 1.0, 1e-13) << "row " << i << " head " << h;
      }
    }
}

TEST_P(ReferenceModel, GradientsMatchFiniteDifferences) {
  const dfgnn_model_t model = GetParam();
  const EdgeList edges = mixed_edges(10, 7);
  auto g = make_graph(ctx_.get(), edges);
  Problem p = random_problem(model, edges.n, 3, model == kGatV2 ? 5 : 4, 8);
  if (model == kGatV2) p.op.negative_slope = 0.05f;  // a non-default slope
  const std::vector<double> grad_out = random_vector(p.features(), 9);
  expect_gradients_match_finite_differences(g.get(), p, grad_out, "grad ");
}

// Attention dropout: with the mask fixed by the seed the op is smooth, so the backward (which
// regenerates the mask) must match finite differences of the forward; dropout must change the
// output, and p = 0 must be the op without dropout exactly.
TEST_P(ReferenceModel, DropoutGradientsMatchFiniteDifferences) {
  const dfgnn_model_t model = GetParam();
  const EdgeList edges = mixed_edges(10, 17);
  auto g = make_graph(ctx_.get(), edges);
  Problem p = random_problem(model, edges.n, 2, 3, 18);
  const Forward plain = run_forward(g.get(), p);
  p.op.dropout = 0.0f;
  p.op.dropout_seed = 99;
  expect_close(run_forward(g.get(), p).out, plain.out, 0.0, "out with dropout 0");
  p.op.dropout = 0.4f;
  const Forward dropped = run_forward(g.get(), p);
  expect_close(dropped.lse, plain.lse, 0.0, "lse (dropout does not change the softmax)");
  double changed = 0.0;
  for (size_t k = 0; k < plain.out.size(); ++k) changed += std::abs(dropped.out[k] - plain.out[k]);
  EXPECT_GT(changed, 1e-3) << "dropout 0.4 left the output unchanged";
  const std::vector<double> grad_out = random_vector(p.features(), 19);
  expect_gradients_match_finite_differences(g.get(), p, grad_out, "dropout grad ");
}

TEST_P(ReferenceModel, DropoutProbabilityOutsideRangeIsRejected) {
  const EdgeList edges = mixed_edges(6, 20);
  auto g = make_graph(ctx_.get(), edges);
  Problem p = random_problem(GetParam(), edges.n, 1, 2, 21);
  for (float bad : {-0.1f, 1.0f, 1.5f, std::nanf("")}) {
    p.op.dropout = bad;
    std::vector<double> out(p.features()), lse(p.n * p.heads());
    const dfgnn_inputs_t in = p.inputs();
    EXPECT_EQ(dfgnnReferenceForward(g.get(), &p.op, &in, out.data(), lse.data()), DFGNN_STATUS_INVALID_ARGUMENT)
        << "dropout " << bad;
    EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("dropout"), std::string::npos);
  }
}

// Rows without in-edges: out = 0, lse = -inf, and grad_out there reaches nothing. The isolated
// node gets zero gradient everywhere, the node that only sends none on its destination side.
TEST_P(ReferenceModel, ZeroDegreeRows) {
  const dfgnn_model_t model = GetParam();
  const EdgeList edges = mixed_edges(9, 11);
  const int64_t sender = edges.n - 2, isolated = edges.n - 1;
  auto g = make_graph(ctx_.get(), edges);
  const Problem p = random_problem(model, edges.n, 3, 4, 12);
  const int64_t row = p.heads() * p.dim();  // elements of one node

  const Forward f = run_forward(g.get(), p);
  for (int64_t node : {sender, isolated}) {
    for (int64_t k = 0; k < row; ++k) EXPECT_EQ(f.out[node * row + k], 0.0) << "node " << node;
    for (int64_t h = 0; h < p.heads(); ++h) EXPECT_EQ(f.lse[node * p.heads() + h], -kInf) << "node " << node;
  }
  expect_all_finite(f.out, "out");

  std::vector<double> grad_out = random_vector(p.features(), 13);
  const Grads grads = run_backward(g.get(), p, grad_out);
  for (int64_t node : {sender, isolated})
    std::fill(grad_out.begin() + node * row, grad_out.begin() + (node + 1) * row, 1e30);
  const Grads loud = run_backward(g.get(), p, grad_out);
  for (int s : slots_read_by(model)) {
    expect_all_finite(grads[s], kSlotName[s]);
    expect_close(loud[s], grads[s], 1e-13, std::string("grad ") + kSlotName[s] + " with loud empty rows");
    if (!is_feature_slot(s)) continue;
    for (int64_t k = 0; k < row; ++k) EXPECT_EQ(grads[s][isolated * row + k], 0.0) << kSlotName[s];
    if (s == kQ || s == kHDst) {  // read only as the destination of an edge
      for (int64_t k = 0; k < row; ++k) EXPECT_EQ(grads[s][sender * row + k], 0.0) << kSlotName[s];
    }
  }
}

// Gradients are written, not added: garbage already in the arrays must not matter.
TEST_P(ReferenceModel, BackwardOverwrites) {
  const EdgeList edges = mixed_edges(8, 14);
  auto g = make_graph(ctx_.get(), edges);
  const Problem p = random_problem(GetParam(), edges.n, 2, 3, 15);
  const std::vector<double> grad_out = random_vector(p.features(), 16);
  const Grads clean = run_backward(g.get(), p, grad_out, 0.0), dirty = run_backward(g.get(), p, grad_out, 1e9);
  for (int s : slots_read_by(GetParam())) EXPECT_EQ(clean[s], dirty[s]) << kSlotName[s];
  // lse is optional.
  const dfgnn_inputs_t in = p.inputs();
  std::vector<double> out(p.features());
  DFGNN_ASSERT_OK(dfgnnReferenceForward(g.get(), &p.op, &in, out.data(), nullptr));
  EXPECT_EQ(out, run_forward(g.get(), p).out);
}

// The same edges in another order inside each row give the same result up to rounding.
TEST_P(ReferenceModel, NeighbourOrderDoesNotMatter) {
  const EdgeList edges = mixed_edges(12, 17);
  EdgeList shuffled = edges;
  std::vector<size_t> order(edges.src.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(18));
  for (size_t k = 0; k < order.size(); ++k) {
    shuffled.src[k] = edges.src[order[k]];
    shuffled.dst[k] = edges.dst[order[k]];
  }
  auto g = make_graph(ctx_.get(), edges), gs = make_graph(ctx_.get(), shuffled);
  const Problem p = random_problem(GetParam(), edges.n, 3, 4, 19);
  const std::vector<double> grad_out = random_vector(p.features(), 20);
  const Forward f = run_forward(g.get(), p), fs = run_forward(gs.get(), p);
  expect_close(fs.out, f.out, 1e-12, "out");
  expect_close(fs.lse, f.lse, 1e-12, "lse");
  const Grads grads = run_backward(g.get(), p, grad_out), grads_s = run_backward(gs.get(), p, grad_out);
  for (int s : slots_read_by(GetParam())) expect_close(grads_s[s], grads[s], 1e-12, kSlotName[s]);
}

// Head h of an H-head op equals the 1-head op on head h's slices, forward and backward; beta is
// shared by the AGNN heads, so its gradient is the sum of the per-head ones.
TEST_P(ReferenceModel, HeadsAreIndependent) {
  const dfgnn_model_t model = GetParam();
  const EdgeList edges = mixed_edges(10, 21);
  auto g = make_graph(ctx_.get(), edges);
  const Problem p = random_problem(model, edges.n, 3, 4, 22);
  const int64_t H = p.heads(), D = p.dim();
  const std::vector<double> grad_out = random_vector(p.features(), 23);
  const Forward f = run_forward(g.get(), p);
  const Grads grads = run_backward(g.get(), p, grad_out);

  // Elements of head h: [N, H, D] -> [N, 1, D], [H, D] -> [1, D]; beta is shared.
  auto slice = [&](const std::vector<double>& v, int s, int64_t h) {
    if (s == kBeta) return v;
    const int64_t rows = is_feature_slot(s) ? p.n : 1;
    std::vector<double> out;
    for (int64_t r = 0; r < rows; ++r) out.insert(out.end(), v.begin() + (r * H + h) * D, v.begin() + (r * H + h + 1) * D);
    return out;
  };
  double beta_grad_sum = 0.0;
  for (int64_t h = 0; h < H; ++h) {
    Problem one = p;
    one.op.heads = 1;
    for (int s : slots_read_by(model)) one.x[s] = slice(p.x[s], s, h);
    const std::vector<double> one_grad_out = slice(grad_out, kH, h);
    const Forward fo = run_forward(g.get(), one);
    const Grads go = run_backward(g.get(), one, one_grad_out);
    const std::string head = " head " + std::to_string(h);
    expect_close(slice(f.out, kH, h), fo.out, 1e-14, "out" + head);
    std::vector<double> lse_h;
    for (int64_t i = 0; i < p.n; ++i) lse_h.push_back(f.lse[i * H + h]);
    expect_close(lse_h, fo.lse, 1e-14, "lse" + head);
    for (int s : slots_read_by(model)) {
      if (s == kBeta) {
        beta_grad_sum += go[s][0];
        continue;
      }
      expect_close(slice(grads[s], s, h), go[s], 1e-13, kSlotName[s] + head);
    }
  }
  if (model == kAgnn) {
    EXPECT_NEAR(grads[kBeta][0], beta_grad_sum, 1e-12 * std::max(1.0, std::abs(beta_grad_sum)));
  }
}

// Node 0 receives from 1..100000. Attention parameters are scaled so that every head's scores
// pass 709, where exp overflows without the max subtracted. Compared with the long-double naive
// forward; all gradients finite; fast.
TEST_P(ReferenceModel, HubWithHundredThousandInEdges) {
  const dfgnn_model_t model = GetParam();
  constexpr int64_t kLeaves = 100000;
  EdgeList edges{kLeaves + 1, {}, {}};
  for (int64_t j = 1; j <= kLeaves; ++j) edges.add(j, 0);
  auto g = make_graph(ctx_.get(), edges);
  Problem p = random_problem(model, edges.n, 2, 3, 24);
  const int amplified = model == kGat ? kAttDst : model == kGatV2 ? kAttSrc : model == kTransformer ? kQ : kBeta;
  for (double& x : p.x[amplified]) x *= 3000;
  if (model == kGat)
    for (double& x : p.x[kAttSrc]) x *= 3000;
  const std::vector<double> grad_out = random_vector(p.features(), 25);

  const auto start = std::chrono::steady_clock::now();
  const Forward f = run_forward(g.get(), p);
  const Grads grads = run_backward(g.get(), p, grad_out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);

  // Only row 0 is non-empty; the naive forward over the hub's edges.
  const Forward want = naive_forward(edges, p);
  expect_close(f.out, want.out, 1e-11, "out");
  expect_close(f.lse, want.lse, 1e-13, "lse");
  for (int64_t h = 0; h < p.heads(); ++h) EXPECT_GT(f.lse[h], 709.0) << "scores were meant to overflow exp";
  for (int s : slots_read_by(model)) expect_all_finite(grads[s], kSlotName[s]);
}

INSTANTIATE_TEST_SUITE_P(Reference, ReferenceModel, ::testing::Values(kGat, kGatV2, kTransformer, kAgnn),
                         [](const ::testing::TestParamInfo<dfgnn_model_t>& info) { return model_label(info.param); });

// ------------------------------------------------------------------------------ closed forms

// With the same v_j in every source, out_i = that v whatever the scores: the weights sum to one.
TEST(ReferenceTransformer, ConstantValuesPassThrough) {
  auto ctx = make_context();
  const EdgeList edges = mixed_edges(10, 26);
  auto g = make_graph(ctx.get(), edges);
  Problem p = random_problem(kTransformer, edges.n, 3, 4, 27);
  const std::vector<double> row = random_vector(3 * 4, 28);
  p.x[kV].clear();
  for (int64_t n = 0; n < p.n; ++n) p.x[kV].insert(p.x[kV].end(), row.begin(), row.end());
  const Forward f = run_forward(g.get(), p);
  for (int64_t i = 0; i < p.n - 2; ++i)  // the last two nodes have no in-edges
    for (size_t k = 0; k < row.size(); ++k) EXPECT_NEAR(f.out[i * row.size() + k], row[k], 1e-14);
}

// Hub of 10^5 equal scores of 3000: alpha = 1e-5 exactly, so out, lse and every gradient have a
// closed form. D = 1, scale = 1.
TEST(ReferenceTransformer, HubClosedForm) {
  constexpr int64_t kLeaves = 100000;
  auto ctx = make_context();
  std::vector<int64_t> src(kLeaves), dst(kLeaves, 0);
  for (int64_t j = 0; j < kLeaves; ++j) src[j] = j + 1;
  auto g = graph_from_edges(ctx.get(), kLeaves + 1, src, dst);
  Problem p{dfgnnOpDefault(kTransformer, DFGNN_DTYPE_FLOAT64, 1, 1), kLeaves + 1, {}};
  p.x[kQ].assign(p.n, 0.0);
  p.x[kQ][0] = 1.0;
  p.x[kK].assign(p.n, 3000.0);
  p.x[kV] = random_vector(p.n, 29);
  double mean_v = 0.0;
  for (int64_t j = 1; j <= kLeaves; ++j) mean_v += p.x[kV][j];
  mean_v /= kLeaves;

  const Forward f = run_forward(g.get(), p);
  EXPECT_NEAR(f.out[0], mean_v, 1e-14);
  EXPECT_NEAR(f.lse[0], 3000.0 + std::log(static_cast<double>(kLeaves)), 1e-12);

  std::vector<double> grad_out(p.n, 0.0);
  grad_out[0] = 0.7;
  const Grads grads = run_backward(g.get(), p, grad_out);
  // dv_j = alpha * go; de_j = alpha * go * (v_j - mean v); dk_j = de_j * q_0; dq_0 = 3000 * sum de_j = 0.
  for (int64_t j = 1; j <= kLeaves; ++j) {
    ASSERT_NEAR(grads[kV][j], 0.7 / kLeaves, 1e-18) << j;
    ASSERT_NEAR(grads[kK][j], 0.7 / kLeaves * (p.x[kV][j] - mean_v), 1e-18) << j;
  }
  EXPECT_NEAR(grads[kQ][0], 0.0, 1e-9);
  EXPECT_EQ(grads[kV][0], 0.0);
  EXPECT_EQ(grads[kK][0], 0.0);
}

// A zero feature vector: its norm is clamped (F.normalize), its cosines are 0, nothing is NaN.
TEST(ReferenceAgnn, ZeroFeatureVector) {
  auto ctx = make_context();
  auto g = graph_from_edges(ctx.get(), 3, {1, 0, 1, 2}, {0, 1, 1, 1});
  Problem p{dfgnnOpDefault(kAgnn, DFGNN_DTYPE_FLOAT64, 1, 2), 3, {}};
  p.x[kH] = {3, 4, 0, 0, -1, 2};
  p.x[kBeta] = {1.5};
  const Forward f = run_forward(g.get(), p);
  // Row 0 sees only h1 = 0. Row 1 has u_1 = 0, so all its scores are 0: a plain mean.
  expect_close(f.out, {0, 0, (3 + 0 - 1) / 3.0, (4 + 0 + 2) / 3.0, 0, 0}, 1e-15, "out");
  expect_close(f.lse, {0.0, std::log(3.0), -kInf}, 1e-15, "lse");
  const Grads grads = run_backward(g.get(), p, {1, -2, 0.5, 0.25, 3, 3});
  expect_all_finite(grads[kH], "grad h");
  expect_all_finite(grads[kBeta], "grad beta");
  EXPECT_EQ(grads[kBeta][0], 0.0);  // every cosine is 0
  // Below eps, u = h / 1e-12 (clamp_min passes no gradient), so d h_1 = d u_1 / 1e-12. Only row 1
  // has score gradients (row 0 has one edge): grad_out_1 . (h0, h1, h2) = (2.5, 0, 0) with
  // alpha = 1/3 gives de = (5/9, -5/18, -5/18), and d u_1 = beta * sum_j de_1j u_j (u_1 = 0).
  // Plus the value path: h1 feeds row 0 with alpha 1 and row 1 with alpha 1/3.
  const double r5 = std::sqrt(5.0);
  const double du_x = 1.5 * (5.0 / 9 * 0.6 - 5.0 / 18 * (-1 / r5)), du_y = 1.5 * (5.0 / 9 * 0.8 - 5.0 / 18 * (2 / r5));
  const double want_x = du_x / 1e-12 + (1 + 0.5 / 3), want_y = du_y / 1e-12 + (-2 + 0.25 / 3);
  EXPECT_NEAR(grads[kH][2], want_x, 1e-13 * std::abs(want_x));
  EXPECT_NEAR(grads[kH][3], want_y, 1e-13 * std::abs(want_y));
}

// ------------------------------------------------------------------------------ edge features

// Edge features (PyG's edge_dim) of GAT, GATv2 and the Transformer, read by edge id.
class ReferenceEdge : public ::testing::TestWithParam<dfgnn_model_t> {
 protected:
  ContextPtr ctx_ = make_context();
};

TEST_P(ReferenceEdge, MatchesNaiveForward) {
  const EdgeList edges = mixed_edges(11, 41);
  auto g = make_graph(ctx_.get(), edges);
  const Problem p = with_edge_features(random_problem(GetParam(), edges.n, 3, 5, 42), edges.src.size(), 43);
  const Forward f = run_forward(g.get(), p), want = naive_forward(edges, p);
  expect_close(f.out, want.out, 1e-13, "out");
  expect_close(f.lse, want.lse, 1e-13, "lse");
  // ... and the edge features change the result (the test above would pass if they were ignored
  // only if naive_forward ignored them too).
  Problem plain = p;
  plain.op.edge_features = 0;
  double changed = 0.0;
  const Forward without = run_forward(g.get(), plain);
  for (size_t k = 0; k < f.out.size(); ++k) changed += std::abs(f.out[k] - without.out[k]);
  EXPECT_GT(changed, 1e-3);
}

TEST_P(ReferenceEdge, GradientsMatchFiniteDifferences) {
  const EdgeList edges = mixed_edges(10, 44);
  auto g = make_graph(ctx_.get(), edges);
  const Problem p = with_edge_features(random_problem(GetParam(), edges.n, 2, 3, 45), edges.src.size(), 46);
  expect_gradients_match_finite_differences(g.get(), p, random_vector(p.features(), 47), "edge op grad ");
}

TEST_P(ReferenceEdge, WithDropoutGradientsMatchFiniteDifferences) {
  const EdgeList edges = mixed_edges(10, 48);
  auto g = make_graph(ctx_.get(), edges);
  Problem p = with_edge_features(random_problem(GetParam(), edges.n, 2, 3, 49), edges.src.size(), 50);
  p.op.dropout = 0.3f;
  p.op.dropout_seed = 5;
  expect_gradients_match_finite_differences(g.get(), p, random_vector(p.features(), 51), "edge op dropout grad ");
}

// Zero edge features are the op without them, exactly.
TEST_P(ReferenceEdge, ZeroFeaturesAreThePlainOp) {
  const EdgeList edges = mixed_edges(9, 52);
  auto g = make_graph(ctx_.get(), edges);
  Problem p = with_edge_features(random_problem(GetParam(), edges.n, 2, 4, 53), edges.src.size(), 54);
  std::fill(p.x[kEdge].begin(), p.x[kEdge].end(), 0.0);
  Problem plain = p;
  plain.op.edge_features = 0;
  const Forward f = run_forward(g.get(), p), want = run_forward(g.get(), plain);
  expect_close(f.out, want.out, 0.0, "out");
  expect_close(f.lse, want.lse, 0.0, "lse");
}

// With add_self_loops the rows follow PyG's order: the non-loop input edges, then one loop per node.
TEST_P(ReferenceEdge, SelfLoopGraphsUsePygEdgeOrder) {
  EdgeList edges = mixed_edges(8, 55);  // holds a self-loop (0 -> 0), which the option removes
  auto g = graph_from_edges(ctx_.get(), edges.n, edges.src, edges.dst, /*add_self_loops=*/true);
  EdgeList pyg{edges.n, {}, {}};
  for (size_t k = 0; k < edges.src.size(); ++k)
    if (edges.src[k] != edges.dst[k]) pyg.add(edges.src[k], edges.dst[k]);
  for (int64_t i = 0; i < edges.n; ++i) pyg.add(i, i);
  const Problem p = with_edge_features(random_problem(GetParam(), edges.n, 2, 3, 56), pyg.src.size(), 57);
  const Forward f = run_forward(g.get(), p), want = naive_forward(pyg, p);
  expect_close(f.out, want.out, 1e-13, "out");
}

TEST_P(ReferenceEdge, SlotErrors) {
  const EdgeList edges = mixed_edges(6, 58);
  auto g = make_graph(ctx_.get(), edges);
  const Problem p = with_edge_features(random_problem(GetParam(), edges.n, 1, 2, 59), edges.src.size(), 60);
  std::vector<double> out(p.features()), lse(p.n);
  dfgnn_inputs_t in = p.inputs();
  in.edge = nullptr;  // flag set, features missing
  EXPECT_EQ(dfgnnReferenceForward(g.get(), &p.op, &in, out.data(), lse.data()), DFGNN_STATUS_NULL_POINTER);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("inputs.edge"), std::string::npos) << dfgnnGetLastErrorMessage();
  dfgnn_op_t plain = p.op;  // features given, flag not set
  plain.edge_features = 0;
  in = p.inputs();
  EXPECT_EQ(dfgnnReferenceForward(g.get(), &plain, &in, out.data(), lse.data()), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("edge_features"), std::string::npos);
  dfgnn_op_t two = p.op;
  two.edge_features = 2;
  EXPECT_EQ(dfgnnReferenceForward(g.get(), &two, &in, out.data(), lse.data()), DFGNN_STATUS_INVALID_ARGUMENT);
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceEdge, ::testing::Values(kGat, kGatV2, kTransformer),
                         [](const auto& info) { return model_label(info.param); });

TEST(ReferenceEdgeErrors, AgnnTakesNone) {
  auto ctx = make_context();
  const EdgeList edges = mixed_edges(6, 61);
  auto g = make_graph(ctx.get(), edges);
  const Problem p = with_edge_features(random_problem(kAgnn, edges.n, 1, 2, 62), edges.src.size(), 63);
  std::vector<double> out(p.features()), lse(p.n);
  const dfgnn_inputs_t in = p.inputs();
  EXPECT_EQ(dfgnnReferenceForward(g.get(), &p.op, &in, out.data(), lse.data()), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("agnn takes no edge features"), std::string::npos)
      << dfgnnGetLastErrorMessage();
}

// ------------------------------------------------------------------------------ errors

class ReferenceErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    g_ = make_graph(ctx_.get(), tiny_edges());
    p_ = random_problem(kGat, 3, 2, 2, 30);
    in_ = p_.inputs();
    for (int s : slots_read_by(kGat)) {
      grad_[s].assign(p_.x[s].size(), 0.0);
      grads_.*kGradField[s] = grad_[s].data();
    }
  }
  dfgnn_status_t forward(const dfgnn_op_t& op, const dfgnn_inputs_t& in) {
    return dfgnnReferenceForward(g_.get(), &op, &in, out_.data(), lse_.data());
  }
  dfgnn_status_t backward(const dfgnn_op_t& op, const dfgnn_grads_t& grads) {
    return dfgnnReferenceBackward(g_.get(), &op, &in_, grad_out_.data(), &grads);
  }
  // The call failed with status and a message naming what.
  void expect_failure(dfgnn_status_t got, dfgnn_status_t status, const std::string& what) {
    EXPECT_EQ(got, status) << dfgnnGetStatusString(got);
    EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find(what), std::string::npos) << dfgnnGetLastErrorMessage();
  }

  ContextPtr ctx_ = make_context();
  GraphPtr g_;
  Problem p_;
  dfgnn_inputs_t in_{};
  Grads grad_;
  dfgnn_grads_t grads_{};
  std::vector<double> out_ = std::vector<double>(12), lse_ = std::vector<double>(6), grad_out_ = std::vector<double>(12);
};

TEST_F(ReferenceErrors, ValidCallsSucceed) {
  DFGNN_ASSERT_OK(forward(p_.op, in_));
  DFGNN_ASSERT_OK(backward(p_.op, grads_));
}

TEST_F(ReferenceErrors, DtypeMustBeFloat64) {
  for (dfgnn_dtype_t dtype : {DFGNN_DTYPE_FLOAT32, DFGNN_DTYPE_FLOAT16, DFGNN_DTYPE_BFLOAT16}) {
    dfgnn_op_t op = p_.op;
    op.dtype = dtype;
    expect_failure(forward(op, in_), DFGNN_STATUS_INVALID_ARGUMENT, "float64");
    expect_failure(backward(op, grads_), DFGNN_STATUS_INVALID_ARGUMENT, "float64");
  }
}

TEST_F(ReferenceErrors, MissingSlotIsNullPointer) {
  dfgnn_inputs_t in = in_;
  in.att_dst = nullptr;
  expect_failure(forward(p_.op, in), DFGNN_STATUS_NULL_POINTER, "att_dst");
  dfgnn_grads_t grads = grads_;
  grads.h = nullptr;
  expect_failure(backward(p_.op, grads), DFGNN_STATUS_NULL_POINTER, "h");
  expect_failure(dfgnnReferenceForward(g_.get(), &p_.op, &in_, nullptr, nullptr), DFGNN_STATUS_NULL_POINTER, "out");
  expect_failure(dfgnnReferenceBackward(g_.get(), &p_.op, &in_, nullptr, &grads_), DFGNN_STATUS_NULL_POINTER,
                 "grad_out");
}

TEST_F(ReferenceErrors, ExtraSlotIsInvalid) {
  dfgnn_inputs_t in = in_;
  in.q = p_.x[kH].data();
  expect_failure(forward(p_.op, in), DFGNN_STATUS_INVALID_ARGUMENT, "q");
  dfgnn_grads_t grads = grads_;
  double beta = 0;
  grads.beta = &beta;
  expect_failure(backward(p_.op, grads), DFGNN_STATUS_INVALID_ARGUMENT, "beta");
}

TEST_F(ReferenceErrors, BadDimsAreInvalid) {
  dfgnn_op_t op = p_.op;
  op.heads = 0;
  expect_failure(forward(op, in_), DFGNN_STATUS_INVALID_ARGUMENT, "heads");
  expect_failure(backward(op, grads_), DFGNN_STATUS_INVALID_ARGUMENT, "heads");
  op = p_.op;
  op.dim = -1;
  expect_failure(forward(op, in_), DFGNN_STATUS_INVALID_ARGUMENT, "dim");
}

TEST_F(ReferenceErrors, NullHandlesAreInvalid) {
  EXPECT_EQ(dfgnnReferenceForward(nullptr, &p_.op, &in_, out_.data(), nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnReferenceForward(g_.get(), nullptr, &in_, out_.data(), nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnReferenceForward(g_.get(), &p_.op, nullptr, out_.data(), nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnReferenceBackward(g_.get(), &p_.op, &in_, grad_out_.data(), nullptr), DFGNN_STATUS_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dfgnn::test

// The mask function the kernels and the reference share: drops close to p of the (edge, head)
// pairs, keeps the rest scaled by 1 / (1 - p), depends on the seed, the edge and the head.
TEST(ReferenceDropout, MaskRateScaleAndIndependence) {
  for (double p : {0.1, 0.5, 0.6}) {
    dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT64, 4, 8);
    op.dropout = static_cast<float>(p);
    const uint32_t threshold = static_cast<uint32_t>(std::llround(p * 4294967296.0));
    const float scale = 1.0f / (1.0f - op.dropout);
    int64_t dropped = 0, total = 0, differ_seed = 0, differ_hi = 0, differ_head = 0, differ_edge = 0;
    for (int64_t e = 0; e < 50000; ++e)
      for (int h = 0; h < 4; ++h) {
        const int edge = static_cast<int>(e);
        const float m = dfgnn::dropout_factor(dfgnn::dropout_key(7, h), threshold, scale, edge);
        ASSERT_TRUE(m == 0.0f || m == scale);
        dropped += m == 0.0f;
        ++total;
        differ_seed += m != dfgnn::dropout_factor(dfgnn::dropout_key(8, h), threshold, scale, edge);
        differ_hi += m != dfgnn::dropout_factor(dfgnn::dropout_key(7 + (1ull << 32), h), threshold, scale, edge);
        differ_head += m != dfgnn::dropout_factor(dfgnn::dropout_key(7, (h + 1) % 4), threshold, scale, edge);
        // Neighbouring edges of one head, as a row of the kernels visits them.
        differ_edge += m != dfgnn::dropout_factor(dfgnn::dropout_key(7, h), threshold, scale, edge + 1);
      }
    const double rate = static_cast<double>(dropped) / total, sd = std::sqrt(p * (1 - p) / total);
    EXPECT_NEAR(rate, p, 5 * sd) << "p " << p;
    // Independent masks disagree on a share 2p(1-p) of the pairs.
    EXPECT_NEAR(static_cast<double>(differ_seed) / total, 2 * p * (1 - p), 0.01);
    EXPECT_NEAR(static_cast<double>(differ_head) / total, 2 * p * (1 - p), 0.01);
    EXPECT_NEAR(static_cast<double>(differ_hi) / total, 2 * p * (1 - p), 0.01) << "the seed's high half counts";
    EXPECT_NEAR(static_cast<double>(differ_edge) / total, 2 * p * (1 - p), 0.01);
  }
}
