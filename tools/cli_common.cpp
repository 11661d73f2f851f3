// Command-line helpers shared by the dfgnn tools; see cli_common.hpp.
#include "cli_common.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <new>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

namespace cli {

namespace {

constexpr std::pair<dfgnn_dtype_t, const char*> kDtypes[] = {{DFGNN_DTYPE_FLOAT32, "float32"},
                                                             {DFGNN_DTYPE_FLOAT16, "float16"},
                                                             {DFGNN_DTYPE_BFLOAT16, "bfloat16"},
                                                             {DFGNN_DTYPE_FLOAT64, "float64"}};

template <typename Table>
const char* find_name(const Table& table, int32_t value) {
  for (const auto& [v, name] : table)
    if (static_cast<int32_t>(v) == value) return name;
  return nullptr;
}

template <typename T>
void add_once(std::vector<T>& list, T value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

}  // namespace

namespace {

// One line "TOOL: message" on stderr, after what the tool has printed so far (flushed first, so that
// the two streams stay in order when both go to one pipe or file).
int report(const char* tool, std::string_view message, int code) {
  std::cout.flush();
  std::fflush(stdout);
  fmt::print(stderr, "{}: {}\n", tool, message);
  return code;
}

}  // namespace

int run_main(const char* tool, const std::function<int()>& body) {
  try {
    return body();
  } catch (const BadArgs& e) {
    return report(tool, e.message, kExitBadArgs);
  } catch (const Failure& e) {
    return report(tool, e.message, kExitFailure);
  } catch (const std::bad_alloc&) {
    return report(tool, "out of host memory", kExitFailure);
  } catch (const std::exception& e) {
    return report(tool, e.what(), kExitFailure);
  } catch (...) {
    return report(tool, "unknown exception", kExitFailure);
  }
}

void check(dfgnn_status_t status, std::string_view what) {
  if (status != DFGNN_STATUS_SUCCESS)
    throw Failure{fmt::format("{}: {}: {}", what, dfgnnGetStatusString(status), dfgnnGetLastErrorMessage())};
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(sep, start), text.size());
    const std::string part = text.substr(start, end - start);
    const auto b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    if (b != std::string::npos) parts.push_back(part.substr(b, e - b + 1));
    start = end + 1;
  }
  return parts;
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

const char* find_model_name(int32_t model) {
  const char* name = nullptr;
  return dfgnnModelName(static_cast<dfgnn_model_t>(model), &name) == DFGNN_STATUS_SUCCESS ? name : nullptr;
}
const char* find_dtype_name(int32_t dtype) { return find_name(kDtypes, dtype); }

const char* model_name(dfgnn_model_t model) {
  const char* name = find_model_name(model);
  return name != nullptr ? name : "?";
}

const char* dtype_name(dfgnn_dtype_t dtype) {
  const char* name = find_dtype_name(dtype);
  return name != nullptr ? name : "?";
}

const char* direction_name(dfgnn_direction_t direction) { return direction == DFGNN_FORWARD ? "forward" : "backward"; }

std::vector<dfgnn_model_t> all_models() {
  std::vector<dfgnn_model_t> models;
  for (int m = 0; m < DFGNN_NUM_MODELS; ++m) models.push_back(static_cast<dfgnn_model_t>(m));
  return models;
}

std::string model_names() {
  std::string names;
  for (dfgnn_model_t m : all_models()) names += fmt::format("{}{}", names.empty() ? "" : ", ", model_name(m));
  return names;
}

// ---------------------------------------------------------------- op options

std::vector<dfgnn_model_t> parse_models(const std::vector<std::string>& args) {
  std::vector<dfgnn_model_t> out;
  for (const std::string& arg : args.empty() ? std::vector<std::string>{"transformer"} : args)
    for (const std::string& m : split(arg, ',')) {
      dfgnn_model_t model = DFGNN_MODEL_TRANSFORMER;  // also for "gt", the Graph Transformer's short name
      if (m == "all") {
        for (dfgnn_model_t each : all_models()) add_once(out, each);
      } else if (m == "gt" || dfgnnModelFromName(m.c_str(), &model) == DFGNN_STATUS_SUCCESS) {
        add_once(out, model);
      } else {
        throw BadArgs{fmt::format("--model '{}' is not {} or all", m, model_names())};
      }
    }
  return out;
}

std::vector<dfgnn_dtype_t> parse_dtypes(const std::vector<std::string>& args) {
  std::vector<dfgnn_dtype_t> out;
  for (const std::string& arg : args.empty() ? std::vector<std::string>{"float32"} : args)
    for (const std::string& d : split(arg, ',')) {
      if (d == "float32" || d == "fp32" || d == "f32") {
        add_once(out, DFGNN_DTYPE_FLOAT32);
      } else if (d == "float16" || d == "fp16" || d == "f16" || d == "half") {
        add_once(out, DFGNN_DTYPE_FLOAT16);
      } else if (d == "bfloat16" || d == "bf16") {
        add_once(out, DFGNN_DTYPE_BFLOAT16);
      } else {
        throw BadArgs{fmt::format("--dtype '{}' is not float32, float16 or bfloat16", d)};
      }
    }
  return out;
}

void require_models(const std::vector<dfgnn_model_t>& models) {
  if (models.empty()) throw BadArgs{"--model lists no model"};
}

void require_dtypes(const std::vector<dfgnn_dtype_t>& dtypes) {
  if (dtypes.empty()) throw BadArgs{"--dtype lists no dtype"};
}

void check_heads_dim(int heads, int dim) {
  if (heads < 1) throw BadArgs{fmt::format("--heads {} must be >= 1", heads)};
  if (dim < 1) throw BadArgs{fmt::format("--dim {} must be >= 1", dim)};
  if (int64_t{heads} * dim > DFGNN_MAX_CHANNELS)
    throw BadArgs{fmt::format("--heads {} x --dim {} exceeds {} channels per node, the most an op supports", heads, dim,
                              DFGNN_MAX_CHANNELS)};
}

std::vector<dfgnn_direction_t> parse_direction(const std::string& text) {
  if (text == "forward") return {DFGNN_FORWARD};
  if (text == "backward") return {DFGNN_BACKWARD};
  if (text == "both") return {DFGNN_FORWARD, DFGNN_BACKWARD};
  throw BadArgs{fmt::format("--direction '{}' is not forward, backward or both", text)};
}

void check_json_path(const std::string& path) {
  if (path.empty()) throw BadArgs{"--json needs a file name"};
  const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
  std::error_code ec;
  if (!std::filesystem::is_directory(parent, ec))
    throw BadArgs{fmt::format("--json {}: directory {} does not exist", path, parent.string())};
  if (std::filesystem::is_directory(path, ec)) throw BadArgs{fmt::format("--json {} is a directory", path)};
  // Probed by opening it: permissions alone do not tell (root, read-only mounts, /proc). Other
  // existing files (/dev/stdout, a FIFO) are left alone: opening one may block or consume it.
  const bool existed = std::filesystem::exists(path, ec);
  if (existed && !std::filesystem::is_regular_file(path, ec)) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw BadArgs{fmt::format("--json {}: cannot write the file: {}", path, std::strerror(errno))};
  ::close(fd);
  if (!existed) std::filesystem::remove(path, ec);
}

uint64_t parse_seed(const std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, err] = std::from_chars(text.data(), end, value);
  if (text.empty() || err != std::errc() || ptr != end)
    throw BadArgs{fmt::format("--seed '{}' is not an integer in 0..{}", text, UINT64_MAX)};
  return value;
}

