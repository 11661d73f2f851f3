#include "tune.hpp"

#include "context.hpp"
#include "cuda.hpp"
#include "default_rule.hpp"
#include "dispatch.hpp"
#include "env_number.hpp"
#include "error.hpp"
#include "graph.hpp"
#include "logging.hpp"
#include "op.hpp"
#include "ops.hpp"
#include "solver.hpp"
#include "tuning_db.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <thread>

namespace dfgnn {

int compile_threads() {
  const int cores = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 9u)) - 1;
  const char* v = std::getenv("DFGNN_TUNE_COMPILE_THREADS");
  if (v == nullptr) return cores;
  const std::optional<double> n = parse_env_number(v);
  if (n && *n >= 0 && *n <= 64 && *n == std::floor(*n)) return static_cast<int>(*n);
  log().warn("DFGNN_TUNE_COMPILE_THREADS='{}' is not a whole number from 0 to 64; using {}", v, cores);
  return cores;
}

namespace {

const char* element_name(dfgnn_dtype_t t) {
  return t == DFGNN_DTYPE_FLOAT32 ? "float" : t == DFGNN_DTYPE_FLOAT16 ? "dfgnn::f16" : "dfgnn::bf16";
}

// Relative L2 difference allowed between a candidate's output and the default schedule's: both
// accumulate in float32 in different orders, and 16-bit outputs round differently.
double agreement_tolerance(dfgnn_dtype_t t) {
  return t == DFGNN_DTYPE_FLOAT32 ? 2e-4 : t == DFGNN_DTYPE_FLOAT16 ? 1e-2 : 6e-2;
}

// Device helpers of the tuner: random fills and output comparison (compiled once per dtype).
class Helpers {
 public:
  Helpers(Context& ctx, dfgnn_dtype_t dtype)
      : module_(ctx.modules.loaded({fmt::format("&dfgnn::fill_random<{}>", element_name(dtype)),
                                    "&dfgnn::fill_random<float>",
                                    fmt::format("&dfgnn::diff_norms<{}>", element_name(dtype)),
                                    "&dfgnn::diff_norms<float>"},
                                   ctx.current_arch())),
        norms_(2 * sizeof(float)) {}

  void fill(void* dst, long long n, bool features, uint64_t seed, float lo, float hi, cudaStream_t stream) {
    void* args[] = {&dst, &n, &seed, &lo, &hi};
    cuda_check(cudaLaunchKernel(reinterpret_cast<const void*>(module_->kernel(features ? 0 : 1)), dim3(grid(n)), dim3(256),
                                args, 0, stream),
               "fill_random");
  }
  // ||a - b|| / ||b||; infinite when a has a NaN/inf where b does not.
  double rel_diff(const void* a, const void* b, long long n, bool features, cudaStream_t stream) {
    cuda_check(cudaMemsetAsync(norms_.get(), 0, 2 * sizeof(float), stream), "memset");
    float* out = norms_.as<float>();
    void* args[] = {const_cast<void**>(&a), const_cast<void**>(&b), &n, &out};
    cuda_check(cudaLaunchKernel(reinterpret_cast<const void*>(module_->kernel(features ? 2 : 3)), dim3(grid(n)), dim3(256),
                                args, 0, stream),
               "diff_norms");
    float host[2];
    cuda_check(cudaMemcpyAsync(host, norms_.get(), sizeof(host), cudaMemcpyDeviceToHost, stream), "copy norms");
    cuda_check(cudaStreamSynchronize(stream), "diff_norms");
    if (!std::isfinite(host[0])) return INFINITY;
    return host[1] > 0 ? std::sqrt(host[0] / host[1]) : std::sqrt(host[0]);
  }

