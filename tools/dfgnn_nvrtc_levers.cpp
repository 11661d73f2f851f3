// dfgnn-nvrtc-levers: what NVRTC costs per module of default dispatch, and what each compile-time
// lever (an NVRTC option, a precompiled header, compiling modules in parallel) changes (issue 25,
// "fast compiles"). Needs NVRTC only, no GPU.
//
// The modules are those a fresh process compiles for the configuration zoo (bench/zoo.txt) on one
// graph: per zoo line the forward pass's module and a backward's three (row pass, column pass,
// helpers), named exactly as dispatch names them (choose_schedules, pass_kernel_names,
// backward_module_names) and compiled from the embedded kernel source, as runtime/src/nvrtc.cpp
// does. A sample (--per-kind N of each kind, spread over the zoo) keeps a run short.
//
// Each lever is a variant of the library's options (nvrtc_options(arch)): options added or
// dropped, or the source passed as a header with -pch. Variants are interleaved per module and
// repetition (in a shuffled order each time), so a loaded machine slows them alike, and each gain
// is paired: the median over (rep, module) of 1 - variant/baseline. Per compile
// it records the wall time of nvrtcCompileProgram and the CPU time of the process during it (the
// better number on a busy machine: NVRTC compiles on the calling thread), and whether the cubin's
// machine code (its .text sections) equals the baseline's.
//
// --phases adds one compile per module with NVRTC's -time=<file> (its per-phase CSV) to split the
// time into front end (parse and instantiate), NVVM (optimise to PTX) and ptxas (PTX to cubin).
// --overheads times an empty program and the kernel source with no name expression (NVRTC's fixed
// cost per program, and what parsing the templates adds: the most that trimming them can save).
// --parallel T compiles the sample's modules on T threads at once, against one after another.
//
// Output: a table on stdout and, with --json, every sample and the medians.
#include <dfgnn/dfgnn.h>

#include "cubin_elf.hpp"
#include "handles.hpp"
#include "nvrtc.hpp"
#include "ops.hpp"
#include "schedule.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace po = boost::program_options;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A cubin's machine code by kernel (line information lives elsewhere, so equal code is the same
// SASS); empty for an image that does not parse.
std::map<std::string, std::string> machine_code(const std::vector<char>& image) {
  try {
    return dfgnn::CubinElf(image).machine_code();
  } catch (const std::exception&) {
    return {};
  }
}

using Clock = std::chrono::steady_clock;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(dfgnn_status_t s, const char* what) {
  if (s != DFGNN_STATUS_SUCCESS) throw Failure(fmt::format("{}: {}", what, dfgnnGetLastErrorMessage()));
}

double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---------------------------------------------------------------- the modules

struct Module {
  std::string label;  // "gat 8x8 float32 forward"
  std::string kind;   // forward, backward-row, backward-col, helpers
  std::vector<std::string> names;
};

