// dfgnn.torch's prepared-call core (python_bindings/dfgnn/torch/_prepared_call.hpp), shared by the
// extension's Launch and the native op: the workspace retry, and which input fields a call's
// pointers fill. The launches themselves need a GPU (tests/python/test_call_path.py covers them there).
#include "_prepared_call.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

using dfgnn_torch::Failure;
using dfgnn_torch::kUnknownWorkspace;
using dfgnn_torch::run_with_workspace;

// A C API failure with the library's own message, as a launch or a size query would leave it.
dfgnn_status_t fail_with_message(const char* name) {
  dfgnn_model_t model;
  return dfgnnModelFromName(name, &model);  // INVALID_ARGUMENT, the message names the unknown model
}

// A fake call that needs `needs` bytes of workspace: INVALID_ARGUMENT with a message below that.
struct NeedyCall {
  size_t needs;
  std::vector<size_t> seen;  // the workspace sizes it was called with
  dfgnn_status_t operator()(void* workspace, size_t bytes) {
    seen.push_back(bytes);
    if (bytes < needs) return fail_with_message("call-too-small");
    EXPECT_NE(workspace, nullptr);
    return DFGNN_STATUS_SUCCESS;
  }
};

struct Allocator {
  std::vector<size_t> asked;
  std::vector<char> memory;
  void* operator()(size_t bytes) {
    asked.push_back(bytes);
    memory.assign(bytes, 0);
    return memory.data();
  }
};

TEST(PreparedCall, UnknownSizeIsAskedOnceThenKept) {
  std::atomic<size_t> known{kUnknownWorkspace};
  int queries = 0;
  auto size = [&](size_t* bytes) {
    ++queries;
    *bytes = 256;
    return DFGNN_STATUS_SUCCESS;
  };
  Allocator alloc;
  NeedyCall call{256, {}};
  EXPECT_FALSE(run_with_workspace(known, size, alloc, "dfgnnForward", call));
  EXPECT_FALSE(run_with_workspace(known, size, alloc, "dfgnnForward", call));
  EXPECT_EQ(queries, 1);
  EXPECT_EQ(known.load(), 256u);
  EXPECT_EQ(call.seen, (std::vector<size_t>{256, 256}));
  EXPECT_EQ(alloc.asked, (std::vector<size_t>{256, 256}));
}

TEST(PreparedCall, ZeroBytesCallWithoutAllocating) {
  std::atomic<size_t> known{0};
  Allocator alloc;
  int calls = 0;
  auto call = [&](void* workspace, size_t bytes) {
    ++calls;
    EXPECT_EQ(workspace, nullptr);
    EXPECT_EQ(bytes, 0u);
    return DFGNN_STATUS_SUCCESS;
  };
  EXPECT_FALSE(run_with_workspace(known, [](size_t*) { return DFGNN_STATUS_INTERNAL_ERROR; }, alloc, "f", call));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(alloc.asked.empty());
}

// Dispatch chose a schedule with a larger workspace since the size was asked (a tuner wrote a winner):
// the call is retried once with the new size, which is kept for later calls.
TEST(PreparedCall, GrownWorkspaceIsRetriedOnceAndKept) {
  std::atomic<size_t> known{64};
  auto size = [](size_t* bytes) {
    *bytes = 1024;
    return DFGNN_STATUS_SUCCESS;
  };
  Allocator alloc;
  NeedyCall call{1024, {}};
  EXPECT_FALSE(run_with_workspace(known, size, alloc, "dfgnnForward", call));
  EXPECT_EQ(call.seen, (std::vector<size_t>{64, 1024}));
  EXPECT_EQ(alloc.asked, (std::vector<size_t>{64, 1024}));
  EXPECT_EQ(known.load(), 1024u);
}

