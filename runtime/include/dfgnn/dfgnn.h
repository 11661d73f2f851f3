/*
 * dfgnn: fused attention graph neural network kernels (GAT, GATv2, Graph Transformer, AGNN).
 *
 * The one public header. Plain C (usable from C, C++, and foreign-function interfaces).
 *
 * Conventions
 * - Every entry point returns a dfgnn_status_t. On failure, dfgnnGetLastErrorMessage() returns a
 *   thread-local message that names the exact problem; it stays valid until the next failing call
 *   on the same thread. No entry point aborts, exits, or lets an exception escape.
 * - Handles are opaque. A handle may be used from several threads, but calls on one graph that
 *   build device data (the first GPU op on it) are serialised internally.
 * - Graph direction: an edge j -> i means node i attends over its in-neighbour j. Graphs are held
 *   as CSR by destination (row i lists its sources j) and its transpose (CSC: column j lists the
 *   destinations i it feeds). This matches PyG's edge_index: row 0 = source j, row 1 = target i.
 * - Features are [N, H, D] (node, head, channel), row-major, contiguous.
 */
#ifndef DFGNN_DFGNN_H
#define DFGNN_DFGNN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define DFGNN_API __declspec(dllexport)
#else
#define DFGNN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status and errors */

typedef enum dfgnn_status {
  DFGNN_STATUS_SUCCESS = 0,
  DFGNN_STATUS_INVALID_ARGUMENT = 1,   /* a bad argument that is not graph data (null handle, bad enum, bad dims) */
  DFGNN_STATUS_NULL_POINTER = 2,       /* a required pointer is null while its size is non-zero */
  DFGNN_STATUS_NEGATIVE_SIZE = 3,      /* number of nodes or edges is negative */
  DFGNN_STATUS_INDEX_OVERFLOW = 4,     /* a size does not fit the index type (given or internal int32) */
  DFGNN_STATUS_ROW_PTR_START = 5,      /* row_ptr[0] != 0 */
  DFGNN_STATUS_ROW_PTR_DECREASING = 6, /* row_ptr[i+1] < row_ptr[i] */
  DFGNN_STATUS_ROW_PTR_END = 7,        /* row_ptr[n] != nnz */
  DFGNN_STATUS_INDEX_OUT_OF_RANGE = 8, /* a column / node index is negative or >= n */
  DFGNN_STATUS_DUPLICATE_EDGE = 9,     /* duplicate edge while DFGNN_DUPLICATES_REJECT is set */
  DFGNN_STATUS_OUT_OF_MEMORY = 10,     /* host or device allocation failed */
  DFGNN_STATUS_NO_DEVICE = 11,         /* no CUDA driver or device: GPU entry points are unavailable */
  DFGNN_STATUS_CUDA_ERROR = 12,        /* a CUDA runtime call failed; the message carries CUDA's text */
  DFGNN_STATUS_COMPILE_ERROR = 13,     /* NVRTC failed; the message carries the compiler log */
  DFGNN_STATUS_NOT_SUPPORTED = 14,     /* valid request that this build or schedule cannot serve */
  DFGNN_STATUS_IO_ERROR = 15,          /* a file could not be opened, read, or written */
  DFGNN_STATUS_PARSE_ERROR = 16,       /* a file or string is malformed; the message names the line */
  DFGNN_STATUS_DATABASE_ERROR = 17,    /* the tuning database failed or is unusable */
  DFGNN_STATUS_INTERNAL_ERROR = 18     /* a bug in dfgnn; please report the message */
} dfgnn_status_t;

/* Short static description of a status code ("invalid argument", ...). Never null. */
DFGNN_API const char* dfgnnGetStatusString(dfgnn_status_t status);
/* Message of the last failing call on this thread ("" if none). Never null. */
DFGNN_API const char* dfgnnGetLastErrorMessage(void);

/* Library version as "MAJOR.MINOR.PATCH". */
DFGNN_API const char* dfgnnGetVersion(void);

/* Version of the binary interface (struct layouts, signatures): raised by every incompatible change
 * and the number of the shared library's soname (libdfgnn.so.N), so a program built against an older
 * header does not load this library. The library version (dfgnnGetVersion) moves independently.
 *   1: dfgnn_op_t lost its unread `deterministic` field (every kernel is deterministic). */