std::vector<Module> zoo_modules(const std::string& zoo_path, const std::string& graph_path, bool self_loops,
                                float dropout, const fs::path& user_db) {
  std::ifstream zoo(zoo_path);
  if (!zoo) throw Failure("cannot read " + zoo_path);
  dfgnn_context_t ctx = nullptr;
  check(dfgnnCreate(&ctx), "dfgnnCreate");
  check(dfgnnSetDatabase(ctx, user_db.c_str(), ""), "dfgnnSetDatabase");  // a fresh user cache, no site layer
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.add_self_loops = self_loops ? 1 : 0;
  dfgnn_graph_t graph = nullptr;
  check(dfgnnGraphCreateFromFile(ctx, graph_path.c_str(), &options, &graph), "dfgnnGraphCreateFromFile");
  dfgnn::Context& c = dfgnn::context_of(ctx);
  const dfgnn::Graph& g = dfgnn::graph_of(graph);
  std::vector<Module> out;
  std::set<std::vector<std::string>> seen;
  auto add = [&](const std::string& label, const std::string& kind, const std::vector<std::string>& names) {
    if (seen.insert(names).second) out.push_back({label + " " + kind, kind, names});
  };
  std::string line;
  while (std::getline(zoo, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string model_name, dtype_name;
    int heads = 0, dim = 0;
    if (!(words >> model_name >> heads >> dim >> dtype_name)) continue;
    const std::map<std::string, dfgnn_model_t> models{{"gat", DFGNN_MODEL_GAT}, {"gatv2", DFGNN_MODEL_GATV2},
                                                      {"transformer", DFGNN_MODEL_TRANSFORMER}, {"agnn", DFGNN_MODEL_AGNN}};
    const std::map<std::string, dfgnn_dtype_t> dtypes{
        {"float32", DFGNN_DTYPE_FLOAT32}, {"float16", DFGNN_DTYPE_FLOAT16}, {"bfloat16", DFGNN_DTYPE_BFLOAT16}};
    if (!models.count(model_name) || !dtypes.count(dtype_name)) throw Failure("bad zoo line: " + line);
    dfgnn_op_t op = dfgnnOpDefault(models.at(model_name), dtypes.at(dtype_name), heads, dim);
    op.dropout = dropout;  // dropout compiles kernels of its own (the mask code)
    const std::string label = fmt::format("{} {}x{} {}", model_name, heads, dim, dtype_name);
    const int32_t max_vec = dfgnn::any_alignment(op);
    const dfgnn::SchedulePair fwd = dfgnn::choose_schedules(c, g, op, DFGNN_FORWARD, nullptr, max_vec);
    add(label, "forward", dfgnn::pass_kernel_names(op, dfgnn::PassKind::Forward, fwd.row));
    const dfgnn::SchedulePair bwd = dfgnn::choose_schedules(c, g, op, DFGNN_BACKWARD, nullptr, max_vec);
    const std::vector<std::vector<std::string>> three = dfgnn::backward_module_names(op, bwd);
    add(label, "backward-row", three.at(0));
    add(label, "backward-col", three.at(1));
    add(label, "helpers", three.at(2));
  }
  dfgnnGraphDestroy(graph);
  dfgnnDestroy(ctx);
  return out;
}

// N of each kind, evenly spread over the zoo's order (first and last included).
std::vector<Module> sample(const std::vector<Module>& all, int per_kind) {
  if (per_kind <= 0) return all;
  std::vector<Module> out;
  for (const char* kind : {"forward", "backward-row", "backward-col", "helpers"}) {
    std::vector<const Module*> of;
    for (const Module& m : all)
      if (m.kind == kind) of.push_back(&m);
    const size_t n = std::min(of.size(), static_cast<size_t>(per_kind));
    for (size_t k = 0; k < n; ++k) {
      const size_t at = n == 1 ? 0 : k * (of.size() - 1) / (n - 1);
      out.push_back(*of[at]);
    }
  }
  return out;
}

// ---------------------------------------------------------------- variants and one compile

struct Variant {
  std::string name;
  std::vector<std::string> add, drop;
  bool header = false;  // the kernel source as a header included by a one-line program
  std::string note;
};

std::vector<std::string> options_of(const Variant& v, int arch) {
  std::vector<std::string> o;
  for (const std::string& base : dfgnn::nvrtc_options(arch))
    if (std::find(v.drop.begin(), v.drop.end(), base) == v.drop.end()) o.push_back(base);
  for (const std::string& add : v.add)  // an option the baseline has (DFGNN_NVRTC_LINEINFO=1) is not doubled
    if (std::find(o.begin(), o.end(), add) == o.end()) o.push_back(add);
  return o;
}

struct Result {
  bool ok = false;
  double wall_ms = 0, cpu_ms = 0;
  std::vector<char> cubin;
  std::string log;
  std::string pch;  // PCH creation status, for header variants
};

// `source`: the program's text (default: the kernel source, or for a header variant a line including it).
Result compile_once(const Module& m, const Variant& v, int arch, const std::vector<std::string>& extra = {},
                    const char* source = nullptr) {
  nvrtcProgram prog = nullptr;
  const char* header_name = "dfgnn_kernels.cuh";
  const char* header_source = dfgnn::kernel_source().c_str();
  nvrtcResult r = v.header
                      ? nvrtcCreateProgram(&prog, source ? source : "#include \"dfgnn_kernels.cuh\"\n",
                                           "dfgnn_kernels.cu", 1, &header_source, &header_name)
                      : nvrtcCreateProgram(&prog, source ? source : dfgnn::kernel_source().c_str(), "dfgnn_kernels.cu",
                                           0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) throw Failure(fmt::format("nvrtcCreateProgram: {}", nvrtcGetErrorString(r)));
  for (const std::string& n : m.names) nvrtcAddNameExpression(prog, n.c_str());
  std::vector<std::string> options = options_of(v, arch);
  options.insert(options.end(), extra.begin(), extra.end());
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  Result out;
  const double cpu0 = process_cpu_ms();
  const auto t0 = Clock::now();
  r = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  out.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  out.cpu_ms = process_cpu_ms() - cpu0;
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 1) {
    out.log.resize(size);
    nvrtcGetProgramLog(prog, out.log.data());
    out.log.resize(size - 1);
  }
  out.ok = r == NVRTC_SUCCESS;
  if (!out.ok) out.log = fmt::format("{}: {}", nvrtcGetErrorString(r), out.log);
  if (out.ok && nvrtcGetCUBINSize(prog, &size) == NVRTC_SUCCESS) {
    out.cubin.resize(size);
    nvrtcGetCUBIN(prog, out.cubin.data());
  }
  if (v.header) {
    const nvrtcResult p = nvrtcGetPCHCreateStatus(prog);
    out.pch = p == NVRTC_SUCCESS ? "created" : nvrtcGetErrorString(p);
  }
  nvrtcDestroyProgram(&prog);
  return out;
}