 private:
  static unsigned grid(long long n) { return static_cast<unsigned>(std::clamp<long long>((n + 255) / 256, 1, 4096)); }
  std::shared_ptr<const LoadedModule> module_;
  DeviceBuffer norms_;
};

// One input set: feature tensors (and, for a backward, the forward's out/lse and a grad_out).
struct InputSet {
  DeviceBuffer features[5];  // h, h_dst, q, k, v (those the model reads)
  DeviceBuffer out, lse, grad_out;
  dfgnn_inputs_t inputs{};
};

// Measures one pass: prepare = NVRTC compile, verify = agreement with the default schedule's
// output, time = GPU time per call of a few calls captured in a CUDA graph (see time()).
class PassMeasurer final : public tuner::Measurer {
 public:
  PassMeasurer(Context& ctx, const Graph& g, const dfgnn_op_t& op, PassKind pass, const SchedulePair& defaults,
               const std::vector<std::string>& texts)
      : ctx_(ctx), g_(g), op_(op), pass_(pass), defaults_(defaults), helpers_(ctx, op.dtype), arch_(ctx.current_arch()) {
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreate(&start_), "cudaEventCreate");
    cuda_check(cudaEventCreate(&stop_), "cudaEventCreate");
    const size_t n = g.num_nodes(), nh = n * op.heads, nhd = nh * op.dim, elem = dtype_size(op.dtype);
    const uint32_t slots = op_slots(op);
    // Enough sets that their features exceed the L2 a few times over (at most 4).
    int features = 0;
    for (int s = 0; s < 5; ++s) features += (slots >> s) & 1u;
    const size_t set_bytes = std::max<size_t>(1, features * nhd * elem);
    sets_.resize(std::clamp<size_t>((3 * 60 * 1024 * 1024) / set_bytes + 1, 1, 4));
    // Parameters shared by all sets.
    const size_t hd = static_cast<size_t>(op.heads) * op.dim;
    att_src_ = DeviceBuffer(hd * sizeof(float));
    att_dst_ = DeviceBuffer(hd * sizeof(float));
    beta_ = DeviceBuffer(sizeof(float));
    helpers_.fill(att_src_.get(), static_cast<long long>(hd), false, 11, -1.f, 1.f, stream_);
    helpers_.fill(att_dst_.get(), static_cast<long long>(hd), false, 12, -1.f, 1.f, stream_);
    helpers_.fill(beta_.get(), 1, false, 13, 1.f, 2.f, stream_);
    if (slots & kSlotEdge) {  // edge features, shared by the sets (E-sized: no room for copies)
      edge_ = DeviceBuffer(slot_count(kEdgeSlot) * slot_elem(kEdgeSlot));
      helpers_.fill(edge_.get(), slot_count(kEdgeSlot), slot_in_op_dtype(op_, kEdgeSlot), 14, -1.f, 1.f, stream_);
    }
    // Workspace for the largest candidate; outputs and gradients shared across sets.
    size_t ws = 0;
    for (const std::string& text : texts) ws = std::max(ws, workspace_for(text));
    workspace_ = DeviceBuffer(std::max<size_t>(ws, 1));
    workspace_bytes_ = ws;
    out_ = DeviceBuffer(nhd * elem);
    lse_ = DeviceBuffer(nh * sizeof(float));
    for (int s = 0; s < kNumSlots; ++s)
      if ((slots >> s) & 1u) grads_[s] = DeviceBuffer(slot_count(s) * slot_elem(s));
    uint64_t seed = 100;
    for (InputSet& set : sets_) {
      const void** in = reinterpret_cast<const void**>(&set.inputs);
      for (int s = 0; s < 5; ++s) {
        if (!((slots >> s) & 1u)) continue;
        set.features[s] = DeviceBuffer(nhd * elem);
        helpers_.fill(set.features[s].get(), static_cast<long long>(nhd), true, seed++, -1.f, 1.f, stream_);
        in[s] = set.features[s].get();
      }
      if (slots & kSlotAttSrc) set.inputs.att_src = att_src_.get();
      if (slots & kSlotAttDst) set.inputs.att_dst = att_dst_.get();
      if (slots & kSlotBeta) set.inputs.beta = beta_.get();
      if (slots & kSlotEdge) set.inputs.edge = edge_.get();
      if (pass_ != PassKind::Forward) {  // the backward consumes a forward's out and lse
        set.out = DeviceBuffer(nhd * elem);
        set.lse = DeviceBuffer(nh * sizeof(float));
        set.grad_out = DeviceBuffer(nhd * elem);
        helpers_.fill(set.grad_out.get(), static_cast<long long>(nhd), true, seed++, -1.f, 1.f, stream_);
        const int32_t vec = static_cast<int32_t>(16 / dtype_size(op_.dtype));
        const Schedule fwd = default_schedule(pass_problem(g_, op_, PassKind::Forward, vec));
        forward(ctx_, g_, op_, set.inputs, set.out.get(), set.lse.as<float>(), args(to_string(fwd)));
      }
    }
    // The trusted result: the default schedule's outputs on set 0.
    run(launch_text(default_text()), 0);
    for (const Output& o : outputs()) trusted_.push_back(copy(o));
    cuda_check(cudaStreamSynchronize(stream_), "tuner set-up");
  }