#define DFGNN_ABI_VERSION 1

/* ---------------------------------------------------------------- context */

typedef struct dfgnn_context* dfgnn_context_t;

/* Handles (contexts, graphs) are checked against a registry of live ones: a null, destroyed or
 * never-created handle gets DFGNN_STATUS_INVALID_ARGUMENT instead of undefined behaviour. The
 * check is best-effort: a destroyed handle whose address was reused by a new handle of the same
 * kind is taken for the new one, and a handle destroyed by another thread during a call is not
 * detected. Destroying a null handle does nothing. */

/* Creates a context. Works without a GPU: host-only functions (graphs, fingerprints, reference
 * ops, NVRTC compilation) stay available, GPU entry points return DFGNN_STATUS_NO_DEVICE. */
DFGNN_API dfgnn_status_t dfgnnCreate(dfgnn_context_t* ctx);
DFGNN_API dfgnn_status_t dfgnnDestroy(dfgnn_context_t ctx);
/* 1 if a CUDA device is usable from this process, else 0 (with the reason in *reason if non-null;
 * the string lives as long as the context). */
DFGNN_API dfgnn_status_t dfgnnHasDevice(dfgnn_context_t ctx, int* has_device, const char** reason);

/* ---------------------------------------------------------------- graphs */

typedef struct dfgnn_graph* dfgnn_graph_t;

typedef enum dfgnn_index_type { DFGNN_INDEX_INT32 = 0, DFGNN_INDEX_INT64 = 1 } dfgnn_index_type_t;
typedef enum dfgnn_memory { DFGNN_MEMORY_HOST = 0, DFGNN_MEMORY_DEVICE = 1 } dfgnn_memory_t;
typedef enum dfgnn_duplicates {
  DFGNN_DUPLICATES_KEEP = 0,  /* duplicate edges stay (each counts in softmax, as in PyG) */
  DFGNN_DUPLICATES_REJECT = 1 /* a duplicate edge is an error (DFGNN_STATUS_DUPLICATE_EDGE) */
} dfgnn_duplicates_t;

typedef struct dfgnn_graph_options {
  /* Non-zero: remove existing self-loops, then add one loop per node (PyG's add_self_loops).
   * Loops are appended after the other edges; they get edge ids E'..E'+N-1 where E' is the
   * edge count after removal. */
  int add_self_loops;
  dfgnn_duplicates_t duplicates;
  /* cudaStream_t on which a graph from DFGNN_MEMORY_DEVICE arrays is built (null: the legacy
   * default stream). The build is ordered after the work already queued there (the kernel that
   * wrote the arrays) and the call returns when it is done; the graph's device arrays are freed
   * on this stream when the graph is destroyed, so the stream must outlive the graph. */
  void* stream;
} dfgnn_graph_options_t;

/* Default options: no self-loops added, duplicates kept. */
DFGNN_API dfgnn_graph_options_t dfgnnGraphDefaultOptions(void);

/* CSR by destination: row i holds the sources of its in-edges, col_idx[row_ptr[i] .. row_ptr[i+1]).
 * row_ptr has num_nodes + 1 entries, col_idx has nnz. Both arrays have index_type and live in
 * memory (host, or device memory of the current CUDA device). Neighbour order is kept. options
 * may be null (defaults). Edge ids are CSR positions in the given arrays.
 * Device arrays are validated and compressed on the device (options->stream), with the same
 * statuses and messages as host arrays; no edge-sized array is copied to the host. The graph then
 * belongs to that device: ops from another current device get DFGNN_STATUS_INVALID_ARGUMENT. */
DFGNN_API dfgnn_status_t dfgnnGraphCreateCsr(dfgnn_context_t ctx, int64_t num_nodes, int64_t nnz,
                                             const void* row_ptr, const void* col_idx,
                                             dfgnn_index_type_t index_type, dfgnn_memory_t memory,
                                             const dfgnn_graph_options_t* options,
                                             dfgnn_graph_t* graph);

/* COO as PyG's edge_index: a contiguous [2, num_edges] array, row 0 = source j, row 1 = target i.
 * Edge ids are positions in edge_index; a row keeps its edges in that order (stable). */
