// dfgnn-tune: tunes the schedules of dfgnn's fused ops for one or more graphs into a tuning
// database, then shows how a second run dispatches from that database. Uses only the public C API.
//
// A *problem* is one (graph, model, dtype, direction); each gets --budget seconds of dfgnnTune.
// Per problem the tool prints the winner, its speedup over the default schedule, what dispatch
// answered before from the databases (measured right after the default), the runner-up and
// a dfgnn-bench command that reproduces the measurement, then asks a fresh context on the same
// database which level answers (dfgnnExplain: "exact" after tuning).
//
// Without a GPU it still loads and validates every graph, prints fingerprints and bucket keys and
// checks every op, then exits 3 saying that tuning needs a GPU.
//
// Exit codes: 0 success, 1 failure (a graph could not be read, a tuning call failed), 2 bad
// arguments, 3 no usable GPU (after the graphs were loaded and checked).
#include "cli_common.hpp"

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
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace po = boost::program_options;
using nlohmann::json;

namespace {

using cli::BadArgs;
using cli::check;
using cli::direction_name;
using cli::dtype_name;
using cli::Failure;
using cli::kExitFailure;
using cli::kExitNoGpu;
using cli::model_name;
using cli::read_text;

constexpr const char* kTool = "dfgnn-tune";

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
  if (!(seconds >= 0 && seconds < 1e15)) return "--:--";  // NaN, negative, or near llround's limit (9.2e18)
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

// ---------------------------------------------------------------- options

// One line of --compile-listed: a schedule of one pass of an op.
struct Listed {
  dfgnn_op_t op{};
  int pass = 0;  // 0 forward, 1 backward row pass, 2 backward column pass
  std::string schedule;
  std::string where;  // FILE:LINE
};

std::vector<Listed> read_listed(const std::string& path, float dropout) {
  std::ifstream in(path);
  if (!in) throw BadArgs{fmt::format("--compile-listed {}: cannot be read", path)};
  std::vector<Listed> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::string model, dtype, pass, schedule, extra;
    int heads = 0, dim = 0;
    if (!(words >> model)) continue;  // blank
    Listed l;
    l.where = fmt::format("{}:{}", path, number);
    const std::vector<std::string> passes{"forward", "backward_row", "backward_col"};
    if (!(words >> dtype >> heads >> dim >> pass >> schedule) || (words >> extra))
      throw BadArgs{fmt::format("{}: expected 'MODEL DTYPE HEADS DIM PASS SCHEDULE', got '{}'", l.where, line)};
    const auto at = std::find(passes.begin(), passes.end(), pass);
    if (at == passes.end()) throw BadArgs{fmt::format("{}: pass '{}' is not forward, backward_row or backward_col", l.where, pass)};
    std::vector<dfgnn_model_t> models;
    std::vector<dfgnn_dtype_t> dtypes;
    try {
      models = cli::parse_models({model});
      dtypes = cli::parse_dtypes({dtype});
      cli::check_heads_dim(heads, dim);
    } catch (const BadArgs& e) {
      throw BadArgs{fmt::format("{}: {}", l.where, e.message)};
    }
    if (models.size() != 1 || dtypes.size() != 1)
      throw BadArgs{fmt::format("{}: one model and one dtype, not '{}' '{}'", l.where, model, dtype)};
    l.op = dfgnnOpDefault(models[0], dtypes[0], heads, dim);
    l.op.dropout = dropout;
    l.pass = static_cast<int>(at - passes.begin());
    l.schedule = schedule;
    out.push_back(std::move(l));
  }
  return out;
}

