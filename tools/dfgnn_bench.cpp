// dfgnn-bench: times the fused GPU ops of dfgnn (forward, backward, both) per graph, model, dtype
// and schedule; compares them with a memory-traffic floor (measured copy bandwidth) and with an
// unfused cuSPARSE baseline; prints one table per graph and optionally writes JSON.
// Uses only the public C API of dfgnn.
//
// Exit codes: 0 success, 1 failure (a CUDA / cuSPARSE / NVRTC / dfgnn call failed, or a graph
// file could not be read), 2 bad arguments, 3 no usable GPU (after the arguments and graphs were
// checked).
#include "cli_common.hpp"
#include "dfgnn_bench_baseline.hpp"
#include "dfgnn_bench_common.hpp"
#include "stats.hpp"

#include <dfgnn/dfgnn.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace po = boost::program_options;
using nlohmann::json;
using namespace bench;

namespace {

using cli::BadArgs;
using cli::dtype_name;
using cli::kExitNoGpu;
using cli::model_name;
using cli::split;

constexpr int kMaxRotations = 8;
constexpr int kMaxLaunches = 100000;  // --warmup and --iters
constexpr double kL2Multiple = 3.0;  // rotated input sets cover at least 3x the L2 cache
constexpr const char* kTool = "dfgnn-bench";

const double kNaN = std::numeric_limits<double>::quiet_NaN();

size_t dtype_bytes(dfgnn_dtype_t d) { return d == DFGNN_DTYPE_FLOAT32 ? 4 : d == DFGNN_DTYPE_FLOAT64 ? 8 : 2; }

// ---------------------------------------------------------------- per-model tensor accounting

// The inputs a model reads, as DFGNN_INPUT_* bits (the library's model table).
uint32_t model_inputs(dfgnn_model_t m) {
  uint32_t mask = 0;
  return dfgnnModelInputs(m, 0, &mask, nullptr) == DFGNN_STATUS_SUCCESS ? mask : 0u;
}

// Feature tensors [N, H, D] a model reads (and whose gradients the backward writes).
int feature_inputs(dfgnn_model_t m) {
  const uint32_t features = DFGNN_INPUT_H | DFGNN_INPUT_H_DST | DFGNN_INPUT_Q | DFGNN_INPUT_K | DFGNN_INPUT_V;
  return std::popcount(model_inputs(m) & features);
}

// float32 parameters: attention vectors [H, D] (att_src, att_dst) and beta [1].
size_t param_floats(dfgnn_model_t m, int heads, int dim) {
  const uint32_t inputs = model_inputs(m);
  const size_t hd = static_cast<size_t>(heads) * dim;
  return std::popcount(inputs & (DFGNN_INPUT_ATT_SRC | DFGNN_INPUT_ATT_DST)) * hd + ((inputs & DFGNN_INPUT_BETA) ? 1 : 0);
}

// Points the slots a model reads (dfgnn_inputs_t / dfgnn_grads_t, DFGNN_NUM_INPUTS pointers), in
// field order, at features[0], [1], ... and at the packed float32 parameters: attention vectors at
// params and params + hd, beta at params.
void point_slots(dfgnn_model_t m, const std::vector<DeviceBuffer>& features, float* params, size_t hd, void** slots) {
  const uint32_t mask = model_inputs(m);
  size_t f = 0, offset = 0;
  for (int s = 0; s < DFGNN_NUM_INPUTS; ++s) {
    const uint32_t bit = 1u << s;
    if (!(mask & bit)) continue;
    if (bit == DFGNN_INPUT_ATT_SRC || bit == DFGNN_INPUT_ATT_DST) {
      slots[s] = params + offset;
      offset += hd;
    } else if (bit == DFGNN_INPUT_BETA) {
      slots[s] = params;
    } else {
      slots[s] = features.at(f++).get();
    }
  }
}

// Feature rows gathered once per edge (neighbour reads, the traffic that dominates; DESIGN.md
// section 6). Forward over CSR rows i gathers source rows j: Transformer k_j and v_j, the others
// h_j (scored and aggregated from the same row). Backward: the row pass over CSR gathers the same
// source rows (Transformer k_j, v_j; others h_j); the column pass over CSC gathers destination
// rows i: grad_out_i always, plus what the score needs from i (Transformer q_i, GATv2 h_dst_i,
// AGNN h_i; GAT's destination term is a per-node scalar).
int gathered_tensors(dfgnn_model_t m, dfgnn_direction_t dir) {
  if (dir == DFGNN_FORWARD) return m == DFGNN_MODEL_TRANSFORMER ? 2 : 1;
  switch (m) {
    case DFGNN_MODEL_GAT: return 1 + 1;
    case DFGNN_MODEL_GATV2: return 1 + 2;
    case DFGNN_MODEL_TRANSFORMER: return 2 + 2;
    case DFGNN_MODEL_AGNN: return 1 + 2;
  }
  return 0;
}

struct Shape {
  int64_t n = 0, e = 0;
  int heads = 1, dim = 1;
  dfgnn_model_t model = DFGNN_MODEL_GAT;
  dfgnn_dtype_t dtype = DFGNN_DTYPE_FLOAT32;
  size_t nhd() const { return static_cast<size_t>(n) * heads * dim; }
  size_t feature_bytes() const { return nhd() * dtype_bytes(dtype); }
  size_t lse_bytes() const { return static_cast<size_t>(n) * heads * sizeof(float); }
  size_t graph_bytes() const { return static_cast<size_t>(n + 1 + e) * sizeof(int32_t); }
  size_t params_bytes() const { return param_floats(model, heads, dim) * sizeof(float); }
};

// Compulsory bytes: every input read once, every output written once.
double forward_bytes(const Shape& s) {
  return static_cast<double>(feature_inputs(s.model) * s.feature_bytes() + s.params_bytes() + s.graph_bytes() +
                             s.feature_bytes() /* out */ + s.lse_bytes());
}
double backward_bytes(const Shape& s) {
  const size_t read = feature_inputs(s.model) * s.feature_bytes() + s.params_bytes() + 2 * s.feature_bytes() /* out, grad_out */ +
                      s.lse_bytes() + 2 * s.graph_bytes() /* CSR and CSC */;
  const size_t written = feature_inputs(s.model) * s.feature_bytes() + s.params_bytes();
  return static_cast<double>(read + written);
}
double gather_bytes(const Shape& s, dfgnn_direction_t dir) {
  return static_cast<double>(s.e) * s.heads * s.dim * dtype_bytes(s.dtype) * gathered_tensors(s.model, dir);
}

// ---------------------------------------------------------------- host data: random values, dtype conversion

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1): 24 random bits give exact float32 values k * 2^-23 - 1.
float uniform_pm1(uint64_t& state) {
  return static_cast<float>(splitmix64(state) >> 40) * 0x1.0p-23f - 1.0f;
}

// float32 -> bfloat16 bits, round to nearest even (NaN stays a quiet NaN).
uint16_t to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// float32 -> IEEE binary16 bits, round to nearest even, with subnormals, overflow to inf, NaN.
uint16_t to_f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (x < 0x38800000u) {                                                // below 2^-14: subnormal half
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);            // below 2^-25: zero
    const uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 .. 24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = (x - 0x38000000u) >> 13;  // rebias exponent 127 -> 15
  const uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// Fills count elements of dtype at dst (device) with uniform [-1, 1) values from seed, in chunks.