DFGNN_API dfgnn_status_t dfgnnGraphCreateCoo(dfgnn_context_t ctx, int64_t num_nodes, int64_t num_edges,
                                             const void* edge_index, dfgnn_index_type_t index_type,
                                             dfgnn_memory_t memory,
                                             const dfgnn_graph_options_t* options,
                                             dfgnn_graph_t* graph);

/* Reads a graph file: the edge-list format of dfgnn's datasets ("# nodes N edges E ..." header,
 * then "src dst" lines; ".gz" compressed or plain) or Matrix Market (".mtx", coordinate, pattern
 * or valued; entry (r, c) is read as edge r -> c). A directory is read as DIR/edges.txt[.gz].
 * A gzip file must hold nothing but gzip members (trailing bytes: DFGNN_STATUS_PARSE_ERROR).
 * Header sizes are checked against what is read, never trusted for memory: the edge count (or
 * Matrix Market entry count) must equal the lines read, and the node count N may exceed the
 * largest node id M read (isolated nodes) only up to N <= 16 * min(M + 1, 2E) + 65536, E being the
 * edges read; a larger N is DFGNN_STATUS_PARSE_ERROR (a graph with more isolated nodes is built by
 * dfgnnGraphCreateCoo). So memory grows with the edges read, whatever the header or one node id says. */
DFGNN_API dfgnn_status_t dfgnnGraphCreateFromFile(dfgnn_context_t ctx, const char* path,
                                                  const dfgnn_graph_options_t* options,
                                                  dfgnn_graph_t* graph);

/* R-MAT / Kronecker power-law generator. 2^scale nodes, num_edges sampled edges with quadrant
 * probabilities a, b, c (d = 1 - a - b - c). Flags below; the result is deterministic per seed. */
enum {
  DFGNN_RMAT_DEDUPLICATE = 1,        /* drop repeated (src, dst) pairs */
  DFGNN_RMAT_NO_SELF_LOOPS = 2,      /* drop i -> i */
  DFGNN_RMAT_PERMUTE_IDS = 4,        /* random relabelling of node ids (breaks id/degree locality) */
  DFGNN_RMAT_SYMMETRIZE = 8          /* add the reverse of every edge (before deduplication) */
};
DFGNN_API dfgnn_status_t dfgnnGraphCreateRmat(dfgnn_context_t ctx, int32_t scale, int64_t num_edges,
                                              double a, double b, double c, uint32_t flags,
                                              uint64_t seed, const dfgnn_graph_options_t* options,
                                              dfgnn_graph_t* graph);

/* A uniform random graph (each node receives avg_degree in-edges from uniform sources) with
 * num_hubs planted hubs: hub nodes 0..num_hubs-1 each receive hub_degree in-edges from distinct
 * uniform sources and send as many (the graph stays symmetric around hubs, as in social graphs). */
DFGNN_API dfgnn_status_t dfgnnGraphCreatePlantedHubs(dfgnn_context_t ctx, int64_t num_nodes,
                                                     int32_t avg_degree, int32_t num_hubs,
                                                     int64_t hub_degree, uint64_t seed,
                                                     const dfgnn_graph_options_t* options,
                                                     dfgnn_graph_t* graph);

/* Graphs are reference counted: a created graph holds one reference, dfgnnGraphRetain adds one (for
 * a binding that shares the graph, e.g. an autograd node that outlives its caller's handle), and
 * dfgnnGraphDestroy releases one; the graph is freed with the last. A handle whose references are
 * all released is not live: any later use is DFGNN_STATUS_INVALID_ARGUMENT. */
DFGNN_API dfgnn_status_t dfgnnGraphRetain(dfgnn_graph_t graph);
DFGNN_API dfgnn_status_t dfgnnGraphDestroy(dfgnn_graph_t graph);

/* Number of nodes and of edges (after self-loop handling). */
DFGNN_API dfgnn_status_t dfgnnGraphGetSize(dfgnn_graph_t graph, int64_t* num_nodes, int64_t* num_edges);

/* Borrowed int32 arrays of the graph, valid while the graph lives. memory selects the host copy or
 * the device copy (made on first request, on the current CUDA device). Any output may be null.
 * CSR: row_ptr [N+1], col_idx [E] (source j of each in-edge of row i), edge_id [E] (input edge id;
 *      with add_self_loops: the index among the input edges that are not self-loops, then
 *      kept + i for the loop added to node i, as PyG's remove_self_loops + add_self_loops order them).
 * CSC: col_ptr [N+1], row_idx [E] (destination i of each out-edge of column j), csr_pos [E]
 *      (position of that edge in the CSR arrays, so per-edge data in CSR order is reachable). */
