// dfgnn-tune: tunes the schedules of dfgnn's fused ops for one or more graphs into a tuning
// database, then shows how a second run dispatches from that database. Uses only the public C API.
//
// A *problem* is one (graph, model, dtype, direction); each gets --budget seconds of dfgnnTune.
// Per problem the tool prints the winner, its speedup over the default schedule, the runner-up and
// a dfgnn-bench command that reproduces the measurement, then asks a fresh context on the same
// database which level answers (dfgnnExplain: "exact" after tuning).
//
// Without a GPU it still loads and validates every graph, prints fingerprints and bucket keys and
// checks every op, then exits 3 saying that tuning needs a GPU.
//
// Exit codes: 0 success, 1 failure (a graph could not be read, a tuning call failed), 2 bad
// arguments, 3 no usable GPU (after the graphs were loaded and checked).
#include <dfgnn/dfgnn.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace po = boost::program_options;
using nlohmann::json;

namespace {

constexpr int kExitFailure = 1, kExitBadArgs = 2, kExitNoGpu = 3;
constexpr const char* kTool = "dfgnn-tune";

struct BadArgs {
  std::string message;
};
struct Failure {
  std::string message;
};

void check(dfgnn_status_t status, const std::string& what) {
  if (status != DFGNN_STATUS_SUCCESS)
    throw Failure{fmt::format("{}: {}: {}", what, dfgnnGetStatusString(status), dfgnnGetLastErrorMessage())};
}

// Reads a string through the library's buffer protocol (call with capacity 0 to size it).
template <typename F>
std::string read_text(F&& call, const std::string& what) {
  size_t length = 0;
  check(call(nullptr, size_t{0}, &length), what);
  std::string text(length + 1, '\0');
  check(call(text.data(), text.size(), &length), what);
  text.resize(length);
  return text;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(sep, start), text.size());
    std::string part = text.substr(start, end - start);
    const auto b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    if (b != std::string::npos) parts.push_back(part.substr(b, e - b + 1));
    start = end + 1;
  }
  return parts;
}

// Single-quotes a word for a POSIX shell when it needs quoting.
std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./,=:+@%") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string iso_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---------------------------------------------------------------- names

const char* model_name(dfgnn_model_t m) {
  switch (m) {
    case DFGNN_MODEL_GAT: return "gat";
    case DFGNN_MODEL_GATV2: return "gatv2";
    case DFGNN_MODEL_TRANSFORMER: return "transformer";
    case DFGNN_MODEL_AGNN: return "agnn";
  }
  return "?";
}

const char* dtype_name(dfgnn_dtype_t d) {
  switch (d) {
    case DFGNN_DTYPE_FLOAT32: return "float32";
    case DFGNN_DTYPE_FLOAT16: return "float16";
    case DFGNN_DTYPE_BFLOAT16: return "bfloat16";
    case DFGNN_DTYPE_FLOAT64: return "float64";
  }
  return "?";
}

const char* direction_name(dfgnn_direction_t d) { return d == DFGNN_FORWARD ? "forward" : "backward"; }

// ---------------------------------------------------------------- options

struct HubSpec {
  int64_t nodes = 0;
  int32_t avg_degree = 0, hubs = 0;
  int64_t hub_degree = 0;
};

struct GraphSpec {
  enum class Kind { File, Rmat, Hubs } kind = Kind::File;
  std::string path;          // File
  int scale = 0;             // Rmat
  int64_t edges = 0;         // Rmat (resolved)
  HubSpec hubs;              // Hubs
  std::string text;          // Hubs, as given
};

struct Options {
  std::vector<GraphSpec> graphs;
  std::vector<dfgnn_model_t> models;
  std::vector<dfgnn_dtype_t> dtypes;
  std::vector<dfgnn_direction_t> directions;
  int heads = 1, dim = 128;
  bool self_loops = false;
  uint64_t seed = 1;
  double budget = 20;
  std::optional<std::string> db;    // nullopt: dfgnnSetDatabase(NULL) rules
  std::optional<std::string> site;  // nullopt: $DFGNN_SITE_DB
  std::string json_path;
  std::string command_line;
};