  ~PassMeasurer() override {
    cudaStreamSynchronize(stream_);
    for (auto& [text, r] : replays_) cudaGraphExecDestroy(r.exec);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }

  void prepare(size_t, const std::string& text) override {
    const Schedule s = parse_schedule(text);
    ctx_.modules.cubin(pass_kernel_names(op_, pass_, s), arch_);
  }

  tuner::VerifyResult verify(size_t, const std::string& text) override {
    run(launch_text(text), 0);
    const std::vector<Output> now = outputs();
    for (size_t k = 0; k < now.size(); ++k) {
      const double diff = helpers_.rel_diff(now[k].ptr, trusted_[k].get(), now[k].count, now[k].features, stream_);
      if (!(diff <= agreement_tolerance(op_.dtype)))
        return tuner::VerifyResult::fail(fmt::format("{} differs from the default schedule's by {:.2e} (tolerance {:.0e})",
                                                     now[k].name, diff, agreement_tolerance(op_.dtype)));
    }
    return tuner::VerifyResult::pass();
  }

  void warmup(size_t, const std::string& text) override {
    for (size_t s = 0; s < sets_.size(); ++s) run(launch_text(text), static_cast<int>(s));
    cuda_check(cudaStreamSynchronize(stream_), "warm-up");
  }

  // One sample of a candidate: its GPU time per call. A few calls (on rotated input sets) are
  // captured once in a CUDA graph, and each sample replays it between events, so no host work
  // (planning lookups, launch latency) is inside: on small graphs that work swings with the phase
  // of the process (the same Cora schedule measured 31 or 52 us a call) and cannot rank schedules.
  // One isolated call, host work included, is timed beside it for the report. Where a pass cannot
  // be captured, the isolated call is the sample.
  double time(size_t, const std::string& text) override {
    const std::string launch = launch_text(text);
    const double isolated = timed_calls(launch, 1);
    Samples& r = regimes_[text];
    r.isolated.push_back(isolated);
    const double gpu = replayed_ms_per_call(launch, isolated);
    if (gpu > 0) r.gpu.push_back(gpu);
    return gpu > 0 ? gpu : isolated;
  }

  // Both clocks' samples per candidate text (for the tuning report).
  struct Samples {
    std::vector<double> isolated, gpu;
  };
  const std::map<std::string, Samples>& regimes() const { return regimes_; }

  std::string default_text() const { return to_string(pass_ == PassKind::BackwardCol ? defaults_.col : defaults_.row); }

 private:
  struct Output {
    const char* name;
    const void* ptr;
    long long count;
    bool features;  // in the op's dtype (else float32)
  };
  // Elements and element size of an input slot (and of its gradient) on this graph.
  long long slot_count(int s) const { return slot_elements(op_, s, g_.num_nodes(), g_.num_edges()); }
  size_t slot_elem(int s) const { return slot_in_op_dtype(op_, s) ? dtype_size(op_.dtype) : sizeof(float); }

