// dfgnn-graph: load (or generate) a graph, validate it, print its degree fingerprint, and run the
// float64 reference of every op on it. Uses only the public C API.
#include "cli_common.hpp"

#include <dfgnn/dfgnn.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace po = boost::program_options;

namespace {

constexpr const char* kTool = "dfgnn-graph";
using cli::check;

std::vector<double> random_values(size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(count);
  for (double& x : v) x = u(rng);
  return v;
}

void print_fingerprint(const dfgnn_fingerprint_t& fp, const std::string& key) {
  fmt::print("nodes {}  edges {}  mean in-degree {:.2f}  max in-degree {}\n", fp.num_nodes, fp.num_edges,
             fp.mean_degree, fp.max_degree);
  fmt::print("in-degree quantiles p50 {}  p90 {}  p99 {}  p99.9 {}\n", fp.p50, fp.p90, fp.p99, fp.p999);
  fmt::print("cv {:.3f}  gini {:.3f}  edges in top 1% rows {:.1f}%\n", fp.cv, fp.gini, 100 * fp.top1pct_edge_share);
  std::string hist;
  for (int b = 0; b < DFGNN_FINGERPRINT_HIST_BINS; ++b)
    if (fp.hist[b] > 0) hist += fmt::format(" {}:{:.4f}", b == 0 ? std::string("0") : fmt::format("<2^{}", b), fp.hist[b]);
  fmt::print("degree histogram (share of rows):{}\n", hist);
  std::string hubs;
  for (int k = 0; k < DFGNN_FINGERPRINT_HUB_THRESHOLDS; ++k)
    if (fp.hub_rows[k] > 0) hubs += fmt::format(" >={}:{}", 1 << (k + 6), fp.hub_rows[k]);
  fmt::print("hub rows:{}\n", hubs.empty() ? " none >= 64" : hubs);
  fmt::print("bucket key {}\n", key);
}

// Runs forward and backward of one model on random inputs; prints time and checksums.
void run_reference(dfgnn_graph_t graph, dfgnn_model_t model, const char* name, int heads, int dim, uint64_t seed) {
  int64_t n = 0, e = 0;
  check(dfgnnGraphGetSize(graph, &n, &e), "graph size");
  std::mt19937_64 rng(seed);
  // Cannot overflow: N < 2^31 and H * D <= DFGNN_MAX_CHANNELS (check_heads_dim, before anything is
  // allocated), so N*H*D doubles fit size_t bytes. More than the host has is std::bad_alloc, which
  // run_main reports in one line.
  const size_t vectors = static_cast<size_t>(heads) * dim, features = static_cast<size_t>(n) * vectors;
  auto a = random_values(features, rng), b = random_values(features, rng), c = random_values(features, rng);
  auto att1 = random_values(vectors, rng), att2 = random_values(vectors, rng);
  double beta = 1.5;
  dfgnn_inputs_t in{};
  std::vector<double> g_a(features), g_b(features), g_c(features), g_att1(vectors), g_att2(vectors);
  double g_beta = 0;
  dfgnn_grads_t grads{};
  // The inputs the model reads (the library's model table), in dfgnn_inputs_t order: features
  // from a, b, c in turn, attention vectors from att1, att2, and beta.
  uint32_t mask = 0;
  check(dfgnnModelInputs(model, 0, &mask, nullptr), name);
  double* const feats[] = {a.data(), b.data(), c.data()};
  double* const g_feats[] = {g_a.data(), g_b.data(), g_c.data()};
  double* const atts[] = {att1.data(), att2.data()};
  double* const g_atts[] = {g_att1.data(), g_att2.data()};
  const void** in_slots = reinterpret_cast<const void**>(&in);  // dfgnn_inputs_t is DFGNN_NUM_INPUTS pointers
  void** grad_slots = reinterpret_cast<void**>(&grads);
  static const char* const kFeatureNames[] = {"h", "h_dst", "q", "k", "v"};  // dfgnn_inputs_t's first fields
  const char* first_feature = nullptr;  // its gradient's norm is printed
  int f = 0, v = 0;
  for (int s = 0; s < DFGNN_NUM_INPUTS; ++s) {
    const uint32_t bit = 1u << s;
    if (!(mask & bit)) continue;
    if (bit == DFGNN_INPUT_BETA) {
      in_slots[s] = &beta, grad_slots[s] = &g_beta;
    } else if (bit == DFGNN_INPUT_ATT_SRC || bit == DFGNN_INPUT_ATT_DST) {
      in_slots[s] = atts[v], grad_slots[s] = g_atts[v], ++v;
    } else {
      if (f == 0) first_feature = kFeatureNames[s];
      in_slots[s] = feats[f], grad_slots[s] = g_feats[f], ++f;
    }
  }
  const dfgnn_op_t op = dfgnnOpDefault(model, DFGNN_DTYPE_FLOAT64, heads, dim);
  std::vector<double> out(features), lse(static_cast<size_t>(n) * heads);
  auto grad_out = random_values(features, rng);
  const auto t0 = std::chrono::steady_clock::now();
  check(dfgnnReferenceForward(graph, &op, &in, out.data(), lse.data()), name);
  const auto t1 = std::chrono::steady_clock::now();
  check(dfgnnReferenceBackward(graph, &op, &in, grad_out.data(), &grads), name);
  const auto t2 = std::chrono::steady_clock::now();
  double norm_out = 0, norm_grad = 0;
  for (double x : out) norm_out += x * x;
  for (double x : g_a) norm_grad += x * x;
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  fmt::print("  {:<12} forward {:8.1f} ms  backward {:8.1f} ms  |out| {:.6e}  |grad {}| {:.6e}\n", name, ms(t1 - t0),
             ms(t2 - t1), std::sqrt(norm_out), first_feature, std::sqrt(norm_grad));
}

int run(int argc, char** argv) {
  po::options_description visible("Usage: dfgnn-graph [options] GRAPH\n\nGRAPH is an edge-list file (.txt, .txt.gz), "
                                  "a Matrix Market file (.mtx) or a dataset directory.\n\nOptions");
  int heads = 2, dim = 16, rmat_scale = 0;
  int64_t rmat_edges = 0;
  uint64_t seed = 1;
  visible.add_options()
    ("help,h", "show this help")
    ("version", "print the version")
    ("self-loops", "remove existing self-loops and add one per node (PyG's add_self_loops)")
    ("reject-duplicates", "fail on duplicate edges instead of keeping them")
    ("heads", po::value(&heads)->default_value(2), "heads H for the reference ops")
    ("dim", po::value(&dim)->default_value(16), "channels per head D for the reference ops")
    ("rmat-scale", po::value(&rmat_scale), "generate an R-MAT graph with 2^SCALE nodes instead of reading GRAPH")
    ("rmat-edges", po::value(&rmat_edges), "edges to sample for --rmat-scale (default or 0: 16 per node)")
    ("seed", po::value(&seed)->default_value(1), "random seed for generated graphs and inputs")
    ("no-ops", "only load and fingerprint the graph")
    ("json", "print the fingerprint as JSON only");
  po::options_description all;
  std::string path;
  all.add(visible).add_options()("graph", po::value(&path));
  po::positional_options_description positional;
  positional.add("graph", 1);
  po::variables_map vm;
  cli::parse_options([&] {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  });
  if (cli::print_help_or_version(kTool, vm.count("help"), vm.count("version"), visible)) return 0;
  // Before 16 << SCALE is computed, and so that a bad scale is not silently ignored for GRAPH.
  if (vm.count("rmat-scale") && (rmat_scale < 1 || rmat_scale > 30))
    throw cli::BadArgs{fmt::format("--rmat-scale {} is not a scale in 1..30", rmat_scale)};
  if (path.empty() && rmat_scale == 0) throw cli::BadArgs{"no GRAPH given (see --help)"};
  if (!path.empty() && rmat_scale > 0) throw cli::BadArgs{"give GRAPH or --rmat-scale, not both"};
  cli::check_heads_dim(heads, dim);
  if (rmat_edges < 0) throw cli::BadArgs{fmt::format("--rmat-edges {} must be >= 0 (0: 16 per node)", rmat_edges)};
  if (vm.count("rmat-edges") && rmat_scale == 0) throw cli::BadArgs{"--rmat-edges needs --rmat-scale"};
  cli::ContextGuard context;
  check(dfgnnCreate(&context.ctx), "context");
  dfgnn_context_t ctx = context.ctx;
  dfgnn_graph_t graph = nullptr;
  struct GraphGuard {
    dfgnn_graph_t& g;
    ~GraphGuard() { dfgnnGraphDestroy(g); }
  } graph_guard{graph};
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.add_self_loops = vm.count("self-loops") ? 1 : 0;
  options.duplicates = vm.count("reject-duplicates") ? DFGNN_DUPLICATES_REJECT : DFGNN_DUPLICATES_KEEP;
  if (rmat_scale > 0) {
    const int64_t edges = rmat_edges > 0 ? rmat_edges : (int64_t{16} << rmat_scale);
    check(dfgnnGraphCreateRmat(ctx, rmat_scale, edges, 0.57, 0.19, 0.19,
                               DFGNN_RMAT_DEDUPLICATE | DFGNN_RMAT_NO_SELF_LOOPS | DFGNN_RMAT_PERMUTE_IDS, seed,
                               &options, &graph),
          "generate R-MAT graph");
    path = fmt::format("rmat-scale{}-edges{}-seed{}", rmat_scale, edges, seed);
  } else {
    check(dfgnnGraphCreateFromFile(ctx, path.c_str(), &options, &graph), path);
  }
  dfgnn_fingerprint_t fp;
  check(dfgnnGraphGetFingerprint(graph, &fp), "fingerprint");
  const std::string text = cli::read_text(
      [&](char* buffer, size_t capacity, size_t* length) { return dfgnnFingerprintSerialize(&fp, buffer, capacity, length); },
      "serialize fingerprint");
  if (vm.count("json")) {
    fmt::print("{}\n", text);
    return 0;
  }
  const std::string key = cli::read_text(
      [&](char* buffer, size_t capacity, size_t* length) { return dfgnnFingerprintBucketKey(&fp, buffer, capacity, length); },
      "bucket key");
  fmt::print("graph {} (valid)\n", path);
  print_fingerprint(fp, key);
  if (!vm.count("no-ops")) {
    fmt::print("float64 reference ops, H={} D={}, random inputs:\n", heads, dim);
    for (dfgnn_model_t model : cli::all_models()) run_reference(graph, model, cli::model_name(model), heads, dim, seed);
  }
  int has_device = 0;
  const char* reason = nullptr;
  check(dfgnnHasDevice(ctx, &has_device, &reason), "device probe");
  fmt::print("GPU: {}\n", has_device ? "available" : reason);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main(kTool, [&] { return run(argc, argv); }); }
