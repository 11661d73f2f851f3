// dfgnn._dfgnn: the nanobind extension of the Python package, a thin layer over the C API
// (runtime/include/dfgnn/dfgnn.h). It only
//   - owns C handles (context, graph) in reference-counted wrappers,
//   - imports arrays through DLPack / the buffer protocol (nb::ndarray: NumPy, PyTorch, CuPy, JAX
//     arrays pass without copies) and checks dtype, shape, contiguity and device with messages
//     that name the argument,
//   - turns a failing status into a Python exception built by dfgnn._errors (the C API message,
//     status code and function name travel with it).
// Everything else (argument defaults, model names, allocation of outputs) lives in the Python
// package (python_bindings/dfgnn/).
#include <dfgnn/dfgnn.h>

#include "_prepared_call.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// ---------------------------------------------------------------- errors

// kind: "" for a failing C API call; "dtype", "device", "shape", "layout", "type" or "value" for
// a check made here before calling the C API (all with status INVALID_ARGUMENT).
struct BindError : std::exception {
  int status;
  std::string function;
  std::string message;
  std::string kind;
  BindError(int s, std::string f, std::string m, std::string k = "")
      : status(s), function(std::move(f)), message(std::move(m)), kind(std::move(k)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

[[noreturn]] void fail_arg(const std::string& function, const std::string& kind, const std::string& message) {
  throw BindError(DFGNN_STATUS_INVALID_ARGUMENT, function, message, kind);
}

// A Python string as a C string: an embedded NUL would silently cut it short (a schedule "\x00"
// would mean none, a path 'a\x00b' would be 'a'), so it is an error naming the argument.
const char* c_text(const std::string& s, const char* function, const char* name) {
  if (s.find('\0') != std::string::npos)
    fail_arg(function, "value", std::string(name) + " contains an embedded NUL character, which a C string cannot hold");
  return s.c_str();
}
const char* cstr(const std::optional<std::string>& s, const char* function, const char* name) {
  return s ? c_text(*s, function, name) : nullptr;
}

void check(dfgnn_status_t status, const char* function) {
  if (status != DFGNN_STATUS_SUCCESS) throw BindError(status, function, dfgnnGetLastErrorMessage());
}

// Set once by dfgnn/_errors.py: factory(status, function, message, kind) -> exception instance.
// Deliberately leaked so that no Python object is released after the interpreter shut down.
nb::object* error_factory = nullptr;

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const BindError& e) {
    if (error_factory != nullptr) {
      nb::object exc = (*error_factory)(e.status, e.function, e.message, e.kind);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    } else {
      PyErr_SetString(PyExc_RuntimeError, e.message.c_str());
    }
  }
}

// Runs f without the GIL (C API calls may validate large graphs, compile kernels or wait on CUDA).
template <typename F>
void unlocked(F&& f) {
  nb::gil_scoped_release release;
  f();
}

// ---------------------------------------------------------------- handles

struct ContextBox {
  dfgnn_context_t handle = nullptr;
  ContextBox() { check(dfgnnCreate(&handle), "dfgnnCreate"); }
  ~ContextBox() {
    if (handle != nullptr) dfgnnDestroy(handle);
  }
  ContextBox(const ContextBox&) = delete;
  ContextBox& operator=(const ContextBox&) = delete;
};
using ContextPtr = std::shared_ptr<ContextBox>;

struct Context {
  ContextPtr box;
  dfgnn_context_t get() const { return box->handle; }
};

// The process-wide context: created on first use and never destroyed (destroying it at
// interpreter exit could run CUDA calls after the CUDA runtime was unloaded).
Context default_context() {
  static ContextPtr* box = new ContextPtr(std::make_shared<ContextBox>());
  return Context{*box};
}

struct Graph {
  ContextPtr ctx;  // a graph never outlives the context it was built in
  dfgnn_graph_t handle = nullptr;
  Graph(ContextPtr c, dfgnn_graph_t h) : ctx(std::move(c)), handle(h) {}
  ~Graph() {
    if (handle != nullptr) dfgnnGraphDestroy(handle);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  std::pair<int64_t, int64_t> size() const {
    int64_t n = 0, e = 0;
    check(dfgnnGraphGetSize(handle, &n, &e), "dfgnnGraphGetSize");
    return {n, e};
  }
};

dfgnn_graph_options_t graph_options(bool add_self_loops, bool reject_duplicates) {
  dfgnn_graph_options_t o = dfgnnGraphDefaultOptions();
  o.add_self_loops = add_self_loops ? 1 : 0;
  o.duplicates = reject_duplicates ? DFGNN_DUPLICATES_REJECT : DFGNN_DUPLICATES_KEEP;
  return o;
}

// ---------------------------------------------------------------- arrays

// DLPack device types (dlpack.h DLDeviceType).
constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13;

using InArray = nb::ndarray<nb::ro>;  // any dtype / shape / device, read-only access
using OutArray = nb::ndarray<>;       // writable

std::string dtype_name(nb::dlpack::dtype dt) {
  using C = nb::dlpack::dtype_code;
  std::string base;
  switch (static_cast<C>(dt.code)) {
    case C::Int: base = "int"; break;
    case C::UInt: base = "uint"; break;
    case C::Float: base = "float"; break;
    case C::Bfloat: base = "bfloat"; break;
    case C::Complex: base = "complex"; break;
    case C::Bool: return "bool";
    default: base = "dtype_code" + std::to_string(dt.code) + "_"; break;
  }
  std::string s = base + std::to_string(dt.bits);
  if (dt.lanes != 1) s += "x" + std::to_string(dt.lanes);
  return s;
}

std::string device_name(int type, int id) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(id);
    case kDLCUDAHost: return "cuda_host (pinned)";
    case kDLCUDAManaged: return "cuda_managed:" + std::to_string(id);
    default: return "DLPack device type " + std::to_string(type) + ":" + std::to_string(id);
  }
}

template <typename A>
std::string shape_str(const A& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

template <typename A>
std::string strides_str(const A& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.stride(i));
  return s + "]";
}