HubSpec parse_hubs(const std::string& text) {
  const std::vector<std::string> parts = split(text, ',');
  if (parts.size() != 4) throw BadArgs{fmt::format("--hubs '{}' is not N,AVG,HUBS,HUBDEG", text)};
  int64_t v[4];
  for (int i = 0; i < 4; ++i) {
    try {
      size_t used = 0;
      v[i] = std::stoll(parts[i], &used);
      if (used != parts[i].size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw BadArgs{fmt::format("--hubs '{}': '{}' is not an integer", text, parts[i])};
    }
  }
  if (v[0] < 1 || v[1] < 0 || v[2] < 0 || v[3] < 0 || v[1] > INT32_MAX || v[2] > INT32_MAX)
    throw BadArgs{fmt::format("--hubs '{}': need N >= 1 and AVG, HUBS, HUBDEG >= 0", text)};
  return {v[0], static_cast<int32_t>(v[1]), static_cast<int32_t>(v[2]), v[3]};
}

std::vector<dfgnn_model_t> parse_models(const std::vector<std::string>& args) {
  std::vector<dfgnn_model_t> out;
  auto add = [&](dfgnn_model_t m) {
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  };
  for (const std::string& arg : args)
    for (const std::string& m : split(arg, ',')) {
      if (m == "all") {
        for (dfgnn_model_t x : {DFGNN_MODEL_GAT, DFGNN_MODEL_GATV2, DFGNN_MODEL_TRANSFORMER, DFGNN_MODEL_AGNN}) add(x);
      } else if (m == "gat") {
        add(DFGNN_MODEL_GAT);
      } else if (m == "gatv2") {
        add(DFGNN_MODEL_GATV2);
      } else if (m == "transformer" || m == "gt") {
        add(DFGNN_MODEL_TRANSFORMER);
      } else if (m == "agnn") {
        add(DFGNN_MODEL_AGNN);
      } else {
        throw BadArgs{fmt::format("--model '{}' is not gat, gatv2, transformer, agnn or all", m)};
      }
    }
  if (out.empty()) throw BadArgs{"--model lists no model"};
  return out;
}

std::vector<dfgnn_dtype_t> parse_dtypes(const std::vector<std::string>& args) {
  std::vector<dfgnn_dtype_t> out;
  for (const std::string& arg : args)
    for (const std::string& d : split(arg, ',')) {
      dfgnn_dtype_t t;
      if (d == "float32" || d == "fp32" || d == "f32") {
        t = DFGNN_DTYPE_FLOAT32;
      } else if (d == "float16" || d == "fp16" || d == "f16" || d == "half") {
        t = DFGNN_DTYPE_FLOAT16;
      } else if (d == "bfloat16" || d == "bf16") {
        t = DFGNN_DTYPE_BFLOAT16;
      } else {
        throw BadArgs{fmt::format("--dtype '{}' is not float32, float16 or bfloat16", d)};
      }
      if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
  if (out.empty()) throw BadArgs{"--dtype lists no dtype"};
  return out;
}

// Returns nullopt after printing help or the version.
std::optional<Options> parse_args(int argc, char** argv) {
  po::options_description visible(
      "Usage: dfgnn-tune [options] [GRAPH...]\n\n"
      "Tunes dfgnn's fused attention ops on the GPU for each graph x model x dtype x direction\n"
      "(a 'problem'), stores the winners in the tuning database, and shows how a second run\n"
      "dispatches from it. GRAPH is an edge-list file (.txt, .txt.gz), a Matrix Market file (.mtx)\n"
      "or a dataset directory (DIR/edges.txt[.gz]); --rmat and --hubs add generated graphs.\n"
      "Without a GPU the graphs are still loaded, validated and fingerprinted.\n"
      "Exit codes: 0 ok, 1 failure, 2 bad arguments, 3 no usable GPU.\n\nOptions");
  Options o;
  std::vector<std::string> paths, models, dtypes, hubs;
  std::vector<int> rmat_scales;
  int64_t rmat_edges = 0;
  std::string direction = "forward", db, site;
  visible.add_options()
    ("help,h", "show this help")
    ("version", "print the version")
    ("graph", po::value(&paths)->composing(), "graph file or dataset directory (repeatable; same as a positional GRAPH)")
    ("rmat", po::value(&rmat_scales)->composing(), "R-MAT graph with 2^SCALE nodes (repeatable); a,b,c = 0.57,0.19,0.19, deduplicated, no self-loops, permuted ids")
    ("rmat-edges", po::value(&rmat_edges), "edges to sample per R-MAT graph (default 16 * 2^SCALE)")
    ("hubs", po::value(&hubs)->composing(), "planted-hub graph N,AVG,HUBS,HUBDEG: N nodes with AVG in-edges each, HUBS hubs with HUBDEG in- and out-edges (repeatable)")
    ("self-loops", "remove self-loops and add one per node (PyG's add_self_loops) on every graph")
    ("seed", po::value(&o.seed)->default_value(1), "seed of generated graphs")
    ("model", po::value(&models)->composing(), "gat, gatv2, transformer, agnn or all (repeatable, or comma-separated; default transformer)")
    ("dtype", po::value(&dtypes)->composing(), "float32, float16 or bfloat16 (repeatable, or comma-separated; default float32)")
    ("heads", po::value(&o.heads)->default_value(1), "heads H")
    ("dim", po::value(&o.dim)->default_value(128), "channels per head D")
    ("direction", po::value(&direction)->default_value("forward"), "forward, backward or both (both: two problems)")
    ("budget", po::value(&o.budget)->default_value(20.0), "tuning time per problem in seconds (a backward problem splits it over its two passes)")
    ("db", po::value(&db), "user (writable) tuning database; default $DFGNN_CACHE_DIR/tuning.db, else $XDG_CACHE_HOME/dfgnn/tuning.db, else ~/.cache/dfgnn/tuning.db")
    ("site", po::value(&site), "read-only site databases, ':'-separated, highest priority first (default $DFGNN_SITE_DB)")
    ("json", po::value(&o.json_path), "write every problem's report (tuning and second-run view) to this JSON file");
  po::options_description all;
  all.add(visible).add_options()("positional-graph", po::value(&paths)->composing());
  po::positional_options_description positional;
  positional.add("positional-graph", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw BadArgs{fmt::format("{} (see --help)", e.what())};
  }
  if (vm.count("help")) {
    std::cout << visible << "\n";
    return std::nullopt;
  }
  if (vm.count("version")) {
    fmt::print("{} {}\n", kTool, dfgnnGetVersion());
    return std::nullopt;
  }
  for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + shell_quote(argv[i]);
  o.self_loops = vm.count("self-loops") > 0;
  if (paths.empty() && rmat_scales.empty() && hubs.empty())
    throw BadArgs{"no graph given: name GRAPH files or directories, or use --rmat SCALE or --hubs N,AVG,HUBS,HUBDEG (see --help)"};
  if (rmat_edges < 0) throw BadArgs{"--rmat-edges must be >= 0"};
  if (vm.count("rmat-edges") && rmat_scales.empty()) throw BadArgs{"--rmat-edges needs --rmat"};
  for (const std::string& p : paths) {
    if (p.empty()) throw BadArgs{"an empty graph path was given"};
    GraphSpec g;
    g.kind = GraphSpec::Kind::File;
    g.path = p;
    o.graphs.push_back(g);
  }
  for (int s : rmat_scales) {
    if (s < 1 || s > 30) throw BadArgs{fmt::format("--rmat {} is not a scale in 1..30", s)};
    GraphSpec g;
    g.kind = GraphSpec::Kind::Rmat;
    g.scale = s;
    g.edges = rmat_edges > 0 ? rmat_edges : (int64_t{16} << s);
    o.graphs.push_back(g);
  }
  for (const std::string& h : hubs) {
    GraphSpec g;
    g.kind = GraphSpec::Kind::Hubs;
    g.hubs = parse_hubs(h);
    g.text = h;
    o.graphs.push_back(g);
  }
  o.models = parse_models(models.empty() ? std::vector<std::string>{"transformer"} : models);
  o.dtypes = parse_dtypes(dtypes.empty() ? std::vector<std::string>{"float32"} : dtypes);
  if (o.heads < 1) throw BadArgs{fmt::format("--heads {} must be >= 1", o.heads)};
  if (o.dim < 1) throw BadArgs{fmt::format("--dim {} must be >= 1", o.dim)};
  if (direction == "forward") {
    o.directions = {DFGNN_FORWARD};
  } else if (direction == "backward") {
    o.directions = {DFGNN_BACKWARD};
  } else if (direction == "both") {
    o.directions = {DFGNN_FORWARD, DFGNN_BACKWARD};
  } else {
    throw BadArgs{fmt::format("--direction '{}' is not forward, backward or both", direction)};
  }
  if (!(o.budget > 0) || !std::isfinite(o.budget))
    throw BadArgs{fmt::format("--budget {} must be a positive number of seconds", o.budget)};
  if (vm.count("db")) {
    if (db.empty()) throw BadArgs{"--db needs a file name (tuning results must be stored somewhere)"};
    std::error_code ec;
    if (std::filesystem::is_directory(db, ec)) throw BadArgs{fmt::format("--db {} is a directory", db)};
    o.db = db;
  }
  if (vm.count("site")) o.site = site;
  if (vm.count("json")) {
    if (o.json_path.empty()) throw BadArgs{"--json needs a file name"};
    const std::filesystem::path parent = std::filesystem::absolute(o.json_path).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec))
      throw BadArgs{fmt::format("--json {}: directory {} does not exist", o.json_path, parent.string())};
    if (std::filesystem::is_directory(o.json_path, ec)) throw BadArgs{fmt::format("--json {} is a directory", o.json_path)};
  }
  return o;
}

