// NVRTC specialisation without a GPU: dfgnnCompile of the default schedules for a real graph,
// module cache counters, compile errors carrying the NVRTC log, the cubin and lowered names, and
// the embedded kernel source.
#include "test_util.hpp"
#include "log_capture.hpp"

#include "error.hpp"
#include "nvrtc.hpp"
#include "op.hpp"
#include "ops.hpp"
#include "schedule.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace dfgnn::test;

namespace {

struct Counters {
  uint64_t compiles = 0, hits = 0, loads = 0;
};

Counters counters(dfgnn_context_t ctx) {
  Counters c;
  EXPECT_EQ(dfgnnGetCacheCounters(ctx, &c.compiles, &c.hits, &c.loads), DFGNN_STATUS_SUCCESS);
  return c;
}

GraphPtr cora(dfgnn_context_t ctx) {
  dfgnn_graph_t g = nullptr;
  const std::string path = (source_dir() / "data" / "cora").string();
  EXPECT_EQ(dfgnnGraphCreateFromFile(ctx, path.c_str(), nullptr, &g), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  return GraphPtr(g);
}

}  // namespace

TEST(Nvrtc, CompileDefaultSchedulesForCoraAndCountCacheHits) {
  auto ctx = make_context();
  auto g = cora(ctx.get());
  ASSERT_NE(g, nullptr);
  int64_t n = 0, e = 0;
  DFGNN_ASSERT_OK(dfgnnGraphGetSize(g.get(), &n, &e));
  EXPECT_EQ(n, 2708);
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 4, 16);
  EXPECT_EQ(counters(ctx.get()).compiles, 0u);

  // Forward: one module (the default on cora is the fitted rule's edge-balanced schedule, on groups
  // spanning the 4 heads: one module of its split, merge and balanced kernels).
  DFGNN_ASSERT_OK(dfgnnCompile(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, 90));
  Counters c = counters(ctx.get());
  EXPECT_EQ(c.compiles, 1u);
  EXPECT_EQ(c.hits, 0u);
  EXPECT_EQ(c.loads, 0u);
  DFGNN_ASSERT_OK(dfgnnCompile(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, 90));
  c = counters(ctx.get());
  EXPECT_EQ(c.compiles, 1u);
  EXPECT_EQ(c.hits, 1u);

  // The same schedule forced by text, and without a graph: the same module (hits).
  char schedule[256];
  size_t length = 0;
  DFGNN_ASSERT_OK(dfgnnGetSchedule(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, schedule, sizeof schedule, &length));
  EXPECT_EQ(std::string(schedule).rfind("edge_balanced:lanes=16,heads=4,", 0), 0u) << schedule;
  DFGNN_ASSERT_OK(dfgnnCompile(ctx.get(), g.get(), &op, DFGNN_FORWARD, schedule, 90));
  DFGNN_ASSERT_OK(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, schedule, 90));
  c = counters(ctx.get());
  EXPECT_EQ(c.compiles, 1u);
  EXPECT_EQ(c.hits, 3u);

  // Backward: helpers, row pass and column pass modules.
  DFGNN_ASSERT_OK(dfgnnCompile(ctx.get(), g.get(), &op, DFGNN_BACKWARD, nullptr, 90));
  c = counters(ctx.get());
  EXPECT_EQ(c.compiles, 4u);
  EXPECT_EQ(c.hits, 3u);
  DFGNN_ASSERT_OK(dfgnnCompile(ctx.get(), g.get(), &op, DFGNN_BACKWARD, nullptr, 90));
  c = counters(ctx.get());
  EXPECT_EQ(c.compiles, 4u);
  EXPECT_EQ(c.hits, 6u);
  EXPECT_EQ(c.loads, 0u);

  // Another architecture is another module.
  DFGNN_ASSERT_OK(dfgnnCompile(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, 80));
  EXPECT_EQ(counters(ctx.get()).compiles, 5u);

  // A second context has its own cache.
  auto other = make_context();
  EXPECT_EQ(counters(other.get()).compiles, 0u);
}