template <typename A>
bool c_contiguous(const A& a) {
  for (size_t i = 0; i < a.ndim(); ++i)
    if (a.shape(i) == 0) return true;  // no elements: any strides
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

bool is_host(int device_type) {
  return device_type == kDLCPU || device_type == kDLCUDAHost || device_type == kDLCUDAManaged;
}
bool is_cuda(int device_type) { return device_type == kDLCUDA || device_type == kDLCUDAManaged; }

std::string py_type_name(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

// Imports an argument as an ndarray without copying; a non-array is a TypeError-like error.
template <typename A>
A import_array(nb::handle obj, const char* function, const std::string& name) {
  // A masked array would import as its data with the mask ignored.
  if (py_type_name(obj).find("MaskedArray") != std::string::npos)
    fail_arg(function, "type", name + " is a NumPy masked array, whose mask dfgnn would ignore; pass a plain array "
                                      "(.filled(value) or .compressed())");
  A out;
  if (!nb::try_cast(obj, out, /*convert=*/false)) {
    // NumPy arrays in non-native byte order cannot be imported: say so rather than "not an array".
    if (nb::hasattr(obj, "dtype") && nb::hasattr(obj.attr("dtype"), "isnative") &&
        !nb::cast<bool>(obj.attr("dtype").attr("isnative")))
      fail_arg(function, "dtype", name + " has non-native byte order (dtype '" +
                                      nb::cast<std::string>(nb::str(obj.attr("dtype").attr("str"))) +
                                      "'); convert it, e.g. with .astype(a.dtype.newbyteorder('='))");
    const bool arrayish = nb::hasattr(obj, "__dlpack__") || nb::hasattr(obj, "__array_interface__");
    if (arrayish && !std::is_same_v<A, InArray>)
      fail_arg(function, "type", name + " must be a writable array; could not import the " + py_type_name(obj) +
                                     " for writing (read-only array?)");
    fail_arg(function, "type", name + " must be an array (a NumPy array or any object with __dlpack__), got " +
                                   py_type_name(obj));
  }
  return out;
}

template <typename A>
void require_contiguous(const A& a, const char* function, const std::string& name) {
  if (!c_contiguous(a))
    fail_arg(function, "layout", name + " must be C-contiguous (row-major), got shape " + shape_str(a) +
                                     " with strides " + strides_str(a) +
                                     " (in elements); use numpy.ascontiguousarray(x) or x.contiguous()");
}

// Where the arrays of one call live; all must agree.
struct Placement {
  bool device = false;  // true: CUDA memory of one device
  int device_type = 0;
  int device_id = -1;
  std::string first;    // name of the array that fixed the placement
};

template <typename A>
void require_placement(const A& a, const char* function, const std::string& name, Placement& p) {
  const int type = a.device_type();
  if (p.device) {
    if (!is_cuda(type))
      fail_arg(function, "device", name + " is on " + device_name(type, a.device_id()) +
                                       ", but GPU ops take CUDA arrays (use dfgnn.reference_forward / "
                                       "reference_backward for float64 host arrays)");
    if (p.device_id < 0) {
      p.device_id = a.device_id();
      p.first = name;
    } else if (a.device_id() != p.device_id) {
      fail_arg(function, "device", name + " is on " + device_name(type, a.device_id()) + " but " + p.first +
                                       " is on cuda:" + std::to_string(p.device_id) +
                                       "; all arrays of one op must be on the same device");
    }
  } else if (!is_host(type)) {
    fail_arg(function, "device", name + " is on " + device_name(type, a.device_id()) +
                                     ", but reference ops take host arrays (NumPy, or CPU tensors)");
  }
}

nb::dlpack::dtype dl_dtype_of(dfgnn_dtype_t t) {
  using C = nb::dlpack::dtype_code;
  nb::dlpack::dtype d;
  d.lanes = 1;
  switch (t) {
    case DFGNN_DTYPE_FLOAT32: d.code = (uint8_t)C::Float; d.bits = 32; break;
    case DFGNN_DTYPE_FLOAT16: d.code = (uint8_t)C::Float; d.bits = 16; break;
    case DFGNN_DTYPE_BFLOAT16: d.code = (uint8_t)C::Bfloat; d.bits = 16; break;
    case DFGNN_DTYPE_FLOAT64: d.code = (uint8_t)C::Float; d.bits = 64; break;
  }
  return d;
}

template <typename A>
void require_dtype(const A& a, nb::dlpack::dtype want, const char* function, const std::string& name,
                   const char* why) {
  if (a.dtype() != want)
    fail_arg(function, "dtype", name + " must have dtype " + dtype_name(want) + " (" + why + "), got " +
                                    dtype_name(a.dtype()));
}

bool is_index_dtype(nb::dlpack::dtype dt, dfgnn_index_type_t* type) {
  if (dt.code != (uint8_t)nb::dlpack::dtype_code::Int || dt.lanes != 1) return false;
  if (dt.bits == 32) *type = DFGNN_INDEX_INT32;
  else if (dt.bits == 64) *type = DFGNN_INDEX_INT64;
  else return false;
  return true;
}

dfgnn_memory_t memory_of(const InArray& a, const char* function, const std::string& name) {
  const int type = a.device_type();
  if (type == kDLCUDA) return DFGNN_MEMORY_DEVICE;
  if (is_host(type)) return DFGNN_MEMORY_HOST;
  fail_arg(function, "device", name + " is on " + device_name(type, a.device_id()) +
                                   "; graphs are built from host or CUDA arrays");
}

// ---------------------------------------------------------------- graphs

// stream: the cudaStream_t (as an integer) a device edge_index is built on; 0 = legacy default.
std::unique_ptr<Graph> graph_coo(const Context& ctx, nb::handle edge_index_obj, int64_t num_nodes,
                                 bool add_self_loops, bool reject_duplicates, uintptr_t stream) {
  const char* fn = "dfgnnGraphCreateCoo";
  InArray ei = import_array<InArray>(edge_index_obj, fn, "edge_index");
  if (ei.ndim() != 2 || ei.shape(0) != 2)
    fail_arg(fn, "shape", "edge_index must have shape [2, E], got " + shape_str(ei));
  dfgnn_index_type_t index_type;
  if (!is_index_dtype(ei.dtype(), &index_type))
    fail_arg(fn, "dtype", "edge_index must have dtype int32 or int64, got " + dtype_name(ei.dtype()));
  require_contiguous(ei, fn, "edge_index");
  const dfgnn_memory_t memory = memory_of(ei, fn, "edge_index");
  auto opts = graph_options(add_self_loops, reject_duplicates);
  opts.stream = reinterpret_cast<void*>(stream);
  const int64_t num_edges = static_cast<int64_t>(ei.shape(1));
  const void* data = ei.data();
  dfgnn_graph_t g = nullptr;
  dfgnn_status_t s;
  unlocked([&] { s = dfgnnGraphCreateCoo(ctx.get(), num_nodes, num_edges, data, index_type, memory, &opts, &g); });
  check(s, fn);
  return std::make_unique<Graph>(ctx.box, g);
}

std::unique_ptr<Graph> graph_csr(const Context& ctx, nb::handle row_ptr_obj, nb::handle col_idx_obj,
                                 bool add_self_loops, bool reject_duplicates, uintptr_t stream) {
  const char* fn = "dfgnnGraphCreateCsr";
  InArray rp = import_array<InArray>(row_ptr_obj, fn, "row_ptr");
  InArray ci = import_array<InArray>(col_idx_obj, fn, "col_idx");
  if (rp.ndim() != 1 || rp.shape(0) < 1)
    fail_arg(fn, "shape", "row_ptr must have shape [N + 1] (at least one entry), got " + shape_str(rp));
  if (ci.ndim() != 1) fail_arg(fn, "shape", "col_idx must have shape [nnz], got " + shape_str(ci));
  dfgnn_index_type_t rt, ct;
  if (!is_index_dtype(rp.dtype(), &rt))
    fail_arg(fn, "dtype", "row_ptr must have dtype int32 or int64, got " + dtype_name(rp.dtype()));
  if (!is_index_dtype(ci.dtype(), &ct))
    fail_arg(fn, "dtype", "col_idx must have dtype int32 or int64, got " + dtype_name(ci.dtype()));
  if (rt != ct)
    fail_arg(fn, "dtype", "row_ptr and col_idx must have the same dtype, got " + dtype_name(rp.dtype()) + " and " +
                              dtype_name(ci.dtype()));
  require_contiguous(rp, fn, "row_ptr");
  require_contiguous(ci, fn, "col_idx");
  const dfgnn_memory_t rm = memory_of(rp, fn, "row_ptr"), cm = memory_of(ci, fn, "col_idx");
  if (rm != cm || (rm == DFGNN_MEMORY_DEVICE && rp.device_id() != ci.device_id()))
    fail_arg(fn, "device", "row_ptr is on " + device_name(rp.device_type(), rp.device_id()) + " but col_idx is on " +
                               device_name(ci.device_type(), ci.device_id()) + "; both must be in one memory");
  auto opts = graph_options(add_self_loops, reject_duplicates);
  opts.stream = reinterpret_cast<void*>(stream);
  const int64_t n = static_cast<int64_t>(rp.shape(0)) - 1, nnz = static_cast<int64_t>(ci.shape(0));
  const void* rpd = rp.data();
  const void* cid = ci.data();
  dfgnn_graph_t g = nullptr;
  dfgnn_status_t s;
  unlocked([&] { s = dfgnnGraphCreateCsr(ctx.get(), n, nnz, rpd, cid, rt, rm, &opts, &g); });
  check(s, fn);
  return std::make_unique<Graph>(ctx.box, g);
}

std::unique_ptr<Graph> graph_from_file(const Context& ctx, const std::string& path, bool add_self_loops,
                                       bool reject_duplicates) {
  const auto opts = graph_options(add_self_loops, reject_duplicates);
  dfgnn_graph_t g = nullptr;
  dfgnn_status_t s;
  const char* p = c_text(path, "dfgnnGraphCreateFromFile", "path");
  unlocked([&] { s = dfgnnGraphCreateFromFile(ctx.get(), p, &opts, &g); });
  check(s, "dfgnnGraphCreateFromFile");
  return std::make_unique<Graph>(ctx.box, g);
}

std::unique_ptr<Graph> graph_rmat(const Context& ctx, int32_t scale, int64_t num_edges, double a, double b, double c,
                                  uint32_t flags, uint64_t seed, bool add_self_loops, bool reject_duplicates) {
  const auto opts = graph_options(add_self_loops, reject_duplicates);
  dfgnn_graph_t g = nullptr;
  dfgnn_status_t s;
  unlocked([&] { s = dfgnnGraphCreateRmat(ctx.get(), scale, num_edges, a, b, c, flags, seed, &opts, &g); });
  check(s, "dfgnnGraphCreateRmat");
  return std::make_unique<Graph>(ctx.box, g);
}

std::unique_ptr<Graph> graph_planted_hubs(const Context& ctx, int64_t num_nodes, int32_t avg_degree,
                                          int32_t num_hubs, int64_t hub_degree, uint64_t seed, bool add_self_loops,
                                          bool reject_duplicates) {
  const auto opts = graph_options(add_self_loops, reject_duplicates);
  dfgnn_graph_t g = nullptr;
  dfgnn_status_t s;
  unlocked([&] {
    s = dfgnnGraphCreatePlantedHubs(ctx.get(), num_nodes, avg_degree, num_hubs, hub_degree, seed, &opts, &g);
  });
  check(s, "dfgnnGraphCreatePlantedHubs");
  return std::make_unique<Graph>(ctx.box, g);
}

// Read-only NumPy views of borrowed int32 host arrays; `owner` (the Python graph object) keeps
// the graph alive while a view exists.
using IndexView = nb::ndarray<nb::numpy, const int32_t, nb::ndim<1>>;

nb::tuple compressed(Graph& g, bool csc) {
  const auto [n, e] = g.size();
  const int32_t *a = nullptr, *b = nullptr, *c = nullptr;
  if (csc)
    check(dfgnnGraphGetCsc(g.handle, DFGNN_MEMORY_HOST, &a, &b, &c), "dfgnnGraphGetCsc");
  else
    check(dfgnnGraphGetCsr(g.handle, DFGNN_MEMORY_HOST, &a, &b, &c), "dfgnnGraphGetCsr");
  nb::handle owner = nb::find(&g);
  static const int32_t empty = 0;  // valid pointer for zero-length views
  auto view = [&](const int32_t* p, int64_t len) {
    return IndexView(p != nullptr ? p : &empty, {static_cast<size_t>(len)}, owner);
  };
  return nb::make_tuple(view(a, n + 1), view(b, e), view(c, e));
}

// ---------------------------------------------------------------- fingerprints

nb::dict fingerprint_to_dict(const dfgnn_fingerprint_t& f) {
  nb::dict d;
  d["version"] = f.version;
  d["num_nodes"] = f.num_nodes;
  d["num_edges"] = f.num_edges;
  d["mean_degree"] = f.mean_degree;
  d["max_degree"] = f.max_degree;
  d["p50"] = f.p50;
  d["p90"] = f.p90;
  d["p99"] = f.p99;
  d["p999"] = f.p999;
  d["cv"] = f.cv;
  d["gini"] = f.gini;
  nb::list hist;
  for (double v : f.hist) hist.append(v);
  d["hist"] = hist;
  d["top1pct_edge_share"] = f.top1pct_edge_share;
  nb::list hubs;
  for (int64_t v : f.hub_rows) hubs.append(v);
  d["hub_rows"] = hubs;
  return d;
}

template <typename T>
T field(nb::dict d, const char* key) {
  if (!d.contains(key)) fail_arg("fingerprint", "value", std::string("fingerprint dict lacks the key '") + key + "'");
  T v;
  if (!nb::try_cast(d[key], v)) fail_arg("fingerprint", "type", std::string("fingerprint['") + key + "'] has a wrong type");
  return v;
}

template <typename T, size_t K>
void field_list(nb::dict d, const char* key, T (&out)[K]) {
  nb::sequence seq = field<nb::sequence>(d, key);
  if (nb::len(seq) != K)
    fail_arg("fingerprint", "value", std::string("fingerprint['") + key + "'] must have " + std::to_string(K) +
                                         " entries, got " + std::to_string(nb::len(seq)));
  for (size_t i = 0; i < K; ++i) {
    if (!nb::try_cast(seq[i], out[i]))
      fail_arg("fingerprint", "type", std::string("fingerprint['") + key + "'][" + std::to_string(i) + "] has a wrong type");
  }
}

dfgnn_fingerprint_t fingerprint_from_dict(nb::dict d) {
  dfgnn_fingerprint_t f{};
  f.version = field<int32_t>(d, "version");
  f.num_nodes = field<int64_t>(d, "num_nodes");
  f.num_edges = field<int64_t>(d, "num_edges");
  f.mean_degree = field<double>(d, "mean_degree");
  f.max_degree = field<int64_t>(d, "max_degree");
  f.p50 = field<double>(d, "p50");
  f.p90 = field<double>(d, "p90");
  f.p99 = field<double>(d, "p99");
  f.p999 = field<double>(d, "p999");
  f.cv = field<double>(d, "cv");
  f.gini = field<double>(d, "gini");
  field_list(d, "hist", f.hist);
  f.top1pct_edge_share = field<double>(d, "top1pct_edge_share");
  field_list(d, "hub_rows", f.hub_rows);
  return f;
}

// Size-query protocol of the C API's string functions.
template <typename F>
std::string text_of(F&& call, const char* function) {
  size_t length = 0;
  check(call(nullptr, 0, &length), function);
  std::string s(length + 1, '\0');
  check(call(s.data(), s.size(), &length), function);
  s.resize(length);
  return s;
}

// ---------------------------------------------------------------- ops

constexpr int kNumSlots = DFGNN_NUM_INPUTS;
constexpr std::array<const char*, kNumSlots> kSlots = {"h", "h_dst", "q", "k", "v", "att_src", "att_dst", "beta", "edge"};
using dfgnn_torch::kBetaSlot;
using dfgnn_torch::kEdgeSlot;
using dfgnn_torch::kFeatureSlots;

// The library's name of the model (dfgnnModelName), "?" for a value that is no model.
const char* model_name(dfgnn_model_t m) {
  const char* name = "?";
  dfgnnModelName(m, &name);
  return name;
}

// The slots an op reads, in dfgnn_inputs_t order, from the library's model table.
std::vector<int> slots_of_mask(uint32_t mask) {
  std::vector<int> slots;
  for (int i = 0; i < kNumSlots; ++i)
    if ((mask >> i) & 1u) slots.push_back(i);
  return slots;
}

std::vector<int> model_inputs(dfgnn_model_t m, bool edge_features, const char* function) {
  uint32_t mask = 0;
  check(dfgnnModelInputs(m, edge_features ? 1 : 0, &mask, nullptr), function);
  return slots_of_mask(mask);
}

// The op's slots: its model's, plus edge with op.edge_features.
std::vector<int> op_slots(const dfgnn_op_t& op) {
  uint32_t mask = 0;
  if (dfgnnModelInputs(op.model, 0, &mask, nullptr) != DFGNN_STATUS_SUCCESS)
    fail_arg("op", "value", "op.model " + std::to_string(static_cast<int>(op.model)) + " is not a dfgnn model");
  return slots_of_mask(mask | (op.edge_features ? DFGNN_INPUT_EDGE : 0u));
}

std::string slot_list(const dfgnn_op_t& op) {
  std::string s;
  for (int i : op_slots(op)) s += std::string(s.empty() ? "" : ", ") + kSlots[i];
  return s;
}

int slot_index(const dfgnn_op_t& op, const std::string& key) {
  for (int i = 0; i < kNumSlots; ++i)
    if (key == kSlots[i]) return i;
  // A model with one attention vector (GATv2) calls it att, as PyG does.
  uint32_t mask = 0;
  if (key == "att" && dfgnnModelInputs(op.model, 0, &mask, nullptr) == DFGNN_STATUS_SUCCESS &&
      (mask & (DFGNN_INPUT_ATT_SRC | DFGNN_INPUT_ATT_DST)) == DFGNN_INPUT_ATT_SRC)
    return 5;  // att_src
  return -1;
}

// Whether the op's edge input is [E, H] float32 logit terms (GAT) rather than [E, H, D] features.
bool edge_logits(const dfgnn_op_t& op) {
  uint32_t mask = 0;
  int32_t logits = 0;
  return dfgnnModelInputs(op.model, 0, &mask, &logits) == DFGNN_STATUS_SUCCESS && logits;
}

// Whether the model takes edge features (dfgnnModelInputs refuses them for AGNN).
bool takes_edge_features(dfgnn_model_t m) {
  uint32_t mask = 0;
  return dfgnnModelInputs(m, 1, &mask, nullptr) == DFGNN_STATUS_SUCCESS;
}

struct OpCall {
  const char* function;
  dfgnn_op_t op;
  int64_t n, e;  // nodes, edges
  bool device;  // GPU op (CUDA arrays, op dtype) or reference op (host float64)
  Placement where;
  std::vector<InArray> keep_in;
  std::vector<OutArray> keep_out;

  nb::dlpack::dtype feature_dtype() const { return dl_dtype_of(op.dtype); }
  nb::dlpack::dtype param_dtype() const { return dl_dtype_of(device ? DFGNN_DTYPE_FLOAT32 : DFGNN_DTYPE_FLOAT64); }
  const char* feature_why() const { return device ? "the op's dtype" : "reference ops compute in float64"; }
  const char* param_why() const {
    return device ? "attention parameters and statistics are float32" : "reference ops compute in float64";
  }

  // Whether a fits the slot's shapes (dfgnn_torch::shape_fits, which the native op asks too).
  template <typename A>
  bool fits(const A& a, int slot) const {
    std::vector<int64_t> dims(a.ndim());
    for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(a.shape(i));
    return dfgnn_torch::shape_fits(slot, op, edge_logits(op), n, e, dims.data(), dims.size());
  }

  // [N, H, D] or [N, H*D]
  template <typename A>
  void check_features(const A& a, const std::string& name) {
    const int64_t h = op.heads, d = op.dim;
    if (!fits(a, 0))
      fail_arg(function, "shape", name + " must have shape [N, H, D] = [" + std::to_string(n) + ", " +
                                      std::to_string(h) + ", " + std::to_string(d) + "] (or [N, H*D]), got " +
                                      shape_str(a) + (a.ndim() >= 1 && (int64_t)a.shape(0) != n
                                                          ? " (the graph has " + std::to_string(n) + " nodes)"
                                                          : ""));
    require_dtype(a, feature_dtype(), function, name, feature_why());
    require_contiguous(a, function, name);
    require_placement(a, function, name, where);
  }

  // att_src / att_dst: [H, D], [1, H, D] or [H*D]; beta: one element.
  template <typename A>
  void check_param(const A& a, int slot, const std::string& name) {
    const int64_t h = op.heads, d = op.dim;
    if (slot == kBetaSlot) {
      if (!fits(a, slot)) fail_arg(function, "shape", name + " must have one element, got shape " + shape_str(a));
    } else {
      if (!fits(a, slot))
        fail_arg(function, "shape", name + " must have shape [H, D] = [" + std::to_string(h) + ", " +
                                        std::to_string(d) + "] (or [1, H, D] or [H*D]), got " + shape_str(a));
    }
    require_dtype(a, param_dtype(), function, name, param_why());
    require_contiguous(a, function, name);
    require_placement(a, function, name, where);
  }

  // edge: GAT [E, H] logit terms (float32 like the attention vectors; float64 for reference ops),
  // GATv2 / Transformer [E, H, D] (or [E, H*D]) features in the op's dtype.
  template <typename A>
  void check_edge(const A& a, const std::string& name) {
    const bool gat = edge_logits(op);
    const int64_t h = op.heads, w = gat ? 1 : op.dim;
    if (!fits(a, kEdgeSlot))
      fail_arg(function, "shape", name + " must have shape " +
                                      (gat ? "[E, H] = [" + std::to_string(e) + ", " + std::to_string(h) + "]"
                                           : "[E, H, D] = [" + std::to_string(e) + ", " + std::to_string(h) + ", " +
                                                 std::to_string(w) + "] (or [E, H*D])") +
                                      ", got " + shape_str(a) +
                                      (a.ndim() >= 1 && (int64_t)a.shape(0) != e
                                           ? " (the graph has " + std::to_string(e) + " edges)"
                                           : ""));
    if (gat) require_dtype(a, param_dtype(), function, name, device ? "GAT's edge logit terms are float32" : param_why());
    else require_dtype(a, feature_dtype(), function, name, feature_why());
    require_contiguous(a, function, name);
    require_placement(a, function, name, where);
  }

  template <typename A>
  void check_slot(const A& a, int slot, const std::string& name) {
    if (slot < kFeatureSlots) check_features(a, name);
    else if (slot == kEdgeSlot) check_edge(a, name);
    else check_param(a, slot, name);
  }

  // Reads {name: array} into the slots of dfgnn_inputs_t / dfgnn_grads_t order.
  template <typename A>
  std::array<void*, kNumSlots> slots(nb::handle mapping, const char* what) {
    if (!nb::isinstance<nb::dict>(mapping))
      fail_arg(function, "type", std::string(what) + " must be a dict {name: array}, got " + py_type_name(mapping));
    nb::dict d = nb::borrow<nb::dict>(mapping);
    std::array<void*, kNumSlots> ptrs{};
    std::array<bool, kNumSlots> seen{};
    for (auto [k, v] : d) {
      if (!nb::isinstance<nb::str>(k)) fail_arg(function, "type", std::string(what) + " keys must be strings");
      const std::string key = nb::cast<std::string>(k);
      const int slot = slot_index(op, key);
      const auto wanted = op_slots(op);
      if (slot < 0 || std::find(wanted.begin(), wanted.end(), slot) == wanted.end())
        fail_arg(function, "value", std::string(what) + " has '" + key + "', but " + model_name(op.model) +
                                        " takes " + slot_list(op) +
                                        (slot == kEdgeSlot ? " (op.edge_features is not set)" : ""));
      if (seen[slot]) fail_arg(function, "value", std::string(what) + " gives '" + kSlots[slot] + "' twice");
      seen[slot] = true;
      const std::string name = std::string(what) + "['" + key + "']";
      A a = import_array<A>(v, function, name);
      check_slot(a, slot, name);
      ptrs[slot] = const_cast<void*>(static_cast<const void*>(a.data()));
      if constexpr (std::is_same_v<A, InArray>) keep_in.push_back(std::move(a));
      else keep_out.push_back(std::move(a));
    }
    for (int slot : op_slots(op))
      if (!seen[slot])
        fail_arg(function, "value", std::string(what) + " lacks '" + kSlots[slot] + "': " + model_name(op.model) +
                                        " takes " + slot_list(op));
    return ptrs;
  }

  template <typename A>
  void* features(nb::handle obj, const std::string& name) {
    A a = import_array<A>(obj, function, name);
    check_features(a, name);
    void* p = const_cast<void*>(static_cast<const void*>(a.data()));
    if constexpr (std::is_same_v<A, InArray>) keep_in.push_back(std::move(a));
    else keep_out.push_back(std::move(a));
    return p;
  }

  // lse: [N, H] float32 (GPU) / float64 (reference), or None.
  template <typename A>
  void* lse(nb::handle obj, const char* name) {
    if (obj.is_none()) return nullptr;
    A a = import_array<A>(obj, function, name);
    if (a.ndim() != 2 || (int64_t)a.shape(0) != n || (int64_t)a.shape(1) != op.heads)
      fail_arg(function, "shape", std::string(name) + " must have shape [N, H] = [" + std::to_string(n) + ", " +
                                      std::to_string(op.heads) + "], got " + shape_str(a));
    require_dtype(a, param_dtype(), function, name, param_why());
    require_contiguous(a, function, name);
    require_placement(a, function, name, where);
    void* p = const_cast<void*>(static_cast<const void*>(a.data()));
    if constexpr (std::is_same_v<A, InArray>) keep_in.push_back(std::move(a));
    else keep_out.push_back(std::move(a));
    return p;
  }

  OpCall(const char* fn, const Graph& g, const dfgnn_op_t& o, bool dev) : function(fn), op(o), device(dev) {
    std::tie(n, e) = g.size();
    where.device = dev;
    if (op.edge_features && !takes_edge_features(op.model))
      fail_arg(fn, "value", std::string("op.edge_features is set but ") + model_name(op.model) + " takes no edge features");
    if (op.heads < 1 || op.dim < 1)
      fail_arg(fn, "value", "op.heads and op.dim must be >= 1, got heads = " + std::to_string(op.heads) +
                                ", dim = " + std::to_string(op.dim));
    if (dev && op.dtype == DFGNN_DTYPE_FLOAT64)
      fail_arg(fn, "dtype", "GPU ops take float32, float16 or bfloat16 features; float64 is for reference ops");
    if (!dev && op.dtype != DFGNN_DTYPE_FLOAT64)
      fail_arg(fn, "dtype", "reference ops compute in float64: op.dtype must be DType.FLOAT64");
  }
};

dfgnn_inputs_t to_inputs(const std::array<void*, kNumSlots>& p) {
  dfgnn_inputs_t in{};
  in.h = p[0]; in.h_dst = p[1]; in.q = p[2]; in.k = p[3]; in.v = p[4];
  in.att_src = p[5]; in.att_dst = p[6]; in.beta = p[7]; in.edge = p[8];
  return in;
}

dfgnn_grads_t to_grads(const std::array<void*, kNumSlots>& p) {
  dfgnn_grads_t g{};
  g.h = p[0]; g.h_dst = p[1]; g.q = p[2]; g.k = p[3]; g.v = p[4];
  g.att_src = p[5]; g.att_dst = p[6]; g.beta = p[7]; g.edge = p[8];
  return g;
}

void reference_forward(const Graph& g, const dfgnn_op_t& op, nb::handle inputs, nb::handle out, nb::handle lse) {
  OpCall c("dfgnnReferenceForward", g, op, false);
  const dfgnn_inputs_t in = to_inputs(c.slots<InArray>(inputs, "inputs"));
  double* o = static_cast<double*>(c.features<OutArray>(out, "out"));
  double* l = static_cast<double*>(c.lse<OutArray>(lse, "lse"));
  dfgnn_status_t s;
  unlocked([&] { s = dfgnnReferenceForward(g.handle, &c.op, &in, o, l); });
  check(s, c.function);
}

void reference_backward(const Graph& g, const dfgnn_op_t& op, nb::handle inputs, nb::handle grad_out,
                        nb::handle grads) {
  OpCall c("dfgnnReferenceBackward", g, op, false);
  const dfgnn_inputs_t in = to_inputs(c.slots<InArray>(inputs, "inputs"));
  const double* go = static_cast<const double*>(c.features<InArray>(grad_out, "grad_out"));
  const dfgnn_grads_t gr = to_grads(c.slots<OutArray>(grads, "grads"));
  dfgnn_status_t s;
  unlocked([&] { s = dfgnnReferenceBackward(g.handle, &c.op, &in, go, &gr); });
  check(s, c.function);
}

// Device scratch: None (size 0) or a writable CUDA array of at least the required bytes.
struct Workspace {
  OutArray keep;
  void* ptr = nullptr;
  size_t bytes = 0;
};

Workspace workspace_of(OpCall& c, nb::handle obj) {
  Workspace w;
  if (obj.is_none()) return w;
  w.keep = import_array<OutArray>(obj, c.function, "workspace");
  require_contiguous(w.keep, c.function, "workspace");
  require_placement(w.keep, c.function, "workspace", c.where);
  w.ptr = w.keep.data();
  w.bytes = w.keep.nbytes();
  return w;
}

dfgnn_launch_t launch_of(uintptr_t stream, const Workspace& w, const std::optional<std::string>& schedule) {
  dfgnn_launch_t l{};
  l.stream = reinterpret_cast<void*>(stream);
  l.workspace = w.ptr;
  l.workspace_bytes = w.bytes;
  l.schedule = cstr(schedule, "dfgnnForward/dfgnnBackward", "schedule");
  return l;
}

void gpu_forward(const Context& ctx, const Graph& g, const dfgnn_op_t& op, nb::handle inputs, nb::handle out,
                 nb::handle lse, uintptr_t stream, nb::handle workspace, const std::optional<std::string>& schedule) {
  OpCall c("dfgnnForward", g, op, true);
  const dfgnn_inputs_t in = to_inputs(c.slots<InArray>(inputs, "inputs"));
  void* o = c.features<OutArray>(out, "out");
  float* l = static_cast<float*>(c.lse<OutArray>(lse, "lse"));
  const Workspace w = workspace_of(c, workspace);
  const dfgnn_launch_t launch = launch_of(stream, w, schedule);
  dfgnn_status_t s;
  unlocked([&] { s = dfgnnForward(ctx.get(), g.handle, &c.op, &in, o, l, &launch); });
  check(s, c.function);
}

void gpu_backward(const Context& ctx, const Graph& g, const dfgnn_op_t& op, nb::handle inputs, nb::handle out,
                  nb::handle lse, nb::handle grad_out, nb::handle grads, uintptr_t stream, nb::handle workspace,
                  const std::optional<std::string>& schedule) {
  OpCall c("dfgnnBackward", g, op, true);
  const dfgnn_inputs_t in = to_inputs(c.slots<InArray>(inputs, "inputs"));
  const void* o = c.features<InArray>(out, "out");
  if (lse.is_none()) fail_arg(c.function, "value", "the backward needs the forward's lse [N, H]");
  const float* l = static_cast<const float*>(c.lse<InArray>(lse, "lse"));
  const void* go = c.features<InArray>(grad_out, "grad_out");
  const dfgnn_grads_t gr = to_grads(c.slots<OutArray>(grads, "grads"));
  const Workspace w = workspace_of(c, workspace);
  const dfgnn_launch_t launch = launch_of(stream, w, schedule);
  dfgnn_status_t s;
  unlocked([&] { s = dfgnnBackward(ctx.get(), g.handle, &c.op, &in, o, l, go, &gr, &launch); });
  check(s, c.function);
}


// ---------------------------------------------------------------- prepared launches (dfgnn.torch's lean path)
//
// A Launch is one op direction made ready for one graph: it is made once with the arrays of a first
// call, which it validates exactly as forward / backward above do (same checks, same messages), and
// it asks for the workspace size once. Later calls pass raw device pointers (Tensor.data_ptr()) and
// the stream as ints: no DLPack import, no binding-side checks, only the C API's own. The caller
// (dfgnn.torch) keys its Launches by everything validated here (the arrays' shapes, dtypes and
// devices; contiguity it ensures itself), so a pointer reaching a Launch belongs to an array of
// the kind that was validated.
struct Launch {
  ContextPtr ctx;  // keeps the context alive
  dfgnn_direction_t direction = DFGNN_FORWARD;
  dfgnn_torch::PreparedCall call;  // the core shared with the native op (_prepared_call.hpp)
};

void check(const dfgnn_torch::Failure& f) {
  if (f) throw BindError(f.status, f.function, f.message);
}

std::unique_ptr<Launch> make_launch(const Context& ctx, const Graph& g, const dfgnn_op_t& op,
                                    dfgnn_direction_t direction, const std::optional<std::string>& schedule,
                                    nb::handle inputs, nb::handle out, nb::handle lse, nb::handle grad_out,
                                    nb::handle grads) {
  cstr(schedule, "dfgnnGetWorkspaceSize", "schedule");  // refuses a NUL in the text
  auto L = std::make_unique<Launch>();
  L->ctx = ctx.box;
  L->direction = direction;
  // the size first, as dfgnn.torch asked for it before each call until now: a bad schedule or op
  // fails as the size query, then bad arrays as forward / backward
  dfgnn_torch::Failure f;
  unlocked([&] { f = L->call.init(ctx.get(), g.handle, op, schedule, direction); });
  check(f);
  if (direction == DFGNN_FORWARD) {
    OpCall c("dfgnnForward", g, op, true);
    c.slots<InArray>(inputs, "inputs");
    c.features<OutArray>(out, "out");
    c.lse<OutArray>(lse, "lse");
  } else {
    OpCall c("dfgnnBackward", g, op, true);
    c.slots<InArray>(inputs, "inputs");
    c.features<InArray>(out, "out");
    if (lse.is_none()) fail_arg(c.function, "value", "the backward needs the forward's lse [N, H]");
    c.lse<InArray>(lse, "lse");
    c.features<InArray>(grad_out, "grad_out");
    c.slots<OutArray>(grads, "grads");
  }
  return L;
}

// A prepared call's workspace: allocate(bytes) (dfgnn.torch: a uint8 CUDA tensor from torch's caching
// allocator on the call's stream), called with the GIL taken back, kept until the call returned (the
// object is destroyed with the GIL held).
struct PythonWorkspace {
  nb::handle allocate;
  nb::object buffer;
  void* operator()(size_t bytes) {
    nb::gil_scoped_acquire gil;
    buffer = allocate(bytes);
    return reinterpret_cast<void*>(nb::cast<uintptr_t>(buffer.attr("data_ptr")()));
  }
};

void require_graph(const Launch& L, const Graph& g, const char* function) {
  if (g.handle != L.call.graph()) fail_arg(function, "value", "this prepared launch belongs to another graph");
}

// dfgnnForward / dfgnnBackward of a prepared launch on raw device pointers (ints, 0 for none), without
// the GIL; failures raise as forward / backward do.
void launch_forward(Launch& L, const Graph& g, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t out,
                    uintptr_t lse, uintptr_t stream, uint64_t seed, uintptr_t seed_ptr, nb::callable allocate) {
  require_graph(L, g, "dfgnnForward");
  const std::array<const void*, 4> a{reinterpret_cast<const void*>(a0), reinterpret_cast<const void*>(a1),
                                     reinterpret_cast<const void*>(a2), reinterpret_cast<const void*>(a3)};
  const dfgnn_inputs_t in = L.call.fields<dfgnn_inputs_t>(a.data(), a.size());
  dfgnn_torch::Failure f;
  {
    PythonWorkspace workspace{allocate, {}};
    unlocked([&] {
      f = L.call.forward(in, reinterpret_cast<void*>(out), reinterpret_cast<float*>(lse), reinterpret_cast<void*>(stream),
                         seed, reinterpret_cast<const uint64_t*>(seed_ptr), workspace);
    });
  }
  check(f);
}

void launch_backward(Launch& L, const Graph& g, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t out,
                     uintptr_t lse, uintptr_t grad_out, uintptr_t g0, uintptr_t g1, uintptr_t g2, uintptr_t g3,
                     uintptr_t stream, uint64_t seed, uintptr_t seed_ptr, nb::callable allocate) {
  require_graph(L, g, "dfgnnBackward");
  const std::array<const void*, 4> a{reinterpret_cast<const void*>(a0), reinterpret_cast<const void*>(a1),
                                     reinterpret_cast<const void*>(a2), reinterpret_cast<const void*>(a3)};
  const std::array<void*, 4> d{reinterpret_cast<void*>(g0), reinterpret_cast<void*>(g1), reinterpret_cast<void*>(g2),
                               reinterpret_cast<void*>(g3)};
  const dfgnn_inputs_t in = L.call.fields<dfgnn_inputs_t>(a.data(), a.size());
  const dfgnn_grads_t gr = L.call.fields<dfgnn_grads_t>(d.data(), d.size());
  dfgnn_torch::Failure f;
  {
    PythonWorkspace workspace{allocate, {}};
    unlocked([&] {
      f = L.call.backward(in, reinterpret_cast<const void*>(out), reinterpret_cast<const float*>(lse),
                          reinterpret_cast<const void*>(grad_out), gr, reinterpret_cast<void*>(stream), seed,
                          reinterpret_cast<const uint64_t*>(seed_ptr), workspace);
    });
  }
  check(f);
}

// Description of an array-like without importing its framework: dtype name, shape, device.
nb::dict array_info(nb::handle obj) {
  InArray a = import_array<InArray>(obj, "array_info", "array");
  nb::dict d;
  d["dtype"] = dtype_name(a.dtype());
  nb::list shape;
  for (size_t i = 0; i < a.ndim(); ++i) shape.append(a.shape(i));
  d["shape"] = nb::tuple(shape);
  d["device_type"] = a.device_type();
  d["device_id"] = a.device_id();
  d["device"] = device_name(a.device_type(), a.device_id());
  d["is_cuda"] = is_cuda(a.device_type());
  d["is_host"] = is_host(a.device_type());
  d["contiguous"] = c_contiguous(a);
  d["nbytes"] = a.nbytes();
  return d;
}

// Errors: the translator to dfgnn's typed Python errors, its factory, status strings.
void bind_errors(nb::module_& m) {
  nb::register_exception_translator(translate);

  m.def("_set_error_factory", [](nb::object f) {
    if (error_factory == nullptr) error_factory = new nb::object();
    *error_factory = std::move(f);
  });
  m.def("status_string", [](int s) { return std::string(dfgnnGetStatusString(static_cast<dfgnn_status_t>(s))); });
}

// The library's version and the array description the Python side validates with.
void bind_library(nb::module_& m) {
  m.def("version", [] { return std::string(dfgnnGetVersion()); });
  m.def("array_info", &array_info, "array"_a);
}

// The model table (dfgnnModelInputs, dfgnnModelName / dfgnnModelFromName) and the Model enum.
void bind_models(nb::module_& m) {
  m.def("model_inputs", [](dfgnn_model_t model, bool edge_features) {
    nb::list names;
    for (int slot : model_inputs(model, edge_features, "model_inputs")) names.append(nb::str(kSlots[slot]));
    return nb::tuple(names);
  }, "model"_a, "edge_features"_a = false,
        "Names of the inputs a model reads (dfgnnModelInputs), in dfgnn_inputs_t order; edge_features adds 'edge' "
        "and fails for a model without edge features.");

  // Model's members from the library's model table: Model.GAT is "gat" (dfgnnModelName) upper-cased.
  nb::enum_<dfgnn_model_t> model_enum(m, "Model", nb::is_arithmetic());
  for (int i = 0; i < DFGNN_NUM_MODELS; ++i) {
    std::string member = model_name(static_cast<dfgnn_model_t>(i));
    for (char& c : member) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    model_enum.value(member.c_str(), static_cast<dfgnn_model_t>(i));
  }
  m.def("model_name", [](dfgnn_model_t model) {
    const char* name = nullptr;
    check(dfgnnModelName(model, &name), "dfgnnModelName");
    return std::string(name);
  }, "model"_a, "The model's name (dfgnnModelName): 'gat', 'gatv2', 'transformer', 'agnn'.");
  m.def("model_from_name", [](const std::string& name) {
    dfgnn_model_t model{};
    check(dfgnnModelFromName(c_text(name, "dfgnnModelFromName", "name"), &model), "dfgnnModelFromName");
    return model;
  }, "name"_a, "The model of a name (dfgnnModelFromName); an unknown name raises, naming the models.");
  // Launch.forward / backward take this many input pointers (a0..a3), dfgnn.torch's native op as many tensors.
  static_assert(DFGNN_MAX_MODEL_INPUTS == 4, "Launch.forward and backward take a0..a3");
  m.attr("MAX_MODEL_INPUTS") = DFGNN_MAX_MODEL_INPUTS;
}

// dtypes, directions, the channel limit and Op (dfgnn_op_t).
void bind_ops(nb::module_& m) {
  nb::enum_<dfgnn_dtype_t>(m, "DType", nb::is_arithmetic())
      .value("FLOAT32", DFGNN_DTYPE_FLOAT32)
      .value("FLOAT16", DFGNN_DTYPE_FLOAT16)
      .value("BFLOAT16", DFGNN_DTYPE_BFLOAT16)
      .value("FLOAT64", DFGNN_DTYPE_FLOAT64);
  nb::enum_<dfgnn_direction_t>(m, "Direction", nb::is_arithmetic())
      .value("FORWARD", DFGNN_FORWARD)
      .value("BACKWARD", DFGNN_BACKWARD);
  m.attr("MAX_CHANNELS") = static_cast<int>(DFGNN_MAX_CHANNELS);  // H * D limit, checked before allocating
  nb::class_<dfgnn_op_t>(m, "Op", "dfgnn_op_t: what an op computes (model, dtype, heads, dim, ...)")
      .def(
          "__init__",
          [](dfgnn_op_t* self, dfgnn_model_t model, dfgnn_dtype_t dtype, int32_t heads, int32_t dim) {
            new (self) dfgnn_op_t(dfgnnOpDefault(model, dtype, heads, dim));
          },
          "model"_a, "dtype"_a, "heads"_a, "dim"_a, "PyG's defaults (dfgnnOpDefault): slope 0.2, scale 1/sqrt(D), no dropout")
      .def_prop_ro("_address", [](const dfgnn_op_t& o) { return reinterpret_cast<uintptr_t>(&o); },
                   "the dfgnn_op_t's address (dfgnn.torch's native ops copy it from there)")
      .def_rw("model", &dfgnn_op_t::model)
      .def_rw("dtype", &dfgnn_op_t::dtype)
      .def_rw("heads", &dfgnn_op_t::heads)
      .def_rw("dim", &dfgnn_op_t::dim)
      .def_rw("negative_slope", &dfgnn_op_t::negative_slope)
      .def_rw("scale", &dfgnn_op_t::scale)
      .def_rw("dropout", &dfgnn_op_t::dropout, "attention dropout probability in [0, 1)")
      .def_rw("dropout_seed", &dfgnn_op_t::dropout_seed, "seed of the dropout mask (the backward needs the forward's)")
      .def_rw("edge_features", &dfgnn_op_t::edge_features,
              "1: the op takes inputs['edge'] indexed by edge id (GAT [E, H] float32 logit terms, GATv2 and "
              "Transformer [E, H, D] features)")
      .def("__repr__", [](const dfgnn_op_t& o) {
        std::ostringstream s;
        s << "Op(model=" << model_name(o.model) << ", dtype=" << dtype_name(dl_dtype_of(o.dtype))
          << ", heads=" << o.heads << ", dim=" << o.dim << ", negative_slope=" << o.negative_slope
          << ", scale=" << o.scale;
        if (o.dropout > 0) s << ", dropout=" << o.dropout << ", dropout_seed=" << o.dropout_seed;
        if (o.edge_features) s << ", edge_features=" << o.edge_features;
        s << ")";
        return s.str();
      });
}

// Context (dfgnn_context_t) and the default context.
void bind_context(nb::module_& m) {
  nb::class_<Context>(m, "Context", "A dfgnn context (dfgnn_context_t): kernel module cache, device state")
      .def("__init__", [](Context* self) { new (self) Context{std::make_shared<ContextBox>()}; })
      .def("has_device",
           [](const Context& c) {
             int has = 0;
             const char* reason = nullptr;
             check(dfgnnHasDevice(c.get(), &has, &reason), "dfgnnHasDevice");
             return std::make_pair(has != 0, std::string(reason != nullptr ? reason : ""));
           })
      .def("cache_counters",
           [](const Context& c) {
             uint64_t compiles = 0, hits = 0, loads = 0;
             check(dfgnnGetCacheCounters(c.get(), &compiles, &hits, &loads), "dfgnnGetCacheCounters");
             nb::dict d;
             d["compiles"] = compiles;
             d["hits"] = hits;
             d["loads"] = loads;
             return d;
           })
      .def("modules_from_database",
           [](const Context& c) {
             uint64_t count = 0;
             check(dfgnnGetModulesFromDatabase(c.get(), &count), "dfgnnGetModulesFromDatabase");
             return count;
           })
      .def("set_tune_mode",
           [](const Context& c, int mode) {
             check(dfgnnSetTuneMode(c.get(), static_cast<dfgnn_tune_mode_t>(mode)), "dfgnnSetTuneMode");
           })
      .def(
          "set_database",
          [](const Context& c, const std::optional<std::string>& user, const std::optional<std::string>& sites) {
            dfgnn_status_t s;
            unlocked([&] { s = dfgnnSetDatabase(c.get(), cstr(user, "dfgnnSetDatabase", "user"), cstr(sites, "dfgnnSetDatabase", "sites")); });
            check(s, "dfgnnSetDatabase");
          },
          "user"_a.none(), "sites"_a.none())
      .def_prop_ro("_address", [](const Context& c) { return reinterpret_cast<uintptr_t>(c.get()); },
                   "the dfgnn_context_t as an int (for C++ extensions calling the C API, e.g. bench/)")
      .def("__eq__", [](const Context& a, const Context& b) { return a.box == b.box; })
      .def("__hash__", [](const Context& a) { return reinterpret_cast<uintptr_t>(a.box.get()); });
  m.def("default_context", &default_context);
}

// Graph handles and their constructors (COO, CSR, files, generators and their flags).
void bind_graphs(nb::module_& m) {
  m.attr("RMAT_DEDUPLICATE") = static_cast<int>(DFGNN_RMAT_DEDUPLICATE);
  m.attr("RMAT_NO_SELF_LOOPS") = static_cast<int>(DFGNN_RMAT_NO_SELF_LOOPS);
  m.attr("RMAT_PERMUTE_IDS") = static_cast<int>(DFGNN_RMAT_PERMUTE_IDS);
  m.attr("RMAT_SYMMETRIZE") = static_cast<int>(DFGNN_RMAT_SYMMETRIZE);

  nb::class_<Graph>(m, "Graph", "A dfgnn graph handle (dfgnn_graph_t); build it through dfgnn.Graph")
      .def("size", &Graph::size)
      .def("context", [](const Graph& g) { return Context{g.ctx}; })
      .def_prop_ro("_address", [](const Graph& g) { return reinterpret_cast<uintptr_t>(g.handle); },
                   "the dfgnn_graph_t as an int (for C++ extensions calling the C API, e.g. bench/)")
      .def("csr", [](Graph& g) { return compressed(g, false); })
      .def("csc", [](Graph& g) { return compressed(g, true); })
      .def("fingerprint", [](const Graph& g) {
        dfgnn_fingerprint_t f;
        check(dfgnnGraphGetFingerprint(g.handle, &f), "dfgnnGraphGetFingerprint");
        return fingerprint_to_dict(f);
      });

  m.def("graph_coo", &graph_coo, "context"_a, "edge_index"_a, "num_nodes"_a, "add_self_loops"_a,
        "reject_duplicates"_a, "stream"_a = 0);
  m.def("graph_csr", &graph_csr, "context"_a, "row_ptr"_a, "col_idx"_a, "add_self_loops"_a, "reject_duplicates"_a,
        "stream"_a = 0);
  m.def("graph_from_file", &graph_from_file, "context"_a, "path"_a, "add_self_loops"_a, "reject_duplicates"_a);
  m.def("graph_rmat", &graph_rmat, "context"_a, "scale"_a, "num_edges"_a, "a"_a, "b"_a, "c"_a, "flags"_a, "seed"_a,
        "add_self_loops"_a, "reject_duplicates"_a);
  m.def("graph_planted_hubs", &graph_planted_hubs, "context"_a, "num_nodes"_a, "avg_degree"_a, "num_hubs"_a,
        "hub_degree"_a, "seed"_a, "add_self_loops"_a, "reject_duplicates"_a);
}

// Fingerprints: text form, bucket key, distance.
void bind_fingerprints(nb::module_& m) {
  m.def("fingerprint_serialize", [](nb::dict d) {
    const dfgnn_fingerprint_t f = fingerprint_from_dict(d);
    return text_of([&](char* b, size_t c, size_t* l) { return dfgnnFingerprintSerialize(&f, b, c, l); },
                   "dfgnnFingerprintSerialize");
  });
  m.def("fingerprint_bucket_key", [](nb::dict d) {
    const dfgnn_fingerprint_t f = fingerprint_from_dict(d);
    return text_of([&](char* b, size_t c, size_t* l) { return dfgnnFingerprintBucketKey(&f, b, c, l); },
                   "dfgnnFingerprintBucketKey");
  });
  m.def("fingerprint_parse", [](const std::string& text) {
    dfgnn_fingerprint_t f;
    check(dfgnnFingerprintParse(c_text(text, "dfgnnFingerprintParse", "text"), &f), "dfgnnFingerprintParse");
    return fingerprint_to_dict(f);
  });
  m.def("fingerprint_distance", [](nb::dict a, nb::dict b) {
    const dfgnn_fingerprint_t fa = fingerprint_from_dict(a), fb = fingerprint_from_dict(b);
    double d = 0;
    check(dfgnnFingerprintDistance(&fa, &fb, &d), "dfgnnFingerprintDistance");
    return d;
  });
}

// The float64 reference ops.
void bind_reference(nb::module_& m) {
  m.def("reference_forward", &reference_forward, "graph"_a, "op"_a, "inputs"_a, "out"_a, "lse"_a.none());
  m.def("reference_backward", &reference_backward, "graph"_a, "op"_a, "inputs"_a, "grad_out"_a, "grads"_a);
}

// Ops on the GPU: workspace sizes, forward / backward, and prepared Launches (dfgnn.torch's call path).
void bind_launch(nb::module_& m) {
  m.def(
      "workspace_size",
      [](const Context& ctx, const Graph& g, const dfgnn_op_t& op, dfgnn_direction_t direction,
         const std::optional<std::string>& schedule) {
        size_t bytes = 0;
        dfgnn_status_t s;
        unlocked([&] { s = dfgnnGetWorkspaceSize(ctx.get(), g.handle, &op, direction, cstr(schedule, "dfgnnGetWorkspaceSize", "schedule"), &bytes); });
        check(s, "dfgnnGetWorkspaceSize");
        return bytes;
      },
      "context"_a, "graph"_a, "op"_a, "direction"_a, "schedule"_a.none());
  m.def("forward", &gpu_forward, "context"_a, "graph"_a, "op"_a, "inputs"_a, "out"_a, "lse"_a.none(), "stream"_a,
        "workspace"_a.none(), "schedule"_a.none());
  m.def("backward", &gpu_backward, "context"_a, "graph"_a, "op"_a, "inputs"_a, "out"_a, "lse"_a.none(),
        "grad_out"_a, "grads"_a, "stream"_a, "workspace"_a.none(), "schedule"_a.none());
  nb::class_<Launch>(m, "Launch", "A prepared op direction for one graph (dfgnn.torch's call path)")
      .def_prop_ro("workspace_bytes", [](const Launch& L) { return L.call.workspace_bytes(L.direction); })
      .def_prop_ro("direction", [](const Launch& L) { return L.direction; })
      .def("forward", &launch_forward, "graph"_a, "a0"_a, "a1"_a, "a2"_a, "a3"_a, "out"_a, "lse"_a, "stream"_a,
           "seed"_a, "seed_ptr"_a, "allocate"_a,
           "dfgnnForward on raw device pointers (ints): the op's inputs in MODEL_INPUTS order, then edge "
           "(0 when absent). allocate(nbytes) returns the call's workspace (an object with data_ptr()), "
           "asked again, larger, when dispatch has chosen a schedule with a larger workspace since.")
      .def("backward", &launch_backward, "graph"_a, "a0"_a, "a1"_a, "a2"_a, "a3"_a, "out"_a, "lse"_a,
           "grad_out"_a, "g0"_a, "g1"_a, "g2"_a, "g3"_a, "stream"_a, "seed"_a, "seed_ptr"_a, "allocate"_a,
           "dfgnnBackward on raw device pointers, as forward.");
  m.def("make_launch", &make_launch, "context"_a, "graph"_a, "op"_a, "direction"_a, "schedule"_a.none(),
        "inputs"_a, "out"_a, "lse"_a.none(), "grad_out"_a.none(), "grads"_a.none(),
        "Validates a first call's arrays as forward / backward do and returns its Launch.");
}

// Schedules and tuning: the chosen schedule, candidates, tuning, explain, compiling ahead.
void bind_tuning(nb::module_& m) {
  m.def(
      "get_schedule",
      [](const Context& ctx, const Graph& g, const dfgnn_op_t& op, dfgnn_direction_t direction,
         const std::optional<std::string>& schedule) {
        return text_of(
            [&](char* b, size_t c, size_t* l) {
              return dfgnnGetSchedule(ctx.get(), g.handle, &op, direction, cstr(schedule, "dfgnnGetSchedule", "schedule"), b, c, l);
            },
            "dfgnnGetSchedule");
      },
      "context"_a, "graph"_a, "op"_a, "direction"_a, "schedule"_a.none());
  m.def(
      "list_schedules",
      [](const Context& ctx, const Graph& g, const dfgnn_op_t& op, int pass) {
        return text_of(
            [&](char* b, size_t c, size_t* l) { return dfgnnListSchedules(ctx.get(), g.handle, &op, pass, b, c, l); },
            "dfgnnListSchedules");
      },
      "context"_a, "graph"_a, "op"_a, "pass_"_a);
  m.def(
      "tune",
      [](const Context& ctx, const Graph& g, const dfgnn_op_t& op, dfgnn_direction_t direction, double budget) {
        // One call (tuning twice to size the buffer would measure twice): the report is a
        // short JSON array, one object per pass.
        std::string report(1 << 20, '\0');
        size_t length = 0;
        dfgnn_status_t s;
        unlocked([&] {
          s = dfgnnTune(ctx.get(), g.handle, &op, direction, budget, report.data(), report.size(), &length);
        });
        check(s, "dfgnnTune");
        report.resize(std::min(length, report.size() - 1));
        return report;
      },
      "context"_a, "graph"_a, "op"_a, "direction"_a, "budget_seconds"_a);
  m.def(
      "explain",
      [](const Context& ctx, const Graph& g, const dfgnn_op_t& op, dfgnn_direction_t direction) {
        return text_of(
            [&](char* b, size_t c, size_t* l) { return dfgnnExplain(ctx.get(), g.handle, &op, direction, b, c, l); },
            "dfgnnExplain");
      },
      "context"_a, "graph"_a, "op"_a, "direction"_a);
  m.def(
      "compile",
      [](const Context& ctx, const Graph* g, const dfgnn_op_t& op, dfgnn_direction_t direction,
         const std::optional<std::string>& schedule, int arch) {
        dfgnn_status_t s;
        dfgnn_graph_t gh = g != nullptr ? g->handle : nullptr;
        unlocked([&] { s = dfgnnCompile(ctx.get(), gh, &op, direction, cstr(schedule, "dfgnnCompile", "schedule"), arch); });
        check(s, "dfgnnCompile");
      },
      "context"_a, "graph"_a.none(), "op"_a, "direction"_a, "schedule"_a.none(), "arch"_a);
}

}  // namespace

NB_MODULE(_dfgnn, m) {
  m.doc() = "dfgnn C API bindings (nanobind); use the dfgnn package, not this module";
  bind_errors(m);
  bind_library(m);
  bind_models(m);
  bind_ops(m);
  bind_context(m);
  bind_graphs(m);
  bind_fingerprints(m);
  bind_reference(m);
  bind_launch(m);
  bind_tuning(m);
}