// The user database dfgnnSetDatabase(ctx, NULL, ...) would use ("" if none).
std::string default_user_db() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "");
  };
  if (std::string d = env("DFGNN_CACHE_DIR"); !d.empty()) return (std::filesystem::path(d) / "tuning.db").string();
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return (std::filesystem::path(d) / "dfgnn" / "tuning.db").string();
  if (std::string d = env("HOME"); !d.empty()) return (std::filesystem::path(d) / ".cache" / "dfgnn" / "tuning.db").string();
  return {};
}

// ---------------------------------------------------------------- graphs and problems

struct LoadedGraph {
  std::string name;        // display name
  std::string bench_args;  // how dfgnn-bench selects the same graph
  dfgnn_graph_t graph = nullptr;
  dfgnn_fingerprint_t fp{};
  std::string bucket_key;
  json fingerprint;  // serialized form
};

struct Graphs {
  std::vector<LoadedGraph> list;
  ~Graphs() {
    for (LoadedGraph& g : list) dfgnnGraphDestroy(g.graph);
  }
};

struct ContextGuard {
  dfgnn_context_t ctx = nullptr;
  ~ContextGuard() {
    if (ctx) dfgnnDestroy(ctx);
  }
};

void print_fingerprint(const LoadedGraph& g) {
  const dfgnn_fingerprint_t& fp = g.fp;
  fmt::print("graph {} (valid)\n", g.name);
  fmt::print("  fingerprint: {} nodes, {} edges, mean in-degree {:.2f}, max {}, p50 {} p90 {} p99 {} p99.9 {}, "
             "cv {:.3f}, gini {:.3f}, top 1% rows hold {:.1f}% of edges\n",
             fp.num_nodes, fp.num_edges, fp.mean_degree, fp.max_degree, fp.p50, fp.p90, fp.p99, fp.p999, fp.cv, fp.gini,
             100 * fp.top1pct_edge_share);
  fmt::print("  bucket key: {}\n", g.bucket_key);
}