DFGNN_API dfgnn_status_t dfgnnGraphGetCsr(dfgnn_graph_t graph, dfgnn_memory_t memory,
                                          const int32_t** row_ptr, const int32_t** col_idx,
                                          const int32_t** edge_id);
DFGNN_API dfgnn_status_t dfgnnGraphGetCsc(dfgnn_graph_t graph, dfgnn_memory_t memory,
                                          const int32_t** col_ptr, const int32_t** row_idx,
                                          const int32_t** csr_pos);

/* ---------------------------------------------------------------- degree fingerprint */

#define DFGNN_FINGERPRINT_VERSION 1
#define DFGNN_FINGERPRINT_HIST_BINS 24
#define DFGNN_FINGERPRINT_HUB_THRESHOLDS 10

/* Summary of a graph's in-degree distribution (degree = length of a CSR row), computed once per
 * graph and cached on its handle. Used to reuse tuning results across similar graphs. */
typedef struct dfgnn_fingerprint {
  int32_t version;            /* DFGNN_FINGERPRINT_VERSION */
  int64_t num_nodes;          /* N */
  int64_t num_edges;          /* E (nnz) */
  double mean_degree;         /* E / N (0 for an empty graph) */
  int64_t max_degree;         /* largest in-degree */
  /* Degree quantiles (nearest-rank on the sorted degrees: the smallest degree d such that at
   * least q*N rows have degree <= d). */
  double p50, p90, p99, p999;
  double cv;                  /* coefficient of variation: stddev / mean of degree (0 if mean 0) */
  double gini;                /* Gini coefficient of degrees, 0 = all equal, -> 1 = one row holds all */
  /* hist[0] = share of rows with degree 0; hist[b] (b >= 1) = share of rows with degree in
   * [2^(b-1), 2^b); the last bin also holds everything above. Sums to 1 (all 0 for N = 0). */
  double hist[DFGNN_FINGERPRINT_HIST_BINS];
  double top1pct_edge_share;  /* share of edges in the ceil(1% of N) rows of highest degree */
  /* hub_rows[k] = number of rows with degree >= 2^(k+6), i.e. thresholds 64, 128, ..., 32768. */
  int64_t hub_rows[DFGNN_FINGERPRINT_HUB_THRESHOLDS];
} dfgnn_fingerprint_t;

/* The graph's fingerprint (computed on first call, then cached). */
DFGNN_API dfgnn_status_t dfgnnGraphGetFingerprint(dfgnn_graph_t graph, dfgnn_fingerprint_t* fingerprint);
/* Stable, versioned text form (JSON with fixed key order). Writes at most capacity bytes including
 * the terminating zero; *length receives the full length without the zero (call with capacity 0
 * to size the buffer). */
DFGNN_API dfgnn_status_t dfgnnFingerprintSerialize(const dfgnn_fingerprint_t* fingerprint, char* buffer,
                                                   size_t capacity, size_t* length);
/* Parses the text form; an unknown version or malformed text is DFGNN_STATUS_PARSE_ERROR. */
DFGNN_API dfgnn_status_t dfgnnFingerprintParse(const char* text, dfgnn_fingerprint_t* fingerprint);
/* Distance >= 0 between two fingerprints, 0 for identical ones, symmetric: a weighted sum of
 * per-feature differences (sizes and degree quantiles on a log scale, the degree histogram, Gini,
 * tail share, hub counts) whose weights were fitted so that graphs that favour the same schedule
 * lie close (tools/calibrate_nearest.py). Used for nearest-neighbour reuse of tuning results. */
DFGNN_API dfgnn_status_t dfgnnFingerprintDistance(const dfgnn_fingerprint_t* a, const dfgnn_fingerprint_t* b,
                                                  double* distance);
/* Coarse bucket key ("n2^12.e2^14.max2^8.cv1"): graphs with the same key are candidates for
 * reuse. Same buffer protocol as dfgnnFingerprintSerialize. */