  // A backward pass candidate runs with the default schedule on the other pass.
  std::string launch_text(const std::string& candidate) const {
    if (pass_ == PassKind::Forward) return candidate;
    SchedulePair pair = defaults_;
    (pass_ == PassKind::BackwardRow ? pair.row : pair.col) = parse_schedule(candidate);
    return to_string(DFGNN_BACKWARD, pair);
  }

  size_t workspace_for(const std::string& text) {
    const dfgnn_direction_t dir = pass_ == PassKind::Forward ? DFGNN_FORWARD : DFGNN_BACKWARD;
    const int32_t vec = static_cast<int32_t>(16 / dtype_size(op_.dtype));
    return workspace_size(g_, op_, dir, choose_schedules(ctx_, g_, op_, dir, launch_text(text).c_str(), vec));
  }

  LaunchArgs args(const std::string& text) {
    schedule_text_ = text;
    LaunchArgs a;
    a.stream = stream_;
    a.workspace = workspace_.get();
    a.workspace_bytes = workspace_bytes_;
    a.schedule = schedule_text_.c_str();
    return a;
  }

  // Milliseconds between events around `calls` calls on rotated input sets, from an idle GPU.
  double timed_calls(const std::string& launch, int calls) {
    cuda_check(cudaEventRecord(start_, stream_), "cudaEventRecord");
    for (int c = 0; c < calls; ++c) run(launch, static_cast<int>(next_set_++ % sets_.size()));
    cuda_check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }

  // A pass's calls captured in a CUDA graph, replayed for each GPU-time sample.
  struct Replay {
    cudaGraphExec_t exec = nullptr;
    int calls = 0;
  };
  static constexpr double kReplayMs = 0.5;  // calls per graph: about this long, far above the events' resolution
  static constexpr int kMaxReplayCalls = 32;

  // GPU milliseconds per call of `launch` (0 where capture does not work).
  double replayed_ms_per_call(const std::string& launch, double isolated_ms) {
    if (!capture_works_) return 0.0;
    auto found = replays_.find(launch);
    if (found == replays_.end()) {
      const int calls = static_cast<int>(std::clamp(std::ceil(kReplayMs / std::max(isolated_ms, 1e-3)), 1.0,
                                                    static_cast<double>(kMaxReplayCalls)));
      const Replay r = capture(launch, calls);
      if (r.exec == nullptr) return 0.0;
      found = replays_.emplace(launch, r).first;
    }
    cuda_check(cudaEventRecord(start_, stream_), "cudaEventRecord");
    cuda_check(cudaGraphLaunch(found->second.exec, stream_), "cudaGraphLaunch");
    cuda_check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms / found->second.calls;
  }

  Replay capture(const std::string& launch, int calls) {
    std::string failure;
    cudaGraph_t graph = nullptr;
    cudaError_t status = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
    if (status == cudaSuccess) {
      try {
        for (int c = 0; c < calls; ++c) run(launch, static_cast<int>(next_set_++ % sets_.size()));
      } catch (const std::exception& e) {
        failure = e.what();
      }
      status = cudaStreamEndCapture(stream_, &graph);
    }
    Replay r;
    if (failure.empty() && status == cudaSuccess) status = cudaGraphInstantiate(&r.exec, graph, 0);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (failure.empty() && status != cudaSuccess) failure = cudaGetErrorString(status);
    if (!failure.empty()) {
      cudaGetLastError();  // a failed capture leaves no sticky error; clear the last one
      r.exec = nullptr;
      capture_works_ = false;
      log().warn("tuning {} {}: a call could not be captured in a CUDA graph ({}); timing whole calls instead",
                 model_name(op_.model), pass_name(pass_), failure);
    }
    r.calls = calls;
    return r;
  }

  void run(const std::string& text, int set) {
    InputSet& s = sets_[set];
    if (pass_ == PassKind::Forward) {
      forward(ctx_, g_, op_, s.inputs, out_.get(), lse_.as<float>(), args(text));
      return;
    }
    dfgnn_grads_t grads{};
    void** g = reinterpret_cast<void**>(&grads);
    for (int k = 0; k < kNumSlots; ++k) g[k] = grads_[k].get();
    backward(ctx_, g_, op_, s.inputs, s.out.get(), s.lse.as<const float>(), s.grad_out.get(), grads, args(text));
  }

