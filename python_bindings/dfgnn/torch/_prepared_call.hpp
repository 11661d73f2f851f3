// The one core of dfgnn.torch's prepared CUDA calls, shared by both of its call paths: the
// extension's Launch (dfgnn/_dfgnn, the Python autograd Function and the custom op) and the native
// op's Prepared (_native_ops.cpp). One op on one graph with one schedule text, made ready once:
// - which dfgnn_inputs_t / dfgnn_grads_t fields a call's tensors fill, from the library's model table;
// - each direction's workspace size, asked once;
// - the call itself, with a workspace of that size and, when the call fails because dispatch has
//   chosen a schedule with a larger workspace since (a tuner or a database merge wrote a new
//   winner), one retry with the size asked again.
// Header-only over the C API (C++17), so the native op, which is built at run time against the
// installed torch, compiles it from the wheel beside its own source.
#pragma once

#include <dfgnn/dfgnn.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dfgnn_torch {

// dfgnn_inputs_t's fields: 0-4 features [N, H, D] (h, h_dst, q, k, v), 5-6 attention vectors [H, D],
// 7 beta [1], 8 edge ([E, H] float32 logit terms for GAT, else [E, H, D] features).
constexpr int kFeatureSlots = 5, kBetaSlot = 7, kEdgeSlot = 8;
static_assert(DFGNN_NUM_INPUTS == 9 && (1u << kBetaSlot) == DFGNN_INPUT_BETA && (1u << kEdgeSlot) == DFGNN_INPUT_EDGE,
              "the slots of dfgnn_inputs_t");

// Whether an input of this slot holds features in the op's dtype (else float32 parameters or logits).
inline bool holds_features(int slot, bool edge_logits) {
  return slot < kFeatureSlots || (slot == kEdgeSlot && !edge_logits);
}

// Whether an input of this slot may have the shape dims[0 .. ndim) (the layouts the kernels read row-major):
// features [N, H, D] or [N, H*D]; attention vectors [H, D], [1, H, D] or [H*D]; beta one element; the edge
// input [E, H, W] or [E, H*W], W = 1 for GAT's logit terms, else D. The binding's checks and the native
// op's both ask here.
inline bool shape_fits(int slot, const dfgnn_op_t& op, bool edge_logits, int64_t nodes, int64_t edges,
                       const int64_t* dims, size_t ndim) {
  const int64_t h = op.heads, d = op.dim;
  auto rows = [&](int64_t n, int64_t w) {
    return (ndim == 3 && dims[0] == n && dims[1] == h && dims[2] == w) || (ndim == 2 && dims[0] == n && dims[1] == h * w);
  };
  if (slot < kFeatureSlots) return rows(nodes, d);
  if (slot == kEdgeSlot) return rows(edges, edge_logits ? 1 : d);
  if (slot == kBetaSlot) {  // one element: every extent 1
    for (size_t i = 0; i < ndim; ++i)
      if (dims[i] != 1) return false;
    return true;
  }
  return (ndim == 2 && dims[0] == h && dims[1] == d) || (ndim == 3 && dims[0] == 1 && dims[1] == h && dims[2] == d) ||
         (ndim == 1 && dims[0] == h * d);
}

// A failed C API call: its status, the function's name and the library's message, read before a
// later call replaces it. Empty (false) for a success.
struct Failure {
  dfgnn_status_t status = DFGNN_STATUS_SUCCESS;
  const char* function = "";
  std::string message;
  explicit operator bool() const { return status != DFGNN_STATUS_SUCCESS; }
};

inline Failure failure_of(dfgnn_status_t s, const char* function) {
  return s == DFGNN_STATUS_SUCCESS ? Failure{} : Failure{s, function, dfgnnGetLastErrorMessage()};
}

constexpr size_t kUnknownWorkspace = SIZE_MAX;

// Runs call(workspace, bytes) (the C API function named function) with a workspace of known's size
// from allocate(bytes), which keeps it alive until the call returned; size(&bytes)
// (dfgnnGetWorkspaceSize) is asked first while known is kUnknownWorkspace. A call that fails with
// INVALID_ARGUMENT is asked about once: if size() now says more bytes, the larger size is kept and the
// call runs again. Any other failure is returned with the call's own message. known is atomic:
// threads may share a prepared call.
template <typename Size, typename Allocate, typename Call>
Failure run_with_workspace(std::atomic<size_t>& known, Size&& size, Allocate&& allocate, const char* function,
                           Call&& call) {
  if (known.load() == kUnknownWorkspace) {
    size_t bytes = 0;
    if (Failure f = failure_of(size(&bytes), "dfgnnGetWorkspaceSize")) return f;
    known.store(bytes);
  }
  for (int attempt = 0;; ++attempt) {
    const size_t bytes = known.load();
    void* workspace = bytes > 0 ? allocate(bytes) : nullptr;
    Failure failed = failure_of(call(workspace, bytes), function);
    if (!failed) return failed;
    size_t needed = 0;
    if (attempt == 0 && failed.status == DFGNN_STATUS_INVALID_ARGUMENT && size(&needed) == DFGNN_STATUS_SUCCESS &&
        needed > bytes) {
      known.store(needed);
      continue;
    }
    return failed;
  }
}

