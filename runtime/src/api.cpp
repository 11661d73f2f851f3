// The C boundary: argument unpacking and exception-to-status mapping for every entry point.
#include <dfgnn/dfgnn.h>

#include "api_guard.hpp"
#include "context.hpp"
#include "dispatch.hpp"
#include "handles.hpp"
#include "fingerprint.hpp"
#include "graph.hpp"
#include "graph_io.hpp"
#include "op.hpp"
#include "ops.hpp"
#include "schedule.hpp"
#include "solver.hpp"
#include "reference.hpp"

#include <cmath>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>
#include <cstring>
#include <string>
#include <vector>


namespace dfgnn {
namespace {

thread_local std::string last_error;

dfgnn_graph_options_t options_or_default(const dfgnn_graph_options_t* options) {
  return options != nullptr ? *options : dfgnnGraphDefaultOptions();
}

template <typename T>
T& out_param(T* p, const char* name) {
  if (p == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "{} (output) is null", name);
  return *p;
}

void publish(std::unique_ptr<Graph> impl, dfgnn_graph_t* graph) {
  *graph = new dfgnn_graph{std::move(impl)};
}

void check_memory(dfgnn_memory_t memory) {
  if (memory != DFGNN_MEMORY_HOST && memory != DFGNN_MEMORY_DEVICE)
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "memory {} is neither DFGNN_MEMORY_HOST nor DFGNN_MEMORY_DEVICE",
         static_cast<int>(memory));
}

}  // namespace

void write_text(const std::string& text, char* buffer, size_t capacity, size_t* length) {
  if (length != nullptr) *length = text.size();
  if (capacity == 0) return;
  if (buffer == nullptr) fail(DFGNN_STATUS_NULL_POINTER, "buffer is null but capacity = {}", capacity);
  const size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
}

int32_t any_alignment(const dfgnn_op_t& op) { return static_cast<int32_t>(16 / dtype_size(op.dtype)); }

namespace {

const void* const* slots_of(const dfgnn_inputs_t& in) { return reinterpret_cast<const void* const*>(&in); }

void check_reference_op(const Graph& graph, const dfgnn_op_t* op) {
  if (op == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "op is null");
  validate_op(*op, graph.num_nodes(), graph.num_edges());
  if (op->dtype != DFGNN_DTYPE_FLOAT64)
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "reference ops take float64 arrays: op.dtype must be DFGNN_DTYPE_FLOAT64 (got {})",
         dtype_name(op->dtype));
}

}  // namespace

void set_last_error(const std::string& message) { last_error = message; }
void clear_last_error() { last_error.clear(); }

}  // namespace dfgnn

using namespace dfgnn;

