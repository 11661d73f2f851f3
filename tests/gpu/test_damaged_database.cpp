// GPU test of calls over damaged tuning-database pages (issue 26, defect 1): a site or shipped
// layer whose pages a dispatch lookup reads is damaged. The call that reaches them succeeds, its
// result matches the float64 reference, and the layer is logged once and skipped. Skips with a
// message where no CUDA device exists.
#include "damaged_pages.hpp"
#include "test_util.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

using namespace dfgnn::test;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("dfgnn-gpu-damaged-db-" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// DFGNN_SHIPPED_DB for the test's duration: a context reads it when it first opens its layers.
class ShippedDbEnv {
 public:
  ShippedDbEnv() {
    if (const char* v = std::getenv("DFGNN_SHIPPED_DB")) old_ = v;
  }
  ~ShippedDbEnv() {
    if (old_) setenv("DFGNN_SHIPPED_DB", old_->c_str(), 1);
    else unsetenv("DFGNN_SHIPPED_DB");
  }
  void set(const std::string& value) { setenv("DFGNN_SHIPPED_DB", value.c_str(), 1); }

 private:
  std::optional<std::string> old_;
};

struct DeviceFloats {
  float* ptr = nullptr;
  size_t count = 0;
  explicit DeviceFloats(size_t n) : count(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(1, n) * sizeof(float)), cudaSuccess);
  }
  explicit DeviceFloats(const std::vector<float>& host) : DeviceFloats(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() { cudaFree(ptr); }
  std::vector<float> download() const {
    std::vector<float> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, count * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  void poison() const { EXPECT_EQ(cudaMemset(ptr, 0xff, count * sizeof(float)), cudaSuccess); }  // NaN
};

// ||got - want|| / ||want||, the differential harness's measure (tools/verify); a non-finite value
// (an element left unwritten) counts as infinitely wrong.
double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-300);
}
constexpr double kFloat32Tolerance = 1e-4;  // tools/verify's for float32

std::vector<float> random_floats(size_t count, uint64_t seed) {
  std::vector<float> v;
  for (double x : random_vector(count, seed)) v.push_back(static_cast<float>(x));
  return v;
}
std::vector<double> widened(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::string explain(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op, dfgnn_direction_t direction) {
  std::string text(1 << 16, '\0');
  size_t length = 0;
  EXPECT_EQ(dfgnnExplain(ctx, g, &op, direction, text.data(), text.size(), &length), DFGNN_STATUS_SUCCESS)
      << dfgnnGetLastErrorMessage();
  text.resize(std::min(length, text.size()));
  return text;
}

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

// A context with no user database that reads `file` as its only site layer, or as its only
// shipped layer.
ContextPtr context_over(const fs::path& file, bool as_site, ShippedDbEnv& env) {
  env.set(as_site ? "off" : file.string());
  dfgnn_context_t ctx = nullptr;
  EXPECT_EQ(dfgnnCreate(&ctx), DFGNN_STATUS_SUCCESS);
  EXPECT_EQ(dfgnnSetDatabase(ctx, "", as_site ? file.c_str() : ""), DFGNN_STATUS_SUCCESS);
  return ContextPtr(ctx);
}

// GAT, float32, H = 1, D = 128 (one of sm90.db's op configurations): inputs, d(loss)/d(out) and the
// float64 reference of both directions on the float32-rounded inputs.
struct Problem {
  dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 128);
  size_t nh = 0, nhd = 0, hd = 0;
  std::vector<float> h, att_src, att_dst, grad_out;
  std::vector<double> out, lse, grad_h, grad_att_src, grad_att_dst;

  explicit Problem(dfgnn_graph_t g) {
    int64_t n = 0;
    EXPECT_EQ(dfgnnGraphGetSize(g, &n, nullptr), DFGNN_STATUS_SUCCESS);
    nh = static_cast<size_t>(n) * op.heads, nhd = nh * op.dim, hd = static_cast<size_t>(op.heads) * op.dim;
    h = random_floats(nhd, 1), att_src = random_floats(hd, 2), att_dst = random_floats(hd, 3);
    grad_out = random_floats(nhd, 4);
    dfgnn_op_t op64 = op;
    op64.dtype = DFGNN_DTYPE_FLOAT64;
    const std::vector<double> h64 = widened(h), src64 = widened(att_src), dst64 = widened(att_dst);
    dfgnn_inputs_t in{};
    in.h = h64.data(), in.att_src = src64.data(), in.att_dst = dst64.data();
    out.resize(nhd), lse.resize(nh), grad_h.resize(nhd), grad_att_src.resize(hd), grad_att_dst.resize(hd);
    EXPECT_EQ(dfgnnReferenceForward(g, &op64, &in, out.data(), lse.data()), DFGNN_STATUS_SUCCESS)
        << dfgnnGetLastErrorMessage();
    const std::vector<double> grad_out64 = widened(grad_out);
    dfgnn_grads_t grads{};
    grads.h = grad_h.data(), grads.att_src = grad_att_src.data(), grads.att_dst = grad_att_dst.data();
    EXPECT_EQ(dfgnnReferenceBackward(g, &op64, &in, grad_out64.data(), &grads), DFGNN_STATUS_SUCCESS)
        << dfgnnGetLastErrorMessage();
  }
};