// ---------------------------------------------------------------- graphs

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

void check_rmat_scale(int scale) {
  if (scale < 1 || scale > 30) throw BadArgs{fmt::format("--rmat {} is not a scale in 1..30", scale)};
}

std::vector<GraphSpec> graph_specs(const GraphArgs& args, bool reject_empty_paths) {
  if (args.rmat_edges < 0) throw BadArgs{"--rmat-edges must be >= 0"};
  if (args.rmat_edges_given && args.rmat_scales.empty()) throw BadArgs{"--rmat-edges needs --rmat"};
  std::vector<GraphSpec> specs;
  for (const std::string& p : args.paths) {
    if (reject_empty_paths && p.empty()) throw BadArgs{"an empty graph path was given"};
    GraphSpec g;
    g.kind = GraphSpec::Kind::File;
    g.path = p;
    specs.push_back(g);
  }
  for (int s : args.rmat_scales) {
    check_rmat_scale(s);
    GraphSpec g;
    g.kind = GraphSpec::Kind::Rmat;
    g.scale = s;
    g.edges = args.rmat_edges > 0 ? args.rmat_edges : (int64_t{16} << s);
    specs.push_back(g);
  }
  for (const std::string& h : args.hubs) {
    GraphSpec g;
    g.kind = GraphSpec::Kind::Hubs;
    g.hubs = parse_hubs(h);
    g.text = h;
    specs.push_back(g);
  }
  return specs;
}

std::string graph_name(const GraphSpec& spec, uint64_t seed, bool self_loops) {
  std::string name;
  switch (spec.kind) {
    case GraphSpec::Kind::File:
      name = spec.path;
      break;
    case GraphSpec::Kind::Rmat:
      name = fmt::format("rmat-s{}-e{}-seed{}", spec.scale, spec.edges, seed);
      break;
    case GraphSpec::Kind::Hubs: {
      const HubSpec& h = spec.hubs;
      name = fmt::format("hubs-n{}-avg{}-h{}x{}-seed{}", h.nodes, h.avg_degree, h.hubs, h.hub_degree, seed);
      break;
    }
  }
  return self_loops ? name + "+loops" : name;
}

dfgnn_status_t create_graph(dfgnn_context_t ctx, const GraphSpec& spec, uint64_t seed,
                            const dfgnn_graph_options_t* options, dfgnn_graph_t* graph) {
  switch (spec.kind) {
    case GraphSpec::Kind::File:
      return dfgnnGraphCreateFromFile(ctx, spec.path.c_str(), options, graph);
    case GraphSpec::Kind::Rmat:
      return dfgnnGraphCreateRmat(ctx, spec.scale, spec.edges, 0.57, 0.19, 0.19,
                                  DFGNN_RMAT_DEDUPLICATE | DFGNN_RMAT_NO_SELF_LOOPS | DFGNN_RMAT_PERMUTE_IDS, seed,
                                  options, graph);
    case GraphSpec::Kind::Hubs: {
      const HubSpec& h = spec.hubs;
      return dfgnnGraphCreatePlantedHubs(ctx, h.nodes, h.avg_degree, h.hubs, h.hub_degree, seed, options, graph);
    }
  }
  return DFGNN_STATUS_INVALID_ARGUMENT;
}

}  // namespace cli