extern "C" {

const char* dfgnnGetStatusString(dfgnn_status_t status) {
  switch (status) {
    case DFGNN_STATUS_SUCCESS: return "success";
    case DFGNN_STATUS_INVALID_ARGUMENT: return "invalid argument";
    case DFGNN_STATUS_NULL_POINTER: return "null pointer with non-zero size";
    case DFGNN_STATUS_NEGATIVE_SIZE: return "negative size";
    case DFGNN_STATUS_INDEX_OVERFLOW: return "size does not fit the index type";
    case DFGNN_STATUS_ROW_PTR_START: return "row_ptr does not start at 0";
    case DFGNN_STATUS_ROW_PTR_DECREASING: return "row_ptr decreases";
    case DFGNN_STATUS_ROW_PTR_END: return "row_ptr does not end at nnz";
    case DFGNN_STATUS_INDEX_OUT_OF_RANGE: return "node index out of range";
    case DFGNN_STATUS_DUPLICATE_EDGE: return "duplicate edge";
    case DFGNN_STATUS_OUT_OF_MEMORY: return "out of memory";
    case DFGNN_STATUS_NO_DEVICE: return "no CUDA device";
    case DFGNN_STATUS_CUDA_ERROR: return "CUDA error";
    case DFGNN_STATUS_COMPILE_ERROR: return "NVRTC compile error";
    case DFGNN_STATUS_NOT_SUPPORTED: return "not supported";
    case DFGNN_STATUS_IO_ERROR: return "I/O error";
    case DFGNN_STATUS_PARSE_ERROR: return "parse error";
    case DFGNN_STATUS_DATABASE_ERROR: return "database error";
    case DFGNN_STATUS_INTERNAL_ERROR: return "internal error";
  }
  return "unknown status";
}

const char* dfgnnGetLastErrorMessage(void) { return last_error.c_str(); }

const char* dfgnnGetVersion(void) { return DFGNN_VERSION_STRING; }

dfgnn_status_t dfgnnCreate(dfgnn_context_t* ctx) {
  return guard([&] { out_param(ctx, "ctx") = new dfgnn_context{}; });
}

dfgnn_status_t dfgnnDestroy(dfgnn_context_t ctx) {
  return guard([&] { destroy_handle<dfgnn_context>(ctx, "ctx"); });
}

dfgnn_status_t dfgnnHasDevice(dfgnn_context_t ctx, int* has_device, const char** reason) {
  return guard([&] {
    deref<dfgnn_context>(ctx, "ctx");
    const DeviceStatus& s = device_status();
    out_param(has_device, "has_device") = s.available ? 1 : 0;
    if (reason != nullptr) *reason = s.reason.c_str();
  });
}

dfgnn_graph_options_t dfgnnGraphDefaultOptions(void) {
  dfgnn_graph_options_t options;
  options.add_self_loops = 0;
  options.duplicates = DFGNN_DUPLICATES_KEEP;
  options.stream = nullptr;
  return options;
}

dfgnn_status_t dfgnnGraphCreateCsr(dfgnn_context_t ctx, int64_t num_nodes, int64_t nnz, const void* row_ptr,
                                   const void* col_idx, dfgnn_index_type_t index_type, dfgnn_memory_t memory,
                                   const dfgnn_graph_options_t* options, dfgnn_graph_t* graph) {
  return guard([&] {
    deref<dfgnn_context>(ctx, "ctx");
    out_param(graph, "graph");
    check_memory(memory);
    const dfgnn_graph_options_t opts = options_or_default(options);
    Graph::check_csr_shape(num_nodes, nnz, row_ptr, col_idx, index_type, opts);
    if (memory == DFGNN_MEMORY_HOST || row_ptr == nullptr) {
      publish(Graph::from_csr(num_nodes, nnz, row_ptr, col_idx, index_type, opts), graph);
      return;
    }
    publish(Graph::from_device_csr(num_nodes, nnz, row_ptr, col_idx, index_type, opts,
                                   static_cast<cudaStream_t>(opts.stream)),
            graph);
  });
}

dfgnn_status_t dfgnnGraphCreateCoo(dfgnn_context_t ctx, int64_t num_nodes, int64_t num_edges, const void* edge_index,
                                   dfgnn_index_type_t index_type, dfgnn_memory_t memory,
                                   const dfgnn_graph_options_t* options, dfgnn_graph_t* graph) {
  return guard([&] {
    deref<dfgnn_context>(ctx, "ctx");
    out_param(graph, "graph");
    check_memory(memory);
    const dfgnn_graph_options_t opts = options_or_default(options);
    Graph::check_coo_shape(num_nodes, num_edges, edge_index, index_type, opts);
    if (memory == DFGNN_MEMORY_HOST || edge_index == nullptr) {
      publish(Graph::from_coo(num_nodes, num_edges, edge_index, index_type, opts), graph);
      return;
    }
    publish(Graph::from_device_coo(num_nodes, num_edges, edge_index, index_type, opts,
                                   static_cast<cudaStream_t>(opts.stream)),
            graph);
  });
}

dfgnn_status_t dfgnnGraphCreateFromFile(dfgnn_context_t ctx, const char* path, const dfgnn_graph_options_t* options,
                                        dfgnn_graph_t* graph) {
  return guard([&] {
    deref<dfgnn_context>(ctx, "ctx");
    out_param(graph, "graph");
    if (path == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "path is null");
    EdgeList edges = read_graph_file(path);
    publish(Graph::from_coo(edges.num_nodes, edges.num_edges(), edges.edge_index.data(), DFGNN_INDEX_INT64,
                            options_or_default(options)),
            graph);
  });
}

dfgnn_status_t dfgnnGraphCreateRmat(dfgnn_context_t ctx, int32_t scale, int64_t num_edges, double a, double b,
                                    double c, uint32_t flags, uint64_t seed, const dfgnn_graph_options_t* options,
                                    dfgnn_graph_t* graph) {
  return guard([&] {
    deref<dfgnn_context>(ctx, "ctx");
    out_param(graph, "graph");
    EdgeList edges = generate_rmat(scale, num_edges, a, b, c, flags, seed);
    publish(Graph::from_coo(edges.num_nodes, edges.num_edges(), edges.edge_index.data(), DFGNN_INDEX_INT64,
                            options_or_default(options)),
            graph);
  });
}

dfgnn_status_t dfgnnGraphCreatePlantedHubs(dfgnn_context_t ctx, int64_t num_nodes, int32_t avg_degree,
                                           int32_t num_hubs, int64_t hub_degree, uint64_t seed,
                                           const dfgnn_graph_options_t* options, dfgnn_graph_t* graph) {
  return guard([&] {
    deref<dfgnn_context>(ctx, "ctx");
    out_param(graph, "graph");
    EdgeList edges = generate_planted_hubs(num_nodes, avg_degree, num_hubs, hub_degree, seed);
    publish(Graph::from_coo(edges.num_nodes, edges.num_edges(), edges.edge_index.data(), DFGNN_INDEX_INT64,
                            options_or_default(options)),
            graph);
  });
}

dfgnn_status_t dfgnnGraphRetain(dfgnn_graph_t graph) {
  return guard([&] { deref<dfgnn_graph>(graph, "graph").references.fetch_add(1); });
}

dfgnn_status_t dfgnnGraphDestroy(dfgnn_graph_t graph) {
  return guard([&] {
    if (graph == nullptr) return;
    // the last reference frees it (and takes it out of the live handles, so a use after is an error)
    if (deref<dfgnn_graph>(graph, "graph").references.fetch_sub(1) == 1) destroy_handle<dfgnn_graph>(graph, "graph");
  });
}

dfgnn_status_t dfgnnGraphGetSize(dfgnn_graph_t graph, int64_t* num_nodes, int64_t* num_edges) {
  return guard([&] {
    const Graph& g = graph_of(graph);
    if (num_nodes != nullptr) *num_nodes = g.num_nodes();
    if (num_edges != nullptr) *num_edges = g.num_edges();
  });
}

namespace {
// One structure's arrays, from the host copy or (given) the device copy: only the side asked for is
// touched, so a device-built graph makes no host copies here, nor a host-built one device copies.
void get_compressed(const Compressed* host, const DeviceCompressed* device, const int32_t** ptr, const int32_t** idx,
                    const int32_t** eid) {
  if (ptr != nullptr) *ptr = device ? device->ptr.as<const int32_t>() : host->ptr.data();
  if (idx != nullptr) *idx = device ? device->idx.as<const int32_t>() : host->idx.data();
  if (eid != nullptr) *eid = device ? device->eid.as<const int32_t>() : host->eid.data();
}
}  // namespace

dfgnn_status_t dfgnnGraphGetCsr(dfgnn_graph_t graph, dfgnn_memory_t memory, const int32_t** row_ptr,
                                const int32_t** col_idx, const int32_t** edge_id) {
  return guard([&] {
    const Graph& g = graph_of(graph);
    check_memory(memory);
    if (memory == DFGNN_MEMORY_DEVICE) {
      get_compressed(nullptr, &g.device_csr(), row_ptr, col_idx, nullptr);
      if (edge_id != nullptr) *edge_id = g.device_csr_edge_ids();  // uploaded on first need
    } else {
      get_compressed(&g.csr(), nullptr, row_ptr, col_idx, edge_id);
    }
  });
}

dfgnn_status_t dfgnnGraphGetCsc(dfgnn_graph_t graph, dfgnn_memory_t memory, const int32_t** col_ptr,
                                const int32_t** row_idx, const int32_t** csr_pos) {
  return guard([&] {
    const Graph& g = graph_of(graph);
    check_memory(memory);
    if (memory == DFGNN_MEMORY_DEVICE)
      get_compressed(nullptr, &g.device_csc(), col_ptr, row_idx, csr_pos);
    else
      get_compressed(&g.csc(), nullptr, col_ptr, row_idx, csr_pos);
  });
}

dfgnn_status_t dfgnnGraphGetFingerprint(dfgnn_graph_t graph, dfgnn_fingerprint_t* fingerprint) {
  return guard([&] { out_param(fingerprint, "fingerprint") = graph_of(graph).fingerprint(); });
}

dfgnn_status_t dfgnnFingerprintSerialize(const dfgnn_fingerprint_t* fingerprint, char* buffer, size_t capacity,
                                         size_t* length) {
  return guard([&] {
    if (fingerprint == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "fingerprint is null");
    write_text(serialize_fingerprint(*fingerprint), buffer, capacity, length);
  });
}

dfgnn_status_t dfgnnFingerprintParse(const char* text, dfgnn_fingerprint_t* fingerprint) {
  return guard([&] {
    if (text == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "text is null");
    out_param(fingerprint, "fingerprint") = parse_fingerprint(text);
  });
}

dfgnn_status_t dfgnnFingerprintDistance(const dfgnn_fingerprint_t* a, const dfgnn_fingerprint_t* b, double* distance) {
  return guard([&] {
    if (a == nullptr || b == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "fingerprint {} is null", a ? "b" : "a");
    out_param(distance, "distance") = fingerprint_distance(*a, *b);
  });
}

dfgnn_status_t dfgnnFingerprintBucketKey(const dfgnn_fingerprint_t* fingerprint, char* buffer, size_t capacity,
                                         size_t* length) {
  return guard([&] {
    if (fingerprint == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "fingerprint is null");
    write_text(fingerprint_bucket_key(*fingerprint), buffer, capacity, length);
  });
}

dfgnn_op_t dfgnnOpDefault(dfgnn_model_t model, dfgnn_dtype_t dtype, int32_t heads, int32_t dim) {
  dfgnn_op_t op;
  op.model = model;
  op.dtype = dtype;
  op.heads = heads;
  op.dim = dim;
  op.negative_slope = 0.2f;
  op.scale = 0.0f;
  op.dropout = 0.0f;
  op.dropout_seed = 0;
  op.edge_features = 0;
  return op;
}

dfgnn_status_t dfgnnReferenceForward(dfgnn_graph_t graph, const dfgnn_op_t* op, const dfgnn_inputs_t* inputs,
                                     double* out, double* lse) {
  return guard([&] {
    const Graph& g = graph_of(graph);
    check_reference_op(g, op);
    if (inputs == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "inputs is null");
    validate_slots(*op, slots_of(*inputs), "inputs", g.num_nodes(), g.num_edges());
    if (out == nullptr && g.num_nodes() > 0) fail(DFGNN_STATUS_NULL_POINTER, "out is null");
    reference_forward(g, *op, *inputs, out, lse);
  });
}

dfgnn_status_t dfgnnReferenceBackward(dfgnn_graph_t graph, const dfgnn_op_t* op, const dfgnn_inputs_t* inputs,
                                      const double* grad_out, const dfgnn_grads_t* grads) {
  return guard([&] {
    const Graph& g = graph_of(graph);
    check_reference_op(g, op);
    if (inputs == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "inputs is null");
    if (grads == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "grads is null");
    validate_slots(*op, slots_of(*inputs), "inputs", g.num_nodes(), g.num_edges());
    validate_slots(*op, reinterpret_cast<const void* const*>(grads), "grads", g.num_nodes(), g.num_edges());
    if (grad_out == nullptr && g.num_nodes() > 0) fail(DFGNN_STATUS_NULL_POINTER, "grad_out is null");
    reference_backward(g, *op, *inputs, grad_out, *grads);
  });
}

namespace {

LaunchArgs launch_args(const dfgnn_launch_t* launch) {
  LaunchArgs args;
  if (launch != nullptr) {
    args.stream = static_cast<cudaStream_t>(launch->stream);
    args.workspace = launch->workspace;
    args.workspace_bytes = launch->workspace_bytes;
    args.schedule = launch->schedule;
    args.dropout_seed_device = launch->dropout_seed_device;
  }
  return args;
}


}  // namespace

dfgnn_status_t dfgnnGetWorkspaceSize(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                     dfgnn_direction_t direction, const char* schedule, size_t* bytes) {
  return guard([&] {
    Context& c = deref<dfgnn_context>(ctx, "ctx").impl;
    const Graph& g = graph_of(graph);
    const dfgnn_op_t& o = op_of(op);
    const SchedulePair s = choose_schedules(c, g, o, direction, schedule, any_alignment(o));
    out_param(bytes, "bytes") = workspace_size(g, o, direction, s);
  });
}

dfgnn_status_t dfgnnForward(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                            const dfgnn_inputs_t* inputs, void* out, float* lse, const dfgnn_launch_t* launch) {
  return guard([&] {
    Context& c = deref<dfgnn_context>(ctx, "ctx").impl;
    const Graph& g = graph_of(graph);
    const dfgnn_op_t& o = op_of(op);
    if (inputs == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "inputs is null");
    validate_slots(o, slots_of(*inputs), "inputs", g.num_nodes(), g.num_edges());
    forward(c, g, o, *inputs, out, lse, launch_args(launch));
  });
}

dfgnn_status_t dfgnnBackward(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                             const dfgnn_inputs_t* inputs, const void* out, const float* lse, const void* grad_out,
                             const dfgnn_grads_t* grads, const dfgnn_launch_t* launch) {
  return guard([&] {
    Context& c = deref<dfgnn_context>(ctx, "ctx").impl;
    const Graph& g = graph_of(graph);
    const dfgnn_op_t& o = op_of(op);
    if (inputs == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "inputs is null");
    if (grads == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "grads is null");
    validate_slots(o, slots_of(*inputs), "inputs", g.num_nodes(), g.num_edges());
    validate_slots(o, reinterpret_cast<const void* const*>(grads), "grads", g.num_nodes(), g.num_edges());
    backward(c, g, o, *inputs, out, lse, grad_out, *grads, launch_args(launch));
  });
}

dfgnn_status_t dfgnnGetSchedule(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                dfgnn_direction_t direction, const char* schedule, char* buffer, size_t capacity,
                                size_t* length) {
  return guard([&] {
    Context& c = deref<dfgnn_context>(ctx, "ctx").impl;
    const Graph& g = graph_of(graph);
    const dfgnn_op_t& o = op_of(op);
    const SchedulePair s = choose_schedules(c, g, o, direction, schedule, any_alignment(o));
    write_text(to_string(direction, s), buffer, capacity, length);
  });
}

dfgnn_status_t dfgnnListSchedules(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op, int pass,
                                  char* buffer, size_t capacity, size_t* length) {
  return guard([&] {
    deref<dfgnn_context>(ctx, "ctx");
    const Graph& g = graph_of(graph);
    const dfgnn_op_t& o = op_of(op);
    validate_op(o, g.num_nodes(), g.num_edges());
    if (pass < 0 || pass > 2) fail(DFGNN_STATUS_INVALID_ARGUMENT, "pass {} is not 0, 1 or 2", pass);
    std::string text;
    for (const Schedule& s : enumerate_schedules(pass_problem(g, o, static_cast<PassKind>(pass), any_alignment(o))))
      text += to_string(s) + "\n";
    write_text(text, buffer, capacity, length);
  });
}

dfgnn_status_t dfgnnCompile(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                            dfgnn_direction_t direction, const char* schedule, int arch) {
  return guard([&] {
    Context& c = deref<dfgnn_context>(ctx, "ctx").impl;
    const dfgnn_op_t& o = op_of(op);
    if (arch < 50 || arch > 200) fail(DFGNN_STATUS_INVALID_ARGUMENT, "arch {} is not a compute capability like 90", arch);
    // Checked here too: without a graph nothing else does, and any other value would compile a backward.
    if (direction != DFGNN_FORWARD && direction != DFGNN_BACKWARD)
      fail(DFGNN_STATUS_INVALID_ARGUMENT, "direction {} is neither DFGNN_FORWARD nor DFGNN_BACKWARD", static_cast<int>(direction));
    SchedulePair s;
    if (graph != nullptr) {
      s = choose_schedules(c, graph_of(graph), o, direction, schedule, any_alignment(o));
    } else {
      if (schedule == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "dfgnnCompile needs a graph or a schedule");
      validate_op(o, 0, 0);
      s = parse_schedules(direction, schedule);
      // Validity needs no graph data: check against an empty fingerprint.
      const dfgnn_fingerprint_t none{};
      PassProblem problem;
      problem.op = o;
      problem.fingerprint = &none;
      problem.max_vec = any_alignment(o);
      problem.pass = direction == DFGNN_FORWARD ? PassKind::Forward : PassKind::BackwardRow;
      require_valid(problem, s.row);
      if (direction == DFGNN_BACKWARD) {
        problem.pass = PassKind::BackwardCol;
        require_valid(problem, s.col);
      }
    }
    if (direction == DFGNN_FORWARD) {
      c.modules.cubin(pass_kernel_names(o, PassKind::Forward, s.row), arch);
    } else {
      c.modules.cubins(backward_module_names(o, s), arch);
    }
  });
}

dfgnn_status_t dfgnnSetTuneMode(dfgnn_context_t ctx, dfgnn_tune_mode_t mode) {
  return guard([&] {
    Context& c = context_of(ctx);
    if (mode != DFGNN_TUNE_OFF && mode != DFGNN_TUNE_ON_MISS)
      fail(DFGNN_STATUS_INVALID_ARGUMENT, "tune mode {} is neither DFGNN_TUNE_OFF nor DFGNN_TUNE_ON_MISS", static_cast<int>(mode));
    c.dispatcher.set_mode(mode == DFGNN_TUNE_ON_MISS ? TuneMode::OnMiss : TuneMode::Off);
  });
}

dfgnn_status_t dfgnnSetDatabase(dfgnn_context_t ctx, const char* user_path, const char* site_paths) {
  return guard([&] {
    Context& c = context_of(ctx);
    std::optional<std::filesystem::path> user;
    if (user_path != nullptr) user = std::filesystem::path(user_path);
    std::optional<std::vector<std::filesystem::path>> sites;
    if (site_paths != nullptr) {
      sites.emplace();
      std::string rest(site_paths);
      for (size_t pos = 0; pos <= rest.size();) {
        const size_t colon = std::min(rest.find(':', pos), rest.size());
        if (colon > pos) sites->emplace_back(rest.substr(pos, colon - pos));
        pos = colon + 1;
      }
    }
    c.dispatcher.set_database(std::move(user), std::move(sites));
  });
}

namespace {
// Where the module of a pass under a schedule came from in this process, for explain: "compiled",
// or the database layer and file it was read from.
std::string module_origin(Context& c, const dfgnn_op_t& op, PassKind pass, const Schedule& s) {
  if (!device_status().available) return "none: no GPU (modules are loaded at a call)";
  std::vector<std::string> names = pass_kernel_names(op, pass, s);
  const std::string origin = c.modules.origin(names, c.current_arch());
  return origin.empty() ? "not loaded yet (the first call loads or compiles it)" : origin;
}
}  // namespace

dfgnn_status_t dfgnnExplain(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                            dfgnn_direction_t direction, char* buffer, size_t capacity, size_t* length) {
  return guard([&] {
    Context& c = context_of(ctx);
    const Graph& g = graph_of(graph);
    const dfgnn_op_t& o = op_of(op);
    // Opened here even without a GPU (dispatch then never looks it up), so that explain reports
    // (logs) a damaged database instead of quietly showing the default rule.
    c.dispatcher.database();
    choose_schedules(c, g, o, direction, nullptr, any_alignment(o));  // validates, fills the cache
    std::vector<PassKind> passes{PassKind::Forward};
    if (direction == DFGNN_BACKWARD) passes = {PassKind::BackwardRow, PassKind::BackwardCol};
    nlohmann::ordered_json report = nlohmann::ordered_json::array();
    for (PassKind pass : passes) {
      const Decision d = c.dispatcher.decide(c, g, o, pass, any_alignment(o));
      nlohmann::ordered_json j;
      j["pass"] = pass_name(pass);
      j["level"] = level_name(d.level);
      j["origin"] = level_name(d.origin);  // what answered first, also once cached
      j["cached"] = d.cached();            // served from this context's memory now
      if (d.bucket) j["from_bucket"] = true;  // answered for another graph of the same fingerprint bucket
      j["schedule"] = to_string(d.schedule);
      j["origin_detail"] = describe_origin(d);
      if (!d.layer.empty()) j["layer"] = d.layer;  // "user", "site" or "shipped"
      j["module"] = module_origin(c, o, pass, d.schedule);
      if (d.origin == DispatchLevel::Nearest) {
        j["distance"] = d.distance;
        j["radius"] = d.radius;
        // tuned graphs that voted (1: the nearest graph's winner was clear, so no vote was held); the
        // row below is the nearest one's
        j["neighbours"] = d.neighbours;
        if (d.row) {
          const dfgnn_fingerprint_t fp = stored_fingerprint(d.row->fingerprint_text).fp;  // checked when the row was read
          j["neighbour"] = {{"fingerprint_hash", d.row->fingerprint_hash}, {"bucket_key", d.row->bucket_key},
                            {"nodes", fp.num_nodes}, {"edges", fp.num_edges}};
        }
      }
      if (d.origin == DispatchLevel::Default) j["rule"] = d.rule;
      if (d.row) {
        j["median_ms"] = d.row->stats.median_ms;
        j["samples"] = d.row->stats.count;
        j["default_schedule"] = d.row->default_schedule;
        j["default_median_ms"] = d.row->default_median_ms;
        j["runner_up"] = d.row->runner_up_schedule;
        j["runner_up_median_ms"] = d.row->runner_up_median_ms;
        j["tuned_on"] = d.row->host;
        j["source"] = d.row->source;
      }
      report.push_back(std::move(j));
    }
    write_text(report.dump(), buffer, capacity, length);
  });
}

dfgnn_status_t dfgnnGetCacheCounters(dfgnn_context_t ctx, uint64_t* compiles, uint64_t* hits, uint64_t* loads) {
  return guard([&] {
    const CacheCounters k = deref<dfgnn_context>(ctx, "ctx").impl.modules.counters();
    if (compiles != nullptr) *compiles = k.compiles;
    if (hits != nullptr) *hits = k.hits;
    if (loads != nullptr) *loads = k.loads;
  });
}

dfgnn_status_t dfgnnGetModulesFromDatabase(dfgnn_context_t ctx, uint64_t* count) {
  return guard([&] { out_param(count, "count") = context_of(ctx).modules.counters().stored; });
}

}  // extern "C"
