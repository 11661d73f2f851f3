// NVRTC compiles every reachable specialisation for sm_90: for one (model, dtype, edge features)
// per test instance, every kernel name expression that any candidate schedule of any pass can ask for, over
// a set of (D, H) shapes, aligned and unaligned data, plus the backward helpers. The names are
// de-duplicated and compiled in batches (one NVRTC program per batch amortises start-up).
#include "test_util.hpp"

#include "error.hpp"
#include "graph.hpp"
#include "graph_io.hpp"
#include "nvrtc.hpp"
#include "op.hpp"
#include "ops.hpp"
#include "schedule.hpp"

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
constexpr Shape kShapes[] = {{1, 1}, {7, 3}, {32, 2}, {64, 4}, {128, 1}, {256, 2}};

class NvrtcAll : public testing::TestWithParam<std::tuple<dfgnn_model_t, dfgnn_dtype_t, bool>> {};

TEST_P(NvrtcAll, CompilesEveryReachableSpecialisationForSm90) {
  const auto [model, dtype, edge_features] = GetParam();
  const dfgnn::Graph& graph = planted_hub_graph();
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();

  // Name expressions in first-seen order, without repeats.
  std::vector<std::string> names;
  std::set<std::string> seen;
  auto add = [&](const std::vector<std::string>& more) {
    for (const std::string& n : more)
      if (seen.insert(n).second) names.push_back(n);
  };
  size_t schedules = 0;
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
        ASSERT_FALSE(candidates.empty());
        std::set<SolverId> solvers;
        for (const dfgnn::Schedule& s : candidates) {
          solvers.insert(s.solver);
          EXPECT_NO_THROW(dfgnn::require_valid(problem, s)) << dfgnn::to_string(s);
          add(dfgnn::pass_kernel_names(op, pass, s));
        }
        // The default rule's choice and the hand rule's (its fallback: hub split on this graph)
        // are among what gets compiled too.
        const dfgnn::Schedule fallback = dfgnn::hand_rule_schedule(problem);
        EXPECT_EQ(fallback.solver, SolverId::HubSplit);
        add(dfgnn::pass_kernel_names(op, pass, fallback));
        add(dfgnn::pass_kernel_names(op, pass, dfgnn::default_schedule(problem)));
        schedules += candidates.size() + 2;
        if (pass == PassKind::Forward) {
          EXPECT_EQ(solvers.size(), 5u) << "every solver applies to a planted-hub graph";
        }
      }
    }
    add(dfgnn::backward_helper_names(op));
  }
  ASSERT_FALSE(names.empty());
  const double enumerate_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

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
  std::printf("[ NvrtcAll ] %s %s%s: %zu schedules -> %zu kernel names, %zu programs, %zu KiB of cubin, "
              "enumeration %.2f s, total %.1f s wall, %.1f s CPU\n",
              dfgnn::model_name(model), dfgnn::dtype_name(dtype), edge_features ? " with edge features" : "", schedules, names.size(), programs,
              image_bytes / 1024, enumerate_s, total_s, cpu_s);
  RecordProperty("kernel_names", static_cast<int>(names.size()));
  RecordProperty("cpu_seconds", std::to_string(cpu_s));
}

std::string instance_name(const testing::TestParamInfo<NvrtcAll::ParamType>& info) {
  return std::string(dfgnn::model_name(std::get<0>(info.param))) + "_" + dfgnn::dtype_name(std::get<1>(info.param)) +
         (std::get<2>(info.param) ? "_edge" : "");
}

// Every model and dtype, without and (except AGNN, which has none) with edge features.
std::vector<NvrtcAll::ParamType> instances() {
  std::vector<NvrtcAll::ParamType> all;
  for (bool edge : {false, true})
    for (dfgnn_model_t m : {DFGNN_MODEL_GAT, DFGNN_MODEL_GATV2, DFGNN_MODEL_TRANSFORMER, DFGNN_MODEL_AGNN})
      for (dfgnn_dtype_t t : {DFGNN_DTYPE_FLOAT32, DFGNN_DTYPE_FLOAT16, DFGNN_DTYPE_BFLOAT16})
        if (!(edge && m == DFGNN_MODEL_AGNN)) all.emplace_back(m, t, edge);
  return all;
}

INSTANTIATE_TEST_SUITE_P(ModelDtype, NvrtcAll, testing::ValuesIn(instances()), instance_name);

}  // namespace