TEST(Nvrtc, CompileArgumentErrors) {
  auto ctx = make_context();
  auto g = random_graph(ctx.get(), 16, 3, 1);
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 8);
  EXPECT_EQ(dfgnnCompile(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, 30), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("arch 30"), std::string::npos);
  EXPECT_EQ(dfgnnCompile(ctx.get(), g.get(), &op, DFGNN_FORWARD, nullptr, 1000), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, nullptr, 90), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dfgnnGetLastErrorMessage()).find("needs a graph or a schedule"), std::string::npos);
  EXPECT_EQ(dfgnnCompile(ctx.get(), g.get(), nullptr, DFGNN_FORWARD, nullptr, 90), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnCompile(nullptr, g.get(), &op, DFGNN_FORWARD, nullptr, 90), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, "nosuch", 90), DFGNN_STATUS_PARSE_ERROR);
  dfgnn_op_t f64 = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT64, 1, 8);
  EXPECT_EQ(dfgnnCompile(ctx.get(), g.get(), &f64, DFGNN_FORWARD, nullptr, 90), DFGNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(counters(ctx.get()).compiles, 0u);
}

// Without a graph, dfgnnCompile still validates the schedule (no validity check needs graph data):
// a 5-lane schedule is rejected before anything is compiled.
TEST(Nvrtc, CompileWithoutGraphValidatesSchedule) {
  auto ctx = make_context();
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 32);
  EXPECT_EQ(dfgnnCompile(ctx.get(), nullptr, &op, DFGNN_FORWARD, "subwarp:lanes=5,groups=8,vec=1", 90),
            DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(counters(ctx.get()).compiles, 0u);
}

TEST(Nvrtc, CompileErrorCarriesTheLog) {
  const std::string name = "&dfgnn::does_not_exist<int>";
  try {
    dfgnn::compile({name}, 90);
    FAIL() << "compiled a kernel that does not exist";
  } catch (const dfgnn::Error& e) {
    EXPECT_EQ(e.status(), DFGNN_STATUS_COMPILE_ERROR);
    const std::string message = e.what();
    EXPECT_NE(message.find("does_not_exist"), std::string::npos) << message;
    EXPECT_NE(message.find("NVRTC failed"), std::string::npos) << message;
    EXPECT_NE(message.find("-arch=sm_90"), std::string::npos) << message;
    // Besides the list of expressions, the compiler log is there: it names the error again.
    const size_t listed = message.find(name);
    ASSERT_NE(listed, std::string::npos) << message;
    EXPECT_NE(message.find("does_not_exist", listed + name.size()), std::string::npos) << message;
    EXPECT_NE(message.find("error", listed + name.size()), std::string::npos) << message;
  }
  // The module cache passes the error through and caches nothing.
  dfgnn::ModuleCache cache;
  EXPECT_THROW(cache.cubin({name}, 90), dfgnn::Error);
  EXPECT_EQ(cache.counters().compiles, 0u);
  EXPECT_EQ(cache.counters().hits, 0u);
}

TEST(Nvrtc, EdgeBalancedKernelNames) {
  // Split rows on the hub-split kernels (256-thread blocks, whatever the schedule's groups), then
  // the balanced kernel with the schedule's groups (one module, in this order: a stored cubin's
  // key is the name list).
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, 4, 64);
  const dfgnn::Schedule s = dfgnn::parse_schedule("edge_balanced:lanes=16,groups=32,vec=4,chunk=512");
  const std::string pass = "dfgnn::BackwardCol<dfgnn::Geo<float,64,4,16,4,false>,dfgnn::Transformer>";
  EXPECT_EQ(dfgnn::pass_kernel_names(op, dfgnn::PassKind::BackwardCol, s),
            (std::vector<std::string>{"&dfgnn::rows_kernel<" + pass + ",16,1>", "&dfgnn::merge_kernel<" + pass + ",16>",
                                      "&dfgnn::balanced_kernel<" + pass + ",32>"}));
}