struct Options {
  std::vector<cli::GraphSpec> graphs;
  std::vector<dfgnn_model_t> models;
  std::vector<dfgnn_dtype_t> dtypes;
  std::vector<dfgnn_direction_t> directions;
  int heads = 1, dim = 128;
  bool self_loops = false;
  bool edge_features = false;  // ops with edge features (PyG's edge_dim): their own kernels and database key
  float dropout = 0;           // attention dropout: its own kernels, the same database key (so not tuned here)
  uint64_t seed = 1;
  double budget = 20;
  std::optional<std::string> db;    // nullopt: dfgnnSetDatabase(NULL) rules
  std::optional<std::string> site;  // nullopt: $DFGNN_SITE_DB
  std::string json_path;
  std::string command_line;
  bool explain = false;  // --explain: show how dispatch answers now, tune nothing
  std::optional<int> compile_defaults_arch;  // --compile-defaults ARCH: compile what dispatch runs, tune nothing
  std::vector<Listed> compile_listed;        // --compile-listed FILE: and these schedules too
};

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
  cli::GraphArgs graph_args;
  std::vector<std::string> models, dtypes;
  std::string direction = "forward", db, site, seed = "1", listed_path;
  visible.add_options()
    ("help,h", "show this help")
    ("version", "print the version")
    ("graph", po::value(&graph_args.paths)->composing(), "graph file or dataset directory (repeatable; same as a positional GRAPH)")
    ("rmat", po::value(&graph_args.rmat_scales)->composing(), "R-MAT graph with 2^SCALE nodes (repeatable); a,b,c = 0.57,0.19,0.19, deduplicated, no self-loops, permuted ids")
    ("rmat-edges", po::value(&graph_args.rmat_edges), "edges to sample per R-MAT graph (default 16 * 2^SCALE)")
    ("hubs", po::value(&graph_args.hubs)->composing(), "planted-hub graph N,AVG,HUBS,HUBDEG: N nodes with AVG in-edges each, HUBS hubs with HUBDEG in- and out-edges (repeatable)")
    ("self-loops", "remove self-loops and add one per node (PyG's add_self_loops) on every graph")
    ("seed", po::value(&seed)->default_value("1"), "seed of generated graphs")
    ("model", po::value(&models)->composing(), (cli::model_names() + " or all (repeatable, or comma-separated; default transformer)").c_str())
    ("dtype", po::value(&dtypes)->composing(), "float32, float16 or bfloat16 (repeatable, or comma-separated; default float32)")
    ("heads", po::value(&o.heads)->default_value(1), "heads H")
    ("dim", po::value(&o.dim)->default_value(128), "channels per head D")
    ("edge-features", "tune the ops with edge features (PyG's edge_dim; GAT, GATv2 and Transformer)")
    ("dropout", po::value(&o.dropout), "attention dropout rate in [0, 1) of the ops, with --compile-defaults or --explain "
                "(dropout compiles its own kernels; tuning results are shared with the op without it)")
    ("direction", po::value(&direction)->default_value("forward"), "forward, backward or both (both: two problems)")
    ("budget", po::value(&o.budget)->default_value(20.0), "tuning time per problem in seconds (a backward problem splits it over its two passes)")
    ("db", po::value(&db), "user (writable) tuning database; default $DFGNN_CACHE_DIR/tuning.db, else $XDG_CACHE_HOME/dfgnn/tuning.db, else ~/.cache/dfgnn/tuning.db")
    ("site", po::value(&site), "read-only site databases, ':'-separated, highest priority first (default $DFGNN_SITE_DB)")
    ("json", po::value(&o.json_path), "write every problem's report (tuning and second-run view) to this JSON file")
    ("explain", "tune nothing: show how dispatch answers each problem now (which level, database layer, neighbour "
                "or rule) from the databases; needs no GPU (without one, the default rule answers)")
    ("compile-defaults", po::value<int>(), "tune nothing: compile, for compute capability ARCH (e.g. 90), the kernels "
                "dispatch runs for each problem now into the user database's modules (needs no GPU; without one, the "
                "default rule answers): how the shipped modules are made (bench/ship-modules.sh)")
    ("compile-listed", po::value(&listed_path), "with --compile-defaults: also compile the schedules listed in "
                "FILE, one per line as 'MODEL DTYPE HEADS DIM PASS SCHEDULE' (PASS: forward, backward_row or "
                "backward_col; --dropout applies): the shipped database's winners, which dispatch runs on that GPU");
  po::options_description all;
  all.add(visible).add_options()("positional-graph", po::value(&graph_args.paths)->composing());
  po::positional_options_description positional;
  positional.add("positional-graph", -1);
  po::variables_map vm;
  cli::parse_options([&] {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  });
  if (cli::print_help_or_version(kTool, vm.count("help") > 0, vm.count("version") > 0, visible)) return std::nullopt;
  for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + shell_quote(argv[i]);
  o.self_loops = vm.count("self-loops") > 0;
  o.edge_features = vm.count("edge-features") > 0;
  o.explain = vm.count("explain") > 0;
  if (!(o.dropout >= 0 && o.dropout < 1)) throw BadArgs{fmt::format("--dropout {} is not a rate in [0, 1)", o.dropout)};
  if (vm.count("compile-defaults")) {
    const int arch = vm["compile-defaults"].as<int>();
    if (arch < 10 || arch > 200) throw BadArgs{fmt::format("--compile-defaults {} is not a compute capability such as 90", arch)};
    if (o.explain) throw BadArgs{"--explain and --compile-defaults exclude each other"};
    o.compile_defaults_arch = arch;
  }
  if (vm.count("compile-listed")) {
    if (!o.compile_defaults_arch) throw BadArgs{"--compile-listed goes with --compile-defaults ARCH"};
    o.compile_listed = read_listed(listed_path, o.dropout);
  }
  if (o.dropout > 0 && !o.explain && !o.compile_defaults_arch)
    throw BadArgs{"--dropout goes with --compile-defaults or --explain: tuning results are stored for the op without "
                  "dropout, so tune without it"};
  if (graph_args.empty())
    throw BadArgs{"no graph given: name GRAPH files or directories, or use --rmat SCALE or --hubs N,AVG,HUBS,HUBDEG (see --help)"};
  graph_args.rmat_edges_given = vm.count("rmat-edges") > 0;
  o.graphs = cli::graph_specs(graph_args, /*reject_empty_paths=*/true);
  o.seed = cli::parse_seed(seed);
  o.models = cli::parse_models(models);
  cli::require_models(o.models);
  o.dtypes = cli::parse_dtypes(dtypes);
  cli::require_dtypes(o.dtypes);
  cli::check_heads_dim(o.heads, o.dim);
  o.directions = cli::parse_direction(direction);
  if (!(o.budget > 0) || !std::isfinite(o.budget))
    throw BadArgs{fmt::format("--budget {} must be a positive number of seconds", o.budget)};
  if (vm.count("db")) {
    if (db.empty()) throw BadArgs{"--db needs a file name (tuning results must be stored somewhere)"};
    std::error_code ec;
    if (std::filesystem::is_directory(db, ec)) throw BadArgs{fmt::format("--db {} is a directory", db)};
    o.db = db;
  }
  if (vm.count("site")) {
    // Split as dfgnnSetDatabase splits it: at every ':', empty entries skipped, nothing trimmed.
    for (size_t pos = 0; pos <= site.size();) {
      const size_t colon = std::min(site.find(':', pos), site.size());
      const std::string path = site.substr(pos, colon - pos);
      std::error_code ec;
      if (!path.empty() && !std::filesystem::is_regular_file(path, ec))
        throw BadArgs{fmt::format("--site {} is not an existing file (a site database is read, never created)", path)};
      pos = colon + 1;
    }
    o.site = site;
  }
  if (vm.count("json")) cli::check_json_path(o.json_path);
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
  for (const cli::GraphSpec& spec : o.graphs) {
    LoadedGraph g;
    std::string what;  // names the graph in a failure
    switch (spec.kind) {
      case cli::GraphSpec::Kind::File:
        what = "cannot read graph " + spec.path;
        g.bench_args = "--graph " + shell_quote(spec.path);
        break;
      case cli::GraphSpec::Kind::Rmat:
        what = fmt::format("generate R-MAT graph (scale {}, {} edges)", spec.scale, spec.edges);
        g.bench_args = fmt::format("--rmat {} --rmat-edges {} --seed {}", spec.scale, spec.edges, o.seed);
        break;
      case cli::GraphSpec::Kind::Hubs: {
        const cli::HubSpec& h = spec.hubs;
        what = "generate planted-hub graph " + spec.text;
        g.bench_args = fmt::format("--hubs {},{},{},{} --seed {}", h.nodes, h.avg_degree, h.hubs, h.hub_degree, o.seed);
        break;
      }
    }
    check(cli::create_graph(ctx, spec, o.seed, &options, &g.graph), what);
    g.name = cli::graph_name(spec, o.seed, o.self_loops);
    graphs.list.push_back(g);  // owned from here on
    LoadedGraph& entry = graphs.list.back();
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
  json report, second_run, explain;
  std::string reproduce;
  double elapsed_s = 0;
};