  std::vector<Output> outputs() const {
    const long long nh = static_cast<long long>(g_.num_nodes()) * op_.heads, nhd = nh * op_.dim;
    if (pass_ == PassKind::Forward) return {{"out", out_.get(), nhd, true}, {"lse", lse_.get(), nh, false}};
    static const char* names[kNumSlots] = {"grad h",       "grad h_dst",   "grad q",    "grad k",   "grad v",
                                           "grad att_src", "grad att_dst", "grad beta", "grad edge"};
    std::vector<Output> o;
    for (int k = 0; k < kNumSlots; ++k)
      if (grads_[k].get() != nullptr) o.push_back({names[k], grads_[k].get(), slot_count(k), slot_in_op_dtype(op_, k)});
    return o;
  }

  DeviceBuffer copy(const Output& o) {
    const size_t bytes = static_cast<size_t>(o.count) * (o.features ? dtype_size(op_.dtype) : sizeof(float));
    DeviceBuffer b(bytes);
    cuda_check(cudaMemcpyAsync(b.get(), o.ptr, bytes, cudaMemcpyDeviceToDevice, stream_), "copy trusted");
    return b;
  }

  Context& ctx_;
  const Graph& g_;
  dfgnn_op_t op_;
  PassKind pass_;
  SchedulePair defaults_;
  Helpers helpers_;
  int arch_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::vector<InputSet> sets_;
  DeviceBuffer att_src_, att_dst_, beta_, edge_, workspace_, out_, lse_;
  DeviceBuffer grads_[kNumSlots];
  size_t workspace_bytes_ = 0;
  std::vector<DeviceBuffer> trusted_;
  std::string schedule_text_;
  size_t next_set_ = 0;
  std::map<std::string, Samples> regimes_;
  std::map<std::string, Replay> replays_;
  bool capture_works_ = true;
};

}  // namespace

PassTuning tune_pass(Context& ctx, const Graph& graph, const dfgnn_op_t& op, PassKind pass, int32_t max_vec,
                     double budget_s) {
  require_device("tuning");
  validate_op(op, graph.num_nodes(), graph.num_edges());
  const PassProblem problem = pass_problem(graph, op, pass, max_vec);
  SchedulePair defaults;
  defaults.row = default_schedule(pass_problem(graph, op, pass == PassKind::Forward ? PassKind::Forward : PassKind::BackwardRow, max_vec));
  if (pass != PassKind::Forward) defaults.col = default_schedule(pass_problem(graph, op, PassKind::BackwardCol, max_vec));
  const Schedule default_s = pass == PassKind::BackwardCol ? defaults.col : defaults.row;

  PassTuning t;
  t.pass = pass;
  if (std::optional<Decision> before = ctx.dispatcher.database_answer(graph, op, pass, max_vec)) {
    t.incumbent = to_string(before->schedule);
    t.incumbent_origin = describe_origin(*before);
  }
  std::vector<std::string> enumerated;
  for (const Schedule& s : enumerate_schedules(problem)) enumerated.push_back(to_string(s));
  const std::vector<tuner::Candidate> candidates = tuner::candidate_list(to_string(default_s), t.incumbent, enumerated);
  std::vector<std::string> texts;
  for (const tuner::Candidate& c : candidates) texts.push_back(c.text);
  PassMeasurer measurer(ctx, graph, op, pass, defaults, texts);
  const std::shared_ptr<db::LayeredDb> layers = ctx.dispatcher.database();
  // The user database now, not after the budget is spent: it is created here if missing, and one that
  // cannot be is reported (logged once, with its reason) before any tuning time goes.
  if (layers != nullptr) layers->user();
  tuner::SearchOptions options;
  options.budget_s = budget_s;
  options.prepare_threads = compile_threads();
  if (layers != nullptr) options.tie = layers->policy().tie;  // the band the database recomputes the winner by

  t.compile_threads = options.prepare_threads;
  t.search = tuner::search(candidates, measurer, options);
  t.winner = t.search.found ? parse_schedule(t.search.winner) : default_s;
  for (const auto& [text, r] : measurer.regimes())
    t.regimes[text] = {stats::median_of(r.isolated), r.gpu.empty() ? 0.0 : stats::median_of(r.gpu)};

  db::TuningRun run;
  run.environment = ctx.dispatcher.environment_for_writes();
  run.op = op_key(op, pass, max_vec);
  run.fingerprint = db_fingerprint(*problem.fingerprint);
  run.default_schedule = candidates[0].text;
  for (const tuner::CandidateRecord& r : t.search.candidates) {
    if (r.samples.empty() || r.status == tuner::CandidateStatus::Failed) continue;
    run.candidates.push_back(
        db::summarize_samples(r.text, static_cast<int32_t>(parse_schedule(r.text).solver), r.samples));
  }
  if (run.candidates.empty()) {
    t.store_error = "no candidate was measured";
  } else if (layers == nullptr) {
    t.store_error = "no writable tuning database (see dfgnnSetDatabase / DFGNN_CACHE_DIR)";
  } else {  // put_result names why there is no user database, if there is none
    try {
      layers->put_result(run);
      t.stored = true;
    } catch (const std::exception& e) {
      t.store_error = e.what();
    }
  }
  if (!t.stored) log().warn("tuning result of {} {} not stored: {}", model_name(op.model), pass_name(pass), t.store_error);
  ctx.dispatcher.forget();
  return t;
}

