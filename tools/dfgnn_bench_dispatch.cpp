// dfgnn-bench-dispatch: what dfgnn itself adds on the host around its kernels.
//
//   overhead      dfgnn's own host time per call on a warm in-process cache (dispatch lookup,
//                 validation, argument packing): the host time of a dfgnnForward/dfgnnBackward call
//                 minus the time of the same number of bare cudaLaunchKernel calls with an argument
//                 of the same size, measured in the same run. The launches per call are counted by
//                 capturing one call into a CUDA graph (which also shows the ops are capturable).
//   first-launch  run as a fresh process: CUDA context creation, then the first call (dispatch,
//                 database lookups, module compile or load, plan upload) against a steady call,
//                 and the NVRTC compiles that first call needed (0 with a warm database).
//
// Prints a table and writes JSON. Uses the public C API plus the CUDA runtime and NVRTC (for the
// empty reference kernel). Exit codes: 0 success, 1 failure, 2 bad arguments, 3 no GPU.
#include "cli_common.hpp"

#include <dfgnn/dfgnn.h>

#include <boost/program_options.hpp>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <nvrtc.h>

#include "params.cuh"  // the kernels' argument block: the reference launch passes one of the same size

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace po = boost::program_options;
using nlohmann::json;

namespace {

using cli::BadArgs;
using cli::check;
using cli::Failure;

constexpr const char* kTool = "dfgnn-bench-dispatch";
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failure{fmt::format("{}: {}", what, cudaGetErrorString(e))};
}

struct Options {
  std::string mode;
  cli::GraphSpec graph;
  dfgnn_model_t model = DFGNN_MODEL_TRANSFORMER;
  dfgnn_dtype_t dtype = DFGNN_DTYPE_FLOAT32;
  int heads = 1, dim = 64;
  int batches = 200, calls = 50;
  bool self_loops = false;
  std::optional<std::string> db;
  std::string json_path;
};

// An empty kernel taking an argument of the kernels' size, compiled once with NVRTC.
class ReferenceKernel {
 public:
  explicit ReferenceKernel(int arch) {
    const std::string src = fmt::format("struct Block {{ char bytes[{}]; }};\n"
                                        "extern \"C\" __global__ void empty(Block) {{}}\n",
                                        sizeof(dfgnn::Params));
    nvrtcProgram prog = nullptr;
    if (nvrtcCreateProgram(&prog, src.c_str(), "empty.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
      throw Failure{"nvrtcCreateProgram failed"};
    const std::string arch_option = fmt::format("-arch=sm_{}", arch);
    const char* opts[] = {arch_option.c_str()};
    const nvrtcResult r = nvrtcCompileProgram(prog, 1, opts);
    size_t size = 0;
    std::vector<char> cubin;
    if (r == NVRTC_SUCCESS && nvrtcGetCUBINSize(prog, &size) == NVRTC_SUCCESS) {
      cubin.resize(size);
      nvrtcGetCUBIN(prog, cubin.data());
    }
    nvrtcDestroyProgram(&prog);
    if (cubin.empty()) throw Failure{fmt::format("compiling the reference kernel: {}", nvrtcGetErrorString(r))};
    cuda(cudaLibraryLoadData(&library_, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), "cudaLibraryLoadData");
    cuda(cudaLibraryGetKernel(&kernel_, library_, "empty"), "cudaLibraryGetKernel");
  }
  ~ReferenceKernel() { cudaLibraryUnload(library_); }
  void launch(cudaStream_t stream) {
    void* args[] = {&params_};
    cuda(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(1), dim3(32), args, 0, stream), "cudaLaunchKernel");
  }

 private:
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t kernel_ = nullptr;
  dfgnn::Params params_{};
};

// Device buffers for one op: random inputs, outputs, gradients, workspace.
struct OpBuffers {
  std::vector<void*> owned;
  dfgnn_inputs_t in{};
  dfgnn_grads_t grads{};
  void *out = nullptr, *grad_out = nullptr, *ws_fwd = nullptr, *ws_bwd = nullptr;
  float* lse = nullptr;
  size_t ws_fwd_bytes = 0, ws_bwd_bytes = 0;