// NVRTC's -time CSV: "phase, ms" rows (the header names columns); phases summed by name.
std::map<std::string, double> read_phases(const fs::path& file) {
  std::map<std::string, double> out;
  std::ifstream f(file);
  std::string line;
  std::vector<std::string> header;
  while (std::getline(f, line)) {
    std::vector<std::string> cells;
    std::istringstream s(line);
    std::string cell;
    while (std::getline(s, cell, ',')) {
      const auto a = cell.find_first_not_of(" \t\r"), b = cell.find_last_not_of(" \t\r");
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    }
    if (header.empty()) {
      header = cells;
      continue;
    }
    // Expected columns (NVRTC 12.x/13.x): source file, phase name, ..., metric (ms); find them by name.
    std::string phase;
    double ms = -1;
    for (size_t k = 0; k < cells.size() && k < header.size(); ++k) {
      std::string h = header[k];
      std::transform(h.begin(), h.end(), h.begin(), ::tolower);
      if (h.find("phase") != std::string::npos) phase = cells[k];
      if (h.find("metric") != std::string::npos || h.find("ms") != std::string::npos) {
        try {
          ms = std::stod(cells[k]);
        } catch (...) {
        }
      }
    }
    if (!phase.empty() && ms >= 0) out[phase] += ms;
  }
  return out;
}

std::vector<Variant> all_variants() {
  return {
      {"baseline", {}, {}, false, "the library's options"},
      {"lineinfo", {"-lineinfo"}, {}, false, "add -lineinfo (source lines; DFGNN_NVRTC_LINEINFO=1)"},
      {"minimal", {"-minimal"}, {}, false, "add -minimal (no runtime/texture declarations)"},
      {"extra-vec", {"--extra-device-vectorization"}, {}, false, "add --extra-device-vectorization"},
      {"split-compile", {"--split-compile=0"}, {}, false, "NVVM optimises in parallel (0: all cores)"},
      {"dopt-off", {"--dopt=off"}, {}, false, "no device optimisation (changes code)"},
      {"fmad-false", {"--fmad=false"}, {}, false, "no FMA contraction (changes results)"},
      {"ptxas-O2", {"-Xptxas=-O2"}, {}, false, "ptxas -O2 (default -O3)"},
      {"ptxas-O1", {"-Xptxas=-O1"}, {}, false, "ptxas -O1"},
      {"fast-compile-min", {"--Ofast-compile=min"}, {}, false, "trade code quality for compile time"},
      {"fast-compile-mid", {"--Ofast-compile=mid"}, {}, false, "trade code quality for compile time"},
      {"fast-compile-max", {"--Ofast-compile=max"}, {}, false, "trade code quality for compile time"},
      {"header", {}, {}, true, "source as an included header, no PCH (the PCH variants' reference)"},
      {"header-pch", {"-pch"}, {}, true, "automatic PCH of the included header (in-process heap)"},
      {"header-pch+minimal", {"-pch", "-minimal"}, {}, true, "automatic PCH with -minimal"},
      {"no-default-device", {}, {"-default-device"}, false, "drop -default-device"},
  };
}