std::string problem_label(const Problem& p, const Graphs& graphs) {
  return fmt::format("{} {}{} {} H={} D={}{} {}", graphs.list[p.graph].name, model_name(p.op.model),
                     p.op.edge_features ? "+edge" : "", dtype_name(p.op.dtype), p.op.heads, p.op.dim,
                     p.op.dropout > 0 ? fmt::format(" dropout={}", p.op.dropout) : "", direction_name(p.direction));
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
          p.op.edge_features = o.edge_features ? 1 : 0;
          p.op.dropout = o.dropout;
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
    if (const std::string before = str(pass, "before"); !before.empty())
      out += fmt::format("    before     {}  {}  ({})\n", before, ms_text(pass.value("before_median_ms", json())),
                         str(pass, "before_origin"));
    const std::string ru = str(pass, "runner_up");
    out += fmt::format("    runner-up  {}\n", ru.empty() ? std::string("none")
                                                        : ru + "  " + ms_text(pass.value("runner_up_median_ms", json())));
    out += fmt::format("    measured   {} candidates, {} timings in {:.1f} s{}\n", pass.value("candidates", json(0)).dump(),
                       pass.value("timings", json(0)).dump(), num(pass, "elapsed_s"),
                       pass.value("budget_exhausted", false) ? " (budget exhausted)" : "");
    if (pass.contains("compile_wait_s"))
      out += fmt::format("    compiles   {:.1f} s of it waiting on them ({} compile threads)\n", num(pass, "compile_wait_s"),
                         pass.value("compile_threads", json(0)).dump());
    if (const std::string why = str(pass, "reason"); !why.empty()) out += fmt::format("    why        {}\n", why);
    if (!pass.value("stored", false))
      out += fmt::format("    NOT STORED in the database: {}\n", str(pass, "store_error"));
  }
  return out;
}

