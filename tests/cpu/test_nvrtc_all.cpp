// NVRTC compiles every reachable specialisation for sm_90: for one (model, dtype, edge features)
// per test instance, every kernel name expression that any candidate schedule of any pass can ask for, over
// a set of (D, H) shapes, aligned and unaligned data, plus the backward helpers. The names are
// de-duplicated and compiled in batches (one NVRTC program per batch amortises start-up).
// NvrtcAll compiles them all (ctest label long); NvrtcSample, what CI runs, the rules' names and a
// fixed sample of the rest.
#include "test_util.hpp"

#include "default_rule.hpp"
#include "error.hpp"
#include "graph.hpp"
#include "graph_io.hpp"
#include "nvrtc.hpp"
#include "op.hpp"
#include "ops.hpp"
#include "schedule.hpp"
#include "solver.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace {

using dfgnn::PassKind;
using dfgnn::SolverId;

constexpr int kArch = 90;
constexpr size_t kNamesPerCompile = 40;

// CPU seconds of this process (NVRTC compiles on the calling thread): the budget below is for one
// core, so it must not count time lost to other processes when ctest runs instances in parallel.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// One planted-hub graph shared by all instances of the process: max in- and out-degree 5000 (> 2048),
// mean ~9, so every solver applies to every pass.
const dfgnn::Graph& planted_hub_graph() {
  static const std::unique_ptr<dfgnn::Graph> graph = [] {
    const dfgnn::EdgeList e = dfgnn::generate_planted_hubs(20000, 8, 3, 5000, 2024);
    return dfgnn::Graph::from_coo(e.num_nodes, e.num_edges(), e.edge_index.data(), DFGNN_INDEX_INT64,
                                  dfgnnGraphDefaultOptions());
  }();
  return *graph;
}

struct Shape {
  int dim, heads;
};
// {8, 8}: groups spanning heads (the mapping of many heads of few channels).
constexpr Shape kShapes[] = {{1, 1}, {7, 3}, {32, 2}, {64, 4}, {128, 1}, {256, 2}, {8, 8}};

// The kernel names of one instance, in first-seen order without repeats: every candidate schedule
// of every pass over kShapes (aligned and unaligned data), plus the backward helpers. `must` marks
// what the default rule and the hand rule reach (the sampled suite compiles all of those).
struct Names {
  std::vector<std::string> all;
  std::set<std::string> must;
  size_t schedules = 0;
};

Names reachable_names(dfgnn_model_t model, dfgnn_dtype_t dtype, bool edge_features) {
  const dfgnn::Graph& graph = planted_hub_graph();
  Names out;
  std::set<std::string> seen;
  auto add = [&](const std::vector<std::string>& more, bool must) {
    for (const std::string& n : more) {
      if (seen.insert(n).second) out.all.push_back(n);
      if (must) out.must.insert(n);
    }
  };
  for (const Shape& shape : kShapes) {
    dfgnn_op_t op = dfgnnOpDefault(model, dtype, shape.heads, shape.dim);
    op.edge_features = edge_features ? 1 : 0;
    const int32_t aligned = static_cast<int32_t>(16 / dfgnn::dtype_size(dtype));
    for (int32_t max_vec : {aligned, 1}) {
      for (PassKind pass : {PassKind::Forward, PassKind::BackwardRow, PassKind::BackwardCol}) {
        const dfgnn::PassProblem problem = dfgnn::pass_problem(graph, op, pass, max_vec);
        SCOPED_TRACE(std::string(dfgnn::pass_name(pass)) + " D=" + std::to_string(shape.dim) +
                     " H=" + std::to_string(shape.heads) + " max_vec=" + std::to_string(max_vec));
        const std::vector<dfgnn::Schedule> candidates = dfgnn::enumerate_schedules(problem);
        EXPECT_FALSE(candidates.empty());
        std::set<SolverId> solvers;
        for (const dfgnn::Schedule& s : candidates) {
          solvers.insert(s.solver);
          EXPECT_NO_THROW(dfgnn::require_valid(problem, s)) << dfgnn::to_string(s);
          add(dfgnn::pass_kernel_names(op, pass, s), false);
        }
        // The default rule's choice and the hand rule's (its fallback: hub split on this graph)
        // are among what gets compiled too.
        const dfgnn::Schedule fallback = dfgnn::hand_rule_schedule(problem);
        EXPECT_EQ(fallback.solver, SolverId::HubSplit);
        add(dfgnn::pass_kernel_names(op, pass, fallback), true);
        add(dfgnn::pass_kernel_names(op, pass, dfgnn::default_schedule(problem)), true);
        out.schedules += candidates.size() + 2;
        if (pass == PassKind::Forward) {
          EXPECT_EQ(solvers.size(), 5u) << "every solver applies to a planted-hub graph";
        }
      }
    }
    add(dfgnn::backward_helper_names(op), true);
    // Attention dropout compiles its own kernels (Geo's P): the rules' choices with it, for the
    // shapes of PyG's GAT example and a wide one.
    if ((shape.dim == 8 && shape.heads == 8) || (shape.dim == 7 && shape.heads == 3) || shape.dim == 64) {
      dfgnn_op_t dropped = op;
      dropped.dropout = 0.5f;
      const int32_t aligned = static_cast<int32_t>(16 / dfgnn::dtype_size(dtype));
      for (PassKind pass : {PassKind::Forward, PassKind::BackwardRow, PassKind::BackwardCol}) {
        const dfgnn::PassProblem problem = dfgnn::pass_problem(graph, dropped, pass, aligned);
        add(dfgnn::pass_kernel_names(dropped, pass, dfgnn::hand_rule_schedule(problem)), true);
        add(dfgnn::pass_kernel_names(dropped, pass, dfgnn::default_schedule(problem)), true);
        out.schedules += 2;
      }
    }
  }
  return out;
}