std::vector<Variant> parse_variants(const std::string& list) {
  const std::vector<Variant> known = all_variants();
  std::vector<Variant> out{known.front()};  // the baseline always runs
  std::istringstream s(list);
  std::string name;
  while (std::getline(s, name, ',')) {
    if (name.empty() || name == "baseline") continue;
    const auto it = std::find_if(known.begin(), known.end(), [&](const Variant& v) { return v.name == name; });
    if (it == known.end()) {
      std::string names;
      for (const Variant& v : known) names += " " + v.name;
      throw Failure(fmt::format("unknown variant {}; known:{}", name, names));
    }
    out.push_back(*it);
  }
  return out;
}

struct Options {
  std::string zoo = "bench/zoo.txt", graph = "data/cora", json_path, variants = "lineinfo,minimal", only;
  std::vector<std::string> custom;
  bool self_loops = true, list = false, phases = false, overheads = false, resources = false;
  int arch = 90, reps = 3, per_kind = 4, parallel = 0, seed = 1;
  float dropout = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  po::options_description desc("dfgnn-nvrtc-levers: NVRTC time per module of default dispatch, per compile-time lever");
  desc.add_options()("help,h", "this help")                                                                    //
      ("zoo", po::value(&o.zoo)->default_value(o.zoo), "the configuration zoo")                                //
      ("graph", po::value(&o.graph)->default_value(o.graph), "the graph whose default schedules are compiled")  //
      ("no-self-loops", "read the graph as is (default: add self loops, as GATConv does)")                    //
      ("arch", po::value(&o.arch)->default_value(o.arch), "sm_XX to compile for")                            //
      ("dropout", po::value(&o.dropout)->default_value(0), "attention dropout rate of the zoo's ops, in [0, 1)")  //
      ("reps", po::value(&o.reps)->default_value(o.reps), "compiles per (module, variant)")                   //
      ("per-kind", po::value(&o.per_kind)->default_value(o.per_kind),
       "modules of each kind (forward, backward-row, backward-col, helpers) in the sample; 0: every module")  //
      ("variants", po::value(&o.variants)->default_value(o.variants),
       "comma-separated levers to time against the baseline (--list-variants names them)")  //
      ("custom", po::value(&o.custom)->composing(),
       "NAME=+OPT,-OPT,...: a variant adding (+) and dropping (-) options; repeatable")  //
      ("overheads", "also time an empty program and the kernel source with no kernels (parse cost)")  //
      ("phases", "one more compile per module with -time=<file>: front end, NVVM, ptxas")  //
      ("parallel", po::value(&o.parallel)->default_value(0),
       "also compile the sample on this many threads at once, against one after another")  //
      ("seed", po::value(&o.seed)->default_value(o.seed), "shuffles the variant order per (rep, module)")  //
      ("list", "print the modules and exit")                                                          //
      ("only", po::value(&o.only), "keep the modules whose label contains this text, e.g. 'transformer 4x64'")  //
      ("resources", "print each module's registers and spills (ptxas -v) per variant, and exit")  //
      ("list-variants", "print the known variants and exit")                                          //
      ("json", po::value(&o.json_path), "write every sample and the medians here");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dfgnn-nvrtc-levers: %s\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (vm.count("list-variants")) {
    for (const Variant& v : all_variants()) std::printf("%-22s %s\n", v.name.c_str(), v.note.c_str());
    return 0;
  }
  o.self_loops = !vm.count("no-self-loops");
  o.list = vm.count("list") > 0;
  o.phases = vm.count("phases") > 0;
  o.overheads = vm.count("overheads") > 0;
  o.resources = vm.count("resources") > 0;
  if (!(o.dropout >= 0 && o.dropout < 1)) {
    std::fprintf(stderr, "dfgnn-nvrtc-levers: --dropout %g is not a rate in [0, 1)\n", o.dropout);
    return 2;
  }
  try {
    // Default dispatch as a user gets it: the shipped databases (unless the caller chose) and no user cache.
    if (std::getenv("DFGNN_SHIPPED_DB") == nullptr && fs::is_directory("data/tuning"))
      setenv("DFGNN_SHIPPED_DB", "data/tuning", 1);
    const fs::path scratch = fs::temp_directory_path() / fmt::format("dfgnn-nvrtc-levers-{}", getpid());
    fs::create_directories(scratch);
    const std::vector<Module> all = zoo_modules(o.zoo, o.graph, o.self_loops, o.dropout, scratch / "user.db");
    std::vector<Module> modules = sample(all, o.per_kind);
    if (!o.only.empty()) {
      std::erase_if(modules, [&](const Module& m) { return m.label.find(o.only) == std::string::npos; });
      if (modules.empty()) throw Failure(fmt::format("no module's label contains '{}' (--list shows them)", o.only));
    }
    if (o.list) {
      for (const Module& m : modules) {
        std::printf("%s (%zu kernels)\n", m.label.c_str(), m.names.size());
        for (const std::string& n : m.names) std::printf("    %s\n", n.c_str());
      }
      std::printf("%zu of %zu distinct modules\n", modules.size(), all.size());
      return 0;
    }
    std::vector<Variant> variants = parse_variants(o.variants);
    for (const std::string& c : o.custom) {
      const auto eq = c.find('=');
      if (eq == std::string::npos) throw Failure("--custom wants NAME=+OPT,-OPT");
      Variant v{c.substr(0, eq), {}, {}, false, "custom: " + c.substr(eq + 1)};
      std::istringstream s(c.substr(eq + 1));
      std::string item;
      while (std::getline(s, item, ','))
        if (item.size() > 1) (item[0] == '-' ? v.drop : v.add).push_back(item.substr(1));
      variants.push_back(v);
    }
    if (o.resources) {  // register pressure per kernel: what occupancy a code change costs, no GPU needed
      for (const Module& m : modules) {
        std::printf("%s\n", m.label.c_str());
        for (const Variant& v : variants) {
          const Result r = compile_once(m, v, o.arch, {"--ptxas-options=-v"});
          if (!r.ok) {
            std::printf("  %-14s failed: %s\n", v.name.c_str(), r.log.substr(0, 300).c_str());
            continue;
          }
          std::istringstream log(r.log);
          for (std::string line; std::getline(log, line);) {
            if (const auto at = line.find("entry function '"); at != std::string::npos) {
              const auto end = line.find('\'', at + 16);  // the whole mangled name: kernels differ at its end
              std::printf("  %-14s %s\n", v.name.c_str(), line.substr(at + 16, end - (at + 16)).c_str());
            }
            if (line.find("registers") != std::string::npos || line.find("spill") != std::string::npos)
              std::printf("  %-14s %s\n", v.name.c_str(), line.c_str());
          }
          // What a kernel's registers cost in resident blocks: the figure the runtime holds dropout kernels to.
          try {
            for (const auto& [kernel, res] : dfgnn::CubinElf(r.cubin).resources())
              std::printf("  %-14s occupancy %s: %d registers, %d threads, %d blocks per SM, %d-byte frame\n",
                          v.name.c_str(), kernel.c_str(), res.registers, res.max_threads,
                          dfgnn::resident_blocks(res.registers, res.max_threads, o.arch), res.frame_bytes);
          } catch (const std::exception& e) {
            std::printf("  %-14s occupancy unreadable: %s\n", v.name.c_str(), e.what());
          }
        }
      }
      return 0;
    }
    const int version = dfgnn::nvrtc_version();
    std::string base;
    for (const std::string& b : dfgnn::nvrtc_options(o.arch)) base += b + " ";
    std::printf("NVRTC %d.%d, %s; %zu of %zu modules, %zu variants, %d reps; baseline options: %s\n", version / 1000,
                version % 1000 / 10, dfgnn::nvrtc_library().c_str(), modules.size(), all.size(), variants.size(),
                o.reps, base.c_str());

    // One untimed compile first: NVRTC's own start-up (loading its builtins) is paid once per process.
    compile_once(modules.front(), variants.front(), o.arch);

    json samples = json::array();
    std::map<std::string, std::vector<double>> wall, cpu;                   // by variant
    // Per (rep, module): each variant's CPU and wall ms, for paired ratios against the baseline.
    std::map<std::pair<int, std::string>, std::map<std::string, std::pair<double, double>>> blocks;
    std::map<std::string, std::map<std::string, std::vector<double>>> wall_by_kind;  // variant -> kind
    std::map<std::string, std::vector<std::string>> differs;                // variant -> modules whose code differs
    std::map<std::string, std::string> failures, code;                       // variant -> first failure / code check
    std::map<std::string, std::vector<char>> baseline_cubin;
    std::mt19937 rng(static_cast<unsigned>(o.seed));
    for (int rep = 0; rep < o.reps; ++rep) {
      for (const Module& m : modules) {
        std::vector<size_t> order(variants.size());
        for (size_t k = 0; k < order.size(); ++k) order[k] = k;
        std::shuffle(order.begin(), order.end(), rng);
        for (size_t k : order) {
          const Variant& v = variants[k];
          const Result r = compile_once(m, v, o.arch);
          samples.push_back({{"variant", v.name}, {"module", m.label}, {"kind", m.kind}, {"rep", rep},
                             {"ok", r.ok}, {"wall_ms", r.wall_ms}, {"cpu_ms", r.cpu_ms},
                             {"cubin_bytes", r.cubin.size()}, {"pch", r.pch}});
          if (!r.ok) {
            if (!failures.count(v.name)) failures[v.name] = m.label + ": " + r.log.substr(0, 600);
            continue;
          }
          wall[v.name].push_back(r.wall_ms);
          cpu[v.name].push_back(r.cpu_ms);
          blocks[{rep, m.label}][v.name] = {r.cpu_ms, r.wall_ms};
          wall_by_kind[v.name][m.kind].push_back(r.wall_ms);
          if (rep == 0 && k == 0) baseline_cubin[m.label] = r.cubin;
        }
      }
      std::fprintf(stderr, "rep %d of %d done\n", rep + 1, o.reps);
    }
    // Code checks, after the timing: each variant's machine code (the .text sections) and whole
    // image against the baseline's first compile; the baseline against itself shows determinism.
    for (size_t k = 0; k < variants.size(); ++k) {
      const Variant& v = variants[k];
      if (failures.count(v.name)) continue;
      size_t same_bytes = 0, same_text = 0, compared = 0;
      for (const Module& m : modules) {
        const Result r = compile_once(m, v, o.arch);
        if (!r.ok) continue;
        ++compared;
        const std::vector<char>& base = baseline_cubin[m.label];
        if (r.cubin == base) ++same_bytes;
        const auto text = machine_code(r.cubin), base_text = machine_code(base);
        if (!text.empty() && text == base_text) {
          ++same_text;
        } else {
          std::string which;
          for (const auto& [section, bytes] : text)
            if (!base_text.count(section) || base_text.at(section) != bytes) which += " " + section.substr(0, 60);
          differs[v.name].push_back(m.label + ":" + which);
        }
      }
      code[v.name] = fmt::format("{}/{} same code, {}/{} same image", same_text, compared, same_bytes, compared);
    }

    // Phases: NVRTC's -time CSV, one compile per module with the baseline options.
    json phases = json::object();
    std::map<std::string, std::vector<double>> phase_ms;
    std::vector<double> phase_total;
    if (o.phases) {
      const fs::path file = scratch / "time.csv";
      for (const Module& m : modules) {
        fs::remove(file);
        const Result r = compile_once(m, variants.front(), o.arch, {"-time=" + file.string()});
        if (!r.ok) throw Failure("phase compile failed: " + r.log);
        const std::map<std::string, double> p = read_phases(file);
        if (p.empty()) {
          std::ifstream raw(file);
          std::stringstream text;
          text << raw.rdbuf();
          throw Failure("could not read NVRTC's -time output:\n" + text.str());
        }
        json row = {{"module", m.label}, {"kind", m.kind}, {"wall_ms", r.wall_ms}};
        for (const auto& [name, ms] : p) {
          row["phases"][name] = ms;
          phase_ms[name].push_back(ms);
        }
        phase_total.push_back(r.wall_ms);
        phases["rows"].push_back(row);
        if (&m == &modules.front()) {
          std::ifstream raw(file);
          std::stringstream text;
          text << raw.rdbuf();
          phases["example_csv"] = text.str();
        }
      }
    }

    // Overheads: what every compile pays before any kernel: an empty program (NVRTC's fixed cost)
    // and the whole kernel source with no name expression (parsing it: what trimming the source
    // each specialisation sees could save at most). Interleaved, with phases.
    json overheads = json::object();
    if (o.overheads) {
      const Module nothing{"no kernels", "none", {}};
      std::map<std::string, std::vector<double>> cpu_of;
      std::map<std::string, std::map<std::string, std::vector<double>>> phase_of;
      const fs::path file = scratch / "time.csv";
      for (int rep = 0; rep < std::max(o.reps, 5); ++rep) {
        for (const bool empty : {rep % 2 == 0, rep % 2 != 0}) {
          const std::string what = empty ? "empty program" : "kernel source, no kernels";
          fs::remove(file);
          const Result r = compile_once(nothing, variants.front(), o.arch, {"-time=" + file.string()},
                                        empty ? "" : nullptr);
          if (!r.ok) throw Failure(what + " failed: " + r.log);
          cpu_of[what].push_back(r.cpu_ms);
          for (const auto& [name, ms] : read_phases(file)) phase_of[what][name].push_back(ms);
        }
      }
      std::printf("\noverheads (baseline options, median of %zu):\n", cpu_of.begin()->second.size());
      for (const auto& [what, list] : cpu_of) {
        overheads[what]["median_cpu_ms"] = median(list);
        std::string phases_text;
        for (const auto& [name, ms] : phase_of[what]) {
          overheads[what]["median_phase_ms"][name] = median(ms);
          phases_text += fmt::format(", {} {:.0f} ms", name, median(ms));
        }
        std::printf("  %-28s cpu %6.1f ms%s\n", what.c_str(), median(list), phases_text.c_str());
      }
    }

    // Parallel: the sample's modules on T threads at once, against one after another (wall).
    json parallel = json::object();
    if (o.parallel > 1) {
      std::vector<double> serial_ms, parallel_ms;
      for (int rep = 0; rep < o.reps; ++rep) {
        for (int mode = 0; mode < 2; ++mode) {
          const bool threaded = (mode + rep) % 2 == 1;  // alternate which goes first
          const auto t0 = Clock::now();
          if (!threaded) {
            for (const Module& m : modules) compile_once(m, variants.front(), o.arch);
          } else {
            std::atomic<size_t> next{0};
            std::vector<std::thread> pool;
            for (int t = 0; t < o.parallel; ++t)
              pool.emplace_back([&] {
                for (size_t k; (k = next++) < modules.size();) compile_once(modules[k], variants.front(), o.arch);
              });
            for (std::thread& t : pool) t.join();
          }
          (threaded ? parallel_ms : serial_ms).push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
      }
      parallel = {{"threads", o.parallel}, {"modules", modules.size()}, {"serial_ms", serial_ms}, {"parallel_ms", parallel_ms},
                  {"serial_median_ms", median(serial_ms)}, {"parallel_median_ms", median(parallel_ms)},
                  {"hardware_threads", std::thread::hardware_concurrency()}};
    }

    // The table.
    // Gains are paired: per (rep, module), 1 - variant / baseline, then the median over those (a
    // big and a small module weigh alike, and a slow spell hits both sides of a pair).
    auto paired_gain = [&](const std::string& variant, bool use_cpu) {
      std::vector<double> ratios;
      for (const auto& [key, by_variant] : blocks) {
        const auto v = by_variant.find(variant), b = by_variant.find("baseline");
        if (v == by_variant.end() || b == by_variant.end()) continue;
        ratios.push_back(use_cpu ? v->second.first / b->second.first : v->second.second / b->second.second);
      }
      return ratios.empty() ? 0.0 : 1 - median(ratios);
    };
    std::printf("\nmedian ms per module compile; gain: median over (rep, module) of 1 - variant/baseline\n");
    std::printf("%-22s %10s %8s %10s %8s %8s  %s\n", "variant", "wall ms", "gain", "cpu ms", "gain", "n", "code");
    json summary = json::array();
    for (const Variant& v : variants) {
      if (failures.count(v.name)) {
        std::printf("%-22s FAILED: %s\n", v.name.c_str(), failures[v.name].substr(0, 200).c_str());
        summary.push_back({{"variant", v.name}, {"note", v.note}, {"failed", failures[v.name]}});
        continue;
      }
      const double w = median(wall[v.name]), c = median(cpu[v.name]);
      // Gain per module (paired): the median over modules of 1 - variant/baseline, medians per module.
      const double wall_gain = paired_gain(v.name, false), cpu_gain = paired_gain(v.name, true);
      std::printf("%-22s %10.1f %7.1f%% %10.1f %7.1f%% %8zu  %s\n", v.name.c_str(), w, 100 * wall_gain, c,
                  100 * cpu_gain, wall[v.name].size(), code.count(v.name) ? code[v.name].c_str() : "");
      json row = {{"variant", v.name}, {"note", v.note}, {"options", options_of(v, o.arch)}, {"header", v.header},
                  {"median_wall_ms", w}, {"median_cpu_ms", c}, {"wall_gain", wall_gain},
                  {"cpu_gain", cpu_gain}, {"samples", wall[v.name].size()}};
      if (code.count(v.name)) row["code"] = code[v.name];
      if (differs.count(v.name)) row["code_differs"] = differs[v.name];
      for (const auto& [kind, list] : wall_by_kind[v.name]) row["median_wall_ms_by_kind"][kind] = median(list);
      summary.push_back(row);
    }
    if (o.phases) {
      std::printf("\nphases (NVRTC -time, baseline options, median over %zu modules; total wall %.1f ms):\n",
                  phase_total.size(), median(phase_total));
      for (const auto& [name, list] : phase_ms) {
        std::printf("  %-40s %8.1f ms\n", name.c_str(), median(list));
        phases["median_ms"][name] = median(list);
      }
      phases["median_total_wall_ms"] = median(phase_total);
    }
    if (o.parallel > 1)
      std::printf("\n%zu modules one after another: %.0f ms; on %d threads: %.0f ms (median of %d)\n", modules.size(),
                  parallel["serial_median_ms"].get<double>(), o.parallel, parallel["parallel_median_ms"].get<double>(),
                  o.reps);
    if (!o.json_path.empty()) {
      json modules_json = json::array();
      for (const Module& m : modules) modules_json.push_back({{"label", m.label}, {"kind", m.kind}, {"names", m.names}});
      const json report = {{"nvrtc_version", fmt::format("{}.{}", version / 1000, version % 1000 / 10)},
                           {"nvrtc_library", dfgnn::nvrtc_library()}, {"arch", o.arch}, {"graph", o.graph},
                           {"self_loops", o.self_loops}, {"zoo", o.zoo}, {"reps", o.reps},
                           {"modules_in_zoo", all.size()}, {"modules", modules_json},
                           {"hardware_threads", std::thread::hardware_concurrency()},
                           {"baseline_options", dfgnn::nvrtc_options(o.arch)}, {"summary", summary},
                           {"phases", phases}, {"overheads", overheads}, {"parallel", parallel}, {"samples", samples}};
      std::ofstream(o.json_path) << report.dump(1) << "\n";
    }
    fs::remove_all(scratch);
    return failures.count("baseline") ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dfgnn-nvrtc-levers: %s\n", e.what());
    return 1;
  }
}
