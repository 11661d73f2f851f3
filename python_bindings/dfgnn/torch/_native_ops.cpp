// dfgnn.torch's native eager path: one TORCH_LIBRARY op, dfgnn_native::attention, with its autograd
// in C++ (torch::autograd::Function), over the C API. It replaces the Python autograd Function and
// its backward for CUDA eager calls (dfgnn/torch/_calls.py, _native_call). It checks its arguments
// as the binding does (dtypes, shapes, one CUDA device); a call it refuses runs again on the Python
// path, which raises the binding's typed error.
//
// Built at run time against the installed torch by dfgnn/torch/_native.py (a torch extension's
// binary is tied to one torch version, so the wheel ships this source, not a binary).
//
// A Prepared is one (graph, op, schedule) made ready (_prepared_call.hpp's PreparedCall, the core it
// shares with the Python path's launches): it holds a reference to the graph
// (dfgnnGraphRetain), so an autograd node that saved it can run its backward after the caller
// dropped its dfgnn.Graph. The op takes it by address and its tensors one by one (int and Tensor
// arguments): a script object and a Tensor[] argument made each call's argument conversion cost
// tens of microseconds on the H200 (bench/results/2026-12-01d-h200.md). Addresses are checked
// against the live Prepareds, so a stale or made-up one is refused by name.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <dfgnn/dfgnn.h>

#include "_prepared_call.hpp"

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Raises a RuntimeError with a message built here, handed to TORCH_CHECK as one C string. On the H200
// (torch 2.11, g++ 13) a TORCH_CHECK with several arguments, which formats them through an
// std::ostringstream compiled into this library, crashed the process, while a literal message was
// raised cleanly (bench/native_crash_probe.py); a C string takes the literal's route into libc10.
[[noreturn]] void raise(const std::string& message) { TORCH_CHECK(false, message.c_str()); }

[[noreturn]] void fail(dfgnn_status_t s, const char* function) {
  raise(std::string(function) + " failed (" + dfgnnGetStatusString(s) + "): " + dfgnnGetLastErrorMessage());
}

void check(const dfgnn_torch::Failure& f) {
  if (f) raise(std::string(f.function) + " failed (" + dfgnnGetStatusString(f.status) + "): " + f.message);
}

struct Prepared;

// The live Prepareds, by address (see prepared_at). Never destroyed: a Prepared freed during the
// process's teardown (held by a pending autograd node) may still look itself up here.
std::mutex& live_mutex = *new std::mutex;
std::unordered_set<const Prepared*>& live = *new std::unordered_set<const Prepared*>;

struct Prepared : torch::CustomClassHolder {
  dfgnn_torch::PreparedCall call;

  // context, graph: the C API handles (as ints); op: the address of a dfgnn_op_t, copied here.
  Prepared(int64_t context_handle, int64_t graph_handle, int64_t op_address, std::optional<std::string> schedule) {
    // (the C API reads the text up to its first NUL: a schedule holding one would run another text;
    // the Python path's binding refuses it by name)
    if (schedule && schedule->find('\0') != std::string::npos) raise("dfgnn_native.Prepared: the schedule holds a NUL");
    const auto graph = reinterpret_cast<dfgnn_graph_t>(static_cast<uintptr_t>(graph_handle));
    dfgnn_status_t s = dfgnnGraphRetain(graph);
    if (s != DFGNN_STATUS_SUCCESS) fail(s, "dfgnnGraphRetain");
    const dfgnn_torch::Failure f =
        call.init(reinterpret_cast<dfgnn_context_t>(static_cast<uintptr_t>(context_handle)), graph,
                  *reinterpret_cast<const dfgnn_op_t*>(static_cast<uintptr_t>(op_address)), std::move(schedule));
    if (f) {
      dfgnnGraphDestroy(graph);
      check(f);
    }
    const std::lock_guard<std::mutex> lock(live_mutex);
    live.insert(this);
  }
  ~Prepared() override {
    {
      const std::lock_guard<std::mutex> lock(live_mutex);
      live.erase(this);
    }
    dfgnnGraphDestroy(call.graph());
  }
  int64_t address() const { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(this)); }
  Prepared(const Prepared&) = delete;
  Prepared& operator=(const Prepared&) = delete;

  // The workspace allocator of a call on like's device: torch's caching allocator on the current
  // stream, which frees the buffer to that stream's pool in order once the call returned.
  struct Workspace {
    const at::Tensor& like;
    at::Tensor buffer;
    void* operator()(size_t bytes) {
      buffer = at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
      return buffer.data_ptr();
    }
  };
  static void* stream_of(const at::Tensor& like) {
    return c10::cuda::getCurrentCUDAStream(like.device().index()).stream();
  }
  static const uint64_t* seed_pointer(const std::optional<at::Tensor>& seed) {
    return seed && seed->defined() ? reinterpret_cast<const uint64_t*>(seed->data_ptr<int64_t>()) : nullptr;
  }
};