// One op, on one graph, with one schedule text (none: dispatch decides), made ready for calls in
// both directions. It does not own the graph: its holder keeps the graph alive.
class PreparedCall {
 public:
  // Makes this the call of op (its inputs: the model's, plus the edge input with op.edge_features,
  // from dfgnnModelInputs) on graph. With ask, that direction's workspace size is asked first, so a
  // bad op or schedule fails as the size query. Called once, before any other member.
  Failure init(dfgnn_context_t context, dfgnn_graph_t graph, const dfgnn_op_t& op, std::optional<std::string> schedule,
               std::optional<dfgnn_direction_t> ask = std::nullopt) {
    context_ = context, graph_ = graph, op_ = op, schedule_ = std::move(schedule);
    if (ask)
      if (Failure f = ask_workspace(*ask)) return f;
    uint32_t mask = 0;
    int32_t logits = 0;
    int64_t nodes = 0, edges = 0;
    if (Failure f = failure_of(dfgnnModelInputs(op.model, op.edge_features ? 1 : 0, &mask, &logits), "dfgnnModelInputs"))
      return f;
    if (Failure f = failure_of(dfgnnGraphGetSize(graph, &nodes, &edges), "dfgnnGraphGetSize")) return f;
    for (int slot = 0; slot < DFGNN_NUM_INPUTS; ++slot)
      if (mask & (1u << slot)) slots_.push_back(slot);
    edge_logits_ = logits != 0, nodes_ = nodes, edges_ = edges;
    return {};
  }

  const dfgnn_op_t& op() const { return op_; }
  dfgnn_graph_t graph() const { return graph_; }
  // the dfgnn_inputs_t fields a call's tensors fill, in the order they come
  const std::vector<int>& slots() const { return slots_; }
  bool edge_logits() const { return edge_logits_; }  // edge input: [E, H] float32 logits (GAT)
  int64_t nodes() const { return nodes_; }
  int64_t edges() const { return edges_; }
  const char* schedule() const { return schedule_ ? schedule_->c_str() : nullptr; }

  bool workspace_known(dfgnn_direction_t d) const { return workspace_[index(d)].load() != kUnknownWorkspace; }
  // Asks the direction's workspace size now (it dispatches and plans the direction): a schedule the
  // direction cannot run fails here.
  Failure ask_workspace(dfgnn_direction_t d) {
    size_t bytes = 0;
    if (Failure f = failure_of(size(d, &bytes), "dfgnnGetWorkspaceSize")) return f;
    workspace_[index(d)].store(bytes);
    return {};
  }
  size_t workspace_bytes(dfgnn_direction_t d) const { return workspace_[index(d)].load(); }

  // The input or gradient fields (dfgnn_inputs_t, dfgnn_grads_t) of the call's pointers, one per slot.
  template <typename Fields, typename Pointer>
  Fields fields(const Pointer* pointers, size_t count) const {
    std::array<Pointer, DFGNN_NUM_INPUTS> field{};
    for (size_t i = 0; i < count && i < slots_.size(); ++i) field[slots_[i]] = pointers[i];
    Fields f{};
    static_assert(sizeof(Fields) == sizeof(field), "one pointer per input field");
    std::memcpy(&f, field.data(), sizeof f);
    return f;
  }

  // dfgnnForward and dfgnnBackward on this graph, on stream, with the dropout seed (an int, or a
  // device pointer to one) and a workspace from allocate(bytes) (see run_with_workspace).
  template <typename Allocate>
  Failure forward(const dfgnn_inputs_t& in, void* out, float* lse, void* stream, uint64_t seed,
                  const uint64_t* seed_device, Allocate&& allocate) {
    return run(DFGNN_FORWARD, stream, seed, seed_device, allocate, "dfgnnForward", [&](const dfgnn_op_t& op, const dfgnn_launch_t& l) {
      return dfgnnForward(context_, graph_, &op, &in, out, lse, &l);
    });
  }
  template <typename Allocate>
  Failure backward(const dfgnn_inputs_t& in, const void* out, const float* lse, const void* grad_out,
                   const dfgnn_grads_t& grads, void* stream, uint64_t seed, const uint64_t* seed_device,
                   Allocate&& allocate) {
    return run(DFGNN_BACKWARD, stream, seed, seed_device, allocate, "dfgnnBackward", [&](const dfgnn_op_t& op, const dfgnn_launch_t& l) {
      return dfgnnBackward(context_, graph_, &op, &in, out, lse, grad_out, &grads, &l);
    });
  }

 private:
  static int index(dfgnn_direction_t d) { return d == DFGNN_FORWARD ? 0 : 1; }

  template <typename Allocate, typename Call>
  Failure run(dfgnn_direction_t d, void* stream, uint64_t seed, const uint64_t* seed_device, Allocate& allocate,
              const char* function, Call&& call) {
    dfgnn_op_t op = op_;
    if (op.dropout > 0) op.dropout_seed = seed;
    dfgnn_launch_t launch{};
    launch.stream = stream;
    launch.schedule = schedule();
    launch.dropout_seed_device = seed_device;
    return run_with_workspace(
        workspace_[index(d)], [&](size_t* bytes) { return size(d, bytes); }, allocate, function,
        [&](void* workspace, size_t bytes) {
          launch.workspace = workspace;
          launch.workspace_bytes = bytes;
          return call(static_cast<const dfgnn_op_t&>(op), static_cast<const dfgnn_launch_t&>(launch));
        });
  }
  dfgnn_status_t size(dfgnn_direction_t d, size_t* bytes) const {
    return dfgnnGetWorkspaceSize(context_, graph_, &op_, d, schedule(), bytes);
  }

  dfgnn_context_t context_ = nullptr;
  dfgnn_graph_t graph_ = nullptr;
  dfgnn_op_t op_{};
  std::optional<std::string> schedule_;
  std::vector<int> slots_;
  bool edge_logits_ = false;
  int64_t nodes_ = 0, edges_ = 0;
  std::array<std::atomic<size_t>, 2> workspace_{kUnknownWorkspace, kUnknownWorkspace};
};

}  // namespace dfgnn_torch