// A call that fails for another reason is not retried: the size did not grow, the status is not
// INVALID_ARGUMENT, or the size query fails. Each returns the call's own status, name and message.
TEST(PreparedCall, OtherFailuresAreTheCallsOwnAndNotRetried) {
  struct Case {
    dfgnn_status_t call_status;
    size_t query_bytes;
    dfgnn_status_t query_status;
  };
  for (const Case c : {Case{DFGNN_STATUS_INVALID_ARGUMENT, 64, DFGNN_STATUS_SUCCESS},
                       Case{DFGNN_STATUS_INVALID_ARGUMENT, 32, DFGNN_STATUS_SUCCESS},
                       Case{DFGNN_STATUS_INVALID_ARGUMENT, 4096, DFGNN_STATUS_NO_DEVICE},
                       Case{DFGNN_STATUS_CUDA_ERROR, 4096, DFGNN_STATUS_SUCCESS}}) {
    std::atomic<size_t> known{64};
    int calls = 0;
    auto call = [&](void*, size_t) {
      ++calls;
      fail_with_message("the-calls-own");
      return c.call_status;
    };
    auto size = [&](size_t* bytes) {
      fail_with_message("the-querys");  // a message the call's failure must not take
      *bytes = c.query_bytes;
      return c.query_status;
    };
    Allocator alloc;
    const Failure f = run_with_workspace(known, size, alloc, "dfgnnBackward", call);
    ASSERT_TRUE(f);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(f.status, c.call_status);
    EXPECT_STREQ(f.function, "dfgnnBackward");
    EXPECT_NE(f.message.find("the-calls-own"), std::string::npos) << f.message;
    EXPECT_EQ(known.load(), 64u);
  }
}