at::ScalarType feature_type(dfgnn_dtype_t dtype) {
  switch (dtype) {
    case DFGNN_DTYPE_FLOAT32: return at::kFloat;
    case DFGNN_DTYPE_FLOAT16: return at::kHalf;
    case DFGNN_DTYPE_BFLOAT16: return at::kBFloat16;
    default: return at::kDouble;  // float64: the reference ops only, never a CUDA call here
  }
}

// Whether t has a shape of the slot's input (dfgnn_torch::shape_fits, as the binding's checks): a
// first call whose tensors pass here runs as the Python path's would.
bool has_prepared_shape(const dfgnn_torch::PreparedCall& p, int slot, const at::Tensor& t) {
  return dfgnn_torch::shape_fits(slot, p.op(), p.edge_logits(), p.nodes(), p.edges(), t.sizes().data(), t.dim());
}

// The call's tensors in their dfgnn_inputs_t / dfgnn_grads_t fields.
template <typename Fields, typename Pointer>
Fields fields_of(const Prepared& p, const std::vector<at::Tensor>& tensors) {
  std::array<Pointer, DFGNN_MAX_MODEL_INPUTS> pointers{};  // the model's inputs, then edge
  for (size_t i = 0; i < tensors.size() && i < pointers.size(); ++i) pointers[i] = static_cast<Pointer>(tensors[i].data_ptr());
  return p.call.fields<Fields, Pointer>(pointers.data(), tensors.size());
}

class Attention : public torch::autograd::Function<Attention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const c10::intrusive_ptr<Prepared>& p, at::TensorList inputs_in,
                            const std::optional<at::Tensor>& seed, int64_t seed_value) {
    const at::Tensor& first = inputs_in[0];
    const c10::DeviceGuard guard(first.device());
    std::vector<at::Tensor> inputs;
    inputs.reserve(inputs_in.size());
    for (const at::Tensor& t : inputs_in) inputs.push_back(t.contiguous());
    const dfgnn_op_t& op = p->call.op();
    at::Tensor out = at::empty({p->call.nodes(), op.heads, op.dim}, first.options());
    at::Tensor lse = at::empty({p->call.nodes(), op.heads}, first.options().dtype(at::kFloat));
    const dfgnn_inputs_t in = fields_of<dfgnn_inputs_t, const void*>(*p, inputs);
    check(p->call.forward(in, out.data_ptr(), lse.data_ptr<float>(), Prepared::stream_of(first),
                          static_cast<uint64_t>(seed_value), Prepared::seed_pointer(seed), Prepared::Workspace{first, {}}));
    std::vector<at::Tensor> saved = inputs;
    saved.push_back(out);
    saved.push_back(lse);
    if (seed && seed->defined()) saved.push_back(*seed);
    ctx->save_for_backward(saved);
    ctx->saved_data["prepared"] = c10::IValue::make_capsule(p);  // a capsule: no class-type lookup per call
    ctx->saved_data["seed_value"] = seed_value;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto p = c10::static_intrusive_pointer_cast<Prepared>(ctx->saved_data["prepared"].toCapsule());
    const int64_t seed_value = ctx->saved_data["seed_value"].toInt();
    variable_list saved = ctx->get_saved_variables();
    const size_t n = p->call.slots().size();
    std::optional<at::Tensor> seed;
    if (saved.size() == n + 3) seed = saved[n + 2];
    const std::vector<at::Tensor> inputs(saved.begin(), saved.begin() + n);
    const at::Tensor &out = saved[n], &lse = saved[n + 1];
    const c10::DeviceGuard guard(out.device());
    const at::Tensor grad_out = grad_outputs[0].to(out.scalar_type()).contiguous().view(out.sizes());
    std::vector<at::Tensor> grads;
    grads.reserve(n);
    for (const at::Tensor& t : inputs) grads.push_back(at::empty_like(t));
    const dfgnn_inputs_t in = fields_of<dfgnn_inputs_t, const void*>(*p, inputs);
    const dfgnn_grads_t gr = fields_of<dfgnn_grads_t, void*>(*p, grads);
    check(p->call.backward(in, out.data_ptr(), lse.data_ptr<float>(), grad_out.data_ptr(), gr, Prepared::stream_of(out),
                           static_cast<uint64_t>(seed_value), Prepared::seed_pointer(seed), Prepared::Workspace{out, {}}));
    variable_list wanted(n);
    for (size_t i = 0; i < n; ++i)
      if (ctx->needs_input_grad(i)) wanted[i] = grads[i];
    if (at::GradMode::is_enabled() && grad_outputs[0].requires_grad()) {
      // create_graph: the gradients come from kernels, not from differentiable ops. As the Python
      // path's once_differentiable does, they get an error node, so a second backward through them
      // raises instead of silently missing its terms.
      for (at::Tensor& g : wanted)
        if (g.defined()) g = g.detach().requires_grad_(true);
      wanted = torch::autograd::DelayedError(
                   "trying to differentiate twice dfgnn's attention op (its backward is once differentiable)",
                   static_cast<int64_t>(n))
                   .apply(std::move(wanted));
    }
    // One entry per forward argument, the list's tensors flattened: prepared, the inputs, seed,
    // seed_value (needs_input_grad counts the tensors only: the inputs are 0 .. n-1).
    variable_list result;
    result.reserve(n + 3);
    result.emplace_back();
    for (size_t i = 0; i < n; ++i) result.push_back(wanted[i]);
    result.emplace_back();
    result.emplace_back();
    return result;
  }
};