// The problem's arrays on the device, and the forward's out and lse that a backward-first run is given.
struct DeviceProblem {
  DeviceFloats h, att_src, att_dst, grad_out, out, lse;
  dfgnn_inputs_t in{};
  explicit DeviceProblem(const Problem& p)
      : h(p.h), att_src(p.att_src), att_dst(p.att_dst), grad_out(p.grad_out), out(p.nhd), lse(p.nh) {
    in.h = h.ptr, in.att_src = att_src.ptr, in.att_dst = att_dst.ptr;
  }
};

// Runs the forward and the backward of p.op through dispatch on ctx, in the given order (the
// first call is the one whose lookup reaches the damaged pages), with workspaces of the default
// rule's size; expects each call to succeed and to match the reference. A backward run first is
// given the forward's out and lse in d (computed beforehand without a database).
void expect_calls_match_reference(dfgnn_context_t ctx, dfgnn_graph_t g, const Problem& p, DeviceProblem& d,
                                  size_t forward_ws, size_t backward_ws, bool backward_first) {
  DeviceFloats out(p.nhd), lse(p.nh), grad_h(p.nhd), grad_src(p.hd), grad_dst(p.hd);
  DeviceFloats ws_f(std::max<size_t>(1, forward_ws / sizeof(float) + 1)), ws_b(std::max<size_t>(1, backward_ws / sizeof(float) + 1));
  auto forward = [&] {
    out.poison();
    lse.poison();
    dfgnn_launch_t launch{};
    launch.workspace = ws_f.ptr, launch.workspace_bytes = forward_ws;
    EXPECT_EQ(dfgnnForward(ctx, g, &p.op, &d.in, out.ptr, lse.ptr, &launch), DFGNN_STATUS_SUCCESS)
        << dfgnnGetLastErrorMessage();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LE(rel_error(out.download(), p.out), kFloat32Tolerance) << "forward out";
    EXPECT_LE(rel_error(lse.download(), p.lse), kFloat32Tolerance) << "forward lse";
  };
  auto backward = [&](const DeviceFloats& fwd_out, const DeviceFloats& fwd_lse) {
    for (const DeviceFloats* a : {&grad_h, &grad_src, &grad_dst}) a->poison();
    dfgnn_grads_t grads{};
    grads.h = grad_h.ptr, grads.att_src = grad_src.ptr, grads.att_dst = grad_dst.ptr;
    dfgnn_launch_t launch{};
    launch.workspace = ws_b.ptr, launch.workspace_bytes = backward_ws;
    EXPECT_EQ(dfgnnBackward(ctx, g, &p.op, &d.in, fwd_out.ptr, fwd_lse.ptr, d.grad_out.ptr, &grads, &launch),
              DFGNN_STATUS_SUCCESS)
        << dfgnnGetLastErrorMessage();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LE(rel_error(grad_h.download(), p.grad_h), kFloat32Tolerance) << "backward grad h";
    EXPECT_LE(rel_error(grad_src.download(), p.grad_att_src), kFloat32Tolerance) << "backward grad att_src";
    EXPECT_LE(rel_error(grad_dst.download(), p.grad_att_dst), kFloat32Tolerance) << "backward grad att_dst";
  };
  if (backward_first) {
    backward(d.out, d.lse);
    forward();
  } else {
    forward();
    backward(out, lse);
  }
}