// Dropout is compiled in only where a launch runs it (Geo's last argument): the op without dropout
// keeps its names, one with a nonzero threshold names its own kernels, and a dropout rate too small
// for the 32-bit threshold (no edge is ever dropped, set_dropout's threshold 0) keeps the plain ones.
TEST(Nvrtc, DropoutKernelsAreTheirOwnSpecialisation) {
  dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 8);
  const dfgnn::Schedule s = dfgnn::parse_schedule("edge_balanced:lanes=16,heads=8,groups=16,vec=4,chunk=256");
  const auto balanced = [&](const dfgnn_op_t& o) { return dfgnn::pass_kernel_names(o, dfgnn::PassKind::Forward, s).back(); };
  EXPECT_EQ(balanced(op), "&dfgnn::balanced_kernel<dfgnn::Forward<dfgnn::Geo<float,8,8,2,4,false,8>,dfgnn::Gat>,16>");
  op.dropout = 0.6f;
  EXPECT_EQ(balanced(op), "&dfgnn::balanced_kernel<dfgnn::Forward<dfgnn::Geo<float,8,8,2,4,false,8,true>,dfgnn::Gat>,16>");
  op.dropout = 1e-11f;  // rounds to threshold 0
  EXPECT_EQ(dfgnn::dropout_threshold(op), 0u);
  EXPECT_EQ(balanced(op), "&dfgnn::balanced_kernel<dfgnn::Forward<dfgnn::Geo<float,8,8,2,4,false,8>,dfgnn::Gat>,16>");
  dfgnn_op_t one_head = dfgnnOpDefault(DFGNN_MODEL_GATV2, DFGNN_DTYPE_BFLOAT16, 1, 64);
  one_head.dropout = 0.1f;
  const std::vector<std::string> names = dfgnn::pass_kernel_names(
      one_head, dfgnn::PassKind::BackwardRow, dfgnn::parse_schedule("subwarp:lanes=8,groups=32,vec=8"));
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0], "&dfgnn::rows_kernel<dfgnn::BackwardRow<dfgnn::Geo<dfgnn::bf16,64,1,8,8,false,1,true>,"
                      "dfgnn::Gatv2>,32,1>");
  const dfgnn::Cubin cubin = dfgnn::compile(names, 90);
  EXPECT_EQ(cubin.lowered.size(), 1u);
}

TEST(Nvrtc, CubinAndLoweredNames) {
  const dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT16, 2, 32);
  dfgnn::Schedule s = dfgnn::parse_schedule("hub_split:lanes=8,groups=32,vec=8,threshold=256,chunk=128");
  const std::vector<std::string> names = dfgnn::pass_kernel_names(op, dfgnn::PassKind::Forward, s);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0],
            "&dfgnn::rows_kernel<dfgnn::Forward<dfgnn::Geo<dfgnn::f16,32,2,8,8,false>,dfgnn::Transformer>,32,1>");
  EXPECT_EQ(names[1], "&dfgnn::merge_kernel<dfgnn::Forward<dfgnn::Geo<dfgnn::f16,32,2,8,8,false>,dfgnn::Transformer>,32>");
  const dfgnn::Cubin cubin = dfgnn::compile(names, 90);
  ASSERT_GT(cubin.image.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.image.data(), "\x7f" "ELF", 4), 0) << "a cubin is an ELF image";
  EXPECT_EQ(cubin.names, names);
  ASSERT_EQ(cubin.lowered.size(), names.size());
  for (const std::string& lowered : cubin.lowered) {
    EXPECT_EQ(lowered.rfind("_Z", 0), 0u) << lowered;
    // The mangled name is in the image's symbol table.
    const std::string image(cubin.image.begin(), cubin.image.end());
    EXPECT_NE(image.find(lowered), std::string::npos) << lowered;
  }
  EXPECT_NE(cubin.lowered[0], cubin.lowered[1]);
  EXPECT_NE(cubin.lowered[0].find("rows_kernel"), std::string::npos);
  EXPECT_NE(cubin.lowered[1].find("merge_kernel"), std::string::npos);
  // Through the cache: compiled once, then hits share the same Cubin.
  dfgnn::ModuleCache cache;
  const auto a = cache.cubin(names, 90);
  const auto b = cache.cubin(names, 90);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(cache.counters().compiles, 1u);
  EXPECT_EQ(cache.counters().hits, 1u);
  EXPECT_EQ(a->lowered, cubin.lowered);
}


