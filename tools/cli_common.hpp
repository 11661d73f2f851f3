// Command-line helpers shared by the dfgnn tools (dfgnn-bench, dfgnn-tune, dfgnn-db): argument
// errors and failures with the tools' exit codes, list parsing (models, dtypes, direction), the
// graph options (graph files, --rmat, --hubs) and creating those graphs through the public C API.
// Depends only on dfgnn/dfgnn.h, fmt and the standard library; each tool declares its own options
// (Boost.Program_options) and keeps its own messages where they differ.
#pragma once

#include <dfgnn/dfgnn.h>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cli {

// Exit codes of the tools.
inline constexpr int kExitFailure = 1, kExitBadArgs = 2, kExitNoGpu = 3;

// A bad command line: run_main prints "TOOL: message" and exits kExitBadArgs.
struct BadArgs {
  std::string message;
};

// Any other failure: run_main prints "TOOL: message" and exits kExitFailure.
struct Failure {
  std::string message;
};

// A tool's main: returns body(); BadArgs exits kExitBadArgs, Failure and any other exception
// (std::bad_alloc as "out of host memory") kExitFailure, each printed as one line "TOOL: message"
// on stderr. Returning (not terminating) flushes what the tool printed to stdout.
int run_main(const char* tool, const std::function<int()>& body);

// Runs the option parsing (po::store and po::notify): its errors, boost::program_options::error
// (a std::logic_error), become BadArgs "WHAT (see --help)".
template <typename Parse>
void parse_options(Parse&& parse) {
  try {
    parse();
  } catch (const std::logic_error& e) {
    throw BadArgs{fmt::format("{} (see --help)", e.what())};
  }
}

// --help prints the options (anything with operator<<, e.g. po::options_description), --version
// "TOOL VERSION"; true when either was asked for (the tool then stops with exit code 0).
template <typename Help>
bool print_help_or_version(const char* tool, bool help, bool version, const Help& options) {
  if (help) {
    std::cout << options << "\n";
    return true;
  }
  if (version) {
    fmt::print("{} {}\n", tool, dfgnnGetVersion());
    return true;
  }
  return false;
}

// Throws Failure "WHAT: STATUS: LAST ERROR MESSAGE" unless status is DFGNN_STATUS_SUCCESS.
void check(dfgnn_status_t status, std::string_view what);

// Reads a string through the library's buffer protocol (call with capacity 0 to size it).
template <typename F>
std::string read_text(F&& call, std::string_view what) {
  size_t length = 0;
  check(call(nullptr, size_t{0}, &length), what);
  std::string text(length + 1, '\0');
  check(call(text.data(), text.size(), &length), what);
  text.resize(length);
  return text;
}

// Owns a context (dfgnnDestroy when set).
struct ContextGuard {
  dfgnn_context_t ctx = nullptr;
  ContextGuard() = default;
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;
  ~ContextGuard() {
    if (ctx) dfgnnDestroy(ctx);
  }
};

// The non-blank parts of text between separators, trimmed of spaces and tabs.
std::vector<std::string> split(const std::string& text, char sep);

// The current UTC time as 2026-01-31T12:00:00Z.
std::string iso_date();

// ---------------------------------------------------------------- names

// The library's name of a model (dfgnnModelName); nullptr for a value outside the enum (e.g. from a file).
const char* find_model_name(int32_t model);
// "float32", "float16", "bfloat16", "float64"; nullptr for a value outside the enum.
const char* find_dtype_name(int32_t dtype);
// As above, "?" for a value outside the enum.
const char* model_name(dfgnn_model_t model);
const char* dtype_name(dfgnn_dtype_t dtype);
// "forward" or "backward".
const char* direction_name(dfgnn_direction_t direction);
// Every model, in dfgnn_model_t order, and their names as "gat, gatv2, ..." (for help and messages).
std::vector<dfgnn_model_t> all_models();
std::string model_names();

// ---------------------------------------------------------------- op options

// --model arguments (repeatable, comma-separated): a model's name (model_names), gt for transformer, or all, each
// once in the order given; no arguments: transformer. Arguments that name nothing (",") give none.
std::vector<dfgnn_model_t> parse_models(const std::vector<std::string>& args);
// --dtype arguments: float32 (fp32, f32), float16 (fp16, f16, half) or bfloat16 (bf16); no
// arguments: float32. Arguments that name nothing give none.
std::vector<dfgnn_dtype_t> parse_dtypes(const std::vector<std::string>& args);
// BadArgs "--model lists no model" / "--dtype lists no dtype" for an empty list.
void require_models(const std::vector<dfgnn_model_t>& models);
void require_dtypes(const std::vector<dfgnn_dtype_t>& dtypes);
// BadArgs unless --heads and --dim are >= 1 and H * D <= DFGNN_MAX_CHANNELS.
void check_heads_dim(int heads, int dim);
// --direction forward, backward or both (forward then backward).
std::vector<dfgnn_direction_t> parse_direction(const std::string& text);
// --json FILE: a non-empty name whose directory exists, that is not itself a directory and that
// can be opened for writing now (a new or regular file is opened without truncating, and removed
// again if this check created it), so that a long run does not end in a failed write.
void check_json_path(const std::string& path);
// --seed: a decimal integer in 0..2^64-1 (Boost reads "-1" into a uint64_t as 2^64-1).
uint64_t parse_seed(const std::string& text);

// ---------------------------------------------------------------- graphs

// --hubs N,AVG,HUBS,HUBDEG: a planted-hub graph.
struct HubSpec {
  int64_t nodes = 0;
  int32_t avg_degree = 0, hubs = 0;
  int64_t hub_degree = 0;
};
HubSpec parse_hubs(const std::string& text);

// The graph options as given.
struct GraphArgs {
  std::vector<std::string> paths;  // graph files or dataset directories
  std::vector<int> rmat_scales;    // --rmat
  int64_t rmat_edges = 0;          // --rmat-edges (0: 16 * 2^SCALE)
  bool rmat_edges_given = false;
  std::vector<std::string> hubs;  // --hubs
  bool empty() const { return paths.empty() && rmat_scales.empty() && hubs.empty(); }
};

// One graph to load or generate.
struct GraphSpec {
  enum class Kind { File, Rmat, Hubs } kind = Kind::File;
  std::string path;   // File
  int scale = 0;      // Rmat
  int64_t edges = 0;  // Rmat (resolved)
  HubSpec hubs;       // Hubs
  std::string text;   // Hubs, as given
};

// BadArgs unless 1 <= scale <= 30.
void check_rmat_scale(int scale);

// The graphs of args: files, then R-MAT scales, then planted hubs, in the order given. Checks, in
// this order: --rmat-edges >= 0, --rmat-edges only with --rmat, no empty path (only with
// reject_empty_paths), every --rmat scale, every --hubs specification.
std::vector<GraphSpec> graph_specs(const GraphArgs& args, bool reject_empty_paths);

// PATH, rmat-sSCALE-eEDGES-seedSEED or hubs-nN-avgAVG-hHUBSxHUBDEG-seedSEED; "+loops" appended
// with self_loops.
std::string graph_name(const GraphSpec& spec, uint64_t seed, bool self_loops);

// Reads or generates the graph of spec (R-MAT: a,b,c = 0.57,0.19,0.19, deduplicated, no
// self-loops, permuted ids) and returns the library's status; *graph is owned by the caller.
dfgnn_status_t create_graph(dfgnn_context_t ctx, const GraphSpec& spec, uint64_t seed,
                            const dfgnn_graph_options_t* options, dfgnn_graph_t* graph);

}  // namespace cli
