// The opaque handle types of the C API, shared by the translation units that implement entry
// points (runtime/src/api.cpp, tuner/src/tune_api.cpp).
#pragma once

#include <dfgnn/dfgnn.h>

#include "api_guard.hpp"
#include "context.hpp"
#include "graph.hpp"

#include <atomic>
#include <memory>
#include <utility>

// Each handle is registered while it lives (api_guard.hpp, LiveHandles), so that deref rejects
// destroyed and garbage handles.
struct dfgnn_context {
  dfgnn::Context impl;
  dfgnn_context() { dfgnn::LiveHandles<dfgnn_context>::add(this); }
  ~dfgnn_context() { dfgnn::LiveHandles<dfgnn_context>::remove(this); }
  dfgnn_context(const dfgnn_context&) = delete;
  dfgnn_context& operator=(const dfgnn_context&) = delete;
};
struct dfgnn_graph {
  std::unique_ptr<dfgnn::Graph> impl;
  std::atomic<int64_t> references{1};  // dfgnnGraphRetain / dfgnnGraphDestroy
  explicit dfgnn_graph(std::unique_ptr<dfgnn::Graph> graph) : impl(std::move(graph)) {
    dfgnn::LiveHandles<dfgnn_graph>::add(this);
  }
  ~dfgnn_graph() { dfgnn::LiveHandles<dfgnn_graph>::remove(this); }
  dfgnn_graph(const dfgnn_graph&) = delete;
  dfgnn_graph& operator=(const dfgnn_graph&) = delete;
};

namespace dfgnn {

inline Context& context_of(dfgnn_context_t ctx) { return deref<dfgnn_context>(ctx, "ctx").impl; }
inline const Graph& graph_of(dfgnn_graph_t graph) { return *deref<dfgnn_graph>(graph, "graph").impl; }
inline const dfgnn_op_t& op_of(const dfgnn_op_t* op) {
  if (op == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "op is null");
  return *op;
}
// Writes text to a caller buffer with the size-query protocol of the header.
void write_text(const std::string& text, char* buffer, size_t capacity, size_t* length);
// Largest vector width assumed when no pointers are known.
int32_t any_alignment(const dfgnn_op_t& op);

}  // namespace dfgnn
