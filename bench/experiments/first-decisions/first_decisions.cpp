// A process's first dispatch decisions, timed on a machine without a GPU: the GPU's identity is
// injected (GPU=name, default the H200; 132 SMs, sm_90, this build's kernel hash), so the shipped
// winners files ($DFGNN_SHIPPED_DB) answer as they would on that GPU. Not part of the library.
//   first_decisions GRAPH_DIR MODEL HEADS DIM    (MODEL: 0 GAT, 1 GATv2, 2 Transformer, 3 AGNN)
// LOOPS=1 adds self-loops, as dfgnn.torch's GAT layers and bench/cold_start.py's graphs have them.
// Prints: the layers' open (through another op shape's explain), the forward's decision, the
// backward's two; with SHOW=1 also the forward's and the backward's explain JSON, one line each.
#include <dfgnn/dfgnn.h>

#include "context.hpp"
#include "handles.hpp"
#include "nvrtc.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: first_decisions GRAPH_DIR MODEL HEADS DIM\n");
    return 2;
  }
  using clock = std::chrono::steady_clock;
  const auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  dfgnn_context_t ctx = nullptr;
  dfgnnCreate(&ctx);
  dfgnnSetDatabase(ctx, "", "");  // no user database: a cold process that only reads
  dfgnn::db::EnvironmentInfo env;
  env.gpu_name = std::getenv("GPU") != nullptr ? std::getenv("GPU") : "NVIDIA H200";
  env.compute_capability = 90;
  env.sm_count = 132;
  env.library_version = dfgnnGetVersion();
  env.template_hash = dfgnn::kernel_source_hash();
  dfgnn::context_of(ctx).dispatcher.set_environment(env);
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  options.add_self_loops = std::getenv("LOOPS") != nullptr;
  dfgnn_graph_t g = nullptr;
  if (dfgnnGraphCreateFromFile(ctx, argv[1], &options, &g) != DFGNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s\n", dfgnnGetLastErrorMessage());
    return 1;
  }
  const dfgnn_op_t other = dfgnnOpDefault(DFGNN_MODEL_AGNN, DFGNN_DTYPE_FLOAT32, 1, 32);
  const dfgnn_op_t op = dfgnnOpDefault(static_cast<dfgnn_model_t>(std::atoi(argv[2])), DFGNN_DTYPE_FLOAT32,
                                       std::atoi(argv[3]), std::atoi(argv[4]));
  std::string text(1 << 16, '\0');
  size_t length = 0;
  const auto explain = [&](const dfgnn_op_t& o, dfgnn_direction_t d) {
    if (dfgnnExplain(ctx, g, &o, d, text.data(), text.size(), &length) != DFGNN_STATUS_SUCCESS) {
      std::fprintf(stderr, "%s\n", dfgnnGetLastErrorMessage());
      std::exit(1);
    }
  };
  const auto t0 = clock::now();
  explain(other, DFGNN_FORWARD);
  const auto t1 = clock::now();
  explain(op, DFGNN_FORWARD);
  const auto t2 = clock::now();
  const std::string forward_text = text.substr(0, length);
  explain(op, DFGNN_BACKWARD);
  const auto t3 = clock::now();
  std::printf("open %.3f forward %.3f backward %.3f\n", ms(t0, t1), ms(t1, t2), ms(t2, t3));
  if (std::getenv("SHOW") != nullptr) std::printf("%s\n%s\n", forward_text.c_str(), text.substr(0, length).c_str());
  dfgnnGraphDestroy(g);
  dfgnnDestroy(ctx);
}
