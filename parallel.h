/* parallel.h - N-D parallel training for transformer models in one C header.

   Public domain / MIT-0 style: do what you want with it, no warranty.

   WHAT IT IS
   ----------
   The machinery that MindSpore's semi-automatic parallel mode, Megatron-LM and
   DeepSpeed give Python users, for any C, C++ or CUDA training codebase:

     - a device mesh ("device matrix") and tensor layouts (tensor map + partial sums),
     - operator strategies in MindSpore form, checked with precise errors,
     - an optimal redistribution planner (split / all_gather / all_to_all /
       all_reduce / reduce_scatter / local reshape) and a mesh simulator that runs
       a plan for every rank inside one process,
     - (later sections) communication and compute hook tables and ready parallel
       schedules.

   HOW TO USE IT
   -------------
   In exactly one C or C++ file of your program:

       #define PARALLEL_IMPLEMENTATION
       #include "parallel.h"

   Everywhere else just #include "parallel.h". Link with -lpthread (and -lm).

   CONFIGURATION MACROS (define before including)
   -----------------------------------------------
     PARALLEL_IMPLEMENTATION   compile the definitions (one translation unit only)
     PARALLEL_STATIC           make every function static (private copy per TU;
                               set it wherever the header is included)
     PARALLEL_MALLOC(sz) PARALLEL_REALLOC(p,sz) PARALLEL_FREE(p)
                               host allocator; define all three or none
                               (only needed in the implementation file)
     PARALLEL_ASSERT(x)        internal invariant check (default: assert.h);
                               never used for user input
     PARALLEL_MAX_DIMS         max mesh dims and tensor dims (default 8, max 8);
                               must be set identically everywhere

   TWENTY-LINE EXAMPLE
   -------------------
       #define PARALLEL_IMPLEMENTATION
       #include "parallel.h"
       #include <stdio.h>
       int main(void) {
           par_mesh mesh;               // 2 x 4 devices: dp=2, tp=4
           par_layout from, to;
           par_plan plan;
           char text[4096];
           int64_t shape[2] = {16, 16};
           if (par_mesh_parse("dp=2,tp=4", &mesh) != PAR_OK ||
               par_layout_parse(&from, &mesh, 2, shape, "[dp,None]") != PAR_OK ||
               par_layout_parse(&to, &mesh, 2, shape, "[None,tp]") != PAR_OK ||
               par_plan_redistribution(&from, &to, NULL, &plan) != PAR_OK) {
               fprintf(stderr, "error: %s\n", par_last_error());
               return 2;
           }
           par_plan_format(&plan, text, sizeof text);
           fputs(text, stdout);         // one line per collective, then the total
           return 0;
       }

   CONVENTIONS
   -----------
   * Every fallible call returns par_status; PAR_OK is 0. On failure a sentence
     describing it ("input 1 dim 0 (size 100) is not divisible by its shard 3")
     is in par_last_error(), which is per thread.
   * Mesh axes are listed left to right, ranks are row-major (last axis fastest).
     Tensor maps follow MindSpore: a map value v >= 0 names DEVICE DIM v, which is
     mesh axis (ndim-1-v): device dims are counted FROM THE RIGHT. Every API in the
     layout, strategy and redistribution sections speaks of device dims this way;
     bit v of a "dev_mask" is device dim v.
   * Desc structs are zero-initialised: `par_op_desc d = {0};` is valid and
     zero fields take the documented defaults.
   * No hidden globals: all state lives in objects you create and destroy.

   CONTENTS (grep the banners, e.g. "// >>layout")
   --------
     >>config         configuration macros, status codes, errors, dtypes
     >>mesh           device mesh: rank <-> coordinates, groups
     >>layout         tensor layouts: tensor map, partial set, slices, text form,
                      DTensor placements, layout-preserving reshape
     >>strategy       operator strategies: check, device matrix, tensor maps,
                      forward comm, mirror ops, cost, enumeration
     >>redistribute   optimal and greedy redistribution plans, plan cache
     >>simulate       mesh simulator: run a plan for all ranks in one process
*/
#ifndef PARALLEL_H
#define PARALLEL_H

#include <stddef.h>
#include <stdint.h>

/* ============================================================================
   >>config
   ========================================================================== */

#ifndef PARALLEL_MAX_DIMS
#define PARALLEL_MAX_DIMS 8
#endif
#if PARALLEL_MAX_DIMS < 1 || PARALLEL_MAX_DIMS > 8
#error "PARALLEL_MAX_DIMS must be between 1 and 8"
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PAR__MAYBE_UNUSED __attribute__((unused))
#define PAR__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PAR__MAYBE_UNUSED
#define PAR__PRINTF(f, a)
#endif

#ifdef PARALLEL_STATIC
#define PARALLEL_DEF static PAR__MAYBE_UNUSED
#else
#define PARALLEL_DEF extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: X(name, value, description). */
#define PAR_STATUS_LIST(X)                                        \
    X(PAR_OK, 0, "ok")                                            \
    X(PAR_EINVAL, -1, "invalid argument")                         \
    X(PAR_EPARSE, -2, "parse error")                              \
    X(PAR_ELAYOUT, -3, "invalid layout")                          \
    X(PAR_ESTRATEGY, -4, "invalid strategy")                      \
    X(PAR_ESHAPE, -5, "shape mismatch")                           \
    X(PAR_EUNSUPPORTED, -6, "not supported")                      \
    X(PAR_ENOMEM, -7, "out of memory")                            \
    X(PAR_ECAPACITY, -8, "capacity exceeded")                     \
    X(PAR_ETIMEOUT, -9, "timed out")                              \
    X(PAR_ECOMM, -10, "communication failure")                    \
    X(PAR_EIO, -11, "i/o error")

typedef enum par_status {
#define PAR__STATUS_ENUM(name, value, text) name = value,
    PAR_STATUS_LIST(PAR__STATUS_ENUM)
#undef PAR__STATUS_ENUM
    PAR__STATUS_END_ = 1
} par_status;

/* Short description of a status code ("invalid layout"). Never NULL. */
PARALLEL_DEF const char *par_status_string(par_status status);

/* The sentence describing the latest failure on the calling thread ("" if none).
   Valid until the next failing call on this thread. */
PARALLEL_DEF const char *par_last_error(void);

/* Forget the latest failure on the calling thread. */
PARALLEL_DEF void par_clear_error(void);

/* Element types. */
typedef enum par_dtype { PAR_F32 = 0, PAR_BF16, PAR_F16, PAR_I32, PAR_I64, PAR_F64, PAR_DTYPE_COUNT } par_dtype;

/* Bytes per element (0 for an unknown dtype). */
PARALLEL_DEF size_t par_dtype_size(par_dtype dtype);
/* "f32", "bf16", "f16", "i32", "i64", "f64"; "?" for an unknown dtype. */
PARALLEL_DEF const char *par_dtype_name(par_dtype dtype);
/* Parse a dtype name as printed by par_dtype_name. PAR_EPARSE otherwise. */
PARALLEL_DEF par_status par_dtype_parse(const char *text, par_dtype *dtype);

/* ============================================================================
   >>mesh
   ========================================================================== */

#define PAR_NAME_MAX 16 /* axis name bytes, including the terminating 0 */

/* A device mesh (MindSpore's device matrix). Axis i has size dims[i]; ranks are
   row-major, so the LAST axis varies fastest. Device dim v (tensor maps, masks)
   is axis ndim-1-v. */
typedef struct par_mesh {
    int ndim;                                     /* 1..PARALLEL_MAX_DIMS */
    int dims[PARALLEL_MAX_DIMS];                  /* axis sizes, each >= 1 */
    char names[PARALLEL_MAX_DIMS][PAR_NAME_MAX];  /* optional ("dp", "tp"), "" = none */
} par_mesh;

/* Build a mesh from axis sizes and optional names (names may be NULL, or hold NULL
   entries). Names must be unique identifiers ([A-Za-z_][A-Za-z0-9_]*, < 16 bytes)
   other than "None". Errors: PAR_EINVAL naming the bad axis. */
PARALLEL_DEF par_status par_mesh_init(par_mesh *mesh, int ndim, const int *dims, const char *const *names);

/* Parse "2,4", "2x4" or "dp=2,tp=4" (all named or none). PAR_EPARSE on bad text. */
PARALLEL_DEF par_status par_mesh_parse(const char *text, par_mesh *mesh);

/* Write "[2,4]" or "[dp=2,tp=4]"; returns the length snprintf would (buf may be NULL). */
PARALLEL_DEF int par_mesh_format(const par_mesh *mesh, char *buf, size_t size);

/* Number of devices (product of the axis sizes); 0 for an invalid mesh. */
PARALLEL_DEF int par_mesh_size(const par_mesh *mesh);

/* Size of device dim v (counted from the right); 0 if v is out of range. */
PARALLEL_DEF int par_mesh_dev_size(const par_mesh *mesh, int dev_dim);

/* Device dim of the axis called `name`, or -1. */
PARALLEL_DEF int par_mesh_dev_dim(const par_mesh *mesh, const char *name);

/* coords[i] = coordinate of `rank` on axis i (left to right). */
PARALLEL_DEF par_status par_mesh_coords(const par_mesh *mesh, int rank, int *coords);

/* Rank at the given axis coordinates. */
PARALLEL_DEF par_status par_mesh_rank(const par_mesh *mesh, const int *coords, int *rank);

/* The ranks that differ from `rank` only in the device dims of dev_mask (the
   group of a collective along those dims), ordered by their coordinates in those
   dims, leftmost axis major. `ranks` must hold par_mesh_size(mesh) entries.
   The position of `rank` in the list is its index in the group. */
PARALLEL_DEF par_status par_mesh_group(const par_mesh *mesh, int rank, uint32_t dev_mask, int *ranks, int *count);

/* The sub-mesh made of the device dims in keep_mask (e.g. one pipeline stage). */
PARALLEL_DEF par_status par_mesh_sub(const par_mesh *mesh, uint32_t keep_mask, par_mesh *sub);

/* ============================================================================
   >>layout
   ========================================================================== */

/* Which device dims split each tensor dim, and over which the values are partial.
   dev[t][0..count[t]-1] are device dims (counted from the right), MAJOR FIRST: the
   tensor map entry (1,0) means shard index = coord(dim 1) * size(dim 0) + coord(dim 0). */
typedef struct par_tensor_map {
    uint8_t count[PARALLEL_MAX_DIMS];
    int8_t dev[PARALLEL_MAX_DIMS][PARALLEL_MAX_DIMS];
    uint32_t partial; /* bit v: local values are partial sums over device dim v */
} par_tensor_map;

/* A distributed tensor: the mesh, the GLOBAL shape and the tensor map. */
typedef struct par_layout {
    par_mesh mesh;
    int ndim;                          /* tensor rank, 0..PARALLEL_MAX_DIMS */
    int64_t shape[PARALLEL_MAX_DIMS];  /* global shape, each >= 1 */
    par_tensor_map map;
} par_layout;

/* Build a layout from a plain MindSpore tensor map (map[t] = -1 or a device dim;
   map may be NULL for fully replicated) and a partial mask. Validated as
   par_layout_check. */
PARALLEL_DEF par_status par_layout_init(par_layout *layout, const par_mesh *mesh, int ndim, const int64_t *shape,
                                        const int *map, uint32_t partial);

/* Parse the text form: "[1,-1]", "[(1,0),-1]", "[1,-1] partial=0",
   "[-1,-1] partial=(1,0)", or with a named mesh "[dp,None]", "[(dp,cp),None]",
   "partial=tp". The entry count must equal ndim. Validated as par_layout_check. */
PARALLEL_DEF par_status par_layout_parse(par_layout *layout, const par_mesh *mesh, int ndim, const int64_t *shape,
                                         const char *text);

/* Write the text form with numeric device dims ("[(1,0),-1] partial=0");
   returns the length snprintf would. */
PARALLEL_DEF int par_layout_format(const par_layout *layout, char *buf, size_t size);

/* Validity: device dims in range and used at most once (over all entries and the
   partial set), every shape entry >= 1 and divisible by its shard count.
   PAR_ELAYOUT with a sentence naming the dim and the rule. */
PARALLEL_DEF par_status par_layout_check(const par_layout *layout);

/* Number of shards of tensor dim t (product of its device dims' sizes). */
PARALLEL_DEF int64_t par_layout_shards(const par_layout *layout, int tensor_dim);

/* Shape of every rank's slice. */
PARALLEL_DEF void par_layout_local_shape(const par_layout *layout, int64_t *local_shape);

/* Elements in one rank's slice. */
PARALLEL_DEF int64_t par_layout_local_numel(const par_layout *layout);

/* Start of `rank`'s slice in every tensor dim (global index). */
PARALLEL_DEF par_status par_layout_local_offset(const par_layout *layout, int rank, int64_t *offset);

/* Bit mask of the device dims that split some tensor dim. */
PARALLEL_DEF uint32_t par_layout_split_dims(const par_layout *layout);

/* The ranks holding exactly the same values as `rank` (repeated calculation):
   those differing only in device dims that neither split the tensor nor are
   partial. Same ordering rules as par_mesh_group. */
PARALLEL_DEF par_status par_layout_replica_group(const par_layout *layout, int rank, int *ranks, int *count);

/* 1 if both describe the same distribution on the same mesh and shape. Device dims
   of size 1 are ignored: they split nothing. */
PARALLEL_DEF int par_layout_equal(const par_layout *a, const par_layout *b);

/* DTensor-style placement of one mesh axis. */
typedef enum par_placement_kind { PAR_REPLICATE = 0, PAR_SHARD, PAR_PARTIAL } par_placement_kind;
typedef struct par_placement {
    par_placement_kind kind;
    int dim; /* tensor dim for PAR_SHARD */
} par_placement;

/* placements[i] for mesh axis i (left to right). DTensor shards a tensor dim over
   several axes in axis order, so a tuple entry must list its device dims from the
   leftmost axis: (1,0) converts, (0,1) gives PAR_EUNSUPPORTED. */
PARALLEL_DEF par_status par_layout_to_placements(const par_layout *layout, par_placement *placements);

/* The inverse: placements[i] for mesh axis i. */
PARALLEL_DEF par_status par_layout_from_placements(par_layout *layout, const par_mesh *mesh, int ndim,
                                                   const int64_t *shape, const par_placement *placements);

/* "(Shard(0), Replicate())"; returns the length snprintf would. */
PARALLEL_DEF int par_placements_format(const par_placement *placements, int count, char *buf, size_t size);

/* Layout of the same data reshaped to `shape` when every rank's slice, read
   row-major, is already its slice of the reshaped tensor (a LOCAL reshape: no
   data moves). Example: [B,S,H*D] split by tp on the last dim -> [B,S,H,D] split by
   tp on H. Otherwise PAR_EUNSUPPORTED saying which dims would need data movement. */
PARALLEL_DEF par_status par_layout_reshape(const par_layout *from, int ndim, const int64_t *shape, par_layout *to);

/* ============================================================================
   >>strategy
   ========================================================================== */

#define PAR_MAX_INPUTS 4
#define PAR_MAX_OUTPUTS 2

/* Operators with strategies. Inputs, in order:
   MATMUL          a [M,K] (or [K,M] with transpose_a), b [K,N] (or [N,K] with transpose_b)
   BATCH_MATMUL    a [...,M,K], b [...,K,N] or b [K,N] (shared); batch dims must agree
   ELEMENTWISE     1..4 inputs broadcast numpy-style against each other
   RMSNORM         x [...,H], gamma [H...] (the normalized trailing dims)
   LAYERNORM       x, gamma, beta
   SOFTMAX         x; the softmax axis (axes bit, default last) may not be split
   GATHER          table [V,H] (embedding), indices [...]; out [...,H]. Splitting V
                   is vocab-parallel (partial output, AllReduce over V's dim)
   CROSS_ENTROPY   logits [...,C], labels [...] (int); out per-row loss [...].
                   Splitting C is the vocab-parallel loss (AllReduce max, sum, sum)
   RESHAPE         x; out_shape; must be layout-preserving for the strategy
   TRANSPOSE       x; perm
   FLASH_ATTENTION q [B,Nq,S,D], k [B,Nkv,S,D], v [B,Nkv,S,D] (BNSD); heads and
                   batch may be split; S needs a context-parallel algorithm
   REDUCE_SUM      x; reduced axes (default all); split reduced axes -> AllReduce
   REDUCE_MEAN     as REDUCE_SUM */
typedef enum par_op_kind {
    PAR_OP_MATMUL = 0,
    PAR_OP_BATCH_MATMUL,
    PAR_OP_ELEMENTWISE,
    PAR_OP_RMSNORM,
    PAR_OP_LAYERNORM,
    PAR_OP_SOFTMAX,
    PAR_OP_GATHER,
    PAR_OP_CROSS_ENTROPY,
    PAR_OP_RESHAPE,
    PAR_OP_TRANSPOSE,
    PAR_OP_FLASH_ATTENTION,
    PAR_OP_REDUCE_SUM,
    PAR_OP_REDUCE_MEAN,
    PAR_OP_COUNT
} par_op_kind;

/* "matmul", "batch_matmul", "elementwise", "rmsnorm", "layernorm", "softmax",
   "gather", "cross_entropy", "reshape", "transpose", "flash_attention",
   "reduce_sum", "reduce_mean". */
PARALLEL_DEF const char *par_op_kind_name(par_op_kind kind);
/* Parse a name above (also MindSpore's "MatMul", "BatchMatMul", "Add", "Mul",
   "RmsNorm", "LayerNorm", "Softmax", "Gather", "SoftmaxCrossEntropyWithLogits",
   "Reshape", "Transpose", "FlashAttentionScore", "ReduceSum", "ReduceMean",
   case-insensitive). */
PARALLEL_DEF par_status par_op_kind_parse(const char *text, par_op_kind *kind);

/* A strategy: one shard tuple per input, "((2,1),(1,4))". */
typedef struct par_strategy {
    int num_inputs;
    int ndim[PAR_MAX_INPUTS];
    int64_t shard[PAR_MAX_INPUTS][PARALLEL_MAX_DIMS];
} par_strategy;

/* Parse MindSpore's tuple form "((2,1),(1,4))"; "((8,),)" for one 1-D input. */
PARALLEL_DEF par_status par_strategy_parse(const char *text, par_strategy *strategy);
/* Write the tuple form; returns the length snprintf would. */
PARALLEL_DEF int par_strategy_format(const par_strategy *strategy, char *buf, size_t size);

/* An operator instance. Zero fields take defaults. */
typedef struct par_op_desc {
    par_op_kind kind;
    const char *name;     /* used in messages; default par_op_kind_name(kind) */
    int num_inputs;       /* 0 = the operator's natural count (ELEMENTWISE: 2) */
    int ndim[PAR_MAX_INPUTS];
    int64_t shape[PAR_MAX_INPUTS][PARALLEL_MAX_DIMS];
    par_dtype dtype;      /* element type of the float tensors (default f32) */
    uint32_t params;      /* bit i: input i is a trainable parameter (gets a mirror op) */
    int transpose_a, transpose_b;  /* MATMUL, BATCH_MATMUL */
    uint32_t axes;        /* SOFTMAX: the axis bit (default last); norms: normalized
                             axes (default last; must be trailing); REDUCE_*: reduced
                             axes (default all). Bit i = input 0's dim i */
    int keep_dims;        /* REDUCE_*: keep reduced dims with size 1 */
    int out_ndim;         /* RESHAPE */
    int64_t out_shape[PARALLEL_MAX_DIMS];
    int perm[PARALLEL_MAX_DIMS]; /* TRANSPOSE: out dim i = input dim perm[i] */
    int reduce_scatter;   /* forward AllReduce of a partial output becomes ReduceScatter
                             over the output's dim 0 (Megatron sequence parallel) */
    double device_flops;  /* cost model: flop/s per device (default 1e12) */
    double link_bandwidth;/* cost model: bytes/s per device (default 1e10) */
} par_op_desc;

typedef enum par_comm_kind {
    PAR_COMM_NONE = 0,
    PAR_COMM_ALL_REDUCE,
    PAR_COMM_ALL_GATHER,
    PAR_COMM_REDUCE_SCATTER,
    PAR_COMM_ALL_TO_ALL
} par_comm_kind;

/* "none", "all_reduce", "all_gather", "reduce_scatter", "all_to_all". */
PARALLEL_DEF const char *par_comm_kind_name(par_comm_kind kind);

/* One collective implied by a strategy. */
typedef struct par_comm_op {
    par_comm_kind kind;
    uint32_t dev_mask;  /* device dims of the device matrix forming the group */
    int group;          /* group size */
    int tensor_dim;     /* REDUCE_SCATTER/ALL_GATHER: the output dim; else -1 */
    int64_t bytes;      /* bytes sent per rank (bandwidth-optimal algorithm) */
    int count;          /* how many such collectives (CROSS_ENTROPY: 3) */
} par_comm_op;

typedef struct par_op_cost {
    double compute_flops;  /* per device */
    double comm_bytes;     /* per device: forward comm + mirror (gradient) comm */
    double memory_bytes;   /* per device: input and output slices */
    double total;          /* seconds under the desc's cost model; the sort key */
} par_op_cost;

/* Everything a strategy implies. Layouts live on the device matrix. */
typedef struct par_op_info {
    par_mesh dev_matrix;  /* device matrix, repeated-calculation dim on the right */
    int repeated;         /* size of the repeated-calculation dim (1: none) */
    int num_inputs, num_outputs;
    par_layout inputs[PAR_MAX_INPUTS];
    par_layout outputs[PAR_MAX_OUTPUTS];  /* outputs before forward comm may be partial */
    int num_forward;
    par_comm_op forward[2];               /* forward communication */
    par_comm_op mirror[PAR_MAX_INPUTS];   /* gradient AllReduce for parameter inputs */
    par_op_cost cost;
} par_op_info;

/* Check `strategy` for `op` on a stage of `devices` devices and infer its device
   matrix, tensor maps, forward communication, mirror ops and cost. Errors
   (PAR_ESTRATEGY, PAR_ESHAPE, PAR_EINVAL) name the operator, input, dim, sizes and
   the rule broken. */
PARALLEL_DEF par_status par_op_infer(const par_op_desc *op, const par_strategy *strategy, int devices,
                                     par_op_info *info);

/* Every valid strategy for `op` on `devices` devices (any divisor, not only powers
   of two), cheapest first. Writes min(count, capacity) entries (costs may be
   NULL); *count is the total. PAR_ECAPACITY if capacity was too small (the first
   `capacity` are still the cheapest). */
PARALLEL_DEF par_status par_op_strategies(const par_op_desc *op, int devices, par_strategy *strategies,
                                          par_op_cost *costs, int capacity, int *count);

/* ============================================================================
   >>redistribute
   ========================================================================== */

typedef enum par_redist_kind {
    PAR_REDIST_SPLIT = 0,       /* local: take this rank's chunk along tensor_dim */
    PAR_REDIST_ALL_GATHER,      /* concatenate along tensor_dim over device_dim */
    PAR_REDIST_ALL_TO_ALL,      /* move device_dim from tensor_dim to to_dim */
    PAR_REDIST_ALL_REDUCE,      /* sum partials over device_dim */
    PAR_REDIST_REDUCE_SCATTER,  /* sum partials over device_dim, keep chunk of tensor_dim */
    PAR_REDIST_RESHAPE          /* local reinterpretation to the target shape */
} par_redist_kind;

/* "split", "all_gather", "all_to_all", "all_reduce", "reduce_scatter", "reshape". */
PARALLEL_DEF const char *par_redist_kind_name(par_redist_kind kind);

typedef struct par_redist_op {
    par_redist_kind kind;
    int tensor_dim;       /* -1 for all_reduce and reshape */
    int to_dim;           /* all_to_all: destination tensor dim; else -1 */
    int device_dim;       /* counted from the right; -1 for reshape */
    int group;            /* group size (1 for reshape) */
    int64_t bytes_sent;   /* per rank, slice of B bytes before the op: all_gather (n-1)B,
                             all_to_all and reduce_scatter (n-1)/n B, all_reduce
                             2(n-1)/n B rounded down */
    int64_t bytes_recv;   /* per rank; equal to bytes_sent for these algorithms */
    double cost;          /* under the plan's cost model */
    int on_to_shape;      /* the layout after this op has the target shape */
    par_tensor_map after; /* tensor map after this op */
} par_redist_op;

/* Alpha-beta cost of one collective on a device dim: latency + bytes / bandwidth. */
typedef struct par_link {
    double latency;    /* default 0 */
    double bandwidth;  /* bytes per unit time; 0 = default 1 (cost = bytes) */
} par_link;

/* Per device dim (counted from the right, like tensor maps). A NULL model or
   zero fields give the default: cost = bytes sent per rank, f32 elements.
   Layouts carry no dtype, so the element size for byte counts lives here.
   Negative or non-finite values are PAR_EINVAL. */
typedef struct par_cost_model {
    par_link link[PARALLEL_MAX_DIMS];
    int elem_size;     /* bytes per element; 0 = default 4 (f32) */
} par_cost_model;

#define PAR_MAX_PLAN_OPS 48