// Compiles the names in batches and checks every lowered name; prints and records the cost.
void compile_all(const std::vector<std::string>& names, const std::string& label, size_t schedules) {
  ASSERT_FALSE(names.empty());
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  size_t programs = 0, image_bytes = 0;
  for (size_t first = 0; first < names.size(); first += kNamesPerCompile) {
    const std::vector<std::string> batch(names.begin() + first,
                                         names.begin() + std::min(names.size(), first + kNamesPerCompile));
    dfgnn::Cubin cubin;
    try {
      cubin = dfgnn::compile(batch, kArch);
    } catch (const dfgnn::Error& e) {
      ADD_FAILURE() << "batch " << first / kNamesPerCompile << " failed: " << dfgnnGetStatusString(e.status()) << "\n"
                    << e.what();
      continue;
    }
    ++programs;
    image_bytes += cubin.image.size();
    EXPECT_FALSE(cubin.image.empty());
    ASSERT_EQ(cubin.lowered.size(), batch.size());
    for (size_t k = 0; k < batch.size(); ++k) {
      EXPECT_EQ(cubin.names[k], batch[k]);
      EXPECT_EQ(cubin.lowered[k].rfind("_Z", 0), 0u) << batch[k] << " lowered to '" << cubin.lowered[k] << "'";
    }
  }
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_s = cpu_seconds() - cpu_start;
  std::printf("[ NvrtcAll ] %s: %zu schedules -> %zu kernel names, %zu programs, %zu KiB of cubin, %.1f s wall, "
              "%.1f s CPU\n",
              label.c_str(), schedules, names.size(), programs, image_bytes / 1024, total_s, cpu_s);
  testing::Test::RecordProperty("kernel_names", static_cast<int>(names.size()));
  testing::Test::RecordProperty("cpu_seconds", std::to_string(cpu_s));
}

using Instance = std::tuple<dfgnn_model_t, dfgnn_dtype_t, bool>;

std::string label_of(const Instance& i) {
  return std::string(dfgnn::model_name(std::get<0>(i))) + " " + dfgnn::dtype_name(std::get<1>(i)) +
         (std::get<2>(i) ? " with edge features" : "");
}

// Every reachable name (labelled long: about half an hour of one core for all instances).
class NvrtcAll : public testing::TestWithParam<Instance> {};

TEST_P(NvrtcAll, CompilesEveryReachableSpecialisationForSm90) {
  const auto [model, dtype, edge_features] = GetParam();
  const Names names = reachable_names(model, dtype, edge_features);
  compile_all(names.all, label_of(GetParam()), names.schedules);
}

// What CI compiles: every name the default and hand rules reach, and every kSampleStride-th of the
// other candidates' names, from an offset that differs between instances, so that together they
// cover each position of the enumeration order (the candidates of each solver and lane mapping).
constexpr size_t kSampleStride = 5;

class NvrtcSample : public testing::TestWithParam<Instance> {};

TEST_P(NvrtcSample, CompilesTheRulesNamesAndASampleOfTheRest) {
  const auto [model, dtype, edge_features] = GetParam();
  const Names names = reachable_names(model, dtype, edge_features);
  const size_t offset = (static_cast<size_t>(model) * 3 + static_cast<size_t>(dtype) + (edge_features ? 7 : 0)) % kSampleStride;
  std::vector<std::string> sample;
  size_t rest = 0;
  for (const std::string& n : names.all)
    if (names.must.count(n) != 0 || rest++ % kSampleStride == offset) sample.push_back(n);
  EXPECT_LT(sample.size(), names.all.size());
  compile_all(sample, label_of(GetParam()) + " (sample)", names.schedules);
}

std::string instance_name(const testing::TestParamInfo<Instance>& info) {
  return std::string(dfgnn::model_name(std::get<0>(info.param))) + "_" + dfgnn::dtype_name(std::get<1>(info.param)) +
         (std::get<2>(info.param) ? "_edge" : "");
}

// Every model and dtype, without and (except AGNN, which has none) with edge features.
std::vector<Instance> instances() {
  std::vector<Instance> all;
  for (bool edge : {false, true})
    for (dfgnn_model_t m : {DFGNN_MODEL_GAT, DFGNN_MODEL_GATV2, DFGNN_MODEL_TRANSFORMER, DFGNN_MODEL_AGNN})
      for (dfgnn_dtype_t t : {DFGNN_DTYPE_FLOAT32, DFGNN_DTYPE_FLOAT16, DFGNN_DTYPE_BFLOAT16})
        if (!(edge && m == DFGNN_MODEL_AGNN)) all.emplace_back(m, t, edge);
  return all;
}

INSTANTIATE_TEST_SUITE_P(ModelDtype, NvrtcAll, testing::ValuesIn(instances()), instance_name);
INSTANTIATE_TEST_SUITE_P(ModelDtype, NvrtcSample, testing::ValuesIn(instances()), instance_name);

}  // namespace