DFGNN_API dfgnn_status_t dfgnnFingerprintBucketKey(const dfgnn_fingerprint_t* fingerprint, char* buffer,
                                                   size_t capacity, size_t* length);

/* ---------------------------------------------------------------- attention ops */

typedef enum dfgnn_model {
  /* e_ij = LeakyReLU(att_dst . h_i + att_src . h_j);  out_i = sum_j alpha_ij h_j      (PyG GATConv) */
  DFGNN_MODEL_GAT = 0,
  /* e_ij = att . LeakyReLU(h_dst_i + h_j);            out_i = sum_j alpha_ij h_j      (PyG GATv2Conv;
   * h = W_src x, h_dst = W_dst x) */
  DFGNN_MODEL_GATV2 = 1,
  /* e_ij = scale * (q_i . k_j), scale = 1/sqrt(D);    out_i = sum_j alpha_ij v_j      (PyG TransformerConv) */
  DFGNN_MODEL_TRANSFORMER = 2,
  /* e_ij = beta * cos(h_i, h_j);                      out_i = sum_j alpha_ij h_j      (PyG AGNNConv;
   * cos uses max(|h|, 1e-12) as the norm, like torch.nn.functional.normalize) */
  DFGNN_MODEL_AGNN = 3
} dfgnn_model_t;
/* Models are the values 0 .. DFGNN_NUM_MODELS - 1. */
#define DFGNN_NUM_MODELS 4
/* Every model: per head, alpha_ij = exp(e_ij - m_i) / sum_j' exp(e_ij' - m_i) over the in-edges of
 * i (m_i the row max); a row without in-edges gives out_i = 0. */

typedef enum dfgnn_dtype {
  DFGNN_DTYPE_FLOAT32 = 0,
  DFGNN_DTYPE_FLOAT16 = 1,
  DFGNN_DTYPE_BFLOAT16 = 2,
  DFGNN_DTYPE_FLOAT64 = 3 /* reference ops only */
} dfgnn_dtype_t;

typedef enum dfgnn_direction { DFGNN_FORWARD = 0, DFGNN_BACKWARD = 1 } dfgnn_direction_t;

/* Most channels per node, H * D, of any op (ops, reference ops, schedules, workspace sizes);
 * larger ones get DFGNN_STATUS_NOT_SUPPORTED. The kernels' schedules serve D up to 2048. */
#define DFGNN_MAX_CHANNELS (1 << 24)

/* What to compute. Feature tensors have dtype; attention vectors, beta, statistics and their
 * gradients are always float32 (float64 for the reference ops); arithmetic accumulates in
 * float32 (float64 for the reference). */
typedef struct dfgnn_op {
  dfgnn_model_t model;
  dfgnn_dtype_t dtype;
  int32_t heads;          /* H >= 1, H * D <= DFGNN_MAX_CHANNELS */
  int32_t dim;            /* D >= 1 (channels per head) */
  float negative_slope;   /* GAT, GATv2: LeakyReLU slope (PyG default 0.2) */
  float scale;            /* Transformer: score scale; 0 means 1/sqrt(D) */
  /* (Every kernel is deterministic: bitwise reproducible, no floating-point atomics. There is no
   * switch for it; the field `deterministic` that named it was removed in ABI version 1.) */
  /* Attention dropout (PyG's `dropout` in training): each (edge, head) weight is dropped with
   * probability `dropout` in [0, 1) and the kept ones scaled by 1 / (1 - dropout). The mask is a
   * counter-based hash of (dropout_seed, edge, head), edge = the edge's CSR position: the backward
   * regenerates it from the same op (pass the forward's seed); nothing E-sized is stored. */
  float dropout;
  uint64_t dropout_seed;
  /* 1: edge features take part (PyG's edge_dim), given as inputs.edge, one row per edge id
   * (the edge_id of dfgnnGraphGetCsr: input order, PyG's order after self-loop handling):
   *   GAT:          a [E,H] float32 logit term:  e_ij = LeakyReLU(att_dst . h_i + att_src . h_j + edge_ij)
   *   GATv2:        [E,H,D] features:            e_ij = att . LeakyReLU(h_dst_i + h_j + edge_ij)
   *   Transformer:  [E,H,D] features:            e_ij = scale * q_i . (k_j + edge_ij),
   *                                              out_i = sum_j alpha_ij (v_j + edge_ij)
   * (the edge term of PyG's lin_edge / att_edge computed by the caller). AGNN has none. */
  int32_t edge_features;
} dfgnn_op_t;