// Still too small after the one retry (the schedule changed twice): the second failure is returned.
TEST(PreparedCall, OneRetryOnly) {
  std::atomic<size_t> known{64};
  size_t next = 128;
  auto size = [&](size_t* bytes) {
    *bytes = next;
    next *= 2;
    return DFGNN_STATUS_SUCCESS;
  };
  Allocator alloc;
  NeedyCall call{1 << 20, {}};
  const Failure f = run_with_workspace(known, size, alloc, "dfgnnForward", call);
  EXPECT_EQ(f.status, DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(f.message.find("call-too-small"), std::string::npos) << f.message;
  EXPECT_EQ(call.seen, (std::vector<size_t>{64, 128}));
}

TEST(PreparedCall, FailedFirstQueryIsTheSizeQuerys) {
  std::atomic<size_t> known{kUnknownWorkspace};
  Allocator alloc;
  int calls = 0;
  const Failure f = run_with_workspace(
      known, [](size_t*) { return fail_with_message("no-size"); }, alloc, "dfgnnForward",
      [&](void*, size_t) {
        ++calls;
        return DFGNN_STATUS_SUCCESS;
      });
  EXPECT_EQ(f.status, DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(f.function, "dfgnnGetWorkspaceSize");
  EXPECT_NE(f.message.find("no-size"), std::string::npos) << f.message;
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(known.load(), kUnknownWorkspace);
}

// The call's pointers fill the fields of the model's inputs (dfgnnModelInputs), in field order, then edge.
TEST(PreparedCall, PointersFillTheModelsInputFieldsInOrder) {
  dfgnn_context_t ctx = nullptr;
  DFGNN_ASSERT_OK(dfgnnCreate(&ctx));
  std::vector<int64_t> edge_index{0, 1, 2, 1, 2, 0};
  dfgnn_graph_t g = nullptr;
  DFGNN_ASSERT_OK(dfgnnGraphCreateCoo(ctx, 3, 3, edge_index.data(), DFGNN_INDEX_INT64, DFGNN_MEMORY_HOST, nullptr, &g));
  char buffers[5];
  const void* pointers[5] = {&buffers[0], &buffers[1], &buffers[2], &buffers[3], &buffers[4]};
  for (dfgnn_model_t model : {DFGNN_MODEL_GAT, DFGNN_MODEL_GATV2, DFGNN_MODEL_TRANSFORMER, DFGNN_MODEL_AGNN})
    for (int edge : {0, 1}) {
      uint32_t mask = 0;
      if (dfgnnModelInputs(model, edge, &mask, nullptr) != DFGNN_STATUS_SUCCESS) continue;  // AGNN: no edge input
      dfgnn_op_t op = dfgnnOpDefault(model, DFGNN_DTYPE_FLOAT32, 2, 8);
      op.edge_features = edge;
      dfgnn_torch::PreparedCall call;
      ASSERT_FALSE(call.init(ctx, g, op, std::nullopt)) << dfgnnGetLastErrorMessage();
      EXPECT_EQ(call.nodes(), 3);
      EXPECT_EQ(call.edges(), 3);
      EXPECT_FALSE(call.workspace_known(DFGNN_FORWARD));
      const size_t count = call.slots().size();
      ASSERT_LE(count, 4u);
      const dfgnn_inputs_t in = call.fields<dfgnn_inputs_t>(pointers, count);
      const void* const fields[DFGNN_NUM_INPUTS] = {in.h, in.h_dst, in.q, in.k, in.v,
                                                   in.att_src, in.att_dst, in.beta, in.edge};
      size_t next = 0;
      for (int slot = 0; slot < DFGNN_NUM_INPUTS; ++slot) {
        const bool read = (mask >> slot) & 1u;
        EXPECT_EQ(fields[slot], read ? pointers[next] : nullptr) << "model " << model << " edge " << edge << " slot " << slot;
        next += read;
      }
      EXPECT_EQ(next, count);
      EXPECT_EQ(call.edge_logits(), model == DFGNN_MODEL_GAT);
    }
  DFGNN_ASSERT_OK(dfgnnGraphDestroy(g));
  DFGNN_ASSERT_OK(dfgnnDestroy(ctx));
}

// The input layouts both call paths accept (the binding's checks and the native op's): row-major
// [rows, H, W] or [rows, H*W], attention vectors [H, D], [1, H, D] or [H*D], beta any one-element shape.
TEST(PreparedCall, ShapesFitTheirSlotsLayouts) {
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 4, 8);
  const int64_t n = 10, e = 30;
  struct Case {
    int slot;
    bool logits;
    std::vector<int64_t> dims;
    bool fits;
  };
  const int k = 3, att = 5, beta = dfgnn_torch::kBetaSlot, edge = dfgnn_torch::kEdgeSlot;
  for (const Case& c : std::vector<Case>{
           {k, false, {n, 4, 8}, true},       {k, false, {n, 32}, true},         {k, false, {n, 8, 4}, false},
           {k, false, {n + 1, 4, 8}, false},  {k, false, {n, 4, 8, 1}, false},   {k, false, {n * 32}, false},
           {att, false, {4, 8}, true},        {att, false, {1, 4, 8}, true},     {att, false, {32}, true},
           {att, false, {2, 4, 8}, false},    {att, false, {8, 4}, false},       {beta, false, {}, true},
           {beta, false, {1}, true},          {beta, false, {1, 1, 1, 1}, true}, {beta, false, {2}, false},
           {beta, false, {0}, false},         {edge, true, {e, 4}, true},        {edge, true, {e, 4, 1}, true},
           {edge, true, {e, 4, 8}, false},    {edge, false, {e, 4, 8}, true},    {edge, false, {e, 32}, true},
           {edge, false, {e, 4}, false},      {edge, false, {n, 4, 8}, false}}) {
    std::string shape;
    for (int64_t d : c.dims) shape += std::to_string(d) + " ";
    EXPECT_EQ(dfgnn_torch::shape_fits(c.slot, op, c.logits, n, e, c.dims.data(), c.dims.size()), c.fits)
        << "slot " << c.slot << " logits " << c.logits << " shape [ " << shape << "]";
  }
  EXPECT_TRUE(dfgnn_torch::holds_features(4, true));
  EXPECT_FALSE(dfgnn_torch::holds_features(5, false));
  EXPECT_FALSE(dfgnn_torch::holds_features(edge, true));
  EXPECT_TRUE(dfgnn_torch::holds_features(edge, false));
}

}  // namespace