// Loads every graph; a missing or unreadable file is a Failure (exit 1) with the library's message.
void load_graphs(dfgnn_context_t ctx, const Options& o, Graphs& graphs) {
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.add_self_loops = o.self_loops ? 1 : 0;
  const std::string loops = o.self_loops ? " --self-loops" : "";
  for (const GraphSpec& spec : o.graphs) {
    LoadedGraph g;
    dfgnn_status_t st = DFGNN_STATUS_SUCCESS;
    switch (spec.kind) {
      case GraphSpec::Kind::File:
        st = dfgnnGraphCreateFromFile(ctx, spec.path.c_str(), &options, &g.graph);
        if (st != DFGNN_STATUS_SUCCESS)
          throw Failure{fmt::format("cannot read graph {}: {}: {}", spec.path, dfgnnGetStatusString(st),
                                    dfgnnGetLastErrorMessage())};
        g.name = spec.path;
        g.bench_args = "--graph " + shell_quote(spec.path);
        break;
      case GraphSpec::Kind::Rmat:
        check(dfgnnGraphCreateRmat(ctx, spec.scale, spec.edges, 0.57, 0.19, 0.19,
                                   DFGNN_RMAT_DEDUPLICATE | DFGNN_RMAT_NO_SELF_LOOPS | DFGNN_RMAT_PERMUTE_IDS, o.seed,
                                   &options, &g.graph),
              fmt::format("generate R-MAT graph (scale {}, {} edges)", spec.scale, spec.edges));
        g.name = fmt::format("rmat-s{}-e{}-seed{}", spec.scale, spec.edges, o.seed);
        g.bench_args = fmt::format("--rmat {} --rmat-edges {} --seed {}", spec.scale, spec.edges, o.seed);
        break;
      case GraphSpec::Kind::Hubs: {
        const HubSpec& h = spec.hubs;
        check(dfgnnGraphCreatePlantedHubs(ctx, h.nodes, h.avg_degree, h.hubs, h.hub_degree, o.seed, &options, &g.graph),
              fmt::format("generate planted-hub graph {}", spec.text));
        g.name = fmt::format("hubs-n{}-avg{}-h{}x{}-seed{}", h.nodes, h.avg_degree, h.hubs, h.hub_degree, o.seed);
        g.bench_args = fmt::format("--hubs {},{},{},{} --seed {}", h.nodes, h.avg_degree, h.hubs, h.hub_degree, o.seed);
        break;
      }
    }
    graphs.list.push_back(g);  // owned from here on
    LoadedGraph& entry = graphs.list.back();
    if (o.self_loops) entry.name += "+loops";
    entry.bench_args += loops;
    check(dfgnnGraphGetFingerprint(entry.graph, &entry.fp), "fingerprint of " + entry.name);
    entry.bucket_key = read_text(
        [&](char* b, size_t c, size_t* l) { return dfgnnFingerprintBucketKey(&entry.fp, b, c, l); }, "bucket key");
    const std::string text = read_text(
        [&](char* b, size_t c, size_t* l) { return dfgnnFingerprintSerialize(&entry.fp, b, c, l); }, "fingerprint text");
    entry.fingerprint = json::parse(text, nullptr, false);
    print_fingerprint(entry);
  }
}