/* An op with PyG's defaults: slope 0.2, scale 1/sqrt(D), no dropout, no edge features. */
DFGNN_API dfgnn_op_t dfgnnOpDefault(dfgnn_model_t model, dfgnn_dtype_t dtype, int32_t heads, int32_t dim);

/* Inputs of an op; a model reads only the fields listed for it and requires those to be non-null
 * (a field it does not read must be null, so mixed-up arguments are caught). On a graph without
 * nodes the [N,H,D] arrays are empty and may be null.
 *   GAT:          h [N,H,D], att_src [H,D], att_dst [H,D]
 *   GATv2:        h [N,H,D] (source side, also aggregated), h_dst [N,H,D], att_src [H,D] (= att)
 *   Transformer:  q, k, v [N,H,D]
 *   AGNN:         h [N,H,D], beta [1]
 * and, when op->edge_features is set, edge (see dfgnn_op_t; empty and may be null without edges). */
typedef struct dfgnn_inputs {
  const void* h;
  const void* h_dst;
  const void* q;
  const void* k;
  const void* v;
  const void* att_src;
  const void* att_dst;
  const void* beta;
  const void* edge;
} dfgnn_inputs_t;

/* Gradients of the inputs, same shapes and null rules as dfgnn_inputs_t (written, not added to). */
typedef struct dfgnn_grads {
  void* h;
  void* h_dst;
  void* q;
  void* k;
  void* v;
  void* att_src;
  void* att_dst;
  void* beta;
  void* edge;
} dfgnn_grads_t;

/* Inputs as bits of a mask: bit s stands for field s of dfgnn_inputs_t (and of dfgnn_grads_t). */
#define DFGNN_INPUT_H (1u << 0)
#define DFGNN_INPUT_H_DST (1u << 1)
#define DFGNN_INPUT_Q (1u << 2)
#define DFGNN_INPUT_K (1u << 3)
#define DFGNN_INPUT_V (1u << 4)
#define DFGNN_INPUT_ATT_SRC (1u << 5)
#define DFGNN_INPUT_ATT_DST (1u << 6)
#define DFGNN_INPUT_BETA (1u << 7)
#define DFGNN_INPUT_EDGE (1u << 8)
#define DFGNN_NUM_INPUTS 9
/* The most inputs any model reads, its edge features included (the bindings' fixed-arity calls). */
#define DFGNN_MAX_MODEL_INPUTS 4

/* The inputs a model reads (and whose gradients its backward writes), as DFGNN_INPUT_* bits, from
 * the library's one model table: with edge_features = 1 the mask includes DFGNN_INPUT_EDGE, and a
 * model that takes no edge features (AGNN) fails with INVALID_ARGUMENT. *edge_logits (may be
 * null) is set to 1 when the model's edge input is an [E,H] float32 logit term (GAT), 0 when it is
 * [E,H,D] features in the op's dtype. Bindings and tools read this instead of keeping a copy. */
DFGNN_API dfgnn_status_t dfgnnModelInputs(dfgnn_model_t model, int32_t edge_features, uint32_t* inputs,
                                          int32_t* edge_logits);
/* The model's name ("gat", "gatv2", "transformer", "agnn"), a static string; INVALID_ARGUMENT for a
 * value that is no model. Tools and bindings take their model names from here. */
DFGNN_API dfgnn_status_t dfgnnModelName(dfgnn_model_t model, const char** name);
/* The model of a name as dfgnnModelName gives it; INVALID_ARGUMENT, with a message naming the known
 * models, for any other name. */
DFGNN_API dfgnn_status_t dfgnnModelFromName(const char* name, dfgnn_model_t* model);

/* ---------------------------------------------------------------- float64 reference ops (host) */

/* Forward on host float64 arrays (op->dtype must be DFGNN_DTYPE_FLOAT64). out [N,H,D]; lse [N,H]
 * receives the per-(node, head) log-sum-exp of scores (-inf for rows without in-edges), may be null. */
DFGNN_API dfgnn_status_t dfgnnReferenceForward(dfgnn_graph_t graph, const dfgnn_op_t* op,
                                               const dfgnn_inputs_t* inputs, double* out, double* lse);
