// Differential verification of the fused GPU ops against the float64 reference: shared by the
// dfgnn-verify tool (full sweeps, report) and the GPU GoogleTest suite (a quick sweep).
#pragma once

#include <dfgnn/dfgnn.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dfgnn::verify {

struct Case {
  std::string graph_name;
  dfgnn_graph_t graph = nullptr;  // borrowed
  dfgnn_op_t op{};
  dfgnn_direction_t direction = DFGNN_FORWARD;
  std::string schedule;  // forced schedule text ("" = dispatch)
};

struct Outcome {
  Case c;
  std::string schedule_run;   // what actually ran
  double max_rel_error = 0;   // max over tensors of ||gpu - ref|| / ||ref||
  std::string worst_tensor;   // which tensor had it
  bool unwritten = false;     // a poisoned element survived (or NaN/inf appeared)
  bool deterministic = true;  // backward run twice gave identical bytes
  bool passed = false;
  std::string error;          // status message if the call failed
};

// Relative tolerance per dtype (norm-wise, against the reference on the same rounded inputs).
double tolerance(dfgnn_dtype_t dtype);

// Runs one case: random inputs (seeded by the case), reference in float64 on the dtype-rounded
// inputs, GPU run on poisoned outputs, comparison. Reference results are cached per
// (graph, model, dtype, H, D, direction), so sweeping schedules pays for the reference once.
class Verifier {
 public:
  explicit Verifier(dfgnn_context_t ctx);
  ~Verifier();
  Outcome run(const Case& c);
  // Compiles the kernels of every case (NVRTC) and computes their float64 references on
  // `threads` CPU threads, so the GPU runs that follow do not wait.
  void precompile(const std::vector<Case>& cases, int threads);

 private:
  struct Impl;
  Impl* impl_;
};

// Schedules worth running for a case: the default, each applicable solver's default, and with
// `all`, every candidate (backward: row candidates with the default column schedule and column
// candidates with the default row schedule).
std::vector<std::string> schedules_for(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t& op,
                                       dfgnn_direction_t direction, bool all);

std::string op_label(const dfgnn_op_t& op);

}  // namespace dfgnn::verify