void fill_uniform(void* dst, size_t count, dfgnn_dtype_t dtype, uint64_t seed) {
  constexpr size_t kChunk = size_t{1} << 22;
  uint64_t state = seed * 0xD1B54A32D192ED03ull + 0x2545F4914F6CDD1Dull;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  for (size_t done = 0; done < count; done += kChunk) {
    const size_t n = std::min(kChunk, count - done);
    char* at = static_cast<char*>(dst) + done * dtype_bytes(dtype);
    if (dtype == DFGNN_DTYPE_FLOAT32) {
      f32.resize(n);
      for (float& v : f32) v = uniform_pm1(state);
      BENCH_CUDA(cudaMemcpy(at, f32.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    } else {
      f16.resize(n);
      for (uint16_t& v : f16) v = dtype == DFGNN_DTYPE_FLOAT16 ? to_f16(uniform_pm1(state)) : to_bf16(uniform_pm1(state));
      BENCH_CUDA(cudaMemcpy(at, f16.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    }
  }
}

// ---------------------------------------------------------------- statistics and timing

Stats stats_of(const std::vector<float>& ms) {
  Stats s;
  s.count = static_cast<int>(ms.size());
  if (ms.empty()) return s;
  const std::vector<double> v(ms.begin(), ms.end());
  s.median = dfgnn::stats::median_of(v);
  s.p10 = dfgnn::stats::quantile_of(v, 0.10);
  s.p90 = dfgnn::stats::quantile_of(v, 0.90);
  return s;
}

// Times `iters` calls of enqueue(i) after `warmup` untimed ones; each timed call gets its own
// event pair recorded on the stream around it. i counts on through warm-up and timed calls (it
// picks the rotated input set).
class Timer {
 public:
  Timer(cudaStream_t stream, int warmup, int iters) : stream_(stream), warmup_(warmup), iters_(iters) {
    start_.resize(iters, nullptr);
    stop_.resize(iters, nullptr);
    for (int i = 0; i < iters; ++i) {
      BENCH_CUDA(cudaEventCreate(&start_[i]));
      BENCH_CUDA(cudaEventCreate(&stop_[i]));
    }
  }
  ~Timer() {
    for (cudaEvent_t e : start_)
      if (e != nullptr) cudaEventDestroy(e);
    for (cudaEvent_t e : stop_)
      if (e != nullptr) cudaEventDestroy(e);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  template <typename F>
  Stats time(F&& enqueue, int warmup = -1, int iters = -1) {
    if (warmup < 0) warmup = warmup_;
    if (iters < 0 || iters > iters_) iters = iters_;
    size_t call = 0;
    for (int i = 0; i < warmup; ++i) enqueue(call++);
    for (int i = 0; i < iters; ++i) {
      BENCH_CUDA(cudaEventRecord(start_[i], stream_));
      enqueue(call++);
      BENCH_CUDA(cudaEventRecord(stop_[i], stream_));
    }
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    std::vector<float> ms(iters);
    for (int i = 0; i < iters; ++i) BENCH_CUDA(cudaEventElapsedTime(&ms[i], start_[i], stop_[i]));
    return stats_of(std::move(ms));
  }

 private:
  cudaStream_t stream_;
  int warmup_, iters_;
  std::vector<cudaEvent_t> start_, stop_;
};

// ---------------------------------------------------------------- options

struct Options {
  std::vector<cli::GraphSpec> graphs;
  bool self_loops = false;
  std::vector<dfgnn_model_t> models;
  std::vector<dfgnn_dtype_t> dtypes;
  int heads = 1, dim = 128;
  float dropout = 0;  // attention dropout rate of every op (its own kernels; the mask's seed is --seed)
  bool forward = true, backward = false;
  enum class Mode { Default, All, List } mode = Mode::Default;
  std::vector<std::string> schedule_list;  // Mode::List; "default" means dispatch
  int warmup = 10, iters = 50;
  std::string json_path;
  std::string db;  // tuning database that dispatch reads ("" = none: the solvers' default rule)
  bool baseline = true;
  uint64_t seed = 1;
  int device = 0;
  int rotations = 0;  // 0: automatic
  bool dry_run = false;
  std::string command_line;
};

// Returns nullopt after printing help or the version.
std::optional<Options> parse_args(int argc, char** argv) {
  po::options_description visible(
      "Usage: dfgnn-bench [options]\n\n"
      "Times dfgnn's fused attention ops on the GPU (CUDA events, median of --iters launches after\n"
      "--warmup, input sets rotated to defeat the L2 cache), against a memory floor (compulsory\n"
      "bytes / measured device copy bandwidth) and an unfused cuSPARSE baseline.\n"
      "Exit codes: 0 ok, 1 failure, 2 bad arguments, 3 no usable GPU.\n\nOptions");
  Options o;
  cli::GraphArgs graph_args;
  std::vector<std::string> models, dtypes, schedules;
  std::string direction = "forward", seed = "1";
  visible.add_options()
    ("help,h", "show this help")
    ("version", "print the version")
    ("graph", po::value(&graph_args.paths)->composing(), "graph file (.txt[.gz] edge list, .mtx) or dataset directory (repeatable)")
    ("rmat", po::value(&graph_args.rmat_scales)->composing(), "R-MAT graph with 2^SCALE nodes (repeatable); a,b,c = 0.57,0.19,0.19, deduplicated, no self-loops, permuted ids")
    ("rmat-edges", po::value(&graph_args.rmat_edges), "edges to sample per R-MAT graph (default 16 * 2^SCALE)")
    ("hubs", po::value(&graph_args.hubs)->composing(), "planted-hub graph N,AVG,HUBS,HUBDEG: N nodes with AVG in-edges each, HUBS hubs with HUBDEG in- and out-edges (repeatable)")
    ("self-loops", "remove self-loops and add one per node (PyG's add_self_loops) on every graph")
    ("seed", po::value(&seed)->default_value("1"), "seed of generated graphs, of the random inputs and of the dropout mask")
    ("model", po::value(&models)->composing(), (cli::model_names() + " or all (repeatable, or comma-separated; default transformer)").c_str())
    ("dtype", po::value(&dtypes)->composing(), "float32, float16 or bfloat16 (repeatable, or comma-separated; default float32)")
    ("heads", po::value(&o.heads)->default_value(1), "heads H")
    ("dim", po::value(&o.dim)->default_value(128), "channels per head D")
    ("dropout", po::value(&o.dropout)->default_value(0), "attention dropout rate in [0, 1) of every op, its mask drawn from --seed (the cuSPARSE baseline has none)")
    ("direction", po::value(&direction)->default_value("forward"), "forward, backward or both")
    ("schedules", po::value(&schedules)->composing(),
     "default (dispatch), all (every candidate of dfgnnListSchedules), or a list of schedules separated by ';' "
     "(repeatable; 'default' inside a list is the dispatch choice; backward takes ROW|COL or one schedule for both)")
    ("warmup", po::value(&o.warmup)->default_value(10), "untimed launches before timing (0..100000)")
    ("iters", po::value(&o.iters)->default_value(50), "timed launches, each with its own event pair (1..100000)")
    ("rotations", po::value(&o.rotations)->default_value(0), "input sets to rotate through (0: automatic, enough for 3x L2, at most 8)")
    ("device", po::value(&o.device)->default_value(0), "CUDA device ordinal")
    ("json", po::value(&o.json_path), "write all results to this JSON file")
    ("db", po::value(&o.db), "existing tuning database that 'default' (dispatch) reads, read-only (default: none, the solvers' default rule)")
    ("no-baseline", "skip the cuSPARSE baseline")
    ("dry-run", "check arguments, load graphs and list the configurations and schedules, without a GPU");
  po::variables_map vm;
  cli::parse_options([&] {
    po::store(po::command_line_parser(argc, argv).options(visible).run(), vm);
    po::notify(vm);
  });
  if (cli::print_help_or_version(kTool, vm.count("help") > 0, vm.count("version") > 0, visible)) return std::nullopt;
  for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + std::string(argv[i]);
  o.self_loops = vm.count("self-loops") > 0;
  o.baseline = vm.count("no-baseline") == 0;
  o.dry_run = vm.count("dry-run") > 0;
  if (graph_args.empty())
    throw BadArgs{"no graph given: use --graph PATH, --rmat SCALE or --hubs N,AVG,HUBS,HUBDEG (see --help)"};
  for (int s : graph_args.rmat_scales) cli::check_rmat_scale(s);  // before the --rmat-edges checks
  graph_args.rmat_edges_given = vm.count("rmat-edges") > 0;
  o.graphs = cli::graph_specs(graph_args, /*reject_empty_paths=*/false);
  o.seed = cli::parse_seed(seed);
  o.models = cli::parse_models(models);
  o.dtypes = cli::parse_dtypes(dtypes);
  cli::require_models(o.models);
  cli::require_dtypes(o.dtypes);
  cli::check_heads_dim(o.heads, o.dim);
  const std::vector<dfgnn_direction_t> directions = cli::parse_direction(direction);
  o.forward = std::find(directions.begin(), directions.end(), DFGNN_FORWARD) != directions.end();
  o.backward = std::find(directions.begin(), directions.end(), DFGNN_BACKWARD) != directions.end();
  std::vector<std::string> list;
  for (const std::string& s : schedules)
    for (const std::string& x : split(s, ';')) list.push_back(x);
  if (list.empty() || (list.size() == 1 && list[0] == "default")) {
    o.mode = Options::Mode::Default;
  } else if (list.size() == 1 && list[0] == "all") {
    o.mode = Options::Mode::All;
  } else {
    if (std::find(list.begin(), list.end(), "all") != list.end())
      throw BadArgs{"--schedules all cannot be combined with other schedules"};
    o.mode = Options::Mode::List;
    for (const std::string& x : list)
      if (std::find(o.schedule_list.begin(), o.schedule_list.end(), x) == o.schedule_list.end())
        o.schedule_list.push_back(x);
  }
  // Bounded: every timed launch holds its own pair of CUDA events, created before timing starts.
  if (o.warmup < 0 || o.warmup > kMaxLaunches)
    throw BadArgs{fmt::format("--warmup {} must be in 0..{}", o.warmup, kMaxLaunches)};
  if (o.iters < 1 || o.iters > kMaxLaunches)
    throw BadArgs{fmt::format("--iters {} must be in 1..{}", o.iters, kMaxLaunches)};
  if (o.rotations < 0 || o.rotations > 64) throw BadArgs{fmt::format("--rotations {} must be in 0..64", o.rotations)};
  if (o.device < 0) throw BadArgs{fmt::format("--device {} must be >= 0", o.device)};
  if (!(o.dropout >= 0 && o.dropout < 1)) throw BadArgs{fmt::format("--dropout {} is not a rate in [0, 1)", o.dropout)};
  if (vm.count("json")) {
    if (o.dry_run) throw BadArgs{"--json: --dry-run measures nothing and writes no JSON"};
    cli::check_json_path(o.json_path);
  }
  std::error_code ec;
  if (!o.db.empty() && !std::filesystem::is_regular_file(o.db, ec))
    throw BadArgs{fmt::format("--db {} is not an existing file (dfgnn-bench only reads a tuning database)", o.db)};
  return o;
}

// ---------------------------------------------------------------- graphs

struct GraphEntry {
  std::string name;
  dfgnn_graph_t graph = nullptr;
  int64_t n = 0, e = 0, max_degree = 0;
};

struct Graphs {
  std::vector<GraphEntry> list;
  ~Graphs() {
    for (GraphEntry& g : list) dfgnnGraphDestroy(g.graph);
  }
};

// The call a failed graph creation names in its message (the text this tool has always printed).
std::string create_call(const cli::GraphSpec& spec) {
  switch (spec.kind) {
    case cli::GraphSpec::Kind::File: return fmt::format("dfgnnGraphCreateFromFile({})", spec.path);
    case cli::GraphSpec::Kind::Rmat:
      return "dfgnnGraphCreateRmat(ctx, scale, edges, 0.57, 0.19, 0.19, DFGNN_RMAT_DEDUPLICATE | "
             "DFGNN_RMAT_NO_SELF_LOOPS | DFGNN_RMAT_PERMUTE_IDS, o.seed, &options, &g)";
    case cli::GraphSpec::Kind::Hubs:
      return "dfgnnGraphCreatePlantedHubs(ctx, h.nodes, h.avg_degree, h.hubs, h.hub_degree, o.seed, &options, &g)";
  }
  return "dfgnnGraphCreate";
}

// Loads every graph; a failure (missing file, bad generator arguments) throws Failure (exit 1).
void load_graphs(dfgnn_context_t ctx, const Options& o, Graphs& graphs) {
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.add_self_loops = o.self_loops ? 1 : 0;
  for (const cli::GraphSpec& spec : o.graphs) {
    dfgnn_graph_t g = nullptr;
    cli::check(cli::create_graph(ctx, spec, o.seed, &options, &g), create_call(spec));
    graphs.list.push_back({cli::graph_name(spec, o.seed, o.self_loops), g});
    GraphEntry& entry = graphs.list.back();
    BENCH_DFGNN(dfgnnGraphGetSize(g, &entry.n, &entry.e));
    dfgnn_fingerprint_t fp;
    BENCH_DFGNN(dfgnnGraphGetFingerprint(g, &fp));
    entry.max_degree = fp.max_degree;
    if (entry.n > INT32_MAX || entry.e > INT32_MAX)
      throw Failure{fmt::format("graph {}: {} nodes / {} edges exceed int32", entry.name, entry.n, entry.e)};
  }
}

// ---------------------------------------------------------------- schedules

using cli::read_text;

std::string get_schedule(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op, dfgnn_direction_t dir,
                         const char* schedule) {
  return read_text([&](char* b, size_t c, size_t* l) { return dfgnnGetSchedule(ctx, g, &op, dir, schedule, b, c, l); },
                   "dfgnnGetSchedule");
}

std::vector<std::string> list_schedules(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op, int pass) {
  return split(read_text([&](char* b, size_t c, size_t* l) { return dfgnnListSchedules(ctx, g, &op, pass, b, c, l); },
                         "dfgnnListSchedules"),
               '\n');
}

// One schedule to time. forced empty: dispatch (launch.schedule = null).
struct Candidate {
  std::string forced;
  std::string text;    // resolved schedule text (dfgnnGetSchedule)
  std::string varied;  // "", "row" or "col" (backward 'all'), "best row+col"
  bool is_default = false;
};

// Candidates of one direction; unusable schedules of a user list are noted in `skipped`.
std::vector<Candidate> plan_candidates(dfgnn_context_t ctx, dfgnn_graph_t g, const dfgnn_op_t& op, dfgnn_direction_t dir,
                                       const Options& o, std::vector<std::string>& skipped, std::string& note) {
  const std::string def = get_schedule(ctx, g, op, dir, nullptr);
  std::vector<Candidate> out;
  auto add = [&](Candidate c) {
    for (const Candidate& x : out)
      if (x.text == c.text) return;
    c.is_default = c.text == def;
    out.push_back(std::move(c));
  };
  switch (o.mode) {
    case Options::Mode::Default:
      add({"", def, "", true});
      break;
    case Options::Mode::All:
      if (dir == DFGNN_FORWARD) {
        for (const std::string& s : list_schedules(ctx, g, op, 0)) add({s, get_schedule(ctx, g, op, dir, s.c_str()), ""});
      } else {
        const size_t bar = def.find('|');
        const std::string def_row = def.substr(0, bar), def_col = def.substr(bar + 1);
        for (const std::string& r : list_schedules(ctx, g, op, 1)) {
          const std::string s = r + "|" + def_col;
          add({s, get_schedule(ctx, g, op, dir, s.c_str()), "row"});
        }
        for (const std::string& c : list_schedules(ctx, g, op, 2)) {
          const std::string s = def_row + "|" + c;
          add({s, get_schedule(ctx, g, op, dir, s.c_str()), "col"});
        }
        note = fmt::format("backward 'all': row-pass candidates timed with the default column schedule {}, "
                           "column-pass candidates with the default row schedule {}; then best row + best column",
                           def_col, def_row);
      }
      if (std::none_of(out.begin(), out.end(), [](const Candidate& c) { return c.is_default; }))
        out.push_back({"", def, "", true});  // dispatch chose a schedule outside the candidate list
      break;
    case Options::Mode::List:
      for (const std::string& s : o.schedule_list) {
        if (s == "default") {
          add({"", def, ""});
          continue;
        }
        if (dir == DFGNN_FORWARD && s.find('|') != std::string::npos) {
          skipped.push_back(fmt::format("forward {}: a ROW|COL pair is a backward schedule", s));
          continue;
        }
        size_t length = 0;
        const dfgnn_status_t st = dfgnnGetSchedule(ctx, g, &op, dir, s.c_str(), nullptr, 0, &length);
        if (st == DFGNN_STATUS_PARSE_ERROR)
          throw BadArgs{fmt::format("--schedules '{}': {}", s, dfgnnGetLastErrorMessage())};
        if (st == DFGNN_STATUS_INVALID_ARGUMENT || st == DFGNN_STATUS_NOT_SUPPORTED) {
          skipped.push_back(fmt::format("{} {}: {}", dir == DFGNN_FORWARD ? "forward" : "backward", s, dfgnnGetLastErrorMessage()));
          continue;
        }
        check_dfgnn(st, "dfgnnGetSchedule");
        add({s, get_schedule(ctx, g, op, dir, s.c_str()), ""});
      }
      break;
  }
  return out;
}

// ---------------------------------------------------------------- results

struct Row {
  std::string model, dtype, direction, schedule, varied, note;
  int heads = 1, dim = 1, rotations = 1;
  bool is_default = false, best = false;
  Stats t;
  double floor_ms = kNaN, gather_floor_ms = kNaN, baseline_ms = kNaN, baseline_p10 = kNaN, baseline_p90 = kNaN;
  double sum_of_medians_ms = kNaN, baseline_max_error = kNaN;
  double floor_bytes = 0, gather_bytes = 0;
};

struct Summary {
  std::string model, dtype, direction, best_schedule, default_schedule;
  std::string dispatch;  // how dispatch chose the default: explain's level per pass ("exact", "nearest d=0.12", ...)
  double best_ms = kNaN, default_ms = kNaN;
};

struct GraphResult {
  const GraphEntry* graph = nullptr;
  std::vector<Row> rows;
  std::vector<Summary> summaries;
  std::vector<std::string> notes;
  std::map<std::string, double> library_memory_mb;  // "model/dtype" -> delta around the first forward
};

// Table form of a schedule: drops fields at their neutral value (team=1, mid/threshold/chunk=0).
std::string compact(const std::string& schedule) {
  static const std::set<std::string> neutral = {"team=1", "mid=0", "threshold=0", "chunk=0"};
  std::string out;
  for (const std::string& pass : split(schedule, '|')) {
    if (!out.empty()) out += "|";
    const size_t colon = pass.find(':');
    if (colon == std::string::npos) {
      out += pass;
      continue;
    }
    std::string fields;
    for (const std::string& f : split(pass.substr(colon + 1), ','))
      if (!neutral.count(f)) fields += (fields.empty() ? "" : ",") + f;
    out += pass.substr(0, colon + 1) + fields;
  }
  return out;
}

// Table label of a row's schedule: the varied pass only for backward 'all' rows.
std::string schedule_label(const std::string& schedule, const std::string& varied) {
  const size_t bar = schedule.find('|');
  if (varied == "row" && bar != std::string::npos) return "[row] " + compact(schedule.substr(0, bar));
  if (varied == "col" && bar != std::string::npos) return "[col] " + compact(schedule.substr(bar + 1));
  if (schedule.find(" + ") != std::string::npos) return "default forward + default backward";
  std::string text = compact(schedule);
  // A backward pair with the same schedule on both passes is shown once (the library's own form).
  if (bar != std::string::npos && schedule.substr(0, bar) == schedule.substr(bar + 1)) text = compact(schedule.substr(0, bar));
  if (!varied.empty()) return "[" + varied + "] " + text;
  return text;
}

json number(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

std::string fmt_ms(double x) { return std::isfinite(x) ? fmt::format("{:.4f}", x) : "-"; }
std::string fmt_ratio(double x) { return std::isfinite(x) ? fmt::format("{:.2f}", x) : "-"; }

void print_table(const GraphResult& r, double bandwidth_gbs) {
  const GraphEntry& g = *r.graph;
  fmt::print("\ngraph {}: {} nodes, {} edges, max in-degree {}; copy bandwidth {:.0f} GB/s\n", g.name, g.n, g.e,
             g.max_degree, bandwidth_gbs);
  const std::vector<std::string> header = {"", "model", "dtype", "H", "D", "direction", "schedule", "median ms",
                                           "p10", "p90", "floor ms", "ratio", "gather ms", "g.ratio",
                                           "baseline ms", "speedup"};
  std::vector<std::vector<std::string>> cells;
  for (const Row& row : r.rows) {
    std::string sched = schedule_label(row.schedule, row.varied);
    if (row.is_default) sched += " (default)";
    cells.push_back({row.best ? "*" : "", row.model, row.dtype, std::to_string(row.heads), std::to_string(row.dim),
                     row.direction, sched, fmt_ms(row.t.median), fmt_ms(row.t.p10), fmt_ms(row.t.p90),
                     fmt_ms(row.floor_ms), fmt_ratio(row.t.median / row.floor_ms), fmt_ms(row.gather_floor_ms),
                     fmt_ratio(row.t.median / row.gather_floor_ms), fmt_ms(row.baseline_ms),
                     fmt_ratio(row.baseline_ms / row.t.median)});
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& line : cells) width[c] = std::max(width[c], line[c].size());
  }
  auto print_line = [&](const std::vector<std::string>& line) {
    std::string out;
    for (size_t c = 0; c < line.size(); ++c) {
      const bool left = c <= 2 || c == 5 || c == 6;
      out += left ? fmt::format("{:<{}}", line[c], width[c]) : fmt::format("{:>{}}", line[c], width[c]);
      if (c + 1 < line.size()) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    fmt::print("{}\n", out);
  };
  print_line(header);
  for (const auto& line : cells) print_line(line);
  std::vector<std::string> notes;  // each distinct note once, in row order
  for (const Row& row : r.rows) {
    if (row.note.empty()) continue;
    const std::string line =
        fmt::format("  note ({} {} {}{}): {}", row.model, row.dtype, row.direction,
                    row.note.starts_with("schedule declined") ? " " + compact(row.schedule) : "", row.note);
    if (std::find(notes.begin(), notes.end(), line) == notes.end()) notes.push_back(line);
  }
  for (const std::string& line : notes) fmt::print("{}\n", line);
  for (const Summary& s : r.summaries)
    fmt::print("  {} {} {}: best {} {} ms; default ({}) {} {} ms; best/default {}\n", s.model, s.dtype, s.direction,
               compact(s.best_schedule), fmt_ms(s.best_ms), s.dispatch,
               s.default_schedule.empty() ? "(not timed)" : compact(s.default_schedule), fmt_ms(s.default_ms),
               fmt_ratio(s.best_ms / s.default_ms));
  fmt::print("  (schedules omit team=1 and mid/threshold/chunk=0; a backward schedule without '|' ran on both passes; "
             "'*' marks the fastest per model, dtype and direction)\n");
  for (const auto& [key, mb] : r.library_memory_mb)
    fmt::print("  {}: device memory taken by the library around its first forward (coarse, cudaMemGetInfo): {:.1f} MiB\n",
               key, mb);
  for (const std::string& n : r.notes) fmt::print("  {}\n", n);
}

json row_json(const Row& row) {
  return json{{"model", row.model},
              {"dtype", row.dtype},
              {"heads", row.heads},
              {"dim", row.dim},
              {"direction", row.direction},
              {"schedule", row.schedule},
              {"varied", row.varied},
              {"is_default", row.is_default},
              {"best", row.best},
              {"rotations", row.rotations},
              {"iters", row.t.count},
              {"median_ms", number(row.t.median)},
              {"p10_ms", number(row.t.p10)},
              {"p90_ms", number(row.t.p90)},
              {"floor_bytes", row.floor_bytes},
              {"floor_ms", number(row.floor_ms)},
              {"ratio_to_floor", number(row.t.median / row.floor_ms)},
              {"gather_bytes", row.gather_bytes},
              {"gather_floor_ms", number(row.gather_floor_ms)},
              {"ratio_to_gather_floor", number(row.t.median / row.gather_floor_ms)},
              {"sum_of_medians_ms", number(row.sum_of_medians_ms)},
              {"baseline_ms", number(row.baseline_ms)},
              {"baseline_p10_ms", number(row.baseline_p10)},
              {"baseline_p90_ms", number(row.baseline_p90)},
              {"baseline_max_rel_error", number(row.baseline_max_error)},
              {"speedup", number(row.baseline_ms / row.t.median)},
              {"note", row.note}};
}

// ---------------------------------------------------------------- GPU session

struct Device {
  int ordinal = 0, arch = 0, sm_count = 0;
  std::string name;
  size_t l2_bytes = 0, memory_bytes = 0;
  double bandwidth_gbs = 0;  // bytes read + written per second / 1e9
  size_t bandwidth_copy_bytes = 0;
};

// Device-to-device copy bandwidth: cudaMemcpyAsync of a 2 GiB buffer (less if memory is short),
// 2 warm-ups then the median of 10 timed copies; counts bytes read plus bytes written.
void measure_bandwidth(Device& dev, cudaStream_t stream) {
  size_t free_bytes = 0, total = 0;
  BENCH_CUDA(cudaMemGetInfo(&free_bytes, &total));
  size_t bytes = size_t{2} << 30;
  while (bytes > (size_t{64} << 20) && 2 * bytes + (size_t{256} << 20) > free_bytes) bytes /= 2;
  DeviceBuffer src(bytes), dst(bytes);
  BENCH_CUDA(cudaMemsetAsync(src.get(), 1, bytes, stream));
  BENCH_CUDA(cudaMemsetAsync(dst.get(), 0, bytes, stream));
  Timer timer(stream, 2, 10);
  const Stats s = timer.time([&](size_t) {
    BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  dev.bandwidth_copy_bytes = bytes;
  dev.bandwidth_gbs = 2.0 * static_cast<double>(bytes) / (s.median * 1e-3) / 1e9;
}

// Device tensors of one (graph, model, dtype): K rotated input sets plus outputs.
struct Tensors {
  int rotations = 1;
  std::vector<std::vector<DeviceBuffer>> features;  // [set][feature input]
  std::vector<DeviceBuffer> outs, lses, grad_outs;  // per set (backward)
  DeviceBuffer params;                              // att_src / att_dst / beta, shared by all sets
  DeviceBuffer fwd_out, fwd_lse;                    // forward timing output
  std::vector<DeviceBuffer> grad_features;
  DeviceBuffer grad_params;
  DeviceBuffer workspace;

  dfgnn_inputs_t inputs(dfgnn_model_t m, size_t set, int heads, int dim) const {
    dfgnn_inputs_t in{};
    point_slots(m, features[set % features.size()], params.get<float>(), static_cast<size_t>(heads) * dim,
                reinterpret_cast<void**>(&in));
    return in;
  }
  dfgnn_grads_t grads(dfgnn_model_t m, int heads, int dim) const {
    dfgnn_grads_t g{};
    point_slots(m, grad_features, grad_params.get<float>(), static_cast<size_t>(heads) * dim,
                reinterpret_cast<void**>(&g));
    return g;
  }
  void ensure_workspace(size_t bytes) {
    if (bytes > workspace.bytes()) {
      workspace.reset();
      workspace = DeviceBuffer(bytes);
    }
  }
};

// One (graph, model, dtype) configuration and its candidates per direction.
struct Config {
  size_t graph = 0;
  dfgnn_model_t model = DFGNN_MODEL_GAT;
  dfgnn_dtype_t dtype = DFGNN_DTYPE_FLOAT32;
  dfgnn_op_t op{};
  std::vector<Candidate> fwd, bwd;
  std::string bwd_note;
  std::vector<std::string> skipped;
};

class Session {
 public:
  Session(dfgnn_context_t ctx, const Options& o, Device& dev, cudaStream_t stream)
      : ctx_(ctx), o_(o), dev_(dev), stream_(stream), timer_(stream, o.warmup, o.iters) {
    if (o.baseline) baseline_ = std::make_unique<Baseline>(stream, dev.arch);
  }

  void run(const Config& c, const GraphEntry& g, GraphResult& result) {
    Shape s;
    s.n = g.n, s.e = g.e, s.heads = o_.heads, s.dim = o_.dim, s.model = c.model, s.dtype = c.dtype;
    for (const std::string& k : c.skipped) result.notes.push_back("skipped schedule: " + k);
    if (!c.bwd_note.empty()) result.notes.push_back(fmt::format("{} {}: {}", model_name(c.model), dtype_name(c.dtype), c.bwd_note));

    fmt::print(stderr, "{}: {} {} {}: {} forward / {} backward schedule(s)\n", g.name, model_name(c.model),
               dtype_name(c.dtype), o_.forward && o_.backward ? "both" : o_.forward ? "forward" : "backward",
               o_.forward ? c.fwd.size() : 0, o_.backward ? c.bwd.size() : 0);
    Tensors t;
    allocate(c, s, t);
    const double fwd_floor = forward_bytes(s), bwd_floor = backward_bytes(s);
    const double fwd_gather = gather_bytes(s, DFGNN_FORWARD), bwd_gather = gather_bytes(s, DFGNN_BACKWARD);
    auto make_row = [&](const char* direction, const Candidate& cand, double floor, double gather) {
      Row row;
      row.model = model_name(c.model), row.dtype = dtype_name(c.dtype), row.direction = direction;
      row.heads = s.heads, row.dim = s.dim, row.rotations = t.rotations;
      row.schedule = cand.text, row.varied = cand.varied, row.is_default = cand.is_default;
      row.floor_bytes = floor, row.gather_bytes = gather;
      row.floor_ms = floor / (dev_.bandwidth_gbs * 1e9) * 1e3;
      row.gather_floor_ms = gather / (dev_.bandwidth_gbs * 1e9) * 1e3;
      return row;
    };

    // First forward on this graph / op: the library builds its device data (CSR, plans, modules).
    {
      size_t free_before = 0, free_after = 0, total = 0;
      BENCH_CUDA(cudaDeviceSynchronize());
      BENCH_CUDA(cudaMemGetInfo(&free_before, &total));
      forward(c, t, 0, nullptr, t.fwd_out.get(), t.fwd_lse.get<float>());
      BENCH_CUDA(cudaStreamSynchronize(stream_));
      BENCH_CUDA(cudaMemGetInfo(&free_after, &total));
      result.library_memory_mb[fmt::format("{} {}", model_name(c.model), dtype_name(c.dtype))] =
          (static_cast<double>(free_before) - static_cast<double>(free_after)) / (1024.0 * 1024.0);
    }

    const Candidate dispatch_fwd{"", get_schedule(ctx_, g.graph, c.op, DFGNN_FORWARD, nullptr), "", true};
    const Candidate dispatch_bwd{"", o_.backward ? get_schedule(ctx_, g.graph, c.op, DFGNN_BACKWARD, nullptr) : "", "", true};
    double fwd_default_median = kNaN, bwd_default_median = kNaN;

    if (o_.forward) {
      const size_t first = result.rows.size();
      for (const Candidate& cand : c.fwd) {
        Row row = make_row("forward", cand, fwd_floor, fwd_gather);
        if (!time_forward(c, t, cand, row)) {
          result.rows.push_back(row);
          continue;
        }
        if (cand.is_default) fwd_default_median = row.t.median;
        result.rows.push_back(row);
      }
      add_baseline(c, g, s, t, result.rows, first);
      summarise(result, first, "forward", dispatch_level(c.op, g.graph, DFGNN_FORWARD));
    }
    if (o_.backward) {
      // out and lse of every rotated set, from the dispatch forward.
      for (int k = 0; k < t.rotations; ++k) forward(c, t, k, nullptr, t.outs[k].get(), t.lses[k].get<float>());
      BENCH_CUDA(cudaStreamSynchronize(stream_));
      const size_t first = result.rows.size();
      for (const Candidate& cand : c.bwd) {
        Row row = make_row("backward", cand, bwd_floor, bwd_gather);
        if (time_backward(c, t, cand, row) && cand.is_default) bwd_default_median = row.t.median;
        result.rows.push_back(row);
      }
      if (o_.mode == Options::Mode::All) {
        // Best row schedule with the best column schedule, if that pair was not timed yet.
        auto best_of = [&](const char* varied) -> const Row* {
          const Row* best = nullptr;
          for (size_t i = first; i < result.rows.size(); ++i) {
            const Row& r = result.rows[i];
            if (r.varied == varied && std::isfinite(r.t.median) && (!best || r.t.median < best->t.median)) best = &r;
          }
          return best;
        };
        const Row* br = best_of("row");
        const Row* bc = best_of("col");
        if (br && bc) {
          const std::string pair = br->schedule.substr(0, br->schedule.find('|')) + "|" +
                                   bc->schedule.substr(bc->schedule.find('|') + 1);
          const bool timed = std::any_of(result.rows.begin() + first, result.rows.end(),
                                         [&](const Row& r) { return r.schedule == pair; });
          if (!timed) {
            Candidate cand{pair, get_schedule(ctx_, g.graph, c.op, DFGNN_BACKWARD, pair.c_str()), "best row+col", false};
            Row row = make_row("backward", cand, bwd_floor, bwd_gather);
            time_backward(c, t, cand, row);
            result.rows.push_back(row);
          }
        }
      }
      summarise(result, first, "backward", dispatch_level(c.op, g.graph, DFGNN_BACKWARD));
    }
    if (o_.forward && o_.backward) {
      // The dispatch pair as one timed sequence (forward writes set k's out / lse, backward reads them).
      Candidate pair{"", dispatch_fwd.text + " + " + dispatch_bwd.text, "", true};
      Row row = make_row("fwd+bwd", pair, fwd_floor + bwd_floor, fwd_gather + bwd_gather);
      ensure_workspace(c, t, DFGNN_FORWARD, dispatch_fwd);
      ensure_workspace(c, t, DFGNN_BACKWARD, dispatch_bwd);
      const dfgnn_grads_t grads = t.grads(c.model, o_.heads, o_.dim);
      row.t = timer_.time([&](size_t i) {
        const size_t k = i % t.rotations;
        forward(c, t, k, nullptr, t.outs[k].get(), t.lses[k].get<float>());
        const dfgnn_inputs_t in = t.inputs(c.model, k, o_.heads, o_.dim);
        const dfgnn_launch_t launch = make_launch(t, nullptr);
        BENCH_DFGNN(dfgnnBackward(ctx_, g_, &c.op, &in, t.outs[k].get(), t.lses[k].get<float>(), t.grad_outs[k].get(),
                                  &grads, &launch));
      });
      row.sum_of_medians_ms = fwd_default_median + bwd_default_median;
      row.note = fmt::format("sum of forward and backward medians: {} ms", fmt_ms(row.sum_of_medians_ms));
      result.rows.push_back(row);
    }
  }

  void set_graph(dfgnn_graph_t g) { g_ = g; }

 private:
  dfgnn_launch_t make_launch(Tensors& t, const char* schedule) {
    dfgnn_launch_t l{};
    l.stream = stream_;
    l.workspace = t.workspace.get();
    l.workspace_bytes = t.workspace.bytes();
    l.schedule = schedule;
    return l;
  }

  void ensure_workspace(const Config& c, Tensors& t, dfgnn_direction_t dir, const Candidate& cand) {
    size_t bytes = 0;
    BENCH_DFGNN(dfgnnGetWorkspaceSize(ctx_, g_, &c.op, dir, cand.forced.empty() ? nullptr : cand.forced.c_str(), &bytes));
    t.ensure_workspace(bytes);
  }

  void forward(const Config& c, Tensors& t, size_t set, const char* schedule, void* out, float* lse) {
    if (schedule == nullptr) {
      size_t bytes = 0;
      BENCH_DFGNN(dfgnnGetWorkspaceSize(ctx_, g_, &c.op, DFGNN_FORWARD, nullptr, &bytes));
      t.ensure_workspace(bytes);
    }
    const dfgnn_inputs_t in = t.inputs(c.model, set, o_.heads, o_.dim);
    const dfgnn_launch_t launch = make_launch(t, schedule);
    BENCH_DFGNN(dfgnnForward(ctx_, g_, &c.op, &in, out, lse, &launch));
  }

  // A forced candidate the library declines at launch (not supported / invalid here) becomes a
  // noted row; any other failure ends the run.
  bool declined(dfgnn_status_t st, Row& row) {
    if (st == DFGNN_STATUS_SUCCESS) return false;
    if (row.is_default || (st != DFGNN_STATUS_NOT_SUPPORTED && st != DFGNN_STATUS_INVALID_ARGUMENT))
      check_dfgnn(st, row.direction == "forward" ? "dfgnnForward" : "dfgnnBackward");
    row.note = fmt::format("schedule declined: {}: {}", dfgnnGetStatusString(st), dfgnnGetLastErrorMessage());
    row.t.median = row.t.p10 = row.t.p90 = kNaN;
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    return true;
  }

  bool time_forward(const Config& c, Tensors& t, const Candidate& cand, Row& row) {
    ensure_workspace(c, t, DFGNN_FORWARD, cand);
    const char* sched = cand.forced.empty() ? nullptr : cand.forced.c_str();
    const dfgnn_launch_t launch = make_launch(t, sched);
    // One untimed call first: compiles the kernels, and lets a declined schedule be noted.
    dfgnn_inputs_t in = t.inputs(c.model, 0, o_.heads, o_.dim);
    if (declined(dfgnnForward(ctx_, g_, &c.op, &in, t.fwd_out.get(), t.fwd_lse.get<float>(), &launch), row)) return false;
    row.t = timer_.time([&](size_t i) {
      in = t.inputs(c.model, i % t.rotations, o_.heads, o_.dim);
      BENCH_DFGNN(dfgnnForward(ctx_, g_, &c.op, &in, t.fwd_out.get(), t.fwd_lse.get<float>(), &launch));
    });
    return true;
  }

  bool time_backward(const Config& c, Tensors& t, const Candidate& cand, Row& row) {
    ensure_workspace(c, t, DFGNN_BACKWARD, cand);
    const char* sched = cand.forced.empty() ? nullptr : cand.forced.c_str();
    const dfgnn_launch_t launch = make_launch(t, sched);
    const dfgnn_grads_t grads = t.grads(c.model, o_.heads, o_.dim);
    auto call = [&](size_t k) {
      const dfgnn_inputs_t in = t.inputs(c.model, k, o_.heads, o_.dim);
      return dfgnnBackward(ctx_, g_, &c.op, &in, t.outs[k].get(), t.lses[k].get<float>(), t.grad_outs[k].get(), &grads,
                           &launch);
    };
    if (declined(call(0), row)) return false;
    row.t = timer_.time([&](size_t i) { check_dfgnn(call(i % t.rotations), "dfgnnBackward"); });
    return true;
  }

  void allocate(const Config& c, const Shape& s, Tensors& t) {
    const int nin = feature_inputs(c.model);
    // One rotated set: the feature inputs, plus out, lse and grad_out when the backward runs.
    const size_t set_bytes = nin * s.feature_bytes() + (o_.backward ? 2 * s.feature_bytes() + s.lse_bytes() : 0);
    // Everything else: forward output, gradients, a guess at workspace, library data and baseline.
    size_t fixed = s.feature_bytes() + s.lse_bytes() + 2 * s.params_bytes();
    if (o_.backward) fixed += nin * s.feature_bytes();
    fixed += 8 * s.graph_bytes() + static_cast<size_t>(s.n) * s.heads * 64;
    if (baseline_) fixed += static_cast<size_t>(s.e) * s.heads * 4 + 2 * s.lse_bytes() + s.feature_bytes();
    size_t free_bytes = 0, total = 0;
    BENCH_CUDA(cudaMemGetInfo(&free_bytes, &total));
    const size_t margin = size_t{1} << 30;
    int k = o_.rotations;
    if (k == 0) {
      const double need = kL2Multiple * static_cast<double>(dev_.l2_bytes) / static_cast<double>(std::max<size_t>(set_bytes, 1));
      k = std::clamp(static_cast<int>(std::ceil(need)), 1, kMaxRotations);
      const size_t avail = free_bytes > fixed + margin ? free_bytes - fixed - margin : 0;
      k = std::clamp(static_cast<int>(std::min<size_t>(avail / std::max<size_t>(set_bytes, 1), kMaxRotations)), 1, k);
    }
    t.rotations = k;
    const uint64_t base = o_.seed * 1000003ull + static_cast<uint64_t>(c.model) * 101 + static_cast<uint64_t>(c.dtype) * 7;
    uint64_t stream_id = 0;
    t.features.resize(k);
    for (int r = 0; r < k; ++r)
      for (int i = 0; i < nin; ++i) {
        t.features[r].emplace_back(s.feature_bytes());
        fill_uniform(t.features[r].back().get(), s.nhd(), s.dtype, base + ++stream_id);
      }
    t.params = DeviceBuffer(std::max<size_t>(s.params_bytes(), 4));
    fill_uniform(t.params.get(), std::max<size_t>(param_floats(c.model, s.heads, s.dim), 1), DFGNN_DTYPE_FLOAT32,
                 base + ++stream_id);
    t.fwd_out = DeviceBuffer(s.feature_bytes());
    t.fwd_lse = DeviceBuffer(s.lse_bytes());
    if (o_.backward) {
      for (int r = 0; r < k; ++r) {
        t.outs.emplace_back(s.feature_bytes());
        t.lses.emplace_back(s.lse_bytes());
        t.grad_outs.emplace_back(s.feature_bytes());
        fill_uniform(t.grad_outs.back().get(), s.nhd(), s.dtype, base + ++stream_id);
      }
      for (int i = 0; i < nin; ++i) t.grad_features.emplace_back(s.feature_bytes());
      t.grad_params = DeviceBuffer(std::max<size_t>(s.params_bytes(), 4));
    }
  }

  // Times the unfused pipeline once per forward configuration and fills baseline columns of the
  // forward rows [first, end); checks its output against the fused forward.
  void add_baseline(const Config& c, const GraphEntry& g, const Shape& s, Tensors& t, std::vector<Row>& rows, size_t first) {
    std::string why = baseline_ ? Baseline::unsupported(c.model, c.dtype, s.e) : "baseline: disabled (--no-baseline)";
    if (!why.empty()) {
      if (baseline_)
        for (size_t i = first; i < rows.size(); ++i) rows[i].note += (rows[i].note.empty() ? "" : "; ") + why;
      return;
    }
    BaselineProblem p;
    p.model = c.model, p.num_nodes = s.n, p.num_edges = s.e, p.heads = s.heads, p.dim = s.dim;
    p.negative_slope = c.op.negative_slope, p.scale = c.op.scale;
    const int32_t* row_ptr = nullptr;
    const int32_t* col_idx = nullptr;
    BENCH_DFGNN(dfgnnGraphGetCsr(g.graph, DFGNN_MEMORY_DEVICE, &row_ptr, &col_idx, nullptr));
    p.row_ptr = row_ptr, p.col_idx = col_idx;
    for (int k = 0; k < t.rotations; ++k) {
      const dfgnn_inputs_t in = t.inputs(c.model, k, s.heads, s.dim);
      BaselineInputs b;
      b.q = static_cast<const float*>(in.q), b.k = static_cast<const float*>(in.k), b.v = static_cast<const float*>(in.v);
      b.h = static_cast<const float*>(in.h);
      b.att_src = static_cast<const float*>(in.att_src), b.att_dst = static_cast<const float*>(in.att_dst);
      p.sets.push_back(b);
    }
    DeviceBuffer out(s.feature_bytes());
    p.out = out.get<float>();
    baseline_->prepare(p);
    const Stats bs = timer_.time([&](size_t i) { baseline_->run(i % t.rotations); });
    // Agreement with the fused forward on set 0 (dispatch schedule).
    baseline_->run(0);
    forward(c, t, 0, nullptr, t.fwd_out.get(), t.fwd_lse.get<float>());
    std::vector<float> a(s.nhd()), b(s.nhd());
    BENCH_CUDA(cudaMemcpyAsync(a.data(), out.get(), s.feature_bytes(), cudaMemcpyDeviceToHost, stream_));
    BENCH_CUDA(cudaMemcpyAsync(b.data(), t.fwd_out.get(), s.feature_bytes(), cudaMemcpyDeviceToHost, stream_));
    BENCH_CUDA(cudaStreamSynchronize(stream_));
    baseline_->release();
    double err = 0, scale = 1;
    for (size_t i = 0; i < a.size(); ++i) {
      err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    }
    if (!(err <= scale * 1e30)) err = std::numeric_limits<double>::infinity();  // NaN -> inf
    for (size_t i = first; i < rows.size(); ++i) {
      rows[i].baseline_ms = bs.median, rows[i].baseline_p10 = bs.p10, rows[i].baseline_p90 = bs.p90;
      rows[i].baseline_max_error = err / scale;
      if (err / scale > 1e-3)
        rows[i].note += fmt::format("{}baseline and fused outputs differ: max abs diff {:.3e}",
                                    rows[i].note.empty() ? "" : "; ", err);
    }
  }

  // With several schedules: mark the fastest row and record best vs default.
  // explain's level per pass, with the distance of a nearest-fingerprint answer.
  std::string dispatch_level(const dfgnn_op_t& op, dfgnn_graph_t graph, dfgnn_direction_t dir) {
    const std::string text = read_text(
        [&](char* b, size_t cap, size_t* l) { return dfgnnExplain(ctx_, graph, &op, dir, b, cap, l); }, "dfgnnExplain");
    std::string out;
    for (const json& pass : json::parse(text)) {
      std::string level = pass.value("level", "?");
      if (level == "cache") level = pass.value("origin", "?");
      if (level == "nearest") level += fmt::format(" d={:.3f}", pass.value("distance", 0.0));
      out += (out.empty() ? "" : "+") + level;
    }
    return out;
  }

  void summarise(GraphResult& result, size_t first, const char* direction, const std::string& dispatch) {
    if (o_.mode == Options::Mode::Default || result.rows.size() <= first) return;
    Row* best = nullptr;
    const Row* def = nullptr;
    for (size_t i = first; i < result.rows.size(); ++i) {
      Row& r = result.rows[i];
      if (!std::isfinite(r.t.median) || r.t.count == 0) continue;
      if (!best || r.t.median < best->t.median) best = &r;
      if (r.is_default && !def) def = &r;
    }
    if (!best) return;
    best->best = true;
    Summary s;
    s.model = best->model, s.dtype = best->dtype, s.direction = direction;
    s.best_schedule = best->schedule, s.best_ms = best->t.median;
    s.dispatch = dispatch;
    if (def) s.default_schedule = def->schedule, s.default_ms = def->t.median;
    result.summaries.push_back(s);
  }

  dfgnn_context_t ctx_;
  const Options& o_;
  Device& dev_;
  cudaStream_t stream_;
  Timer timer_;
  std::unique_ptr<Baseline> baseline_;
  dfgnn_graph_t g_ = nullptr;
};

// Plans every (graph, model, dtype) without touching the GPU: resolves the dispatch schedules and
// the candidates, so bad schedules are reported before the device check.
std::vector<Config> plan(dfgnn_context_t ctx, const Options& o, const Graphs& graphs) {
  std::vector<Config> configs;
  for (size_t gi = 0; gi < graphs.list.size(); ++gi)
    for (dfgnn_model_t m : o.models)
      for (dfgnn_dtype_t d : o.dtypes) {
        Config c;
        c.graph = gi, c.model = m, c.dtype = d;
        c.op = dfgnnOpDefault(m, d, o.heads, o.dim);
        c.op.dropout = o.dropout;
        c.op.dropout_seed = o.seed;
        dfgnn_graph_t g = graphs.list[gi].graph;
        // The op itself (H, D, dtype) is checked here: an unusable one is an argument error.
        size_t length = 0;
        const dfgnn_status_t st = dfgnnGetSchedule(ctx, g, &c.op, DFGNN_FORWARD, nullptr, nullptr, 0, &length);
        if (st == DFGNN_STATUS_INVALID_ARGUMENT || st == DFGNN_STATUS_NOT_SUPPORTED)
          throw BadArgs{fmt::format("{} {} H={} D={}: {}", model_name(m), dtype_name(d), o.heads, o.dim, dfgnnGetLastErrorMessage())};
        check_dfgnn(st, "dfgnnGetSchedule");
        if (o.forward) c.fwd = plan_candidates(ctx, g, c.op, DFGNN_FORWARD, o, c.skipped, c.bwd_note);
        std::string note;
        if (o.backward) c.bwd = plan_candidates(ctx, g, c.op, DFGNN_BACKWARD, o, c.skipped, note);
        c.bwd_note = note;
        if (o.forward && c.fwd.empty())
          throw BadArgs{fmt::format("--schedules: no listed schedule is usable for the forward of {} {} on {}",
                                    model_name(m), dtype_name(d), graphs.list[gi].name)};
        if (o.backward && c.bwd.empty())
          throw BadArgs{fmt::format("--schedules: no listed schedule is usable for the backward of {} {} on {}",
                                    model_name(m), dtype_name(d), graphs.list[gi].name)};
        configs.push_back(std::move(c));
      }
  return configs;
}

void print_plan(const Options& o, const Graphs& graphs, const std::vector<Config>& configs) {
  for (const Config& c : configs) {
    const GraphEntry& g = graphs.list[c.graph];
    Shape s;
    s.n = g.n, s.e = g.e, s.heads = o.heads, s.dim = o.dim, s.model = c.model, s.dtype = c.dtype;
    fmt::print("{} ({} nodes, {} edges, max in-degree {}): {} {} H={} D={}\n", g.name, g.n, g.e, g.max_degree,
               model_name(c.model), dtype_name(c.dtype), o.heads, o.dim);
    if (o.forward) {
      fmt::print("  forward: floor {:.3f} MB, gather floor {:.3f} MB, {} schedule(s)\n", forward_bytes(s) / 1e6,
                 gather_bytes(s, DFGNN_FORWARD) / 1e6, c.fwd.size());
      for (const Candidate& x : c.fwd) fmt::print("    {}{}\n", x.text, x.is_default ? " (default)" : "");
    }
    if (o.backward) {
      fmt::print("  backward: floor {:.3f} MB, gather floor {:.3f} MB, {} schedule(s)\n", backward_bytes(s) / 1e6,
                 gather_bytes(s, DFGNN_BACKWARD) / 1e6, c.bwd.size());
      if (!c.bwd_note.empty()) fmt::print("    {}\n", c.bwd_note);
      for (const Candidate& x : c.bwd)
        fmt::print("    {}{}{}\n", x.varied.empty() ? "" : "[" + x.varied + "] ", x.text, x.is_default ? " (default)" : "");
    }
    for (const std::string& k : c.skipped) fmt::print("  skipped: {}\n", k);
    if (o.baseline) {
      const std::string why = Baseline::unsupported(c.model, c.dtype, g.e);
      fmt::print("  {}\n", !o.forward ? "baseline: none (forward only)" : why.empty() ? "baseline: cuSPARSE pipeline" : why);
    }
  }
}

struct StreamGuard {
  cudaStream_t stream = nullptr;
  ~StreamGuard() {
    if (stream) cudaStreamDestroy(stream);
  }
};

int run(int argc, char** argv) {
  std::optional<Options> parsed = parse_args(argc, argv);
  if (!parsed) return 0;
  const Options& o = *parsed;

  cli::ContextGuard context;
  BENCH_DFGNN(dfgnnCreate(&context.ctx));
  dfgnn_context_t ctx = context.ctx;
  // A database is read as a site layer: benchmarking never writes to it.
  BENCH_DFGNN(dfgnnSetDatabase(ctx, "", o.db.c_str()));
  Graphs graphs;
  load_graphs(ctx, o, graphs);
  const std::vector<Config> configs = plan(ctx, o, graphs);
  if (o.dry_run) {
    print_plan(o, graphs, configs);
    return 0;
  }

  int has_device = 0;
  const char* reason = nullptr;
  BENCH_DFGNN(dfgnnHasDevice(ctx, &has_device, &reason));
  if (!has_device) {
    fmt::print(stderr, "{}: no usable GPU: {}\n", kTool, reason ? reason : "unknown reason");
    return kExitNoGpu;
  }

  Device dev;
  dev.ordinal = o.device;
  int count = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  if (o.device >= count) throw BadArgs{fmt::format("--device {}: only {} device(s)", o.device, count)};
  BENCH_CUDA(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, o.device));
  dev.name = prop.name, dev.sm_count = prop.multiProcessorCount, dev.arch = prop.major * 10 + prop.minor;
  dev.l2_bytes = static_cast<size_t>(prop.l2CacheSize), dev.memory_bytes = prop.totalGlobalMem;
  StreamGuard sg;
  BENCH_CUDA(cudaStreamCreateWithFlags(&sg.stream, cudaStreamNonBlocking));
  measure_bandwidth(dev, sg.stream);
  fmt::print("{} {} on {} (sm_{}, {} SMs, L2 {:.0f} MiB, {:.0f} GiB); device copy bandwidth {:.0f} GB/s "
             "(read + write, {} MiB copy, median of 10)\n",
             kTool, dfgnnGetVersion(), dev.name, dev.arch, dev.sm_count, dev.l2_bytes / 1048576.0,
             dev.memory_bytes / 1073741824.0, dev.bandwidth_gbs, dev.bandwidth_copy_bytes >> 20);
  fmt::print("timing: {} warm-up + {} timed launches, CUDA events per launch; median, p10, p90 in ms; floor = "
             "compulsory bytes / copy bandwidth; gather = per-edge neighbour-row bytes / copy bandwidth\n",
             o.warmup, o.iters);
  if (o.baseline)
    fmt::print("baseline: float32 forward of Transformer (cuSPARSE SDDMM) and GAT (NVRTC gather), NVRTC row softmax, "
               "cuSPARSE SpMM; per-head loop of SDDMM / SpMM when H > 1\n");

  std::vector<GraphResult> results(graphs.list.size());
  {
    Session session(ctx, o, dev, sg.stream);
    for (size_t gi = 0; gi < graphs.list.size(); ++gi) {
      results[gi].graph = &graphs.list[gi];
      session.set_graph(graphs.list[gi].graph);
      for (const Config& c : configs)
        if (c.graph == gi) session.run(c, graphs.list[gi], results[gi]);
      print_table(results[gi], dev.bandwidth_gbs);
      std::fflush(stdout);
    }
  }
  BENCH_CUDA(cudaStreamSynchronize(sg.stream));

  if (!o.json_path.empty()) {
    json doc;
    doc["tool"] = kTool;
    doc["version"] = dfgnnGetVersion();
    doc["date"] = cli::iso_date();
    doc["command"] = o.command_line;
    doc["device"] = {{"name", dev.name},         {"ordinal", dev.ordinal},           {"sm_count", dev.sm_count},
                     {"arch", dev.arch},         {"l2_bytes", dev.l2_bytes},         {"memory_bytes", dev.memory_bytes},
                     {"bandwidth_gbs", dev.bandwidth_gbs}, {"bandwidth_copy_bytes", dev.bandwidth_copy_bytes}};
    doc["settings"] = {{"warmup", o.warmup},
                       {"iters", o.iters},
                       {"heads", o.heads},
                       {"dim", o.dim},
                       {"dropout", o.dropout},
                       {"seed", o.seed},
                       {"self_loops", o.self_loops},
                       {"direction", o.forward && o.backward ? "both" : o.forward ? "forward" : "backward"},
                       {"schedules", o.mode == Options::Mode::Default ? "default"
                                     : o.mode == Options::Mode::All   ? "all"
                                                                      : "list"},
                       {"baseline", o.baseline}};
    json gl = json::array();
    for (const GraphResult& r : results) {
      json rows = json::array(), sums = json::array(), mem = json::object();
      for (const Row& row : r.rows) rows.push_back(row_json(row));
      for (const Summary& s : r.summaries)
        sums.push_back({{"model", s.model},
                        {"dtype", s.dtype},
                        {"direction", s.direction},
                        {"best_schedule", s.best_schedule},
                        {"best_ms", number(s.best_ms)},
                        {"default_schedule", s.default_schedule},
                        {"default_ms", number(s.default_ms)},
                        {"dispatch", s.dispatch},
                        {"best_over_default", number(s.best_ms / s.default_ms)}});
      for (const auto& [k, v] : r.library_memory_mb) mem[k] = v;
      gl.push_back({{"name", r.graph->name},
                    {"nodes", r.graph->n},
                    {"edges", r.graph->e},
                    {"max_in_degree", r.graph->max_degree},
                    {"results", rows},
                    {"summaries", sums},
                    {"library_memory_delta_mib", mem},
                    {"notes", r.notes}});
    }
    doc["graphs"] = gl;
    std::ofstream out(o.json_path);
    out << doc.dump(2) << "\n";
    out.close();
    if (!out) throw Failure{fmt::format("writing {} failed", o.json_path)};
    fmt::print("\nwrote {}\n", o.json_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main(kTool, [&] { return run(argc, argv); }); }