// Real rows of this build: a copy of the shipped sm90.db (312 rows of another build, which the
// lookups of its op configurations read too) with Cora's winners of this op tuned into it, both
// directions, so that an exact lookup of Cora hits a row of that file on any GPU. Then four copies
// with every leaf page of `results` damaged (a lookup that reads a row meets garbage; opening,
// whose build check reads only an index, succeeds), one per (layer, first direction): a file found
// damaged is skipped for the whole process, so each run needs its own.
TEST(GpuDamagedDatabase, CallsOverDamagedPagesSucceedAndMatchReference) {
  auto plain = make_context();
  REQUIRE_GPU(plain.get());
  TempDir dir;
  ShippedDbEnv env;
  env.set("off");
  auto plain_graph = cora_with_loops(plain.get());
  ASSERT_NE(plain_graph, nullptr);
  const Problem p(plain_graph.get());

  const fs::path tuned = dir.path / "tuned.db";
  fs::copy_file(source_dir() / "data/tuning/sm90.db", tuned);
  fs::permissions(tuned, fs::perms::owner_write, fs::perm_options::add);
  {
    dfgnn_context_t raw = nullptr;
    DFGNN_ASSERT_OK(dfgnnCreate(&raw));
    ContextPtr ctx(raw);
    DFGNN_ASSERT_OK(dfgnnSetDatabase(ctx.get(), tuned.c_str(), ""));
    auto g = cora_with_loops(ctx.get());
    for (dfgnn_direction_t direction : {DFGNN_FORWARD, DFGNN_BACKWARD}) {
      size_t length = 0;
      DFGNN_ASSERT_OK(dfgnnTune(ctx.get(), g.get(), &p.op, direction, 1.0, nullptr, 0, &length));
    }
  }  // closed: SQLite checkpoints its WAL into the file
  const fs::path wal = tuned.string() + "-wal";
  ASSERT_FALSE(fs::exists(wal) && fs::file_size(wal) > 0) << "the tuned database's WAL was not checkpointed";

  // Undamaged, the file answers Cora's lookups, as either layer.
  for (bool as_site : {true, false}) {
    auto ctx = context_over(tuned, as_site, env);
    auto g = cora_with_loops(ctx.get());
    for (dfgnn_direction_t direction : {DFGNN_FORWARD, DFGNN_BACKWARD}) {
      const std::string e = explain(ctx.get(), g.get(), p.op, direction);
      const size_t passes = direction == DFGNN_FORWARD ? 1 : 2;
      EXPECT_EQ(occurrences(e, "\"origin\":\"exact\""), passes) << e;
      EXPECT_EQ(occurrences(e, std::string("\"layer\":\"") + (as_site ? "site" : "shipped") + "\""), passes) << e;
    }
  }

  // The default rule's workspaces: what a context answers once it skips the damaged layer.
  env.set("off");
  size_t forward_ws = 0, backward_ws = 0;
  DFGNN_ASSERT_OK(dfgnnGetWorkspaceSize(plain.get(), plain_graph.get(), &p.op, DFGNN_FORWARD, nullptr, &forward_ws));
  DFGNN_ASSERT_OK(dfgnnGetWorkspaceSize(plain.get(), plain_graph.get(), &p.op, DFGNN_BACKWARD, nullptr, &backward_ws));
  DeviceProblem d(p);
  {
    DeviceFloats ws(forward_ws / sizeof(float) + 1);
    dfgnn_launch_t launch{};
    launch.workspace = ws.ptr, launch.workspace_bytes = forward_ws;
    DFGNN_ASSERT_OK(dfgnnForward(plain.get(), plain_graph.get(), &p.op, &d.in, d.out.ptr, d.lse.ptr, &launch));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_LE(rel_error(d.out.download(), p.out), kFloat32Tolerance);
  }

  struct Run {
    bool as_site, backward_first;
    fs::path file;
  };
  std::vector<Run> runs;
  for (bool as_site : {true, false})
    for (bool backward_first : {false, true}) {
      const fs::path file = dir.path / (std::string(as_site ? "site" : "shipped") + (backward_first ? "-backward" : "-forward") + ".db");
      fs::copy_file(tuned, file);
      ASSERT_GT(damage_leaf_pages(file, "results"), 20) << file;
      runs.push_back({as_site, backward_first, file});
    }
  testing::internal::CaptureStderr();  // the library logs to stderr
  for (const Run& r : runs) {
    SCOPED_TRACE(r.file.string());
    auto ctx = context_over(r.file, r.as_site, env);
    auto g = cora_with_loops(ctx.get());
    expect_calls_match_reference(ctx.get(), g.get(), p, d, forward_ws, backward_ws, r.backward_first);
  }
  const std::string log = testing::internal::GetCapturedStderr();
  for (const Run& r : runs) {
    // Found by a lookup (not at open), logged once.
    const std::string found = std::string(r.as_site ? "site" : "shipped") + " tuning database " + r.file.string() +
                              " is damaged and no longer read in this process";
    EXPECT_EQ(occurrences(log, found), 1u) << log;
  }
  EXPECT_EQ(occurrences(log, "database disk image is malformed"), runs.size()) << log;
}

}  // namespace