typedef struct par_plan {
    par_layout from, to;
    int num_ops;
    par_redist_op ops[PAR_MAX_PLAN_OPS];
    double cost;             /* sum of the ops' costs */
    double lower_bound;      /* admissible lower bound the search started from */
    int64_t total_bytes;     /* sum of bytes_sent over the ops (per rank) */
    int64_t max_local_numel; /* largest local slice any step holds */
    int greedy;              /* 1 if made by par_plan_greedy */
} par_plan;

/* Planner: reusable search workspace plus a plan cache. Not thread-safe: one per
   thread (planning is microseconds, so there is little to share). */
typedef struct par_planner par_planner;

typedef struct par_planner_desc {
    int cache_entries;  /* plans kept (LRU); default 64; -1 disables the cache */
    int max_states;     /* search states before PAR_ECAPACITY; default 1<<16 */
} par_planner_desc;

PARALLEL_DEF par_status par_planner_create(const par_planner_desc *desc, par_planner **planner);
PARALLEL_DEF void par_planner_destroy(par_planner *planner);

/* The cheapest plan turning `from` into `to` (same mesh; shapes equal, or equal in
   element count when a local reshape can bridge them). Optimal under `cost`
   (NULL = bytes) among plans of split, all_gather, all_to_all, all_reduce,
   reduce_scatter and at most one local reshape: A* over (per tensor dim an ordered
   list of device dims, partial set) with an admissible bound. Allocates nothing
   once the planner has warmed up; cached by (from, to, cost). Errors:
   PAR_ELAYOUT (invalid layout), PAR_EINVAL (different meshes, bad cost model),
   PAR_ESHAPE (element counts differ), PAR_EUNSUPPORTED (target partial over a
   dim the source is not), PAR_ECAPACITY (max_states or PAR_MAX_PLAN_OPS). */
PARALLEL_DEF par_status par_planner_plan(par_planner *planner, const par_layout *from, const par_layout *to,
                                         const par_cost_model *cost, par_plan *plan);

/* One-shot: par_planner_plan with a temporary planner. */
PARALLEL_DEF par_status par_plan_redistribution(const par_layout *from, const par_layout *to,
                                                const par_cost_model *cost, par_plan *plan);

/* The MindSpore-style greedy baseline: all_reduce every partial dim, then loop
   split -> all_to_all -> all_gather, forcing an all_gather to break cycles. For
   comparison only: never cheaper than par_planner_plan. Between shapes it
   reshapes last when the target has a source-shape twin that reshapes back to
   it, else first when the source reshapes, else after gathering everything. */
PARALLEL_DEF par_status par_plan_greedy(const par_layout *from, const par_layout *to,
                                        const par_cost_model *cost, par_plan *plan);

/* Layout after op i (i = -1: the source as given; ops' layouts omit device dims
   of size 1, which split nothing). */
PARALLEL_DEF par_status par_plan_layout_after(const par_plan *plan, int i, par_layout *layout);

/* One op per line, "all_to_all tensor_dim=1 to_dim=0 device_dim=0 group=4 bytes=192",
   then "total bytes=N ops=K". Returns the length snprintf would. */
PARALLEL_DEF int par_plan_format(const par_plan *plan, char *buf, size_t size);

/* ============================================================================
   >>simulate
   ========================================================================== */

/* The mesh simulator holds every rank's local buffer as doubles (locals[r] for
   rank r, row-major slice) and executes plans op by op exactly as the collectives
   would, so plans can be tested without a communication backend. */

/* Fill every rank's slice of `layout` from the global tensor `global` (row-major).
   Along partial device dims the values are split into integer-valued parts that
   sum to the global value exactly (global values should be integers). */
PARALLEL_DEF par_status par_sim_scatter(const par_layout *layout, const double *global, double *const *locals);

/* Run `plan` on all ranks' buffers; each must hold plan->max_local_numel doubles. */
PARALLEL_DEF par_status par_sim_run(const par_plan *plan, double *const *locals);

/* 1 if every rank's buffer holds exactly its slice of `global` under `layout`
   (which must not be partial); 0 otherwise, with the first mismatch in
   par_last_error(). */
PARALLEL_DEF int par_sim_matches(const par_layout *layout, const double *global, double *const *locals);

#ifdef __cplusplus
}
#endif

#endif /* PARALLEL_H */

/* ============================================================================
   IMPLEMENTATION
   ========================================================================== */
#ifdef PARALLEL_IMPLEMENTATION
#ifndef PARALLEL_IMPLEMENTATION_DONE
#define PARALLEL_IMPLEMENTATION_DONE

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(PARALLEL_MALLOC) && defined(PARALLEL_REALLOC) && defined(PARALLEL_FREE)
#elif !defined(PARALLEL_MALLOC) && !defined(PARALLEL_REALLOC) && !defined(PARALLEL_FREE)
#define PARALLEL_MALLOC(sz) malloc(sz)
#define PARALLEL_REALLOC(p, sz) realloc(p, sz)
#define PARALLEL_FREE(p) free(p)
#else
#error "parallel.h: define all of PARALLEL_MALLOC, PARALLEL_REALLOC and PARALLEL_FREE, or none"
#endif

#ifndef PARALLEL_ASSERT
#include <assert.h>
#define PARALLEL_ASSERT(x) assert(x)
#endif

#if defined(__cplusplus)
#define PAR__THREAD_LOCAL thread_local
#elif defined(_MSC_VER)
#define PAR__THREAD_LOCAL __declspec(thread)
#else
#define PAR__THREAD_LOCAL _Thread_local
#endif

