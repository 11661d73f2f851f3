// GPU tests: fused ops against the float64 reference through the differential harness, module
// cache behaviour, and determinism. Each test skips with a message where no CUDA device exists.
#include "test_util.hpp"
#include "verify/verify.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <vector>

using namespace dfgnn::test;
using dfgnn::verify::Case;
using dfgnn::verify::Verifier;

namespace {

struct ModelDtype {
  dfgnn_model_t model;
  dfgnn_dtype_t dtype;
};

class GpuOps : public ::testing::TestWithParam<ModelDtype> {};

GraphPtr planted_hubs(dfgnn_context_t ctx, int64_t n, int32_t avg, int32_t hubs, int64_t hub_degree, uint64_t seed) {
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreatePlantedHubs(ctx, n, avg, hubs, hub_degree, seed, nullptr, &g), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  return GraphPtr(g);
}

// Every schedule of make_op(D, H) (dispatch plus one per applicable solver), for each (D, H) and
// both directions on each graph, must pass the differential harness.
void expect_all_schedules_match_reference(dfgnn_context_t ctx,
                                          std::initializer_list<std::pair<dfgnn_graph_t, const char*>> graphs,
                                          std::initializer_list<std::pair<int, int>> dims,
                                          const std::function<dfgnn_op_t(int d, int h)>& make_op) {
  std::vector<Case> cases;
  for (auto [graph, name] : graphs)
    for (auto [d, h] : dims)
      for (auto dir : {DFGNN_FORWARD, DFGNN_BACKWARD}) {
        const dfgnn_op_t op = make_op(d, h);
        for (const auto& s : dfgnn::verify::schedules_for(ctx, graph, op, dir, false))
          cases.push_back({name, graph, op, dir, s});
      }
  Verifier verifier(ctx);
  verifier.precompile(cases, 8);
  for (const Case& c : cases) {
    const auto o = verifier.run(c);
    EXPECT_TRUE(o.passed) << c.graph_name << " " << dfgnn::verify::op_label(c.op)
                          << (c.direction == DFGNN_FORWARD ? " forward" : " backward") << " [" << o.schedule_run
                          << "]: " << o.error << " rel err " << o.max_rel_error << " (" << o.worst_tensor << ")"
                          << (o.unwritten ? " unwritten/non-finite" : "")
                          << (o.deterministic ? "" : " non-deterministic");
  }
}

// Every solver's representative schedule plus dispatch, forward and backward, on Cora and on a
// graph with a 10^5-degree hub.
TEST_P(GpuOps, MatchReferenceOnCoraAndHub) {
  auto ctx = make_context();
  REQUIRE_GPU(ctx.get());
  auto cora = cora_with_loops(ctx.get());
  auto hub = planted_hubs(ctx.get(), 110000, 2, 1, 100000, 7);
  const ModelDtype m = GetParam();
  expect_all_schedules_match_reference(ctx.get(), {{cora.get(), "cora"}, {hub.get(), "hub"}},
                                       {{7, 3}, {64, 4}, {128, 1}},
                                       [m](int d, int h) { return dfgnnOpDefault(m.model, m.dtype, h, d); });
}

// Attention dropout: every schedule regenerates the forward's mask in both backward passes (the
// column pass through the CSC's CSR positions, split rows included), against the reference's mask.
TEST_P(GpuOps, DropoutMatchesReference) {
  if (GetParam().dtype == DFGNN_DTYPE_FLOAT16) GTEST_SKIP() << "covered by float32 and bfloat16";
  auto ctx = make_context();
  REQUIRE_GPU(ctx.get());
  auto cora = cora_with_loops(ctx.get());
  auto hub = planted_hubs(ctx.get(), 20000, 3, 2, 15000, 8);
  const ModelDtype m = GetParam();
  expect_all_schedules_match_reference(ctx.get(), {{cora.get(), "cora"}, {hub.get(), "hub"}}, {{16, 2}, {64, 1}},
                                       [m](int d, int h) {
                                         dfgnn_op_t op = dfgnnOpDefault(m.model, m.dtype, h, d);
                                         op.dropout = 0.35f;
                                         op.dropout_seed = 0x5eed + d;
                                         return op;
                                       });
}

std::vector<ModelDtype> all_model_dtypes() {
  std::vector<ModelDtype> v;
  for (int m = 0; m < 4; ++m)
    for (int t = 0; t < 3; ++t) v.push_back({static_cast<dfgnn_model_t>(m), static_cast<dfgnn_dtype_t>(t)});
  return v;
}

std::string case_name(const ::testing::TestParamInfo<ModelDtype>& info) {
  static const char* models[] = {"gat", "gatv2", "transformer", "agnn"};
  static const char* dtypes[] = {"f32", "f16", "bf16"};
  return std::string(models[info.param.model]) + "_" + dtypes[info.param.dtype];
}

INSTANTIATE_TEST_SUITE_P(AllModels, GpuOps, ::testing::ValuesIn(all_model_dtypes()), case_name);

// The same edges built on the device (dfgnnGraphCreateCoo from device memory): its CSR and CSC live
// there only, so the planners of split rows get their long rows selected on the device.
GraphPtr device_copy(dfgnn_context_t ctx, dfgnn_graph_t host) {
  int64_t n = 0, e = 0;
  EXPECT_EQ(dfgnnGraphGetSize(host, &n, &e), DFGNN_STATUS_SUCCESS);
  const int32_t *ptr = nullptr, *idx = nullptr, *eid = nullptr;
  EXPECT_EQ(dfgnnGraphGetCsr(host, DFGNN_MEMORY_HOST, &ptr, &idx, &eid), DFGNN_STATUS_SUCCESS);
  std::vector<int32_t> coo(2 * e);
  for (int64_t i = 0; i < n; ++i)
    for (int32_t j = ptr[i]; j < ptr[i + 1]; ++j) {
      coo[eid[j]] = idx[j];
      coo[e + eid[j]] = static_cast<int32_t>(i);
    }
  void* device = nullptr;
  EXPECT_EQ(cudaMalloc(&device, std::max<size_t>(1, coo.size() * sizeof(int32_t))), cudaSuccess);
  cudaMemcpy(device, coo.data(), coo.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
  dfgnn_graph_t g = nullptr;
  EXPECT_EQ(dfgnnGraphCreateCoo(ctx, n, e, device, DFGNN_INDEX_INT32, DFGNN_MEMORY_DEVICE, nullptr, &g),
            DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  cudaFree(device);
  return GraphPtr(g);
}

// Every schedule of every solver on device-built graphs with hubs (split rows planned from the
// long rows the device selected; edge_balanced from downloaded row pointers; the others from no
// list), forward and backward, against the reference: a hub missing from the selection would be
// left unwritten.
TEST(GpuOpsDeviceBuilt, EverySolverMatchesReference) {
  auto ctx = make_context();
  REQUIRE_GPU(ctx.get());
  auto hubs = planted_hubs(ctx.get(), 20000, 6, 5, 3000, 11);
  auto one_hub = planted_hubs(ctx.get(), 110000, 2, 1, 100000, 7);
  auto d_hubs = device_copy(ctx.get(), hubs.get());
  auto d_one_hub = device_copy(ctx.get(), one_hub.get());
  for (dfgnn_model_t m : {DFGNN_MODEL_GAT, DFGNN_MODEL_TRANSFORMER})
    expect_all_schedules_match_reference(ctx.get(), {{d_hubs.get(), "hubs (device)"}, {d_one_hub.get(), "hub (device)"}},
                                         {{64, 2}},
                                         [m](int d, int h) { return dfgnnOpDefault(m, DFGNN_DTYPE_FLOAT32, h, d); });
}

TEST(GpuCache, SecondLaunchCompilesNothing) {
  auto ctx = make_context();
  REQUIRE_GPU(ctx.get());
  auto g = random_graph(ctx.get(), 500, 12, 3);
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 2, 32);
  const size_t bytes = 500 * 2 * 32 * 4;
  void *q, *k, *v, *out;
  float* lse;
  for (void** p : {&q, &k, &v, &out}) ASSERT_EQ(cudaMalloc(p, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&lse), 500 * 2 * 4), cudaSuccess);
  for (void* p : {q, k, v}) cudaMemset(p, 0x3c, bytes);  // any finite values
  dfgnn_inputs_t in{};
  in.q = q, in.k = k, in.v = v;
  size_t ws = 0;
  DFGNN_ASSERT_OK(dfgnnGetWorkspaceSize(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, &ws));
  EXPECT_EQ(ws, 0u);  // the sub-warp default needs no scratch
  dfgnn_launch_t launch{};
  DFGNN_ASSERT_OK(dfgnnForward(ctx.get(), g.get(), &op, &in, out, lse, &launch));
  uint64_t compiles1 = 0, loads1 = 0, compiles2 = 0, loads2 = 0;
  DFGNN_ASSERT_OK(dfgnnGetCacheCounters(ctx.get(), &compiles1, nullptr, &loads1));
  DFGNN_ASSERT_OK(dfgnnForward(ctx.get(), g.get(), &op, &in, out, lse, &launch));
  DFGNN_ASSERT_OK(dfgnnGetCacheCounters(ctx.get(), &compiles2, nullptr, &loads2));
  EXPECT_EQ(compiles1, 1u);
  EXPECT_EQ(loads1, 1u);
  // The second call reuses the launch recipe: no compile, no module load.
  EXPECT_EQ(compiles2, compiles1);
  EXPECT_EQ(loads2, loads1);
  // Forcing the dispatched schedule by text is another recipe, answered by the module cache.
  char text[256];
  size_t text_length = 0;
  DFGNN_ASSERT_OK(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, text, sizeof(text), &text_length));
  uint64_t hits3 = 0, hits4 = 0, compiles4 = 0;
  DFGNN_ASSERT_OK(dfgnnGetCacheCounters(ctx.get(), nullptr, &hits3, nullptr));
  launch.schedule = text;
  DFGNN_ASSERT_OK(dfgnnForward(ctx.get(), g.get(), &op, &in, out, lse, &launch));
  DFGNN_ASSERT_OK(dfgnnGetCacheCounters(ctx.get(), &compiles4, &hits4, nullptr));
  EXPECT_EQ(compiles4, compiles2);
  EXPECT_GT(hits4, hits3);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (void* p : {q, k, v, out, static_cast<void*>(lse)}) cudaFree(p);
}

TEST(GpuErrors, WorkspaceTooSmallAndBadSchedule) {
  auto ctx = make_context();
  REQUIRE_GPU(ctx.get());
  auto g = graph_from_edges(ctx.get(), 3, {0, 1, 2, 0}, {1, 2, 0, 2});
  dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 8);
  void *h, *a, *b, *out;
  for (void** p : {&h, &a, &b, &out}) ASSERT_EQ(cudaMalloc(p, 256), cudaSuccess);
  dfgnn_inputs_t in{};
  in.h = h, in.att_src = a, in.att_dst = b;
  dfgnn_launch_t launch{};
  launch.schedule = "hub_split:lanes=8,groups=32,vec=4,threshold=1,chunk=1";
  EXPECT_EQ(dfgnnForward(ctx.get(), g.get(), &op, &in, out, nullptr, &launch), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("workspace"), std::string::npos) << dfgnnGetLastErrorMessage();
  launch.schedule = "subwarp:lanes=6";
  EXPECT_EQ(dfgnnForward(ctx.get(), g.get(), &op, &in, out, nullptr, &launch), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("lanes = 6"), std::string::npos);
  for (void* p : {h, a, b, out}) cudaFree(p);
}

}  // namespace