// The Prepared at an address, as a new reference, or a refusal. The op's contract: its caller holds
// a reference to that Prepared across the call (dfgnn.torch's _Prepared does), so it cannot be
// destroyed meanwhile. The registry refuses made-up addresses and those of Prepareds already gone;
// it cannot tell a freed address reused by a new Prepared, which only a caller breaking the
// contract could pass.
c10::intrusive_ptr<Prepared> prepared_at(int64_t address) {
  Prepared* raw = reinterpret_cast<Prepared*>(static_cast<uintptr_t>(address));
  const std::lock_guard<std::mutex> lock(live_mutex);
  if (live.count(raw) == 0 || c10::raw::intrusive_ptr::use_count(raw) == 0)
    raise("dfgnn_native.attention: " + std::to_string(address) + " is not the address of a live Prepared");
  return c10::intrusive_ptr<Prepared>::reclaim_copy(raw);
}

at::Tensor attention(int64_t prepared_address, const at::Tensor& a, const std::optional<at::Tensor>& b,
                     const std::optional<at::Tensor>& c, const std::optional<at::Tensor>& d,
                     const std::optional<at::Tensor>& seed, int64_t seed_value) {
  const c10::intrusive_ptr<Prepared> prepared = prepared_at(prepared_address);
  // the inputs in slot order: as many as the model reads, then None
  std::vector<at::Tensor> inputs{a};
  bool ended = false;
  for (const std::optional<at::Tensor>* t : {&b, &c, &d}) {
    const bool given = *t && (*t)->defined();
    if (given && ended) raise("dfgnn_native.attention: an input tensor follows a None");
    ended = !given;
    if (given) inputs.push_back(**t);
  }
  // checked before the autograd Function: its forward throws only on a failed launch
  const dfgnn_torch::PreparedCall& p = prepared->call;
  if (inputs.size() != p.slots().size())
    raise("dfgnn_native.attention: " + std::to_string(p.slots().size()) + " input tensors expected, got " +
          std::to_string(inputs.size()));
  for (const at::Tensor& t : inputs)
    if (!(t.defined() && t.is_cuda() && t.device() == inputs[0].device()))
      raise("dfgnn_native.attention runs CUDA tensors only, all on one device");
  const at::ScalarType feature = feature_type(p.op().dtype);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int slot = p.slots()[i];
    const bool is_feature = dfgnn_torch::holds_features(slot, p.edge_logits());
    if (inputs[i].scalar_type() != (is_feature ? feature : at::kFloat) || !has_prepared_shape(p, slot, inputs[i]))
      raise("dfgnn_native.attention: input " + std::to_string(i) + " is not the prepared kind (dtype or shape)");
  }
  if (seed && seed->defined() &&
      !(seed->is_cuda() && seed->device() == inputs[0].device() && seed->scalar_type() == at::kLong &&
        seed->numel() == 1 && seed->is_contiguous()))
    raise("dfgnn_native.attention: the seed tensor must be one int64 on the inputs' CUDA device");
  // A call that will need a backward asks for the backward's workspace now, the first time: a
  // schedule the backward cannot run is refused here, where the caller falls back to the Python
  // path and its typed error, not inside autograd's backward.
  if (at::GradMode::is_enabled() && !p.workspace_known(DFGNN_BACKWARD))
    for (const at::Tensor& t : inputs)
      if (t.requires_grad()) {
        check(prepared->call.ask_workspace(DFGNN_BACKWARD));
        break;
      }
  // as a TensorList: autograd records the list's tensors as the op's inputs (a std::vector it would not)
  return Attention::apply(prepared, at::TensorList(inputs), seed, seed_value);
}

}  // namespace

// attention takes up to DFGNN_MAX_MODEL_INPUTS input tensors, a to d.
static_assert(DFGNN_MAX_MODEL_INPUTS == 4, "the attention schema takes the inputs a, b, c, d");

TORCH_LIBRARY(dfgnn_native, m) {
  m.class_<Prepared>("Prepared")
      .def(torch::init<int64_t, int64_t, int64_t, std::optional<std::string>>())
      .def("address", &Prepared::address);
  m.def("attention(int prepared, Tensor a, Tensor? b, Tensor? c, Tensor? d, Tensor? seed, int seed_value) -> Tensor");
}

TORCH_LIBRARY_IMPL(dfgnn_native, CompositeImplicitAutograd, m) { m.impl("attention", &attention); }
