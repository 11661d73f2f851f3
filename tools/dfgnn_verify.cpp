// dfgnn-verify: runs the fused GPU ops for every model x dtype x direction x schedule on a corpus
// of graphs and checks them against the float64 reference (poisoned outputs, determinism of the
// backward). Writes a Markdown report; exits 1 if any case fails, 3 without a GPU.
#include "cli_common.hpp"
#include "verify/verify.hpp"

#include <dfgnn/dfgnn.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <thread>

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace dfgnn::verify;

namespace {

struct NamedGraph {
  std::string name;
  dfgnn_graph_t graph;
  bool large;  // large graphs get fewer (D, H) combinations
};

void check(dfgnn_status_t s, const std::string& what) {
  if (s != DFGNN_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("{}: {}: {}", what, dfgnnGetStatusString(s), dfgnnGetLastErrorMessage()));
}

// From the library's model table (AGNN takes none).
bool takes_edge_features(dfgnn_model_t model) {
  uint32_t mask = 0;
  return dfgnnModelInputs(model, 1, &mask, nullptr) == DFGNN_STATUS_SUCCESS;
}

// Half the nodes form a random graph, the other half are isolated (rows and columns empty).
dfgnn_graph_t isolated_nodes_graph(dfgnn_context_t ctx) {
  const int64_t n = 6000, e = 24000;
  std::mt19937_64 rng(5);
  std::vector<int64_t> edge_index(2 * e);
  for (auto& v : edge_index) v = static_cast<int64_t>(rng() % (n / 2));
  dfgnn_graph_t g = nullptr;
  check(dfgnnGraphCreateCoo(ctx, n, e, edge_index.data(), DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr, &g), "isolated");
  return g;
}

// "K/N" of --part: the K-th of N parts (1 <= K <= N <= 10000), or nullopt for any other text.
std::optional<std::pair<int, int>> parse_part(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  const auto number = [](const char* first, const char* last) -> std::optional<int> {
    int v = 0;
    const auto [end, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || end != last || first == last) return std::nullopt;
    return v;
  };
  const std::optional<int> k = number(text.data(), text.data() + slash),
                           n = number(text.data() + slash + 1, text.data() + text.size());
  if (!k || !n || *n < 1 || *n > 10000 || *k < 1 || *k > *n) return std::nullopt;
  return std::pair{*k, *n};
}

std::vector<NamedGraph> corpus(dfgnn_context_t ctx, const std::string& repo, const std::string& datasets, bool quick,
                               bool tiny, bool real) {
  std::vector<NamedGraph> graphs;
  dfgnn_graph_t g = nullptr;
  if (tiny) {  // for compute-sanitizer: small graphs on which every solver still applies
    check(dfgnnGraphCreateFromFile(ctx, (fs::path(repo) / "data/cora").c_str(), nullptr, &g), "cora");
    graphs.push_back({"cora", g, false});
    check(dfgnnGraphCreatePlantedHubs(ctx, 3000, 3, 1, 2500, 4, nullptr, &g), "hub");
    graphs.push_back({"hub-2500", g, false});
    // 3000 rows without edges in a row, as a mini-batch graph's outer hop: cut into small row groups
    graphs.push_back({"isolated-half", isolated_nodes_graph(ctx), false});
    return graphs;
  }
  check(dfgnnGraphCreateFromFile(ctx, (fs::path(repo) / "data/cora").c_str(), nullptr, &g), "cora");
  graphs.push_back({"cora", g, false});
  dfgnn_graph_options_t loops = dfgnnGraphDefaultOptions();
  loops.add_self_loops = 1;
  check(dfgnnGraphCreateFromFile(ctx, (fs::path(repo) / "data/cora").c_str(), &loops, &g), "cora");
  graphs.push_back({"cora+loops", g, false});
  check(dfgnnGraphCreatePlantedHubs(ctx, 20000, 8, 0, 0, 1, nullptr, &g), "uniform");
  graphs.push_back({"uniform-20k", g, false});
  graphs.push_back({"isolated-half", isolated_nodes_graph(ctx), false});
  check(dfgnnGraphCreatePlantedHubs(ctx, 110000, 2, 1, 100000, 2, nullptr, &g), "hub");
  graphs.push_back({"hub-1e5", g, true});
  if (quick) return graphs;
  if (real) graphs.clear();  // real graphs (and R-MAT) only
  check(dfgnnGraphCreateRmat(ctx, 15, 16 << 15, 0.57, 0.19, 0.19,
                             DFGNN_RMAT_DEDUPLICATE | DFGNN_RMAT_NO_SELF_LOOPS | DFGNN_RMAT_PERMUTE_IDS, 3, nullptr, &g),
        "rmat");
  graphs.push_back({"rmat-15", g, true});
  if (!datasets.empty() && fs::exists(datasets)) {
    for (const char* name : {"pubmed", "blogcatalog", "snap-email-Enron", "tu-PROTEINS"}) {
      const fs::path dir = fs::path(datasets) / name;
      if (!fs::exists(dir)) continue;
      check(dfgnnGraphCreateFromFile(ctx, dir.c_str(), nullptr, &g), name);
      graphs.push_back({name, g, true});
    }
  } else {
    fmt::print("note: datasets directory '{}' not found; real graphs beyond Cora skipped\n", datasets);
  }
  return graphs;
}

// The whole tool; main runs it under cli::run_main, so that any exception (std::bad_alloc
// included) is one line on stderr and a non-zero exit.
int run(int argc, char** argv) {
  std::string repo = ".", datasets, report, part_text = "1/1";
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  po::options_description opts("Usage: dfgnn-verify [options]\n\nOptions");
  opts.add_options()
    ("help,h", "show this help")
    ("repo", po::value(&repo)->default_value("."), "repository root (for data/cora)")
    ("datasets", po::value(&datasets), "directory of real datasets (pubmed, blogcatalog, snap-email-Enron, tu-PROTEINS)")
    ("quick", "small corpus and dims (for the GPU test label)")
    ("tiny", "three small graphs, float32 and bfloat16, three shapes (for compute-sanitizer)")
    ("real", "only R-MAT and the real graphs of --datasets (with their reduced dims)")
    ("all-schedules", "every candidate schedule (float32, H=4, D=64) instead of one per solver")
    ("report", po::value(&report), "write a Markdown report to this file")
    ("part", po::value(&part_text)->default_value("1/1"),
     "K/N: only every N-th case, from the K-th (compute-sanitizer's run of --tiny takes longer than one "
     "device call; N parts together are the whole corpus)")
    ("threads", po::value(&threads), "CPU threads for NVRTC and references");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    fmt::print(stderr, "dfgnn-verify: {} (see --help)\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  // Checked before the GPU: 0 or fewer threads would skip the precompile without a word, and a
  // thread count the host cannot start would end the tool in std::terminate.
  if (threads < 1 || threads > 1024) {
    fmt::print(stderr, "dfgnn-verify: --threads {} must be in 1..1024\n", threads);
    return 2;
  }
  const std::optional<std::pair<int, int>> part = parse_part(part_text);
  if (!part) {
    fmt::print(stderr, "dfgnn-verify: --part {} must be K/N with 1 <= K <= N <= 10000\n", part_text);
    return 2;
  }
  dfgnn_context_t ctx = nullptr;
  dfgnnCreate(&ctx);
  int has_device = 0;
  const char* reason = nullptr;
  dfgnnHasDevice(ctx, &has_device, &reason);
  if (!has_device) {
    fmt::print(stderr, "dfgnn-verify: {}\n", reason);
    return 3;
  }
  const bool quick = vm.count("quick") > 0, all = vm.count("all-schedules") > 0, tiny = vm.count("tiny") > 0,
             real = vm.count("real") > 0;
  std::vector<NamedGraph> graphs;
  std::vector<Case> cases;
  try {
    graphs = corpus(ctx, repo, datasets, quick, tiny, real);
    const std::vector<std::pair<int, int>> dims_small = tiny ? std::vector<std::pair<int, int>>{{7, 3}, {64, 2}, {8, 8}}
        : quick
        ? std::vector<std::pair<int, int>>{{7, 3}, {64, 4}, {128, 1}, {8, 8}}
        : std::vector<std::pair<int, int>>{{1, 1}, {7, 3}, {32, 2}, {64, 4}, {128, 1}, {256, 2}, {16, 8}, {8, 8}};
    const std::vector<std::pair<int, int>> dims_large = real ? std::vector<std::pair<int, int>>{{64, 4}, {128, 1}}
                                                             : std::vector<std::pair<int, int>>{{7, 3}, {64, 4}, {128, 1}};
    for (const NamedGraph& g : graphs)
      for (dfgnn_model_t m : cli::all_models())
        for (int t = 0; t < 3; ++t) {
          if (tiny && t == 1) continue;
          for (auto [d, h] : g.large ? dims_large : dims_small)
            for (int dir = 0; dir < 2; ++dir) {
              dfgnn_op_t op = dfgnnOpDefault(m, static_cast<dfgnn_dtype_t>(t), h, d);
              const bool sweep = all && t == 0 && d == 64 && h == 4;
              for (const std::string& s : schedules_for(ctx, g.graph, op, static_cast<dfgnn_direction_t>(dir), sweep))
                cases.push_back({g.name, g.graph, op, static_cast<dfgnn_direction_t>(dir), s});
              // With edge features (models that take them): float32 and bfloat16, float32 on the large
              // graphs too (--quick: float32 only; it ran past ctest's 900 s on the H200 with bfloat16 as well).
              if (takes_edge_features(m) && (t == 0 || (t == 2 && !g.large && !quick))) {
                dfgnn_op_t edge_op = op;
                edge_op.edge_features = 1;
                for (const std::string& s : schedules_for(ctx, g.graph, edge_op, static_cast<dfgnn_direction_t>(dir), false))
                  cases.push_back({g.name, g.graph, edge_op, static_cast<dfgnn_direction_t>(dir), s});
              }
              if (t != 0 || g.large) continue;
              op.dropout = 0.3f;  // float32 again with attention dropout (the mask in every pass)
              op.dropout_seed = 11;
              for (const std::string& s : schedules_for(ctx, g.graph, op, static_cast<dfgnn_direction_t>(dir), false))
                cases.push_back({g.name, g.graph, op, static_cast<dfgnn_direction_t>(dir), s});
              if (takes_edge_features(m) && !quick) {  // dropout and edge features together
                op.edge_features = 1;
                for (const std::string& s : schedules_for(ctx, g.graph, op, static_cast<dfgnn_direction_t>(dir), false))
                  cases.push_back({g.name, g.graph, op, static_cast<dfgnn_direction_t>(dir), s});
              }
            }
        }
  } catch (const std::exception& e) {
    fmt::print(stderr, "dfgnn-verify: {}\n", e.what());
    return 1;
  }
  if (const auto [k, n] = *part; n > 1) {  // interleaved, so that every part has every graph, model and dtype
    std::vector<Case> kept;
    for (size_t i = static_cast<size_t>(k - 1); i < cases.size(); i += static_cast<size_t>(n)) kept.push_back(cases[i]);
    fmt::print("part {} of {}: {} of {} cases\n", k, n, kept.size(), cases.size());
    cases = std::move(kept);
  }
  fmt::print("{} graphs, {} cases; compiling kernels and computing references on {} threads\n", graphs.size(),
             cases.size(), threads);
  Verifier verifier(ctx);
  const auto t0 = std::chrono::steady_clock::now();
  verifier.precompile(cases, threads);
  const auto t1 = std::chrono::steady_clock::now();
  uint64_t compiles = 0;
  dfgnnGetCacheCounters(ctx, &compiles, nullptr, nullptr);
  fmt::print("prepared in {:.1f} s ({} NVRTC compiles)\n", std::chrono::duration<double>(t1 - t0).count(), compiles);

  std::vector<Outcome> outcomes;
  int failed = 0;
  // Worst error per (graph, model, dtype, direction) for the summary table.
  std::map<std::string, double> worst;
  for (const Case& c : cases) {
    Outcome o = verifier.run(c);
    if (!o.passed) {
      ++failed;
      fmt::print("FAIL {} {} {} [{}]: {} rel err {:.2e} ({}){}{}\n", c.graph_name, op_label(c.op),
                 c.direction == DFGNN_FORWARD ? "forward" : "backward", o.schedule_run, o.error, o.max_rel_error,
                 o.worst_tensor, o.unwritten ? " unwritten/non-finite" : "", o.deterministic ? "" : " non-deterministic");
    }
    static const char* dt[] = {"float32", "float16", "bfloat16"};
    const std::string key = fmt::format("| {} | {}{} | {} | {} |", c.graph_name, cli::model_name(c.op.model),
                                        c.op.edge_features ? "+edge" : "", dt[c.op.dtype],
                                        c.direction == DFGNN_FORWARD ? "forward" : "backward");
    worst[key] = std::max(worst[key], o.passed ? o.max_rel_error : 1e30);
    outcomes.push_back(std::move(o));
  }
  const auto t2 = std::chrono::steady_clock::now();
  fmt::print("{} cases: {} passed, {} failed ({:.1f} s of runs)\n", cases.size(), cases.size() - failed, failed,
             std::chrono::duration<double>(t2 - t1).count());
  if (!report.empty()) {
    std::ofstream f(report);
    f << fmt::format("# dfgnn-verify report\n\n{} cases ({} graphs: ", cases.size(), graphs.size());
    for (const auto& g : graphs) f << g.name << " ";
    f << fmt::format("), {} passed, {} failed. Tolerances (relative L2 vs float64 reference on the same rounded "
                     "inputs): float32 {:.0e}, float16 {:.0e}, bfloat16 {:.0e} (AGNN beta gradient: 3x in 16-bit dtypes). Outputs poisoned (NaN) before each run; "
                     "backward run twice and compared bitwise.\n\n",
                     cases.size() - failed, failed, tolerance(DFGNN_DTYPE_FLOAT32), tolerance(DFGNN_DTYPE_FLOAT16),
                     tolerance(DFGNN_DTYPE_BFLOAT16));
    f << "## Worst relative error per graph, model, dtype and direction (over all schedules and dims)\n\n"
         "| graph | model | dtype | direction | worst rel err |\n|---|---|---|---|---|\n";
    for (const auto& [k, v] : worst) f << k << (v >= 1e30 ? " FAIL |" : fmt::format(" {:.2e} |", v)) << "\n";
    f << "\n## Failures\n\n";
    for (const Outcome& o : outcomes)
      if (!o.passed)
        f << fmt::format("- {} {} {} `{}`: {} rel err {:.2e} ({}){}{}\n", o.c.graph_name, op_label(o.c.op),
                         o.c.direction == DFGNN_FORWARD ? "forward" : "backward", o.schedule_run, o.error,
                         o.max_rel_error, o.worst_tensor, o.unwritten ? " unwritten/non-finite" : "",
                         o.deterministic ? "" : " non-deterministic");
    if (failed == 0) f << "none\n";
  }
  for (auto& g : graphs) dfgnnGraphDestroy(g.graph);
  dfgnnDestroy(ctx);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main("dfgnn-verify", [&] { return run(argc, argv); }); }