// One line per pass of dfgnnExplain's answer: what answered first (and from which layer), the
// schedule, then origin_detail's account of it.
std::string describe_explain(const json& explain, const std::string& indent) {
  std::string out;
  for (const json& pass : explain) {
    std::string origin = str(pass, "origin").empty() ? str(pass, "level") : str(pass, "origin");
    if (const std::string layer = str(pass, "layer"); !layer.empty()) origin += " (" + layer + ")";
    out += fmt::format("{}{}: {}{} -> {}\n", indent, pass_label(pass), origin,
                       pass.value("cached", false) ? ", cached" : "", str(pass, "schedule"));
    if (const std::string detail = str(pass, "origin_detail"); !detail.empty())
      out += fmt::format("{}  {}\n", indent, detail);
  }
  return out;
}

std::string describe_second_run(const json& explain) {
  std::string out = "  second run (fresh context, same database):\n";
  for (const json& pass : explain) {
    const std::string level = str(pass, "level");
    const std::string answered = level == "cache" && !str(pass, "origin").empty() ? str(pass, "origin") : level;
    const std::string layer = str(pass, "layer");
    out += fmt::format("    {}: {}{} -> {}", pass_label(pass), answered, layer.empty() ? "" : " (" + layer + ")",
                       str(pass, "schedule"));
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
  if (!p.explain.is_null()) j["explain"] = p.explain;
  if (!p.reproduce.empty()) j["reproduce"] = p.reproduce;
  return j;
}

void write_json(const Options& o, const Graphs& graphs, const std::vector<Problem>& problems, const std::string& user_db,
                const std::string& gpu) {
  if (o.json_path.empty()) return;
  json doc;
  doc["tool"] = kTool;
  doc["version"] = dfgnnGetVersion();
  doc["date"] = cli::iso_date();
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

// Compiles the listed schedules for arch (no graph needed). A backward pass compiles with a partner
// for its other pass: the first schedule listed for that pass of the same op with which the pair is
// valid, else its own text; the partners are listed winners, compiled anyway.
void compile_listed(dfgnn_context_t ctx, const std::vector<Listed>& listed, int arch) {
  const auto same_op = [](const dfgnn_op_t& a, const dfgnn_op_t& b) {
    return a.model == b.model && a.dtype == b.dtype && a.heads == b.heads && a.dim == b.dim;
  };
  for (const Listed& l : listed) {
    if (l.pass == 0) {
      check(dfgnnCompile(ctx, nullptr, &l.op, DFGNN_FORWARD, l.schedule.c_str(), arch), l.where);
      continue;
    }
    std::vector<std::string> partners;
    for (const Listed& other : listed)
      if (other.pass == 3 - l.pass && same_op(other.op, l.op)) partners.push_back(other.schedule);
    partners.push_back(l.schedule);
    std::string last_error;
    bool done = false;
    for (const std::string& partner : partners) {
      const std::string pair = l.pass == 1 ? l.schedule + "|" + partner : partner + "|" + l.schedule;
      const dfgnn_status_t s = dfgnnCompile(ctx, nullptr, &l.op, DFGNN_BACKWARD, pair.c_str(), arch);
      if (s == DFGNN_STATUS_SUCCESS) {
        done = true;
        break;
      }
      if (s != DFGNN_STATUS_INVALID_ARGUMENT) check(s, l.where);  // a compile error is not a pairing miss
      last_error = dfgnnGetLastErrorMessage();
    }
    if (!done) throw Failure{fmt::format("{}: no valid backward pair for {}: {}", l.where, l.schedule, last_error)};
  }
}

// Tunes one problem, then asks a fresh context on the same database how it dispatches.
void tune_one(dfgnn_context_t ctx, const Options& o, const Graphs& graphs, Problem& p) {
  const LoadedGraph& g = graphs.list[p.graph];
  // One call (asking for the length first would tune twice); a report is a few KiB.
  std::string text(size_t{1} << 20, '\0');
  size_t length = 0;
  check(dfgnnTune(ctx, g.graph, &p.op, p.direction, o.budget, text.data(), text.size(), &length), "dfgnnTune");
  if (length >= text.size()) throw Failure{fmt::format("dfgnnTune's report ({} bytes) did not fit its buffer", length)};
  text.resize(length);
  p.report = json::parse(text, nullptr, false);
  if (!p.report.is_array()) throw Failure{"dfgnnTune returned a report that is not a JSON array: " + text};
  p.reproduce = reproduce_command(p, g, p.report);

  cli::ContextGuard fresh;
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

  const std::string user_db = o.db ? *o.db : default_user_db();
  if (user_db.empty())
    throw BadArgs{"no tuning database: give --db PATH (none of DFGNN_CACHE_DIR, XDG_CACHE_HOME, HOME is set)"};
  cli::ContextGuard context;
  check(dfgnnCreate(&context.ctx), "dfgnnCreate");
  dfgnn_context_t ctx = context.ctx;
  // --explain writes nothing: a user database that does not exist yet is left out ("": none)
  // instead of being created empty (with its directory) by the first read.
  std::error_code ec;
  const bool read_user = !o.explain || std::filesystem::exists(user_db, ec);
  check(dfgnnSetDatabase(ctx, read_user ? (o.db ? o.db->c_str() : nullptr) : "", o.site ? o.site->c_str() : nullptr),
        "dfgnnSetDatabase");

  Graphs graphs;
  load_graphs(ctx, o, graphs);
  std::vector<Problem> problems = plan(ctx, o, graphs);

  std::string sites = o.site ? *o.site : (std::getenv("DFGNN_SITE_DB") ? std::getenv("DFGNN_SITE_DB") : "");
  fmt::print("{} problem(s): {} graph(s) x {} model(s) x {} dtype(s) x {} direction(s), H={} D={}, budget {:g} s each "
             "(at most {})\n",
             problems.size(), graphs.list.size(), o.models.size(), o.dtypes.size(), o.directions.size(), o.heads, o.dim,
             o.budget, duration_text(o.budget * static_cast<double>(problems.size())));
  for (const Problem& p : problems)
    fmt::print("  {}: default schedule {}\n", problem_label(p, graphs), p.default_schedule);
  fmt::print("database: {} (user){}\n", user_db, sites.empty() ? std::string() : ", sites " + sites);

  if (o.explain) {  // how dispatch answers now; nothing is tuned or written (DFGNN_TUNE notwithstanding)
    check(dfgnnSetTuneMode(ctx, DFGNN_TUNE_OFF), "dfgnnSetTuneMode");
    for (Problem& p : problems) {
      const LoadedGraph& g = graphs.list[p.graph];
      const std::string text = read_text(
          [&](char* b, size_t c, size_t* l) { return dfgnnExplain(ctx, g.graph, &p.op, p.direction, b, c, l); },
          "dfgnnExplain");
      p.explain = json::parse(text, nullptr, false);
      if (!p.explain.is_array()) throw Failure{"dfgnnExplain returned a report that is not a JSON array: " + text};
      p.status = "explained";
      fmt::print("\n{}\n{}", problem_label(p, graphs), describe_explain(p.explain, "  "));
    }
    write_json(o, graphs, problems, user_db, "not needed (--explain)");
    return 0;
  }

  if (o.compile_defaults_arch) {  // the modules dispatch needs now, stored in the user database
    check(dfgnnSetTuneMode(ctx, DFGNN_TUNE_OFF), "dfgnnSetTuneMode");
    uint64_t compiles = 0, hits = 0, loads = 0;
    for (Problem& p : problems) {
      check(dfgnnCompile(ctx, graphs.list[p.graph].graph, &p.op, p.direction, nullptr, *o.compile_defaults_arch),
            "dfgnnCompile");
      p.status = "compiled";
    }
    compile_listed(ctx, o.compile_listed, *o.compile_defaults_arch);
    check(dfgnnGetCacheCounters(ctx, &compiles, &hits, &loads), "dfgnnGetCacheCounters");
    fmt::print("compiled {} module(s) for sm_{} into {} ({} problem(s); the others were stored or shared)\n", compiles,
               *o.compile_defaults_arch, user_db, problems.size());
    write_json(o, graphs, problems, user_db, "not needed (--compile-defaults)");
    return 0;
  }

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

int main(int argc, char** argv) { return cli::run_main(kTool, [&] { return run(argc, argv); }); }