struct Problem {
  size_t graph = 0;
  dfgnn_op_t op{};
  dfgnn_direction_t direction = DFGNN_FORWARD;
  std::string default_schedule;  // what dispatch would run before tuning (default rule)
  // Results.
  std::string status = "planned";  // planned, tuned, failed, skipped (no GPU)
  std::string error;
  json report, second_run;
  std::string reproduce;
  double elapsed_s = 0;
};

std::string problem_label(const Problem& p, const Graphs& graphs) {
  return fmt::format("{} {} {} H={} D={} {}", graphs.list[p.graph].name, model_name(p.op.model), dtype_name(p.op.dtype),
                     p.op.heads, p.op.dim, direction_name(p.direction));
}

// Every (graph, model, dtype, direction); an op this build cannot serve is an argument error.
std::vector<Problem> plan(dfgnn_context_t ctx, const Options& o, const Graphs& graphs) {
  std::vector<Problem> problems;
  for (size_t gi = 0; gi < graphs.list.size(); ++gi)
    for (dfgnn_model_t m : o.models)
      for (dfgnn_dtype_t d : o.dtypes)
        for (dfgnn_direction_t dir : o.directions) {
          Problem p;
          p.graph = gi;
          p.op = dfgnnOpDefault(m, d, o.heads, o.dim);
          p.direction = dir;
          size_t length = 0;
          const dfgnn_graph_t g = graphs.list[gi].graph;
          const dfgnn_status_t st = dfgnnGetSchedule(ctx, g, &p.op, dir, nullptr, nullptr, 0, &length);
          if (st == DFGNN_STATUS_INVALID_ARGUMENT || st == DFGNN_STATUS_NOT_SUPPORTED)
            throw BadArgs{fmt::format("{} {} H={} D={} {}: {}", model_name(m), dtype_name(d), o.heads, o.dim,
                                      direction_name(dir), dfgnnGetLastErrorMessage())};
          p.default_schedule = read_text(
              [&](char* b, size_t c, size_t* l) { return dfgnnGetSchedule(ctx, g, &p.op, dir, nullptr, b, c, l); },
              "dfgnnGetSchedule");
          problems.push_back(std::move(p));
        }
  return problems;
}

// ---------------------------------------------------------------- progress