/* Backward on host float64 arrays: given d(loss)/d(out) [N,H,D], writes the gradient of every
 * input the model reads. */
DFGNN_API dfgnn_status_t dfgnnReferenceBackward(dfgnn_graph_t graph, const dfgnn_op_t* op,
                                                const dfgnn_inputs_t* inputs, const double* grad_out,
                                                const dfgnn_grads_t* grads);

/* ---------------------------------------------------------------- GPU ops (fused kernels) */

/* How a GPU op is launched. Zero-initialise, then set what you need. */
typedef struct dfgnn_launch {
  void* stream;            /* cudaStream_t to launch on (null = the default stream) */
  void* workspace;         /* device scratch of at least dfgnnGetWorkspaceSize() bytes */
  size_t workspace_bytes;
  /* Forced schedule (tests, benchmarks, tuner), null for dispatch. Forward: one schedule, e.g.
   * "subwarp:lanes=32,groups=8,vec=4". Backward: "ROW|COL" (row pass over CSR, column pass over
   * CSC) or one schedule for both. An invalid schedule is DFGNN_STATUS_INVALID_ARGUMENT with the
   * reason; a malformed one DFGNN_STATUS_PARSE_ERROR. */
  const char* schedule;
  /* Device pointer to the dropout seed (one uint64 in device memory), or null. When set, the
   * kernels read the seed from it and op->dropout_seed is ignored: a seed drawn on the device
   * (e.g. by torch's CUDA generator) then needs no host sync, and a captured CUDA graph replays
   * with whatever seed that memory holds. The backward must get the forward's seed. */
  const uint64_t* dropout_seed_device;
} dfgnn_launch_t;

/* Bytes of workspace an op direction needs on this graph with the schedule that would run
 * (schedule: as in dfgnn_launch_t, null for dispatch). */
DFGNN_API dfgnn_status_t dfgnnGetWorkspaceSize(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                               dfgnn_direction_t direction, const char* schedule, size_t* bytes);

/* Fused forward on device arrays: out [N,H,D] in op->dtype; lse [N,H] float32 receives the
 * per-(node, head) log-sum-exp of scores that the backward needs (may be null for inference).
 * Asynchronous on launch->stream; inputs as in dfgnn_inputs_t (features in op->dtype, attention
 * vectors and beta float32). */
DFGNN_API dfgnn_status_t dfgnnForward(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                      const dfgnn_inputs_t* inputs, void* out, float* lse,
                                      const dfgnn_launch_t* launch);

/* Fused backward: given the forward's inputs, out and lse and d(loss)/d(out), writes the gradient
 * of every input the model reads (features in op->dtype; attention vectors and beta in float32).
 * Column-side gradients come from the transposed graph without atomics: results are bitwise
 * reproducible run to run. */
DFGNN_API dfgnn_status_t dfgnnBackward(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                       const dfgnn_inputs_t* inputs, const void* out, const float* lse,
                                       const void* grad_out, const dfgnn_grads_t* grads,
                                       const dfgnn_launch_t* launch);

/* The schedule text that would run for an op direction on a graph (dispatch, or the given forced
 * schedule after validation). Same buffer protocol as dfgnnFingerprintSerialize. */
DFGNN_API dfgnn_status_t dfgnnGetSchedule(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                          dfgnn_direction_t direction, const char* schedule, char* buffer,
                                          size_t capacity, size_t* length);

/* Candidate schedules of one pass (0 forward, 1 backward row pass, 2 backward column pass), one
 * per line, in the solvers' order. Same buffer protocol as dfgnnFingerprintSerialize. */
DFGNN_API dfgnn_status_t dfgnnListSchedules(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                            int pass, char* buffer, size_t capacity, size_t* length);

/* Compiles (NVRTC, no GPU needed) every kernel an op direction needs under a schedule for
 * compute capability arch (e.g. 90), into the context's module cache. graph may be null when
 * the schedule is given (it then only names kernels, nothing data-dependent). */
DFGNN_API dfgnn_status_t dfgnnCompile(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                      dfgnn_direction_t direction, const char* schedule, int arch);

/* ---------------------------------------------------------------- tuning and dispatch */

