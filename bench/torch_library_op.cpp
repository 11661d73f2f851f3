// A minimal C++ torch extension for one op, dfgnn's Graph Transformer attention in float32: a
// TORCH_LIBRARY op with its autograd in C++ (torch::autograd::Function), registered the way pyg-lib
// and FlashAttention register theirs, calling the C API directly. It exists only to measure the host
// time per call of that design against dfgnn.torch's nanobind path (bench/torch_library_compare.py
// builds it with torch.utils.cpp_extension and times both); it is not part of the package.
//
// Per call it does what such an extension naturally does: contiguous inputs, outputs from torch's
// caching allocator, a workspace size query and (when needed) a workspace tensor, dfgnnForward /
// dfgnnBackward on the current stream. The graph and context travel as ints (the dfgnn handles).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <dfgnn/dfgnn.h>

namespace {

void check(dfgnn_status_t s, const char* what) {
  TORCH_CHECK(s == DFGNN_STATUS_SUCCESS, what, ": ", dfgnnGetLastErrorMessage());
}

dfgnn_context_t context_of(int64_t c) { return reinterpret_cast<dfgnn_context_t>(static_cast<uintptr_t>(c)); }
dfgnn_graph_t graph_of(int64_t g) { return reinterpret_cast<dfgnn_graph_t>(static_cast<uintptr_t>(g)); }

dfgnn_op_t op_of(const at::Tensor& q) {
  return dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, static_cast<int32_t>(q.size(1)),
                        static_cast<int32_t>(q.size(2)));
}

dfgnn_launch_t launch_with(const at::Tensor& workspace) {
  dfgnn_launch_t l{};
  l.stream = at::cuda::getCurrentCUDAStream().stream();
  l.workspace = workspace.numel() ? workspace.data_ptr() : nullptr;
  l.workspace_bytes = static_cast<size_t>(workspace.numel());
  return l;
}

at::Tensor workspace_for(int64_t ctx, int64_t graph, const dfgnn_op_t& op, dfgnn_direction_t direction,
                         const at::Tensor& like) {
  size_t bytes = 0;
  check(dfgnnGetWorkspaceSize(context_of(ctx), graph_of(graph), &op, direction, nullptr, &bytes),
        "dfgnnGetWorkspaceSize");
  return at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
}

class TransformerFunction : public torch::autograd::Function<TransformerFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, int64_t context, int64_t graph) {
    TORCH_CHECK(q.is_cuda() && q.scalar_type() == at::kFloat && q.dim() == 3, "q must be a CUDA float32 [N, H, D]");
    const c10::cuda::CUDAGuard guard(q.device());
    const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
    const dfgnn_op_t op = op_of(qc);
    at::Tensor out = at::empty_like(qc);
    at::Tensor lse = at::empty({qc.size(0), qc.size(1)}, qc.options());
    const at::Tensor ws = workspace_for(context, graph, op, DFGNN_FORWARD, qc);
    dfgnn_inputs_t in{};
    in.q = qc.data_ptr();
    in.k = kc.data_ptr();
    in.v = vc.data_ptr();
    const dfgnn_launch_t launch = launch_with(ws);
    check(dfgnnForward(context_of(context), graph_of(graph), &op, &in, out.data_ptr(), lse.data_ptr<float>(), &launch),
          "dfgnnForward");
    ctx->save_for_backward({qc, kc, vc, out, lse});
    ctx->saved_data["context"] = context;
    ctx->saved_data["graph"] = graph;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const int64_t context = ctx->saved_data["context"].toInt(), graph = ctx->saved_data["graph"].toInt();
    const c10::cuda::CUDAGuard guard(q.device());
    const at::Tensor go = grad_outputs[0].to(out.scalar_type()).contiguous();
    const dfgnn_op_t op = op_of(q);
    at::Tensor gq = at::empty_like(q), gk = at::empty_like(k), gv = at::empty_like(v);
    const at::Tensor ws = workspace_for(context, graph, op, DFGNN_BACKWARD, q);
    dfgnn_inputs_t in{};
    in.q = q.data_ptr();
    in.k = k.data_ptr();
    in.v = v.data_ptr();
    dfgnn_grads_t g{};
    g.q = gq.data_ptr();
    g.k = gk.data_ptr();
    g.v = gv.data_ptr();
    const dfgnn_launch_t launch = launch_with(ws);
    check(dfgnnBackward(context_of(context), graph_of(graph), &op, &in, out.data_ptr(), lse.data_ptr<float>(),
                        go.data_ptr(), &g, &launch),
          "dfgnnBackward");
    return {gq, gk, gv, at::Tensor(), at::Tensor()};
  }
};

at::Tensor transformer(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t context,
                       int64_t graph) {
  return TransformerFunction::apply(q, k, v, context, graph);
}

}  // namespace

TORCH_LIBRARY(dfgnn_bench, m) { m.def("transformer(Tensor q, Tensor k, Tensor v, int context, int graph) -> Tensor"); }

TORCH_LIBRARY_IMPL(dfgnn_bench, CompositeImplicitAutograd, m) { m.impl("transformer", &transformer); }