// Problems done / total, elapsed, ETA from the average time per finished problem (before the first
// finishes: from the budget). On a terminal a bar on stderr, redrawn every second; otherwise one
// line per finished problem.
class Progress {
 public:
  Progress(size_t total, double budget) : total_(total), budget_(budget), tty_(::isatty(STDERR_FILENO) == 1) {
    start_ = last_ = Clock::now();
    if (tty_) ticker_ = std::thread([this] { tick(); });
  }
  ~Progress() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (ticker_.joinable()) ticker_.join();
    std::lock_guard lock(mutex_);
    clear();
  }

  void begin(const std::string& label) {
    std::lock_guard lock(mutex_);
    current_ = label;
    draw();
  }

  void finish(const std::string& label, double seconds, bool ok) {
    std::lock_guard lock(mutex_);
    ++done_;
    last_ = Clock::now();
    current_.clear();
    if (tty_) {
      draw();
    } else {
      fmt::print(stderr, "{}: [{}/{}] {} {} in {:.1f} s; elapsed {}, ETA {}\n", kTool, done_, total_, label,
                 ok ? "tuned" : "FAILED", seconds, duration_text(elapsed()), duration_text(eta()));
      std::fflush(stderr);
    }
  }

  // Prints a block on stdout without tearing the bar.
  void print(const std::string& text) {
    std::lock_guard lock(mutex_);
    clear();
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    draw();
  }

 private:
  using Clock = std::chrono::steady_clock;

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double eta() const {
    const double since_last = std::chrono::duration<double>(Clock::now() - last_).count();
    const double per = done_ > 0 ? std::chrono::duration<double>(last_ - start_).count() / done_ : budget_;
    const size_t left = total_ - done_;
    if (left == 0) return 0;
    return std::max(0.0, per * static_cast<double>(left) - (current_.empty() ? 0.0 : since_last));
  }

  void draw() {
    if (!tty_) return;
    constexpr int kWidth = 24;
    const double fraction = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(filled, '=');
    if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
    std::string line = fmt::format("[{}] {}/{} problems  elapsed {}  ETA {}", bar, done_, total_,
                                   duration_text(elapsed()), duration_text(eta()));
    if (!current_.empty()) line += "  tuning " + current_;
    fmt::print(stderr, "\r\033[K{}", line);
    std::fflush(stderr);
    drawn_ = true;
  }
  void clear() {
    if (tty_ && drawn_) {
      fmt::print(stderr, "\r\033[K");
      std::fflush(stderr);
      drawn_ = false;
    }
  }
  void tick() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::seconds(1));
      if (!stop_) draw();
    }
  }

  size_t total_, done_ = 0;
  double budget_;
  bool tty_, drawn_ = false, stop_ = false;
  Clock::time_point start_, last_;
  std::string current_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
};

// ---------------------------------------------------------------- reporting

std::string ms_text(const json& v) {
  if (!v.is_number()) return "-";
  const double x = v.get<double>();
  return std::isfinite(x) && x > 0 ? fmt::format("{:.4f} ms", x) : "-";
}