/* Without a forced schedule, each pass of an op is dispatched in this order: the context's
 * in-process cache, an exact hit in the tuning database (same GPU class, kernel source, op and
 * graph fingerprint), the nearest tuned fingerprint of the same GPU class and op when one lies
 * within a distance threshold (DFGNN_NEAREST_MAX_DISTANCE, default the calibrated radius; its
 * near-tied candidates are ranked by the tuned graphs nearby, weighted by closeness), tuning on a
 * miss when enabled, and the solvers' default rule. */
typedef enum dfgnn_tune_mode {
  DFGNN_TUNE_OFF = 0,     /* never tune implicitly (default; env DFGNN_TUNE=off) */
  DFGNN_TUNE_ON_MISS = 1  /* tune a pass when the database has no answer (env DFGNN_TUNE=on_miss) */
} dfgnn_tune_mode_t;
DFGNN_API dfgnn_status_t dfgnnSetTuneMode(dfgnn_context_t ctx, dfgnn_tune_mode_t mode);

/* Tuning database layers. user_path: the writable database (null: $DFGNN_CACHE_DIR/tuning.db,
 * else $XDG_CACHE_HOME/dfgnn/tuning.db, else ~/.cache/dfgnn/tuning.db; "": none). site_paths:
 * read-only databases, ':'-separated, highest priority first (null: $DFGNN_SITE_DB; "": none).
 * Below them, always, the shipped databases: the *.db files installed with the library
 * (<prefix>/share/dfgnn/tuning/, or dfgnn/data/tuning/ in the Python package), or
 * $DFGNN_SHIPPED_DB (files or directories, ':'-separated; "off": none).
 * Reads layer user over sites over shipped; writes go to the user database. An unusable file is
 * logged and skipped, and so is a site or shipped database tuned for another GPU or build:
 * dispatch falls back to the default rule. */
DFGNN_API dfgnn_status_t dfgnnSetDatabase(dfgnn_context_t ctx, const char* user_path, const char* site_paths);

/* Tunes an op direction on this graph (forward: one pass; backward: the row pass, then the
 * column pass), within budget_seconds, stores the winners in the user database and makes the
 * context dispatch them. report (JSON array, one object per pass: winner, default, speedup,
 * runner-up, counts, reason) uses the buffer protocol of dfgnnFingerprintSerialize, but each call
 * tunes again: pass a buffer large enough at once (a report is about 1 KiB per pass; 64 KiB is
 * ample) rather than asking for the length first. report may be null with capacity 0. Needs a GPU. */
DFGNN_API dfgnn_status_t dfgnnTune(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                   dfgnn_direction_t direction, double budget_seconds, char* report,
                                   size_t capacity, size_t* length);

/* How dispatch answers for an op direction (JSON array, one object per pass):
 *   "level"   the level that answered this call: "cache" (this context answered before),
 *             "exact", "nearest", "tuned" or "default";
 *   "origin"  the level that first answered ("exact", "nearest", "tuned", "default"), also once
 *             cached; "cached" (true/false) says whether this call was served from memory;
 *   "origin_detail"  the same in one line of text;
 *   "layer"   for exact, nearest and tuned: the database layer of the answer, "user", "site"
 *             ($DFGNN_SITE_DB / dfgnnSetDatabase) or "shipped" (installed with the library);
 *   for "nearest": "distance", "radius", "neighbours" (tuned graphs that voted) and "neighbour"
 *             (the nearest tuned graph: fingerprint_hash, bucket_key, nodes, edges);
 *   for "default": "rule", the name of the rule that answered;
 *   the schedule, and the (nearest) database row's statistics and "source" (its file).
 * Same buffer protocol as dfgnnFingerprintSerialize. */
DFGNN_API dfgnn_status_t dfgnnExplain(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                      dfgnn_direction_t direction, char* buffer, size_t capacity, size_t* length);

/* Module cache counters of the context: NVRTC compiles, cache hits, modules loaded on a GPU. */
DFGNN_API dfgnn_status_t dfgnnGetCacheCounters(dfgnn_context_t ctx, uint64_t* compiles, uint64_t* hits,
                                               uint64_t* loads);
/* Compiled modules this context took from the tuning database instead of compiling them. */
DFGNN_API dfgnn_status_t dfgnnGetModulesFromDatabase(dfgnn_context_t ctx, uint64_t* count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DFGNN_DFGNN_H */