std::string describe(const PassTuning& t, bool with_timed) {
  const tuner::SearchResult& r = t.search;
  nlohmann::ordered_json j;
  j["pass"] = pass_name(t.pass);
  j["winner"] = to_string(t.winner);
  j["winner_median_ms"] = r.winner_stats.median;
  j["default"] = r.default_text;
  j["default_median_ms"] = r.default_stats.median;
  j["speedup_over_default"] = r.speedup_over_default;
  if (!t.incumbent.empty()) {  // what dispatch answered before this tuning
    j["before"] = t.incumbent;
    j["before_origin"] = t.incumbent_origin;
    const auto before = std::find_if(r.candidates.begin(), r.candidates.end(),
                                     [&](const tuner::CandidateRecord& c) { return c.text == t.incumbent; });
    j["before_median_ms"] = before != r.candidates.end() && !before->samples.empty() ? before->stats.median : 0.0;
  }
  j["runner_up"] = r.has_runner_up ? r.runner_up : "";
  j["runner_up_median_ms"] = r.has_runner_up ? r.runner_up_stats.median : 0.0;
  j["candidates"] = r.candidates.size();
  j["timings"] = r.timings;
  j["elapsed_s"] = r.elapsed_s;
  j["compile_wait_s"] = r.prepare_wait_s;
  j["compile_threads"] = t.compile_threads;
  j["budget_exhausted"] = r.budget_exhausted;
  j["default_failed"] = r.default_failed;
  j["stored"] = t.stored;
  if (!t.stored) j["store_error"] = t.store_error;
  j["reason"] = r.reason;
  if (!with_timed) return j.dump();
  // Every timed candidate: its score (GPU time per call) and both clocks' medians.
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const tuner::CandidateRecord& c : r.candidates) {
    if (c.samples.empty()) continue;
    const auto regime = t.regimes.find(c.text);
    nlohmann::ordered_json e;
    e["schedule"] = c.text;
    e["status"] = c.describe();
    e["samples"] = c.samples.size();
    e["median_ms"] = c.stats.median;
    e["isolated_ms"] = regime == t.regimes.end() ? 0.0 : regime->second.isolated_ms;
    e["gpu_ms"] = regime == t.regimes.end() ? 0.0 : regime->second.gpu_ms;
    list.push_back(std::move(e));
  }
  j["timed"] = std::move(list);
  return j.dump();
}

}  // namespace dfgnn