// A store that holds one module, read as if from a site database.
class OneModuleStore final : public dfgnn::ModuleStore {
 public:
  explicit OneModuleStore(dfgnn::Cubin cubin) : cubin_(std::move(cubin)) {}
  std::optional<dfgnn::Cubin> load(const std::string&, int) override {
    if (!held_) return std::nullopt;
    dfgnn::Cubin c = cubin_;
    c.origin = "site database /shared/site.db";
    return c;
  }
  void save(const std::string&, int, const dfgnn::Cubin&) override { ++saved; }
  bool held_ = true;
  int saved = 0;

 private:
  dfgnn::Cubin cubin_;
};

// A backward's modules compile at once; each compile logs one INFO line (what, why, how long);
// where a module came from is remembered (explain's "module"); one failing module fails the call
// after the others are cached.
TEST(Nvrtc, ModulesCompileTogetherLogOnceAndRememberWhereTheyCameFrom) {
  const std::vector<std::string> a{"&dfgnn::reduce_nodes_stage2<false>"}, b{"&dfgnn::reduce_nodes_stage2<true>"},
      c{"&dfgnn::fill_random<float>"};
  dfgnn::ModuleCache cache;
  EXPECT_EQ(cache.origin(a, 90), "");
  {
    LogCapture log;
    cache.cubins({a, b, c}, 90);
    const std::string text = log.text();
    for (const auto& names : {a, b, c}) {
      EXPECT_NE(text.find("compiled " + names[0] + " for sm_90 in "), std::string::npos) << text;
      EXPECT_EQ(cache.origin(names, 90), "compiled");
    }
    EXPECT_NE(text.find("ms: no module for it in memory (no module store)"), std::string::npos) << text;
  }
  EXPECT_EQ(cache.counters().compiles, 3u);
  cache.cubins({a, b}, 90);  // all in memory now: no compile, no line
  EXPECT_EQ(cache.counters().compiles, 3u);
  EXPECT_EQ(cache.counters().hits, 2u);

  // From a store: no compile, and the store's origin.
  dfgnn::ModuleCache stored;
  OneModuleStore store(dfgnn::compile(a, 90));
  stored.set_store(&store);
  {
    LogCapture log;
    EXPECT_EQ(stored.cubin(a, 90)->names, a);
    EXPECT_EQ(log.text().find("compiled "), std::string::npos) << log.text();
  }
  EXPECT_EQ(stored.origin(a, 90), "site database /shared/site.db");
  EXPECT_EQ(stored.counters().stored, 1u);
  EXPECT_EQ(stored.counters().compiles, 0u);
  store.held_ = false;
  {
    LogCapture log;
    stored.cubin(c, 90);
    EXPECT_NE(log.text().find("no module for it in memory or in the tuning database's layers"), std::string::npos)
        << log.text();
  }
  EXPECT_EQ(store.saved, 1);

  // A module that does not compile: its error, after the good one was compiled and cached.
  dfgnn::ModuleCache failing;
  try {
    failing.cubins({a, {"&dfgnn::does_not_exist<int>"}}, 90);
    FAIL() << "a module that does not compile was accepted";
  } catch (const dfgnn::Error& e) {
    EXPECT_EQ(e.status(), DFGNN_STATUS_COMPILE_ERROR);
    EXPECT_NE(std::string(e.what()).find("does_not_exist"), std::string::npos) << e.what();
  }
  EXPECT_EQ(failing.counters().compiles, 1u);
  EXPECT_EQ(failing.origin(a, 90), "compiled");
}

TEST(Nvrtc, EmbeddedSourceAndHash) {
  const std::string& hash = dfgnn::kernel_source_hash();
  ASSERT_EQ(hash.size(), 16u);
  EXPECT_TRUE(std::all_of(hash.begin(), hash.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(static_cast<unsigned char>(c)); }))
      << hash;
  EXPECT_EQ(dfgnn::kernel_source_hash(), hash);
  EXPECT_EQ(&dfgnn::kernel_source_hash(), &hash);
  const std::string& source = dfgnn::kernel_source();
  EXPECT_NE(source.find("rows_kernel"), std::string::npos);
  EXPECT_NE(source.find("merge_kernel"), std::string::npos);
  EXPECT_NE(source.find("prep_kernel"), std::string::npos);
  // NVRTC-clean: the templates include no headers.
  EXPECT_EQ(source.find("#include"), std::string::npos);
  EXPECT_GE(dfgnn::nvrtc_version(), 12000);
}