  void* alloc(size_t bytes, unsigned seed) {
    void* p = nullptr;
    cuda(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc");
    owned.push_back(p);
    // Small random values (any bit pattern of 0x3c-ish bytes is a modest finite number).
    std::vector<unsigned char> host(std::max<size_t>(bytes, 16));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>((i * 2654435761u + seed) >> 24) & 0x3b;
    cuda(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    return p;
  }
  ~OpBuffers() {
    for (void* p : owned) cudaFree(p);
  }
};

void prepare(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op, int64_t n, OpBuffers& b) {
  const size_t elem = op.dtype == DFGNN_DTYPE_FLOAT32 ? 4 : 2;
  const size_t nhd = static_cast<size_t>(n) * op.heads * op.dim * elem, hd = sizeof(float) * op.heads * op.dim;
  unsigned seed = 1;
  auto feat = [&] { return b.alloc(nhd, seed++); };
  // The inputs the model reads (the library's model table), and their gradients: node features
  // [N, H, D] in the op's dtype, attention vectors [H, D] and beta [1] float32.
  uint32_t mask = 0;
  check(dfgnnModelInputs(op.model, 0, &mask, nullptr), "dfgnnModelInputs");
  auto* inputs = reinterpret_cast<const void**>(&b.in);
  auto* grads = reinterpret_cast<void**>(&b.grads);
  for (int s = 0; s < DFGNN_NUM_INPUTS; ++s) {
    const uint32_t bit = 1u << s;
    if (!(mask & bit)) continue;
    const bool attention = bit & (DFGNN_INPUT_ATT_SRC | DFGNN_INPUT_ATT_DST);
    const size_t bytes = bit == DFGNN_INPUT_BETA ? sizeof(float) : attention ? hd : nhd;
    inputs[s] = b.alloc(bytes, seed++);
    grads[s] = b.alloc(bytes, seed++);
  }
  b.out = feat(), b.grad_out = feat();
  b.lse = static_cast<float*>(b.alloc(sizeof(float) * n * op.heads, 11));
  check(dfgnnGetWorkspaceSize(ctx, g, &op, DFGNN_FORWARD, nullptr, &b.ws_fwd_bytes), "dfgnnGetWorkspaceSize");
  check(dfgnnGetWorkspaceSize(ctx, g, &op, DFGNN_BACKWARD, nullptr, &b.ws_bwd_bytes), "dfgnnGetWorkspaceSize");
  b.ws_fwd = b.alloc(b.ws_fwd_bytes, 12);
  b.ws_bwd = b.alloc(b.ws_bwd_bytes, 13);
}

struct Runner {
  dfgnn_context_t ctx;
  dfgnn_graph_t g;
  dfgnn_op_t op;
  OpBuffers& b;
  cudaStream_t stream;

  void forward() {
    dfgnn_launch_t l{stream, b.ws_fwd, b.ws_fwd_bytes, nullptr, nullptr};
    check(dfgnnForward(ctx, g, &op, &b.in, b.out, b.lse, &l), "dfgnnForward");
  }
  void backward() {
    dfgnn_launch_t l{stream, b.ws_bwd, b.ws_bwd_bytes, nullptr, nullptr};
    check(dfgnnBackward(ctx, g, &op, &b.in, b.out, b.lse, b.grad_out, &b.grads, &l), "dfgnnBackward");
  }
};

// Median over batches of the host time per call of `call` (the GPU catches up between batches).
template <typename F>
double host_us_per_call(F&& call, cudaStream_t stream, int batches, int calls) {
  std::vector<double> per_call;
  for (int b = 0; b < batches; ++b) {
    const auto t = Clock::now();
    for (int c = 0; c < calls; ++c) call();
    per_call.push_back(seconds_since(t) * 1e6 / calls);
    cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  std::nth_element(per_call.begin(), per_call.begin() + per_call.size() / 2, per_call.end());
  return per_call[per_call.size() / 2];
}

// Kernel launches one call makes, counted by capturing it into a CUDA graph.
template <typename F>
size_t launches_per_call(F&& call, cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  call();
  cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  size_t nodes = 0;
  cuda(cudaGraphGetNodes(graph, nullptr, &nodes), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> list(nodes);
  cuda(cudaGraphGetNodes(graph, list.data(), &nodes), "cudaGraphGetNodes");
  size_t kernels = 0;
  for (cudaGraphNode_t node : list) {
    cudaGraphNodeType type{};
    cuda(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
    kernels += type == cudaGraphNodeTypeKernel;
  }
  cudaGraphDestroy(graph);
  return kernels;
}

int arch_of_device() {
  int major = 0, minor = 0;
  cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "cudaDeviceGetAttribute");
  cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), "cudaDeviceGetAttribute");
  return major * 10 + minor;
}

std::string text_of(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op, dfgnn_direction_t dir) {
  return cli::read_text([&](char* b, size_t c, size_t* l) { return dfgnnGetSchedule(ctx, g, &op, dir, nullptr, b, c, l); },
                        "dfgnnGetSchedule");
}

int run(const Options& o) {
  json report;
  report["tool"] = kTool;
  report["mode"] = o.mode;
  report["version"] = dfgnnGetVersion();
  report["date"] = cli::iso_date();
  const auto t_start = Clock::now();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print(stderr, "{}: no CUDA device: this benchmark needs a GPU\n", kTool);
    return cli::kExitNoGpu;
  }
  cuda(cudaFree(nullptr), "cudaFree(0)");  // CUDA context creation, which every CUDA program pays
  const double context_ms = seconds_since(t_start) * 1e3;

  cli::ContextGuard guard;
  check(dfgnnCreate(&guard.ctx), "dfgnnCreate");
  dfgnn_context_t ctx = guard.ctx;
  check(dfgnnSetDatabase(ctx, o.db ? o.db->c_str() : "", nullptr), "dfgnnSetDatabase");
  dfgnn_graph_options_t gopt = dfgnnGraphDefaultOptions();
  gopt.add_self_loops = o.self_loops ? 1 : 0;
  const auto t_graph = Clock::now();
  dfgnn_graph_t g = nullptr;
  check(cli::create_graph(ctx, o.graph, 1, &gopt, &g), "loading the graph");
  std::unique_ptr<dfgnn_graph, void (*)(dfgnn_graph_t)> graph_guard(g, [](dfgnn_graph_t x) { dfgnnGraphDestroy(x); });
  const double graph_ms = seconds_since(t_graph) * 1e3;
  int64_t n = 0, e = 0;
  check(dfgnnGraphGetSize(g, &n, &e), "dfgnnGraphGetSize");
  const dfgnn_op_t op = dfgnnOpDefault(o.model, o.dtype, o.heads, o.dim);
  OpBuffers buffers;
  // Sizing the workspace dispatches (cache, database, nearest vote): first-launch times it too.
  const auto t_prepare = Clock::now();
  prepare(ctx, g, op, n, buffers);
  const double prepare_ms = seconds_since(t_prepare) * 1e3;
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Runner r{ctx, g, op, buffers, stream};
  report["graph"] = {{"name", cli::graph_name(o.graph, 1, o.self_loops)}, {"nodes", n}, {"edges", e}};
  report["op"] = {{"model", cli::model_name(o.model)}, {"dtype", cli::dtype_name(o.dtype)}, {"heads", o.heads}, {"dim", o.dim}};

  if (o.mode == "first-launch") {
    // The first calls pay dispatch, database lookups, compile or load, plan building and upload.
    auto timed_ms = [&](auto&& call) {
      const auto t = Clock::now();
      call();
      cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      return seconds_since(t) * 1e3;
    };
    const double first_fwd = timed_ms([&] { r.forward(); });
    const double first_bwd = timed_ms([&] { r.backward(); });
    std::vector<double> fwd, bwd;
    for (int i = 0; i < 20; ++i) fwd.push_back(timed_ms([&] { r.forward(); })), bwd.push_back(timed_ms([&] { r.backward(); }));
    std::sort(fwd.begin(), fwd.end());
    std::sort(bwd.begin(), bwd.end());
    uint64_t compiles = 0, hits = 0, loads = 0, from_db = 0;
    check(dfgnnGetCacheCounters(ctx, &compiles, &hits, &loads), "dfgnnGetCacheCounters");
    check(dfgnnGetModulesFromDatabase(ctx, &from_db), "dfgnnGetModulesFromDatabase");
    // Dispatch happened inside prepare() (workspace sizing), with the buffer allocation and upload.
    const double added = prepare_ms + (first_fwd - fwd[10]) + (first_bwd - bwd[10]);
    report["workspace_sizing_and_buffers_ms"] = prepare_ms;
    report["context_creation_ms"] = context_ms;
    report["graph_build_ms"] = graph_ms;
    report["first_forward_ms"] = first_fwd, report["steady_forward_ms"] = fwd[10];
    report["first_backward_ms"] = first_bwd, report["steady_backward_ms"] = bwd[10];
    report["first_launch_added_ms"] = added;
    report["nvrtc_compiles"] = compiles, report["modules_loaded"] = loads, report["modules_from_database"] = from_db;
    report["forward_schedule"] = text_of(ctx, g, op, DFGNN_FORWARD);
    report["backward_schedule"] = text_of(ctx, g, op, DFGNN_BACKWARD);
    fmt::print("{} {} on {}: context creation {:.1f} ms; dispatch (workspace sizing, with buffer set-up {:.2f} ms) "
               "and the first forward+backward add {:.2f} ms over steady calls ({:.3f} + {:.3f} ms); NVRTC compiles {}, "
               "modules from database {}, loaded {}\n",
               cli::model_name(o.model), cli::dtype_name(o.dtype), report["graph"]["name"].get<std::string>(), context_ms,
               prepare_ms, added, fwd[10], bwd[10], compiles, from_db, loads);
    fmt::print("  schedules: forward {}  backward {}\n", report["forward_schedule"].get<std::string>(),
               report["backward_schedule"].get<std::string>());
  } else {
    ReferenceKernel reference(arch_of_device());
    for (int i = 0; i < 20; ++i) r.forward(), r.backward(), reference.launch(stream);  // warm every cache
    cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const size_t k_fwd = launches_per_call([&] { r.forward(); }, stream);
    const size_t k_bwd = launches_per_call([&] { r.backward(); }, stream);
    // The reference for a call of k launches is k bare launches in a row. Interleave the four
    // measurements so drifts hit them alike.
    auto bare = [&](size_t k) {
      for (size_t i = 0; i < k; ++i) reference.launch(stream);
    };
    std::vector<double> t_fwd, t_bwd, t_ref_fwd, t_ref_bwd;
    for (int round = 0; round < 5; ++round) {
      t_ref_fwd.push_back(host_us_per_call([&] { bare(k_fwd); }, stream, o.batches / 5, o.calls));
      t_fwd.push_back(host_us_per_call([&] { r.forward(); }, stream, o.batches / 5, o.calls));
      t_ref_bwd.push_back(host_us_per_call([&] { bare(k_bwd); }, stream, o.batches / 5, o.calls));
      t_bwd.push_back(host_us_per_call([&] { r.backward(); }, stream, o.batches / 5, o.calls));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double fwd_us = median(t_fwd), bwd_us = median(t_bwd), ref_fwd = median(t_ref_fwd), ref_bwd = median(t_ref_bwd);
    report["forward"] = {{"call_us", fwd_us}, {"launches", k_fwd}, {"bare_launches_us", ref_fwd},
                         {"dfgnn_us", fwd_us - ref_fwd}, {"schedule", text_of(ctx, g, op, DFGNN_FORWARD)}};
    report["backward"] = {{"call_us", bwd_us}, {"launches", k_bwd}, {"bare_launches_us", ref_bwd},
                          {"dfgnn_us", bwd_us - ref_bwd}, {"schedule", text_of(ctx, g, op, DFGNN_BACKWARD)}};
    report["batches"] = o.batches, report["calls_per_batch"] = o.calls;
    fmt::print("host time per call (median of {} batches of {} calls) against as many bare cudaLaunchKernel calls\n",
               o.batches, o.calls);
    fmt::print("  {:<9} {:>10} {:>9} {:>14} {:>16}\n", "direction", "call us", "launches", "bare us", "dfgnn's own us");
    fmt::print("  {:<9} {:>10.3f} {:>9} {:>14.3f} {:>16.3f}\n", "forward", fwd_us, k_fwd, ref_fwd, fwd_us - ref_fwd);
    fmt::print("  {:<9} {:>10.3f} {:>9} {:>14.3f} {:>16.3f}\n", "backward", bwd_us, k_bwd, ref_bwd, bwd_us - ref_bwd);
  }
  cudaStreamDestroy(stream);
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << report.dump(2) << "\n";
    out.close();
    if (!out) throw Failure{fmt::format("writing {} failed", o.json_path)};
  }
  return 0;
}

std::optional<Options> parse(int argc, char** argv) {
  po::options_description visible(fmt::format("Usage: {} overhead|first-launch [options]", kTool));
  Options o;
  cli::GraphArgs graph_args;
  std::string model = "transformer", dtype = "float32", db;
  visible.add_options()
    ("help,h", "show this help")
    ("version", "print the version")
    ("graph", po::value(&graph_args.paths)->composing(), "graph file or dataset directory")
    ("rmat", po::value(&graph_args.rmat_scales)->composing(), "R-MAT graph with 2^SCALE nodes")
    ("self-loops", "remove self-loops and add one per node (PyG's add_self_loops)")
    ("model", po::value(&model), (cli::model_names() + " (default transformer)").c_str())
    ("dtype", po::value(&dtype), "float32, float16 or bfloat16 (default float32)")
    ("heads", po::value(&o.heads)->default_value(1), "heads H")
    ("dim", po::value(&o.dim)->default_value(64), "channels per head D")
    ("batches", po::value(&o.batches)->default_value(200), "overhead: timed batches (median taken)")
    ("calls", po::value(&o.calls)->default_value(50), "overhead: calls per batch")
    ("db", po::value(&db), "tuning database to dispatch from (default: none, the solvers' default rule)")
    ("json", po::value(&o.json_path), "write the results to this JSON file");
  po::options_description all;
  all.add(visible).add_options()("mode", po::value(&o.mode));
  po::positional_options_description positional;
  positional.add("mode", 1);
  po::variables_map vm;
  cli::parse_options([&] {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  });
  if (cli::print_help_or_version(kTool, vm.count("help") > 0, vm.count("version") > 0, visible)) return std::nullopt;
  if (o.mode != "overhead" && o.mode != "first-launch")
    throw BadArgs{o.mode.empty() ? "no mode given: overhead or first-launch (see --help)"
                                 : fmt::format("unknown mode '{}': overhead or first-launch", o.mode)};
  if (graph_args.empty()) throw BadArgs{"no graph given: use --graph PATH or --rmat SCALE"};
  const std::vector<cli::GraphSpec> graphs = cli::graph_specs(graph_args, true);
  if (graphs.size() != 1) throw BadArgs{"give exactly one graph"};
  o.graph = graphs[0];
  o.self_loops = vm.count("self-loops") > 0;
  const auto models = cli::parse_models({model});
  const auto dtypes = cli::parse_dtypes({dtype});
  if (models.size() != 1 || dtypes.size() != 1) throw BadArgs{"give one --model and one --dtype"};
  o.model = models[0], o.dtype = dtypes[0];
  cli::check_heads_dim(o.heads, o.dim);
  if (o.batches < 5 || o.calls < 1) throw BadArgs{"--batches must be >= 5 and --calls >= 1"};
  if (vm.count("db")) o.db = db;
  if (vm.count("json")) cli::check_json_path(o.json_path);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_main(kTool, [&] {
    const std::optional<Options> o = parse(argc, argv);
    return o ? run(*o) : 0;
  });
}