std::string str(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

double num(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// "forward", "backward row", ... from a report's "pass" field.
std::string pass_label(const json& pass) {
  std::string p = str(pass, "pass");
  std::replace(p.begin(), p.end(), '_', ' ');
  return p.empty() ? "pass" : p;
}

// The schedule text of a direction from its per-pass entries (backward: "ROW|COL").
std::string joined(const json& passes, const char* key) {
  std::string out;
  for (const json& p : passes) {
    const std::string s = str(p, key);
    if (s.empty()) return {};
    out += (out.empty() ? "" : "|") + s;
  }
  return out;
}

std::string reproduce_command(const Problem& p, const LoadedGraph& g, const json& report) {
  const std::string winner = joined(report, "winner"), def = joined(report, "default");
  if (winner.empty()) return {};
  std::string schedules = winner;
  if (!def.empty() && def != winner) schedules += ";" + def;
  return fmt::format("dfgnn-bench {} --model {} --dtype {} --heads {} --dim {} --direction {} --no-baseline --schedules {}",
                     g.bench_args, model_name(p.op.model), dtype_name(p.op.dtype), p.op.heads, p.op.dim,
                     direction_name(p.direction), shell_quote(schedules));
}

std::string describe_tuning(const json& report) {
  std::string out;
  for (const json& pass : report) {
    const double speedup = num(pass, "speedup_over_default");
    out += fmt::format("  {}:\n", pass_label(pass));
    out += fmt::format("    winner     {}  {}  ({})\n", str(pass, "winner"), ms_text(pass.value("winner_median_ms", json())),
                       std::isfinite(speedup) ? fmt::format("{:.2f}x over the default", speedup)
                                              : std::string("speedup over the default unknown"));
    out += fmt::format("    default    {}  {}{}\n", str(pass, "default"), ms_text(pass.value("default_median_ms", json())),
                       pass.value("default_failed", false) ? "  (failed its check)" : "");
    const std::string ru = str(pass, "runner_up");
    out += fmt::format("    runner-up  {}\n", ru.empty() ? std::string("none")
                                                        : ru + "  " + ms_text(pass.value("runner_up_median_ms", json())));
    out += fmt::format("    measured   {} candidates, {} timings in {:.1f} s{}\n", pass.value("candidates", json(0)).dump(),
                       pass.value("timings", json(0)).dump(), num(pass, "elapsed_s"),
                       pass.value("budget_exhausted", false) ? " (budget exhausted)" : "");
    if (const std::string why = str(pass, "reason"); !why.empty()) out += fmt::format("    why        {}\n", why);
    if (!pass.value("stored", false))
      out += fmt::format("    NOT STORED in the database: {}\n", str(pass, "store_error"));
  }
  return out;
}

std::string describe_second_run(const json& explain) {
  std::string out = "  second run (fresh context, same database):\n";
  for (const json& pass : explain) {
    const std::string level = str(pass, "level");
    const std::string answered = level == "cache" && !str(pass, "origin").empty() ? str(pass, "origin") : level;
    out += fmt::format("    {}: {} -> {}", pass_label(pass), answered, str(pass, "schedule"));
    if (pass.contains("median_ms")) out += fmt::format("  ({} tuned", ms_text(pass["median_ms"]));
    if (const std::string src = str(pass, "source"); !src.empty()) out += fmt::format(", from {}", src);
    if (pass.contains("median_ms")) out += ")";
    if (answered == "nearest") out += fmt::format("  distance {:.3f}", num(pass, "distance"));
    out += "\n";
  }
  return out;
}

json problem_json(const Problem& p, const Graphs& graphs, double budget) {
  const LoadedGraph& g = graphs.list[p.graph];
  json j;
  j["graph"] = g.name;
  j["nodes"] = g.fp.num_nodes;
  j["edges"] = g.fp.num_edges;
  j["bucket_key"] = g.bucket_key;
  j["fingerprint"] = g.fingerprint;
  j["model"] = model_name(p.op.model);
  j["dtype"] = dtype_name(p.op.dtype);
  j["heads"] = p.op.heads;
  j["dim"] = p.op.dim;
  j["direction"] = direction_name(p.direction);
  j["budget_s"] = budget;
  j["default_schedule"] = p.default_schedule;
  j["status"] = p.status;
  if (!p.error.empty()) j["error"] = p.error;
  if (p.status == "tuned" || p.status == "failed") j["elapsed_s"] = p.elapsed_s;
  if (!p.report.is_null()) j["report"] = p.report;
  if (!p.second_run.is_null()) j["second_run"] = p.second_run;
  if (!p.reproduce.empty()) j["reproduce"] = p.reproduce;
  return j;
}

void write_json(const Options& o, const Graphs& graphs, const std::vector<Problem>& problems, const std::string& user_db,
                const std::string& gpu) {
  if (o.json_path.empty()) return;
  json doc;
  doc["tool"] = kTool;
  doc["version"] = dfgnnGetVersion();
  doc["date"] = iso_date();
  doc["command"] = o.command_line;
  doc["database"] = {{"user", user_db}, {"site", o.site ? json(*o.site) : json(nullptr)}};
  doc["gpu"] = gpu;
  doc["problems"] = json::array();
  for (const Problem& p : problems) doc["problems"].push_back(problem_json(p, graphs, o.budget));
  std::ofstream out(o.json_path);
  out << doc.dump(2) << "\n";
  out.close();
  if (!out) throw Failure{fmt::format("writing {} failed", o.json_path)};
  fmt::print("wrote {}\n", o.json_path);
}

// Tunes one problem, then asks a fresh context on the same database how it dispatches.
void tune_one(dfgnn_context_t ctx, const Options& o, const Graphs& graphs, Problem& p) {
  const LoadedGraph& g = graphs.list[p.graph];
  const std::string text = read_text(
      [&](char* b, size_t c, size_t* l) { return dfgnnTune(ctx, g.graph, &p.op, p.direction, o.budget, b, c, l); },
      "dfgnnTune");
  p.report = json::parse(text, nullptr, false);
  if (!p.report.is_array()) throw Failure{"dfgnnTune returned a report that is not a JSON array: " + text};
  p.reproduce = reproduce_command(p, g, p.report);

  ContextGuard fresh;
  check(dfgnnCreate(&fresh.ctx), "dfgnnCreate");
  check(dfgnnSetDatabase(fresh.ctx, o.db ? o.db->c_str() : nullptr, o.site ? o.site->c_str() : nullptr),
        "dfgnnSetDatabase");
  const std::string explain = read_text(
      [&](char* b, size_t c, size_t* l) { return dfgnnExplain(fresh.ctx, g.graph, &p.op, p.direction, b, c, l); },
      "dfgnnExplain");
  p.second_run = json::parse(explain, nullptr, false);
  if (!p.second_run.is_array()) p.second_run = json::array();
}

int run(int argc, char** argv) {
  std::optional<Options> parsed = parse_args(argc, argv);
  if (!parsed) return 0;
  const Options& o = *parsed;

  ContextGuard context;
  check(dfgnnCreate(&context.ctx), "dfgnnCreate");
  dfgnn_context_t ctx = context.ctx;
  check(dfgnnSetDatabase(ctx, o.db ? o.db->c_str() : nullptr, o.site ? o.site->c_str() : nullptr), "dfgnnSetDatabase");

  Graphs graphs;
  load_graphs(ctx, o, graphs);
  std::vector<Problem> problems = plan(ctx, o, graphs);

  const std::string user_db = o.db ? *o.db : default_user_db();
  if (user_db.empty())
    throw BadArgs{"no tuning database: give --db PATH (none of DFGNN_CACHE_DIR, XDG_CACHE_HOME, HOME is set)"};
  std::string sites = o.site ? *o.site : (std::getenv("DFGNN_SITE_DB") ? std::getenv("DFGNN_SITE_DB") : "");
  fmt::print("{} problem(s): {} graph(s) x {} model(s) x {} dtype(s) x {} direction(s), H={} D={}, budget {:g} s each "
             "(at most {})\n",
             problems.size(), graphs.list.size(), o.models.size(), o.dtypes.size(), o.directions.size(), o.heads, o.dim,
             o.budget, duration_text(o.budget * static_cast<double>(problems.size())));
  for (const Problem& p : problems)
    fmt::print("  {}: default schedule {}\n", problem_label(p, graphs), p.default_schedule);
  fmt::print("database: {} (user){}\n", user_db, sites.empty() ? std::string() : ", sites " + sites);

  int has_device = 0;
  const char* reason = nullptr;
  check(dfgnnHasDevice(ctx, &has_device, &reason), "dfgnnHasDevice");
  if (!has_device) {
    const std::string why = reason != nullptr && *reason ? reason : "unknown reason";
    for (Problem& p : problems) p.status = "skipped";
    write_json(o, graphs, problems, user_db, "none: " + why);
    std::fflush(stdout);
    fmt::print(stderr, "{}: tuning needs a GPU: {}; the graphs were loaded, validated and fingerprinted, nothing "
                       "was tuned\n",
               kTool, why);
    return kExitNoGpu;
  }

  int failures = 0;
  {
    Progress progress(problems.size(), o.budget);
    for (size_t k = 0; k < problems.size(); ++k) {
      Problem& p = problems[k];
      const std::string label = problem_label(p, graphs);
      progress.begin(label);
      const auto t0 = std::chrono::steady_clock::now();
      std::string block = fmt::format("\n[{}/{}] {}\n", k + 1, problems.size(), label);
      try {
        tune_one(ctx, o, graphs, p);
        p.status = "tuned";
        block += describe_tuning(p.report);
        if (!p.reproduce.empty()) block += "  reproduce: " + p.reproduce + "\n";
        block += describe_second_run(p.second_run);
        for (const json& pass : p.report)
          if (!pass.value("stored", false)) {
            p.status = "failed";
            p.error = "tuned, but the result was not stored: " + str(pass, "store_error");
          }
        if (p.status == "failed") ++failures;
      } catch (const Failure& f) {
        p.status = "failed";
        p.error = f.message;
        block += "  FAILED: " + f.message + "\n";
        ++failures;
      }
      p.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      progress.print(block);
      progress.finish(label, p.elapsed_s, p.status == "tuned");
    }
  }
  write_json(o, graphs, problems, user_db, "available");
  fmt::print("\n{} of {} problem(s) tuned into {}\n", problems.size() - failures, problems.size(), user_db);
  if (failures > 0) {
    fmt::print(stderr, "{}: {} problem(s) failed (see above)\n", kTool, failures);
    return kExitFailure;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const BadArgs& e) {
    fmt::print(stderr, "{}: {}\n", kTool, e.message);
    return kExitBadArgs;
  } catch (const Failure& e) {
    fmt::print(stderr, "{}: {}\n", kTool, e.message);
    return kExitFailure;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", kTool, e.what());
    return kExitFailure;
  }
}