#ifdef __cplusplus
extern "C" {
#endif

// >>config

static PAR__THREAD_LOCAL char par__error_text[512];

PARALLEL_DEF const char *par_status_string(par_status status) {
    switch (status) {
#define PAR__STATUS_CASE(name, value, text) \
    case name:                              \
        return text;
        PAR_STATUS_LIST(PAR__STATUS_CASE)
#undef PAR__STATUS_CASE
    default:
        return "unknown status";
    }
}

PARALLEL_DEF const char *par_last_error(void) { return par__error_text; }

PARALLEL_DEF void par_clear_error(void) { par__error_text[0] = 0; }

/* Record a failure sentence and return its status: `return par__fail(...)`. */
static PAR__PRINTF(2, 3) par_status par__fail(par_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(par__error_text, sizeof par__error_text, fmt, ap);
    va_end(ap);
    return status;
}

static const char *const par__dtype_names[PAR_DTYPE_COUNT] = {"f32", "bf16", "f16", "i32", "i64", "f64"};
static const size_t par__dtype_sizes[PAR_DTYPE_COUNT] = {4, 2, 2, 4, 8, 8};

PARALLEL_DEF size_t par_dtype_size(par_dtype dtype) {
    return (unsigned)dtype < PAR_DTYPE_COUNT ? par__dtype_sizes[dtype] : 0;
}

PARALLEL_DEF const char *par_dtype_name(par_dtype dtype) {
    return (unsigned)dtype < PAR_DTYPE_COUNT ? par__dtype_names[dtype] : "?";
}

PARALLEL_DEF par_status par_dtype_parse(const char *text, par_dtype *dtype) {
    int i;
    if (!text || !dtype) return par__fail(PAR_EINVAL, "par_dtype_parse: NULL argument");
    for (i = 0; i < PAR_DTYPE_COUNT; i++) {
        if (strcmp(text, par__dtype_names[i]) == 0) {
            *dtype = (par_dtype)i;
            return PAR_OK;
        }
    }
    return par__fail(PAR_EPARSE, "unknown dtype '%.32s' (expected f32, bf16, f16, i32, i64 or f64)", text);
}

/* Small appender used by every *_format function: snprintf semantics over a
   moving cursor, so callers can format piecewise and still report the full length. */
typedef struct par__buf {
    char *p;
    size_t size;
    size_t len;
} par__buf;

static PAR__PRINTF(2, 3) void par__bprintf(par__buf *b, const char *fmt, ...) {
    va_list ap;
    int n;
    char *dst = (b->p && b->len < b->size) ? b->p + b->len : NULL;
    size_t room = (b->p && b->len < b->size) ? b->size - b->len : 0;
    va_start(ap, fmt);
    n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

static void par__buf_init(par__buf *b, char *p, size_t size) {
    b->p = p;
    b->size = p ? size : 0;
    b->len = 0;
    if (p && size) p[0] = 0;
}

// >>mesh

/* True for identifiers usable as axis names in layout text. */
static int par__is_ident(const char *s) {
    size_t i;
    if (!s || !s[0] || !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z'))) return 0;
    for (i = 1; s[i]; i++) {
        char c = s[i];
        if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return 0;
    }
    return 1;
}

/* Largest device count we accept: keeps every rank and group size in an int. */
#define PAR__MAX_DEVICES (1 << 24)

PARALLEL_DEF par_status par_mesh_init(par_mesh *mesh, int ndim, const int *dims, const char *const *names) {
    int i, j;
    int64_t total = 1;
    if (!mesh || !dims) return par__fail(PAR_EINVAL, "par_mesh_init: NULL argument");
    if (ndim < 1 || ndim > PARALLEL_MAX_DIMS)
        return par__fail(PAR_EINVAL, "mesh has %d axes; it needs 1 to %d", ndim, PARALLEL_MAX_DIMS);
    memset(mesh, 0, sizeof *mesh);
    mesh->ndim = ndim;
    for (i = 0; i < ndim; i++) {
        if (dims[i] < 1) return par__fail(PAR_EINVAL, "mesh axis %d has size %d; sizes must be >= 1", i, dims[i]);
        total *= dims[i];
        if (total > PAR__MAX_DEVICES)
            return par__fail(PAR_EINVAL, "mesh has more than %d devices", PAR__MAX_DEVICES);
        mesh->dims[i] = dims[i];
        if (names && names[i] && names[i][0]) {
            if (!par__is_ident(names[i]) || strlen(names[i]) >= PAR_NAME_MAX || strcmp(names[i], "None") == 0)
                return par__fail(PAR_EINVAL,
                                 "mesh axis %d name '%.32s' is not an identifier of at most %d characters "
                                 "(and not 'None')",
                                 i, names[i], PAR_NAME_MAX - 1);
            for (j = 0; j < i; j++)
                if (strcmp(mesh->names[j], names[i]) == 0)
                    return par__fail(PAR_EINVAL, "mesh axes %d and %d are both named '%s'", j, i, names[i]);
            memcpy(mesh->names[i], names[i], strlen(names[i]) + 1);
        }
    }
    return PAR_OK;
}

/* Tiny cursor parser shared by the mesh, layout and strategy text forms. */
typedef struct par__scan {
    const char *text;
    const char *p;
} par__scan;

static void par__skip_space(par__scan *s) {
    while (*s->p == ' ' || *s->p == '\t') s->p++;
}

/* Consume `c` (after spaces) if it is next. */
static int par__accept(par__scan *s, char c) {
    par__skip_space(s);
    if (*s->p != c) return 0;
    s->p++;
    return 1;
}

static int par__scan_pos(const par__scan *s) { return (int)(s->p - s->text); }

/* Optional '-', then digits; rejects overflow past 2^62. */
static int par__scan_int(par__scan *s, int64_t *value) {
    int neg = 0;
    int64_t v = 0;
    par__skip_space(s);
    if (*s->p == '-') {
        neg = 1;
        s->p++;
    }
    if (*s->p < '0' || *s->p > '9') return 0;
    while (*s->p >= '0' && *s->p <= '9') {
        if (v > ((int64_t)1 << 62) / 10) return 0;
        v = v * 10 + (*s->p - '0');
        s->p++;
    }
    *value = neg ? -v : v;
    return 1;
}

/* An identifier into buf (truncated names are rejected). */
static int par__scan_ident(par__scan *s, char *buf, size_t size) {
    size_t n = 0;
    par__skip_space(s);
    if (!(*s->p == '_' || (*s->p >= 'A' && *s->p <= 'Z') || (*s->p >= 'a' && *s->p <= 'z'))) return 0;
    while (*s->p == '_' || (*s->p >= 'A' && *s->p <= 'Z') || (*s->p >= 'a' && *s->p <= 'z') ||
           (*s->p >= '0' && *s->p <= '9')) {
        if (n + 1 >= size) return 0;
        buf[n++] = *s->p++;
    }
    buf[n] = 0;
    return 1;
}

PARALLEL_DEF par_status par_mesh_parse(const char *text, par_mesh *mesh) {
    par__scan s;
    int dims[PARALLEL_MAX_DIMS];
    char names[PARALLEL_MAX_DIMS][PAR_NAME_MAX];
    const char *name_ptrs[PARALLEL_MAX_DIMS];
    int n = 0, named = -1, bracket;
    if (!text || !mesh) return par__fail(PAR_EINVAL, "par_mesh_parse: NULL argument");
    s.text = s.p = text;
    bracket = par__accept(&s, '[');
    do {
        int64_t v;
        int has_name;
        if (n == PARALLEL_MAX_DIMS)
            return par__fail(PAR_EPARSE, "mesh '%.64s': more than %d axes", text, PARALLEL_MAX_DIMS);
        has_name = par__scan_ident(&s, names[n], PAR_NAME_MAX);
        if (named >= 0 && has_name != named)
            return par__fail(PAR_EPARSE, "mesh '%.64s': name every axis or none (position %d)", text,
                             par__scan_pos(&s));
        named = has_name;
        if (has_name && !par__accept(&s, '='))
            return par__fail(PAR_EPARSE, "mesh '%.64s': expected '=' after axis name at position %d", text,
                             par__scan_pos(&s));
        if (!par__scan_int(&s, &v))
            return par__fail(PAR_EPARSE, "mesh '%.64s': expected an axis size at position %d", text,
                             par__scan_pos(&s));
        if (v < 1 || v > PAR__MAX_DEVICES)
            return par__fail(PAR_EPARSE, "mesh '%.64s': axis %d has size %lld; sizes must be 1..%d", text, n,
                             (long long)v, PAR__MAX_DEVICES);
        dims[n] = (int)v;
        name_ptrs[n] = has_name ? names[n] : NULL;
        n++;
    } while (par__accept(&s, ',') || par__accept(&s, 'x'));
    if (bracket && !par__accept(&s, ']'))
        return par__fail(PAR_EPARSE, "mesh '%.64s': expected ']' at position %d", text, par__scan_pos(&s));
    par__skip_space(&s);
    if (*s.p)
        return par__fail(PAR_EPARSE, "mesh '%.64s': unexpected '%c' at position %d", text, *s.p,
                         par__scan_pos(&s));
    return par_mesh_init(mesh, n, dims, name_ptrs);
}

PARALLEL_DEF int par_mesh_format(const par_mesh *mesh, char *buf, size_t size) {
    par__buf b;
    int i;
    par__buf_init(&b, buf, size);
    par__bprintf(&b, "[");
    for (i = 0; mesh && i < mesh->ndim; i++) {
        if (mesh->names[i][0])
            par__bprintf(&b, "%s%s=%d", i ? "," : "", mesh->names[i], mesh->dims[i]);
        else
            par__bprintf(&b, "%s%d", i ? "," : "", mesh->dims[i]);
    }
    par__bprintf(&b, "]");
    return (int)b.len;
}

PARALLEL_DEF int par_mesh_size(const par_mesh *mesh) {
    int64_t n = 1;
    int i;
    if (!mesh || mesh->ndim < 1 || mesh->ndim > PARALLEL_MAX_DIMS) return 0;
    for (i = 0; i < mesh->ndim; i++) {
        if (mesh->dims[i] < 1) return 0;
        n *= mesh->dims[i];
        if (n > PAR__MAX_DEVICES) return 0;
    }
    return (int)n;
}

PARALLEL_DEF int par_mesh_dev_size(const par_mesh *mesh, int dev_dim) {
    if (!mesh || dev_dim < 0 || dev_dim >= mesh->ndim) return 0;
    return mesh->dims[mesh->ndim - 1 - dev_dim];
}

PARALLEL_DEF int par_mesh_dev_dim(const par_mesh *mesh, const char *name) {
    int i;
    if (!mesh || !name || !name[0]) return -1;
    for (i = 0; i < mesh->ndim; i++)
        if (strcmp(mesh->names[i], name) == 0) return mesh->ndim - 1 - i;
    return -1;
}

/* Validate a mesh that may not have come from par_mesh_init (a struct the caller
   filled): axis count, sizes, and a device count that fits an int. */
static par_status par__mesh_check(const par_mesh *mesh) {
    int64_t total = 1;
    int i;
    if (mesh->ndim < 1 || mesh->ndim > PARALLEL_MAX_DIMS)
        return par__fail(PAR_EINVAL, "mesh has %d axes; it needs 1 to %d", mesh->ndim, PARALLEL_MAX_DIMS);
    for (i = 0; i < mesh->ndim; i++) {
        if (mesh->dims[i] < 1) return par__fail(PAR_EINVAL, "mesh axis %d has size %d; sizes must be >= 1", i, mesh->dims[i]);
        total *= mesh->dims[i];
        if (total > PAR__MAX_DEVICES) return par__fail(PAR_EINVAL, "mesh has more than %d devices", PAR__MAX_DEVICES);
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_mesh_coords(const par_mesh *mesh, int rank, int *coords) {
    int i;
    par_status st;
    if (!mesh || !coords) return par__fail(PAR_EINVAL, "par_mesh_coords: NULL argument");
    if ((st = par__mesh_check(mesh)) != PAR_OK) return st;
    if (rank < 0 || rank >= par_mesh_size(mesh))
        return par__fail(PAR_EINVAL, "rank %d is outside the mesh of %d devices", rank, par_mesh_size(mesh));
    for (i = mesh->ndim - 1; i >= 0; i--) {
        coords[i] = rank % mesh->dims[i];
        rank /= mesh->dims[i];
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_mesh_rank(const par_mesh *mesh, const int *coords, int *rank) {
    int i, r = 0;
    if (!mesh || !coords || !rank) return par__fail(PAR_EINVAL, "par_mesh_rank: NULL argument");
    for (i = 0; i < mesh->ndim; i++) {
        if (coords[i] < 0 || coords[i] >= mesh->dims[i])
            return par__fail(PAR_EINVAL, "coordinate %d on mesh axis %d is outside 0..%d", coords[i], i,
                             mesh->dims[i] - 1);
        r = r * mesh->dims[i] + coords[i];
    }
    *rank = r;
    return PAR_OK;
}

PARALLEL_DEF par_status par_mesh_group(const par_mesh *mesh, int rank, uint32_t dev_mask, int *ranks, int *count) {
    int coords[PARALLEL_MAX_DIMS], axes[PARALLEL_MAX_DIMS];
    int i, naxes = 0, n = 1, k;
    par_status st;
    if (!ranks || !count) return par__fail(PAR_EINVAL, "par_mesh_group: NULL argument");
    if ((st = par_mesh_coords(mesh, rank, coords)) != PAR_OK) return st;
    if (dev_mask >> mesh->ndim)
        return par__fail(PAR_EINVAL, "group mask 0x%x names device dims beyond the mesh's %d", (unsigned)dev_mask,
                         mesh->ndim);
    for (i = 0; i < mesh->ndim; i++)
        if (dev_mask & (1u << (mesh->ndim - 1 - i))) {
            axes[naxes++] = i;
            n *= mesh->dims[i];
        }
    /* Member k's coordinates on the grouped axes are k unravelled row-major. */
    for (k = 0; k < n; k++) {
        int rest = k, r = 0;
        for (i = naxes - 1; i >= 0; i--) {
            coords[axes[i]] = rest % mesh->dims[axes[i]];
            rest /= mesh->dims[axes[i]];
        }
        for (i = 0; i < mesh->ndim; i++) r = r * mesh->dims[i] + coords[i];
        ranks[k] = r;
    }
    *count = n;
    return PAR_OK;
}

PARALLEL_DEF par_status par_mesh_sub(const par_mesh *mesh, uint32_t keep_mask, par_mesh *sub) {
    int dims[PARALLEL_MAX_DIMS];
    const char *names[PARALLEL_MAX_DIMS];
    int i, n = 0;
    if (!mesh || !sub) return par__fail(PAR_EINVAL, "par_mesh_sub: NULL argument");
    if (keep_mask >> mesh->ndim || !keep_mask)
        return par__fail(PAR_EINVAL, "sub-mesh mask 0x%x must name 1..%d device dims of the mesh",
                         (unsigned)keep_mask, mesh->ndim);
    for (i = 0; i < mesh->ndim; i++)
        if (keep_mask & (1u << (mesh->ndim - 1 - i))) {
            dims[n] = mesh->dims[i];
            names[n] = mesh->names[i];
            n++;
        }
    return par_mesh_init(sub, n, dims, names);
}

// >>layout

/* Copy mesh and shape into a fresh, replicated layout (validated later). */
static par_status par__layout_begin(par_layout *layout, const par_mesh *mesh, int ndim, const int64_t *shape) {
    int t;
    if (!layout || !mesh || (ndim > 0 && !shape)) return par__fail(PAR_EINVAL, "layout: NULL argument");
    if (ndim < 0 || ndim > PARALLEL_MAX_DIMS)
        return par__fail(PAR_ELAYOUT, "tensor has %d dims; layouts support 0 to %d", ndim, PARALLEL_MAX_DIMS);
    memset(layout, 0, sizeof *layout);
    layout->mesh = *mesh;
    layout->ndim = ndim;
    for (t = 0; t < ndim; t++) layout->shape[t] = shape[t];
    return PAR_OK;
}

PARALLEL_DEF par_status par_layout_check(const par_layout *l) {
    uint32_t used;
    int t, k;
    int64_t numel = 1;
    if (!l) return par__fail(PAR_EINVAL, "par_layout_check: NULL layout");
    if (par__mesh_check(&l->mesh) != PAR_OK) return PAR_ELAYOUT;
    if (l->ndim < 0 || l->ndim > PARALLEL_MAX_DIMS)
        return par__fail(PAR_ELAYOUT, "tensor has %d dims; layouts support 0 to %d", l->ndim, PARALLEL_MAX_DIMS);
    if (l->map.partial >> l->mesh.ndim)
        return par__fail(PAR_ELAYOUT, "partial set 0x%x names device dims beyond the mesh's %d",
                         (unsigned)l->map.partial, l->mesh.ndim);
    used = l->map.partial;
    for (t = 0; t < l->ndim; t++) {
        int64_t shards = 1;
        if (l->shape[t] < 1)
            return par__fail(PAR_ELAYOUT, "tensor dim %d has size %lld; sizes must be >= 1", t, (long long)l->shape[t]);
        if (numel > ((int64_t)1 << 62) / l->shape[t])
            return par__fail(PAR_ELAYOUT, "tensor of shape dims up to %d has more than 2^62 elements", t);
        numel *= l->shape[t];
        if (l->map.count[t] > l->mesh.ndim)
            return par__fail(PAR_ELAYOUT, "tensor dim %d is split by %d device dims; the mesh has %d", t,
                             l->map.count[t], l->mesh.ndim);
        for (k = 0; k < l->map.count[t]; k++) {
            int v = l->map.dev[t][k];
            if (v < 0 || v >= l->mesh.ndim)
                return par__fail(PAR_ELAYOUT, "tensor dim %d: device dim %d is out of range 0..%d (the mesh has %d dims)",
                                 t, v, l->mesh.ndim - 1, l->mesh.ndim);
            if (used & (1u << v))
                return par__fail(PAR_ELAYOUT, "device dim %d is used twice (tensor dim %d and %s)", v, t,
                                 (l->map.partial & (1u << v)) ? "the partial set" : "an earlier entry");
            used |= 1u << v;
            shards *= par_mesh_dev_size(&l->mesh, v);
        }
        if (l->shape[t] % shards != 0)
            return par__fail(PAR_ELAYOUT, "tensor dim %d (size %lld) is not divisible by its shard %lld", t,
                             (long long)l->shape[t], (long long)shards);
    }
    for (t = l->ndim; t < PARALLEL_MAX_DIMS; t++)
        if (l->map.count[t]) return par__fail(PAR_ELAYOUT, "tensor map has entries beyond the tensor's %d dims", l->ndim);
    return PAR_OK;
}

PARALLEL_DEF par_status par_layout_init(par_layout *layout, const par_mesh *mesh, int ndim, const int64_t *shape,
                                        const int *map, uint32_t partial) {
    par_status st;
    int t;
    if ((st = par__layout_begin(layout, mesh, ndim, shape)) != PAR_OK) return st;
    for (t = 0; map && t < ndim; t++) {
        if (map[t] == -1) continue;
        if (map[t] < 0 || map[t] >= mesh->ndim)
            return par__fail(PAR_ELAYOUT, "tensor map entry %d is %d; it must be -1 or a device dim 0..%d", t, map[t],
                             mesh->ndim - 1);
        layout->map.count[t] = 1;
        layout->map.dev[t][0] = (int8_t)map[t];
    }
    layout->map.partial = partial;
    return par_layout_check(layout);
}

/* One device dim of layout text: a number, or an axis name of a named mesh. */
static par_status par__parse_dev_dim(par__scan *s, const par_mesh *mesh, int *dev) {
    char name[PAR_NAME_MAX];
    int64_t v;
    const char *start = s->p;
    par__skip_space(s);
    if (par__scan_ident(s, name, sizeof name)) {
        *dev = par_mesh_dev_dim(mesh, name);
        if (*dev < 0)
            return par__fail(PAR_EPARSE, "layout '%.64s': '%s' at position %d is not an axis name of the mesh", s->text,
                             name, (int)(start - s->text));
        return PAR_OK;
    }
    if (!par__scan_int(s, &v))
        return par__fail(PAR_EPARSE, "layout '%.64s': expected a device dim at position %d", s->text, par__scan_pos(s));
    if (v < 0 || v >= mesh->ndim)
        return par__fail(PAR_ELAYOUT, "layout '%.64s': device dim %lld is out of range 0..%d (the mesh has %d dims)",
                         s->text, (long long)v, mesh->ndim - 1, mesh->ndim);
    *dev = (int)v;
    return PAR_OK;
}

/* "(a,b,...)" of device dims, major first, after the '(' was consumed. */
static par_status par__parse_dev_tuple(par__scan *s, const par_mesh *mesh, int8_t *devs, uint8_t *count) {
    par_status st;
    int d;
    *count = 0;
    do {
        if (*count >= mesh->ndim)
            return par__fail(PAR_ELAYOUT, "layout '%.64s': tuple at position %d has more entries than the mesh's %d dims",
                             s->text, par__scan_pos(s), mesh->ndim);
        if ((st = par__parse_dev_dim(s, mesh, &d)) != PAR_OK) return st;
        devs[(*count)++] = (int8_t)d;
    } while (par__accept(s, ','));
    if (!par__accept(s, ')'))
        return par__fail(PAR_EPARSE, "layout '%.64s': expected ',' or ')' at position %d", s->text, par__scan_pos(s));
    return PAR_OK;
}

/* One tensor-map entry: -1, None, a device dim, or a tuple. */
static par_status par__parse_map_entry(par__scan *s, const par_mesh *mesh, int8_t *devs, uint8_t *count) {
    const char *save;
    char name[PAR_NAME_MAX];
    int64_t v;
    int d;
    par_status st;
    *count = 0;
    if (par__accept(s, '(')) return par__parse_dev_tuple(s, mesh, devs, count);
    par__skip_space(s);
    save = s->p;
    if (par__scan_ident(s, name, sizeof name) && strcmp(name, "None") == 0) return PAR_OK;
    s->p = save;
    if (par__scan_int(s, &v) && v == -1) return PAR_OK;
    s->p = save;
    if ((st = par__parse_dev_dim(s, mesh, &d)) != PAR_OK) return st;
    devs[0] = (int8_t)d;
    *count = 1;
    return PAR_OK;
}

PARALLEL_DEF par_status par_layout_parse(par_layout *layout, const par_mesh *mesh, int ndim, const int64_t *shape,
                                         const char *text) {
    par__scan s;
    par_status st;
    int n = 0;
    if (!text) return par__fail(PAR_EINVAL, "par_layout_parse: NULL text");
    if ((st = par__layout_begin(layout, mesh, ndim, shape)) != PAR_OK) return st;
    s.text = s.p = text;
    if (!par__accept(&s, '[')) return par__fail(PAR_EPARSE, "layout '%.64s': expected '[' at position %d", text, par__scan_pos(&s));
    if (!par__accept(&s, ']')) {
        do {
            if (n >= ndim)
                return par__fail(PAR_ELAYOUT, "layout '%.64s' has more entries than the tensor's %d dims", text, ndim);
            if ((st = par__parse_map_entry(&s, mesh, layout->map.dev[n], &layout->map.count[n])) != PAR_OK) return st;
            n++;
        } while (par__accept(&s, ','));
        if (!par__accept(&s, ']'))
            return par__fail(PAR_EPARSE, "layout '%.64s': expected ',' or ']' at position %d", text, par__scan_pos(&s));
    }
    if (n != ndim)
        return par__fail(PAR_ELAYOUT, "layout '%.64s' has %d entries; the tensor has %d dims", text, n, ndim);
    par__skip_space(&s);
    if (strncmp(s.p, "partial", 7) == 0) {
        int8_t devs[PARALLEL_MAX_DIMS];
        uint8_t count = 0, k;
        int d;
        s.p += 7;
        if (!par__accept(&s, '='))
            return par__fail(PAR_EPARSE, "layout '%.64s': expected '=' after 'partial' at position %d", text, par__scan_pos(&s));
        if (par__accept(&s, '(')) {
            if ((st = par__parse_dev_tuple(&s, mesh, devs, &count)) != PAR_OK) return st;
        } else {
            if ((st = par__parse_dev_dim(&s, mesh, &d)) != PAR_OK) return st;
            devs[0] = (int8_t)d;
            count = 1;
        }
        for (k = 0; k < count; k++) {
            if (layout->map.partial & (1u << devs[k]))
                return par__fail(PAR_ELAYOUT, "layout '%.64s': device dim %d is listed twice in the partial set", text, devs[k]);
            layout->map.partial |= 1u << devs[k];
        }
    }
    par__skip_space(&s);
    if (*s.p) return par__fail(PAR_EPARSE, "layout '%.64s': unexpected '%c' at position %d", text, *s.p, par__scan_pos(&s));
    return par_layout_check(layout);
}

/* Write a tensor map and partial set as layout text. */
static void par__format_map(par__buf *b, int ndim, const par_tensor_map *map, int mesh_ndim) {
    int t, k, first = 1;
    par__bprintf(b, "[");
    for (t = 0; t < ndim; t++) {
        if (t) par__bprintf(b, ",");
        if (map->count[t] == 0)
            par__bprintf(b, "-1");
        else if (map->count[t] == 1)
            par__bprintf(b, "%d", map->dev[t][0]);
        else {
            par__bprintf(b, "(");
            for (k = 0; k < map->count[t]; k++) par__bprintf(b, "%s%d", k ? "," : "", map->dev[t][k]);
            par__bprintf(b, ")");
        }
    }
    par__bprintf(b, "]");
    if (!map->partial) return;
    t = 0;
    for (k = mesh_ndim - 1; k >= 0; k--)
        if (map->partial & (1u << k)) t++;
    par__bprintf(b, " partial=%s", t > 1 ? "(" : "");
    for (k = mesh_ndim - 1; k >= 0; k--)
        if (map->partial & (1u << k)) {
            par__bprintf(b, "%s%d", first ? "" : ",", k);
            first = 0;
        }
    if (t > 1) par__bprintf(b, ")");
}

PARALLEL_DEF int par_layout_format(const par_layout *layout, char *buf, size_t size) {
    par__buf b;
    par__buf_init(&b, buf, size);
    if (layout) par__format_map(&b, layout->ndim, &layout->map, layout->mesh.ndim);
    return (int)b.len;
}

PARALLEL_DEF int64_t par_layout_shards(const par_layout *layout, int tensor_dim) {
    int64_t n = 1;
    int k;
    if (!layout || tensor_dim < 0 || tensor_dim >= layout->ndim) return 1;
    for (k = 0; k < layout->map.count[tensor_dim]; k++) n *= par_mesh_dev_size(&layout->mesh, layout->map.dev[tensor_dim][k]);
    return n;
}

PARALLEL_DEF void par_layout_local_shape(const par_layout *layout, int64_t *local_shape) {
    int t;
    for (t = 0; t < layout->ndim; t++) local_shape[t] = layout->shape[t] / par_layout_shards(layout, t);
}

PARALLEL_DEF int64_t par_layout_local_numel(const par_layout *layout) {
    int64_t n = 1;
    int t;
    for (t = 0; t < layout->ndim; t++) n *= layout->shape[t] / par_layout_shards(layout, t);
    return n;
}

PARALLEL_DEF par_status par_layout_local_offset(const par_layout *layout, int rank, int64_t *offset) {
    int coords[PARALLEL_MAX_DIMS];
    int t, k;
    par_status st;
    if (!layout || !offset) return par__fail(PAR_EINVAL, "par_layout_local_offset: NULL argument");
    if ((st = par_mesh_coords(&layout->mesh, rank, coords)) != PAR_OK) return st;
    for (t = 0; t < layout->ndim; t++) {
        int64_t index = 0;
        for (k = 0; k < layout->map.count[t]; k++) {
            int v = layout->map.dev[t][k];
            index = index * par_mesh_dev_size(&layout->mesh, v) + coords[layout->mesh.ndim - 1 - v];
        }
        offset[t] = index * (layout->shape[t] / par_layout_shards(layout, t));
    }
    return PAR_OK;
}

PARALLEL_DEF uint32_t par_layout_split_dims(const par_layout *layout) {
    uint32_t mask = 0;
    int t, k;
    for (t = 0; t < layout->ndim; t++)
        for (k = 0; k < layout->map.count[t]; k++) mask |= 1u << layout->map.dev[t][k];
    return mask;
}

PARALLEL_DEF par_status par_layout_replica_group(const par_layout *layout, int rank, int *ranks, int *count) {
    uint32_t all, mask;
    if (!layout) return par__fail(PAR_EINVAL, "par_layout_replica_group: NULL layout");
    all = (layout->mesh.ndim >= 32) ? 0xffffffffu : ((1u << layout->mesh.ndim) - 1);
    mask = all & ~(par_layout_split_dims(layout) | layout->map.partial);
    return par_mesh_group(&layout->mesh, rank, mask, ranks, count);
}

/* The tensor map with size-1 device dims removed (they split nothing). */
static par_tensor_map par__map_without_unit_dims(const par_layout *l) {
    par_tensor_map m;
    int t, k, v;
    memset(&m, 0, sizeof m);
    for (t = 0; t < l->ndim; t++)
        for (k = 0; k < l->map.count[t]; k++)
            if (par_mesh_dev_size(&l->mesh, l->map.dev[t][k]) > 1) m.dev[t][m.count[t]++] = l->map.dev[t][k];
    for (v = 0; v < l->mesh.ndim; v++)
        if ((l->map.partial & (1u << v)) && par_mesh_dev_size(&l->mesh, v) > 1) m.partial |= 1u << v;
    return m;
}

static int par__map_equal(const par_tensor_map *a, const par_tensor_map *b, int ndim) {
    int t;
    if (a->partial != b->partial) return 0;
    for (t = 0; t < ndim; t++)
        if (a->count[t] != b->count[t] || memcmp(a->dev[t], b->dev[t], a->count[t]) != 0) return 0;
    return 1;
}

static int par__mesh_same_shape(const par_mesh *a, const par_mesh *b) {
    return a->ndim == b->ndim && memcmp(a->dims, b->dims, sizeof(int) * (size_t)a->ndim) == 0;
}

PARALLEL_DEF int par_layout_equal(const par_layout *a, const par_layout *b) {
    par_tensor_map ma, mb;
    if (!a || !b || a->ndim != b->ndim || !par__mesh_same_shape(&a->mesh, &b->mesh)) return 0;
    if (a->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) != 0) return 0;
    ma = par__map_without_unit_dims(a);
    mb = par__map_without_unit_dims(b);
    return par__map_equal(&ma, &mb, a->ndim);
}

PARALLEL_DEF par_status par_layout_to_placements(const par_layout *layout, par_placement *placements) {
    int t, k, i, n;
    par_status st;
    if (!layout || !placements) return par__fail(PAR_EINVAL, "par_layout_to_placements: NULL argument");
    if ((st = par_layout_check(layout)) != PAR_OK) return st;
    n = layout->mesh.ndim;
    for (i = 0; i < n; i++) {
        placements[i].kind = (layout->map.partial & (1u << (n - 1 - i))) ? PAR_PARTIAL : PAR_REPLICATE;
        placements[i].dim = -1;
    }
    for (t = 0; t < layout->ndim; t++)
        for (k = 0; k < layout->map.count[t]; k++) {
            int v = layout->map.dev[t][k];
            if (k > 0 && v > layout->map.dev[t][k - 1])
                return par__fail(PAR_EUNSUPPORTED,
                                 "tensor dim %d is split by device dims in the order (%d,%d): DTensor placements "
                                 "shard in mesh-axis order, which is (%d,%d)",
                                 t, layout->map.dev[t][k - 1], v, v, layout->map.dev[t][k - 1]);
            placements[n - 1 - v].kind = PAR_SHARD;
            placements[n - 1 - v].dim = t;
        }
    return PAR_OK;
}

PARALLEL_DEF par_status par_layout_from_placements(par_layout *layout, const par_mesh *mesh, int ndim,
                                                   const int64_t *shape, const par_placement *placements) {
    par_status st;
    int i;
    if (!placements) return par__fail(PAR_EINVAL, "par_layout_from_placements: NULL placements");
    if ((st = par__layout_begin(layout, mesh, ndim, shape)) != PAR_OK) return st;
    for (i = 0; i < mesh->ndim; i++) {
        int v = mesh->ndim - 1 - i;
        switch (placements[i].kind) {
        case PAR_REPLICATE:
            break;
        case PAR_PARTIAL:
            layout->map.partial |= 1u << v;
            break;
        case PAR_SHARD: {
            int t = placements[i].dim;
            if (t < 0 || t >= ndim)
                return par__fail(PAR_ELAYOUT, "placement of mesh axis %d is Shard(%d); the tensor has %d dims", i, t, ndim);
            layout->map.dev[t][layout->map.count[t]++] = (int8_t)v;
            break;
        }
        default:
            return par__fail(PAR_EINVAL, "placement of mesh axis %d has unknown kind %d", i, (int)placements[i].kind);
        }
    }
    return par_layout_check(layout);
}

PARALLEL_DEF int par_placements_format(const par_placement *placements, int count, char *buf, size_t size) {
    par__buf b;
    int i;
    par__buf_init(&b, buf, size);
    par__bprintf(&b, "(");
    for (i = 0; placements && i < count; i++) {
        const char *sep = i ? ", " : "";
        if (placements[i].kind == PAR_SHARD)
            par__bprintf(&b, "%sShard(%d)", sep, placements[i].dim);
        else
            par__bprintf(&b, "%s%s", sep, placements[i].kind == PAR_PARTIAL ? "Partial()" : "Replicate()");
    }
    par__bprintf(&b, ")");
    return (int)b.len;
}

/* Reshape works group by group: maximal runs of old dims and new dims with equal
   element counts. Within a group a rank's slice is one contiguous run of the
   flattened group exactly when every dim more major than the most minor split dim
   has local extent 1; the run is then cut by the group's device dims in order
   (major first), and the new dims can express that cut when each device dim's
   size divides the remaining extent of the new dim it lands in. */
static par_status par__reshape_group(const par_layout *from, int o0, int o1, par_layout *to, int n0, int n1) {
    int8_t devs[PARALLEL_MAX_DIMS];
    int ndev = 0, t, k, last_split = -1;
    int64_t rest;
    for (t = o0; t < o1; t++)
        if (from->map.count[t] && par_layout_shards(from, t) > 1) last_split = t;
    for (t = o0; t < last_split; t++)
        if (from->shape[t] / par_layout_shards(from, t) != 1)
            return par__fail(PAR_EUNSUPPORTED,
                             "reshape is not local: dim %d (size %lld, local %lld) lies before split dim %d, so each "
                             "rank's slice is not contiguous in the merged dims %d..%d",
                             t, (long long)from->shape[t], (long long)(from->shape[t] / par_layout_shards(from, t)),
                             last_split, o0, o1 - 1);
    for (t = o0; t < o1; t++)
        for (k = 0; k < from->map.count[t]; k++)
            if (par_mesh_dev_size(&from->mesh, from->map.dev[t][k]) > 1) devs[ndev++] = from->map.dev[t][k];
    t = n0;
    rest = n0 < n1 ? to->shape[n0] : 1;
    for (k = 0; k < ndev; k++) {
        int size = par_mesh_dev_size(&from->mesh, devs[k]);
        while (rest == 1 && t + 1 < n1) rest = to->shape[++t];
        if (t >= n1 || rest % size != 0)
            return par__fail(PAR_EUNSUPPORTED,
                             "reshape is not local: device dim %d (size %d) would have to split new dim %d "
                             "(remaining extent %lld) across a dim boundary",
                             devs[k], size, t < n1 ? t : n1 - 1, (long long)rest);
        to->map.dev[t][to->map.count[t]++] = devs[k];
        rest /= size;
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_layout_reshape(const par_layout *from, int ndim, const int64_t *shape, par_layout *to) {
    int64_t old_numel = 1, new_numel = 1, po, pn;
    int o, n, o0, n0, t;
    par_status st;
    if (!from || !to) return par__fail(PAR_EINVAL, "par_layout_reshape: NULL argument");
    if ((st = par_layout_check(from)) != PAR_OK) return st;
    if ((st = par__layout_begin(to, &from->mesh, ndim, shape)) != PAR_OK) return st;
    for (t = 0; t < ndim; t++) {
        if (shape[t] < 1) return par__fail(PAR_ESHAPE, "reshape target dim %d has size %lld", t, (long long)shape[t]);
        if (new_numel > ((int64_t)1 << 62) / shape[t]) return par__fail(PAR_ESHAPE, "reshape target has more than 2^62 elements");
        new_numel *= shape[t];
    }
    for (t = 0; t < from->ndim; t++) old_numel *= from->shape[t];
    if (old_numel != new_numel)
        return par__fail(PAR_ESHAPE, "reshape from %lld elements to %lld elements", (long long)old_numel, (long long)new_numel);
    to->map.partial = from->map.partial;
    o = n = 0;
    while (o < from->ndim || n < ndim) {
        o0 = o;
        n0 = n;
        po = o < from->ndim ? from->shape[o++] : 1;
        pn = n < ndim ? shape[n++] : 1;
        while (po != pn) {
            if (po < pn) po *= from->shape[o++];
            else pn *= shape[n++];
        }
        /* Trailing size-1 dims join the group so nothing is left over. */
        if (o < from->ndim && n >= ndim) while (o < from->ndim) o++;
        if (n < ndim && o >= from->ndim) while (n < ndim) n++;
        if ((st = par__reshape_group(from, o0, o, to, n0, n)) != PAR_OK) return st;
    }
    return par_layout_check(to);
}

// >>strategy
/*    Every operator is described by a "spec": its iteration space (the dims of the
   device matrix before the repeated-calculation dim, MindSpore's dev_matrix_shape)
   and, for every tensor dim, the iteration dim it walks. A strategy then assigns
   one shard count per iteration dim; checking, tensor maps, forward comm, mirror
   ops, cost and enumeration are written once against the spec. */

/* ---- names ---------------------------------------------------------------- */

static const char *const par__st_op_names[PAR_OP_COUNT] = {
    "matmul",        "batch_matmul", "elementwise", "rmsnorm",         "layernorm",  "softmax",    "gather",
    "cross_entropy", "reshape",      "transpose",   "flash_attention", "reduce_sum", "reduce_mean"};

typedef struct par__st_alias {
    const char *name;
    par_op_kind kind;
} par__st_alias;

/* MindSpore's primitive names (compared case-insensitively, like ours). */
static const par__st_alias par__st_op_aliases[] = {
    {"MatMul", PAR_OP_MATMUL},
    {"BatchMatMul", PAR_OP_BATCH_MATMUL},
    {"Add", PAR_OP_ELEMENTWISE},
    {"Mul", PAR_OP_ELEMENTWISE},
    {"RmsNorm", PAR_OP_RMSNORM},
    {"LayerNorm", PAR_OP_LAYERNORM},
    {"Softmax", PAR_OP_SOFTMAX},
    {"Gather", PAR_OP_GATHER},
    {"SoftmaxCrossEntropyWithLogits", PAR_OP_CROSS_ENTROPY},
    {"Reshape", PAR_OP_RESHAPE},
    {"Transpose", PAR_OP_TRANSPOSE},
    {"FlashAttentionScore", PAR_OP_FLASH_ATTENTION},
    {"ReduceSum", PAR_OP_REDUCE_SUM},
    {"ReduceMean", PAR_OP_REDUCE_MEAN},
};

/* Inputs each operator takes (ELEMENTWISE: the default of its 1..4). */
static const int par__st_natural_inputs[PAR_OP_COUNT] = {2, 2, 2, 2, 3, 1, 2, 2, 1, 1, 3, 1, 1};

static const char *const par__st_comm_names[] = {"none", "all_reduce", "all_gather", "reduce_scatter", "all_to_all"};

PARALLEL_DEF const char *par_op_kind_name(par_op_kind kind) {
    return (unsigned)kind < PAR_OP_COUNT ? par__st_op_names[kind] : "?";
}

PARALLEL_DEF const char *par_comm_kind_name(par_comm_kind kind) {
    return (unsigned)kind <= (unsigned)PAR_COMM_ALL_TO_ALL ? par__st_comm_names[kind] : "?";
}

static int par__st_iequal(const char *a, const char *b) {
    for (;; a++, b++) {
        char x = (*a >= 'A' && *a <= 'Z') ? (char)(*a - 'A' + 'a') : *a;
        char y = (*b >= 'A' && *b <= 'Z') ? (char)(*b - 'A' + 'a') : *b;
        if (x != y) return 0;
        if (!x) return 1;
    }
}

PARALLEL_DEF par_status par_op_kind_parse(const char *text, par_op_kind *kind) {
    size_t i;
    if (!text || !kind) return par__fail(PAR_EINVAL, "par_op_kind_parse: NULL argument");
    for (i = 0; i < (size_t)PAR_OP_COUNT; i++)
        if (par__st_iequal(text, par__st_op_names[i])) {
            *kind = (par_op_kind)i;
            return PAR_OK;
        }
    for (i = 0; i < sizeof par__st_op_aliases / sizeof par__st_op_aliases[0]; i++)
        if (par__st_iequal(text, par__st_op_aliases[i].name)) {
            *kind = par__st_op_aliases[i].kind;
            return PAR_OK;
        }
    return par__fail(PAR_EPARSE,
                     "unknown operator '%.32s' (expected matmul, batch_matmul, elementwise, rmsnorm, layernorm, "
                     "softmax, gather, cross_entropy, reshape, transpose, flash_attention, reduce_sum, reduce_mean "
                     "or a MindSpore name such as MatMul)",
                     text);
}

/* ---- strategy text ---------------------------------------------------------- */

/* The error for a missing token: where, what was expected, what is there. */
static par_status par__st_expected(par__scan *s, const char *what) {
    par__skip_space(s);
    if (!*s->p)
        return par__fail(PAR_EPARSE, "strategy '%.64s': expected %s at position %d, found the end of the text", s->text,
                         what, par__scan_pos(s));
    return par__fail(PAR_EPARSE, "strategy '%.64s': expected %s at position %d, found '%c'", s->text, what,
                     par__scan_pos(s), *s->p);
}

/* 1 if `c` comes next (after spaces); consumes nothing. */
static int par__st_peek(par__scan *s, char c) {
    par__skip_space(s);
    return *s->p == c;
}

/* One shard: an integer; non-positive values parse but are not shards. */
static par_status par__st_parse_shard(par__scan *s, int input, int dim, int64_t *shard) {
    const char *start;
    par__skip_space(s);
    start = s->p;
    if (!par__scan_int(s, shard)) {
        if (*start == '-') start++;
        if (*start >= '0' && *start <= '9')
            return par__fail(PAR_EPARSE, "strategy '%.64s': the number at position %d is too large", s->text,
                             (int)(start - s->text));
        s->p = start;
        return par__st_expected(s, "a shard (a positive integer)");
    }
    if (*shard < 1)
        return par__fail(PAR_ESTRATEGY,
                         "strategy '%.64s': input %d dim %d has shard %lld; shards must be positive integers", s->text,
                         input, dim, (long long)*shard);
    return PAR_OK;
}

/* "(2,1)", "(8,)" or "()" for one input; Python's trailing comma is optional. */
static par_status par__st_parse_tuple(par__scan *s, int input, par_strategy *st) {
    par_status status;
    if (!par__accept(s, '(')) return par__st_expected(s, "'(' opening the shard tuple of input");
    st->ndim[input] = 0;
    while (!par__accept(s, ')')) {
        if (st->ndim[input] == PARALLEL_MAX_DIMS)
            return par__fail(PAR_EPARSE, "strategy '%.64s': input %d has more than %d shards (position %d)", s->text,
                             input, PARALLEL_MAX_DIMS, par__scan_pos(s));
        status = par__st_parse_shard(s, input, st->ndim[input], &st->shard[input][st->ndim[input]]);
        if (status != PAR_OK) return status;
        st->ndim[input]++;
        if (!par__accept(s, ',') && !par__st_peek(s, ')')) return par__st_expected(s, "',' or ')'");
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_strategy_parse(const char *text, par_strategy *strategy) {
    par_strategy st;
    par__scan s;
    par_status status;
    if (!text || !strategy) return par__fail(PAR_EINVAL, "par_strategy_parse: NULL argument");
    memset(&st, 0, sizeof st);
    s.text = s.p = text;
    if (!par__accept(&s, '(')) return par__st_expected(&s, "'(' opening the strategy");
    while (!par__accept(&s, ')')) {
        if (st.num_inputs == PAR_MAX_INPUTS)
            return par__fail(PAR_EPARSE, "strategy '%.64s': more than %d input tuples (position %d)", text,
                             PAR_MAX_INPUTS, par__scan_pos(&s));
        if ((status = par__st_parse_tuple(&s, st.num_inputs, &st)) != PAR_OK) return status;
        st.num_inputs++;
        if (!par__accept(&s, ',') && !par__st_peek(&s, ')')) return par__st_expected(&s, "',' or ')'");
    }
    par__skip_space(&s);
    if (*s.p) return par__st_expected(&s, "the end of the text");
    *strategy = st;
    return PAR_OK;
}

PARALLEL_DEF int par_strategy_format(const par_strategy *strategy, char *buf, size_t size) {
    par__buf b;
    int i, d, n, nd;
    par__buf_init(&b, buf, size);
    n = strategy ? strategy->num_inputs : 0;
    if (n < 0) n = 0;
    if (n > PAR_MAX_INPUTS) n = PAR_MAX_INPUTS;
    par__bprintf(&b, "(");
    for (i = 0; i < n; i++) {
        nd = strategy->ndim[i] < 0 ? 0 : strategy->ndim[i] > PARALLEL_MAX_DIMS ? PARALLEL_MAX_DIMS : strategy->ndim[i];
        par__bprintf(&b, "%s(", i ? "," : "");
        for (d = 0; d < nd; d++) par__bprintf(&b, "%s%lld", d ? "," : "", (long long)strategy->shard[i][d]);
        par__bprintf(&b, "%s)", nd == 1 ? "," : ""); /* (8,) is Python's 1-tuple */
    }
    par__bprintf(&b, "%s)", n == 1 ? "," : "");
    return (int)b.len;
}

/* ---- operator specs ----------------------------------------------------------- */

typedef struct par__st_spec {
    const par_op_desc *op;
    const char *name; /* for messages */
    int num_iter;     /* iteration-space dims */
    int64_t iter_size[PARALLEL_MAX_DIMS];
    char iter_role[PARALLEL_MAX_DIMS][32];     /* "contraction dim": names it in mismatch errors */
    const char *fixed_what[PARALLEL_MAX_DIMS]; /* non-NULL: may not be split ("the softmax axis") */
    const char *fixed_why[PARALLEL_MAX_DIMS];  /* appended to that error */
    int num_inputs;
    int in_iter[PAR_MAX_INPUTS][PARALLEL_MAX_DIMS]; /* iteration dim walked by each input dim */
    uint32_t in_bcast[PAR_MAX_INPUTS];              /* bit d: dim d has size 1 against a larger dim */
    par_dtype in_dtype[PAR_MAX_INPUTS];
    int out_ndim;
    int64_t out_shape[PARALLEL_MAX_DIMS];
    int out_iter[PARALLEL_MAX_DIMS]; /* -1: a kept reduced dim of size 1 */
    par_dtype out_dtype;
    uint32_t reduced; /* iteration dims summed over: split ones leave the output partial */
    int class_dim;    /* CROSS_ENTROPY: iteration dim of the classes, else -1 */
} par__st_spec;

static const char *par__st_plural(int n) { return n == 1 ? "" : "s"; }

static int par__st_lowest_bit(uint32_t mask) {
    int i = 0;
    while (!(mask & (1u << i))) i++;
    return i;
}

/* "[8,6]" into buf (for messages). */
static const char *par__st_dims_text(char *buf, size_t size, int ndim, const int64_t *dims) {
    par__buf b;
    int i;
    par__buf_init(&b, buf, size);
    par__bprintf(&b, "[");
    for (i = 0; i < ndim; i++) par__bprintf(&b, "%s%lld", i ? "," : "", (long long)dims[i]);
    par__bprintf(&b, "]");
    return buf;
}

static int par__st_same_dims(int n, const int64_t *a, const int64_t *b) {
    int i;
    for (i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* Iteration dims = input 0's dims, output = input 0's shape (norms, softmax,
   attention, and the starting point of the other single-input operators). */
static void par__st_iter_like_input0(par__st_spec *s) {
    int d;
    s->num_iter = s->op->ndim[0];
    s->out_ndim = s->op->ndim[0];
    for (d = 0; d < s->num_iter; d++) {
        s->iter_size[d] = s->op->shape[0][d];
        snprintf(s->iter_role[d], sizeof s->iter_role[d], "dim %d", d);
        s->in_iter[0][d] = d;
        s->out_shape[d] = s->op->shape[0][d];
        s->out_iter[d] = d;
    }
}

/* Builders indexing fixed dims exist only where PARALLEL_MAX_DIMS holds them. */
#if PARALLEL_MAX_DIMS >= 3
/* MATMUL and BATCH_MATMUL: iteration space [batch..., M, K, N]. */
static par_status par__st_spec_matmul(par__st_spec *s) {
    const par_op_desc *op = s->op;
    int an = op->ndim[0], bn = op->ndim[1], nb = an - 2, bb = bn - 2, i;
    int a_m, a_k, b_k, b_n; /* which dims of a and b hold M, K, K, N */
    if (op->kind == PAR_OP_MATMUL && (an != 2 || bn != 2))
        return par__fail(PAR_ESHAPE, "%s: inputs must be 2-D (got %d-D and %d-D)", s->name, an, bn);
    if (an < 2 || nb + 3 > PARALLEL_MAX_DIMS)
        return par__fail(PAR_ESHAPE, "%s: input 0 must have 2 to %d dims (got %d)", s->name, PARALLEL_MAX_DIMS - 1, an);
    if (bn != 2 && bn != an)
        return par__fail(PAR_ESHAPE, "%s: input 1 must be 2-D (shared weights) or have input 0's %d dims (got %d)",
                         s->name, an, bn);
    a_m = nb + (op->transpose_a ? 1 : 0);
    a_k = nb + (op->transpose_a ? 0 : 1);
    b_k = bb + (op->transpose_b ? 1 : 0);
    b_n = bb + (op->transpose_b ? 0 : 1);
    if (op->shape[0][a_k] != op->shape[1][b_k])
        return par__fail(PAR_ESHAPE, "%s: contraction sizes differ: input 0 dim %d is %lld, input 1 dim %d is %lld",
                         s->name, a_k, (long long)op->shape[0][a_k], b_k, (long long)op->shape[1][b_k]);
    for (i = 0; i < bb; i++)
        if (op->shape[0][i] != op->shape[1][i])
            return par__fail(PAR_ESHAPE, "%s: batch dim %d differs: %lld in input 0, %lld in input 1", s->name, i,
                             (long long)op->shape[0][i], (long long)op->shape[1][i]);
    s->num_iter = nb + 3;
    s->out_ndim = nb + 2;
    for (i = 0; i < nb; i++) {
        s->iter_size[i] = s->out_shape[i] = op->shape[0][i];
        snprintf(s->iter_role[i], sizeof s->iter_role[i], "batch dim %d", i);
        s->in_iter[0][i] = s->out_iter[i] = i;
        if (i < bb) s->in_iter[1][i] = i;
    }
    s->iter_size[nb] = s->out_shape[nb] = op->shape[0][a_m];
    s->iter_size[nb + 1] = op->shape[0][a_k];
    s->iter_size[nb + 2] = s->out_shape[nb + 1] = op->shape[1][b_n];
    snprintf(s->iter_role[nb], sizeof s->iter_role[nb], "row dim");
    snprintf(s->iter_role[nb + 1], sizeof s->iter_role[nb + 1], "contraction dim");
    snprintf(s->iter_role[nb + 2], sizeof s->iter_role[nb + 2], "column dim");
    s->in_iter[0][a_m] = s->out_iter[nb] = nb;
    s->in_iter[0][a_k] = s->in_iter[1][b_k] = nb + 1;
    s->in_iter[1][b_n] = s->out_iter[nb + 1] = nb + 2;
    s->reduced = 1u << (nb + 1);
    return PAR_OK;
}
#endif

/* ELEMENTWISE: iteration space = the broadcast output, inputs aligned from the right. */
static par_status par__st_spec_elementwise(par__st_spec *s) {
    const par_op_desc *op = s->op;
    int owner_in[PARALLEL_MAX_DIMS], owner_dim[PARALLEL_MAX_DIMS];
    int i, d, j, nd = 0;
    for (i = 0; i < s->num_inputs; i++)
        if (op->ndim[i] > nd) nd = op->ndim[i];
    s->num_iter = s->out_ndim = nd;
    for (j = 0; j < nd; j++) {
        s->iter_size[j] = 1;
        owner_in[j] = owner_dim[j] = 0;
    }
    for (i = 0; i < s->num_inputs; i++)
        for (d = 0; d < op->ndim[i]; d++) {
            int64_t size = op->shape[i][d];
            j = nd - op->ndim[i] + d;
            if (size == 1 || size == s->iter_size[j]) continue;
            if (s->iter_size[j] != 1)
                return par__fail(
                    PAR_ESHAPE,
                    "%s: input %d dim %d (size %lld) does not broadcast against input %d dim %d (size %lld)", s->name,
                    i, d, (long long)size, owner_in[j], owner_dim[j], (long long)s->iter_size[j]);
            s->iter_size[j] = size;
            owner_in[j] = i;
            owner_dim[j] = d;
        }
    for (j = 0; j < nd; j++) {
        s->out_shape[j] = s->iter_size[j];
        s->out_iter[j] = j;
        snprintf(s->iter_role[j], sizeof s->iter_role[j], "output dim %d", j);
    }
    for (i = 0; i < s->num_inputs; i++)
        for (d = 0; d < op->ndim[i]; d++) {
            j = nd - op->ndim[i] + d;
            s->in_iter[i][d] = j;
            if (op->shape[i][d] == 1 && s->iter_size[j] > 1) s->in_bcast[i] |= 1u << d;
        }
    return PAR_OK;
}

/* First normalized dim of RMSNORM/LAYERNORM: desc.axes must be trailing dims. */
static par_status par__st_norm_first_axis(const par__st_spec *s, int *first) {
    int nd = s->op->ndim[0];
    uint32_t all = (1u << nd) - 1, axes = s->op->axes ? s->op->axes : 1u << (nd - 1);
    if (axes & ~all)
        return par__fail(PAR_EINVAL, "%s: axes 0x%x name dims beyond input 0's %d", s->name, (unsigned)axes, nd);
    *first = par__st_lowest_bit(axes);
    if (axes != (all & ~((1u << *first) - 1)))
        return par__fail(PAR_EINVAL, "%s: the normalized axes 0x%x must be the trailing dims of input 0", s->name,
                         (unsigned)axes);
    return PAR_OK;
}

/* RMSNORM (x, gamma), LAYERNORM (x, gamma, beta). */
static par_status par__st_spec_norm(par__st_spec *s) {
    const par_op_desc *op = s->op;
    char got[96], want[96];
    int first = 0, i, d, nd = op->ndim[0];
    par_status status = par__st_norm_first_axis(s, &first);
    if (status != PAR_OK) return status;
    par__st_iter_like_input0(s);
    for (d = first; d < nd; d++) s->fixed_what[d] = "a normalized axis";
    for (i = 1; i < s->num_inputs; i++) {
        if (op->ndim[i] != nd - first || !par__st_same_dims(nd - first, op->shape[i], op->shape[0] + first))
            return par__fail(
                PAR_ESHAPE, "%s: input %d (%s) has shape %s; it must be %s, the normalized dims of input 0", s->name, i,
                i == 1 ? "gamma" : "beta", par__st_dims_text(got, sizeof got, op->ndim[i], op->shape[i]),
                par__st_dims_text(want, sizeof want, nd - first, op->shape[0] + first));
        for (d = 0; d < op->ndim[i]; d++) s->in_iter[i][d] = first + d;
    }
    return PAR_OK;
}

static par_status par__st_spec_softmax(par__st_spec *s) {
    int nd = s->op->ndim[0];
    uint32_t axes = s->op->axes ? s->op->axes : 1u << (nd - 1);
    if ((axes & (axes - 1)) || (axes >> nd))
        return par__fail(PAR_EINVAL, "%s: axes 0x%x must name exactly one of input 0's %d dims", s->name,
                         (unsigned)axes, nd);
    par__st_iter_like_input0(s);
    s->fixed_what[par__st_lowest_bit(axes)] = "the softmax axis";
    return PAR_OK;
}

#if PARALLEL_MAX_DIMS >= 3
/* GATHER: iteration space [indices dims..., V, H]; V split is vocab-parallel. */
static par_status par__st_spec_gather(par__st_spec *s) {
    const par_op_desc *op = s->op;
    int ni = op->ndim[1], d;
    if (op->ndim[0] != 2)
        return par__fail(PAR_ESHAPE, "%s: input 0 (the table) must be 2-D [V,H] (got %d-D)", s->name, op->ndim[0]);
    if (ni + 2 > PARALLEL_MAX_DIMS)
        return par__fail(PAR_ESHAPE, "%s: input 1 (the indices) may have at most %d dims (got %d)", s->name,
                         PARALLEL_MAX_DIMS - 2, ni);
    s->in_dtype[1] = PAR_I32;
    s->num_iter = ni + 2;
    s->out_ndim = ni + 1;
    for (d = 0; d < ni; d++) {
        s->iter_size[d] = s->out_shape[d] = op->shape[1][d];
        snprintf(s->iter_role[d], sizeof s->iter_role[d], "indices dim %d", d);
        s->in_iter[1][d] = s->out_iter[d] = d;
    }
    s->iter_size[ni] = op->shape[0][0];
    s->iter_size[ni + 1] = s->out_shape[ni] = op->shape[0][1];
    snprintf(s->iter_role[ni], sizeof s->iter_role[ni], "vocab dim");
    snprintf(s->iter_role[ni + 1], sizeof s->iter_role[ni + 1], "hidden dim");
    s->in_iter[0][0] = ni;
    s->in_iter[0][1] = s->out_iter[ni] = ni + 1;
    s->reduced = 1u << ni;
    return PAR_OK;
}
#endif

/* CROSS_ENTROPY: iteration space = logits [rows..., C]; labels walk the rows. */
static par_status par__st_spec_cross_entropy(par__st_spec *s) {
    const par_op_desc *op = s->op;
    char got[96], want[96];
    int nd = op->ndim[0], d;
    if (nd < 2)
        return par__fail(PAR_ESHAPE, "%s: input 0 (logits) needs at least 2 dims [...,C] (got %d)", s->name, nd);
    if (op->ndim[1] != nd - 1 || !par__st_same_dims(nd - 1, op->shape[0], op->shape[1]))
        return par__fail(PAR_ESHAPE, "%s: input 1 (labels) has shape %s; it must be %s, the leading dims of input 0",
                         s->name, par__st_dims_text(got, sizeof got, op->ndim[1], op->shape[1]),
                         par__st_dims_text(want, sizeof want, nd - 1, op->shape[0]));
    par__st_iter_like_input0(s);
    s->in_dtype[1] = PAR_I32;
    s->out_ndim = nd - 1;
    for (d = 0; d < nd - 1; d++) {
        snprintf(s->iter_role[d], sizeof s->iter_role[d], "row dim %d", d);
        s->in_iter[1][d] = d;
    }
    snprintf(s->iter_role[nd - 1], sizeof s->iter_role[nd - 1], "class dim");
    s->class_dim = nd - 1;
    return PAR_OK;
}

/* RESHAPE: the output layout comes from par_layout_reshape at infer time. */
static par_status par__st_spec_reshape(par__st_spec *s) {
    const par_op_desc *op = s->op;
    char from[96], to[96];
    int64_t in_numel = 1, out_numel = 1;
    int d;
    if (op->out_ndim < 1 || op->out_ndim > PARALLEL_MAX_DIMS)
        return par__fail(PAR_EINVAL, "%s: out_ndim is %d; it must be 1 to %d", s->name, op->out_ndim,
                         PARALLEL_MAX_DIMS);
    for (d = 0; d < op->out_ndim; d++) {
        if (op->out_shape[d] < 1 || out_numel > ((int64_t)1 << 62) / op->out_shape[d])
            return par__fail(PAR_ESHAPE,
                             "%s: out_shape dim %d has size %lld; sizes must be >= 1 (and 2^62 elements at most)",
                             s->name, d, (long long)op->out_shape[d]);
        out_numel *= op->out_shape[d];
    }
    for (d = 0; d < op->ndim[0]; d++) in_numel *= op->shape[0][d];
    if (in_numel != out_numel)
        return par__fail(PAR_ESHAPE, "%s: cannot reshape %s (%lld elements) to %s (%lld elements)", s->name,
                         par__st_dims_text(from, sizeof from, op->ndim[0], op->shape[0]), (long long)in_numel,
                         par__st_dims_text(to, sizeof to, op->out_ndim, op->out_shape), (long long)out_numel);
    par__st_iter_like_input0(s);
    s->out_ndim = op->out_ndim;
    for (d = 0; d < op->out_ndim; d++) s->out_shape[d] = op->out_shape[d];
    return PAR_OK;
}

static par_status par__st_spec_transpose(par__st_spec *s) {
    int64_t perm[PARALLEL_MAX_DIMS];
    char text[96];
    uint32_t seen = 0;
    int nd = s->op->ndim[0], i, bad = 0;
    for (i = 0; i < nd; i++) {
        int p = s->op->perm[i];
        perm[i] = p;
        if (p < 0 || p >= nd || (seen & (1u << p)))
            bad = 1;
        else
            seen |= 1u << p;
    }
    if (bad)
        return par__fail(PAR_EINVAL, "%s: perm %s is not a permutation of 0..%d", s->name,
                         par__st_dims_text(text, sizeof text, nd, perm), nd - 1);
    par__st_iter_like_input0(s);
    for (i = 0; i < nd; i++) {
        s->out_shape[i] = s->op->shape[0][s->op->perm[i]];
        s->out_iter[i] = s->op->perm[i];
    }
    return PAR_OK;
}

#if PARALLEL_MAX_DIMS >= 4
/* FLASH_ATTENTION: iteration space [B, N, S, D] of q (BNSD); k and v share it. */
static par_status par__st_spec_attention(par__st_spec *s) {
    const par_op_desc *op = s->op;
    char q[96], k[96];
    int i, d;
    for (i = 0; i < 3; i++)
        if (op->ndim[i] != 4)
            return par__fail(PAR_ESHAPE, "%s: q, k and v must be 4-D [B,N,S,D] (input %d is %d-D)", s->name, i,
                             op->ndim[i]);
    if (!par__st_same_dims(4, op->shape[1], op->shape[2]))
        return par__fail(PAR_ESHAPE, "%s: k %s and v %s must have the same shape", s->name,
                         par__st_dims_text(q, sizeof q, 4, op->shape[1]),
                         par__st_dims_text(k, sizeof k, 4, op->shape[2]));
    if (op->shape[0][0] != op->shape[1][0] || op->shape[0][3] != op->shape[1][3])
        return par__fail(PAR_ESHAPE, "%s: q %s and k %s must agree in batch (dim 0) and head size (dim 3)", s->name,
                         par__st_dims_text(q, sizeof q, 4, op->shape[0]),
                         par__st_dims_text(k, sizeof k, 4, op->shape[1]));
    if (op->shape[0][1] % op->shape[1][1] != 0)
        return par__fail(PAR_ESHAPE, "%s: %lld query heads are not a multiple of %lld kv heads (GQA)", s->name,
                         (long long)op->shape[0][1], (long long)op->shape[1][1]);
    par__st_iter_like_input0(s);
    snprintf(s->iter_role[0], sizeof s->iter_role[0], "batch dim");
    snprintf(s->iter_role[1], sizeof s->iter_role[1], "head dim");
    s->fixed_what[2] = "the sequence dim";
    s->fixed_why[2] = ": sequence splits need a context-parallel algorithm (ring, ulysses), not an operator strategy";
    s->fixed_what[3] = "the head-size dim";
    for (i = 1; i < 3; i++)
        for (d = 0; d < 4; d++) s->in_iter[i][d] = d;
    return PAR_OK;
}
#endif

/* REDUCE_SUM / REDUCE_MEAN: reduced dims vanish (or stay as size 1). */
static par_status par__st_spec_reduce(par__st_spec *s) {
    int nd = s->op->ndim[0], d, n = 0;
    uint32_t all = (1u << nd) - 1, axes = s->op->axes ? s->op->axes : all;
    if (axes & ~all)
        return par__fail(PAR_EINVAL, "%s: axes 0x%x name dims beyond input 0's %d", s->name, (unsigned)axes, nd);
    par__st_iter_like_input0(s);
    for (d = 0; d < nd; d++) {
        if (!(axes & (1u << d))) {
            s->out_shape[n] = s->op->shape[0][d];
            s->out_iter[n++] = d;
        } else if (s->op->keep_dims) {
            s->out_shape[n] = 1;
            s->out_iter[n++] = -1;
        }
    }
    s->out_ndim = n;
    s->reduced = axes;
    return PAR_OK;
}

/* Desc checks shared by every operator: kind, input count, dtype, shapes. */
static par_status par__st_check_desc(const par_op_desc *op, const char *name, int *num_inputs) {
    int natural, n, i, d;
    if ((unsigned)op->kind >= PAR_OP_COUNT) return par__fail(PAR_EINVAL, "unknown operator kind %d", (int)op->kind);
    natural = par__st_natural_inputs[op->kind];
    n = op->num_inputs ? op->num_inputs : natural;
    if (op->kind == PAR_OP_ELEMENTWISE ? (n < 1 || n > PAR_MAX_INPUTS) : n != natural)
        return par__fail(PAR_EINVAL, "%s: num_inputs is %d; the operator takes %s%d", name, n,
                         op->kind == PAR_OP_ELEMENTWISE ? "1 to " : "",
                         op->kind == PAR_OP_ELEMENTWISE ? PAR_MAX_INPUTS : natural);
    if (par_dtype_size(op->dtype) == 0)
        return par__fail(PAR_EINVAL, "%s: dtype %d is not an element type", name, (int)op->dtype);
    for (i = 0; i < n; i++) {
        int64_t numel = 1;
        if (op->ndim[i] < 1 || op->ndim[i] > PARALLEL_MAX_DIMS)
            return par__fail(PAR_ESHAPE, "%s: input %d has %d dims; 1 to %d are supported", name, i, op->ndim[i],
                             PARALLEL_MAX_DIMS);
        for (d = 0; d < op->ndim[i]; d++) {
            if (op->shape[i][d] < 1)
                return par__fail(PAR_ESHAPE, "%s: input %d dim %d has size %lld; sizes must be >= 1", name, i, d,
                                 (long long)op->shape[i][d]);
            if (numel > ((int64_t)1 << 62) / op->shape[i][d])
                return par__fail(PAR_ESHAPE, "%s: input %d has more than 2^62 elements", name, i);
            numel *= op->shape[i][d];
        }
    }
    *num_inputs = n;
    return PAR_OK;
}

/* Check the desc and describe the operator's iteration space. */
static par_status par__st_spec_build(const par_op_desc *op, par__st_spec *s) {
    int i, d, n = 0;
    const char *name = op->name ? op->name : par_op_kind_name(op->kind);
    par_status status = par__st_check_desc(op, name, &n);
    if (status != PAR_OK) return status;
    memset(s, 0, sizeof *s);
    s->op = op;
    s->name = name;
    s->num_inputs = n;
    s->out_dtype = op->dtype;
    s->class_dim = -1;
    for (i = 0; i < n; i++) {
        s->in_dtype[i] = op->dtype;
        for (d = 0; d < PARALLEL_MAX_DIMS; d++) s->in_iter[i][d] = -1;
    }
    switch (op->kind) {
#if PARALLEL_MAX_DIMS >= 3
    case PAR_OP_MATMUL:
    case PAR_OP_BATCH_MATMUL:
        return par__st_spec_matmul(s);
#endif
    case PAR_OP_ELEMENTWISE:
        return par__st_spec_elementwise(s);
    case PAR_OP_RMSNORM:
    case PAR_OP_LAYERNORM:
        return par__st_spec_norm(s);
    case PAR_OP_SOFTMAX:
        return par__st_spec_softmax(s);
#if PARALLEL_MAX_DIMS >= 3
    case PAR_OP_GATHER:
        return par__st_spec_gather(s);
#endif
    case PAR_OP_CROSS_ENTROPY:
        return par__st_spec_cross_entropy(s);
    case PAR_OP_RESHAPE:
        return par__st_spec_reshape(s);
    case PAR_OP_TRANSPOSE:
        return par__st_spec_transpose(s);
#if PARALLEL_MAX_DIMS >= 4
    case PAR_OP_FLASH_ATTENTION:
        return par__st_spec_attention(s);
#endif
    case PAR_OP_REDUCE_SUM:
    case PAR_OP_REDUCE_MEAN:
        return par__st_spec_reduce(s);
    default:
        return par__fail(PAR_EUNSUPPORTED, "%s: needs more dims than PARALLEL_MAX_DIMS (%d)", name, PARALLEL_MAX_DIMS);
    }
}

/* ---- strategy checks ---------------------------------------------------------- */

/* a * b for a, b >= 0, saturating at INT64_MAX. */
static int64_t par__st_mul_sat(int64_t a, int64_t b) { return b != 0 && a > INT64_MAX / b ? INT64_MAX : a * b; }

/* Tuple count, tuple lengths and positive shards. */
static par_status par__st_check_form(const par__st_spec *s, const par_strategy *st) {
    int i, d;
    if (st->num_inputs != s->num_inputs)
        return par__fail(PAR_ESTRATEGY, "%s: strategy has %d input%s, the operator takes %d", s->name, st->num_inputs,
                         par__st_plural(st->num_inputs), s->num_inputs);
    for (i = 0; i < s->num_inputs; i++) {
        if (st->ndim[i] != s->op->ndim[i])
            return par__fail(PAR_ESTRATEGY, "%s: input %d strategy has %d entr%s, the input has %d dim%s", s->name, i,
                             st->ndim[i], st->ndim[i] == 1 ? "y" : "ies", s->op->ndim[i],
                             par__st_plural(s->op->ndim[i]));
        for (d = 0; d < st->ndim[i]; d++)
            if (st->shard[i][d] < 1)
                return par__fail(PAR_ESTRATEGY, "%s: input %d dim %d has shard %lld; shards must be positive integers",
                                 s->name, i, d, (long long)st->shard[i][d]);
    }
    return PAR_OK;
}

#if PARALLEL_MAX_DIMS >= 4
/* GQA: k and v heads are split like q's, so the shard must divide the kv heads
   (said specially because "dim 1 is not divisible" hides the reason). */
static par_status par__st_check_kv_heads(const par__st_spec *s, const par_strategy *st) {
    int i;
    for (i = 1; i < 3; i++)
        if (s->op->shape[i][1] % st->shard[i][1] != 0)
            return par__fail(PAR_ESTRATEGY,
                             "%s: input %d (%s) has %lld kv heads, which its head shard %lld does not divide "
                             "(GQA needs kv heads %% shard == 0)",
                             s->name, i, i == 1 ? "k" : "v", (long long)s->op->shape[i][1], (long long)st->shard[i][1]);
    return PAR_OK;
}
#endif

/* Broadcast and fixed dims unsplit, every dim divisible by its shard (in that
   order: the first two name the rule, where divisibility would only name sizes). */
static par_status par__st_check_dims(const par__st_spec *s, const par_strategy *st) {
    int i, d;
    for (i = 0; i < s->num_inputs; i++)
        for (d = 0; d < st->ndim[i]; d++) {
            int64_t size = s->op->shape[i][d], shard = st->shard[i][d];
            int j = s->in_iter[i][d];
            if (shard > 1 && (s->in_bcast[i] & (1u << d)))
                return par__fail(PAR_ESTRATEGY,
                                 "%s: input %d dim %d has size 1 and is broadcast against size %lld, so it may not be "
                                 "split (shard %lld)",
                                 s->name, i, d, (long long)s->iter_size[j], (long long)shard);
            if (shard > 1 && s->fixed_what[j])
                return par__fail(PAR_ESTRATEGY, "%s: input %d dim %d is %s and may not be split (shard %lld)%s",
                                 s->name, i, d, s->fixed_what[j], (long long)shard,
                                 s->fixed_why[j] ? s->fixed_why[j] : "");
            if (size % shard != 0)
                return par__fail(PAR_ESTRATEGY, "%s: input %d dim %d (size %lld) is not divisible by its shard %lld",
                                 s->name, i, d, (long long)size, (long long)shard);
        }
    return PAR_OK;
}

/* The shard of every iteration dim; all input dims walking it must agree. */
static par_status par__st_iter_shards(const par__st_spec *s, const par_strategy *st, int64_t *shards) {
    int from_in[PARALLEL_MAX_DIMS], from_dim[PARALLEL_MAX_DIMS];
    int i, d, j;
    for (j = 0; j < s->num_iter; j++) shards[j] = from_in[j] = from_dim[j] = 0;
    for (i = 0; i < s->num_inputs; i++)
        for (d = 0; d < s->op->ndim[i]; d++) {
            j = s->in_iter[i][d];
            if (j < 0 || (s->in_bcast[i] & (1u << d))) continue;
            if (!shards[j]) {
                shards[j] = st->shard[i][d];
                from_in[j] = i;
                from_dim[j] = d;
            } else if (shards[j] != st->shard[i][d]) {
                return par__fail(PAR_ESTRATEGY,
                                 "%s: %s split %lld in input %d dim %d but %lld in input %d dim %d (they must match)",
                                 s->name, s->iter_role[j], (long long)shards[j], from_in[j], from_dim[j],
                                 (long long)st->shard[i][d], i, d);
            }
        }
    for (j = 0; j < s->num_iter; j++) PARALLEL_ASSERT(shards[j] >= 1);
    return PAR_OK;
}

/* Everything about the strategy alone; fills the iteration shards. */
static par_status par__st_check(const par__st_spec *s, const par_strategy *st, int devices, int64_t *shards) {
    int64_t product = 1;
    int j;
    par_status status;
    if ((status = par__st_check_form(s, st)) != PAR_OK) return status;
#if PARALLEL_MAX_DIMS >= 4
    if (s->op->kind == PAR_OP_FLASH_ATTENTION && (status = par__st_check_kv_heads(s, st)) != PAR_OK) return status;
#endif
    if ((status = par__st_check_dims(s, st)) != PAR_OK) return status;
    if ((status = par__st_iter_shards(s, st, shards)) != PAR_OK) return status;
    for (j = 0; j < s->num_iter; j++) product = par__st_mul_sat(product, shards[j]);
    if (product > devices || devices % product != 0)
        return par__fail(PAR_ESTRATEGY, "%s: shards multiply to %lld, which does not divide the %d devices", s->name,
                         (long long)product, devices);
    return PAR_OK;
}

/* ---- inference ------------------------------------------------------------------ */

static par_comm_op par__st_no_comm(void) {
    par_comm_op c;
    memset(&c, 0, sizeof c);
    c.kind = PAR_COMM_NONE;
    c.group = 1;
    c.tensor_dim = -1;
    return c;
}

static par_comm_op par__st_comm(par_comm_kind kind, uint32_t dev_mask, int group, int64_t bytes) {
    par_comm_op c = par__st_no_comm();
    c.kind = kind;
    c.dev_mask = dev_mask;
    c.group = group;
    c.bytes = bytes;
    c.count = 1;
    return c;
}

/* Byte counts saturate rather than wrap: shapes allow 2^62 elements of 8 bytes. */
static int64_t par__st_local_bytes(const par_layout *l, par_dtype dtype) {
    return par__st_mul_sat(par_layout_local_numel(l), (int64_t)par_dtype_size(dtype));
}

/* bytes * num / den, exact unless bytes * num overflows (then off by < num). */
static int64_t par__st_scale(int64_t bytes, int64_t num, int64_t den) {
    if (num == 0 || bytes <= INT64_MAX / num) return bytes * num / den;
    return par__st_mul_sat(bytes / den, num);
}

/* Per-rank bytes of bandwidth-optimal collectives on B bytes (REFERENCES.md). */
static int64_t par__st_all_reduce_bytes(int n, int64_t bytes) { return par__st_scale(bytes, 2 * (n - 1), n); }
static int64_t par__st_reduce_scatter_bytes(int n, int64_t bytes) { return par__st_scale(bytes, n - 1, n); }

/* Device dim of iteration dim j on a device matrix of n dims. */
static int par__st_dev(int n, int j) { return n - 1 - j; }

/* Device dims (bits) of the split iteration dims in `iter_mask`. */
static uint32_t par__st_split_devs(const par_op_info *info, const int64_t *shards, uint32_t iter_mask, int *group) {
    int n = info->dev_matrix.ndim, j;
    uint32_t mask = 0;
    *group = 1;
    for (j = 0; j < n; j++)
        if ((iter_mask & (1u << j)) && shards[j] > 1) {
            mask |= 1u << par__st_dev(n, j);
            *group *= (int)shards[j];
        }
    return mask;
}

/* MindSpore device matrix: the iteration shards, then the repeated dim if any. */
static par_status par__st_dev_matrix(const par__st_spec *s, const int64_t *shards, int devices, par_op_info *info) {
    int dims[PARALLEL_MAX_DIMS];
    int64_t product = 1;
    int j, n;
    for (j = 0; j < s->num_iter; j++) product *= shards[j];
    info->repeated = (int)(devices / product);
    n = s->num_iter + (info->repeated > 1 ? 1 : 0);
    if (n > PARALLEL_MAX_DIMS)
        return par__fail(PAR_EUNSUPPORTED,
                         "%s: the device matrix needs %d dims (%d iteration dims and the repeated one); at most %d are "
                         "supported",
                         s->name, n, s->num_iter, PARALLEL_MAX_DIMS);
    for (j = 0; j < s->num_iter; j++) dims[j] = (int)shards[j];
    if (info->repeated > 1) dims[n - 1] = info->repeated;
    return par_mesh_init(&info->dev_matrix, n, dims, NULL);
}

static par_status par__st_input_layouts(const par__st_spec *s, par_op_info *info) {
    int map[PARALLEL_MAX_DIMS];
    int i, d, n = info->dev_matrix.ndim;
    par_status status;
    info->num_inputs = s->num_inputs;
    for (i = 0; i < s->num_inputs; i++) {
        for (d = 0; d < s->op->ndim[i]; d++)
            map[d] = (s->in_bcast[i] & (1u << d)) ? -1 : par__st_dev(n, s->in_iter[i][d]);
        status = par_layout_init(&info->inputs[i], &info->dev_matrix, s->op->ndim[i], s->op->shape[i], map, 0);
        if (status != PAR_OK) return status;
    }
    return PAR_OK;
}

/* RESHAPE's output: the input layout read in the new shape, if that is local. */
static par_status par__st_reshape_output(const par__st_spec *s, const par_strategy *st, par_op_info *info) {
    char reason[sizeof par__error_text], text[128];
    if (par_layout_reshape(&info->inputs[0], s->out_ndim, s->out_shape, &info->outputs[0]) == PAR_OK) return PAR_OK;
    memcpy(reason, par_last_error(), sizeof reason);
    par_strategy_format(st, text, sizeof text);
    return par__fail(PAR_ESTRATEGY, "%s: strategy %s would need data movement for this reshape (%s)", s->name, text,
                     reason);
}

/* Megatron's sequence-parallel exit: instead of all-reducing the partial output,
   reduce-scatter it along dim 0, whose split then gains the partial device dims
   (minor to any existing split, as each rank scatters its own slice). */
static par_status par__st_scatter_output(const par__st_spec *s, uint32_t partial, int group, par_layout *out) {
    int64_t shard0;
    int v;
    if (out->ndim < 1)
        return par__fail(PAR_ESTRATEGY, "%s: reduce_scatter needs an output with at least one dim", s->name);
    shard0 = par_layout_shards(out, 0);
    if (out->shape[0] % (shard0 * group) != 0)
        return par__fail(PAR_ESTRATEGY,
                         "%s: reduce_scatter splits output dim 0 (size %lld, already split %lld way%s) %d more ways, "
                         "which does not divide it",
                         s->name, (long long)out->shape[0], (long long)shard0, shard0 == 1 ? "" : "s", group);
    for (v = PARALLEL_MAX_DIMS - 1; v >= 0; v--)
        if (partial & (1u << v)) out->map.dev[0][out->map.count[0]++] = (int8_t)v;
    out->map.partial = 0;
    return par_layout_check(out);
}

/* Output layout and the forward collective that completes it. */
static par_status par__st_output(const par__st_spec *s, const par_strategy *st, const int64_t *shards,
                                 par_op_info *info) {
    int map[PARALLEL_MAX_DIMS];
    int d, group, n = info->dev_matrix.ndim;
    uint32_t partial = par__st_split_devs(info, shards, s->reduced, &group);
    int64_t bytes;
    par_status status;
    info->num_outputs = 1;
    if (s->op->kind == PAR_OP_RESHAPE) return par__st_reshape_output(s, st, info);
    for (d = 0; d < s->out_ndim; d++) map[d] = s->out_iter[d] < 0 ? -1 : par__st_dev(n, s->out_iter[d]);
    status = par_layout_init(&info->outputs[0], &info->dev_matrix, s->out_ndim, s->out_shape, map, partial);
    if (status != PAR_OK) return status;
    bytes = par__st_local_bytes(&info->outputs[0], s->out_dtype);
    if (s->class_dim >= 0 && shards[s->class_dim] > 1) {
        /* vocab-parallel loss: all-reduce the row max, the sum of exps and the target logit (f32 each) */
        partial = par__st_split_devs(info, shards, 1u << s->class_dim, &group);
        info->forward[0] =
            par__st_comm(PAR_COMM_ALL_REDUCE, partial, group,
                         par__st_all_reduce_bytes(group, par__st_local_bytes(&info->outputs[0], PAR_F32)));
        info->forward[0].count = 3;
        info->num_forward = 1;
    } else if (partial && s->op->reduce_scatter) {
        info->forward[0] =
            par__st_comm(PAR_COMM_REDUCE_SCATTER, partial, group, par__st_reduce_scatter_bytes(group, bytes));
        info->forward[0].tensor_dim = 0;
        info->num_forward = 1;
        return par__st_scatter_output(s, partial, group, &info->outputs[0]);
    } else if (partial) {
        info->forward[0] = par__st_comm(PAR_COMM_ALL_REDUCE, partial, group, par__st_all_reduce_bytes(group, bytes));
        info->num_forward = 1;
    }
    return PAR_OK;
}

/* A parameter's gradient is summed over the devices holding the same slice:
   the device dims its map does not use (the repeated dim included). */
static void par__st_mirrors(const par__st_spec *s, par_op_info *info) {
    int i, v, n = info->dev_matrix.ndim;
    for (i = 0; i < s->num_inputs; i++) {
        uint32_t used = par_layout_split_dims(&info->inputs[i]), mask = 0;
        int group = 1;
        if (!(s->op->params & (1u << i))) continue;
        for (v = 0; v < n; v++)
            if (!(used & (1u << v)) && par_mesh_dev_size(&info->dev_matrix, v) > 1) {
                mask |= 1u << v;
                group *= par_mesh_dev_size(&info->dev_matrix, v);
            }
        if (group > 1)
            info->mirror[i] =
                par__st_comm(PAR_COMM_ALL_REDUCE, mask, group,
                             par__st_all_reduce_bytes(group, par__st_local_bytes(&info->inputs[i], s->in_dtype[i])));
    }
}

/* Per-device flops, rough by design: matmul 2 per multiply-add, norms and softmax
   5 per element, cross-entropy 4, elementwise/gather/reduce 1, data movement 0. */
static double par__st_flops(const par__st_spec *s, const int64_t *shards, const par_op_info *info) {
    double local_iter = 1.0;
    int j;
    for (j = 0; j < s->num_iter; j++) local_iter *= (double)(s->iter_size[j] / shards[j]);
    switch (s->op->kind) {
    case PAR_OP_MATMUL:
    case PAR_OP_BATCH_MATMUL:
        return 2.0 * local_iter;
    case PAR_OP_ELEMENTWISE:
    case PAR_OP_GATHER:
        return (double)par_layout_local_numel(&info->outputs[0]);
    case PAR_OP_RMSNORM:
    case PAR_OP_LAYERNORM:
    case PAR_OP_SOFTMAX:
        return 5.0 * (double)par_layout_local_numel(&info->inputs[0]);
    case PAR_OP_CROSS_ENTROPY:
        return 4.0 * (double)par_layout_local_numel(&info->inputs[0]);
    case PAR_OP_REDUCE_SUM:
    case PAR_OP_REDUCE_MEAN:
        return (double)par_layout_local_numel(&info->inputs[0]);
#if PARALLEL_MAX_DIMS >= 4
    case PAR_OP_FLASH_ATTENTION: /* q.k and p.v over the local [B,Nq,Sq] x Skv x D, no causal saving */
        return 4.0 * local_iter * (double)s->op->shape[1][2];
#endif
    default:
        return 0.0; /* reshape, transpose: no arithmetic */
    }
}

static void par__st_cost(const par__st_spec *s, const int64_t *shards, par_op_info *info) {
    par_op_cost *c = &info->cost;
    double flops_rate = s->op->device_flops > 0 ? s->op->device_flops : 1e12;
    double bandwidth = s->op->link_bandwidth > 0 ? s->op->link_bandwidth : 1e10;
    int i;
    c->compute_flops = par__st_flops(s, shards, info);
    c->comm_bytes = 0;
    for (i = 0; i < info->num_forward; i++) c->comm_bytes += (double)info->forward[i].bytes * info->forward[i].count;
    for (i = 0; i < info->num_inputs; i++) c->comm_bytes += (double)info->mirror[i].bytes;
    c->memory_bytes = (double)par__st_local_bytes(&info->outputs[0], s->out_dtype);
    for (i = 0; i < info->num_inputs; i++)
        c->memory_bytes += (double)par__st_local_bytes(&info->inputs[i], s->in_dtype[i]);
    c->total = c->compute_flops / flops_rate + c->comm_bytes / bandwidth;
}

static par_status par__st_infer(const par__st_spec *s, const par_strategy *st, int devices, par_op_info *info) {
    int64_t shards[PARALLEL_MAX_DIMS];
    int i;
    par_status status;
    if ((status = par__st_check(s, st, devices, shards)) != PAR_OK) return status;
    memset(info, 0, sizeof *info);
    for (i = 0; i < 2; i++) info->forward[i] = par__st_no_comm();
    for (i = 0; i < PAR_MAX_INPUTS; i++) info->mirror[i] = par__st_no_comm();
    if ((status = par__st_dev_matrix(s, shards, devices, info)) != PAR_OK) return status;
    if ((status = par__st_input_layouts(s, info)) != PAR_OK) return status;
    if ((status = par__st_output(s, st, shards, info)) != PAR_OK) return status;
    par__st_mirrors(s, info);
    par__st_cost(s, shards, info);
    return PAR_OK;
}

static par_status par__st_check_devices(const par__st_spec *s, int devices) {
    if (devices < 1 || devices > PAR__MAX_DEVICES)
        return par__fail(PAR_EINVAL, "%s: %d devices; it must be 1 to %d", s->name, devices, PAR__MAX_DEVICES);
    return PAR_OK;
}

PARALLEL_DEF par_status par_op_infer(const par_op_desc *op, const par_strategy *strategy, int devices,
                                     par_op_info *info) {
    par__st_spec spec;
    par_status status;
    if (!op || !strategy || !info) return par__fail(PAR_EINVAL, "par_op_infer: NULL argument");
    if ((status = par__st_spec_build(op, &spec)) != PAR_OK) return status;
    if ((status = par__st_check_devices(&spec, devices)) != PAR_OK) return status;
    return par__st_infer(&spec, strategy, devices, info);
}

/* ---- enumeration ---------------------------------------------------------------- */

/* Search steps before giving up: 8 iteration dims over 4096 devices take ~2e5. */
#define PAR__ST_MAX_STEPS (1L << 21)

typedef struct par__st_enum {
    const par__st_spec *spec;
    int devices;
    int64_t limit[PARALLEL_MAX_DIMS];  /* shard of iteration dim j must divide this */
    int64_t shards[PARALLEL_MAX_DIMS]; /* the candidate being built */
    par_strategy *out;                 /* max-heap on the sort order: the worst kept is at 0 */
    par_op_cost *keys;
    int capacity, kept, count;
    long steps;
} par__st_enum;

static int64_t par__st_gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Shards used, and the iteration shards, of a strategy the spec accepted. */
static int64_t par__st_used_devices(const par__st_spec *s, const par_strategy *st, int64_t *shards) {
    int64_t product = 1;
    int i, d;
    for (i = 0; i < s->num_inputs; i++)
        for (d = 0; d < s->op->ndim[i]; d++)
            if (!(s->in_bcast[i] & (1u << d))) shards[s->in_iter[i][d]] = st->shard[i][d];
    for (d = 0; d < s->num_iter; d++) product *= shards[d];
    return product;
}

/* The sort order: cheaper total, then less memory, then fewer idle (repeated)
   devices, then iteration shards lexicographically: a total order, so the result
   does not depend on the order candidates are found in. */
static int par__st_order(const par__st_spec *s, const par_strategy *a, const par_op_cost *ka, const par_strategy *b,
                         const par_op_cost *kb) {
    int64_t sa[PARALLEL_MAX_DIMS], sb[PARALLEL_MAX_DIMS], ua, ub;
    int j;
    if (ka->total != kb->total) return ka->total < kb->total ? -1 : 1;
    if (ka->memory_bytes != kb->memory_bytes) return ka->memory_bytes < kb->memory_bytes ? -1 : 1;
    ua = par__st_used_devices(s, a, sa);
    ub = par__st_used_devices(s, b, sb);
    if (ua != ub) return ua > ub ? -1 : 1;
    for (j = 0; j < s->num_iter; j++)
        if (sa[j] != sb[j]) return sa[j] < sb[j] ? -1 : 1;
    return 0;
}

static int par__st_heap_worse(const par__st_enum *e, int i, int j) {
    return par__st_order(e->spec, &e->out[i], &e->keys[i], &e->out[j], &e->keys[j]) > 0;
}

static void par__st_heap_swap(par__st_enum *e, int i, int j) {
    par_strategy st = e->out[i];
    par_op_cost key = e->keys[i];
    e->out[i] = e->out[j];
    e->keys[i] = e->keys[j];
    e->out[j] = st;
    e->keys[j] = key;
}

static void par__st_heap_down(par__st_enum *e, int i, int n) {
    for (;;) {
        int worst = i, l = 2 * i + 1, r = l + 1;
        if (l < n && par__st_heap_worse(e, l, worst)) worst = l;
        if (r < n && par__st_heap_worse(e, r, worst)) worst = r;
        if (worst == i) return;
        par__st_heap_swap(e, i, worst);
        i = worst;
    }
}

static void par__st_heap_up(par__st_enum *e, int i) {
    while (i > 0 && par__st_heap_worse(e, i, (i - 1) / 2)) {
        par__st_heap_swap(e, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

/* Keep the `capacity` best candidates seen so far. */
static void par__st_keep(par__st_enum *e, const par_strategy *st, const par_op_cost *cost) {
    if (e->kept < e->capacity) {
        e->out[e->kept] = *st;
        e->keys[e->kept] = *cost;
        par__st_heap_up(e, e->kept++);
    } else if (e->capacity > 0 && par__st_order(e->spec, st, cost, &e->out[0], &e->keys[0]) < 0) {
        e->out[0] = *st;
        e->keys[0] = *cost;
        par__st_heap_down(e, 0, e->kept);
    }
}

/* Project the iteration shards onto the inputs and keep the strategy if valid. */
static void par__st_try(par__st_enum *e) {
    const par__st_spec *s = e->spec;
    par_strategy st;
    par_op_info info;
    int i, d;
    memset(&st, 0, sizeof st);
    st.num_inputs = s->num_inputs;
    for (i = 0; i < s->num_inputs; i++) {
        st.ndim[i] = s->op->ndim[i];
        for (d = 0; d < st.ndim[i]; d++)
            st.shard[i][d] = (s->in_bcast[i] & (1u << d)) ? 1 : e->shards[s->in_iter[i][d]];
    }
    if (par__st_infer(s, &st, e->devices, &info) != PAR_OK) return;
    e->count++;
    par__st_keep(e, &st, &info.cost);
}

/* Every shard of dim j, and of the dims after it, whose product divides `room`. */
static par_status par__st_walk(par__st_enum *e, int j, int64_t room) {
    int64_t x, i;
    par_status status;
    if (++e->steps > PAR__ST_MAX_STEPS)
        return par__fail(PAR_EUNSUPPORTED,
                         "%s: more than %ld search steps enumerating strategies on %d devices; too many candidates",
                         e->spec->name, PAR__ST_MAX_STEPS, e->devices);
    if (j == e->spec->num_iter) {
        par__st_try(e);
        return PAR_OK;
    }
    x = par__st_gcd(e->limit[j], room);
    for (i = 1; i * i <= x; i++) {
        if (x % i) continue;
        e->shards[j] = i;
        if ((status = par__st_walk(e, j + 1, room / i)) != PAR_OK) return status;
        if (i == x / i) continue;
        e->shards[j] = x / i;
        if ((status = par__st_walk(e, j + 1, room / (x / i))) != PAR_OK) return status;
    }
    return PAR_OK;
}

/* Shards of iteration dim j must divide every input dim walking it. */
static void par__st_limits(par__st_enum *e) {
    const par__st_spec *s = e->spec;
    int i, d, j;
    for (j = 0; j < s->num_iter; j++) e->limit[j] = s->fixed_what[j] ? 1 : e->devices;
    for (i = 0; i < s->num_inputs; i++)
        for (d = 0; d < s->op->ndim[i]; d++)
            if (!(s->in_bcast[i] & (1u << d))) {
                j = s->in_iter[i][d];
                e->limit[j] = par__st_gcd(e->limit[j], s->op->shape[i][d]);
            }
}

/* Heap order -> ascending order, in place. */
static void par__st_heap_sort(par__st_enum *e) {
    int n;
    for (n = e->kept - 1; n > 0; n--) {
        par__st_heap_swap(e, 0, n);
        par__st_heap_down(e, 0, n);
    }
}

PARALLEL_DEF par_status par_op_strategies(const par_op_desc *op, int devices, par_strategy *strategies,
                                          par_op_cost *costs, int capacity, int *count) {
    par__st_spec spec;
    par__st_enum e;
    par_status status;
    if (!op || !count || capacity < 0 || (capacity > 0 && !strategies))
        return par__fail(PAR_EINVAL, "par_op_strategies: NULL argument or negative capacity");
    if ((status = par__st_spec_build(op, &spec)) != PAR_OK) return status;
    if ((status = par__st_check_devices(&spec, devices)) != PAR_OK) return status;
    memset(&e, 0, sizeof e);
    e.spec = &spec;
    e.devices = devices;
    e.out = strategies;
    e.capacity = capacity;
    /* the heap needs every kept candidate's cost; without `costs` they live here */
    e.keys = costs;
    if (!e.keys && capacity > 0) {
        e.keys = (par_op_cost *)PARALLEL_MALLOC(sizeof(par_op_cost) * (size_t)capacity);
        if (!e.keys) return par__fail(PAR_ENOMEM, "par_op_strategies: no memory for %d costs", capacity);
    }
    par__st_limits(&e);
    status = par__st_walk(&e, 0, devices);
    par__st_heap_sort(&e);
    if (e.keys != costs) PARALLEL_FREE(e.keys);
    *count = e.count;
    if (status != PAR_OK) return status;
    if (e.count > capacity)
        return par__fail(PAR_ECAPACITY,
                         "%s: %d valid strategies on %d devices; capacity is %d (the cheapest %d are kept)", spec.name,
                         e.count, devices, capacity, capacity);
    par_clear_error(); /* rejected candidates left their reasons behind */
    return PAR_OK;
}

// >>redistribute
/*    How the planner sees a layout. Device dims of size 1 split nothing and are
   dropped. Every other device dim v is, at any moment, either free (replicated),
   partial, or the pos-th split (major first) of tensor dim t. Dims partial in the
   source AND the target stay partial throughout (no op may touch them: reducing
   is irreversible) and are "inert"; the rest are "active".

   A search state packs that into a uint64: 7 bits per device dim v at bit 7v,
   owner in the low 4 bits (0 free, 1 partial, 2+t splits tensor dim t) and the
   position in the high 3 bits (0 unless split); bit 63 says the state is on the
   target shape (after the one reshape). The packing is canonical, so equal
   states have equal keys. */

#define PAR__RD_FIELD_BITS 7
#define PAR__RD_FIELD_MASK 127u
#define PAR__RD_FREE 0u
#define PAR__RD_PARTIAL 1u
#define PAR__RD_TENSOR 2u
#define PAR__RD_ON_TO_SHAPE ((uint64_t)1 << 63)

#define PAR__RD_DEFAULT_CACHE 64
#define PAR__RD_DEFAULT_MAX_STATES (1 << 16)

static unsigned par__rd_field(uint64_t key, int v) {
    return (unsigned)(key >> (PAR__RD_FIELD_BITS * v)) & PAR__RD_FIELD_MASK;
}

static uint64_t par__rd_with_field(uint64_t key, int v, unsigned field) {
    int shift = PAR__RD_FIELD_BITS * v;
    return (key & ~((uint64_t)PAR__RD_FIELD_MASK << shift)) | ((uint64_t)field << shift);
}

static unsigned par__rd_split_field(int t, int pos) { return (PAR__RD_TENSOR + (unsigned)t) | ((unsigned)pos << 4); }

/* The cost model with defaults applied, per device dim. */
typedef struct par__rd_costs {
    double latency[PARALLEL_MAX_DIMS];
    double bandwidth[PARALLEL_MAX_DIMS];
    int elem_size;
} par__rd_costs;

/* Everything one query needs, computed once before the search. Shape index 0 is
   the source shape, 1 the target shape (only used when they differ). */
typedef struct par__rd_problem {
    const par_mesh *mesh;
    int ndim[2];
    const int64_t *shape[2];
    int64_t numel;
    int reshape;                          /* shapes differ: exactly one reshape */
    par__rd_costs costs;
    int size[PARALLEL_MAX_DIMS];          /* size of each device dim */
    int num_dims;                         /* device dims of size > 1 ... */
    int dims[PARALLEL_MAX_DIMS];          /* ... listed */
    int num_active;                       /* those not inert ... */
    int active[PARALLEL_MAX_DIMS];        /* ... listed */
    uint32_t inert;                       /* partial in source and target */
    par_tensor_map from_map, to_map;      /* without size-1 dims */
    uint64_t start, goal;
    unsigned goal_field[PARALLEL_MAX_DIMS];
    uint32_t goal_prefix[PARALLEL_MAX_DIMS]; /* dims before v in v's target list */
    /* heuristic tables, [0] after the reshape (or none), [1] before it */
    double bmin[2];                           /* smallest slice bytes possible */
    double bx[2][PARALLEL_MAX_DIMS];          /* the same while dim v does not split */
    uint32_t target_free;                     /* active dims free in the target */
    int uniform_bandwidth;                    /* every active dim has the same link bandwidth */
    int by_bandwidth[PARALLEL_MAX_DIMS];      /* active dims, slowest link first */
    double bytes_all_split;                   /* numel * elem_size / product of all active sizes */
} par__rd_problem;

typedef struct par__rd_node {
    uint64_t key;
    double g, h;
    int32_t parent;
    uint32_t op; /* packed op that reached this node from parent */
} par__rd_node;

typedef struct par__rd_item {
    double f, g;
    int32_t node;
} par__rd_item;

/* Hash slot: valid only when gen equals the planner's current generation, so a
   new search invalidates the whole table by bumping one counter. */
typedef struct par__rd_slot {
    int32_t node;
    uint32_t gen;
} par__rd_slot;

typedef struct par__rd_entry {
    uint64_t hash;
    uint64_t last_used;
    par__rd_costs costs;
    par_plan plan;
} par__rd_entry;

struct par_planner {
    int cache_entries; /* 0: no cache */
    int max_states;
    par__rd_node *nodes;
    int num_nodes, node_cap;
    par__rd_item *heap;
    int heap_len, heap_cap;
    par__rd_slot *slots;
    int slot_bits;
    uint32_t gen;
    par__rd_entry *cache;
    int cache_len;
    uint64_t clock;
};

PARALLEL_DEF const char *par_redist_kind_name(par_redist_kind kind) {
    switch (kind) {
    case PAR_REDIST_SPLIT: return "split";
    case PAR_REDIST_ALL_GATHER: return "all_gather";
    case PAR_REDIST_ALL_TO_ALL: return "all_to_all";
    case PAR_REDIST_ALL_REDUCE: return "all_reduce";
    case PAR_REDIST_REDUCE_SCATTER: return "reduce_scatter";
    case PAR_REDIST_RESHAPE: return "reshape";
    }
    return "?";
}

/* ---- bytes and costs ---------------------------------------------------- */

/* Bytes one rank sends for `kind` over a group of n, holding local_bytes before
   the op (bandwidth-optimal algorithms; received bytes are the same). Exact for
   every op but all_reduce, whose 2(n-1)/n share is rounded down when the slice
   does not divide into n chunks. */
static int64_t par__rd_op_bytes(par_redist_kind kind, int n, int64_t local_bytes) {
    switch (kind) {
    case PAR_REDIST_ALL_GATHER: return (n - 1) * local_bytes;
    case PAR_REDIST_ALL_TO_ALL:
    case PAR_REDIST_REDUCE_SCATTER: return (n - 1) * local_bytes / n;
    case PAR_REDIST_ALL_REDUCE: return 2 * (n - 1) * local_bytes / n;
    default: return 0;
    }
}

/* Local ops (split, reshape) are free; a collective pays latency + bytes / bandwidth. */
static double par__rd_op_cost(const par__rd_costs *c, par_redist_kind kind, int v, int64_t bytes) {
    if (kind == PAR_REDIST_SPLIT || kind == PAR_REDIST_RESHAPE) return 0.0;
    return c->latency[v] + (double)bytes / c->bandwidth[v];
}

static par_status par__rd_costs_init(const par_cost_model *model, const par_mesh *mesh, par__rd_costs *c) {
    int v;
    memset(c, 0, sizeof *c);
    for (v = 0; v < PARALLEL_MAX_DIMS; v++) c->bandwidth[v] = 1.0;
    c->elem_size = 4;
    if (!model) return PAR_OK;
    for (v = 0; v < mesh->ndim; v++) {
        double lat = model->link[v].latency, bw = model->link[v].bandwidth;
        if (!(lat >= 0 && lat < HUGE_VAL))
            return par__fail(PAR_EINVAL, "cost model device dim %d: latency %g must be finite and >= 0", v, lat);
        if (!(bw >= 0 && bw < HUGE_VAL))
            return par__fail(PAR_EINVAL, "cost model device dim %d: bandwidth %g must be finite and > 0 (0 = default 1)",
                             v, bw);
        c->latency[v] = lat + 0.0; /* + 0.0 turns -0.0 into 0.0 for the cache key */
        if (bw > 0) c->bandwidth[v] = bw;
    }
    if (model->elem_size < 0)
        return par__fail(PAR_EINVAL, "cost model elem_size %d must be >= 0 (0 = 4 bytes, f32)", model->elem_size);
    if (model->elem_size > 0) c->elem_size = model->elem_size;
    return PAR_OK;
}

/* ---- maps and keys ------------------------------------------------------ */

/* Product of the sizes of the device dims splitting the tensor. */
static int64_t par__rd_split_product(const par__rd_problem *pb, const par_tensor_map *map, int ndim) {
    int64_t prod = 1;
    int t, k;
    for (t = 0; t < ndim; t++)
        for (k = 0; k < map->count[t]; k++) prod *= pb->size[map->dev[t][k]];
    return prod;
}

static uint64_t par__rd_encode(const par_tensor_map *map, int ndim, int on_to_shape) {
    uint64_t key = on_to_shape ? PAR__RD_ON_TO_SHAPE : 0;
    int t, k, v;
    for (t = 0; t < ndim; t++)
        for (k = 0; k < map->count[t]; k++) key = par__rd_with_field(key, map->dev[t][k], par__rd_split_field(t, k));
    for (v = 0; v < PARALLEL_MAX_DIMS; v++)
        if (map->partial & (1u << v)) key = par__rd_with_field(key, v, PAR__RD_PARTIAL);
    return key;
}

static void par__rd_decode(const par__rd_problem *pb, uint64_t key, par_tensor_map *map) {
    int i;
    memset(map, 0, sizeof *map);
    for (i = 0; i < pb->num_dims; i++) {
        int v = pb->dims[i];
        unsigned f = par__rd_field(key, v), owner = f & 15u;
        if (owner == PAR__RD_PARTIAL) {
            map->partial |= 1u << v;
        } else if (owner >= PAR__RD_TENSOR) {
            int t = (int)(owner - PAR__RD_TENSOR), pos = (int)(f >> 4);
            map->dev[t][pos] = (int8_t)v;
            if (map->count[t] < pos + 1) map->count[t] = (uint8_t)(pos + 1);
        }
    }
}

static int par__rd_shape_index(uint64_t key) { return (key & PAR__RD_ON_TO_SHAPE) ? 1 : 0; }

/* ---- heuristic ---------------------------------------------------------- */

/* Why the heuristic is admissible. Every op acts on exactly one device dim, so
   the cost still to pay splits into the ops of each dim, and lower bounds for
   disjoint sets of dims add up. Each op is charged the fewest bytes it could
   move, from a floor on the slice size at that moment:
     - Bmin: numel * elem_size over the largest split product the shapes allow
       (par__rd_max_split); Bx(v): the same while v is partial, so not split;
     - raw: numel * elem_size over the product of the dims that may be split
       then, ignoring divisibility (the group bounds below multiply it by the
       sizes of dims that provably cannot split at that moment).
   "Idle" dims, free now and free in the target, shrink slices only if some op
   splits them, and then they need a last all_gather of their own. So the
   heuristic is a minimum over the subsets of idle dims a plan may "use": the
   unused ones never split (raw excludes them), the used ones are charged their
   last all_gather in the gather group. A plan uses some subset, so the minimum
   is a lower bound.

   Per-dim terms (par__rd_term; an op costs latency + bytes / bandwidth):
     - ops only touch the minor-most split, so a split dim is "settled" (never
       needs to move) only if its whole prefix in its tensor dim is already the
       target's. An unsettled dim must leave: one all_to_all ((n-1)/n Bmin) if
       its target is another tensor dim, an all_gather ((n-1) Bmin) or two
       all_to_alls if it must come back to the same tensor dim, an all_gather if
       its target is free;
     - a partial dim needs a reduce_scatter ((n-1)/n Bx) if its target splits
       (all_reduce and a split cost more), else the cheaper of all_reduce
       (2(n-1)/n Bx, less at most (n-1)/n for rounding) and reduce_scatter +
       all_gather.
   Before the reshape, positions cannot be compared with the target's (other
   tensor dims), so those states use a weaker form: a local reshape keeps the
   set of split dims, hence a split dim whose target is free still needs an
   all_gather and a partial dim its reduction; other split dims count 0.

   Group bounds (the dims of a group count the larger of their terms' sum and
   the group bound):
     - gather group: every dim free in the target but split or partial now,
       plus the used idle dims, needs a last op that frees it for good (an
       all_gather, or an all_reduce that costs at least as much). Order those
       last ops in time: when the i-th runs the earlier ones stay free, so its
       slice after the op is at least raw * (sizes of dims 1..i) and it costs
       at least latency + (n_i-1)/n_i of that over its bandwidth;
     - reduce group: every dim partial now and split in the target needs a
       first op that reduces it; when the i-th runs the later ones are still
       partial, so its slice before the op is at least raw * (sizes of dims
       i..k), costing at least latency + (n_i-1)/n_i of that.
   Both sums are smallest for one order (exchange argument: par__rd_chain).
   A partial dim in the gather group also pays for its reduction beyond its
   last op: the reduce_scatter before a last all_gather, or the second half of
   an all_reduce: (n-1)/n (Bx - 1) at least.

   The result is admissible but not always consistent (the reshape edge, the
   maxima and minima), so the search re-opens a node when it finds a cheaper
   path to it. */

/* What a dim still has to do, as far as the heuristic can tell. */
enum {
    PAR__RD_DONE = 0,     /* free, settled, or (before the reshape) split with a split target */
    PAR__RD_REDUCE_FREE,  /* partial; free in the target */
    PAR__RD_REDUCE_SPLIT, /* partial; split in the target */
    PAR__RD_GATHER,       /* split; free in the target */
    PAR__RD_MOVE,         /* split, unsettled; target in another tensor dim */
    PAR__RD_MOVE_BACK     /* split, unsettled; target in the same tensor dim */
};

/* Largest product of device-dim sizes that can split `shape` at once (each
   tensor dim divisible by the product of its dims). Depth-first over "which
   tensor dim takes dim i, if any", pruned by the best product still reachable. */
static void par__rd_max_split_dfs(int64_t *room, int ndim, const int *sizes, int count, int i, int64_t prod,
                                  int64_t rest, int64_t *best) {
    int t;
    if (prod > *best) *best = prod;
    if (i == count || prod * rest <= *best) return;
    for (t = 0; t < ndim; t++) {
        if (room[t] % sizes[i] != 0) continue;
        room[t] /= sizes[i];
        par__rd_max_split_dfs(room, ndim, sizes, count, i + 1, prod * sizes[i], rest / sizes[i], best);
        room[t] *= sizes[i];
        if (*best == prod * rest) return; /* every dim placed: cannot do better */
    }
    par__rd_max_split_dfs(room, ndim, sizes, count, i + 1, prod, rest / sizes[i], best);
}

static int64_t par__rd_max_split(const par__rd_problem *pb, int shape_index, int skip_dim) {
    int64_t room[PARALLEL_MAX_DIMS], best = 1, rest = 1;
    int sizes[PARALLEL_MAX_DIMS], count = 0, i, j, t;
    for (i = 0; i < pb->num_active; i++) {
        int v = pb->active[i];
        if (v == skip_dim) continue;
        /* insertion sort, largest first, so the bound prunes early */
        for (j = count++; j > 0 && sizes[j - 1] < pb->size[v]; j--) sizes[j] = sizes[j - 1];
        sizes[j] = pb->size[v];
        rest *= pb->size[v];
    }
    for (t = 0; t < pb->ndim[shape_index]; t++) room[t] = pb->shape[shape_index][t];
    par__rd_max_split_dfs(room, pb->ndim[shape_index], sizes, count, 0, 1, rest, &best);
    return best;
}

/* Smallest whole number of bytes a slice can hold from here on, with dim
   skip_dim not splitting (-1: none). States before the reshape may still visit
   both shapes; states after it only the target shape. */
static int64_t par__rd_min_bytes(const par__rd_problem *pb, int before_reshape, int skip_dim) {
    int s, first = before_reshape || !pb->reshape ? 0 : 1, last = pb->reshape ? 1 : 0;
    int64_t best = -1, total = pb->numel * pb->costs.elem_size;
    for (s = first; s <= last; s++) {
        int64_t split = par__rd_max_split(pb, s, skip_dim), b = (total + split - 1) / split;
        if (best < 0 || b < best) best = b;
    }
    return best;
}

static double par__rd_min2(double a, double b) { return a < b ? a : b; }
static double par__rd_max2(double a, double b) { return a > b ? a : b; }

static void par__rd_prepare_heuristic(par__rd_problem *pb) {
    double product = 1;
    int i, j, weak;
    for (weak = 0; weak <= pb->reshape; weak++) pb->bmin[weak] = (double)par__rd_min_bytes(pb, weak, -1);
    pb->uniform_bandwidth = 1;
    for (i = 0; i < pb->num_active; i++) {
        int v = pb->active[i];
        double bw = pb->costs.bandwidth[v];
        for (weak = 0; weak <= pb->reshape; weak++) pb->bx[weak][v] = (double)par__rd_min_bytes(pb, weak, v);
        if ((pb->goal_field[v] & 15u) == PAR__RD_FREE) pb->target_free |= 1u << v;
        if (bw != pb->costs.bandwidth[pb->active[0]]) pb->uniform_bandwidth = 0;
        for (j = i; j > 0 && pb->costs.bandwidth[pb->by_bandwidth[j - 1]] > bw; j--)
            pb->by_bandwidth[j] = pb->by_bandwidth[j - 1];
        pb->by_bandwidth[j] = v;
        product *= pb->size[v];
    }
    pb->bytes_all_split = (double)pb->numel * pb->costs.elem_size / product;
}

/* The cheapest a dim alone can finish `what`, given slice floors bmin and bx. */
static double par__rd_term(const par__rd_problem *pb, int v, int what, double bmin, double bx) {
    double n = pb->size[v], lat = pb->costs.latency[v], bw = pb->costs.bandwidth[v];
    switch (what) {
    case PAR__RD_REDUCE_FREE: /* all_reduce, or reduce_scatter + all_gather */
        return par__rd_min2(lat + (n - 1) / n * (2 * bx - 1) / bw, 2 * lat + ((n - 1) / n * bx + (n - 1) * bmin) / bw);
    case PAR__RD_REDUCE_SPLIT: return lat + (n - 1) / n * bx / bw;
    case PAR__RD_GATHER: return lat + (n - 1) * bmin / bw;
    case PAR__RD_MOVE: return lat + (n - 1) / n * bmin / bw;
    case PAR__RD_MOVE_BACK: /* all_gather, or two all_to_alls */
        return par__rd_min2(lat + (n - 1) * bmin / bw, 2 * lat + 2 * (n - 1) / n * bmin / bw);
    default: return 0;
    }
}

static double par__rd_product(const par__rd_problem *pb, uint32_t dims) {
    double p = 1;
    int v;
    for (v = 0; dims; v++, dims >>= 1)
        if (dims & 1u) p *= pb->size[v];
    return p;
}

static double par__rd_latency(const par__rd_problem *pb, uint32_t dims) {
    double sum = 0;
    int v;
    for (v = 0; dims; v++, dims >>= 1)
        if (dims & 1u) sum += pb->costs.latency[v];
    return sum;
}

/* The bandwidth part of a group bound over one slice unit: the sum over the
   dims of `set`, slowest link first, of (n - 1) / bandwidth times the product
   of the sizes before it. Slowest first is the cheapest order of a gather
   group's last ops; read backwards it is the cheapest order of a reduce
   group's first ops (faster links first), so one sum serves both. With one
   bandwidth it telescopes to (prod(set) - 1) / bandwidth. */
static double par__rd_chain(const par__rd_problem *pb, uint32_t set) {
    double sum = 0, prefix = 1;
    int i;
    if (pb->uniform_bandwidth) return (par__rd_product(pb, set) - 1) / pb->costs.bandwidth[pb->active[0]];
    for (i = 0; i < pb->num_active; i++) {
        int v = pb->by_bandwidth[i];
        if (!(set & (1u << v))) continue;
        sum += (pb->size[v] - 1) / pb->costs.bandwidth[v] * prefix;
        prefix *= pb->size[v];
    }
    return sum;
}

/* One state's work, classified once and bounded for several idle subsets. */
typedef struct par__rd_work {
    unsigned char what[PARALLEL_MAX_DIMS]; /* per active index */
    int before_reshape;
    uint32_t gather, reducing, idle;
} par__rd_work;

/* The bound for one subset `used` of the idle dims; raw is the slice floor
   with the unused idle dims never split. */
static double par__rd_bound(const par__rd_problem *pb, const par__rd_work *w, uint32_t used, double raw) {
    double bmin = par__rd_max2(pb->bmin[w->before_reshape], raw), h = 0, h_gather = 0, h_reduce = 0, extra = 0;
    int i;
    for (i = 0; i < pb->num_active; i++) {
        int v = pb->active[i];
        double bx, term;
        if (w->what[i] == PAR__RD_DONE) continue;
        bx = par__rd_max2(pb->bx[w->before_reshape][v], raw * pb->size[v]);
        term = par__rd_term(pb, v, w->what[i], bmin, bx);
        if (w->gather & (1u << v)) {
            h_gather += term;
            if (w->what[i] == PAR__RD_REDUCE_FREE)
                extra += (pb->size[v] - 1.0) / pb->size[v] * (bx - 1) / pb->costs.bandwidth[v];
        } else if (w->reducing & (1u << v)) {
            h_reduce += term;
        } else {
            h += term;
        }
    }
    if (w->gather | used)
        h += par__rd_max2(h_gather, par__rd_latency(pb, w->gather) + extra + raw * par__rd_chain(pb, w->gather | used));
    if (w->reducing) h += par__rd_max2(h_reduce, par__rd_latency(pb, w->reducing) + raw * par__rd_chain(pb, w->reducing));
    return h;
}

/* Classify every active dim, then take the minimum bound over the subsets of
   idle dims a plan may use (more than 3 idle dims: the bound with all of them
   splitting for free, which is below every subset's). */
static double par__rd_heuristic(const par__rd_problem *pb, uint64_t key) {
    par__rd_work w;
    uint32_t at_target = 0, busy = 0, partial = 0, used;
    double best;
    int i, idle_count = 0;
    w.before_reshape = pb->reshape && !(key & PAR__RD_ON_TO_SHAPE);
    for (i = 0; !w.before_reshape && i < pb->num_active; i++) {
        int v = pb->active[i];
        if (par__rd_field(key, v) == pb->goal_field[v]) at_target |= 1u << v;
    }
    for (i = 0; i < pb->num_active; i++) {
        int v = pb->active[i], target_free = (pb->target_free >> v) & 1u;
        unsigned owner = par__rd_field(key, v) & 15u;
        w.what[i] = PAR__RD_DONE;
        if (owner == PAR__RD_PARTIAL) {
            w.what[i] = target_free ? PAR__RD_REDUCE_FREE : PAR__RD_REDUCE_SPLIT;
            partial |= 1u << v;
        } else if (owner >= PAR__RD_TENSOR) {
            if (target_free)
                w.what[i] = PAR__RD_GATHER;
            else if (!w.before_reshape && (!((at_target >> v) & 1u) || (pb->goal_prefix[v] & ~at_target)))
                w.what[i] = owner == (pb->goal_field[v] & 15u) ? PAR__RD_MOVE_BACK : PAR__RD_MOVE;
        }
        if (owner != PAR__RD_FREE) busy |= 1u << v;
        else if (target_free) idle_count++;
    }
    w.gather = busy & pb->target_free;
    w.reducing = partial & ~pb->target_free;
    w.idle = pb->target_free & ~busy;
    if (idle_count > 3) return par__rd_bound(pb, &w, 0, pb->bytes_all_split);
    best = HUGE_VAL;
    used = w.idle;
    do {
        best = par__rd_min2(best, par__rd_bound(pb, &w, used, pb->bytes_all_split * par__rd_product(pb, w.idle & ~used)));
        used = (used - 1) & w.idle;
    } while (used != w.idle);
    return best;
}

/* ---- validation and problem setup --------------------------------------- */

static void par__rd_shape_text(char *buf, size_t size, int ndim, const int64_t *shape) {
    par__buf b;
    int t;
    par__buf_init(&b, buf, size);
    par__bprintf(&b, "[");
    for (t = 0; t < ndim; t++) par__bprintf(&b, "%s%lld", t ? "," : "", (long long)shape[t]);
    par__bprintf(&b, "]");
}

static par_status par__rd_check_layout(const par_layout *layout, const char *which) {
    char msg[512];
    par_status st;
    if (!layout) return par__fail(PAR_EINVAL, "redistribution: the %s layout is NULL", which);
    if ((st = par_layout_check(layout)) == PAR_OK) return PAR_OK;
    snprintf(msg, sizeof msg, "%s", par_last_error());
    return par__fail(st, "redistribution: invalid %s layout: %s", which, msg);
}

static int64_t par__rd_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    int t;
    for (t = 0; t < ndim; t++) n *= shape[t];
    return n;
}

/* The rules every plan request must meet, with the rule named when broken. */
static par_status par__rd_validate(const par_layout *from, const par_layout *to, const par__rd_costs *costs) {
    char a[128], b[128];
    par_tensor_map fm, tm;
    uint32_t created;
    int v, i;
    par_status st;
    if ((st = par__rd_check_layout(from, "source")) != PAR_OK) return st;
    if ((st = par__rd_check_layout(to, "target")) != PAR_OK) return st;
    if (!par__mesh_same_shape(&from->mesh, &to->mesh)) {
        par_mesh_format(&from->mesh, a, sizeof a);
        par_mesh_format(&to->mesh, b, sizeof b);
        return par__fail(PAR_EINVAL, "redistribution: source mesh %s and target mesh %s differ; both layouts must be on one mesh",
                         a, b);
    }
    for (i = 0; i < from->mesh.ndim; i++)
        if (from->mesh.names[i][0] && to->mesh.names[i][0] && strcmp(from->mesh.names[i], to->mesh.names[i]) != 0)
            return par__fail(PAR_EINVAL, "redistribution: mesh axis %d is '%s' in the source but '%s' in the target", i,
                             from->mesh.names[i], to->mesh.names[i]);
    if (par__rd_numel(from->ndim, from->shape) != par__rd_numel(to->ndim, to->shape)) {
        par__rd_shape_text(a, sizeof a, from->ndim, from->shape);
        par__rd_shape_text(b, sizeof b, to->ndim, to->shape);
        return par__fail(PAR_ESHAPE,
                         "redistribution: source shape %s has %lld elements but target shape %s has %lld; "
                         "shapes may differ only by a reshape that keeps the element count",
                         a, (long long)par__rd_numel(from->ndim, from->shape), b,
                         (long long)par__rd_numel(to->ndim, to->shape));
    }
    /* bytes per rank stay below 2^62 even for an all_reduce of the whole tensor */
    if (par__rd_numel(from->ndim, from->shape) > ((int64_t)1 << 61) / costs->elem_size / par_mesh_size(&from->mesh))
        return par__fail(PAR_EINVAL, "redistribution: %lld elements of %d bytes on %d devices overflow 64-bit byte counts",
                         (long long)par__rd_numel(from->ndim, from->shape), costs->elem_size, par_mesh_size(&from->mesh));
    fm = par__map_without_unit_dims(from);
    tm = par__map_without_unit_dims(to);
    created = tm.partial & ~fm.partial;
    for (v = 0; created; v++)
        if (created & (1u << v))
            return par__fail(PAR_EUNSUPPORTED,
                             "redistribution: the target is partial over device dim %d but the source is not; "
                             "no redistribution op creates partial sums (all_reduce and reduce_scatter only remove them)",
                             v);
    return PAR_OK;
}

static int par__rd_same_shape(const par_layout *a, const par_layout *b) {
    return a->ndim == b->ndim && (a->ndim == 0 || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0);
}

/* Fill everything but the heuristic tables. Layouts must be validated. */
static void par__rd_setup(par__rd_problem *pb, const par_layout *from, const par_layout *to, const par__rd_costs *costs) {
    int v, t, k;
    memset(pb, 0, sizeof *pb);
    pb->mesh = &from->mesh;
    pb->ndim[0] = from->ndim;
    pb->ndim[1] = to->ndim;
    pb->shape[0] = from->shape;
    pb->shape[1] = to->shape;
    pb->numel = par__rd_numel(from->ndim, from->shape);
    pb->reshape = !par__rd_same_shape(from, to);
    pb->costs = *costs;
    pb->from_map = par__map_without_unit_dims(from);
    pb->to_map = par__map_without_unit_dims(to);
    pb->inert = pb->from_map.partial & pb->to_map.partial;
    for (v = 0; v < from->mesh.ndim; v++) {
        pb->size[v] = par_mesh_dev_size(&from->mesh, v);
        if (pb->size[v] == 1) continue;
        pb->dims[pb->num_dims++] = v;
        if (!(pb->inert & (1u << v))) pb->active[pb->num_active++] = v;
    }
    pb->start = par__rd_encode(&pb->from_map, from->ndim, 0);
    pb->goal = par__rd_encode(&pb->to_map, to->ndim, pb->reshape);
    for (v = 0; v < PARALLEL_MAX_DIMS; v++) pb->goal_field[v] = par__rd_field(pb->goal, v);
    for (t = 0; t < to->ndim; t++) {
        uint32_t prefix = 0;
        for (k = 0; k < pb->to_map.count[t]; k++) {
            pb->goal_prefix[pb->to_map.dev[t][k]] = prefix;
            prefix |= 1u << pb->to_map.dev[t][k];
        }
    }
}

/* ---- plan building (shared by the search and the greedy baseline) ------ */

static void par__rd_plan_begin(par_plan *plan, const par_layout *from, const par_layout *to, const par__rd_problem *pb,
                               int greedy) {
    memset(plan, 0, sizeof *plan);
    plan->from = *from;
    plan->to = *to;
    plan->greedy = greedy;
    plan->max_local_numel = pb->numel / par__rd_split_product(pb, &pb->from_map, from->ndim);
}

/* Append one op, with bytes and cost derived from the map before it. */
static par_status par__rd_emit(par_plan *plan, const par__rd_problem *pb, par_redist_kind kind, int t, int to_dim,
                               int v, const par_tensor_map *before, int before_shape, const par_tensor_map *after,
                               int after_shape) {
    par_redist_op *op;
    int64_t numel_before = pb->numel / par__rd_split_product(pb, before, pb->ndim[before_shape]);
    int64_t numel_after = pb->numel / par__rd_split_product(pb, after, pb->ndim[after_shape]);
    if (plan->num_ops == PAR_MAX_PLAN_OPS)
        return par__fail(PAR_ECAPACITY, "redistribution plan needs more than PAR_MAX_PLAN_OPS (%d) ops",
                         PAR_MAX_PLAN_OPS);
    op = &plan->ops[plan->num_ops++];
    op->kind = kind;
    op->tensor_dim = t;
    op->to_dim = to_dim;
    op->device_dim = v;
    op->group = v >= 0 ? pb->size[v] : 1;
    op->bytes_sent = par__rd_op_bytes(kind, op->group, numel_before * pb->costs.elem_size);
    op->bytes_recv = op->bytes_sent;
    op->cost = par__rd_op_cost(&pb->costs, kind, v, op->bytes_sent);
    op->on_to_shape = after_shape == 1 || !pb->reshape;
    op->after = *after;
    plan->cost += op->cost;
    plan->total_bytes += op->bytes_sent;
    if (numel_after > plan->max_local_numel) plan->max_local_numel = numel_after;
    return PAR_OK;
}

/* ---- the search --------------------------------------------------------- */

static uint32_t par__rd_pack_op(par_redist_kind kind, int t, int to_dim, int v) {
    return (uint32_t)kind | (uint32_t)(t & 15) << 4 | (uint32_t)(to_dim & 15) << 8 | (uint32_t)(v & 15) << 12;
}

static int par__rd_unpack(uint32_t op, int shift) {
    int x = (int)((op >> shift) & 15u);
    return x == 15 ? -1 : x;
}

/* Grow an array to hold `need` elements (doubling); NULL when out of memory. */
static void *par__rd_reserve(void *p, int *cap, int need, size_t elem) {
    int n = *cap ? *cap : 256;
    void *q;
    if (need <= *cap) return p;
    while (n < need) n *= 2;
    q = PARALLEL_REALLOC(p, (size_t)n * elem);
    if (q) *cap = n;
    return q;
}

static size_t par__rd_hash_slot(uint64_t key, int bits) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

static void par__rd_slot_insert(par_planner *pl, uint64_t key, int node) {
    size_t mask = ((size_t)1 << pl->slot_bits) - 1, i = par__rd_hash_slot(key, pl->slot_bits);
    while (pl->slots[i].gen == pl->gen) i = (i + 1) & mask;
    pl->slots[i].node = node;
    pl->slots[i].gen = pl->gen;
}

/* Double the table when it would pass half full, re-inserting every node. */
static par_status par__rd_grow_table(par_planner *pl) {
    size_t n = (size_t)1 << (pl->slot_bits + 1);
    par__rd_slot *slots = (par__rd_slot *)PARALLEL_REALLOC(pl->slots, n * sizeof *slots);
    int i;
    if (!slots) return par__fail(PAR_ENOMEM, "redistribution planner: out of memory growing the state table");
    memset(slots, 0, n * sizeof *slots);
    pl->slots = slots;
    pl->slot_bits++;
    pl->gen = 1;
    for (i = 0; i < pl->num_nodes; i++) par__rd_slot_insert(pl, pl->nodes[i].key, i);
    return PAR_OK;
}

/* The node of `key`, created (g = infinity) on first sight. */
static par_status par__rd_node_of(par_planner *pl, const par__rd_problem *pb, uint64_t key, int *node) {
    size_t mask = ((size_t)1 << pl->slot_bits) - 1, i = par__rd_hash_slot(key, pl->slot_bits);
    par__rd_node *nd;
    void *p;
    for (; pl->slots[i].gen == pl->gen; i = (i + 1) & mask)
        if (pl->nodes[pl->slots[i].node].key == key) {
            *node = pl->slots[i].node;
            return PAR_OK;
        }
    if (pl->num_nodes >= pl->max_states)
        return par__fail(PAR_ECAPACITY,
                         "redistribution search passed max_states (%d) states; raise par_planner_desc.max_states",
                         pl->max_states);
    if (!(p = par__rd_reserve(pl->nodes, &pl->node_cap, pl->num_nodes + 1, sizeof *pl->nodes)))
        return par__fail(PAR_ENOMEM, "redistribution planner: out of memory for search states");
    pl->nodes = (par__rd_node *)p;
    *node = pl->num_nodes++;
    nd = &pl->nodes[*node];
    nd->key = key;
    nd->g = HUGE_VAL;
    nd->h = par__rd_heuristic(pb, key);
    nd->parent = -1;
    nd->op = 0;
    if ((size_t)pl->num_nodes * 2 > ((size_t)1 << pl->slot_bits)) return par__rd_grow_table(pl);
    par__rd_slot_insert(pl, key, *node);
    return PAR_OK;
}

/* Heap order: smaller f first; among equal f the deeper (larger g) first, so
   the goal (h = 0) wins ties and zero-cost splits are followed to the end. */
static int par__rd_before(const par__rd_item *a, const par__rd_item *b) {
    return a->f < b->f || (a->f == b->f && a->g > b->g);
}

static par_status par__rd_push(par_planner *pl, double f, double g, int node) {
    par__rd_item item;
    int i;
    void *p = par__rd_reserve(pl->heap, &pl->heap_cap, pl->heap_len + 1, sizeof *pl->heap);
    if (!p) return par__fail(PAR_ENOMEM, "redistribution planner: out of memory for the search queue");
    pl->heap = (par__rd_item *)p;
    item.f = f;
    item.g = g;
    item.node = node;
    for (i = pl->heap_len++; i > 0 && par__rd_before(&item, &pl->heap[(i - 1) / 2]); i = (i - 1) / 2)
        pl->heap[i] = pl->heap[(i - 1) / 2];
    pl->heap[i] = item;
    return PAR_OK;
}

static par__rd_item par__rd_pop(par_planner *pl) {
    par__rd_item top = pl->heap[0], last = pl->heap[--pl->heap_len];
    int i = 0, n = pl->heap_len;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && par__rd_before(&pl->heap[c + 1], &pl->heap[c])) c++;
        if (!par__rd_before(&pl->heap[c], &last)) break;
        pl->heap[i] = pl->heap[c];
        i = c;
    }
    if (n > 0) pl->heap[i] = last;
    return top;
}

/* One search in flight: the expanded node and the best goal cost seen. */
typedef struct par__rd_search {
    par_planner *pl;
    const par__rd_problem *pb;
    int node;
    double g;
    double best_goal;
} par__rd_search;

/* Offer `key` at cost g + cost. Nodes that cannot beat the best goal found so
   far are recorded but not queued. A cheaper path to an already expanded node
   queues it again (the heuristic is admissible, not always consistent). */
static par_status par__rd_relax(par__rd_search *s, uint64_t key, double cost, uint32_t op) {
    int idx;
    double g = s->g + cost, f;
    par__rd_node *nd;
    par_status st = par__rd_node_of(s->pl, s->pb, key, &idx);
    if (st != PAR_OK) return st;
    nd = &s->pl->nodes[idx];
    if (!(g < nd->g)) return PAR_OK;
    nd->g = g;
    nd->parent = s->node;
    nd->op = op;
    f = g + nd->h;
    if (key == s->pb->goal)
        s->best_goal = g;
    else if (f >= s->best_goal)
        return PAR_OK;
    return par__rd_push(s->pl, f, g, idx);
}

/* A search state unpacked for successor generation. */
typedef struct par__rd_view {
    int count[PARALLEL_MAX_DIMS];      /* splits per tensor dim */
    int minor[PARALLEL_MAX_DIMS];      /* minor-most device dim per tensor dim */
    int64_t extent[PARALLEL_MAX_DIMS]; /* local extent per tensor dim */
    int64_t local_bytes;
} par__rd_view;

static void par__rd_view_of(const par__rd_problem *pb, uint64_t key, par__rd_view *w) {
    int s = par__rd_shape_index(key), t, i;
    int64_t split = 1;
    for (t = 0; t < pb->ndim[s]; t++) {
        w->count[t] = 0;
        w->minor[t] = -1;
        w->extent[t] = pb->shape[s][t];
    }
    for (i = 0; i < pb->num_active; i++) {
        int v = pb->active[i];
        unsigned owner = par__rd_field(key, v) & 15u;
        if (owner < PAR__RD_TENSOR) continue;
        t = (int)(owner - PAR__RD_TENSOR);
        w->count[t]++;
        w->extent[t] /= pb->size[v];
        split *= pb->size[v];
    }
    /* positions are dense, so the dim at position count-1 is the minor-most */
    for (i = 0; i < pb->num_active; i++) {
        int v = pb->active[i];
        unsigned f = par__rd_field(key, v), owner = f & 15u;
        if (owner >= PAR__RD_TENSOR && (int)(f >> 4) == w->count[owner - PAR__RD_TENSOR] - 1)
            w->minor[owner - PAR__RD_TENSOR] = v;
    }
    w->local_bytes = pb->numel / split * pb->costs.elem_size;
}

/* The local reshape edge: the state the source-shape state `key` becomes on the
   target shape, if par_layout_reshape accepts it. */
static par_status par__rd_expand_reshape(par__rd_search *s, uint64_t key) {
    const par__rd_problem *pb = s->pb;
    par_layout before, after;
    par_tensor_map map;
    memset(&before, 0, sizeof before);
    before.mesh = *pb->mesh;
    before.ndim = pb->ndim[0];
    memcpy(before.shape, pb->shape[0], sizeof(int64_t) * (size_t)pb->ndim[0]);
    par__rd_decode(pb, key, &before.map);
    if (par_layout_reshape(&before, pb->ndim[1], pb->shape[1], &after) != PAR_OK) return PAR_OK;
    map = par__map_without_unit_dims(&after);
    PARALLEL_ASSERT(map.partial == before.map.partial); /* a reshape keeps partial sums */
    return par__rd_relax(s, par__rd_encode(&map, pb->ndim[1], 1), 0.0, par__rd_pack_op(PAR_REDIST_RESHAPE, -1, -1, -1));
}

/* Offer every successor of the node being expanded: splits of free dims,
   all_gather / all_to_all of each tensor dim's minor-most split, reductions of
   partial dims, and the reshape. Only moves that keep every tensor dim
   divisible by its shard count are generated. */
static par_status par__rd_expand(par__rd_search *s) {
    const par__rd_problem *pb = s->pb;
    uint64_t key = s->pl->nodes[s->node].key;
    int shape = par__rd_shape_index(key), ndim = pb->ndim[shape], i, t, t2;
    par__rd_view w;
    par_status st;
    par__rd_view_of(pb, key, &w);
    for (i = 0; i < pb->num_active; i++) {
        int v = pb->active[i], n = pb->size[v];
        unsigned owner = par__rd_field(key, v) & 15u;
        if (owner == PAR__RD_FREE) {
            for (t = 0; t < ndim; t++)
                if (w.extent[t] % n == 0 &&
                    (st = par__rd_relax(s, par__rd_with_field(key, v, par__rd_split_field(t, w.count[t])), 0.0,
                                        par__rd_pack_op(PAR_REDIST_SPLIT, t, -1, v))) != PAR_OK)
                    return st;
        } else if (owner == PAR__RD_PARTIAL) {
            int64_t ar = par__rd_op_bytes(PAR_REDIST_ALL_REDUCE, n, w.local_bytes);
            int64_t rs = par__rd_op_bytes(PAR_REDIST_REDUCE_SCATTER, n, w.local_bytes);
            if ((st = par__rd_relax(s, par__rd_with_field(key, v, PAR__RD_FREE),
                                    par__rd_op_cost(&pb->costs, PAR_REDIST_ALL_REDUCE, v, ar),
                                    par__rd_pack_op(PAR_REDIST_ALL_REDUCE, -1, -1, v))) != PAR_OK)
                return st;
            for (t = 0; t < ndim; t++)
                if (w.extent[t] % n == 0 &&
                    (st = par__rd_relax(s, par__rd_with_field(key, v, par__rd_split_field(t, w.count[t])),
                                        par__rd_op_cost(&pb->costs, PAR_REDIST_REDUCE_SCATTER, v, rs),
                                        par__rd_pack_op(PAR_REDIST_REDUCE_SCATTER, t, -1, v))) != PAR_OK)
                    return st;
        }
    }
    for (t = 0; t < ndim; t++) {
        int v = w.minor[t], n;
        double ag, a2a;
        if (v < 0) continue;
        n = pb->size[v];
        ag = par__rd_op_cost(&pb->costs, PAR_REDIST_ALL_GATHER, v,
                             par__rd_op_bytes(PAR_REDIST_ALL_GATHER, n, w.local_bytes));
        a2a = par__rd_op_cost(&pb->costs, PAR_REDIST_ALL_TO_ALL, v,
                              par__rd_op_bytes(PAR_REDIST_ALL_TO_ALL, n, w.local_bytes));
        if ((st = par__rd_relax(s, par__rd_with_field(key, v, PAR__RD_FREE), ag,
                                par__rd_pack_op(PAR_REDIST_ALL_GATHER, t, -1, v))) != PAR_OK)
            return st;
        for (t2 = 0; t2 < ndim; t2++)
            if (t2 != t && w.extent[t2] % n == 0 &&
                (st = par__rd_relax(s, par__rd_with_field(key, v, par__rd_split_field(t2, w.count[t2])), a2a,
                                    par__rd_pack_op(PAR_REDIST_ALL_TO_ALL, t, t2, v))) != PAR_OK)
                return st;
    }
    if (pb->reshape && shape == 0) return par__rd_expand_reshape(s, key);
    return PAR_OK;
}

/* A* from pb->start to pb->goal; *goal_node is the goal's node. */
static par_status par__rd_astar(par_planner *pl, const par__rd_problem *pb, int *goal_node) {
    par__rd_search s;
    int start;
    par_status st;
    pl->num_nodes = 0;
    pl->heap_len = 0;
    if (++pl->gen == 0) { /* wrapped: stale slots could look current */
        memset(pl->slots, 0, sizeof *pl->slots << pl->slot_bits);
        pl->gen = 1;
    }
    s.pl = pl;
    s.pb = pb;
    s.best_goal = HUGE_VAL;
    if ((st = par__rd_node_of(pl, pb, pb->start, &start)) != PAR_OK) return st;
    pl->nodes[start].g = 0;
    if ((st = par__rd_push(pl, pl->nodes[start].h, 0, start)) != PAR_OK) return st;
    while (pl->heap_len > 0) {
        par__rd_item top = par__rd_pop(pl);
        if (top.g != pl->nodes[top.node].g) continue; /* superseded by a cheaper path */
        if (pl->nodes[top.node].key == pb->goal) {
            *goal_node = top.node;
            return PAR_OK;
        }
        s.node = top.node;
        s.g = top.g;
        if ((st = par__rd_expand(&s)) != PAR_OK) return st;
    }
    return par__fail(PAR_EUNSUPPORTED,
                     "redistribution: no sequence of split, all_gather, all_to_all, all_reduce, reduce_scatter and "
                     "one local reshape reaches the target");
}

/* Turn the goal's parent chain into plan ops. */
static par_status par__rd_extract(const par_planner *pl, const par__rd_problem *pb, int goal, par_plan *plan) {
    int path[PAR_MAX_PLAN_OPS + 1], len = 0, node, i;
    par_status st;
    for (node = goal; node >= 0; node = pl->nodes[node].parent) {
        if (len == PAR_MAX_PLAN_OPS + 1)
            return par__fail(PAR_ECAPACITY, "redistribution plan needs more than PAR_MAX_PLAN_OPS (%d) ops",
                             PAR_MAX_PLAN_OPS);
        path[len++] = node;
    }
    for (i = len - 1; i > 0; i--) {
        const par__rd_node *a = &pl->nodes[path[i]], *b = &pl->nodes[path[i - 1]];
        par_tensor_map before, after;
        uint32_t op = b->op;
        par__rd_decode(pb, a->key, &before);
        par__rd_decode(pb, b->key, &after);
        if ((st = par__rd_emit(plan, pb, (par_redist_kind)(op & 15u), par__rd_unpack(op, 4), par__rd_unpack(op, 8),
                               par__rd_unpack(op, 12), &before, par__rd_shape_index(a->key), &after,
                               par__rd_shape_index(b->key))) != PAR_OK)
            return st;
    }
    return PAR_OK;
}

/* ---- the plan cache ----------------------------------------------------- */

static uint64_t par__rd_mix(uint64_t h, uint64_t x) { return (h ^ x) * 0x100000001B3ull; }

static uint64_t par__rd_mix_double(uint64_t h, double d) {
    uint64_t x;
    memcpy(&x, &d, sizeof x);
    return par__rd_mix(h, x);
}

static uint64_t par__rd_hash_layout(uint64_t h, const par_layout *l) {
    int i, t, k;
    h = par__rd_mix(h, (uint64_t)l->mesh.ndim);
    for (i = 0; i < l->mesh.ndim; i++) h = par__rd_mix(h, (uint64_t)l->mesh.dims[i]);
    h = par__rd_mix(h, (uint64_t)l->ndim);
    for (t = 0; t < l->ndim; t++) {
        h = par__rd_mix(h, (uint64_t)l->shape[t]);
        h = par__rd_mix(h, l->map.count[t]);
        for (k = 0; k < l->map.count[t]; k++) h = par__rd_mix(h, (uint64_t)(l->map.dev[t][k] + 1));
    }
    return par__rd_mix(h, l->map.partial);
}

static uint64_t par__rd_hash_query(const par_layout *from, const par_layout *to, const par__rd_costs *c) {
    uint64_t h = 0xCBF29CE484222325ull;
    int v;
    h = par__rd_hash_layout(h, from);
    h = par__rd_hash_layout(h, to);
    for (v = 0; v < from->mesh.ndim; v++) {
        h = par__rd_mix_double(h, c->latency[v]);
        h = par__rd_mix_double(h, c->bandwidth[v]);
    }
    return par__rd_mix(h, (uint64_t)c->elem_size);
}

/* Exact equality of what a layout says, names included (plans copy them). */
static int par__rd_layout_identical(const par_layout *a, const par_layout *b) {
    int i, t;
    if (a->mesh.ndim != b->mesh.ndim || a->ndim != b->ndim || a->map.partial != b->map.partial) return 0;
    for (i = 0; i < a->mesh.ndim; i++)
        if (a->mesh.dims[i] != b->mesh.dims[i] || strncmp(a->mesh.names[i], b->mesh.names[i], PAR_NAME_MAX) != 0)
            return 0;
    for (t = 0; t < a->ndim; t++)
        if (a->shape[t] != b->shape[t] || a->map.count[t] != b->map.count[t] ||
            memcmp(a->map.dev[t], b->map.dev[t], a->map.count[t]) != 0)
            return 0;
    return 1;
}

static int par__rd_costs_equal(const par__rd_costs *a, const par__rd_costs *b, int mesh_ndim) {
    int v;
    if (a->elem_size != b->elem_size) return 0;
    for (v = 0; v < mesh_ndim; v++)
        if (a->latency[v] != b->latency[v] || a->bandwidth[v] != b->bandwidth[v]) return 0;
    return 1;
}

static par__rd_entry *par__rd_cache_find(par_planner *pl, uint64_t hash, const par_layout *from, const par_layout *to,
                                         const par__rd_costs *c) {
    int i;
    for (i = 0; i < pl->cache_len; i++) {
        par__rd_entry *e = &pl->cache[i];
        if (e->hash == hash && par__rd_costs_equal(&e->costs, c, from->mesh.ndim) &&
            par__rd_layout_identical(&e->plan.from, from) && par__rd_layout_identical(&e->plan.to, to))
            return e;
    }
    return NULL;
}

/* Keep `plan`, evicting the least recently used entry when full. */
static void par__rd_cache_store(par_planner *pl, uint64_t hash, const par__rd_costs *c, const par_plan *plan) {
    par__rd_entry *e;
    int i, victim = 0;
    if (pl->cache_len < pl->cache_entries) {
        victim = pl->cache_len++;
    } else {
        for (i = 1; i < pl->cache_len; i++)
            if (pl->cache[i].last_used < pl->cache[victim].last_used) victim = i;
    }
    e = &pl->cache[victim];
    e->hash = hash;
    e->last_used = ++pl->clock;
    e->costs = *c;
    e->plan = *plan;
}

/* ---- public planner API ------------------------------------------------- */

PARALLEL_DEF par_status par_planner_create(const par_planner_desc *desc, par_planner **planner) {
    par_planner *pl;
    int cache = desc && desc->cache_entries ? desc->cache_entries : PAR__RD_DEFAULT_CACHE;
    int max_states = desc && desc->max_states ? desc->max_states : PAR__RD_DEFAULT_MAX_STATES;
    if (!planner) return par__fail(PAR_EINVAL, "par_planner_create: NULL planner");
    *planner = NULL;
    if (cache < -1) return par__fail(PAR_EINVAL, "par_planner_desc.cache_entries is %d; use -1 (off), 0 (default) or more", cache);
    if (max_states < 1) return par__fail(PAR_EINVAL, "par_planner_desc.max_states is %d; it must be >= 1", max_states);
    pl = (par_planner *)PARALLEL_MALLOC(sizeof *pl);
    if (!pl) return par__fail(PAR_ENOMEM, "par_planner_create: out of memory");
    memset(pl, 0, sizeof *pl);
    pl->cache_entries = cache < 0 ? 0 : cache;
    pl->max_states = max_states;
    pl->slot_bits = 9;
    pl->slots = (par__rd_slot *)PARALLEL_MALLOC(sizeof *pl->slots << pl->slot_bits);
    pl->cache = pl->cache_entries
                    ? (par__rd_entry *)PARALLEL_MALLOC(sizeof *pl->cache * (size_t)pl->cache_entries)
                    : NULL;
    if (!pl->slots || (pl->cache_entries && !pl->cache)) {
        par_planner_destroy(pl);
        return par__fail(PAR_ENOMEM, "par_planner_create: out of memory");
    }
    memset(pl->slots, 0, sizeof *pl->slots << pl->slot_bits);
    *planner = pl;
    return PAR_OK;
}

PARALLEL_DEF void par_planner_destroy(par_planner *planner) {
    if (!planner) return;
    PARALLEL_FREE(planner->nodes);
    PARALLEL_FREE(planner->heap);
    PARALLEL_FREE(planner->slots);
    PARALLEL_FREE(planner->cache);
    PARALLEL_FREE(planner);
}

/* par_layout_reshape reports refusals through par_last_error; a search tries
   many, so keep the caller's sentence when the search itself succeeds. */
static par_status par__rd_plan_uncached(par_planner *pl, const par_layout *from, const par_layout *to,
                                        const par__rd_costs *costs, par_plan *plan) {
    par__rd_problem pb;
    char saved[512];
    int goal = -1;
    par_status st;
    snprintf(saved, sizeof saved, "%s", par_last_error());
    par__rd_setup(&pb, from, to, costs);
    par__rd_prepare_heuristic(&pb);
    par__rd_plan_begin(plan, from, to, &pb, 0);
    plan->lower_bound = par__rd_heuristic(&pb, pb.start);
    if ((st = par__rd_astar(pl, &pb, &goal)) != PAR_OK) return st;
    if ((st = par__rd_extract(pl, &pb, goal, plan)) != PAR_OK) return st;
    par__fail(PAR_OK, "%s", saved);
    return PAR_OK;
}

PARALLEL_DEF par_status par_planner_plan(par_planner *planner, const par_layout *from, const par_layout *to,
                                         const par_cost_model *cost, par_plan *plan) {
    par__rd_costs costs;
    par__rd_entry *hit;
    uint64_t hash = 0;
    par_status st;
    if (!planner || !from || !to || !plan) return par__fail(PAR_EINVAL, "par_planner_plan: NULL argument");
    if ((st = par__rd_costs_init(cost, &from->mesh, &costs)) != PAR_OK) return st;
    if (planner->cache_entries) {
        hash = par__rd_hash_query(from, to, &costs);
        if ((hit = par__rd_cache_find(planner, hash, from, to, &costs)) != NULL) {
            hit->last_used = ++planner->clock;
            *plan = hit->plan;
            return PAR_OK;
        }
    }
    if ((st = par__rd_validate(from, to, &costs)) != PAR_OK) return st;
    if ((st = par__rd_plan_uncached(planner, from, to, &costs, plan)) != PAR_OK) return st;
    if (planner->cache_entries) par__rd_cache_store(planner, hash, &costs, plan);
    return PAR_OK;
}

PARALLEL_DEF par_status par_plan_redistribution(const par_layout *from, const par_layout *to,
                                                const par_cost_model *cost, par_plan *plan) {
    par_planner_desc desc;
    par_planner *pl;
    par_status st;
    memset(&desc, 0, sizeof desc);
    desc.cache_entries = -1;
    if ((st = par_planner_create(&desc, &pl)) != PAR_OK) return st;
    st = par_planner_plan(pl, from, to, cost, plan);
    par_planner_destroy(pl);
    return st;
}

/* ---- greedy baseline ---------------------------------------------------- */

/* The greedy walker's current layout. */
typedef struct par__rd_walk {
    par_plan *plan;
    const par__rd_problem *pb;
    par_tensor_map map;
    int shape;
} par__rd_walk;

static par_status par__rd_walk_op(par__rd_walk *w, par_redist_kind kind, int t, int to_dim, int v,
                                  const par_tensor_map *after, int after_shape) {
    par_status st = par__rd_emit(w->plan, w->pb, kind, t, to_dim, v, &w->map, w->shape, after, after_shape);
    w->map = *after;
    w->shape = after_shape;
    return st;
}

/* Remove the minor-most split of tensor dim t (all_gather) or move it to the
   minor-most position of to_dim (all_to_all). */
static par_status par__rd_walk_take(par__rd_walk *w, int t, int to_dim) {
    par_tensor_map next = w->map;
    int v = next.dev[t][--next.count[t]];
    if (to_dim >= 0) next.dev[to_dim][next.count[to_dim]++] = (int8_t)v;
    return par__rd_walk_op(w, to_dim >= 0 ? PAR_REDIST_ALL_TO_ALL : PAR_REDIST_ALL_GATHER, t, to_dim, v, &next, w->shape);
}

static par_status par__rd_walk_reshape(par__rd_walk *w, const par_tensor_map *after) {
    return par__rd_walk_op(w, PAR_REDIST_RESHAPE, -1, -1, -1, after, 1);
}

/* 1 if tensor dim t's splits are a prefix of the target's. */
static int par__rd_is_prefix(const par_tensor_map *cur, const par_tensor_map *target, int t) {
    return cur->count[t] <= target->count[t] && memcmp(cur->dev[t], target->dev[t], cur->count[t]) == 0;
}

/* The device dim tensor dim t needs next, or -1. */
static int par__rd_next_needed(const par_tensor_map *cur, const par_tensor_map *target, int t) {
    return par__rd_is_prefix(cur, target, t) && cur->count[t] < target->count[t] ? target->dev[t][cur->count[t]] : -1;
}

/* One greedy step towards `target` on the walker's shape: (a) split a free dim
   some tensor dim needs next; (b) all_to_all a misplaced minor-most dim to the
   tensor dim that needs it next; (c) all_gather a misplaced minor-most dim that
   no tensor dim wants; otherwise (a cycle such as [0,1] -> [1,0]) force an
   all_gather of the first misplaced one. *done = 1 when target is reached. */
static par_status par__rd_greedy_step(par__rd_walk *w, const par_tensor_map *target, int *done) {
    int ndim = w->pb->ndim[w->shape], t, t2, forced = -1;
    uint32_t used = w->map.partial;
    *done = 0;
    for (t = 0; t < ndim; t++) {
        int k;
        for (k = 0; k < w->map.count[t]; k++) used |= 1u << w->map.dev[t][k];
    }
    for (t = 0; t < ndim; t++) {
        int v = par__rd_next_needed(&w->map, target, t);
        if (v >= 0 && !(used & (1u << v))) {
            par_tensor_map next = w->map;
            next.dev[t][next.count[t]++] = (int8_t)v;
            return par__rd_walk_op(w, PAR_REDIST_SPLIT, t, -1, v, &next, w->shape);
        }
    }
    for (t = 0; t < ndim; t++) {
        int u, wanted = 0;
        if (w->map.count[t] == 0 || par__rd_is_prefix(&w->map, target, t)) continue;
        u = w->map.dev[t][w->map.count[t] - 1];
        for (t2 = 0; t2 < ndim; t2++) {
            int k;
            if (t2 != t && par__rd_next_needed(&w->map, target, t2) == u) return par__rd_walk_take(w, t, t2);
            for (k = 0; k < target->count[t2]; k++) wanted |= target->dev[t2][k] == u;
        }
        if (!wanted) return par__rd_walk_take(w, t, -1);
        if (forced < 0) forced = t;
    }
    if (forced >= 0) return par__rd_walk_take(w, forced, -1);
    *done = 1; /* every list is a full prefix with nothing left to split: the target */
    return PAR_OK;
}

static par_status par__rd_greedy_to(par__rd_walk *w, const par_tensor_map *target) {
    int done = 0;
    par_status st = PAR_OK;
    while (st == PAR_OK && !done) st = par__rd_greedy_step(w, target, &done);
    return st;
}

/* The normalized map of `layout` reshaped to (ndim, shape), if local. */
static int par__rd_reshaped(const par_mesh *mesh, int ndim_from, const int64_t *shape_from, const par_tensor_map *map,
                            int ndim, const int64_t *shape, par_tensor_map *out) {
    par_layout a, b;
    memset(&a, 0, sizeof a);
    a.mesh = *mesh;
    a.ndim = ndim_from;
    memcpy(a.shape, shape_from, sizeof(int64_t) * (size_t)ndim_from);
    a.map = *map;
    if (par_layout_reshape(&a, ndim, shape, &b) != PAR_OK) return 0;
    *out = par__map_without_unit_dims(&b);
    return 1;
}

/* Where a greedy plan with different shapes reshapes: at the end if the target
   has a source-shape twin that reshapes back to it; else at the start if the
   source reshapes; else after gathering everything (a replicated layout always
   reshapes). The simplest order that is always correct. */
static par_status par__rd_greedy_reshape(par__rd_walk *w, const par_tensor_map *target) {
    const par__rd_problem *pb = w->pb;
    par_tensor_map twin, back, moved;
    par_status st;
    int t;
    if (par__rd_reshaped(pb->mesh, pb->ndim[1], pb->shape[1], target, pb->ndim[0], pb->shape[0], &twin) &&
        par__rd_reshaped(pb->mesh, pb->ndim[0], pb->shape[0], &twin, pb->ndim[1], pb->shape[1], &back) &&
        par__map_equal(&back, target, pb->ndim[1])) {
        if ((st = par__rd_greedy_to(w, &twin)) != PAR_OK) return st;
        return par__rd_walk_reshape(w, target);
    }
    if (!par__rd_reshaped(pb->mesh, pb->ndim[0], pb->shape[0], &w->map, pb->ndim[1], pb->shape[1], &moved)) {
        for (t = 0; t < pb->ndim[0]; t++)
            while (w->map.count[t] > 0)
                if ((st = par__rd_walk_take(w, t, -1)) != PAR_OK) return st;
        if (!par__rd_reshaped(pb->mesh, pb->ndim[0], pb->shape[0], &w->map, pb->ndim[1], pb->shape[1], &moved))
            return par__fail(PAR_EUNSUPPORTED, "redistribution: even the gathered source does not reshape locally");
    }
    if ((st = par__rd_walk_reshape(w, &moved)) != PAR_OK) return st;
    return par__rd_greedy_to(w, target);
}

PARALLEL_DEF par_status par_plan_greedy(const par_layout *from, const par_layout *to, const par_cost_model *cost,
                                        par_plan *plan) {
    par__rd_costs costs;
    par__rd_problem pb;
    par__rd_walk w;
    par_status st;
    char saved[512];
    int v;
    if (!from || !to || !plan) return par__fail(PAR_EINVAL, "par_plan_greedy: NULL argument");
    if ((st = par__rd_costs_init(cost, &from->mesh, &costs)) != PAR_OK) return st;
    if ((st = par__rd_validate(from, to, &costs)) != PAR_OK) return st;
    snprintf(saved, sizeof saved, "%s", par_last_error());
    par__rd_setup(&pb, from, to, &costs);
    par__rd_plan_begin(plan, from, to, &pb, 1);
    w.plan = plan;
    w.pb = &pb;
    w.map = pb.from_map;
    w.shape = 0;
    for (v = 0; v < PARALLEL_MAX_DIMS; v++)
        if (w.map.partial & ~pb.inert & (1u << v)) {
            par_tensor_map next = w.map;
            next.partial &= ~(1u << v);
            if ((st = par__rd_walk_op(&w, PAR_REDIST_ALL_REDUCE, -1, -1, v, &next, 0)) != PAR_OK) return st;
        }
    st = pb.reshape ? par__rd_greedy_reshape(&w, &pb.to_map) : par__rd_greedy_to(&w, &pb.to_map);
    if (st == PAR_OK) par__fail(PAR_OK, "%s", saved);
    return st;
}

/* ---- plan inspection ---------------------------------------------------- */

PARALLEL_DEF par_status par_plan_layout_after(const par_plan *plan, int i, par_layout *layout) {
    const par_layout *shape_of;
    if (!plan || !layout) return par__fail(PAR_EINVAL, "par_plan_layout_after: NULL argument");
    if (i < -1 || i >= plan->num_ops)
        return par__fail(PAR_EINVAL, "par_plan_layout_after: op %d is outside -1..%d", i, plan->num_ops - 1);
    if (i == -1) {
        *layout = plan->from;
        return PAR_OK;
    }
    shape_of = plan->ops[i].on_to_shape ? &plan->to : &plan->from;
    memset(layout, 0, sizeof *layout);
    layout->mesh = plan->from.mesh;
    layout->ndim = shape_of->ndim;
    memcpy(layout->shape, shape_of->shape, sizeof layout->shape);
    layout->map = plan->ops[i].after;
    return PAR_OK;
}

PARALLEL_DEF int par_plan_format(const par_plan *plan, char *buf, size_t size) {
    par__buf b;
    int i;
    par__buf_init(&b, buf, size);
    if (!plan) return 0;
    for (i = 0; i < plan->num_ops; i++) {
        const par_redist_op *op = &plan->ops[i];
        par__bprintf(&b, "%s", par_redist_kind_name(op->kind));
        if (op->kind != PAR_REDIST_ALL_REDUCE && op->kind != PAR_REDIST_RESHAPE)
            par__bprintf(&b, " tensor_dim=%d", op->tensor_dim);
        if (op->kind == PAR_REDIST_ALL_TO_ALL) par__bprintf(&b, " to_dim=%d", op->to_dim);
        if (op->kind != PAR_REDIST_RESHAPE) par__bprintf(&b, " device_dim=%d", op->device_dim);
        par__bprintf(&b, " group=%d bytes=%lld\n", op->group, (long long)op->bytes_sent);
    }
    par__bprintf(&b, "total bytes=%lld ops=%d\n", (long long)plan->total_bytes, plan->num_ops);
    return (int)b.len;
}

// >>simulate

/* A row-major block seen as [outer, mid, inner] around dim d. */
static void par__sim_around(int ndim, const int64_t *shape, int d, int64_t *outer, int64_t *mid, int64_t *inner) {
    int t;
    *outer = *inner = 1;
    for (t = 0; t < d; t++) *outer *= shape[t];
    for (t = d + 1; t < ndim; t++) *inner *= shape[t];
    *mid = shape[d];
}

/* dst = chunk c of n along dim d of src (whose shape is `shape`). */
static void par__sim_chunk(const double *src, int ndim, const int64_t *shape, int d, int n, int c, double *dst) {
    int64_t outer, mid, inner, piece, o;
    par__sim_around(ndim, shape, d, &outer, &mid, &inner);
    piece = mid / n * inner;
    for (o = 0; o < outer; o++) memcpy(dst + o * piece, src + o * mid * inner + c * piece, sizeof(double) * (size_t)piece);
}

/* Write `part` as chunk j of n along dim d of dst (whose shape is `shape`). */
static void par__sim_place(double *dst, int ndim, const int64_t *shape, int d, int n, int j, const double *part) {
    int64_t outer, mid, inner, piece, o;
    par__sim_around(ndim, shape, d, &outer, &mid, &inner);
    piece = mid / n * inner;
    for (o = 0; o < outer; o++) memcpy(dst + o * mid * inner + j * piece, part + o * piece, sizeof(double) * (size_t)piece);
}

/* Buffers of one simulated op: next[r] receives rank r's new slice while every
   rank's old slice stays readable in locals. */
typedef struct par__sim_step {
    const par_mesh *mesh;
    int ranks;
    int64_t cap;           /* doubles per rank buffer */
    double *const *locals;
    double *next;          /* ranks * cap */
    double *tmp;           /* cap */
    int *group;            /* ranks */
} par__sim_step;

/* Rank r's part of one op, computed only from the group members' buffers. */
static par_status par__sim_rank(par__sim_step *s, const par_redist_op *op, const par_layout *before,
                                const par_layout *after, int r) {
    int64_t shape_before[PARALLEL_MAX_DIMS], shape_after[PARALLEL_MAX_DIMS], numel = par_layout_local_numel(before), i;
    double *out = s->next + (size_t)r * (size_t)s->cap;
    int count = 1, c = 0, j, n = op->group;
    par_status st;
    par_layout_local_shape(before, shape_before);
    par_layout_local_shape(after, shape_after);
    if (op->kind != PAR_REDIST_RESHAPE) {
        if ((st = par_mesh_group(s->mesh, r, 1u << op->device_dim, s->group, &count)) != PAR_OK) return st;
        if (count != n) return par__fail(PAR_EINVAL, "simulator: op group %d but device dim %d has %d ranks", n, op->device_dim, count);
        while (s->group[c] != r) c++;
    }
    switch (op->kind) {
    case PAR_REDIST_SPLIT:
        par__sim_chunk(s->locals[r], before->ndim, shape_before, op->tensor_dim, n, c, out);
        break;
    case PAR_REDIST_ALL_GATHER:
        for (j = 0; j < n; j++) par__sim_place(out, after->ndim, shape_after, op->tensor_dim, n, j, s->locals[s->group[j]]);
        break;
    case PAR_REDIST_ALL_TO_ALL:
        /* member j sends its chunk c along to_dim; they land in member order along tensor_dim */
        for (j = 0; j < n; j++) {
            par__sim_chunk(s->locals[s->group[j]], before->ndim, shape_before, op->to_dim, n, c, s->tmp);
            par__sim_place(out, after->ndim, shape_after, op->tensor_dim, n, j, s->tmp);
        }
        break;
    case PAR_REDIST_ALL_REDUCE:
    case PAR_REDIST_REDUCE_SCATTER: {
        double *sum = op->kind == PAR_REDIST_ALL_REDUCE ? out : s->tmp;
        for (i = 0; i < numel; i++) sum[i] = 0;
        for (j = 0; j < n; j++)
            for (i = 0; i < numel; i++) sum[i] += s->locals[s->group[j]][i];
        if (op->kind == PAR_REDIST_REDUCE_SCATTER) par__sim_chunk(sum, before->ndim, shape_before, op->tensor_dim, n, c, out);
        break;
    }
    case PAR_REDIST_RESHAPE:
        memcpy(out, s->locals[r], sizeof(double) * (size_t)numel);
        break;
    default:
        return par__fail(PAR_EINVAL, "simulator: unknown op kind %d", (int)op->kind);
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_sim_run(const par_plan *plan, double *const *locals) {
    par__sim_step s;
    par_layout before, after;
    par_status st = PAR_OK;
    int i, r;
    if (!plan || !locals) return par__fail(PAR_EINVAL, "par_sim_run: NULL argument");
    s.mesh = &plan->from.mesh;
    s.ranks = par_mesh_size(s.mesh);
    s.cap = plan->max_local_numel;
    s.locals = locals;
    s.next = (double *)PARALLEL_MALLOC(sizeof(double) * (size_t)s.cap * (size_t)(s.ranks + 1));
    s.group = (int *)PARALLEL_MALLOC(sizeof(int) * (size_t)s.ranks);
    s.tmp = s.next ? s.next + (size_t)s.cap * (size_t)s.ranks : NULL;
    if (!s.next || !s.group) st = par__fail(PAR_ENOMEM, "par_sim_run: out of memory");
    for (i = 0; st == PAR_OK && i < plan->num_ops; i++) {
        if ((st = par_plan_layout_after(plan, i - 1, &before)) != PAR_OK) break;
        if ((st = par_plan_layout_after(plan, i, &after)) != PAR_OK) break;
        if (par_layout_local_numel(&before) > s.cap || par_layout_local_numel(&after) > s.cap) {
            st = par__fail(PAR_EINVAL, "par_sim_run: op %d needs more than the plan's max_local_numel", i);
            break;
        }
        for (r = 0; st == PAR_OK && r < s.ranks; r++) st = par__sim_rank(&s, &plan->ops[i], &before, &after, r);
        for (r = 0; st == PAR_OK && r < s.ranks; r++)
            memcpy(locals[r], s.next + (size_t)r * (size_t)s.cap, sizeof(double) * (size_t)par_layout_local_numel(&after));
    }
    PARALLEL_FREE(s.next);
    PARALLEL_FREE(s.group);
    return st;
}

/* Global flat index of local element `local` of a slice at `offset`. */
static int64_t par__sim_global_index(const par_layout *layout, const int64_t *local_shape, const int64_t *offset,
                                     int64_t local) {
    int64_t index = 0, stride = 1;
    int t;
    for (t = layout->ndim - 1; t >= 0; t--) {
        index += (offset[t] + local % local_shape[t]) * stride;
        local /= local_shape[t];
        stride *= layout->shape[t];
    }
    return index;
}

/* The part a rank with partial index k > 0 holds of element `index`: a small
   integer, so sums are exact and a missed or doubled reduction shows. */
static double par__sim_part(int64_t index, int k) { return (double)((index * 31 + k * 17) % 7 + 1); }

PARALLEL_DEF par_status par_sim_scatter(const par_layout *layout, const double *global, double *const *locals) {
    int64_t local_shape[PARALLEL_MAX_DIMS], offset[PARALLEL_MAX_DIMS], numel, i;
    int coords[PARALLEL_MAX_DIMS], r, v, j, ranks;
    par_status st;
    if (!layout || !global || !locals) return par__fail(PAR_EINVAL, "par_sim_scatter: NULL argument");
    if ((st = par_layout_check(layout)) != PAR_OK) return st;
    ranks = par_mesh_size(&layout->mesh);
    numel = par_layout_local_numel(layout);
    par_layout_local_shape(layout, local_shape);
    for (r = 0; r < ranks; r++) {
        int k = 0, parts = 1; /* this rank's index in the partial group, and its size */
        par_layout_local_offset(layout, r, offset);
        par_mesh_coords(&layout->mesh, r, coords);
        for (v = layout->mesh.ndim - 1; v >= 0; v--)
            if (layout->map.partial & (1u << v)) {
                int n = par_mesh_dev_size(&layout->mesh, v);
                k = k * n + coords[layout->mesh.ndim - 1 - v];
                parts *= n;
            }
        for (i = 0; i < numel; i++) {
            int64_t index = par__sim_global_index(layout, local_shape, offset, i);
            double x = global[index];
            if (k > 0)
                x = par__sim_part(index, k);
            else
                for (j = 1; j < parts; j++) x -= par__sim_part(index, j);
            locals[r][i] = x;
        }
    }
    return PAR_OK;
}

PARALLEL_DEF int par_sim_matches(const par_layout *layout, const double *global, double *const *locals) {
    int64_t local_shape[PARALLEL_MAX_DIMS], offset[PARALLEL_MAX_DIMS], numel, i;
    int r, v, ranks;
    if (!layout || !global || !locals) return (par__fail(PAR_EINVAL, "par_sim_matches: NULL argument"), 0);
    if (par_layout_check(layout) != PAR_OK) return 0;
    for (v = 0; v < layout->mesh.ndim; v++)
        if ((layout->map.partial & (1u << v)) && par_mesh_dev_size(&layout->mesh, v) > 1)
            return (par__fail(PAR_EINVAL, "par_sim_matches: the layout is partial over device dim %d; reduce first", v), 0);
    ranks = par_mesh_size(&layout->mesh);
    numel = par_layout_local_numel(layout);
    par_layout_local_shape(layout, local_shape);
    for (r = 0; r < ranks; r++) {
        par_layout_local_offset(layout, r, offset);
        for (i = 0; i < numel; i++) {
            int64_t index = par__sim_global_index(layout, local_shape, offset, i);
            if (locals[r][i] != global[index])
                return (par__fail(PAR_EINVAL, "rank %d local element %lld is %g; its slice holds global element %lld = %g",
                                  r, (long long)i, locals[r][i], (long long)index, global[index]),
                        0);
        }
    }
    return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* PARALLEL_IMPLEMENTATION_DONE */
#endif /* PARALLEL_IMPLEMENTATION */
