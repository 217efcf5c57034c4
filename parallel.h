/* parallel.h - N-D parallel training for transformer models in one C header.

   Version 0.3.0 (PARALLEL_VERSION). Dual-licensed, pick either: MIT No
   Attribution (MIT-0) or public domain (the Unlicense); no warranty. The full
   text is at the end of this file.

   WHAT IT IS
   ----------
   The machinery that MindSpore's semi-automatic parallel mode, Megatron-LM and
   DeepSpeed give Python users, for any C, C++ or CUDA training codebase:

     - a device mesh ("device matrix") and tensor layouts (tensor map + partial sums),
     - operator strategies in MindSpore form, checked with precise errors,
     - an optimal redistribution planner (split / all_gather / all_to_all /
       all_reduce / reduce_scatter / local reshape) and a mesh simulator that runs
       a plan for every rank inside one process,
     - a communication hook table (collectives, p2p, async requests) with an
       in-process threads backend (n ranks as threads: the default), an OpenMPI
       backend and, in parallel_cuda.cu, NCCL; bounded waits, never a hang,
     - a compute hook table (memory, GEMM, flash attention, RMSNorm, RoPE,
       SwiGLU, embedding, cross-entropy incl. vocab-split pieces, AdamW) with
       portable CPU kernels here and cuBLAS/CUDA kernels in parallel_cuda.cu,
     - a context per rank (mesh, tables, cached groups) and an executor that
       runs redistribution plans on real buffers through any comm table.
     - ready parallel schedules: data + optimizer parallel (>>params: buckets
       overlapped with backward, ZeRO-1/2, AdamW, a global norm counting each
       parameter once), tensor + sequence parallel (>>tensor-parallel) and
       context parallel (>>context-parallel: ring, Ulysses, hybrid) and
       pipeline schedules as data with a checker and an executor
       (>>pipeline), model-agnostic.
     - automatic parallel (>>planner): strategies for an operator graph by
       dynamic programming, sharding propagation or a fast heuristic under
       a per-device memory cap, and a whole-plan search (dp, tp, sp, cp, pp,
       ZeRO) for a Llama-shaped model on a cluster, with a calibration.

   HOW TO USE IT
   -------------
   In exactly one C or C++ file of your program:

       #define PARALLEL_IMPLEMENTATION
       #include "parallel.h"

   Everywhere else just #include "parallel.h". Link with -lpthread (and -lm).

   VERSION
   -------
   PARALLEL_VERSION_MAJOR, PARALLEL_VERSION_MINOR, PARALLEL_VERSION_PATCH (ints)
   and PARALLEL_VERSION ("0.3.0") are defined by the declarations: compare them
   with #if to support several releases. Before 1.0 a minor bump may change
   the API, a patch bump does not (the hook tables also carry their own
   version numbers, PAR_COMM_TABLE_VERSION and PAR_COMPUTE_TABLE_VERSION).

   CONFIGURATION MACROS (define before including)
   -----------------------------------------------
     PARALLEL_IMPLEMENTATION   compile the definitions (one translation unit only)
     PARALLEL_STATIC           make every function static (private copy per TU;
                               set it wherever the header is included)
     PARALLEL_MALLOC(sz) PARALLEL_REALLOC(p,sz) PARALLEL_FREE(p)
                               host allocator; define all three or none
                               (only needed in the implementation file).
                               The default of the run-time hooks: a
                               par_allocator in par_ctx_desc (also
                               par_cpu_desc, par_planner_desc) takes a
                               context's host memory, per context
     PARALLEL_ASSERT(x)        internal invariant check (default: assert.h);
                               never used for user input
     PARALLEL_MAX_DIMS         max mesh dims and tensor dims (default 8, max 8);
                               must be set identically everywhere
     PARALLEL_NO_THREADS       no pthreads: par_run_threads returns
                               PAR_EUNSUPPORTED, CPU kernels use one thread
     PARALLEL_WITH_MPI         compile the MPI backend (par_ctx_init_mpi); build
                               with mpicc (implementation file only)
     PARALLEL_WITH_CBLAS       CPU GEMM through cblas_sgemm (link OpenBLAS);
                               default: the built-in kernel, which picks
                               AVX-512 / AVX2 / portable code at run time
     Leaving sections out (each cuts the implementation's compile time; define
     in the implementation file, or everywhere to turn a call of what is left
     out into a compile error instead of a link error):
     PARALLEL_NO_CHECKPOINT    no >>checkpoint: par_st_* (safetensors files)
     PARALLEL_NO_TRACE         no >>trace: par_trace_*
     PARALLEL_NO_CPU_KERNELS   no CPU kernels: par_compute_cpu (and so the
                               table a context makes by default) gives a
                               memory-only table, its kernel hooks NULL; for
                               programs that only communicate or bring their
                               own compute table (threads is then ignored)
     MPI is already opt-in (PARALLEL_WITH_MPI). Compile time of the
     implementation, median of 3 (gcc 12, 2-core AMD EPYC, shared):
       gcc -std=c11 -O2 -c -x c -DPARALLEL_IMPLEMENTATION parallel.h -o /dev/null
       none 5.35 s, NO_CHECKPOINT 4.54 s, NO_TRACE 4.72 s,
       NO_CPU_KERNELS 3.65 s, all three 2.72 s (-49%)
     Rule for code in other sections: whatever calls par_trace_* sits inside
     #ifndef PARALLEL_NO_TRACE (likewise par_st_* and PARALLEL_NO_CHECKPOINT),
     and compute-table kernels are called only after checking the hook is not
     NULL (host tables, and the CPU table under PARALLEL_NO_CPU_KERNELS, may
     lack them). tests/conventions.sh builds and runs the header with each.

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
   * Desc structs are zero-initialised and zero fields take the documented
     defaults. Write, warning-free under -Wall -Wextra -Wpedantic:
         C:    par_op_desc d = {0};
         C++:  par_op_desc d = {};
     (g++ and clang++ flag `= {0}` with -Wmissing-field-initializers, and C11
     has no `= {}`; memset(&d, 0, sizeof d) works in both.) No desc struct
     starts with an enum, so `= {0}` at least compiles as C++.
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
     >>comm           communication hook table (collectives, p2p, async)
     >>compute        compute hook table (memory, GEMM, flash attention, kernels)
     >>context        par_ctx: rank, mesh, tables, cached groups; launchers
     >>executor       run a redistribution plan through the comm table
     >>checkpoint     safetensors files: validated reader (slices, dtype
                      conversion, CRC-32), atomic writer
     >>trace          per-rank compute/comm timelines as Chrome trace JSON
     >>params         data + optimizer parallel for any model: parameter sets,
                      bucketed gradient reduction, ZeRO-1/2, global norm, AdamW
     >>tensor-parallel  column/row-parallel linears from strategies, sequence
                      parallel, vocabulary-parallel embedding and loss
     >>context-parallel  attention over a sequence split across ranks: ring
                      (zigzag), Ulysses (all-to-all, GQA), hybrid
     >>pipeline       schedules as data (GPipe, 1F1B, interleaved, ZB-H1), their
                      text form, a checker and an executor
     >>planner        automatic parallel: operator graph, costs, strategy search
                      under a memory cap (three search modes), whole-plan search
   The implementation follows the same order; backends sit between the context
   and the executor (implementation-only banners):
     >>comm-threads   in-process threads backend: par_run_threads (the default)
     >>comm-mpi       OpenMPI backend: par_ctx_init_mpi (PARALLEL_WITH_MPI)
     >>compute-cpu    portable CPU kernels, flash attention, par_compute_cpu
                      (GEMM through CBLAS with PARALLEL_WITH_CBLAS)
   CUDA kernels and the NCCL backend live in parallel_cuda.cu.
*/
#ifndef PARALLEL_H
#define PARALLEL_H

#define PARALLEL_VERSION_MAJOR 0
#define PARALLEL_VERSION_MINOR 3
#define PARALLEL_VERSION_PATCH 0
#define PARALLEL_VERSION "0.3.0"

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

/* Set the calling thread's failure sentence (printf format) and return `status`:
   for hook tables a host writes (`return par_set_error(PAR_ECOMM, "...")`). */
PARALLEL_DEF par_status par_set_error(par_status status, const char *fmt, ...) PAR__PRINTF(2, 3);

/* Element types. */
typedef enum par_dtype { PAR_F32 = 0, PAR_BF16, PAR_F16, PAR_I32, PAR_I64, PAR_F64, PAR_DTYPE_COUNT } par_dtype;

/* Bytes per element (0 for an unknown dtype). */
PARALLEL_DEF size_t par_dtype_size(par_dtype dtype);
/* "f32", "bf16", "f16", "i32", "i64", "f64"; "?" for an unknown dtype. */
PARALLEL_DEF const char *par_dtype_name(par_dtype dtype);
/* Parse a dtype name as printed by par_dtype_name. PAR_EPARSE otherwise. */
PARALLEL_DEF par_status par_dtype_parse(const char *text, par_dtype *dtype);

/* Host allocation hooks (miniaudio's ma_allocation_callbacks), for the objects
   whose desc carries one (par_ctx_desc, par_cpu_desc, par_planner_desc): set
   all three or none; all zero = PARALLEL_MALLOC / PARALLEL_REALLOC /
   PARALLEL_FREE. A partial set is PAR_EINVAL naming the missing hook, when the
   object is created. `user` is passed to every call. malloc returns memory
   aligned for any standard type or NULL (out of memory); realloc is only
   called with a pointer from this allocator, free never with NULL. The hooks
   must be thread-safe when the object is used from several threads (a
   context run by par_run_threads calls them from every rank's thread).
   Device memory is the compute table's business, not the allocator's. */
typedef struct par_allocator {
    void *user;
    void *(*malloc)(size_t size, void *user);
    void *(*realloc)(void *ptr, size_t size, void *user);
    void (*free)(void *ptr, void *user);
} par_allocator;

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

/* Parse "2,4", "2x4" or "dp=2,tp=4" (all named or none). PAR_EPARSE for any text
   that is no valid mesh, including one par_mesh_init would refuse (a name used
   twice, "None", more than 2^24 devices). */
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
   "[-1,-1] partial=(1,0)" or "[-1,-1] partial=1,0" (a set: order is free), or with a named mesh "[dp,None]", "[(dp,cp),None]",
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

/* Shape of every rank's slice (local_shape[0..ndim)). For a layout that fails
   par_layout_check it writes zeros there (nothing if ndim is out of range or an
   argument is NULL), with the reason in par_last_error(). */
PARALLEL_DEF void par_layout_local_shape(const par_layout *layout, int64_t *local_shape);

/* Elements in one rank's slice (1 for a 0-D tensor); 0 for a NULL layout or one
   that fails par_layout_check (reason in par_last_error()). */
PARALLEL_DEF int64_t par_layout_local_numel(const par_layout *layout);

/* Start of `rank`'s slice in every tensor dim (global index). */
PARALLEL_DEF par_status par_layout_local_offset(const par_layout *layout, int rank, int64_t *offset);

/* Copy `rank`'s slice out of a real tensor: `global` holds the whole tensor
   (row-major, the layout's global shape), `local` receives the slice
   (row-major, par_layout_local_shape). Elements are `elem_size` bytes of any
   type, copied as bytes in contiguous runs. A partial layout's slice is copied
   as is: every rank along a partial dim gets the full values (split them
   yourself if the parts must sum to the global value). Errors: PAR_EINVAL
   (NULL pointer, elem_size 0, rank outside the mesh, a tensor too large to
   address), PAR_ELAYOUT (invalid layout). Buffers must not overlap. */
PARALLEL_DEF par_status par_layout_copy_slice(const par_layout *layout, int rank, size_t elem_size, const void *global,
                                              void *local);

/* The inverse: write `rank`'s slice `local` into its place in `global`,
   leaving the rest of `global` untouched. Same rules and errors. */
PARALLEL_DEF par_status par_layout_place_slice(const par_layout *layout, int rank, size_t elem_size, const void *local,
                                               void *global);

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
   MATMUL          a [...,M,K] (or [...,K,M] with transpose_a), b [...,K,N] (or [...,N,K]
                   with transpose_b); 2-D, or batched as BATCH_MATMUL
   BATCH_MATMUL    a [...,M,K], b [...,K,N]: the batch dims broadcast numpy-style
                   (aligned from the right; a missing or size-1 batch dim is shared,
                   e.g. a [M,K] with b [B,K,N], or b [1,K,N] as a weight for every
                   batch), and a broadcast dim may not be split
   ELEMENTWISE     1..4 inputs broadcast numpy-style against each other
   RMSNORM         x [...,H], gamma [H...] (the normalized trailing dims)
   LAYERNORM       x, gamma, beta
   SOFTMAX         x; the softmax axis (axes bit, default last) may not be split
   GATHER          table [V,H] (embedding), indices [...]; out [...,H]. Splitting V
                   is vocab-parallel (partial output, AllReduce over V's dim)
   CROSS_ENTROPY   logits [...,C], labels [...] (int, sparse) or [...,C] (float, dense:
                   MindSpore's SoftmaxCrossEntropyWithLogits, split like the logits);
                   out per-row loss [...]; dense labels add a second output, the
                   logits' gradient softmax * sum(labels) - labels [...,C], laid out
                   like the logits. Splitting C is the vocab-parallel loss (AllReduce
                   max, sum, sum)
   RESHAPE         x; out_shape; must be layout-preserving for the strategy, unless
                   desc.out_map gives the layout the next operator wants (MindSpore
                   lets the consumer decide): then info.output_redistribution says
                   the forward step is par_plan_redistribution(&inputs[0], &outputs[0])
   TRANSPOSE       x; perm
   FLASH_ATTENTION q [B,Nq,S,D], k [B,Nkv,S,D], v [B,Nkv,S,D] (BNSD); heads and
                   batch may be split; S needs a context-parallel algorithm
   REDUCE_SUM      x; reduced axes (default all); split reduced axes -> AllReduce
   REDUCE_MEAN     as REDUCE_SUM
   LOG_SOFTMAX     x; the axis (axes bit, default last) may not be split
   L2_NORMALIZE    x; x / sqrt(sum of squares over the axis); the axis (axes bit,
                   default last) may not be split
   PRELU           x [N,C,...], weight [C] (per channel: split like x's dim 1) or
                   [1] (shared: not split); x needs at least 2 dims
   DROPOUT         x; outputs y and the keep mask, both laid out like x; build the
                   mask with par_dropout_mask so replicas agree
   ONE_HOT         indices [...] (int); out [..., depth] (desc.depth). The strategy
                   has one entry more than the indices, the last splitting depth
                   (MindSpore's ((8,1),(),()) is ((8,1)) here): each rank writes its
                   own class range, no communication */
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
    PAR_OP_LOG_SOFTMAX,
    PAR_OP_L2_NORMALIZE,
    PAR_OP_PRELU,
    PAR_OP_DROPOUT,
    PAR_OP_ONE_HOT,
    PAR_OP_COUNT
} par_op_kind;

/* "matmul", "batch_matmul", "elementwise", "rmsnorm", "layernorm", "softmax",
   "gather", "cross_entropy", "reshape", "transpose", "flash_attention",
   "reduce_sum", "reduce_mean", "log_softmax", "l2_normalize", "prelu", "dropout",
   "one_hot". */
PARALLEL_DEF const char *par_op_kind_name(par_op_kind kind);
/* Parse a name above (also MindSpore's "MatMul", "BatchMatMul", "Add", "Mul",
   "RmsNorm", "LayerNorm", "Softmax", "Gather", "SoftmaxCrossEntropyWithLogits",
   "Reshape", "Transpose", "FlashAttentionScore", "ReduceSum", "ReduceMean",
   "LogSoftmax", "L2Normalize", "PReLU", "Dropout", "OneHot", case-insensitive). */
PARALLEL_DEF par_status par_op_kind_parse(const char *text, par_op_kind *kind);

/* A strategy: one shard tuple per input, "((2,1),(1,4))". A strategy written
   with mesh axis names, "((dp,1),(tp,1))", also remembers which axis each
   named entry came from: par_op_infer then names the device matrix's dims and
   par_op_info_on_mesh maps them to a model's mesh by name. A zeroed struct
   (and every numeric strategy) has no names. */
typedef struct par_strategy {
    int num_inputs;
    int ndim[PAR_MAX_INPUTS];
    int64_t shard[PAR_MAX_INPUTS][PARALLEL_MAX_DIMS];
    uint8_t axis[PAR_MAX_INPUTS][PARALLEL_MAX_DIMS]; /* named entry: 1 + its index in `names`; 0 = a number */
    char names[PARALLEL_MAX_DIMS][PAR_NAME_MAX];     /* the parse mesh's axis names (left to right) */
} par_strategy;

/* Parse MindSpore's tuple form "((2,1),(1,4))"; "((8,),)" for one 1-D input.
   Numbers only ("None" is also read as 1): an axis name is PAR_EPARSE saying to
   use par_strategy_parse_mesh. Shards < 1 are PAR_ESTRATEGY. */
PARALLEL_DEF par_status par_strategy_parse(const char *text, par_strategy *strategy);
/* Parse a strategy whose entries may also be axis names of `mesh`:
   "((dp,1),(tp,1))" on "dp=2,tp=4" is ((2,1),(4,1)) with the names recorded;
   "None" means 1. An unknown name is PAR_EPARSE naming it and the mesh's axes;
   a NULL or invalid mesh is PAR_EINVAL. Otherwise as par_strategy_parse. */
PARALLEL_DEF par_status par_strategy_parse_mesh(const char *text, const par_mesh *mesh, par_strategy *strategy);
/* Write the tuple form with numbers (names are not written); returns the length
   snprintf would. */
PARALLEL_DEF int par_strategy_format(const par_strategy *strategy, char *buf, size_t size);

/* An operator instance. Zero fields take defaults. */
typedef struct par_op_desc {
    const char *name;     /* used in messages; default par_op_kind_name(kind) */
    par_op_kind kind;     /* not first: C++ rejects `= {0}` for a leading enum */
    int num_inputs;       /* 0 = the operator's natural count (ELEMENTWISE: 2) */
    int ndim[PAR_MAX_INPUTS];
    int64_t shape[PAR_MAX_INPUTS][PARALLEL_MAX_DIMS];
    par_dtype dtype;      /* element type of the float tensors (default f32) */
    uint32_t params;      /* bit i: input i is a trainable parameter (gets a mirror op) */
    int transpose_a, transpose_b;  /* MATMUL, BATCH_MATMUL */
    uint32_t axes;        /* SOFTMAX, LOG_SOFTMAX, L2_NORMALIZE: the axis bit (default last); norms: normalized
                             axes (default last; must be trailing); REDUCE_*: reduced
                             axes (default all). Bit i = input 0's dim i */
    int keep_dims;        /* REDUCE_*: keep reduced dims with size 1 */
    int out_ndim;         /* RESHAPE */
    const int *out_map;   /* RESHAPE: the consumer's tensor map for the output (out_ndim entries, device
                             dims of this op's device matrix or -1); NULL = the input's split read in
                             the new shape, which must then be a local reshape */
    int64_t out_shape[PARALLEL_MAX_DIMS];
    int perm[PARALLEL_MAX_DIMS]; /* TRANSPOSE: out dim i = input dim perm[i] */
    int64_t depth;        /* ONE_HOT: number of classes (>= 1) */
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

/* Everything a strategy implies. Layouts live on the device matrix.
   backward[i]: what the gradient of activation input i (not a parameter, a
   float tensor: not Gather's indices nor CrossEntropy's labels) needs after
   the local backward. The local gradient is a partial sum over the device dims
   that split some iteration dim of the operator (size > 1, the repeated dim
   excluded) but that input i's tensor map does not use: an ALL_REDUCE over
   them, NONE when there are none. Megatron's column-parallel x.W^T
   ((dp,1),(tp,1)) gives all_reduce over tp (its "f"), row-parallel
   ((dp,tp),(1,tp)) none (its "g"); b in x[N,C] + b[C] ((2,4),(4,)) is summed
   over the 2-way dim. Parameters' gradients are mirror[i]'s business. */
typedef struct par_op_info {
    par_mesh dev_matrix;  /* device matrix, repeated-calculation dim on the right */
    int repeated;         /* size of the repeated-calculation dim (1: none) */
    int num_inputs, num_outputs;
    par_layout inputs[PAR_MAX_INPUTS];
    par_layout outputs[PAR_MAX_OUTPUTS];  /* outputs before forward comm may be partial */
    int num_forward;
    par_comm_op forward[2];               /* forward communication */
    par_comm_op mirror[PAR_MAX_INPUTS];   /* gradient AllReduce for parameter inputs */
    par_comm_op backward[PAR_MAX_INPUTS]; /* gradient AllReduce for activation inputs (above);
                                             not counted in cost.comm_bytes */
    par_op_cost cost;
    int output_redistribution; /* RESHAPE with desc.out_map: 1 if outputs[0] is not a local view of
                                  inputs[0]; the forward step is then the reshape redistribution
                                  par_plan_redistribution(&inputs[0], &outputs[0]) (not in cost) */
} par_op_info;

/* Check `strategy` for `op` on a stage of `devices` devices and infer its device
   matrix, tensor maps, forward communication, mirror ops, the activation
   gradients' backward communication and cost. Errors
   (PAR_ESTRATEGY, PAR_ESHAPE, PAR_EINVAL) name the operator, input, dim, sizes and
   the rule broken. A named strategy (par_strategy_parse_mesh) names the device
   matrix's dims after its axes (dev_matrix.names; the repeated dim stays
   unnamed): entries of one dim naming different axes, or one axis naming two
   dims, are PAR_ESTRATEGY. */
PARALLEL_DEF par_status par_op_infer(const par_op_desc *op, const par_strategy *strategy, int devices,
                                     par_op_info *info);

/* Every valid strategy for `op` on `devices` devices (any divisor, not only powers
   of two), cheapest first. Writes min(count, capacity) entries (costs may be
   NULL); *count is the total. PAR_ECAPACITY if capacity was too small (the first
   `capacity` are still the cheapest). */
PARALLEL_DEF par_status par_op_strategies(const par_op_desc *op, int devices, par_strategy *strategies,
                                          par_op_cost *costs, int capacity, int *count);

/* Re-express an operator's info on a model's mesh (e.g. a trainer's "dp=2,tp=4"),
   so its layouts, forward communication and mirror groups can be used with the
   context's groups (par_ctx_group takes the dev_masks as they are).
   axis_map[i] = the mesh axis (left to right) that device-matrix axis i (left to
   right) becomes, or -1 for an axis of size 1; every mesh axis larger than 1 is
   used once, with the same size. axis_map NULL = automatic. When the strategy
   named its axes (par_strategy_parse_mesh: MatMul ((dp,1),(tp,1))) and the mesh
   has names, each named device-matrix axis becomes the mesh axis of that name
   (same size), and the unnamed ones larger than 1 (the repeated-calculation
   dim, numeric entries) take the remaining mesh axes larger than 1, in order.
   Otherwise the device matrix's axes larger than 1, in order, are the mesh's
   axes larger than 1, in order (what a numeric strategy written batch-first,
   e.g. ((2,1),(4,1)), gives on a "dp=2,tp=4" mesh). A split over a size-1
   device dim becomes no split; the device counts must agree. `out` may be
   `info`. PAR_EINVAL names the axes that do not match. */
PARALLEL_DEF par_status par_op_info_on_mesh(const par_op_info *info, const par_mesh *mesh, const int *axis_map,
                                            par_op_info *out);

/* Dropout's keep mask for `rank`'s slice of `layout` (par_layout_local_numel
   bytes, row-major): mask[i] = 1 keeps the element. Each element's coin is a
   hash of (seed, its GLOBAL index), so every rank holding the same element
   draws the same coin: replicas (repeated calculation) agree, and the mask of
   the whole tensor is the same under every strategy and mesh. keep_prob in
   [0,1] (1 keeps all). PAR_EINVAL / PAR_ELAYOUT as par_layout_copy_slice. */
PARALLEL_DEF par_status par_dropout_mask(const par_layout *layout, int rank, uint64_t seed, double keep_prob,
                                         uint8_t *mask);

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
    int on_unified;       /* the layout after this op has the plan's unified shape (wins over on_to_shape) */
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
    int no_all_to_all; /* 1: plans never use all_to_all (MindSpore's enable_alltoall: false, its
                          default); a dim moves by all_gather + local split instead (optimal among
                          the rest; par_plan_greedy follows MindSpore's non-all_to_all path) */
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
    /* MindSpore's unified tensor shape: both shapes with every dim factored at its
       shard boundaries (1024 split 4 ways -> 4 x 256), so that collectives can act on
       sub-dims. Ops with on_unified run on it; local reshapes enter and leave it.
       unified_ndim is 0 when no op does. unified_mesh is the mesh they run on: the
       plan's mesh, or it with some axes factored (a 4-way axis as 2 x 2, major
       first: the same ranks), their device dims naming its dims. */
    int unified_ndim;
    int64_t unified_shape[PARALLEL_MAX_DIMS];
    par_mesh unified_mesh;
} par_plan;

/* Planner: reusable search workspace plus a plan cache. Not thread-safe: one per
   thread (planning is microseconds, so there is little to share). */
typedef struct par_planner par_planner;

typedef struct par_planner_desc {
    int cache_entries;  /* plans kept (LRU); default 64; -1 disables the cache */
    int max_states;     /* search states before PAR_ECAPACITY; default 1<<16 */
    par_allocator allocator; /* the planner's memory; zero = PARALLEL_MALLOC macros */
} par_planner_desc;

PARALLEL_DEF par_status par_planner_create(const par_planner_desc *desc, par_planner **planner);
PARALLEL_DEF void par_planner_destroy(par_planner *planner);

/* The cheapest plan turning `from` into `to` (same mesh; shapes equal, or equal in
   element count when a local reshape can bridge them). Optimal under `cost`
   (NULL = bytes) over the extended move set: plans of split, all_gather,
   all_to_all, all_reduce and reduce_scatter either on the tensor's own shapes
   (at most one local reshape between them) or on a unified shape of the two
   layouts, entered and left by local reshapes: every dim of both shapes cut at
   shard boundaries of both layouts, so collectives act on sub-dims and reshape
   redistributions go through the common shape. Two cuts: MindSpore's (where
   every shard but a dim's minor-most ends: 1024 split 4 and 16 ways -> 4 x 256)
   and a fine one (at every shard end: 4 x 4 x 64). A* over (per tensor dim an
   ordered list of device dims, partial set) with an admissible bound, once per
   view; the cheapest plan wins. Where a cut falls inside a device dim's shards
   the mesh axis is factored too (a 4-way axis as 2 x 2, major first, the same
   ranks; plan->unified_mesh), as MindSpore unifies device arrangements; the
   executor then takes such an op's group by rank list. The unified views are
   those of the two layouts given (a mid-plan layout may cut finer); a view
   whose search passes max_states or PAR_MAX_PLAN_OPS is skipped, not an error
   (the plan is then the best of the other searches).
   Allocates nothing once the planner has warmed up; cached by (from, to, cost).
   Errors:
   PAR_ELAYOUT (invalid layout), PAR_EINVAL (different meshes, bad cost model),
   PAR_ESHAPE (element counts differ), PAR_EUNSUPPORTED (target partial over a
   dim the source is not), PAR_ECAPACITY (max_states or PAR_MAX_PLAN_OPS). */
PARALLEL_DEF par_status par_planner_plan(par_planner *planner, const par_layout *from, const par_layout *to,
                                         const par_cost_model *cost, par_plan *plan);

/* One-shot: par_planner_plan with a temporary planner. */
PARALLEL_DEF par_status par_plan_redistribution(const par_layout *from, const par_layout *to,
                                                const par_cost_model *cost, par_plan *plan);

/* MindSpore's algorithm, as the baseline: all_reduce every partial dim (MindSpore
   has no partial layouts), then its RedistributionOperatorInfer loop on the
   unified layout (both layouts viewed on MindSpore's unified shape above, one device dim
   per dim): split passes, permute passes (all_to_all; with cost->no_all_to_all,
   MindSpore's default enable_alltoall = false, an all_gather and a local split),
   a concat pass (all_gather of device dims the target does not use), and a
   forced all_gather of the first pending dim to break cycles. For comparison
   only: never cheaper than par_planner_plan under the same no_all_to_all. Where
   no unified view exists (cuts that do not nest, as 6 split 2 and 3 ways) it
   walks the tensor's own shapes instead: split -> all_to_all -> all_gather, and
   between shapes it reshapes last when the target has a source-shape twin that
   reshapes back to it, else first when the source reshapes, else after
   gathering everything. */
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

/* ============================================================================
   >>comm
   The communication hook table. Backends (threads, MPI, NCCL, or the host's own
   transport) fill one; everything above the transport calls only this table.
   ========================================================================== */

typedef enum par_reduce_op {
    PAR_REDUCE_SUM = 0,
    PAR_REDUCE_AVG, /* sum / group size; integer dtypes divide with truncation */
    PAR_REDUCE_MAX
} par_reduce_op;

/* A backend's communicator over a list of world ranks, and a pending async op. */
typedef struct par_comm_group par_comm_group;
typedef struct par_request par_request;

#define PAR_COMM_TABLE_VERSION 1

/* Every op: counts are ELEMENTS of `dtype` (f32, bf16, f16, i32, i64, f64;
   bf16/f16 reduce in f32 and round to nearest even, unless a device backend
   documents otherwise: NCCL reduces in the type and averages floats as a
   premultiplied sum); member indices (`root`, `peer`) are positions in the
   group's rank list; buffers are the memory the backend works on (host for
   threads and MPI, device for NCCL).
   `req == NULL` runs the op to completion (blocking); otherwise the op is
   started (a backend may defer the start to its next call on the table: NCCL
   fuses consecutive async send/recv into one group launched then), *req
   receives a request and the buffers must stay untouched until wait/test
   reports completion. Every member of a group issues the group's
   collectives in the same order. Errors: PAR_EINVAL (bad argument),
   PAR_ETIMEOUT (a member did not arrive within the context's timeout),
   PAR_ECOMM (a member failed or the transport broke); the message names the op,
   the group and the rank at fault. */
typedef struct par_comm_table {
    int version;      /* PAR_COMM_TABLE_VERSION */
    const char *name; /* "threads", "mpi", "nccl", or the host's name */
    void *user;       /* passed first to every call */
    int rank, size;   /* this rank in the world, world size */

    /* Create a group of `count` world ranks (no duplicates; member i is ranks[i]).
       Collective over the members, who all pass the same list. */
    par_status (*group_create)(void *user, const int *ranks, int count, par_comm_group **group);
    void (*group_destroy)(void *user, par_comm_group *group);

    /* recv[i] = op over members of send[i], count elements. send == recv is in place. */
    par_status (*all_reduce)(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                             par_dtype dtype, par_reduce_op op, par_request **req);
    /* recv = concatenation of every member's `count` elements in member order
       (recv holds n*count). In place when send == recv + index*count. */
    par_status (*all_gather)(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                             par_dtype dtype, par_request **req);
    /* send holds n blocks of `count`; recv = op over members of block `index`. */
    par_status (*reduce_scatter)(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                                 par_dtype dtype, par_reduce_op op, par_request **req);
    /* send holds n blocks of `count`; block j goes to member j, and recv block j
       comes from member j. send and recv must not overlap. */
    par_status (*all_to_all)(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                             par_dtype dtype, par_request **req);
    /* buf of member `root` is copied to every member's buf. */
    par_status (*broadcast)(void *user, par_comm_group *group, void *buf, int64_t count, par_dtype dtype, int root,
                            par_request **req);
    /* Point to point within a group. Messages between two members arrive in the
       order they were sent; the counts of a matching send and recv must agree. */
    par_status (*send)(void *user, par_comm_group *group, const void *buf, int64_t count, par_dtype dtype, int peer,
                       par_request **req);
    par_status (*recv)(void *user, par_comm_group *group, void *buf, int64_t count, par_dtype dtype, int peer,
                       par_request **req);
    par_status (*barrier)(void *user, par_comm_group *group);

    /* Complete a request and free it; returns the op's status. */
    par_status (*wait)(void *user, par_request *req);
    /* *done = 1 when the op has completed: the request is then freed and the
       op's status returned. *done = 0: still pending, PAR_OK. */
    par_status (*test)(void *user, par_request *req, int *done);
    /* Device backends: the stream later ops are ordered on (NULL = default).
       May be NULL in host backends. */
    par_status (*set_stream)(void *user, void *stream);
    /* Free everything the backend allocated for this rank (called by par_ctx_destroy). */
    void (*destroy)(void *user);
} par_comm_table;

/* "sum", "avg", "max". */
PARALLEL_DEF const char *par_reduce_op_name(par_reduce_op op);

/* The table's operations, for argument checks and messages. */
typedef enum par_comm_call {
    PAR_CALL_ALL_REDUCE = 0,
    PAR_CALL_ALL_GATHER,
    PAR_CALL_REDUCE_SCATTER,
    PAR_CALL_ALL_TO_ALL,
    PAR_CALL_BROADCAST,
    PAR_CALL_SEND,
    PAR_CALL_RECV,
    PAR_CALL_BARRIER,
    PAR_CALL_COUNT
} par_comm_call;

/* "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
   "send", "recv", "barrier". */
PARALLEL_DEF const char *par_comm_call_name(par_comm_call call);

/* One call's arguments as a transport receives them. broadcast and send pass
   their buf as `send`, recv as `recv`; `peer` is broadcast's root or the
   send/recv peer; `op` counts for all_reduce and reduce_scatter only. */
typedef struct par_comm_args {
    par_comm_call call;
    const void *send;
    const void *recv;
    int64_t count;
    par_dtype dtype;
    par_reduce_op op;
    int peer;
} par_comm_args;

/* The argument rules of the table above, checked where the call is made (no
   communication), so every transport refuses the same calls with the same
   words. The built-in backends call these first; a host transport can too.
   `who` names the transport ("mpi"), `group` the group in messages; `size` and
   `index` are the group's member count and the caller's position in it.
   Rules: count >= 0 and small enough for byte offsets; a known dtype (and
   reduce op); non-NULL buffers when count > 0; root and peer member indices;
   buffers that overlap only in the in-place forms (all_reduce send == recv,
   all_gather send == recv + index*count, reduce_scatter recv == send +
   index*count; all_to_all never). PAR_EINVAL with
   "<who> <op> on group <group>: <the rule broken>". */
PARALLEL_DEF par_status par_comm_check_args(const char *who, const char *group, int size, int index,
                                            const par_comm_args *args);

/* group_create's rank list: 1..world ranks, each in [0, world), none twice,
   `me` among them; *index (may be NULL) receives me's position. PAR_EINVAL
   "<who> group_create: <the rule broken>". */
PARALLEL_DEF par_status par_comm_check_ranks(const char *who, const int *ranks, int count, int world, int me,
                                             int *index);

/* ============================================================================
   >>compute
   The compute hook table: memory and the kernels a transformer step needs.
   ========================================================================== */

/* What an allocation holds (memory reports are per category). */
typedef enum par_mem_category {
    PAR_MEM_PARAMS = 0,
    PAR_MEM_GRADS,
    PAR_MEM_OPTIMIZER,
    PAR_MEM_ACTIVATIONS,
    PAR_MEM_COMM,
    PAR_MEM_WORKSPACE,
    PAR_MEM_CATEGORY_COUNT
} par_mem_category;

/* "params", "grads", "optimizer", "activations", "comm", "workspace". */
PARALLEL_DEF const char *par_mem_category_name(par_mem_category category);

/* Current and peak bytes per category for one rank's compute table. */
typedef struct par_mem_report {
    int64_t current[PAR_MEM_CATEGORY_COUNT];
    int64_t peak[PAR_MEM_CATEGORY_COUNT];
    int64_t current_total, peak_total;
} par_mem_report;

typedef enum par_copy_kind { PAR_COPY_HOST_TO_HOST = 0, PAR_COPY_HOST_TO_DEVICE, PAR_COPY_DEVICE_TO_HOST, PAR_COPY_DEVICE_TO_DEVICE } par_copy_kind;

/* C = alpha * op(A) op(B) + beta * C, row-major. op(A) is m x k: A is stored
   m x k (transa = 0) or k x m (transa = 1); op(B) is k x n: B is k x n or n x k.
   Element (i,j) of X is X[i*ldX + j]; a zero leading dim means tight (the stored
   row length). beta = 0 means C is not read. batch > 1: problem b uses
   A + b*stride_a, B + b*stride_b, C + b*stride_c (elements; a zero A or B stride
   broadcasts). a_type is the type of A and B, c_type of C; accumulation is f32.
   The CPU table supports f32 only. */
typedef struct par_gemm_desc {
    int transa, transb;
    int64_t m, n, k;
    float alpha, beta;
    int64_t lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c;
    int64_t batch; /* 0 = 1 */
    par_dtype a_type, c_type;
} par_gemm_desc;

/* One attention call in flash form. q [batch, q_len, q_heads, head_dim],
   k and v [batch, k_len, kv_heads, head_dim], o like q, lse [batch, q_heads, q_len]
   (f32, natural log of the sum of exp of the scaled, masked scores; -inf and o = 0
   for a row that sees no key). q_heads must be a multiple of kv_heads (GQA; MQA
   is kv_heads = 1): query head h reads kv head h / (q_heads / kv_heads).
   causal: key j is visible to query i iff k_pos[j] <= q_pos[i] (global positions,
   so ring steps and zigzag blocks need no mask tensor). Zero scale = 1/sqrt(head_dim);
   NULL positions = 0..len-1. dtype: of q, k, v, o and their gradients (CPU: f32). */
typedef struct par_attn_desc {
    int batch, q_heads, kv_heads, head_dim;
    int64_t q_len, k_len;
    int causal;
    float scale;
    const int64_t *q_pos, *k_pos;
    par_dtype dtype;
} par_attn_desc;

#define PAR_COMPUTE_TABLE_VERSION 2 /* 2: scratch_bound */

/* Every kernel is f32 row-major unless its comment says otherwise; sizes are
   element counts. Pointers are memory of the table's device (host for the CPU
   table). Kernels return PAR_EINVAL for bad sizes or NULL pointers with a
   message naming the argument. A device table may run kernels asynchronously on
   its stream; `synchronize` waits. */
/* The largest work a host will give a table, so it can plan the scratch the
   table keeps for itself (par_compute_table.scratch_bound). The three GEMM
   bounds may come from different calls. */
typedef struct par_scratch_query {
    int64_t gemm_m, gemm_n, gemm_k; /* largest m, n and k of any GEMM */
    int64_t attn_rows;              /* largest batch x q_heads x q_len of an attention */
} par_scratch_query;

typedef struct par_compute_table {
    int version;      /* PAR_COMPUTE_TABLE_VERSION */
    const char *name; /* "cpu", "cuda", or the host's */
    void *user;
    int device_memory; /* 1 if pointers are device memory (host copies need memcpy) */
    void *stream;      /* device stream kernels run on (cudaStream_t), NULL on CPU */

    /* Memory: alloc returns zero-filled memory tagged with a category. */
    par_status (*alloc)(void *user, size_t bytes, par_mem_category category, void **ptr);
    void (*free)(void *user, void *ptr);
    par_status (*memcpy)(void *user, void *dst, const void *src, size_t bytes, par_copy_kind kind);
    par_status (*memset)(void *user, void *dst, int value, size_t bytes);
    /* height rows of width bytes: dst + r*dst_pitch <- src + r*src_pitch (same device). */
    par_status (*memcpy_2d)(void *user, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                            size_t width, size_t height);
    par_status (*memory_report)(void *user, par_mem_report *report);
    /* *bytes = an upper bound of the scratch the table allocates for itself
       (reported as PAR_MEM_WORKSPACE by memory_report) once it has run work no
       larger than *q: what a host adds to its own memory plan. NULL: the table
       keeps none. */
    par_status (*scratch_bound)(void *user, const par_scratch_query *q, size_t *bytes);
    par_status (*synchronize)(void *user);

    par_status (*gemm)(void *user, const par_gemm_desc *desc, const void *a, const void *b, void *c);

    /* Attention forward: o and lse as par_attn_desc says. */
    par_status (*attention_fwd)(void *user, const par_attn_desc *desc, const void *q, const void *k, const void *v,
                                void *o, float *lse);
    /* Backward from q, k, v, o, lse and do_ (recomputing the scores tile by tile).
       For blocked/ring attention pass the fully merged o and lse: each key block's
       gradients are then exact and add up. accumulate = 1 adds into dq, dk, dv. */
    par_status (*attention_bwd)(void *user, const par_attn_desc *desc, const void *q, const void *k, const void *v,
                                const void *o, const float *lse, const void *do_, void *dq, void *dk, void *dv,
                                int accumulate);
    /* Merge a key block's partial result (o_b, lse_b, shaped as o and lse of desc,
       f32) into the running (o, lse) in place. */
    par_status (*attention_merge)(void *user, const par_attn_desc *desc, float *o, float *lse, const float *o_b,
                                  const float *lse_b);

    /* y = x * rstd * w per row of x [rows, dim]; rstd [rows] saved (may be NULL). */
    par_status (*rmsnorm_fwd)(void *user, int64_t rows, int64_t dim, const float *x, const float *w, float eps,
                              float *y, float *rstd);
    /* dx overwritten (may equal dy); dw [dim] accumulated into. */
    par_status (*rmsnorm_bwd)(void *user, int64_t rows, int64_t dim, const float *x, const float *w,
                              const float *rstd, const float *dy, float *dx, float *dw);
    /* Rotate-half RoPE on [tokens, heads, head_dim]; pos [tokens] global positions
       (i64); theta the base. y may equal x. bwd applies the inverse rotation. */
    par_status (*rope_fwd)(void *user, int64_t tokens, int64_t heads, int64_t head_dim, const int64_t *pos,
                           float theta, const float *x, float *y);
    par_status (*rope_bwd)(void *user, int64_t tokens, int64_t heads, int64_t head_dim, const int64_t *pos,
                           float theta, const float *dy, float *dx);
    /* h = silu(g) * u over n values; bwd gives dg, du. */
    par_status (*swiglu_fwd)(void *user, int64_t n, const float *g, const float *u, float *h);
    par_status (*swiglu_bwd)(void *user, int64_t n, const float *g, const float *u, const float *dh, float *dg,
                             float *du);
    /* out[t,:] = table[ids[t]-start,:] for a vocab shard of `rows` rows starting at
       id `start` (zeros for ids outside it); bwd scatter-adds into dtable. */
    par_status (*embedding_fwd)(void *user, int64_t n, const int32_t *ids, const float *table, int64_t rows,
                                int64_t dim, int64_t start, float *out);
    par_status (*embedding_bwd)(void *user, int64_t n, const int32_t *ids, const float *dout, int64_t rows,
                                int64_t dim, int64_t start, float *dtable);
    /* Full softmax cross-entropy: loss [rows]; dlogits = (softmax - onehot) * scale
       when not NULL (may equal logits). Negative targets are ignored rows. */
    par_status (*xent)(void *user, int64_t rows, int64_t vocab, const float *logits, const int32_t *targets,
                       float *loss, float *dlogits, float scale);
    /* Vocab-split pieces (shard of v_local ids from `start`): local max; local
       sum of exp(x - gmax); target logit if in the shard else 0; loss from the
       all-reduced pieces; this shard's gradient. */
    par_status (*xent_local_max)(void *user, int64_t rows, int64_t v_local, const float *logits, float *max_out);
    par_status (*xent_local_sumexp)(void *user, int64_t rows, int64_t v_local, const float *logits,
                                    const float *gmax, float *sum_out);
    par_status (*xent_local_target)(void *user, int64_t rows, int64_t v_local, const float *logits,
                                    const int32_t *targets, int64_t start, float *tgt_out);
    par_status (*xent_loss_from_pieces)(void *user, int64_t rows, const float *gmax, const float *gsum,
                                        const float *tgt, const int32_t *targets, float *loss);
    par_status (*xent_bwd_split)(void *user, int64_t rows, int64_t v_local, const float *logits,
                                 const int32_t *targets, int64_t start, const float *gmax, const float *gsum,
                                 float scale, float *dlogits);
    /* AdamW, PyTorch semantics (decoupled decay, bias correction, step from 1). */
    par_status (*adamw)(void *user, int64_t n, float *p, const float *g, float *m, float *v, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int64_t step);
    par_status (*scale)(void *user, int64_t n, float alpha, float *x);
    par_status (*axpy)(void *user, int64_t n, float alpha, const float *x, float *y);
    /* *out (host) = sum of x[i]^2, accumulated in double. */
    par_status (*sumsq)(void *user, int64_t n, const float *x, double *out);

    void (*destroy)(void *user);
} par_compute_table;

typedef struct par_cpu_desc {
    int threads; /* kernel threads for this rank; 0 = 1 */
    par_allocator allocator; /* every host byte of the table, the buffers its alloc
                                hook returns included; zero = PARALLEL_MALLOC macros */
} par_cpu_desc;

/* Fill `table` with the portable CPU kernels (GEMM through CBLAS when built with
   PARALLEL_WITH_CBLAS). Release with table->destroy(table->user). Built with
   PARALLEL_NO_CPU_KERNELS: the memory hooks only (alloc, free, memcpy, memset,
   memcpy_2d, memory_report, synchronize); kernels and scratch_bound are NULL. */
PARALLEL_DEF par_status par_compute_cpu(const par_cpu_desc *desc, par_compute_table *table);

/* ============================================================================
   >>context
   A rank's view of the job: rank, world, mesh, comm and compute tables, and the
   communication groups along mesh dims, created on first use and cached.
   ========================================================================== */

typedef struct par_ctx par_ctx;

typedef struct par_ctx_desc {
    const char *mesh;  /* "dp=2,tp=4" (product = world size); NULL = 1-D "world=N" */
    int timeout_ms;    /* bound on every blocking wait; 0 = $PARALLEL_TIMEOUT_MS or 600000 */
    int kernel_threads; /* CPU kernel threads per rank; 0 = max(1, cores / ranks per host) */
    const par_comm_table *comm;       /* host transport (par_ctx_init only), copied */
    const par_compute_table *compute; /* copied; NULL = a CPU table the context owns */
    par_allocator allocator; /* host memory of the context, its groups, executors
                                and the CPU table it makes, and of the threads
                                backend under par_run_threads_desc; zero = the
                                PARALLEL_MALLOC macros */
} par_ctx_desc;

/* Body of one rank. Returning non-PAR_OK marks the rank failed: every other
   rank blocked in (or later entering) a collective with it gets PAR_ECOMM. */
typedef par_status (*par_rank_fn)(par_ctx *ctx, void *arg);

/* Run fn on n ranks, one thread each, in this process (the threads backend) and
   wait for all. Returns PAR_OK if every rank did; otherwise the first failing
   rank's status, with "rank R: <its message>" in par_last_error(). */
PARALLEL_DEF par_status par_run_threads(int n, par_rank_fn fn, void *arg);
PARALLEL_DEF par_status par_run_threads_desc(const par_ctx_desc *desc, int n, par_rank_fn fn, void *arg);

/* One context per process under mpirun (needs PARALLEL_WITH_MPI; otherwise
   PAR_EUNSUPPORTED). Calls MPI_Init if MPI is not initialized yet. */
PARALLEL_DEF par_status par_ctx_init_mpi(const par_ctx_desc *desc, par_ctx **ctx);

/* A context over the host's own transport (desc->comm required and copied). */
PARALLEL_DEF par_status par_ctx_init(const par_ctx_desc *desc, par_ctx **ctx);

/* Destroy the groups, the tables the context created (calling their destroy
   hooks; tables the host passed in stay the host's) and the context. */
PARALLEL_DEF void par_ctx_destroy(par_ctx *ctx);

PARALLEL_DEF int par_ctx_rank(const par_ctx *ctx);
PARALLEL_DEF int par_ctx_size(const par_ctx *ctx);
PARALLEL_DEF const par_mesh *par_ctx_mesh(const par_ctx *ctx);
PARALLEL_DEF const par_comm_table *par_ctx_comm(const par_ctx *ctx);
PARALLEL_DEF const par_compute_table *par_ctx_compute(const par_ctx *ctx);
PARALLEL_DEF int par_ctx_timeout_ms(const par_ctx *ctx);
PARALLEL_DEF int par_ctx_kernel_threads(const par_ctx *ctx);
/* The host allocator the context uses: desc->allocator, or hooks wrapping the
   PARALLEL_MALLOC macros when that was zero, so all three are always set. For a
   host's own per-context memory. NULL for a NULL ctx. */
PARALLEL_DEF const par_allocator *par_ctx_allocator(const par_ctx *ctx);

/* This rank's group along the device dims in dev_mask (bit v = device dim v,
   counted from the right; 0 = just this rank; all bits = world), with this
   rank's index in it and its size (either may be NULL). Created on first use,
   which is collective over the group's members; cached on the context. */
PARALLEL_DEF par_status par_ctx_group(par_ctx *ctx, uint32_t dev_mask, par_comm_group **group, int *index,
                                      int *count);

/* A group from an explicit rank list (cached by list, same rules). */
PARALLEL_DEF par_status par_ctx_group_ranks(par_ctx *ctx, const int *ranks, int count, par_comm_group **group);

/* Launcher environment: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK, else RANK,
   WORLD_SIZE, LOCAL_RANK (torchrun), else PMI_RANK/PMI_SIZE. PAR_EINVAL if none
   is set or the values are inconsistent (named in the message). */
PARALLEL_DEF par_status par_launch_env(int *rank, int *size, int *local_rank);

/* One entry point for both launch modes, so the same program runs as
   `./prog` (threads) and `mpirun -np N ./prog` (processes).
   When the launcher's environment says this process is one rank of a
   multi-process job (par_launch_env succeeds with size > 1, or
   OMPI_COMM_WORLD_SIZE is set):
     - built with PARALLEL_WITH_MPI: make an MPI context (par_ctx_init_mpi),
       run fn(ctx, arg) once on this rank, destroy the context (which finalizes
       MPI if it initialized it) and return fn's status. The mesh must have as
       many devices as the job has ranks, and `threads`, if not 0, must equal
       that count (PAR_EINVAL naming both);
     - otherwise PAR_EUNSUPPORTED: rebuild with mpicc -DPARALLEL_WITH_MPI.
   Otherwise: par_run_threads_desc(desc, threads, fn, arg), `threads` rank
   threads in this process; threads = 0 means the size of desc->mesh
   (PAR_EINVAL when desc or desc->mesh is NULL too).
   Errors: PAR_EINVAL (NULL fn, negative threads, the counts above), those of
   the launcher, and fn's own status (threads: the first failing rank's). */
PARALLEL_DEF par_status par_launch(const par_ctx_desc *desc, int threads, par_rank_fn fn, void *arg);

/* Collectives on a context, so a host need not write
   `par_ctx_comm(ctx)->all_reduce(par_ctx_comm(ctx)->user, ...)`: each calls the
   context's comm table with the same arguments and rules (see par_comm_table:
   counts in elements, `req` NULL = blocking, else async with *req to wait on).
   `group` NULL means the whole world (par_ctx_group over every mesh dim; made
   on first use, collectively). PAR_EINVAL for a NULL ctx; otherwise the
   backend's status and message. */
PARALLEL_DEF par_status par_all_reduce(par_ctx *ctx, par_comm_group *group, const void *send, void *recv,
                                       int64_t count, par_dtype dtype, par_reduce_op op, par_request **req);
PARALLEL_DEF par_status par_all_gather(par_ctx *ctx, par_comm_group *group, const void *send, void *recv,
                                       int64_t count, par_dtype dtype, par_request **req);
PARALLEL_DEF par_status par_reduce_scatter(par_ctx *ctx, par_comm_group *group, const void *send, void *recv,
                                           int64_t count, par_dtype dtype, par_reduce_op op, par_request **req);
PARALLEL_DEF par_status par_all_to_all(par_ctx *ctx, par_comm_group *group, const void *send, void *recv,
                                       int64_t count, par_dtype dtype, par_request **req);
PARALLEL_DEF par_status par_broadcast(par_ctx *ctx, par_comm_group *group, void *buf, int64_t count, par_dtype dtype,
                                      int root, par_request **req);
PARALLEL_DEF par_status par_send(par_ctx *ctx, par_comm_group *group, const void *buf, int64_t count, par_dtype dtype,
                                 int peer, par_request **req);
PARALLEL_DEF par_status par_recv(par_ctx *ctx, par_comm_group *group, void *buf, int64_t count, par_dtype dtype,
                                 int peer, par_request **req);
PARALLEL_DEF par_status par_barrier(par_ctx *ctx, par_comm_group *group);
/* Complete an async op's request and free it; returns the op's status. A NULL
   request is complete: PAR_OK. */
PARALLEL_DEF par_status par_wait(par_ctx *ctx, par_request *req);
/* *done = 1 and the op's status when it has completed (the request is then
   freed), else *done = 0 and PAR_OK. A NULL request is complete. PAR_EINVAL for
   a NULL ctx or done. */
PARALLEL_DEF par_status par_test(par_ctx *ctx, par_request *req, int *done);

/* ============================================================================
   >>executor
   Runs a redistribution plan on real buffers through a context's comm table.
   ========================================================================== */

typedef struct par_executor par_executor;

/* A reusable workspace (grown on demand, tagged PAR_MEM_COMM) for one rank. */
PARALLEL_DEF par_status par_executor_create(par_ctx *ctx, par_executor **exec);
PARALLEL_DEF void par_executor_destroy(par_executor *exec);

/* Run `plan` (made for a layout on the context's mesh) on this rank: `in` holds
   this rank's slice of plan->from (row-major local shape), `out` receives its
   slice of plan->to; both dtype elements in the compute table's memory. in may
   equal out when it is large enough for every step (plan->max_local_numel).
   Collective over the ranks of the mesh (each op over its device dim's group). */
PARALLEL_DEF par_status par_execute_plan(par_executor *exec, const par_plan *plan, par_dtype dtype, const void *in,
                                         void *out);

/* ============================================================================
   >>checkpoint
   Safetensors files (Hugging Face's format: 8-byte little-endian header length,
   a JSON header, raw little-endian tensors), so weights move between this
   library and the Python ecosystem (safetensors, transformers, PyTorch) as is.

   Header: {"__metadata__": {"key": "value", ...},
            "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
   Offsets are bytes into the data section, which follows the header; the
   tensors must cover it exactly (no gaps, no overlaps, no trailing bytes).
   Supported dtypes: F32, BF16, F16, F64, I32, I64 (the par_dtype set).

   Checksums: the writer stores the CRC-32 of each tensor's bytes (the IEEE
   polynomial, as zlib.crc32 and Python's binascii.crc32 compute it) in the
   metadata under "par.crc32.<tensor name>" as 8 lowercase hex digits. Readers
   verify it where present (whole-tensor par_st_read, par_st_verify); files from
   other writers simply carry no checksum and are not checked.

   Writes are atomic: the writer fills "<path>.tmp.<pid>.<n>", fsyncs it and
   renames it over `path`, so a failed or interrupted save never leaves a
   half-written file at `path` and never destroys the previous one.

   Errors name the function, the file and the tensor ("par_st_open: a.st: tensor
   \"w\" has shape [2,3] of F32 (24 bytes) but data_offsets [0,20] span 20 bytes").
   Objects are not thread-safe: use one from one thread at a time (each rank
   of par_run_threads opens its own).
   ========================================================================== */
#ifndef PARALLEL_NO_CHECKPOINT /* the whole section; see CONFIGURATION MACROS */

/* One tensor of an open file (read-only; owned by the file object). */
typedef struct par_st_tensor {
    const char *name;                 /* the tensor's name (JSON escapes decoded, UTF-8) */
    par_dtype dtype;                  /* F32, BF16, F16, I32, I64 or F64 */
    int ndim;                         /* 0..PARALLEL_MAX_DIMS; 0 is a scalar (numel 1) */
    int64_t shape[PARALLEL_MAX_DIMS]; /* row-major; entries past ndim are 0 */
    int64_t numel;                    /* product of shape (0 for a zero-size tensor) */
    uint64_t offset, nbytes;          /* byte range [offset, offset + nbytes) of the data section */
    int has_checksum;                 /* the file's metadata holds this tensor's CRC-32 */
    uint32_t checksum;                /* that CRC-32, when has_checksum */
} par_st_tensor;

typedef struct par_st_file par_st_file;

/* Open a safetensors file and validate all of it except the tensor bytes: the
   length field (the header is at most 100,000,000 bytes and lies inside the
   file), the JSON (an object of objects; "__metadata__" maps strings to
   strings; escapes incl. \uXXXX and surrogate pairs; any whitespace), each
   tensor (dtype, shape of non-negative integers, data_offsets of two integers
   with begin <= end; no other number forms; numel * element size equals
   end - begin without overflow), exact coverage of the data section, unique
   names and metadata keys, and well-formed "par.crc32." checksum entries
   (checksums of tensors the file lacks are ignored).
   Errors: PAR_EIO (cannot open or read; the file is shorter than its header
   says), PAR_EPARSE (malformed header), PAR_EUNSUPPORTED (a valid safetensors
   dtype parallel.h lacks, such as U8, or more than PARALLEL_MAX_DIMS dims),
   PAR_ENOMEM. Messages read "par_st_open: <path>: <what is wrong>", naming the
   tensor. *file is NULL on failure. */
PARALLEL_DEF par_status par_st_open(const char *path, par_st_file **file);

/* Close the file and free everything (NULL is ignored). */
PARALLEL_DEF void par_st_close(par_st_file *file);

/* Number of tensors (0 for NULL). */
PARALLEL_DEF int par_st_count(const par_st_file *file);

/* Tensor `index` in name order (bytewise strcmp of the UTF-8 names, which is
   the order the writer stores them in); NULL when out of range. */
PARALLEL_DEF const par_st_tensor *par_st_tensor_at(const par_st_file *file, int index);

/* The tensor called `name`, or NULL if the file has none (binary search). */
PARALLEL_DEF const par_st_tensor *par_st_find(const par_st_file *file, const char *name);

/* The "__metadata__" value for `key`, or NULL if absent. The checksum entries
   ("par.crc32.<name>") are metadata like any other. */
PARALLEL_DEF const char *par_st_metadata(const par_st_file *file, const char *key);

/* Number of metadata entries, and entry `index` in key order (PAR_EINVAL when
   out of range). */
PARALLEL_DEF int par_st_metadata_count(const par_st_file *file);
PARALLEL_DEF par_status par_st_metadata_at(const par_st_file *file, int index, const char **key, const char **value);

/* Read elements [first, first + count) of tensor `name` (row-major flat index)
   into dst, converted to `dtype`: the float types F32, BF16, F16 and F64
   convert among themselves (to nearest even; F64 to BF16/F16 rounds through
   F32), integer types read only as themselves. Only those bytes are read from
   disk, so a rank can load its shard of a big tensor; a shard that is not one
   flat range is read with one call per contiguous run.
   `shape` (ndim dims), when not NULL, is the shape the caller expects: a
   different shape is PAR_ESHAPE ("tensor X has shape [4,6], expected [6,4]");
   pass NULL to skip the check (ndim is then ignored).
   When the whole tensor is read and it has a checksum, the bytes are verified:
   a mismatch is PAR_EIO "checksum mismatch in tensor X" (dst then holds the
   bad data). Errors: PAR_EINVAL (no tensor `name`, range outside the tensor,
   impossible conversion, NULL dst with count > 0), PAR_ESHAPE, PAR_EIO (read
   failure, the file shrank since par_st_open), PAR_ENOMEM. */
PARALLEL_DEF par_status par_st_read(par_st_file *file, const char *name, int ndim, const int64_t *shape, int64_t first,
                                    int64_t count, par_dtype dtype, void *dst);

/* Read `rank`'s slice of tensor `name` under `layout` (whose global shape
   must be the tensor's: PAR_ESHAPE otherwise) into dst (the slice's local
   shape, row-major, converted to dtype as par_st_read does): only the slice's
   bytes are read from disk, one read per contiguous run. */
PARALLEL_DEF par_status par_st_read_slice(par_st_file *file, const char *name, const par_layout *layout, int rank,
                                          par_dtype dtype, void *dst);

/* Read every tensor that has a checksum and compare (16 MiB at a time).
   *checked (may be NULL) receives the number of tensors verified, so a caller
   can tell a file without checksums from a good one. PAR_EIO "checksum mismatch
   in tensor X" names the first bad tensor in name order. */
PARALLEL_DEF par_status par_st_verify(par_st_file *file, int *checked);

/* Writer. Tensors are declared with par_st_writer_add, either with a pointer
   to their bytes (not copied: it must stay valid and unchanged until finish)
   or with data == NULL and their bytes streamed later with
   par_st_writer_write. The file lists tensors sorted by name, their data in
   that order, the header padded with spaces to a multiple of 8 bytes, and the
   "par.crc32." checksum of every tensor in the metadata. */
typedef struct par_st_writer par_st_writer;

/* Start a file at `path`: creates the temporary file next to it at once, so
   an unwritable directory fails here (PAR_EIO naming the temporary file).
   Nothing is done to `path` itself before par_st_writer_finish. */
PARALLEL_DEF par_status par_st_writer_create(const char *path, par_st_writer **writer);

/* Declare tensor `name` of `dtype` and shape[0..ndim) (ndim 0..PARALLEL_MAX_DIMS;
   shape may be NULL when ndim is 0). The name is any UTF-8 string except
   "__metadata__", unique (checked when the layout is fixed: by the first
   par_st_writer_write or by finish). data: its numel * element size bytes, or
   NULL to stream them with par_st_writer_write. PAR_EINVAL on a bad argument
   or once streaming has begun. */
PARALLEL_DEF par_status par_st_writer_add(par_st_writer *w, const char *name, par_dtype dtype, int ndim,
                                          const int64_t *shape, const void *data);

/* Set a metadata string (both are copied; setting a key again replaces its
   value). Keys starting with "par.crc32." are reserved (PAR_EINVAL). */
PARALLEL_DEF par_status par_st_writer_metadata(par_st_writer *w, const char *key, const char *value);

/* Stream the next `count` elements of tensor `name`, which was added with
   data == NULL. A tensor's pieces come in order; different tensors may come
   in any order. The first call fixes the layout and writes the header: no
   more add or metadata. PAR_EINVAL (unknown name, not a streamed tensor, more
   elements than it has), PAR_EIO (write failure). A failure that loses the
   save (write failure, duplicate names) is reported again by every later
   write and by finish. */
PARALLEL_DEF par_status par_st_writer_write(par_st_writer *w, const char *name, const void *data, int64_t count);

/* Write the pointer tensors, check every streamed tensor is complete, write
   the checksums, fsync, rename over `path` (and fsync its directory). Frees
   the writer on success and on error; on error the temporary file is removed
   and `path` is untouched. Errors: PAR_EINVAL (duplicate name, incomplete
   streamed tensor), PAR_EIO (write, sync or rename failure: e.g. `path` is a
   directory), PAR_ENOMEM. */
PARALLEL_DEF par_status par_st_writer_finish(par_st_writer *w);

/* Free the writer and remove its temporary file without touching `path`
   (NULL is ignored). */
PARALLEL_DEF void par_st_writer_abort(par_st_writer *w);

#endif /* PARALLEL_NO_CHECKPOINT */

/* ============================================================================
   >>trace
   Per-rank timelines of compute and communication as Chrome trace JSON
   (the "Trace Event Format"), for Perfetto (ui.perfetto.dev) and
   chrome://tracing: one process per rank (pid = rank, named "rank N"), one
   track per category ("compute", "comm", "optimizer", "io", ...; thread ids
   0, 8, 16, 24, ... in first-registered order, those four first) so a
   collective in flight shows beside the compute it overlaps.

   A span is a named interval of one rank's time: par_trace_begin/end nest on
   the rank's thread (a stack), par_trace_span records one after the fact (an
   async collective issued at t0 and waited for at t1). Spans of one category
   that overlap without nesting (two buckets' collectives in flight at once)
   are put on extra tracks of that category ("comm #2", thread id + 1, ...),
   because the viewers draw a track as a stack of properly nested slices.

   Memory is bounded: a trace keeps at most `capacity` spans (storage grows by
   doubling up to it); later spans, and spans nested deeper than
   PAR_TRACE_MAX_DEPTH, are counted as dropped (par_trace_dropped; the file
   says so in a "process_labels" metadata event of that rank), never an error.

   Time is par_trace_now_us(): CLOCK_MONOTONIC where <time.h> declares it
   (define _POSIX_C_SOURCE 199309L or later before including it), else C11
   timespec_get(TIME_UTC). Ranks on one host share that clock; ranks on
   different hosts are not aligned (each host's clock is its own).
   The file's timestamps count from the earliest span of all ranks.

   Device compute tables run kernels asynchronously: a span around a kernel
   launch measures the launch, not the kernel, unless the host synchronizes.

   A trace is used by one thread at a time (each rank its own). Errors name
   the function and the rank ("par_trace_end: rank 2: no span is open").
   ========================================================================== */
#ifndef PARALLEL_NO_TRACE /* the whole section; see CONFIGURATION MACROS */

#define PAR_TRACE_NAME_MAX 48      /* bytes of a span name incl. the 0; longer names are cut (at a UTF-8 boundary) */
#define PAR_TRACE_CATEGORY_MAX 16  /* bytes of a category incl. the 0; cut likewise */
#define PAR_TRACE_MAX_DEPTH 64     /* open begin/end spans per trace; deeper ones are dropped */
#define PAR_TRACE_MAX_CATEGORIES 8 /* distinct categories per trace (tracks 0, 8, ..., 56) */
#define PAR_TRACE_DEFAULT_CAPACITY (1 << 16)

typedef struct par_trace par_trace;

typedef struct par_trace_desc {
    int rank;                 /* the pid of this rank's events; >= 0 */
    int capacity;             /* spans kept; 0 = PAR_TRACE_DEFAULT_CAPACITY */
    const char *process_name; /* the viewer's name for the rank; NULL = "rank N" (copied) */
} par_trace_desc;

/* Create an empty trace. PAR_EINVAL for a NULL argument, a negative rank or
   capacity; PAR_ENOMEM. *trace is NULL on failure. */
PARALLEL_DEF par_status par_trace_create(const par_trace_desc *desc, par_trace **trace);

/* Free the trace (NULL is ignored). */
PARALLEL_DEF void par_trace_destroy(par_trace *trace);

/* Microseconds on the trace clock (see above). */
PARALLEL_DEF double par_trace_now_us(void);

/* Open a span `name` of `category` now (both copied, cut to the sizes above;
   invalid UTF-8 bytes become '?'). Categories beyond PAR_TRACE_MAX_CATEGORIES
   distinct ones are PAR_ECAPACITY. PAR_EINVAL for NULL arguments. */
PARALLEL_DEF par_status par_trace_begin(par_trace *trace, const char *name, const char *category);

/* Close the innermost open span. PAR_EINVAL when none is open; that misuse is
   also remembered and reported again by the writers. */
PARALLEL_DEF par_status par_trace_end(par_trace *trace);

/* Record a finished span [t0_us, t1_us] (par_trace_now_us times), e.g. an async
   collective from its issue to the end of its wait. PAR_EINVAL for NULL
   arguments, non-finite times or t1_us < t0_us. */
PARALLEL_DEF par_status par_trace_span(par_trace *trace, const char *name, const char *category, double t0_us,
                                       double t1_us);

/* Spans recorded (closed) and spans dropped for lack of room; 0 for NULL. */
PARALLEL_DEF int64_t par_trace_count(const par_trace *trace);
PARALLEL_DEF int64_t par_trace_dropped(const par_trace *trace);

/* How much of the window [t0_us, t1_us] spans of `category` cover (*busy_us:
   their union, so nested or overlapping spans count once), and how much of
   that no span of the categories hidden_by[0..num_hidden) covers (*exposed_us;
   num_hidden 0 = every other category). For "comm" hidden by "compute" this is
   the communication time not overlapped by computation. Closed spans only.
   Either output may be NULL. PAR_EINVAL for NULL trace/category, a NULL
   hidden_by with num_hidden > 0, or t1_us < t0_us; PAR_ENOMEM. */
PARALLEL_DEF par_status par_trace_coverage(const par_trace *trace, const char *category, const char *const *hidden_by,
                                           int num_hidden, double t0_us, double t1_us, double *busy_us,
                                           double *exposed_us);

/* Write traces[0..count) (ranks of one process, e.g. par_run_threads' after
   they finished) as one Chrome trace JSON file:
     {"traceEvents":[...],"displayTimeUnit":"ms"}
   "X" events {"name","cat","ph":"X","ts","dur","pid","tid"} in microseconds
   with nanosecond digits, "M" events naming each process and track. Written
   atomically: a temporary file beside `path`, flushed to disk, renamed over it;
   on failure `path` is untouched. Errors: PAR_EINVAL (NULL argument, two traces
   with one rank, a trace with spans still open or a remembered misuse),
   PAR_EIO (cannot create/write/rename; names the file), PAR_ENOMEM. */
PARALLEL_DEF par_status par_trace_write(par_trace *const *traces, int count, const char *path);

/* The same for one trace per rank across the context's world (threads, MPI or
   NCCL): collective over all ranks of the mesh. Every rank sends its spans to
   the group's first rank, which writes `path` (other ranks may pass NULL);
   device comm tables get staged copies in the compute table's memory. Every
   rank returns the same status; a rank's local problem (NULL trace, open spans,
   misuse) fails everyone, with the reason on that rank and "rank R could not
   contribute its events" elsewhere. Returns with nothing sent when ctx is NULL. */
PARALLEL_DEF par_status par_trace_gather_write(par_ctx *ctx, par_trace *trace, const char *path);

#endif /* PARALLEL_NO_TRACE */
/* ============================================================================
   >>params
   Data and optimizer parallelism for any model. The host describes its
   parameters by layout (or by an operator strategy, through >>tensor-parallel);
   the set owns this rank's flat parameter, gradient and AdamW buffers (in the
   compute table's memory), reduces gradients in buckets as soon as they are
   ready so the reduction overlaps the host's backward, averages or sums them
   over the data-parallel ranks, accumulates over micro-batches, shards the
   optimizer state (ZeRO-1) and the gradients (ZeRO-2) over the data-parallel
   group, clips by a global norm that counts every parameter exactly once, and
   gathers whole tensors for checkpoints.

   The data-parallel ranks are the device dims that split the global batch
   (par_params_desc.batch): gradients are partial sums over them and the
   buckets are reduced over them. A parameter may not be split over them.

   A step, with M micro-batches:

       for (mb = 0; mb < M; mb++) {
           par_params_grads_begin(ps, mb, M);
           ... forward; backward: for each parameter i, accumulate into
               par_params_grad(ps, i, &g) and then par_params_grad_ready(ps, i) ...
           par_params_grads_wait(ps);
       }
       par_params_step(ps, &adamw, &stats);

   Buckets are consecutive parameters in declaration order up to bucket_bytes
   (a parameter with new_bucket = 1 starts a new one), each padded to a
   multiple of the data-parallel degree. They are reduced last bucket first
   (backward order), each as soon as all its parameters are ready and every
   later bucket has been launched: ranks may mark parameters ready in any
   order and still issue the same collectives in the same order.
   Every call is made by all ranks of the context (collective), unless its
   comment says otherwise.
   ========================================================================== */

/* Which parameters get AdamW's decoupled weight decay. */
typedef enum par_decay {
    PAR_DECAY_AUTO = 0, /* tensors of rank >= 2 (matrices, embeddings), not norms and biases */
    PAR_DECAY_ON,
    PAR_DECAY_OFF
} par_decay;

typedef struct par_param_desc {
    const char *name;      /* unique, non-empty; copied; used in messages and checkpoints */
    par_layout layout;     /* global shape and tensor map on the context's mesh; no partial dims */
    uint32_t grad_partial; /* device dims, besides the data-parallel ones, over which this rank's
                              gradient is a partial sum (e.g. a norm weight under sequence
                              parallelism: the tensor-parallel dims); they must hold copies
                              of the parameter (not split it). Summed before the bucket reduction */
    par_decay decay;
    int new_bucket;        /* 1: this parameter starts a new gradient bucket */
} par_param_desc;

typedef struct par_params_desc {
    const par_param_desc *params;
    int num_params;
    const par_layout *batch; /* the global batch (e.g. tokens [batch, seq]); its split device
                                dims are the data-parallel dims. NULL: no data parallelism */
    int zero_level;          /* 0: replicated optimizer; 1: AdamW state sharded (ZeRO-1);
                                2: gradients sharded too (ZeRO-2); 3 is refused */
    int64_t bucket_bytes;    /* gradient bucket capacity; 0 = 25 MiB (PyTorch DDP's default),
                                < 0 = unbounded (only new_bucket starts buckets) */
    int grad_slots;          /* ZeRO-2: bucket gradient buffers kept (0 = 2, double buffering);
                                more are added only if the host keeps more buckets open */
    int sum_gradients;       /* 1: sum gradients over the data-parallel ranks (MindSpore
                                gradients_mean: false); 0: average them */
    struct par_trace *trace; /* optional: bucket collectives as "comm" spans, the optimizer
                                as "optimizer" spans */
    uint32_t stage_dims;     /* device dims along which ranks hold different parameters
                                (pipeline stages: each stage describes only its own); never
                                copies, so the norm counts every stage's parameters and the
                                loss sums over these dims too. 0 = none */
} par_params_desc;

typedef struct par_params par_params;

/* Create the set: check every parameter (layout on the context's mesh, not split
   over a data-parallel dim, unique name, grad_partial dims that hold copies),
   form the buckets, allocate this rank's buffers (values zero; see
   par_params_broadcast and par_params_set_local to fill them). Errors:
   PAR_EINVAL / PAR_ELAYOUT naming the parameter and the rule, PAR_EUNSUPPORTED
   for zero_level 3, PAR_ENOMEM. Collective (it creates communication groups). */
PARALLEL_DEF par_status par_params_create(par_ctx *ctx, const par_params_desc *desc, par_params **ps);
PARALLEL_DEF void par_params_destroy(par_params *ps);

/* Number of parameters; index of the one called `name` (-1 if none). Local. */
PARALLEL_DEF int par_params_count(const par_params *ps);
PARALLEL_DEF int par_params_find(const par_params *ps, const char *name);

/* What this rank holds of parameter i. */
typedef struct par_param_info {
    const char *name;
    par_layout layout;
    int64_t numel;                             /* elements of this rank's slice */
    int64_t local_shape[PARALLEL_MAX_DIMS];    /* the slice's shape (row-major in memory) */
    int64_t start[PARALLEL_MAX_DIMS];          /* where it starts in the global tensor */
    int bucket;
    int decay;                                 /* 1: weight decay applies */
    uint32_t replica_dims;                     /* device dims holding copies of this slice */
    uint32_t grad_partial;                     /* device dims its local gradient is partial over
                                                  (the data-parallel ones included) */
} par_param_info;
PARALLEL_DEF par_status par_params_info(const par_params *ps, int i, par_param_info *info);

/* This rank's slice of parameter i (compute-table memory, row-major). Local. */
PARALLEL_DEF float *par_params_value(par_params *ps, int i);

/* Memory the set holds per category (bytes): what it allocated at creation,
   i.e. what a host puts in its memory plan. Local. */
PARALLEL_DEF par_status par_params_memory(const par_params *ps, int64_t bytes[PAR_MEM_CATEGORY_COUNT]);

/* Start micro-batch mb of num (0 <= mb < num): gradients start at zero with
   mb 0 and accumulate over the micro-batches. Local. */
PARALLEL_DEF par_status par_params_grads_begin(par_params *ps, int micro_batch, int num_micro_batches);

/* Where the host accumulates (+=) parameter i's gradient during this
   micro-batch, shaped like its slice; valid until par_params_grad_ready(ps, i).
   Under ZeRO-2 the bucket gets a zeroed buffer when first asked for (waiting
   for an earlier bucket's reduction to free one if needed). Local, except
   that it may wait for this rank's earlier collectives. */
PARALLEL_DEF par_status par_params_grad(par_params *ps, int i, float **grad);

/* Parameter i's gradient is complete for this micro-batch. Launches (async)
   the reductions of the buckets that are now complete, in bucket order. */
PARALLEL_DEF par_status par_params_grad_ready(par_params *ps, int i);

/* End of the micro-batch: every parameter must have been marked ready (else
   PAR_EINVAL naming one that was not); waits for the reductions in flight. */
PARALLEL_DEF par_status par_params_grads_wait(par_params *ps);

/* AdamW with PyTorch semantics (decoupled weight decay, bias correction). */
typedef struct par_adamw {
    float lr, beta1, beta2, eps, weight_decay;
    float max_grad_norm; /* clip the global norm to this (PyTorch clip_grad_norm_); 0 = no clipping */
} par_adamw;

typedef struct par_step_stats {
    double grad_norm; /* global L2 norm of the reduced gradients, before clipping */
    float clip;       /* factor the gradients were scaled by (1 = none) */
    int64_t step;     /* AdamW steps taken so far, this one included */
} par_step_stats;

/* The optimizer step after the last micro-batch's par_params_grads_wait:
   global gradient norm (each parameter counted once: a rank counts the
   elements it holds of a parameter only where its index is 0 on the
   parameter's copy dims; the sums are all-reduced over the mesh), optional
   clipping, AdamW on this rank's slice or ZeRO shard, and under ZeRO the
   all-gather of the updated parameters. stats may be NULL. */
PARALLEL_DEF par_status par_params_step(par_params *ps, const par_adamw *opt, par_step_stats *stats);

/* AdamW steps taken (bias correction); set it when resuming. Local. */
PARALLEL_DEF int64_t par_params_step_count(const par_params *ps);
PARALLEL_DEF par_status par_params_set_step(par_params *ps, int64_t step);

/* Every rank's parameter slices := those of the first rank of its copy group
   (all copies start equal). */
PARALLEL_DEF par_status par_params_broadcast(par_params *ps);

/* This rank's slice of the batch's first dim (the samples) as a data loader
   shards a dataset (MindSpore's num_shards / shard_id): *shard_id in
   [0, *num_shards). 0 of 1 without a batch layout. Local. */
PARALLEL_DEF par_status par_params_data_shard(const par_params *ps, int *shard_id, int *num_shards);

/* The mean loss over the whole global batch: *sum and *count (this rank's
   summed per-token losses and token count) are summed over the data-parallel
   ranks (and the stage dims: stages without the loss pass 0 and 0) in place;
   the mean is *sum / *count. Not a mean of per-rank means. */
PARALLEL_DEF par_status par_params_reduce_loss(par_params *ps, double *sum, double *count);

/* What par_params_gather / par_params_set_local move. */
typedef enum par_param_field {
    PAR_PARAM_VALUE = 0,
    PAR_PARAM_EXP_AVG,    /* AdamW first moment */
    PAR_PARAM_EXP_AVG_SQ  /* AdamW second moment */
} par_param_field;

/* The whole tensor i (global shape, row-major f32) into host memory `whole` on
   every rank that passes one (NULL elsewhere): ZeRO shards and tensor-parallel
   slices are gathered (planned redistributions). Collective over the mesh:
   every rank calls it for the same i in the same order. Uses workspace memory
   of the tensor's size (and of its bucket under ZeRO), kept until destroy. */
PARALLEL_DEF par_status par_params_gather(par_params *ps, par_param_field field, int i, float *whole);

/* Set this rank's slice of tensor i (host memory, its local shape, row-major),
   e.g. read from a checkpoint with par_st_read_slice; under ZeRO the moments
   keep only the part in this rank's shard. Local. */
PARALLEL_DEF par_status par_params_set_local(par_params *ps, par_param_field field, int i, const float *local);

/* A per-rank sum of a host double over the device dims in dev_mask (e.g. for
   metrics), through device memory when the compute table needs it. Collective
   over the group. */
PARALLEL_DEF par_status par_ctx_all_reduce_host(par_ctx *ctx, uint32_t dev_mask, par_reduce_op op, par_dtype dtype,
                                                void *values, int count);

#ifndef PARALLEL_NO_CHECKPOINT
/* ---- sharded checkpoints ----------------------------------------------------
   Each rank writes only what it holds (no gather), and a checkpoint saved
   under one parallel configuration loads into any other (another mesh, dp,
   tp, ZeRO level, or one rank): a rank reads only the pieces that overlap
   what it holds now.

   On disk (POSIX systems; elsewhere PAR_EUNSUPPORTED):
       DIR/latest                                one line: the newest step directory
       DIR/step-00000020/model.safetensors.index.json
       DIR/step-00000020/shard-00003-of-00008.safetensors   (one per saving rank)
   The index is Hugging Face's sharded format: {"metadata": {"total_size":
   <bytes of all tensors>, "par.format": "parallel.h-sharded-1",
   "par.num_shards": "8", "par.step": "20", "host.<key>": "<value>"...},
   "weight_map": {"<stored tensor>": "<shard file>", ...}}.
   A piece is what one rank holds of one field of one parameter: a rectangle
   of the global tensor (its layout slice) and, for ZeRO-sharded moments, a
   flat element range of that rectangle. Only one copy of each piece is
   written, by one of the ranks holding copies of it (spread round-robin
   over the copies, so every rank of a data-parallel group writes). Stored
   names: "<param>", "exp_avg.<param>", "exp_avg_sq.<param>" (Hugging Face's
   own name and the global shape when the piece is the whole tensor), with
   "@<rank>" appended when the piece is part of it. Each shard's metadata
   describes its pieces: "par.piece.<stored name>" = "<field> <ndim> <global
   shape...> <start...> <slice shape...> <begin> <end> <param name>" (the
   name last, so it may contain spaces), plus "par.step", "par.num_shards",
   "par.shard", and in shard 0 the host metadata ("host.<key>"). Tensors
   carry CRC-32s (>>checkpoint) and are verified when loaded.

   Crash safety: the step directory is written under "step-N.tmp" (every file
   fsynced), all ranks agree that their shards are complete, rank 0 writes
   the index, fsyncs and renames the directory into place (and fsyncs DIR),
   then replaces DIR/latest atomically, and only then removes step
   directories beyond `keep`. A crash at any point leaves the previous
   checkpoint (and `latest` naming it, or the new one) complete; the next save
   removes what a killed one left. Every rank must see DIR (one host, or a
   shared file system); one save at a time per DIR. */

typedef struct par_ckpt_desc {
    const char *dir;                /* the checkpoint root; created (one level) if absent */
    int64_t step;                   /* the step directory's number (>= 0) */
    int keep;                       /* step directories kept after this save, newest
                                       first: 0 = 2; < 0 = all */
    const char *const *meta_keys;   /* host metadata (e.g. the data position, the seed, the
                                       configuration): num_meta non-empty keys, unique */
    const char *const *meta_values; /* and their values (any UTF-8) */
    int num_meta;
    int64_t buffer_bytes;           /* host bounce buffer when the parameters live in device
                                       memory (0 = 4 MiB); host memory is written in place */
    void (*on_stage)(void *user, const char *stage); /* optional, rank 0 only: called after
                                       "shards written", "index written", "renamed",
                                       "latest", "pruned" (e.g. a test kills itself there) */
    void *user;
} par_ckpt_desc;

/* Save the set (values, AdamW moments incl. ZeRO shards, the step count) as
   step directory desc->step under desc->dir. Collective: every rank calls it
   and every rank returns the same status (PAR_EIO naming the file on a write
   failure, PAR_EINVAL naming the setting on a bad desc). On failure the
   temporary directory is removed and the previous checkpoints are untouched. */
PARALLEL_DEF par_status par_params_save(par_params *ps, const par_ckpt_desc *desc);

/* What a checkpoint holds besides the tensors. Zero-initialize; filled by
   par_ckpt_inspect / par_params_load; par_ckpt_info_free releases it. */
typedef struct par_ckpt_info {
    int64_t step;        /* the AdamW step count saved */
    int has_moments;     /* the AdamW moments are present (else they load as zeros) */
    int num_shards;      /* the number of ranks that saved it */
    char dir[1024];      /* the step directory read */
    char *meta_;         /* host metadata: "key\0value\0"... (private) */
    int64_t meta_len_;
} par_ckpt_info;

/* The host metadata value for `key`, or NULL. */
PARALLEL_DEF const char *par_ckpt_metadata(const par_ckpt_info *info, const char *key);
PARALLEL_DEF void par_ckpt_info_free(par_ckpt_info *info);

/* Read a checkpoint's index and shard headers (no tensor data unless
   `verify`, which reads every tensor and checks its CRC-32), validating the
   structure: path is a step directory or a root holding `latest`. Local;
   needs no parameter set (e.g. a host's input checks before it starts).
   Errors name the file and the tensor: PAR_EIO (missing or unreadable file,
   checksum mismatch), PAR_EPARSE (malformed index or piece description). */
PARALLEL_DEF par_status par_ckpt_inspect(const char *path, int verify, par_ckpt_info *info);

/* Load a checkpoint into the set, whatever configuration saved it: each
   rank fills its slice (and its ZeRO range of the moments) from every piece
   that overlaps it, reading each such piece whole so its CRC-32 is checked,
   and the step count is restored. Every parameter of the set must be in the
   checkpoint with the same global shape, and every tensor of the checkpoint
   must be a parameter of the set (PAR_EINVAL / PAR_ESHAPE naming the file
   and tensor) unless the set has stage_dims (a pipeline stage loads its own
   tensors; the others are other stages'); a checkpoint without moments loads
   them as zeros. info may be
   NULL. Collective only in that every rank returns the same status (a rank
   whose read failed makes all fail; its message is in its own error). */
PARALLEL_DEF par_status par_params_load(par_params *ps, const char *path, par_ckpt_info *info);
#endif /* PARALLEL_NO_CHECKPOINT */

/* ============================================================================
   >>tensor-parallel
   Megatron's tensor parallelism for the host's layers, every collective
   derived from MindSpore operator strategies and run as a planned
   redistribution: column-parallel linears (W [out, in] split on out) and
   row-parallel ones (split on in), sequence parallelism (the residual stream
   split by rows over the tensor-parallel ranks too: all-gather before a
   column-parallel linear, reduce-scatter after a row-parallel one), the
   vocabulary-parallel embedding and cross-entropy (the full logits never
   exist on one rank) and the attention-head split.

   Activations are [rows, features], row-major. `n` is the rows of this
   data-parallel rank's micro-batch (global rows / data-parallel degree); under
   sequence parallelism a rank holds par_tp_rows(tp, n) = n / degree of them
   (its block of the n rows), otherwise all n. Degree 1 needs no special case:
   every call then moves no data.

   The conjugate pairs (Megatron's f and g):
     par_tp_gather_rows   column-parallel input (forward), row-parallel output (backward)
     par_tp_reduce_rows   row-parallel output (forward), column-parallel input (backward)
   ========================================================================== */

typedef struct par_tp par_tp;

/* Multi-copy (MindSpore's micro_batch_interleave_num): a micro-batch's rows
   are cut into K copies that run the same layers, each copy on its own
   thread with its own par_tp (desc.copies, desc.copy) and buffers. On each
   rank one copy computes at a time; at a tensor-parallel collective the
   running copy hands the turn to the next copy and runs its collective while
   that one computes, then waits for its turn again. The turn goes round
   robin and every rank runs the same code, so each rank issues its
   collectives in the same order (one at a time, by ticket) and they meet.
   Results are those of running the copies one after another; other
   collectives inside the copies (the host's own) are not allowed: make them
   before or after par_copies_run. Without threads (PARALLEL_NO_THREADS) the
   copies run one after another. */
typedef struct par_copies par_copies;

/* K >= 1 copies on this rank (K = 1: par_copies_run calls fn once, inline).
   trace (optional): each stretch a copy holds the turn becomes a "compute"
   span "copy K", so the trace shows which copy computed while which copy's
   collective (a "comm" span of its par_tp) was in flight. */
PARALLEL_DEF par_status par_copies_create(par_ctx *ctx, int copies, struct par_trace *trace, par_copies **mc);
PARALLEL_DEF void par_copies_destroy(par_copies *mc);
/* fn(user, copy) for copy 0 .. K-1, interleaved as above; the first failure
   (its message too) is returned once every copy has stopped. */
PARALLEL_DEF par_status par_copies_run(par_copies *mc, par_status (*fn)(void *user, int copy), void *user);

typedef struct par_tp_desc {
    int64_t rows;           /* global rows of one micro-batch (all data-parallel ranks' tokens) */
    int64_t hidden;         /* features of the residual stream */
    const char *column;     /* MindSpore MatMul strategy of the column-parallel linears, x [rows, in]
                               . W^T with W [out, in]: ((x rows, x in), (W out, W in)), e.g.
                               "((dp,1),(tp,1))" (axis names of the mesh, or numbers: "((2,1),(4,1))"):
                               rows over the data-parallel ranks, out over the tensor-parallel ones */
    const char *row;        /* ... of the row-parallel linears, e.g. "((dp,tp),(1,tp))": in split over tp */
    int sequence_parallel;  /* Megatron sequence parallelism */
    int no_all_to_all;      /* plans never use all_to_all (MindSpore enable_alltoall: false) */
    struct par_trace *trace;/* optional: each blocking collective as a "comm" span */
    par_copies *copies;     /* optional: this region is copy `copy` of a multi-copy run */
    int copy;
} par_tp_desc;

/* Check the strategies against each other and the mesh (the row strategy's
   split contraction dims must be the column strategy's split output dims:
   the tensor-parallel dims; both split the rows over the same data-parallel
   dims) and make the group, planner and executor. Collective. */
PARALLEL_DEF par_status par_tp_create(par_ctx *ctx, const par_tp_desc *desc, par_tp **tp);
PARALLEL_DEF void par_tp_destroy(par_tp *tp);

typedef struct par_tp_info {
    int degree, index;       /* tensor-parallel group size, this rank's index in it */
    int data_degree;         /* data-parallel ranks the rows are split over */
    int sequence_parallel;
    uint32_t tp_dims, data_dims;
    par_layout residual;     /* the residual stream [rows, hidden] */
    double comm_us;          /* time spent in blocking collectives (with a trace) */
} par_tp_info;
PARALLEL_DEF par_status par_tp_get_info(const par_tp *tp, par_tp_info *info);

/* Rows of the residual stream this rank holds of n (n / degree under sequence
   parallelism, else n). */
PARALLEL_DEF int64_t par_tp_rows(const par_tp *tp, int64_t n);

/* The smallest row count >= n the region can split (a multiple of the degree
   under sequence parallelism), e.g. to pad a prompt. */
PARALLEL_DEF int64_t par_tp_pad_rows(const par_tp *tp, int64_t n);

/* Bytes of the region's own executor workspace (PAR_MEM_COMM) for
   activations of n rows and up to `cols` features: what a host plans. */
PARALLEL_DEF int64_t par_tp_workspace_bytes(const par_tp *tp, int64_t n, int64_t cols);

typedef enum par_linear_kind { PAR_LINEAR_COLUMN = 0, PAR_LINEAR_ROW } par_linear_kind;

/* One linear y = x W^T placed by its strategy. */
typedef struct par_linear {
    par_linear_kind kind;
    int64_t in, out;            /* global */
    int64_t in_local, out_local;/* this rank's W is [out_local, in_local] */
    int64_t in_start, out_start;/* first global in / out index of the slice */
    par_layout weight;          /* W [out, in] on the mesh */
    uint32_t grad_partial;      /* device dims its gradient is partial over (the data-parallel dims) */
} par_linear;

/* Place W [out, in] of a column- or row-parallel linear: par_op_infer on the
   kind's strategy with x [rows, in]; errors name `name`, the dim and sizes. Local. */
PARALLEL_DEF par_status par_tp_linear(const par_tp *tp, const char *name, par_linear_kind kind, int64_t in,
                                      int64_t out, par_linear *lin);

/* A norm weight [dim] (RMSNorm / LayerNorm gamma, replicated): its layout, and
   gradient partial over the dims that split its activation rows (the
   tensor-parallel dims under sequence parallelism). Local. */
PARALLEL_DEF par_status par_tp_norm_param(const par_tp *tp, const char *name, int64_t dim, par_param_desc *pd);

/* The parameter description of a linear's weight (name copied by the set). Local. */
PARALLEL_DEF par_status par_tp_linear_param(const par_linear *lin, const char *name, par_param_desc *pd);

/* Heads this rank computes: q heads split over the tensor-parallel ranks, kv
   heads too; kv heads are never replicated, so both must be divisible by
   the degree (GQA groups stay whole on a rank). PAR_ESHAPE naming the count. Local. */
PARALLEL_DEF par_status par_tp_heads(const par_tp *tp, int64_t heads, int64_t kv_heads, int64_t *heads_local,
                                     int64_t *kv_heads_local);

/* Column-parallel input / row-parallel output gradient: this rank's residual
   rows x [par_tp_rows(n), cols] -> all n rows. *full = x when no data moves,
   else `work` [n, cols] receives them. */
PARALLEL_DEF par_status par_tp_gather_rows(par_tp *tp, int64_t n, int64_t cols, const float *x, float *work,
                                           const float **full);

/* Row-parallel output / column-parallel input gradient: partial sums over the
   tensor-parallel ranks p [n, cols] -> their sum on this rank's residual rows:
   *out = p (all-reduced in place) or, under sequence parallelism, `work`
   [par_tp_rows(n), cols] (reduce-scatter). */
PARALLEL_DEF par_status par_tp_reduce_rows(par_tp *tp, int64_t n, int64_t cols, float *p, float *work, float **out);

/* All columns of a column-parallel linear's output y [nrows, out_local] ->
   full [nrows, out] (e.g. the vocabulary of one row of logits for sampling).
   Collective over the tensor-parallel group only. */
PARALLEL_DEF par_status par_tp_gather_columns(par_tp *tp, const par_linear *lin, int64_t nrows, const float *y,
                                              float *full);

/* The token embedding [vocab, dim]: replicated (MindSpore vocab_emb_dp) or
   split by vocabulary rows over the tensor-parallel ranks (partial lookups
   summed over them). */
typedef struct par_embedding {
    int vocab_parallel;
    int64_t vocab, dim;
    int64_t rows_local, row_start; /* this rank's table rows */
    par_layout table;
    uint32_t grad_partial;
} par_embedding;

/* Place the table (Gather strategy ((1,1),(data,)) or ((tp,1),(data,))). Local. */
PARALLEL_DEF par_status par_tp_embedding(const par_tp *tp, const char *name, int64_t vocab, int64_t dim,
                                         int vocab_parallel, par_embedding *emb);
PARALLEL_DEF par_status par_tp_embedding_param(const par_embedding *emb, const char *name, par_param_desc *pd);

/* out [par_tp_rows(n), dim] = the embeddings of this rank's rows of ids [n]
   (all n ids of the micro-batch); work [n, dim] when vocab-parallel. */
PARALLEL_DEF par_status par_tp_embedding_fwd(par_tp *tp, const par_embedding *emb, int64_t n, const int32_t *ids,
                                             const float *table, float *out, float *work);
/* dtable += the gradient from dout [par_tp_rows(n), dim]; work [n, dim] when
   vocab-parallel under sequence parallelism. */
PARALLEL_DEF par_status par_tp_embedding_bwd(par_tp *tp, const par_embedding *emb, int64_t n, const int32_t *ids,
                                             const float *dout, float *dtable, float *work);

/* Softmax cross-entropy over the vocabulary of a column-parallel head
   (logits [n, head->out_local], this rank's vocabulary shard): per-row losses
   [n] (every rank gets all n) and, in place of the logits, this shard's
   dlogits = (softmax - onehot) * scale. Negative targets are ignored rows.
   work holds 3n floats. The full logits never exist on one rank. */
PARALLEL_DEF par_status par_tp_cross_entropy(par_tp *tp, const par_linear *head, int64_t n, float *logits,
                                             const int32_t *targets, float *losses, float scale, float *work);

/* ============================================================================
   >>context-parallel
   Attention over a sequence split across ranks (context parallelism), for any
   model whose attention is the compute table's flash attention. Every other
   part of a transformer layer works token by token, so a host that gives each
   rank its tokens (par_cp_positions) and calls par_cp_attention_fwd / _bwd in
   place of the table's attention_fwd / attention_bwd trains exactly as on one
   device; the parameters' gradients are then partial over the cp ranks too,
   which >>params handles when the batch layout splits the sequence over them.

   The context-parallel ranks are the device dims that split the sequence dim
   of the tokens layout [batch, seq] (e.g. "[dp,cp]"). Three algorithms:
     ring     (MindFormers colossalai_cp) each rank keeps its queries; K/V
              blocks travel the ring (to the next rank, from the previous one),
              double-buffered so the next block's transfer is in flight while
              the current block is computed; partial outputs are merged by their
              log-sum-exp in f32. Backward circulates K/V again with f32 dK/dV
              accumulators that come home after a full turn.
     Ulysses  (DeepSpeed, ulysses_cp) one all-to-all turns [tokens/P, heads]
              into [tokens, heads/P] (q, k and v in one call), attention runs
              on whole sequences for a slice of the heads, and a second one
              turns the output back. With fewer kv heads than P, each kv head
              is sent to P/kv_heads ranks and the copies' gradients are summed
              (P must be a multiple of kv_heads, or kv_heads of P).
              no_all_to_all replaces each all-to-all by an all-gather and a
              local slice (MindSpore's form when enable_alltoall is off).
     hybrid   (USP, hybrid_cp) Ulysses inside groups of ulysses_degree
              consecutive cp ranks, ring across the groups.

   Token order: for a ring of R ranks the sequence is cut into 2R chunks and
   ring rank r holds chunks r and 2R-1-r (zigzag: every step of a causal ring
   then costs the same), or into R blocks (contiguous: rank r's causal work
   grows with r). A Ulysses group cuts its ring rank's tokens into U
   consecutive pieces, cp index = ring index x U + Ulysses index. Positions
   travel with the tokens (the kernels' q_pos/k_pos), so no S x S mask ever
   exists and RoPE uses the same positions. The sequence must split: seq a
   multiple of the cp degree, and under zigzag with a ring also of twice the
   ring degree; otherwise par_cp_create refuses it with the numbers (pad the
   data; the library does not pad silently). With one ring rank (Ulysses)
   the order is contiguous.

   Shapes (row-major, f32): q [batch, seq_local, heads, head_dim], i.e. the
   host's [batch x seq_local, heads x head_dim] activations; k and v with
   kv_heads; o like q. lse (par_cp_info.lse_floats) and saved
   (.saved_floats, 0 for the ring) are per-call state the host keeps from
   forward to backward, in whatever layout the algorithm uses. Heads are this
   rank's (after tensor parallelism). Every call is collective over the
   context-parallel group.
   ========================================================================== */

typedef enum par_cp_algo {
    PAR_CP_RING = 0, /* "ring" or MindFormers' "colossalai_cp" */
    PAR_CP_ULYSSES,  /* "ulysses" or "ulysses_cp" */
    PAR_CP_HYBRID    /* "hybrid", "hybrid_cp" (and the seeds' spelling "hybird_cp") */
} par_cp_algo;

/* Parse an algorithm name (case-insensitive); PAR_EINVAL listing the accepted
   names otherwise. */
PARALLEL_DEF par_status par_cp_algo_parse(const char *text, par_cp_algo *algo);
/* "ring", "ulysses", "hybrid". */
PARALLEL_DEF const char *par_cp_algo_name(par_cp_algo algo);

typedef struct par_cp_desc {
    const par_layout *tokens; /* [global batch, seq]: the dims splitting seq are the cp dims */
    par_cp_algo algo;
    int ulysses_degree;       /* hybrid: cp ranks per Ulysses group (divides the cp degree, 0 = 1);
                                 ignored by ring (1) and Ulysses (the cp degree) */
    int contiguous;           /* 1: rank r holds block r of the sequence; 0: zigzag chunks */
    int batch;                /* samples per attention call on this rank (its micro-batch) */
    int heads, kv_heads, head_dim; /* this rank's q and kv heads (heads % kv_heads == 0) */
    int full_attention;       /* 1: every token sees every token; 0: causal (decoders) */
    float scale;              /* 0 = 1/sqrt(head_dim) */
    int no_all_to_all;        /* Ulysses through all-gather + local slice */
    struct par_trace *trace;  /* optional: all-to-alls and ring waits as "comm" spans,
                                 attention blocks as "compute" spans */
} par_cp_desc;

typedef struct par_cp par_cp;

/* Check the desc (errors name the rule and the numbers: sequence split,
   heads vs the Ulysses degree, ulysses_degree vs the cp degree), make the
   groups and allocate the workspace (compute-table memory, reported by
   par_cp_memory). Collective over the mesh. */
PARALLEL_DEF par_status par_cp_create(par_ctx *ctx, const par_cp_desc *desc, par_cp **cp);
PARALLEL_DEF void par_cp_destroy(par_cp *cp);

typedef struct par_cp_info {
    int degree, index;               /* cp ranks, this rank's cp index */
    int ring_degree, ring_index;
    int ulysses_degree, ulysses_index;
    int zigzag;                      /* 1: zigzag chunks, 0: contiguous blocks */
    par_cp_algo algo;
    uint32_t cp_dims;                /* device dims splitting the sequence */
    int64_t seq, seq_local;          /* tokens of a sequence; this rank's */
    int64_t lse_floats, saved_floats;/* per attention call, kept by the host for backward */
    double comm_us;                  /* time in all-to-alls and ring waits (with a trace) */
} par_cp_info;
PARALLEL_DEF par_status par_cp_get_info(const par_cp *cp, par_cp_info *info);

/* The global positions (0..seq-1) of this rank's seq_local tokens, in the
   order the rank holds them (host memory): which tokens to load, and the
   positions for RoPE. Local. */
PARALLEL_DEF par_status par_cp_positions(const par_cp *cp, int64_t *pos);
/* The same for cp index `index` (0..degree-1). Local. */
PARALLEL_DEF par_status par_cp_positions_of(const par_cp *cp, int index, int64_t *pos);

/* Bytes the object allocated per category (its workspace): for the memory plan. Local. */
PARALLEL_DEF par_status par_cp_memory(const par_cp *cp, int64_t bytes[PAR_MEM_CATEGORY_COUNT]);

/* Causal attention of this rank's queries over the whole sequence. */
PARALLEL_DEF par_status par_cp_attention_fwd(par_cp *cp, const float *q, const float *k, const float *v, float *o,
                                             float *lse, float *saved);
/* Gradients dq, dk, dv (overwritten; this rank's tokens) from the forward's
   q, k, v, o, lse and saved, and do_ = dL/do. */
PARALLEL_DEF par_status par_cp_attention_bwd(par_cp *cp, const float *q, const float *k, const float *v,
                                             const float *o, const float *lse, const float *saved, const float *do_,
                                             float *dq, float *dk, float *dv);

/* ============================================================================
   >>pipeline
   Pipeline parallelism with schedules as data. A schedule is, for each stage
   rank, an ordered list of actions; generators make GPipe, 1F1B, interleaved
   1F1B and zero-bubble ZB-H1 lists, a text form dumps and loads them (so a
   user can write their own), a checker runs a schedule on paper before it
   runs for real, and an executor walks one rank's list calling the host's
   forward / backward callbacks and moving activations and their gradients
   between neighbouring stages through the comm table.

   Model chunks: with `chunks` = v per rank the model's layers form p x v
   virtual stages; rank r holds virtual stages r, r + p, r + 2p, ... (its
   chunks 0 .. v-1), so virtual stage s = chunk x p + rank and its activations
   go to virtual stage s + 1 on rank (r + 1) % p. v = 1 is the plain pipeline;
   p = 1 is gradient accumulation, run by the same executor.

   Actions (their text form in brackets; m = micro-batch, c = chunk):
     F  forward of (m, c)                                       [F m c]
     B  backward of (m, c): input and weight gradients          [B m c]
     I  backward, input gradient only (zero bubble)             [I m c]
     W  backward, weight gradient only, after its I             [W m c]
     SA send the activation F produced to the next stage        [SA m c]
     RA receive the activation F needs from the previous stage  [RA m c]
     SG send the input gradient B/I produced to the previous    [SG m c]
     RG receive the gradient B/I needs from the next stage      [RG m c]
   Sends are asynchronous (they complete when the peer receives), receives
   wait: the checker models exactly that.
   ========================================================================== */

typedef enum par_pp_op {
    PAR_PP_F = 0, PAR_PP_B, PAR_PP_I, PAR_PP_W,
    PAR_PP_SEND_ACT, PAR_PP_RECV_ACT, PAR_PP_SEND_GRAD, PAR_PP_RECV_GRAD,
    PAR_PP_OP_COUNT
} par_pp_op;

typedef struct par_pp_action {
    int micro_batch, chunk;
    par_pp_op op;
} par_pp_action;

typedef enum par_pp_kind {
    PAR_PP_GPIPE = 0,     /* "gpipe": all forwards, then all backwards */
    PAR_PP_1F1B,          /* "1f1b": warm-up forwards, one forward one backward, cool-down */
    PAR_PP_INTERLEAVED,   /* "interleaved": 1F1B over v chunks per rank (Megatron's virtual stages) */
    PAR_PP_ZB_H1,         /* "zb-h1": 1F1B with backward split in I and W, W deferred into the bubbles */
    PAR_PP_KIND_COUNT
} par_pp_kind;

/* "gpipe", "1f1b", "interleaved", "zb-h1". */
PARALLEL_DEF const char *par_pp_kind_name(par_pp_kind kind);
/* By name (case-insensitive; also "interleaved_1f1b", "zbh1", "zero_bubble"); PAR_EINVAL
   listing the names otherwise. */
PARALLEL_DEF par_status par_pp_kind_parse(const char *text, par_pp_kind *kind);

typedef struct par_pp_schedule par_pp_schedule;

typedef struct par_pp_schedule_desc {
    int stages;        /* pipeline ranks p >= 1 */
    int chunks;        /* model chunks per rank v (0 = 1); > 1 only for interleaved */
    int micro_batches; /* m >= 1 */
    par_pp_kind kind;
} par_pp_schedule_desc;

/* Generate a schedule. Errors name the rule: interleaved needs m a multiple
   of p (Megatron's constraint) and v >= 2; other kinds v = 1. Any m >= 1
   works for the others (fewer micro-batches than stages leaves a larger
   bubble, it does not hang). */
PARALLEL_DEF par_status par_pp_schedule_make(const par_pp_schedule_desc *desc, par_pp_schedule **schedule);
/* An empty schedule to fill with par_pp_schedule_append (or par_pp_schedule_parse). */
PARALLEL_DEF par_status par_pp_schedule_create(int stages, int chunks, int micro_batches, par_pp_schedule **schedule);
PARALLEL_DEF par_status par_pp_schedule_append(par_pp_schedule *s, int rank, par_pp_op op, int micro_batch, int chunk);
PARALLEL_DEF void par_pp_schedule_destroy(par_pp_schedule *s);

PARALLEL_DEF int par_pp_schedule_stages(const par_pp_schedule *s);
PARALLEL_DEF int par_pp_schedule_chunks(const par_pp_schedule *s);
PARALLEL_DEF int par_pp_schedule_micro_batches(const par_pp_schedule *s);
/* Rank r's actions (count in *n); NULL for a bad rank. */
PARALLEL_DEF const par_pp_action *par_pp_schedule_actions(const par_pp_schedule *s, int rank, int *n);
/* The most micro-batches rank `rank` holds at once when a host keeps a whole
   micro-batch (all its chunks here) in one activation slot: from the first
   forward of any of its chunks to the last of their backwards (B, or W after
   I). The slots to allocate up front. */
PARALLEL_DEF par_status par_pp_schedule_slots(const par_pp_schedule *s, int rank, int *slots);

/* Text form: a header line "pipeline stages=P chunks=V micro_batches=M", then
   one line per rank "rank R: F 0 0, SA 0 0, RG 0 0, B 0 0, ..." (actions
   separated by commas; '#' starts a comment). Returns the length snprintf
   would; dump, edit and parse to write your own. */
PARALLEL_DEF int par_pp_schedule_format(const par_pp_schedule *s, char *buf, size_t size);
/* Parse it; PAR_EPARSE naming the line and token. The result is not checked:
   run par_pp_schedule_check. */
PARALLEL_DEF par_status par_pp_schedule_parse(const char *text, par_pp_schedule **schedule);

/* The checker's verdict and the schedule's figures. */
typedef struct par_pp_check {
    double bubble;            /* idle share of the ranks' time, with F = 1, B = 2, I = W = 1 */
    double makespan;          /* in those units */
    int peak_in_flight[64];   /* per rank (first 64): most micro-batch chunks whose F is done
                                 and whose B (or W) is not: activations held */
    int max_in_flight;
} par_pp_check;

/* Simulate every rank's list (sends buffered, receives waiting, F = 1,
   B = 2, I = W = 1 time units, transfers free) and check: each (micro-batch,
   virtual stage) has exactly one F and one backward (B, or I then W); F of a
   virtual stage after its input arrived (RA, or F of the previous stage on
   the same rank); B/I after its F and, except on the last virtual stage, its
   gradient arrived (RG); W after its I; every send after what it sends was
   produced, matched by the peer's receive of the same (micro-batch, chunk)
   in order; and no deadlock. On failure PAR_EINVAL with rank, step (the
   action's index) and action in the message, and (when grid != NULL) the
   per-rank grid of what each rank had done, up to where it stopped, written
   to grid (grid_size bytes). */
PARALLEL_DEF par_status par_pp_schedule_check(const par_pp_schedule *s, par_pp_check *result, char *grid,
                                              size_t grid_size);

/* The host's side of an executor run. Buffers are in the compute table's
   memory and stay untouched by the host from the action that uses them until
   par_pp_run returns (sends are asynchronous). */
typedef struct par_pp_callbacks {
    void *user;
    /* the forward of (micro_batch, chunk): reads its input (the received
       activation, or the host's own data on the first virtual stage) and
       writes its output */
    par_status (*forward)(void *user, int micro_batch, int chunk);
    /* its backward: op is PAR_PP_B (input and weight gradients), PAR_PP_I
       (input gradient) or PAR_PP_W (weight gradient); reads the received
       output gradient (none on the last virtual stage: the loss) */
    par_status (*backward)(void *user, int micro_batch, int chunk, par_pp_op op);
    /* where the stage boundary of (micro_batch, chunk) lives: its input or
       output activation (is_grad 0) or their gradients (is_grad 1), `count`
       floats */
    par_status (*buffer)(void *user, int micro_batch, int chunk, int is_grad, int is_input, float **ptr,
                         int64_t *count);
} par_pp_callbacks;

typedef struct par_pp_run_desc {
    const par_pp_schedule *schedule;
    uint32_t stage_dims;      /* device dims the stages are laid out along (this rank's stage = its
                                 index in that group); 0 with a one-stage schedule */
    par_pp_callbacks callbacks;
    struct par_trace *trace;  /* optional: actions as "compute" spans, receives as "comm" spans */
} par_pp_run_desc;

/* Run this rank's list of the schedule (collective over the stage group):
   activations travel on one group and gradients on another, so the two kinds
   never meet in one queue. */
PARALLEL_DEF par_status par_pp_run(par_ctx *ctx, const par_pp_run_desc *desc);

/* ============================================================================
   >>planner
   Automatic parallel (MindSpore's AUTO_PARALLEL). Two searches:

   1. An operator graph the host describes (ops with shapes and kinds, edges =
      tensors from one op's output to another's input), built by calls or read
      from a text form. Each op's candidates are its valid strategies
      (par_op_strategies, cheapest first) or the one strategy the host fixed
      (semi-auto). Costs, in seconds: an op's compute and forward + mirror
      communication as >>strategy derives them, its memory the input and
      output slices; an edge's the cheapest redistribution (>>redistribute)
      from the producer's output layout, after its forward communication, to
      the consumer's input layout. A search picks one candidate per op
      minimizing ops + edges with the ops' memory summed under a per-device
      cap:
        dynamic_programming    exact: a DP over a topological order whose
                               state is the strategies of the ops later edges
                               still need, keeping per state the Pareto set of
                               (memory, cost). On a chain this is MindSpore's
                               op/edge elimination + DP; it stays exact on
                               trees and DAGs with shared inputs, its work
                               growing with the graph's width.
        sharding_propagation   from the fixed ops along edges in both
                               directions, each new op taking the candidate
                               with the cheapest redistribution to its placed
                               neighbours (plus its own cost)
        recursive_programming  a fast one-pass heuristic: in topological
                               order each op takes the candidate cheapest
                               with its placed inputs (not MindSpore's
                               recursive partitioning of the device count)
      Every mode honours the cap: an op only takes a candidate that leaves
      room for the smallest candidates of the ops still open.

   2. A whole-plan search for a decoder-only transformer (llama) on a cluster
      (par_auto_search): dp x tp (+ sp) x cp (ring / ulysses) x pp (schedule,
      micro-batches) x ZeRO level, each predicted (per-rank memory, step
      time), cut with a reason or ranked.
   ========================================================================== */

typedef enum par_search_mode {
    PAR_SEARCH_DYNAMIC_PROGRAMMING = 0,
    PAR_SEARCH_SHARDING_PROPAGATION,
    PAR_SEARCH_RECURSIVE_PROGRAMMING,
    PAR_SEARCH_MODE_COUNT
} par_search_mode;

/* "dynamic_programming", "sharding_propagation", "recursive_programming". */
PARALLEL_DEF const char *par_search_mode_name(par_search_mode mode);
/* One of the names above (case-insensitive; also "dp", "propagation", "rec");
   PAR_EINVAL listing them otherwise. */
PARALLEL_DEF par_status par_search_mode_parse(const char *text, par_search_mode *mode);

typedef struct par_graph par_graph;

typedef struct par_graph_desc {
    int devices;             /* devices per stage (>= 1); the text form's "devices N" sets it when 0 */
    int max_candidates;      /* strategies kept per searched op, cheapest first; default 32 */
    double device_flops;     /* flop/s per device for ops that leave it 0 (default 1e12) */
    double link_bandwidth;   /* bytes/s per device, ops and edges (default 1e10) */
    double link_latency;     /* seconds per collective of a redistribution (default 0) */
    par_allocator allocator;
} par_graph_desc;

PARALLEL_DEF par_status par_graph_create(const par_graph_desc *desc, par_graph **graph);
PARALLEL_DEF void par_graph_destroy(par_graph *graph);

/* Add an op (copied; its name, default "op<id>", must be unique and at most 31
   bytes). `fixed` NULL: searched over its candidates; else that strategy only,
   checked now (PAR_ESTRATEGY naming the op). *id = its index (may be NULL). */
PARALLEL_DEF par_status par_graph_add_op(par_graph *graph, const par_op_desc *op, const par_strategy *fixed,
                                         int *id);
/* Output `out` of op `from` feeds input `in` of op `to`. A dangling edge (an
   op or port that does not exist, an input fed twice, element counts that
   differ) is PAR_EINVAL naming it. Cycles are found by the search. */
PARALLEL_DEF par_status par_graph_add_edge(par_graph *graph, int from, int out, int to, int in);

/* Text form, one item per line ('#' starts a comment):
     devices 8
     op NAME KIND SHAPE... [params=I,J] [dtype=bf16] [transpose_a] [transpose_b]
                           [reduce_scatter] [flops=F] [strategy=((2,1),(1,4))]
     edge FROM[.OUT] -> TO.IN
   SHAPE is one input's global shape "[16,64]"; KIND as par_op_kind_parse;
   `strategy=` fixes the op. Errors: PAR_EPARSE naming the line, or what
   add_op / add_edge say, prefixed with the line. */
PARALLEL_DEF par_status par_graph_parse(const char *text, const par_graph_desc *desc, par_graph **graph);

PARALLEL_DEF int par_graph_num_ops(const par_graph *graph);
PARALLEL_DEF int par_graph_num_edges(const par_graph *graph);
/* Op `op`'s name and candidate count (0 for a bad op). */
PARALLEL_DEF const char *par_graph_op_name(const par_graph *graph, int op);
PARALLEL_DEF int par_graph_num_candidates(const par_graph *graph, int op);
/* Candidate k of op `op`: its strategy, cost (seconds in total) and memory per device. */
PARALLEL_DEF par_status par_graph_candidate(const par_graph *graph, int op, int k, par_strategy *strategy,
                                            par_op_cost *cost);
/* Edge e's endpoints and its redistribution cost (seconds) when its producer
   takes candidate ka and its consumer kb. */
PARALLEL_DEF par_status par_graph_edge(const par_graph *graph, int e, int *from, int *out, int *to, int *in);
PARALLEL_DEF par_status par_graph_edge_cost(par_graph *graph, int e, int ka, int kb, double *cost);

typedef struct par_graph_result {
    double cost;          /* seconds: compute + comm + redistribution */
    double compute;       /* ops' compute */
    double comm;          /* ops' forward and mirror communication */
    double redistribution;/* edges */
    double memory_bytes;  /* per device: the ops' memory summed */
    int64_t states;       /* search states visited (Pareto points for the DP) */
} par_graph_result;

/* Choose a candidate for every op under `memory_cap` bytes per device (<= 0:
   none). Errors: PAR_EINVAL (a cycle, naming an op on it), PAR_ECAPACITY when
   nothing fits (the message gives the smallest plan's memory) or the DP's
   Pareto sets outgrow its limit (the graph is too wide: use another mode),
   PAR_ENOMEM. The choice stays in the graph for par_graph_chosen. */
PARALLEL_DEF par_status par_graph_search(par_graph *graph, par_search_mode mode, double memory_cap,
                                         par_graph_result *result);
/* The candidate index the last search chose for `op` (-1 before a search). */
PARALLEL_DEF int par_graph_chosen(const par_graph *graph, int op);
/* One line per op "NAME KIND strategy=... cost=... memory=...", then the totals.
   Returns the length snprintf would. */
PARALLEL_DEF int par_graph_format_result(const par_graph *graph, const par_graph_result *result, char *buf,
                                         size_t size);

/* ---- whole-plan search ---------------------------------------------------------- */

/* A cluster: `devices` in nodes of `devices_per_node`; bandwidths in bytes/s
   per device, latencies in seconds per collective step, memory in bytes and
   compute in flop/s per device. */
typedef struct par_cluster {
    int devices;
    int devices_per_node;   /* 0 = devices (one node) */
    double intra_bandwidth, intra_latency;
    double inter_bandwidth, inter_latency; /* 0 = the intra values (one node) */
    double memory_bytes;
    double flops;
    double memory_bandwidth; /* bytes/s a device streams through its memory; 0 = not counted */
    double activation_rate;  /* elements/s of a SwiGLU forward + backward (the activation function's
                                exp per element); 0 = not counted */
    double attention_rate;   /* flop/s of causal flash attention forward + backward, counted as the
                                model counts them (6 x keys x head_dim per query head and token);
                                0 = at flops */
    double attention_row_cost; /* seconds per query row and head of one attention call (forward +
                                  backward) beyond its flops: the per-row softmax bookkeeping that
                                  makes short blocks (ring steps) slow; 0 = not counted */
    double kernel_latency;   /* seconds each kernel call costs beyond its work (dispatch, waking
                                kernel threads); 0 = not counted */
    int node_parallelism;    /* ranks of one node that compute at full speed at once: ranks that
                                share a node's CPU cores (threads or processes) take turns beyond
                                it, so a node's summed work bounds the step; 0 = every rank
                                (one accelerator each) */
} par_cluster;

/* PAR_EINVAL naming the field and the rule: devices 1 to 2^24,
   devices_per_node dividing devices, bandwidths, memory and flops finite and
   > 0, latencies (kernel_latency too) finite, >= 0 and under an hour, the
   optional rates finite and >= 0, node_parallelism 0 to 2^24. */
PARALLEL_DEF par_status par_cluster_check(const par_cluster *cluster);
/* "key: value" lines ('#' comments): devices, devices_per_node,
   intra_node_bandwidth, intra_node_latency, inter_node_bandwidth,
   inter_node_latency, memory_per_device, flops_per_device and (optional)
   memory_bandwidth, activation_rate, attention_rate, attention_row_cost,
   kernel_latency, node_parallelism. Numbers may end in
   K, M, G, T (1e3...) or Ki, Mi, Gi, Ti (1024...). Unknown keys and bad
   numbers are PAR_EPARSE naming the line; then par_cluster_check. */
PARALLEL_DEF par_status par_cluster_parse(const char *text, par_cluster *cluster);

/* A decoder-only transformer (Llama: GQA attention, SwiGLU MLP, untied
   embedding and head, RMSNorms), f32 weights and AdamW state. */
typedef struct par_model_shape {
    int layers, hidden, heads, kv_heads, ffn, vocab, seq;
    int batch;            /* global batch: samples per step */
    par_dtype dtype;      /* activations and weights (default f32) */
} par_model_shape;

/* The MindFormers YAML keys num_layers, hidden_size, num_heads, n_kv_heads,
   intermediate_size, vocab_size, seq_length and batch_size, wherever they
   sit (other keys are ignored); PAR_EINVAL naming a missing or bad one. */
PARALLEL_DEF par_status par_model_shape_parse(const char *text, par_model_shape *model);

typedef struct par_auto_plan {
    int dp, tp, cp, pp;
    int sp;                  /* sequence parallel over tp */
    par_cp_algo cp_algo;     /* with cp > 1: ring or ulysses */
    par_pp_kind schedule;    /* with pp > 1 */
    int chunks;              /* model chunks per rank (interleaved: 2) */
    int micro_batches;       /* per step per dp rank (pp = 1: gradient accumulation) */
    int zero;                /* 0, 1 (optimizer state over dp x cp) or 2 (and gradients) */
    /* predictions, per rank (the busiest stage) */
    double memory_bytes;
    double weights_bytes, grads_bytes, optimizer_bytes, activation_bytes;
    double step_time;        /* seconds */
    double compute_time, tp_comm_time, cp_comm_time, pp_comm_time, dp_comm_time;
    double critical_time;    /* the busiest rank's own path: its compute and collectives stretched
                                by the bubble (the step when every rank has its own compute) */
    double shared_time;      /* ranks sharing a node's cores: its summed work over node_parallelism
                                (the step is the larger of the two); 0 = not bound by it */
    double bubble;           /* idle share of the pipeline (the >>pipeline checker's) */
} par_auto_plan;

/* Bits of par_auto_desc.search: which parallel modes to enumerate. */
enum {
    PAR_AUTO_DP = 1u << 0, PAR_AUTO_TP = 1u << 1, PAR_AUTO_SP = 1u << 2, PAR_AUTO_CP = 1u << 3,
    PAR_AUTO_PP = 1u << 4, PAR_AUTO_ZERO = 1u << 5, PAR_AUTO_ACCUMULATE = 1u << 6,
    PAR_AUTO_ALL = (1u << 7) - 1
};

typedef struct par_auto_desc {
    par_model_shape model;
    par_cluster cluster;
    double memory_cap;        /* bytes per rank; 0 = cluster.memory_bytes */
    uint32_t search;          /* PAR_AUTO_* bits; 0 = PAR_AUTO_ALL */
    uint32_t schedules;       /* bit per par_pp_kind; 0 = gpipe and 1f1b */
    uint32_t cp_algos;        /* bit per par_cp_algo (ring, ulysses); 0 = both */
    int max_micro_batches;    /* default 16 */
    int max_zero;             /* highest ZeRO level searched (0..2); default 2 */
    /* How the degrees (dp, tp, cp, pp) are searched; the other knobs are
       always enumerated for each degree tuple visited:
         dynamic_programming    every tuple (exact under the model)
         sharding_propagation   every tuple that keeps the degrees `fixed`
                                gives (> 0), the host's semi-auto choices
         recursive_programming  from pure dp, move one prime factor of dp
                                at a time to tp, cp or pp while the best
                                predicted step time falls (first toward
                                less memory while nothing fits): a few
                                tuples instead of all */
    par_search_mode mode;
    par_auto_plan fixed;      /* dp, tp, cp, pp > 0: kept (sharding_propagation; 0 = searched) */
    /* Optional: the host's own predictions (e.g. a trainer's memory plan) in
       place of the built-in model; called with the plan's fields set and
       the built-in predictions filled in. */
    const par_compute_table *compute; /* optional: the ranks' compute table; its scratch_bound sizes the
                                         kernels' own scratch in the memory prediction */
    void *user;
    double (*memory)(void *user, const par_auto_plan *plan);
    double (*step_time)(void *user, const par_auto_plan *plan);
} par_auto_desc;

/* Why candidate plans were cut: counts and one example sentence each. */
typedef struct par_auto_cuts {
    int64_t considered, ranked;
    int64_t not_divisible, over_memory, schedule;
    char not_divisible_example[160], over_memory_example[160], schedule_example[160];
    double smallest_memory;   /* the least memory any divisible plan needs */
} par_auto_cuts;

/* Enumerate dp x tp x cp x pp = cluster.devices with sp, the cp algorithm, the
   schedule, micro-batches and ZeRO level; predict each (memory per rank, step
   time); cut what does not divide, what the schedule refuses and what is
   over the cap; write the best min(count, capacity) plans, fastest first
   (*count: how many fit). Errors: PAR_EINVAL (bad model, cluster or desc),
   PAR_ECAPACITY when no plan fits the cap (the message gives the smallest
   plan's memory). `cuts` may be NULL. */
PARALLEL_DEF par_status par_auto_search(const par_auto_desc *desc, par_auto_plan *plans, int capacity, int *count,
                                        par_auto_cuts *cuts);
/* The predictions for one plan whose knobs are set (dp x tp x cp x pp =
   cluster.devices, sp, cp_algo, schedule, chunks, micro_batches, zero), as
   the search makes them (host callbacks included). PAR_EINVAL naming the
   rule when the degrees do not divide the model or the schedule is refused. */
PARALLEL_DEF par_status par_auto_predict(const par_auto_desc *desc, par_auto_plan *plan);
/* "dp=2 tp=4 sp cp=1 pp=2 1f1b m=4 zero=1" (the plan's knobs); returns the
   length snprintf would. */
PARALLEL_DEF int par_auto_plan_name(const par_auto_plan *plan, char *buf, size_t size);

/* Calibration: measure this machine's constants for a cluster description.
   Collective over the context's world (call it from every rank). Rank 0
   alone, with its kernel threads, while the others wait (a rank's own rates:
   what it gets when it has its cores to itself) times gemm_rows x n x n f32
   GEMMs, copies of `bytes` (memory bandwidth), SwiGLU forward + backward
   (activation rate), causal attention forward + backward of `seq` tokens at
   `head_dim` and of four times the samples of a quarter of the tokens (the
   same query rows, a quarter of the flops: their difference gives the
   attention rate, the rest a cost per query row) and calls of a tiny kernel
   (kernel latency).
   node_parallelism is how many ranks the host's cores run at once (cores /
   kernel threads per rank, at least 1; 0 for a device compute table): ranks
   beyond it take turns, which the prediction bounds by the node's summed
   work. Then over the world: an all-reduce of one float (latency: its time
   over the 2(p-1) ring steps; timed between 256^3 GEMMs against the same
   GEMMs without it, so the latency includes what waiting for unevenly
   arriving, oversubscribed ranks costs) and one of `bytes` (the bandwidth of
   the rest). Each figure is the fastest of `repeats` (a shared machine's
   neighbours slow some runs; the fastest is the machine's own rate). Writes
   devices = devices_per_node = the world size, memory_bytes from the desc.
   Takes about 0.1 to 0.3 s with the defaults (busy neighbours make it
   longer). */
typedef struct par_calibrate_desc {
    int gemm_size;        /* n of the timed GEMM (the model's hidden size); default 256 */
    int gemm_rows;        /* m of the timed GEMM (the tokens a rank holds); default gemm_size */
    int head_dim, seq;    /* of the timed attention; defaults 64 and 256 */
    int64_t bytes;        /* default 4 MiB */
    int repeats;          /* default 5 */
    double memory_bytes;  /* per device; default 8 GiB */
} par_calibrate_desc;

PARALLEL_DEF par_status par_calibrate(par_ctx *ctx, const par_calibrate_desc *desc, par_cluster *cluster);
/* The timed shapes of a model on `ranks` ranks under pure data parallelism:
   gemm_size = the hidden size, gemm_rows = the tokens a rank holds, head_dim
   and seq = the model's, each clamped into a range that times in tens of ms
   (gemm_size 16..1024; rows at least 16 and at most a 1-Gflop GEMM; head_dim
   1..256; seq 1..8192). The desc's other fields are left as they are.
   PAR_EINVAL naming a model size or rank count below 1. */
PARALLEL_DEF par_status par_calibrate_desc_for_model(const par_model_shape *model, int ranks, par_calibrate_desc *desc);
/* par_calibrate on `ranks` rank threads of this process (the threads backend,
   what a run on that many threads gets): rank 0's cluster into *cluster and
   its kernel threads (what par_cpu_desc.threads should be for the CPU table a
   rank of such a run has) into *kernel_threads (may be NULL). */
PARALLEL_DEF par_status par_calibrate_threads(int ranks, const par_calibrate_desc *desc, par_cluster *cluster,
                                              int *kernel_threads);
/* The cluster in par_cluster_parse's form (a profile file); returns the
   length snprintf would. */
PARALLEL_DEF int par_cluster_format(const par_cluster *cluster, char *buf, size_t size);

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

PARALLEL_DEF par_status par_set_error(par_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (fmt) vsnprintf(par__error_text, sizeof par__error_text, fmt, ap);
    else par__error_text[0] = 0;
    va_end(ap);
    return status;
}

/* Record a failure sentence and return its status: `return par__fail(...)`. */
/* Return a failing status of `call` to the caller (everywhere below). */
#define PAR__CHECK(call)                          \
    do {                                          \
        par_status par__check_ = (call);          \
        if (par__check_ != PAR_OK) return par__check_; \
    } while (0)

static PAR__PRINTF(2, 3) par_status par__fail(par_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(par__error_text, sizeof par__error_text, fmt, ap);
    va_end(ap);
    return status;
}

/* Host memory through an allocator; NULL or all hooks NULL = the PARALLEL_*
   macros. The hooks are called through parenthesised pointers so that a user's
   function-like malloc/realloc/free macros cannot expand here. */
static PAR__MAYBE_UNUSED void *par__alloc_malloc(const par_allocator *a, size_t size) {
    return a && a->malloc ? (*a->malloc)(size, a->user) : PARALLEL_MALLOC(size);
}
static PAR__MAYBE_UNUSED void *par__alloc_realloc(const par_allocator *a, void *ptr, size_t size) {
    if (!a || !a->realloc) return PARALLEL_REALLOC(ptr, size);
    return ptr ? (*a->realloc)(ptr, size, a->user) : (*a->malloc)(size, a->user);
}
static PAR__MAYBE_UNUSED void par__alloc_free(const par_allocator *a, void *ptr) {
    if (!ptr) return;
    if (a && a->free) (*a->free)(ptr, a->user);
    else PARALLEL_FREE(ptr);
}

/* PAR_OK if `a` (the field `what` of a desc; NULL counts as unset) has all three
   hooks or none; PAR_EINVAL naming the first missing hook otherwise. */
static PAR__MAYBE_UNUSED par_status par__allocator_check(const par_allocator *a, const char *what) {
    int set;
    if (!a) return PAR_OK;
    set = (a->malloc != NULL) + (a->realloc != NULL) + (a->free != NULL);
    if (set == 0 || set == 3) return PAR_OK;
    return par__fail(PAR_EINVAL, "%s: %s is NULL but %s set; set malloc, realloc and free, or none", what,
                     !a->malloc ? "malloc" : !a->realloc ? "realloc" : "free",
                     set == 2 ? "the other two are" : "another hook is");
}

/* Bounded string copy (snprintf("%s") makes gcc warn about truncation); used to
   keep an error sentence while later calls overwrite par_last_error(). */
static PAR__MAYBE_UNUSED void par__copy_text(char *dst, size_t size, const char *src) {
    size_t n = strlen(src);
    if (n >= size) n = size - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static const char *const par__dtype_names[PAR_DTYPE_COUNT] = {"f32", "bf16", "f16", "i32", "i64", "f64"};
static const size_t par__dtype_sizes[PAR_DTYPE_COUNT] = {4, 2, 2, 4, 8, 8};

PARALLEL_DEF size_t par_dtype_size(par_dtype dtype) {
    return (unsigned)dtype < PAR_DTYPE_COUNT ? par__dtype_sizes[dtype] : 0;
}

PARALLEL_DEF const char *par_dtype_name(par_dtype dtype) {
    return (unsigned)dtype < PAR_DTYPE_COUNT ? par__dtype_names[dtype] : "?";
}

/* bf16 / f16 <-> f32, rounding to nearest even: the backends reduce 16-bit
   floats in f32 and round once, so every backend gives the same bits. */

static PAR__MAYBE_UNUSED float par__bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static PAR__MAYBE_UNUSED uint16_t par__f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static PAR__MAYBE_UNUSED float par__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    float f;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        u = sign | ((e + 112u) << 23) | (m << 13);
    } else {
        f = (float)m * 5.9604644775390625e-8f; /* subnormal: m * 2^-24, exact */
        return sign ? -f : f;
    }
    memcpy(&f, &u, 4);
    return f;
}

static PAR__MAYBE_UNUSED uint16_t par__f32_to_f16(float f) {
    uint32_t u, sign, a, e, m, shift, rem, half, r;
    memcpy(&u, &f, 4);
    sign = (u >> 16) & 0x8000u;
    a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
    if (a >= 0x38800000u) {                                   /* normal f16 (>= 2^-14) */
        a += 0xfffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((a - (112u << 23)) >> 13));
    }
    if (a <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25 (the tie goes to even 0) */
    e = a >> 23;                                  /* 102..112 */
    m = (a & 0x7fffffu) | 0x800000u;
    shift = 126u - e; /* value in units of 2^-24 is m >> shift */
    rem = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    r = m >> shift;
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
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

/* "[4,6]": a shape for messages. */
static PAR__MAYBE_UNUSED void par__shape_text(char *buf, size_t size, int ndim, const int64_t *shape) {
    par__buf b;
    int i;
    par__buf_init(&b, buf, size);
    par__bprintf(&b, "[");
    for (i = 0; i < ndim; i++) par__bprintf(&b, "%s%lld", i ? "," : "", (long long)shape[i]);
    par__bprintf(&b, "]");
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
    const char *name_ptrs[PARALLEL_MAX_DIMS], *start;
    int n = 0, named = -1, bracket;
    if (!text || !mesh) return par__fail(PAR_EINVAL, "par_mesh_parse: NULL argument");
    s.text = s.p = text;
    bracket = par__accept(&s, '[');
    do {
        int64_t v;
        int has_name;
        if (n == PARALLEL_MAX_DIMS)
            return par__fail(PAR_EPARSE, "mesh '%.64s': more than %d axes", text, PARALLEL_MAX_DIMS);
        par__skip_space(&s);
        start = s.p;
        has_name = par__scan_ident(&s, names[n], PAR_NAME_MAX);
        if (has_name && !par__accept(&s, '=')) {
            if (named == 1)
                return par__fail(PAR_EPARSE, "mesh '%.64s': expected '=' after axis name at position %d", text,
                                 par__scan_pos(&s));
            /* a word where a size belongs ("2,x"), or a first word without "=size" */
            return par__fail(PAR_EPARSE, "mesh '%.64s': axis %d size '%s' at position %d is not an integer%s", text,
                             n, names[n], (int)(start - text), named < 0 ? " (nor name=size)" : "");
        }
        if (named >= 0 && has_name != named)
            return par__fail(PAR_EPARSE, "mesh '%.64s': name every axis or none (position %d)", text,
                             (int)(start - text));
        named = has_name;
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
    /* What the text says is no mesh (a name twice, "None", too many devices): still bad text. */
    if (par_mesh_init(mesh, n, dims, name_ptrs) != PAR_OK) {
        char why[sizeof par__error_text];
        par__copy_text(why, sizeof why, par_last_error());
        return par__fail(PAR_EPARSE, "mesh '%.64s': %s", text, why);
    }
    return PAR_OK;
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
        } else { /* "partial=0" or, the partial set being a set, the bare list "partial=0,2" */
            do {
                if (count >= mesh->ndim)
                    return par__fail(PAR_ELAYOUT, "layout '%.64s': the partial set at position %d lists more device dims "
                                     "than the mesh's %d", text, par__scan_pos(&s), mesh->ndim);
                if ((st = par__parse_dev_dim(&s, mesh, &d)) != PAR_OK) return st;
                devs[count++] = (int8_t)d;
            } while (par__accept(&s, ','));
        }
        for (k = 0; k < count; k++) {
            if (layout->map.partial & (1u << devs[k]))
                return par__fail(PAR_ELAYOUT, "layout '%.64s': device dim %d is listed twice in the partial set", text, devs[k]);
            layout->map.partial |= 1u << devs[k];
        }
    }
    par__skip_space(&s);
    if (*s.p)
        return par__fail(PAR_EPARSE,
                         "layout '%.64s': unexpected '%c' at position %d (a layout is \"[map] partial=dims\", "
                         "dims one device dim or several as 0,2 or (0,2))",
                         text, *s.p, par__scan_pos(&s));
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
    int t, valid;
    if (!layout || !local_shape) return;
    valid = par_layout_check(layout) == PAR_OK;
    if (layout->ndim < 0 || layout->ndim > PARALLEL_MAX_DIMS) return; /* the caller's array size is unknown */
    for (t = 0; t < layout->ndim; t++)
        local_shape[t] = valid ? layout->shape[t] / par_layout_shards(layout, t) : 0;
}

PARALLEL_DEF int64_t par_layout_local_numel(const par_layout *layout) {
    int64_t n = 1;
    int t;
    if (!layout || par_layout_check(layout) != PAR_OK) return 0;
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

/* Copy a slice between a global tensor and its row-major local buffer, one
   contiguous run at a time: the run covers the innermost dim and every dim
   inside the outermost one the slice leaves whole. */
static par_status par__layout_slice_io(const char *who, const par_layout *l, int rank, size_t elem_size,
                                       const void *src, void *dst, int place) {
    int64_t local[PARALLEL_MAX_DIMS], offset[PARALLEL_MAX_DIMS], index[PARALLEL_MAX_DIMS];
    size_t stride[PARALLEL_MAX_DIMS], run, numel = 1, runs, r, g;
    int t, k, nd;
    par_status st;
    if (!l || !src || !dst)
        return par__fail(PAR_EINVAL, "%s: NULL %s", who,
                         !l ? "layout" : (!src) == !place ? "global" : "local"); /* place reads local */
    if (elem_size == 0) return par__fail(PAR_EINVAL, "%s: elem_size is 0; it must be the bytes of one element", who);
    if ((st = par_layout_check(l)) != PAR_OK) return st;
    if (rank < 0 || rank >= par_mesh_size(&l->mesh))
        return par__fail(PAR_EINVAL, "%s: rank %d is outside the layout's mesh of %d devices", who, rank,
                         par_mesh_size(&l->mesh));
    nd = l->ndim;
    for (t = 0; t < nd; t++) numel *= (size_t)l->shape[t]; /* <= 2^62 by par_layout_check */
    if (numel > SIZE_MAX / elem_size)
        return par__fail(PAR_EINVAL, "%s: %llu elements of %llu bytes do not fit in memory addresses", who,
                         (unsigned long long)numel, (unsigned long long)elem_size);
    par_layout_local_shape(l, local);
    par_layout_local_offset(l, rank, offset);
    run = elem_size;
    for (t = nd - 1; t >= 0; t--) {
        stride[t] = run; /* bytes between neighbours along dim t of the global tensor */
        run *= (size_t)l->shape[t];
    }
    /* dims k..nd-1 form one run: all but dim k are whole */
    k = nd - 1;
    while (k > 0 && local[k] == l->shape[k]) k--;
    run = elem_size;
    for (t = nd - 1; t >= k && t >= 0; t--) run *= (size_t)local[t];
    runs = 1;
    for (t = 0; t < k; t++) {
        runs *= (size_t)local[t];
        index[t] = 0;
    }
    for (r = 0; r < runs; r++) {
        g = 0;
        for (t = 0; t < nd; t++) g += (size_t)(offset[t] + (t < k ? index[t] : 0)) * stride[t];
        if (place)
            memcpy((char *)dst + g, (const char *)src + r * run, run);
        else
            memcpy((char *)dst + r * run, (const char *)src + g, run);
        for (t = k - 1; t >= 0 && ++index[t] == local[t]; t--) index[t] = 0;
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_layout_copy_slice(const par_layout *layout, int rank, size_t elem_size, const void *global,
                                              void *local) {
    return par__layout_slice_io("par_layout_copy_slice", layout, rank, elem_size, global, local, 0);
}

PARALLEL_DEF par_status par_layout_place_slice(const par_layout *layout, int rank, size_t elem_size, const void *local,
                                               void *global) {
    return par__layout_slice_io("par_layout_place_slice", layout, rank, elem_size, local, global, 1);
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
    "cross_entropy", "reshape",      "transpose",   "flash_attention", "reduce_sum", "reduce_mean", "log_softmax",
    "l2_normalize",  "prelu",        "dropout",     "one_hot"};

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
    {"LogSoftmax", PAR_OP_LOG_SOFTMAX},
    {"L2Normalize", PAR_OP_L2_NORMALIZE},
    {"PReLU", PAR_OP_PRELU},
    {"Dropout", PAR_OP_DROPOUT},
    {"OneHot", PAR_OP_ONE_HOT},
};

/* Inputs each operator takes (ELEMENTWISE: the default of its 1..4). */
static const int par__st_natural_inputs[PAR_OP_COUNT] = {2, 2, 2, 2, 3, 1, 2, 2, 1, 1, 3, 1, 1, 1, 1, 2, 1, 1};

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

/* ", dp=2, tp=4" style list of a mesh's axes (for messages). */
static const char *par__st_axes_text(const par_mesh *mesh, char *buf, size_t size) {
    par__buf b;
    int i, named = 0;
    par__buf_init(&b, buf, size);
    for (i = 0; i < mesh->ndim; i++)
        if (mesh->names[i][0]) par__bprintf(&b, "%s%s", named++ ? ", " : "", mesh->names[i]);
    if (!named) par__bprintf(&b, "none: the mesh is unnamed");
    return buf;
}

/* An axis name as a shard: "None" is 1, a mesh axis its size (recorded in st). */
static par_status par__st_parse_name(par__scan *s, const par_mesh *mesh, par_strategy *st, int input, int dim) {
    char name[64], axes[160];
    const char *start = s->p;
    size_t n = 0;
    int i;
    while (*s->p == '_' || (*s->p >= 'A' && *s->p <= 'Z') || (*s->p >= 'a' && *s->p <= 'z') ||
           (*s->p >= '0' && *s->p <= '9')) {
        if (n + 1 < sizeof name) name[n++] = *s->p;
        s->p++;
    }
    name[n] = 0;
    if (strcmp(name, "None") == 0) {
        st->shard[input][dim] = 1;
        return PAR_OK;
    }
    if (!mesh)
        return par__fail(PAR_EPARSE,
                         "strategy '%.64s': '%s' at position %d is an axis name; par_strategy_parse takes numbers "
                         "only (use par_strategy_parse_mesh with the mesh that names the axes)",
                         s->text, name, (int)(start - s->text));
    for (i = 0; i < mesh->ndim; i++)
        if (mesh->names[i][0] && strcmp(mesh->names[i], name) == 0) {
            st->shard[input][dim] = mesh->dims[i];
            st->axis[input][dim] = (uint8_t)(i + 1);
            return PAR_OK;
        }
    return par__fail(PAR_EPARSE, "strategy '%.64s': '%s' at position %d is not an axis of the mesh (its axes: %s)",
                     s->text, name, (int)(start - s->text), par__st_axes_text(mesh, axes, sizeof axes));
}

/* One shard: an integer, or with a mesh an axis name; non-positive values
   parse but are not shards. */
static par_status par__st_parse_shard(par__scan *s, const par_mesh *mesh, par_strategy *st, int input, int dim) {
    const char *start;
    int64_t *shard = &st->shard[input][dim];
    par__skip_space(s);
    start = s->p;
    if (*s->p == '_' || (*s->p >= 'A' && *s->p <= 'Z') || (*s->p >= 'a' && *s->p <= 'z'))
        return par__st_parse_name(s, mesh, st, input, dim);
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
static par_status par__st_parse_tuple(par__scan *s, const par_mesh *mesh, int input, par_strategy *st) {
    par_status status;
    if (!par__accept(s, '(')) return par__st_expected(s, "'(' opening the shard tuple of input");
    st->ndim[input] = 0;
    while (!par__accept(s, ')')) {
        if (st->ndim[input] == PARALLEL_MAX_DIMS)
            return par__fail(PAR_EPARSE, "strategy '%.64s': input %d has more than %d shards (position %d)", s->text,
                             input, PARALLEL_MAX_DIMS, par__scan_pos(s));
        status = par__st_parse_shard(s, mesh, st, input, st->ndim[input]);
        if (status != PAR_OK) return status;
        st->ndim[input]++;
        if (!par__accept(s, ',') && !par__st_peek(s, ')')) return par__st_expected(s, "',' or ')'");
    }
    return PAR_OK;
}

static par_status par__st_parse(const char *text, const par_mesh *mesh, par_strategy *strategy) {
    par_strategy st;
    par__scan s;
    par_status status;
    int i, d, named = 0;
    memset(&st, 0, sizeof st);
    s.text = s.p = text;
    if (!par__accept(&s, '(')) return par__st_expected(&s, "'(' opening the strategy");
    while (!par__accept(&s, ')')) {
        if (st.num_inputs == PAR_MAX_INPUTS)
            return par__fail(PAR_EPARSE, "strategy '%.64s': more than %d input tuples (position %d)", text,
                             PAR_MAX_INPUTS, par__scan_pos(&s));
        if ((status = par__st_parse_tuple(&s, mesh, st.num_inputs, &st)) != PAR_OK) return status;
        st.num_inputs++;
        if (!par__accept(&s, ',') && !par__st_peek(&s, ')')) return par__st_expected(&s, "',' or ')'");
    }
    par__skip_space(&s);
    if (*s.p) return par__st_expected(&s, "the end of the text");
    for (i = 0; i < st.num_inputs; i++)
        for (d = 0; d < st.ndim[i]; d++) named |= st.axis[i][d] != 0;
    if (named) memcpy(st.names, mesh->names, sizeof(char) * PAR_NAME_MAX * (size_t)mesh->ndim);
    *strategy = st;
    return PAR_OK;
}

PARALLEL_DEF par_status par_strategy_parse(const char *text, par_strategy *strategy) {
    if (!text || !strategy) return par__fail(PAR_EINVAL, "par_strategy_parse: NULL argument");
    return par__st_parse(text, NULL, strategy);
}

PARALLEL_DEF par_status par_strategy_parse_mesh(const char *text, const par_mesh *mesh, par_strategy *strategy) {
    par_status status;
    char why[sizeof par__error_text];
    int i;
    if (!text || !mesh || !strategy) return par__fail(PAR_EINVAL, "par_strategy_parse_mesh: NULL argument");
    if ((status = par__mesh_check(mesh)) != PAR_OK) {
        par__copy_text(why, sizeof why, par_last_error());
        return par__fail(status, "par_strategy_parse_mesh: invalid mesh: %s", why);
    }
    for (i = 0; i < mesh->ndim; i++)
        if (!memchr(mesh->names[i], 0, PAR_NAME_MAX))
            return par__fail(PAR_EINVAL, "par_strategy_parse_mesh: mesh axis %d name is not terminated within %d bytes",
                             i, PAR_NAME_MAX);
    return par__st_parse(text, mesh, strategy);
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
    /* what a strategy tuple describes per input: the input's dims, or (ONE_HOT)
       one more, the depth */
    int st_ndim[PAR_MAX_INPUTS];
    int64_t st_shape[PAR_MAX_INPUTS][PARALLEL_MAX_DIMS];
    int in_iter[PAR_MAX_INPUTS][PARALLEL_MAX_DIMS]; /* iteration dim walked by each strategy entry */
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
/* MATMUL and BATCH_MATMUL: iteration space [batch..., M, K, N]. Batch dims
   broadcast numpy-style, aligned from the right: an operand without a batch
   dim, or with size 1 there, is shared along it (broadcast, never split). */
static par_status par__st_spec_matmul(par__st_spec *s) {
    const par_op_desc *op = s->op;
    int an = op->ndim[0], bn = op->ndim[1], nb_a = an - 2, nb_b = bn - 2, nb, i;
    int a_m, a_k, b_k, b_n; /* which dims of a and b hold M, K, K, N */
    if (an < 2 || bn < 2)
        return par__fail(PAR_ESHAPE, "%s: inputs need at least 2 dims [...,M,K] and [...,K,N] (got %d-D and %d-D)",
                         s->name, an, bn);
    nb = nb_a > nb_b ? nb_a : nb_b;
    if (nb + 3 > PARALLEL_MAX_DIMS)
        return par__fail(PAR_ESHAPE, "%s: %d batch dims; at most %d fit PARALLEL_MAX_DIMS", s->name, nb,
                         PARALLEL_MAX_DIMS - 3);
    a_m = nb_a + (op->transpose_a ? 1 : 0);
    a_k = nb_a + (op->transpose_a ? 0 : 1);
    b_k = nb_b + (op->transpose_b ? 1 : 0);
    b_n = nb_b + (op->transpose_b ? 0 : 1);
    if (op->shape[0][a_k] != op->shape[1][b_k])
        return par__fail(PAR_ESHAPE, "%s: contraction sizes differ: input 0 dim %d is %lld, input 1 dim %d is %lld",
                         s->name, a_k, (long long)op->shape[0][a_k], b_k, (long long)op->shape[1][b_k]);
    s->num_iter = nb + 3;
    s->out_ndim = nb + 2;
    for (i = 0; i < nb; i++) {
        int da = i - (nb - nb_a), db = i - (nb - nb_b); /* the operands' dims on output batch dim i, if any */
        int64_t sa = da >= 0 ? op->shape[0][da] : 1, sb = db >= 0 ? op->shape[1][db] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return par__fail(PAR_ESHAPE,
                             "%s: batch dim %d differs: %lld in input 0 (dim %d), %lld in input 1 (dim %d); batch "
                             "dims must be equal or 1 (broadcast)",
                             s->name, i, (long long)sa, da, (long long)sb, db);
        s->iter_size[i] = s->out_shape[i] = sa > sb ? sa : sb;
        snprintf(s->iter_role[i], sizeof s->iter_role[i], "batch dim %d", i);
        s->out_iter[i] = i;
        if (da >= 0) {
            s->in_iter[0][da] = i;
            if (sa == 1 && s->iter_size[i] > 1) s->in_bcast[0] |= 1u << da;
        }
        if (db >= 0) {
            s->in_iter[1][db] = i;
            if (sb == 1 && s->iter_size[i] > 1) s->in_bcast[1] |= 1u << db;
        }
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

/* SOFTMAX, LOG_SOFTMAX, L2_NORMALIZE: one axis, reduced over locally, unsplit. */
static par_status par__st_spec_softmax(par__st_spec *s) {
    int nd = s->op->ndim[0];
    uint32_t axes = s->op->axes ? s->op->axes : 1u << (nd - 1);
    if ((axes & (axes - 1)) || (axes >> nd))
        return par__fail(PAR_EINVAL, "%s: axes 0x%x must name exactly one of input 0's %d dims", s->name,
                         (unsigned)axes, nd);
    par__st_iter_like_input0(s);
    s->fixed_what[par__st_lowest_bit(axes)] = s->op->kind == PAR_OP_SOFTMAX       ? "the softmax axis"
                                              : s->op->kind == PAR_OP_LOG_SOFTMAX ? "the log_softmax axis"
                                                                                  : "the normalized axis";
    return PAR_OK;
}

/* ONE_HOT: iteration space [indices dims..., depth]; the strategy's extra last
   entry walks depth. */
static par_status par__st_spec_one_hot(par__st_spec *s) {
    const par_op_desc *op = s->op;
    int nd = op->ndim[0], d;
    if (op->depth < 1)
        return par__fail(PAR_EINVAL, "%s: depth is %lld; set par_op_desc.depth to the number of classes (>= 1)",
                         s->name, (long long)op->depth);
    if (nd + 1 > PARALLEL_MAX_DIMS)
        return par__fail(PAR_ESHAPE, "%s: input 0 (indices) may have at most %d dims (got %d)", s->name,
                         PARALLEL_MAX_DIMS - 1, nd);
    par__st_iter_like_input0(s);
    s->in_dtype[0] = PAR_I32;
    for (d = 0; d < nd; d++) snprintf(s->iter_role[d], sizeof s->iter_role[d], "indices dim %d", d);
    s->num_iter = s->out_ndim = nd + 1;
    s->iter_size[nd] = s->out_shape[nd] = op->depth;
    s->out_iter[nd] = nd;
    snprintf(s->iter_role[nd], sizeof s->iter_role[nd], "depth dim");
    s->st_ndim[0] = nd + 1;
    s->st_shape[0][nd] = op->depth;
    s->in_iter[0][nd] = nd;
    return PAR_OK;
}

/* PRELU: x [N,C,...] elementwise; the weight walks the channel dim, or is one
   shared slope (size 1: broadcast, never split). */
static par_status par__st_spec_prelu(par__st_spec *s) {
    const par_op_desc *op = s->op;
    if (op->ndim[0] < 2)
        return par__fail(PAR_ESHAPE, "%s: input 0 (x) needs at least 2 dims [N,C,...] (got %d)", s->name, op->ndim[0]);
    if (op->ndim[1] != 1 || (op->shape[1][0] != op->shape[0][1] && op->shape[1][0] != 1))
        return par__fail(PAR_ESHAPE,
                         "%s: input 1 (weight) must be 1-D with x's %lld channels (dim 1) or 1 shared slope "
                         "(got %d-D, first dim %lld)",
                         s->name, (long long)op->shape[0][1], op->ndim[1], (long long)op->shape[1][0]);
    par__st_iter_like_input0(s);
    snprintf(s->iter_role[1], sizeof s->iter_role[1], "channel dim");
    s->in_iter[1][0] = 1;
    if (op->shape[1][0] == 1 && op->shape[0][1] > 1) s->in_bcast[1] = 1u;
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
    if (op->ndim[1] == nd && par__st_same_dims(nd, op->shape[0], op->shape[1])) { /* dense labels */
        par__st_iter_like_input0(s);
        s->out_ndim = nd - 1;
        for (d = 0; d < nd - 1; d++) {
            snprintf(s->iter_role[d], sizeof s->iter_role[d], "row dim %d", d);
            s->in_iter[1][d] = d;
        }
        snprintf(s->iter_role[nd - 1], sizeof s->iter_role[nd - 1], "class dim");
        s->in_iter[1][nd - 1] = nd - 1;
        s->class_dim = nd - 1;
        return PAR_OK;
    }
    if (op->ndim[1] != nd - 1 || !par__st_same_dims(nd - 1, op->shape[0], op->shape[1]))
        return par__fail(PAR_ESHAPE,
                         "%s: input 1 (labels) has shape %s; it must be %s, the leading dims of input 0 (sparse "
                         "class indices), or input 0's own shape (dense labels)",
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

/* 1 if CROSS_ENTROPY's labels are dense: the logits' shape, float. */
static int par__st_dense_labels(const par_op_desc *op) {
    return op->kind == PAR_OP_CROSS_ENTROPY && op->ndim[1] == op->ndim[0] &&
           par__st_same_dims(op->ndim[0], op->shape[0], op->shape[1]);
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
        s->st_ndim[i] = op->ndim[i];
        for (d = 0; d < PARALLEL_MAX_DIMS; d++) {
            s->in_iter[i][d] = -1;
            s->st_shape[i][d] = d < op->ndim[i] ? op->shape[i][d] : 1;
        }
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
    case PAR_OP_LOG_SOFTMAX:
    case PAR_OP_L2_NORMALIZE:
        return par__st_spec_softmax(s);
    case PAR_OP_PRELU:
        return par__st_spec_prelu(s);
    case PAR_OP_DROPOUT:
        par__st_iter_like_input0(s);
        return PAR_OK;
    case PAR_OP_ONE_HOT:
        return par__st_spec_one_hot(s);
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
        if (st->ndim[i] != s->st_ndim[i] && s->st_ndim[i] == s->op->ndim[i])
            return par__fail(PAR_ESTRATEGY, "%s: input %d strategy has %d entr%s, the input has %d dim%s", s->name, i,
                             st->ndim[i], st->ndim[i] == 1 ? "y" : "ies", s->op->ndim[i],
                             par__st_plural(s->op->ndim[i]));
        if (st->ndim[i] != s->st_ndim[i])
            return par__fail(PAR_ESTRATEGY,
                             "%s: input %d strategy has %d entr%s; it needs %d, one per index dim and one for depth",
                             s->name, i, st->ndim[i], st->ndim[i] == 1 ? "y" : "ies", s->st_ndim[i]);
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
            int64_t size = s->st_shape[i][d], shard = st->shard[i][d];
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
        for (d = 0; d < s->st_ndim[i]; d++) {
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

/* Per-rank bytes of bandwidth-optimal collectives on B bytes (../shared/REFERENCES.md). */
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

/* The mesh axis name each iteration dim gets from a named strategy (NULL: none).
   Every named entry walking one dim must name the same axis, and one axis may
   name one dim only. */
static par_status par__st_matrix_names(const par__st_spec *s, const par_strategy *st, const char **names) {
    int from_in[PARALLEL_MAX_DIMS], from_dim[PARALLEL_MAX_DIMS];
    int i, d, j, k;
    for (j = 0; j < PARALLEL_MAX_DIMS; j++) names[j] = NULL, from_in[j] = from_dim[j] = 0;
    for (i = 0; i < s->num_inputs; i++)
        for (d = 0; d < st->ndim[i]; d++) {
            const int a = st->axis[i][d];
            const char *name;
            if (!a) continue;
            if (a > PARALLEL_MAX_DIMS || !memchr(st->names[a - 1], 0, PAR_NAME_MAX) ||
                !par__is_ident(st->names[a - 1]) || strcmp(st->names[a - 1], "None") == 0)
                return par__fail(PAR_EINVAL,
                                 "%s: strategy input %d dim %d refers to axis name %d, which is not an axis name "
                                 "(strategy.axis is 1 + an index of a name in strategy.names)",
                                 s->name, i, d, a - 1);
            j = s->in_iter[i][d];
            if (j < 0 || (s->in_bcast[i] & (1u << d))) continue;
            name = st->names[a - 1];
            if (!names[j]) {
                names[j] = name, from_in[j] = i, from_dim[j] = d;
            } else if (strcmp(names[j], name) != 0) {
                return par__fail(PAR_ESTRATEGY,
                                 "%s: the %s is named '%s' in input %d dim %d but '%s' in input %d dim %d (one "
                                 "device-matrix dim is one mesh axis)",
                                 s->name, s->iter_role[j], names[j], from_in[j], from_dim[j], name, i, d);
            }
        }
    for (j = 0; j < s->num_iter; j++)
        for (k = 0; k < j; k++)
            if (names[j] && names[k] && strcmp(names[j], names[k]) == 0)
                return par__fail(PAR_ESTRATEGY,
                                 "%s: mesh axis '%s' splits both the %s and the %s; an axis can split one "
                                 "device-matrix dim",
                                 s->name, names[j], s->iter_role[k], s->iter_role[j]);
    return PAR_OK;
}

/* MindSpore device matrix: the iteration shards, then the repeated dim if any;
   dims named by the strategy carry those names. */
static par_status par__st_dev_matrix(const par__st_spec *s, const par_strategy *st, const int64_t *shards,
                                     int devices, par_op_info *info) {
    int dims[PARALLEL_MAX_DIMS];
    const char *names[PARALLEL_MAX_DIMS];
    int64_t product = 1;
    int j, n;
    par_status status;
    if ((status = par__st_matrix_names(s, st, names)) != PAR_OK) return status;
    for (j = 0; j < s->num_iter; j++) product *= shards[j];
    info->repeated = (int)(devices / product);
    n = s->num_iter + (info->repeated > 1 ? 1 : 0);
    if (n > PARALLEL_MAX_DIMS)
        return par__fail(PAR_EUNSUPPORTED,
                         "%s: the device matrix needs %d dims (%d iteration dims and the repeated one); at most %d are "
                         "supported",
                         s->name, n, s->num_iter, PARALLEL_MAX_DIMS);
    for (j = 0; j < s->num_iter; j++) dims[j] = (int)shards[j];
    if (info->repeated > 1) dims[n - 1] = info->repeated, names[n - 1] = NULL;
    return par_mesh_init(&info->dev_matrix, n, dims, names);
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

/* RESHAPE's output: the consumer's layout when desc.out_map gives one (data moves
   unless it is the local view), else the input layout read in the new shape, if
   that is local. */
static par_status par__st_reshape_output(const par__st_spec *s, const par_strategy *st, par_op_info *info) {
    char reason[sizeof par__error_text], text[128];
    if (s->op->out_map) {
        par_layout view;
        int d, n = info->dev_matrix.ndim;
        for (d = 0; d < s->out_ndim; d++)
            if (s->op->out_map[d] < -1 || s->op->out_map[d] >= n)
                return par__fail(PAR_ESTRATEGY, "%s: out_map[%d] is %d; it must be -1 or a device dim 0..%d of the device matrix",
                                 s->name, d, s->op->out_map[d], n - 1);
        if (par_layout_init(&info->outputs[0], &info->dev_matrix, s->out_ndim, s->out_shape, s->op->out_map, 0) != PAR_OK) {
            memcpy(reason, par_last_error(), sizeof reason);
            return par__fail(PAR_ESTRATEGY, "%s: out_map is no layout of the output: %s", s->name, reason);
        }
        info->output_redistribution = !(par_layout_reshape(&info->inputs[0], s->out_ndim, s->out_shape, &view) == PAR_OK &&
                                         par_layout_equal(&view, &info->outputs[0]));
        return PAR_OK;
    }
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
    if (s->op->kind == PAR_OP_DROPOUT) { /* the keep mask, laid out like y */
        info->outputs[1] = info->outputs[0];
        info->num_outputs = 2;
    }
    if (par__st_dense_labels(s->op)) { /* the logits' gradient, complete once the loss's sums are */
        info->outputs[1] = info->inputs[0];
        info->num_outputs = 2;
    }
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

/* An activation input's gradient is summed over the split iteration dims its
   map does not use (e.g. the column dim of a column-parallel matmul's x). */
static void par__st_backward(const par__st_spec *s, const int64_t *shards, par_op_info *info) {
    int i, v, group;
    const uint32_t split = par__st_split_devs(info, shards, (1u << s->num_iter) - 1, &group);
    for (i = 0; i < s->num_inputs; i++) {
        const uint32_t mask = split & ~par_layout_split_dims(&info->inputs[i]);
        /* integer inputs (indices, labels) have no gradient */
        if ((s->op->params & (1u << i)) || s->in_dtype[i] == PAR_I32 || s->in_dtype[i] == PAR_I64 || !mask) continue;
        for (group = 1, v = 0; v < info->dev_matrix.ndim; v++)
            if (mask >> v & 1u) group *= par_mesh_dev_size(&info->dev_matrix, v);
        info->backward[i] =
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
    case PAR_OP_LOG_SOFTMAX:
    case PAR_OP_L2_NORMALIZE:
        return 5.0 * (double)par_layout_local_numel(&info->inputs[0]);
    case PAR_OP_PRELU:
    case PAR_OP_DROPOUT:
        return 2.0 * (double)par_layout_local_numel(&info->inputs[0]);
    case PAR_OP_ONE_HOT:
        return (double)par_layout_local_numel(&info->outputs[0]);
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
    if (s->op->kind == PAR_OP_DROPOUT) c->memory_bytes += (double)par_layout_local_numel(&info->outputs[1]); /* u8 */
    else if (info->num_outputs == 2) c->memory_bytes += (double)par__st_local_bytes(&info->outputs[1], s->out_dtype);
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
    for (i = 0; i < PAR_MAX_INPUTS; i++) info->mirror[i] = info->backward[i] = par__st_no_comm();
    if ((status = par__st_dev_matrix(s, st, shards, devices, info)) != PAR_OK) return status;
    if ((status = par__st_input_layouts(s, info)) != PAR_OK) return status;
    if ((status = par__st_output(s, st, shards, info)) != PAR_OK) return status;
    par__st_mirrors(s, info);
    par__st_backward(s, shards, info);
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
        for (d = 0; d < s->st_ndim[i]; d++)
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
        st.ndim[i] = s->st_ndim[i];
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
        for (d = 0; d < s->st_ndim[i]; d++)
            if (!(s->in_bcast[i] & (1u << d))) {
                j = s->in_iter[i][d];
                e->limit[j] = par__st_gcd(e->limit[j], s->st_shape[i][d]);
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

/* ---- an op's info on a model's mesh ------------------------------------------ */

/* Device dims of `mask` on the device matrix -> on the mesh (size-1 dims drop). */
/* Matrix device dim v -> the mesh device dims it becomes (major first; one,
   or several when an unnamed matrix axis spans several mesh axes; none for
   a size-1 axis). */
typedef struct par__st_dev_map {
    int n[PARALLEL_MAX_DIMS];
    int dev[PARALLEL_MAX_DIMS][PARALLEL_MAX_DIMS];
} par__st_dev_map;

static uint32_t par__st_mask_to_mesh(uint32_t mask, const par__st_dev_map *m, int n) {
    uint32_t out = 0;
    int v, k;
    for (v = 0; v < n; v++)
        for (k = 0; (mask >> v & 1u) && k < m->n[v]; k++) out |= 1u << m->dev[v][k];
    return out;
}

static par_status par__st_layout_to_mesh(par_layout *l, const par_mesh *mesh, const par__st_dev_map *m, int n) {
    par_tensor_map map;
    int t, k, j;
    memset(&map, 0, sizeof map);
    for (t = 0; t < l->ndim; t++)
        for (k = 0; k < l->map.count[t]; k++) {
            const int v = l->map.dev[t][k];
            for (j = 0; v >= 0 && v < n && j < m->n[v]; j++) {
                if (map.count[t] == PARALLEL_MAX_DIMS) return par__fail(PAR_ELAYOUT, "par_op_info_on_mesh: too many splits");
                map.dev[t][map.count[t]++] = (int8_t)m->dev[v][j];
            }
        }
    map.partial = par__st_mask_to_mesh(l->map.partial, m, n);
    l->map = map;
    l->mesh = *mesh;
    return par_layout_check(l);
}

/* Matrix axis -> mesh axis, automatically: the non-trivial axes in order. */
static par_status par__st_auto_axes(const par_mesh *dm, const par_mesh *mesh, int *axes) {
    int i, j = 0;
    char a[128], b[128];
    for (i = 0; i < dm->ndim; i++) {
        axes[i] = -1;
        if (dm->dims[i] == 1) continue;
        while (j < mesh->ndim && mesh->dims[j] == 1) j++;
        if (j == mesh->ndim || mesh->dims[j] != dm->dims[i]) break;
        axes[i] = j++;
    }
    while (j < mesh->ndim && mesh->dims[j] == 1) j++;
    if (i == dm->ndim && j == mesh->ndim) return PAR_OK;
    par_mesh_format(dm, a, sizeof a), par_mesh_format(mesh, b, sizeof b);
    return par__fail(PAR_EINVAL,
                     "par_op_info_on_mesh: device matrix %s does not match mesh %s axis by axis (sizes above 1 in "
                     "order); pass an axis_map",
                     a, b);
}

static par_status par__st_check_axes(const par_mesh *dm, const par_mesh *mesh, const int *axes) {
    uint32_t used = 0;
    int i, j;
    for (i = 0; i < dm->ndim; i++) {
        const int a = axes[i];
        if (a < 0) {
            if (dm->dims[i] != 1)
                return par__fail(PAR_EINVAL, "par_op_info_on_mesh: axis_map[%d] is %d but device-matrix axis %d has "
                                             "size %d (only size-1 axes may map to -1)", i, a, i, dm->dims[i]);
            continue;
        }
        if (a >= mesh->ndim)
            return par__fail(PAR_EINVAL, "par_op_info_on_mesh: axis_map[%d] is %d; the mesh has %d axes", i, a,
                             mesh->ndim);
        if (used >> a & 1u)
            return par__fail(PAR_EINVAL, "par_op_info_on_mesh: mesh axis %d is the target of two device-matrix axes",
                             a);
        if (mesh->dims[a] != dm->dims[i])
            return par__fail(PAR_EINVAL, "par_op_info_on_mesh: device-matrix axis %d (size %d) cannot be mesh axis "
                                         "%d (size %d)", i, dm->dims[i], a, mesh->dims[a]);
        used |= 1u << a;
    }
    for (j = 0; j < mesh->ndim; j++)
        if (mesh->dims[j] > 1 && !(used >> j & 1u))
            return par__fail(PAR_EINVAL, "par_op_info_on_mesh: mesh axis %d (size %d) is not the image of any "
                                         "device-matrix axis", j, mesh->dims[j]);
    return PAR_OK;
}

/* Matrix axis -> mesh axes by the names a named strategy gave the matrix: a
   named axis goes to the mesh axis of that name, size-1 axes drop, and each
   unnamed one (the repeated dim, numeric entries) takes the next mesh axes
   larger than 1 that are left, in order, as many as multiply to its size (the
   repeated dim of ((dp,1),(tp,1)) on "dp=2,pp=2,cp=2,tp=2" spans pp and cp). */
static int par__st_named_spans(const par_mesh *dm, const par_mesh *mesh, int *nspan,
                               int span[PARALLEL_MAX_DIMS][PARALLEL_MAX_DIMS]) {
    uint32_t used = 0;
    int i, j = 0, v;
    for (i = 0; i < dm->ndim; i++) {
        nspan[i] = 0;
        if (!dm->names[i][0] || dm->dims[i] == 1) continue;
        v = par_mesh_dev_dim(mesh, dm->names[i]);
        if (v < 0 || mesh->dims[mesh->ndim - 1 - v] != dm->dims[i]) return -1; /* the one-to-one path says why */
        span[i][nspan[i]++] = mesh->ndim - 1 - v, used |= 1u << (mesh->ndim - 1 - v);
    }
    for (i = 0; i < dm->ndim; i++) {
        long long prod = 1;
        if (dm->names[i][0] || dm->dims[i] == 1) continue;
        while (prod < dm->dims[i]) {
            while (j < mesh->ndim && (mesh->dims[j] == 1 || (used >> j & 1u))) j++;
            if (j == mesh->ndim) break;
            prod *= mesh->dims[j], span[i][nspan[i]++] = j, used |= 1u << j;
        }
        if (prod != dm->dims[i]) return -1;
    }
    for (j = 0; j < mesh->ndim; j++)
        if (mesh->dims[j] > 1 && !(used >> j & 1u)) return -1;
    return 0;
}

static par_status par__st_named_axes(const par_mesh *dm, const par_mesh *mesh, int *axes) {
    char text[128];
    uint32_t used = 0;
    int i, j, v;
    for (i = 0; i < dm->ndim; i++) {
        axes[i] = -1;
        if (!dm->names[i][0]) continue;
        v = par_mesh_dev_dim(mesh, dm->names[i]);
        j = mesh->ndim - 1 - v;
        if (v < 0) {
            par_mesh_format(mesh, text, sizeof text);
            return par__fail(PAR_EINVAL,
                             "par_op_info_on_mesh: the strategy names device-matrix axis %d '%s', which mesh %s "
                             "lacks; pass an axis_map",
                             i, dm->names[i], text);
        }
        if (mesh->dims[j] != dm->dims[i])
            return par__fail(PAR_EINVAL,
                             "par_op_info_on_mesh: device-matrix axis %d '%s' has size %d but mesh axis %d '%s' has "
                             "size %d (was the strategy parsed with another mesh?)",
                             i, dm->names[i], dm->dims[i], j, mesh->names[j], mesh->dims[j]);
        if (dm->dims[i] > 1) axes[i] = j, used |= 1u << j;
    }
    for (i = 0, j = 0; i < dm->ndim; i++) {
        if (dm->names[i][0] || dm->dims[i] == 1) continue;
        while (j < mesh->ndim && (mesh->dims[j] == 1 || (used >> j & 1u))) j++;
        if (j == mesh->ndim)
            return par__fail(PAR_EINVAL,
                             "par_op_info_on_mesh: device-matrix axis %d (size %d, unnamed) has no mesh axis left "
                             "to map to",
                             i, dm->dims[i]);
        axes[i] = j, used |= 1u << j;
    }
    return par__st_check_axes(dm, mesh, axes);
}

static int par__mesh_has_names(const par_mesh *m) {
    int i;
    for (i = 0; i < m->ndim; i++)
        if (m->names[i][0]) return 1;
    return 0;
}

PARALLEL_DEF par_status par_op_info_on_mesh(const par_op_info *info, const par_mesh *mesh, const int *axis_map,
                                            par_op_info *out) {
    int axes[PARALLEL_MAX_DIMS], nspan[PARALLEL_MAX_DIMS], span[PARALLEL_MAX_DIMS][PARALLEL_MAX_DIMS], i, k, n;
    par__st_dev_map dev_to_mesh;
    par_op_info r;
    par_status st;
    int spans = 0;
    if (!info || !mesh || !out) return par__fail(PAR_EINVAL, "par_op_info_on_mesh: NULL argument");
    n = info->dev_matrix.ndim;
    if (par_mesh_size(mesh) <= 0 || n < 1 || n > PARALLEL_MAX_DIMS)
        return par__fail(PAR_EINVAL, "par_op_info_on_mesh: invalid mesh or device matrix");
    if (par_mesh_size(mesh) != par_mesh_size(&info->dev_matrix))
        return par__fail(PAR_EINVAL, "par_op_info_on_mesh: the device matrix has %d devices, the mesh %d",
                         par_mesh_size(&info->dev_matrix), par_mesh_size(mesh));
    if (axis_map) {
        memcpy(axes, axis_map, sizeof(int) * (size_t)n);
        st = par__st_check_axes(&info->dev_matrix, mesh, axes);
    } else if (par__mesh_has_names(&info->dev_matrix) && par__mesh_has_names(mesh)) {
        st = par__st_named_axes(&info->dev_matrix, mesh, axes);
        /* one-to-one failed: an unnamed axis may still span several mesh axes */
        if (st != PAR_OK && par__st_named_spans(&info->dev_matrix, mesh, nspan, span) == 0) st = PAR_OK, spans = 1;
    } else {
        st = par__st_auto_axes(&info->dev_matrix, mesh, axes);
    }
    if (st != PAR_OK) return st;
    par_clear_error();
    for (i = 0; i < n; i++) { /* device dim v = axis n-1-v, on both sides */
        const int v = n - 1 - i;
        dev_to_mesh.n[v] = spans ? nspan[i] : axes[i] >= 0;
        for (k = 0; k < dev_to_mesh.n[v]; k++) dev_to_mesh.dev[v][k] = mesh->ndim - 1 - (spans ? span[i][k] : axes[i]);
    }
    r = *info;
    r.dev_matrix = *mesh;
    for (i = 0; i < r.num_inputs; i++)
        if ((st = par__st_layout_to_mesh(&r.inputs[i], mesh, &dev_to_mesh, n)) != PAR_OK) return st;
    for (i = 0; i < r.num_outputs; i++)
        if ((st = par__st_layout_to_mesh(&r.outputs[i], mesh, &dev_to_mesh, n)) != PAR_OK) return st;
    for (i = 0; i < r.num_forward && i < 2; i++)
        r.forward[i].dev_mask = par__st_mask_to_mesh(r.forward[i].dev_mask, &dev_to_mesh, n);
    for (i = 0; i < PAR_MAX_INPUTS; i++) r.mirror[i].dev_mask = par__st_mask_to_mesh(r.mirror[i].dev_mask, &dev_to_mesh, n);
    for (i = 0; i < PAR_MAX_INPUTS; i++)
        r.backward[i].dev_mask = par__st_mask_to_mesh(r.backward[i].dev_mask, &dev_to_mesh, n);
    *out = r;
    return PAR_OK;
}

/* ---- dropout's mask ------------------------------------------------------------ */

/* splitmix64's finalizer: a well-mixed 64-bit hash of x. */
static uint64_t par__st_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

PARALLEL_DEF par_status par_dropout_mask(const par_layout *layout, int rank, uint64_t seed, double keep_prob,
                                         uint8_t *mask) {
    int64_t local_shape[PARALLEL_MAX_DIMS], offset[PARALLEL_MAX_DIMS], numel, i;
    uint64_t key = par__st_mix64(seed);
    par_status st;
    if (!layout || !mask) return par__fail(PAR_EINVAL, "par_dropout_mask: NULL argument");
    if (!(keep_prob >= 0 && keep_prob <= 1))
        return par__fail(PAR_EINVAL, "par_dropout_mask: keep_prob %g must be in [0,1]", keep_prob);
    if ((st = par_layout_check(layout)) != PAR_OK) return st;
    if (rank < 0 || rank >= par_mesh_size(&layout->mesh))
        return par__fail(PAR_EINVAL, "par_dropout_mask: rank %d is outside the mesh's %d ranks", rank,
                         par_mesh_size(&layout->mesh));
    if ((st = par_layout_local_offset(layout, rank, offset)) != PAR_OK) return st;
    par_layout_local_shape(layout, local_shape);
    numel = par_layout_local_numel(layout);
    for (i = 0; i < numel; i++) {
        int64_t rest = i, index = 0, stride = 1;
        int t;
        for (t = layout->ndim - 1; t >= 0; t--) { /* the element's global row-major index */
            index += (offset[t] + rest % local_shape[t]) * stride;
            rest /= local_shape[t];
            stride *= layout->shape[t];
        }
        /* top 53 bits as a uniform double in [0,1): keep when below keep_prob */
        mask[i] = (uint8_t)((double)(par__st_mix64(key ^ (uint64_t)index) >> 11) * (1.0 / 9007199254740992.0) <
                            keep_prob);
    }
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
    int no_all_to_all;
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
    par_allocator allocator; /* as given: zero = the PARALLEL_MALLOC macros */
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
    c->no_all_to_all = model->no_all_to_all != 0;
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
        par__shape_text(a, sizeof a, from->ndim, from->shape);
        par__shape_text(b, sizeof b, to->ndim, to->shape);
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

/* Same shape on the same mesh axes: no local view change between them. */
static int par__rd_same_view(const par_layout *a, const par_layout *b) {
    return par__rd_same_shape(a, b) && par__mesh_same_shape(&a->mesh, &b->mesh);
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
static void *par__rd_reserve(const par_planner *pl, void *p, int *cap, int need, size_t elem) {
    int n = *cap ? *cap : 256;
    void *q;
    if (need <= *cap) return p;
    while (n < need) n *= 2;
    q = par__alloc_realloc(&pl->allocator, p, (size_t)n * elem);
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
    par__rd_slot *slots = (par__rd_slot *)par__alloc_realloc(&pl->allocator, pl->slots, n * sizeof *slots);
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
    if (!(p = par__rd_reserve(pl, pl->nodes, &pl->node_cap, pl->num_nodes + 1, sizeof *pl->nodes)))
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
    void *p = par__rd_reserve(pl, pl->heap, &pl->heap_cap, pl->heap_len + 1, sizeof *pl->heap);
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
        for (t2 = 0; t2 < ndim && !pb->costs.no_all_to_all; t2++)
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
    return par__rd_mix(h, (uint64_t)c->elem_size * 2u + (uint64_t)c->no_all_to_all);
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
    if (a->elem_size != b->elem_size || a->no_all_to_all != b->no_all_to_all) return 0;
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
    if (desc && par__allocator_check(&desc->allocator, "par_planner_desc.allocator") != PAR_OK) return PAR_EINVAL;
    pl = (par_planner *)par__alloc_malloc(desc ? &desc->allocator : NULL, sizeof *pl);
    if (!pl) return par__fail(PAR_ENOMEM, "par_planner_create: out of memory");
    memset(pl, 0, sizeof *pl);
    if (desc) pl->allocator = desc->allocator;
    pl->cache_entries = cache < 0 ? 0 : cache;
    pl->max_states = max_states;
    pl->slot_bits = 9;
    pl->slots = (par__rd_slot *)par__alloc_malloc(&pl->allocator, sizeof *pl->slots << pl->slot_bits);
    pl->cache = pl->cache_entries
                    ? (par__rd_entry *)par__alloc_malloc(&pl->allocator, sizeof *pl->cache * (size_t)pl->cache_entries)
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
    par_allocator a;
    if (!planner) return;
    a = planner->allocator;
    par__alloc_free(&a, planner->nodes);
    par__alloc_free(&a, planner->heap);
    par__alloc_free(&a, planner->slots);
    par__alloc_free(&a, planner->cache);
    par__alloc_free(&a, planner);
}

/* ---- the unified layout (MindSpore's layout transfer) ------------------- */

/* Add the flat-index strides at which `l` starts a new tensor dim or a new
   shard: the inner size of every dim, and within dim t (inner size I, extent S,
   split by n1, n2, ... major first) I*S/n1, I*S/(n1*n2), ... */
static void par__rd_add_strides(const par_layout *l, int fine, int64_t *strides, int *count) {
    int64_t inner = 1;
    int t, k;
    for (t = l->ndim - 1; t >= 0; t--) {
        int64_t block = l->shape[t];
        strides[(*count)++] = inner;
        for (k = 0; k < l->map.count[t] - !fine; k++) {
            block /= par_mesh_dev_size(&l->mesh, l->map.dev[t][k]);
            strides[(*count)++] = block * inner;
        }
        inner *= l->shape[t];
    }
    strides[(*count)++] = inner;
}

/* A unified shape of two layouts of one tensor: the flat index factored at the
   dim boundaries of both shapes and at shard boundaries of both layouts, so that
   moving a device dim between sub-dims of one real dim is an ordinary
   all_to_all there. Two cuts are useful:
     - coarse (MindSpore's unified tensor shape): a dim split by (a, b, c) is cut
       where a's and b's shards end, so each sub-dim is split by one device dim
       and c splits the last one (1024 split 4 and 16 ways -> 4 x 256);
     - fine: also where the minor-most shard ends (-> 4 x 4 x 64), so every
       shard of either layout is a sub-dim of its own.
   Neither view contains the other's moves (a device dim may straddle a fine cut
   the coarse view does not make), so the planner searches both.
   0 when the boundaries do not nest (6 split 2 and 3 ways), the result needs
   more than PARALLEL_MAX_DIMS dims, or either layout does not reshape to it
   locally (a device dim would straddle a cut: mesh axes are not factored);
   the layouts on it in *ufrom, *uto otherwise. */
/* Cuts inside device dim v's shard range of one layout: v (size n) splits the
   flat range [pos/n, pos); a cut c strictly inside needs v factored there,
   its major part pos/c ways. Adds those sizes to fp[v]; 0 if one does not
   divide n (the cut falls inside one of v's shards). */
static int par__rd_factor_points(const par_layout *l, const int64_t *cuts, int ncuts, int64_t fp[][2 * PARALLEL_MAX_DIMS],
                                 int *nfp) {
    int64_t inner = 1;
    int t, k, c;
    for (t = l->ndim - 1; t >= 0; t--) {
        int64_t pos = inner * l->shape[t];
        for (k = 0; k < l->map.count[t]; k++) {
            int v = l->map.dev[t][k];
            int64_t n = par_mesh_dev_size(&l->mesh, v), lo = pos / n;
            for (c = 0; c < ncuts; c++)
                if (cuts[c] > lo && cuts[c] < pos) {
                    if (pos % cuts[c] != 0 || n % (pos / cuts[c]) != 0 || nfp[v] == 2 * PARALLEL_MAX_DIMS) return 0;
                    fp[v][nfp[v]++] = pos / cuts[c];
                }
            pos = lo;
        }
        inner *= l->shape[t];
    }
    return 1;
}

/* Layout `l` seen on the unified shape (cuts[0..ndim], cuts[u] the flat stride
   where unified dim u starts) and the factored mesh: device dim v's shards are
   its sub-dims sub[v][0..nsub[v]) (major first) of sizes subsize[v][..]. Each
   sub-dim splits the unified dim holding its position; a unified dim's first
   split must start at its major end. 0 if that fails or the result is invalid. */
static int par__rd_view_on(const par_layout *l, const par_mesh *umesh, const int64_t *cuts, int ndim,
                           const int64_t *shape, int sub[][PARALLEL_MAX_DIMS], int64_t subsize[][PARALLEL_MAX_DIMS],
                           const int *nsub, par_layout *out) {
    int64_t inner = 1;
    int t, k, j, v;
    memset(out, 0, sizeof *out);
    out->mesh = *umesh;
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof(int64_t) * (size_t)ndim);
    for (t = l->ndim - 1; t >= 0; t--) {
        int64_t pos = inner * l->shape[t];
        for (k = 0; k < l->map.count[t]; k++) {
            v = l->map.dev[t][k];
            if (par_mesh_dev_size(&l->mesh, v) == 1) continue; /* splits nothing */
            for (j = 0; j < nsub[v]; j++) {
                int u = 0;
                while (u < ndim && !(cuts[u] >= pos && cuts[u + 1] < pos)) u++;
                if (u == ndim || (out->map.count[u] == 0 && cuts[u] != pos) || out->map.count[u] == PARALLEL_MAX_DIMS)
                    return 0;
                out->map.dev[u][out->map.count[u]++] = (int8_t)sub[v][j];
                pos /= subsize[v][j];
            }
        }
        inner *= l->shape[t];
    }
    for (v = 0; v < l->mesh.ndim; v++)
        if (l->map.partial & (1u << v))
            for (j = 0; j < nsub[v]; j++) out->map.partial |= 1u << sub[v][j];
    return par_layout_check(out) == PAR_OK;
}

/* A unified shape of two layouts of one tensor: the flat index factored at the
   dim boundaries of both shapes and at shard boundaries of both layouts, so that
   moving a device dim between sub-dims of one real dim is an ordinary
   all_to_all there. Two cuts are useful:
     - coarse (MindSpore's unified tensor shape): a dim split by (a, b, c) is cut
       where a's and b's shards end, so each sub-dim is split by one device dim
       and c splits the last one (1024 split 4 and 16 ways -> 4 x 256);
     - fine: also where the minor-most shard ends (-> 4 x 4 x 64), so every
       shard of either layout is a sub-dim of its own.
   Neither view contains the other's moves, so the planner searches both. When a
   cut falls inside a device dim's range (one layout splits 512 rows 4 ways on
   dim 0, the other 2 ways on dim 1), that mesh axis is factored too, as
   MindSpore unifies device arrangements: a 4-way axis becomes 2 x 2, major
   first, which numbers the ranks the same. *ufrom and *uto then live on that
   finer mesh.
   0 when the boundaries do not nest (6 split 2 and 3 ways), the result needs
   more than PARALLEL_MAX_DIMS dims, or a cut falls inside a shard. */
static int par__rd_unify(const par_layout *from, const par_layout *to, int fine, par_layout *ufrom, par_layout *uto) {
    int64_t strides[4 * PARALLEL_MAX_DIMS * (PARALLEL_MAX_DIMS + 2)], shape[PARALLEL_MAX_DIMS];
    int64_t cuts[PARALLEL_MAX_DIMS + 1], fp[PARALLEL_MAX_DIMS][2 * PARALLEL_MAX_DIMS];
    int64_t subsize[PARALLEL_MAX_DIMS][PARALLEL_MAX_DIMS];
    int sub[PARALLEL_MAX_DIMS][PARALLEL_MAX_DIMS], nsub[PARALLEL_MAX_DIMS], nfp[PARALLEL_MAX_DIMS];
    int dims[PARALLEL_MAX_DIMS], count = 0, i, j, ndim = 0, undim = 0, v, a;
    par_mesh umesh;
    par__rd_add_strides(from, fine, strides, &count);
    par__rd_add_strides(to, fine, strides, &count);
    for (i = 1; i < count; i++) /* insertion sort, largest first */
        for (j = i; j > 0 && strides[j - 1] < strides[j]; j--) {
            int64_t x = strides[j];
            strides[j] = strides[j - 1];
            strides[j - 1] = x;
        }
    cuts[0] = strides[0];
    for (i = 1; i < count; i++) {
        if (strides[i] == strides[i - 1]) continue;
        if (strides[i - 1] % strides[i] != 0 || ndim == PARALLEL_MAX_DIMS) return 0;
        shape[ndim++] = strides[i - 1] / strides[i]; /* equal strides sit together: [i-1] is the previous distinct one */
        cuts[ndim] = strides[i];
    }
    if (ndim == 0) return 0; /* one element: nothing to factor */
    if (par_layout_reshape(from, ndim, shape, ufrom) == PAR_OK && par_layout_reshape(to, ndim, shape, uto) == PAR_OK)
        return 1; /* no mesh axis needs factoring */
    /* factor the mesh axes the cuts fall into */
    memset(nfp, 0, sizeof nfp);
    if (!par__rd_factor_points(from, cuts, ndim + 1, fp, nfp) || !par__rd_factor_points(to, cuts, ndim + 1, fp, nfp))
        return 0;
    for (a = 0; a < from->mesh.ndim; a++) { /* axes left to right; device dim v = ndim - 1 - a */
        int64_t n, prev = 1;
        v = from->mesh.ndim - 1 - a;
        n = from->mesh.dims[a];
        fp[v][nfp[v]++] = n;
        for (i = 1; i < nfp[v]; i++) /* ascending */
            for (j = i; j > 0 && fp[v][j - 1] > fp[v][j]; j--) {
                int64_t x = fp[v][j];
                fp[v][j] = fp[v][j - 1];
                fp[v][j - 1] = x;
            }
        nsub[v] = 0;
        for (i = 0; i < nfp[v]; i++) {
            if (fp[v][i] == prev && !(n == 1 && nsub[v] == 0)) continue;
            if (fp[v][i] % prev != 0 || undim == PARALLEL_MAX_DIMS) return 0;
            subsize[v][nsub[v]] = fp[v][i] / prev;
            sub[v][nsub[v]++] = undim; /* the axis index for now; device dims once the count is known */
            dims[undim++] = (int)(fp[v][i] / prev);
            prev = fp[v][i];
        }
    }
    for (v = 0; v < from->mesh.ndim; v++)
        for (j = 0; j < nsub[v]; j++) sub[v][j] = undim - 1 - sub[v][j];
    if (par_mesh_init(&umesh, undim, dims, NULL) != PAR_OK) return 0;
    return par__rd_view_on(from, &umesh, cuts, ndim, shape, sub, subsize, nsub, ufrom) &&
           par__rd_view_on(to, &umesh, cuts, ndim, shape, sub, subsize, nsub, uto);
}

/* The cost model on a factored mesh: every sub-dim keeps its axis's link. */
static void par__rd_unified_costs(const par__rd_costs *c, const par_mesh *mesh, const par_mesh *umesh,
                                  par__rd_costs *out) {
    int a, b = 0;
    *out = *c;
    for (a = 0; a < mesh->ndim; a++) {
        int v = mesh->ndim - 1 - a;
        int64_t prod = 1;
        while (b < umesh->ndim && (prod < mesh->dims[a] || (mesh->dims[a] == 1 && prod == 1))) {
            int u = umesh->ndim - 1 - b;
            out->latency[u] = c->latency[v];
            out->bandwidth[u] = c->bandwidth[v];
            prod *= umesh->dims[b++];
            if (mesh->dims[a] == 1) break;
        }
    }
}

/* par_layout_reshape reports refusals through par_last_error; a search tries
   many, so keep the caller's sentence when the search itself succeeds. */
static par_status par__rd_search_plan(par_planner *pl, const par_layout *from, const par_layout *to,
                                      const par__rd_costs *costs, par_plan *plan) {
    par__rd_problem pb;
    int goal = -1;
    par_status st;
    par__rd_setup(&pb, from, to, costs);
    par__rd_prepare_heuristic(&pb);
    par__rd_plan_begin(plan, from, to, &pb, 0);
    plan->lower_bound = par__rd_heuristic(&pb, pb.start);
    if ((st = par__rd_astar(pl, &pb, &goal)) != PAR_OK) return st;
    return par__rd_extract(pl, &pb, goal, plan);
}

/* Wrap a plan found between the unified layouts (*inner) as a plan between the
   real layouts: a local reshape onto the unified shape, its ops, a local
   reshape to the target shape (each reshape only where the shapes differ). */
static par_status par__rd_wrap_unified(const par_plan *inner, const par_layout *from, const par_layout *to,
                                       const par_layout *ufrom, par_plan *plan) {
    int enter = !par__rd_same_view(from, ufrom), leave = !par__rd_same_view(to, ufrom), i, n = 0;
    if (inner->num_ops + enter + leave > PAR_MAX_PLAN_OPS)
        return par__fail(PAR_ECAPACITY, "redistribution plan needs more than PAR_MAX_PLAN_OPS (%d) ops",
                         PAR_MAX_PLAN_OPS);
    *plan = *inner;
    plan->from = *from;
    plan->to = *to;
    plan->unified_ndim = ufrom->ndim;
    memcpy(plan->unified_shape, ufrom->shape, sizeof plan->unified_shape);
    plan->unified_mesh = ufrom->mesh;
    if (enter) {
        par_redist_op *op = &plan->ops[n++];
        memset(op, 0, sizeof *op);
        op->kind = PAR_REDIST_RESHAPE;
        op->tensor_dim = op->to_dim = op->device_dim = -1;
        op->group = 1;
        op->on_unified = 1;
        op->after = par__map_without_unit_dims(ufrom);
    }
    for (i = 0; i < inner->num_ops; i++, n++) {
        plan->ops[n] = inner->ops[i];
        plan->ops[n].on_to_shape = 0;
        plan->ops[n].on_unified = 1;
    }
    if (leave) {
        par_redist_op *op = &plan->ops[n++];
        memset(op, 0, sizeof *op);
        op->kind = PAR_REDIST_RESHAPE;
        op->tensor_dim = op->to_dim = op->device_dim = -1;
        op->group = 1;
        op->on_to_shape = 1;
        op->after = par__map_without_unit_dims(to);
    }
    plan->num_ops = n;
    if (n == 2 && plan->ops[0].kind == PAR_REDIST_RESHAPE && plan->ops[1].kind == PAR_REDIST_RESHAPE) {
        par_layout direct; /* nothing ran on the unified shape: one local reshape does it */
        if (par_layout_reshape(from, to->ndim, to->shape, &direct) == PAR_OK && par_layout_equal(&direct, to)) {
            plan->ops[0] = plan->ops[1];
            plan->num_ops = 1;
            plan->unified_ndim = 0;
        }
    }
    return PAR_OK;
}

/* The search runs up to three times: on the tensor's own shapes (one local
   reshape between them), on the fine and on the coarse unified shape; the
   cheapest plan wins (ties: the earlier, which needs fewer view changes). A
   refused or failed unified search leaves the others. The lower bound is the
   smallest of the searches' bounds, a bound for the union of their moves. */
static par_status par__rd_plan_uncached(par_planner *pl, const par_layout *from, const par_layout *to,
                                        const par__rd_costs *costs, par_plan *plan) {
    par_layout ufrom, uto, seen;
    par_plan inner, wrapped;
    par__rd_costs ucosts;
    char saved[512], first[512];
    par_status st;
    int fine, views = 0;
    snprintf(saved, sizeof saved, "%s", par_last_error());
    st = par__rd_search_plan(pl, from, to, costs, plan);
    snprintf(first, sizeof first, "%s", par_last_error());
    for (fine = 1; fine >= 0; fine--) {
        double bound;
        if (!par__rd_unify(from, to, fine, &ufrom, &uto)) continue;
        if (par__rd_same_view(&ufrom, from) && par__rd_same_view(&ufrom, to)) continue; /* the first search */
        if (views++ && par__rd_same_shape(&ufrom, &seen) && par__mesh_same_shape(&ufrom.mesh, &seen.mesh))
            continue; /* coarse == fine */
        seen = ufrom;
        par__rd_unified_costs(costs, &from->mesh, &ufrom.mesh, &ucosts);
        if (par__rd_search_plan(pl, &ufrom, &uto, &ucosts, &inner) != PAR_OK) continue;
        if (par__rd_wrap_unified(&inner, from, to, &ufrom, &wrapped) != PAR_OK) continue;
        bound = st == PAR_OK && plan->lower_bound < wrapped.lower_bound ? plan->lower_bound : wrapped.lower_bound;
        if (st != PAR_OK || wrapped.cost < plan->cost) {
            *plan = wrapped;
            st = PAR_OK;
        }
        plan->lower_bound = bound;
    }
    if (st != PAR_OK) return par__fail(st, "%s", first);
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
    par_status st;
    if (to_dim >= 0 && w->pb->costs.no_all_to_all) { /* enable_alltoall off: all_gather, then a local split */
        if ((st = par__rd_walk_op(w, PAR_REDIST_ALL_GATHER, t, -1, v, &next, w->shape)) != PAR_OK) return st;
        next.dev[to_dim][next.count[to_dim]++] = (int8_t)v;
        return par__rd_walk_op(w, PAR_REDIST_SPLIT, to_dim, -1, v, &next, w->shape);
    }
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

/* ---- MindSpore's operator inference on the unified layout --------------- */

/* On the unified shape every dim is split by at most one device dim (-1: none);
   cur[] is the walker's map, out[] the target's, pending[] the dims MindSpore's
   loop still holds in its work map. */
typedef struct par__rd_ms {
    par__rd_walk *w;
    int ndim, alltoall;
    int cur[PARALLEL_MAX_DIMS], out[PARALLEL_MAX_DIMS], pending[PARALLEL_MAX_DIMS];
} par__rd_ms;

static par_status par__rd_ms_op(par__rd_ms *m, par_redist_kind kind, int t, int to_dim, int v) {
    par_tensor_map next = m->w->map;
    if (kind == PAR_REDIST_ALL_GATHER || kind == PAR_REDIST_ALL_TO_ALL) next.count[t] = 0;
    if (kind == PAR_REDIST_SPLIT || kind == PAR_REDIST_ALL_TO_ALL) {
        int d = kind == PAR_REDIST_SPLIT ? t : to_dim;
        next.dev[d][0] = (int8_t)v;
        next.count[d] = 1;
    }
    return par__rd_walk_op(m->w, kind, t, to_dim, v, &next, m->w->shape);
}

/* The pending dim currently split by device dim v, or -1. */
static int par__rd_ms_holder(const par__rd_ms *m, int v) {
    int i;
    for (i = 0; i < m->ndim; i++)
        if (m->pending[i] && m->cur[i] == v) return i;
    return -1;
}

/* Split a dim whose target device dim no pending dim holds (a local slice). */
static par_status par__rd_ms_split_pass(par__rd_ms *m) {
    par_status st;
    int i;
    for (i = 0; i < m->ndim; i++) {
        if (!m->pending[i]) continue;
        if (m->cur[i] == m->out[i]) {
            m->pending[i] = 0;
        } else if (m->cur[i] < 0 && par__rd_ms_holder(m, m->out[i]) < 0) {
            if ((st = par__rd_ms_op(m, PAR_REDIST_SPLIT, i, -1, m->out[i])) != PAR_OK) return st;
            m->cur[i] = m->out[i];
            m->pending[i] = 0;
        }
    }
    return PAR_OK;
}

/* Move a device dim another pending dim holds to the free dim that wants it:
   an all_to_all, or (enable_alltoall off) an all_gather then a local split. */
static par_status par__rd_ms_permute_pass(par__rd_ms *m) {
    par_status st;
    int i, j;
    for (i = 0; i < m->ndim; i++) {
        if (!m->pending[i]) continue;
        if (m->cur[i] == m->out[i]) {
            m->pending[i] = 0;
            continue;
        }
        if (m->cur[i] >= 0 || (j = par__rd_ms_holder(m, m->out[i])) < 0) continue;
        if (m->alltoall) {
            if ((st = par__rd_ms_op(m, PAR_REDIST_ALL_TO_ALL, j, i, m->out[i])) != PAR_OK) return st;
        } else {
            if ((st = par__rd_ms_op(m, PAR_REDIST_ALL_GATHER, j, -1, m->out[i])) != PAR_OK) return st;
            if ((st = par__rd_ms_op(m, PAR_REDIST_SPLIT, i, -1, m->out[i])) != PAR_OK) return st;
        }
        m->cur[i] = m->out[i];
        m->pending[i] = 0;
        m->cur[j] = -1;
    }
    return PAR_OK;
}

/* Gather every device dim the target does not use at all. */
static par_status par__rd_ms_concat_pass(par__rd_ms *m) {
    par_status st;
    int i, k, wanted;
    for (i = 0; i < m->ndim; i++) {
        if (!m->pending[i] || m->cur[i] < 0) continue;
        for (wanted = 0, k = 0; k < m->ndim; k++) wanted |= m->out[k] == m->cur[i];
        if (wanted) continue;
        if ((st = par__rd_ms_op(m, PAR_REDIST_ALL_GATHER, i, -1, m->cur[i])) != PAR_OK) return st;
        m->cur[i] = -1;
        if (m->out[i] < 0) m->pending[i] = 0;
    }
    return PAR_OK;
}

static int par__rd_ms_any_pending(const par__rd_ms *m) {
    int i;
    for (i = 0; i < m->ndim; i++)
        if (m->pending[i]) return 1;
    return 0;
}

/* MindSpore's RedistributionOperatorInfer loop, followed step for step: split
   and permute passes until neither adds an op, then the concat pass; a round
   that adds nothing (a cycle such as [0,1] -> [1,0]) gathers the first pending
   dim. Dims are visited in index order, as its ordered work map does. */
static par_status par__rd_ms_infer(par__rd_walk *w, const par_tensor_map *target, int alltoall) {
    par__rd_ms m;
    par_status st;
    int i;
    memset(&m, 0, sizeof m);
    m.w = w;
    m.ndim = w->pb->ndim[w->shape];
    m.alltoall = alltoall;
    for (i = 0; i < m.ndim; i++) {
        m.cur[i] = w->map.count[i] ? w->map.dev[i][0] : -1;
        m.out[i] = target->count[i] ? target->dev[i][0] : -1;
        m.pending[i] = 1;
    }
    while (par__rd_ms_any_pending(&m)) {
        int round = w->plan->num_ops;
        for (;;) {
            int before_split = w->plan->num_ops;
            if ((st = par__rd_ms_split_pass(&m)) != PAR_OK) return st;
            for (;;) {
                int before_permute = w->plan->num_ops;
                if (!par__rd_ms_any_pending(&m)) break;
                if ((st = par__rd_ms_permute_pass(&m)) != PAR_OK) return st;
                if (before_permute == w->plan->num_ops) break;
            }
            if (!par__rd_ms_any_pending(&m) || before_split == w->plan->num_ops) break;
        }
        if ((st = par__rd_ms_concat_pass(&m)) != PAR_OK) return st;
        if (round == w->plan->num_ops && par__rd_ms_any_pending(&m)) {
            for (i = 0; !m.pending[i]; i++) {}
            if (m.cur[i] < 0) return par__fail(PAR_EUNSUPPORTED, "redistribution: greedy walk stuck at unified dim %d", i);
            if ((st = par__rd_ms_op(&m, PAR_REDIST_ALL_GATHER, i, -1, m.cur[i])) != PAR_OK) return st;
            m.cur[i] = -1;
        }
    }
    return PAR_OK;
}

/* 1 if no tensor dim of `map` is split by more than one device dim. */
static int par__rd_single_splits(const par_tensor_map *map, int ndim) {
    int t;
    for (t = 0; t < ndim; t++)
        if (map->count[t] > 1) return 0;
    return 1;
}

/* All-reduce every partial dim the target does not keep (MindSpore has no
   partial layouts: its operators reduce before redistributing). */
static par_status par__rd_greedy_reduce(par__rd_walk *w) {
    par_status st;
    int v;
    for (v = 0; v < PARALLEL_MAX_DIMS; v++)
        if (w->map.partial & ~w->pb->inert & (1u << v)) {
            par_tensor_map next = w->map;
            next.partial &= ~(1u << v);
            if ((st = par__rd_walk_op(w, PAR_REDIST_ALL_REDUCE, -1, -1, v, &next, w->shape)) != PAR_OK) return st;
        }
    return PAR_OK;
}

/* The walk on the unified layout: MindSpore's algorithm proper. 0 with
   nothing written when the layouts have no unified view with one device dim
   per dim (see par__rd_unify). */
static int par__rd_greedy_unified(const par_layout *from, const par_layout *to, const par__rd_costs *costs,
                                  par_plan *plan, par_status *st) {
    par_layout ufrom = *from, uto = *to;
    par__rd_problem pb;
    par__rd_walk w;
    par_plan inner;
    par__rd_costs ucosts;
    par_tensor_map fm = par__map_without_unit_dims(from), tm = par__map_without_unit_dims(to);
    /* like MindSpore, expand the tensor shape only where the layouts need it:
       another shape, or a dim split by several device dims */
    if (!par__rd_same_shape(from, to) || !par__rd_single_splits(&fm, from->ndim) || !par__rd_single_splits(&tm, to->ndim))
        if (!par__rd_unify(from, to, 0, &ufrom, &uto)) return 0;
    par__rd_unified_costs(costs, &from->mesh, &ufrom.mesh, &ucosts);
    par__rd_setup(&pb, &ufrom, &uto, &ucosts);
    if (!par__rd_single_splits(&pb.from_map, ufrom.ndim) || !par__rd_single_splits(&pb.to_map, uto.ndim)) return 0;
    par__rd_plan_begin(&inner, &ufrom, &uto, &pb, 1);
    w.plan = &inner;
    w.pb = &pb;
    w.map = pb.from_map;
    w.shape = 0;
    if ((*st = par__rd_greedy_reduce(&w)) != PAR_OK) return 1;
    if ((*st = par__rd_ms_infer(&w, &pb.to_map, !costs->no_all_to_all)) != PAR_OK) return 1;
    if (par__rd_same_view(&ufrom, from) && par__rd_same_view(&ufrom, to)) {
        *plan = inner;
        plan->from = *from;
        plan->to = *to;
        return 1;
    }
    *st = par__rd_wrap_unified(&inner, from, to, &ufrom, plan);
    return 1;
}

PARALLEL_DEF par_status par_plan_greedy(const par_layout *from, const par_layout *to, const par_cost_model *cost,
                                        par_plan *plan) {
    par__rd_costs costs;
    par__rd_problem pb;
    par__rd_walk w;
    par_status st = PAR_OK;
    char saved[512];
    if (!from || !to || !plan) return par__fail(PAR_EINVAL, "par_plan_greedy: NULL argument");
    if ((st = par__rd_costs_init(cost, &from->mesh, &costs)) != PAR_OK) return st;
    if ((st = par__rd_validate(from, to, &costs)) != PAR_OK) return st;
    snprintf(saved, sizeof saved, "%s", par_last_error());
    if (par__rd_greedy_unified(from, to, &costs, plan, &st)) {
        if (st == PAR_OK) par__fail(PAR_OK, "%s", saved);
        return st;
    }
    /* no unified view: the walk on the tensor's own shapes */
    par__rd_setup(&pb, from, to, &costs);
    par__rd_plan_begin(plan, from, to, &pb, 1);
    w.plan = plan;
    w.pb = &pb;
    w.map = pb.from_map;
    w.shape = 0;
    if ((st = par__rd_greedy_reduce(&w)) != PAR_OK) return st;
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
    if (plan->ops[i].on_unified) {
        if (plan->unified_ndim < 1 || plan->unified_ndim > PARALLEL_MAX_DIMS)
            return par__fail(PAR_EINVAL, "par_plan_layout_after: op %d is on the unified shape but the plan has none", i);
        layout->ndim = plan->unified_ndim;
        memcpy(layout->shape, plan->unified_shape, sizeof layout->shape);
        layout->mesh = plan->unified_mesh;
    }
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
        /* the op's own mesh: on the unified view some axes may be factored (same ranks) */
        if ((st = par_mesh_group(&before->mesh, r, 1u << op->device_dim, s->group, &count)) != PAR_OK) return st;
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

/* The sections below include the system headers they need (pthread, MPI,
   intrinsics) where they begin, outside the extern "C" block above. */

// >>comm

PARALLEL_DEF const char *par_reduce_op_name(par_reduce_op op) {
    switch (op) {
    case PAR_REDUCE_SUM: return "sum";
    case PAR_REDUCE_AVG: return "avg";
    case PAR_REDUCE_MAX: return "max";
    }
    return "?";
}

PARALLEL_DEF const char *par_comm_call_name(par_comm_call call) {
    static const char *const names[PAR_CALL_COUNT] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                      "broadcast",  "send",       "recv",           "barrier"};
    return (unsigned)call < PAR_CALL_COUNT ? names[call] : "?";
}

/* Byte ranges compared as addresses (unrelated pointers cannot be compared in C). */
static int par__bytes_overlap(const void *a, size_t an, const void *b, size_t bn) {
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an && bn && x < y + bn && y < x + an;
}

/* "<who> <op> on group <group>: <rule>" */
static PAR__PRINTF(4, 5) par_status par__comm_arg_fail(const char *who, const char *op, const char *group,
                                                      const char *fmt, ...) {
    char rule[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rule, sizeof rule, fmt, ap);
    va_end(ap);
    return par__fail(PAR_EINVAL, "%s%s%s on group %s: %s", who ? who : "", who && *who ? " " : "", op,
                     group ? group : "?", rule);
}

PARALLEL_DEF par_status par_comm_check_args(const char *who, const char *group, int size, int index,
                                            const par_comm_args *a) {
    const char *op;
    const int n = size, reduces = a && (a->call == PAR_CALL_ALL_REDUCE || a->call == PAR_CALL_REDUCE_SCATTER);
    size_t bytes;
    if (!a) return par__fail(PAR_EINVAL, "%s: NULL par_comm_args", who ? who : "par_comm_check_args");
    op = par_comm_call_name(a->call);
    if ((unsigned)a->call >= PAR_CALL_COUNT) return par__comm_arg_fail(who, op, group, "unknown op %d", (int)a->call);
    if (n < 1 || index < 0 || index >= n)
        return par__comm_arg_fail(who, op, group, "member %d of a group of %d", index, n);
    if (a->call == PAR_CALL_BARRIER) return PAR_OK;
    if (a->count < 0) return par__comm_arg_fail(who, op, group, "count %lld is negative", (long long)a->count);
    if ((unsigned)a->dtype >= PAR_DTYPE_COUNT) return par__comm_arg_fail(who, op, group, "unknown dtype %d", (int)a->dtype);
    if (reduces && (unsigned)a->op > PAR_REDUCE_MAX)
        return par__comm_arg_fail(who, op, group, "unknown reduce op %d", (int)a->op);
    if (a->count > (int64_t)(INT64_MAX / 16) / (int64_t)par_dtype_size(a->dtype) / n)
        return par__comm_arg_fail(who, op, group, "count %lld is too large", (long long)a->count);
    bytes = (size_t)a->count * par_dtype_size(a->dtype);
    switch (a->call) {
    case PAR_CALL_BROADCAST:
    case PAR_CALL_SEND:
    case PAR_CALL_RECV:
        if (a->count > 0 && !(a->call == PAR_CALL_RECV ? a->recv : a->send))
            return par__comm_arg_fail(who, op, group, "NULL buf with count %lld", (long long)a->count);
        if (a->peer < 0 || a->peer >= n)
            return par__comm_arg_fail(who, op, group, "%s %d is outside the group's %d members",
                                      a->call == PAR_CALL_BROADCAST ? "root" : "peer", a->peer, n);
        return PAR_OK;
    default: break;
    }
    if (a->count > 0 && (!a->send || !a->recv))
        return par__comm_arg_fail(who, op, group, "NULL %s buffer with count %lld", !a->send ? "send" : "recv",
                                  (long long)a->count);
    switch (a->call) {
    case PAR_CALL_ALL_REDUCE:
        if (a->send != a->recv && par__bytes_overlap(a->send, bytes, a->recv, bytes))
            return par__comm_arg_fail(who, op, group, "send and recv overlap without being equal");
        break;
    case PAR_CALL_ALL_GATHER:
        if (par__bytes_overlap(a->send, bytes, a->recv, bytes * (size_t)n) &&
            (const char *)a->send != (const char *)a->recv + bytes * (size_t)index)
            return par__comm_arg_fail(who, op, group, "send overlaps recv but is not recv + index*count (in place)");
        break;
    case PAR_CALL_REDUCE_SCATTER:
        if (par__bytes_overlap(a->send, bytes * (size_t)n, a->recv, bytes) &&
            (const char *)a->recv != (const char *)a->send + bytes * (size_t)index)
            return par__comm_arg_fail(who, op, group, "recv overlaps send but is not send + index*count (in place)");
        break;
    case PAR_CALL_ALL_TO_ALL:
        if (par__bytes_overlap(a->send, bytes * (size_t)n, a->recv, bytes * (size_t)n))
            return par__comm_arg_fail(who, op, group, "send and recv overlap");
        break;
    default: break;
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_comm_check_ranks(const char *who, const int *ranks, int count, int world, int me,
                                             int *index) {
    const char *w = who ? who : "", *sp = who && *who ? " " : "";
    int i, j, at = -1;
    if (index) *index = -1;
    if (!ranks) return par__fail(PAR_EINVAL, "%s%sgroup_create: NULL rank list", w, sp);
    if (count < 1 || count > world)
        return par__fail(PAR_EINVAL, "%s%sgroup_create: %d ranks listed, need 1..%d", w, sp, count, world);
    for (i = 0; i < count; i++) {
        if (ranks[i] < 0 || ranks[i] >= world)
            return par__fail(PAR_EINVAL, "%s%sgroup_create: rank %d (entry %d) is outside the world of %d", w, sp,
                             ranks[i], i, world);
        for (j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return par__fail(PAR_EINVAL, "%s%sgroup_create: rank %d is listed twice", w, sp, ranks[i]);
        if (ranks[i] == me) at = i;
    }
    if (at < 0)
        return par__fail(PAR_EINVAL, "%s%sgroup_create: rank %d is not among the %d ranks listed", w, sp, me, count);
    if (index) *index = at;
    return PAR_OK;
}

// >>compute

PARALLEL_DEF const char *par_mem_category_name(par_mem_category category) {
    static const char *const names[PAR_MEM_CATEGORY_COUNT] = {"params", "grads", "optimizer",
                                                              "activations", "comm", "workspace"};
    return (int)category >= 0 && category < PAR_MEM_CATEGORY_COUNT ? names[category] : "?";
}

// >>context

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

/* One cached communicator: the rank list it was made from and the backend's handle. */
typedef struct par__group_entry {
    int count;
    int *ranks;
    par_comm_group *group;
} par__group_entry;

struct par_ctx {
    int rank, size;
    par_mesh mesh;
    int timeout_ms;
    int kernel_threads;
    par_comm_table comm;
    par_compute_table compute;
    int owns_comm, owns_compute;
    par__group_entry *groups;
    int num_groups, cap_groups;
    int *scratch_ranks; /* size ints, for par_ctx_group */
    par_allocator allocator; /* all three hooks set (the defaults if desc had none) */
};

/* Host memory on behalf of a context: through its allocator (the desc's hooks,
   else the PARALLEL_MALLOC macros). Every later section that allocates for a
   context uses these, so the host's hooks see all of it. ctx may be NULL
   (the macros). */
static PAR__MAYBE_UNUSED void *par__ctx_malloc(const par_ctx *ctx, size_t size) {
    return par__alloc_malloc(ctx ? &ctx->allocator : NULL, size);
}
static PAR__MAYBE_UNUSED void *par__ctx_realloc(const par_ctx *ctx, void *ptr, size_t size) {
    return par__alloc_realloc(ctx ? &ctx->allocator : NULL, ptr, size);
}
static PAR__MAYBE_UNUSED void par__ctx_free(const par_ctx *ctx, void *ptr) {
    par__alloc_free(ctx ? &ctx->allocator : NULL, ptr);
}

/* A planner whose memory goes through the context's allocator (desc may be NULL). */
static PAR__MAYBE_UNUSED par_status par__ctx_planner_create(const par_ctx *ctx, const par_planner_desc *desc,
                                                            par_planner **planner) {
    par_planner_desc d;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (ctx) d.allocator = ctx->allocator;
    return par_planner_create(&d, planner);
}

/* The default hooks a context reports when its desc set none. */
static void *par__default_malloc(size_t size, void *user) {
    (void)user;
    return PARALLEL_MALLOC(size);
}
static void *par__default_realloc(void *ptr, size_t size, void *user) {
    (void)user;
    return PARALLEL_REALLOC(ptr, size);
}
static void par__default_free(void *ptr, void *user) {
    (void)user;
    PARALLEL_FREE(ptr);
}

#define PAR__DEFAULT_TIMEOUT_MS 600000

/* Read a non-negative int from environment variable `name`: 1 if set and valid,
   0 if unset, PAR_EINVAL (as a negative status) if set but not a number. */
static int par__env_int(const char *name, int *value) {
    const char *text = getenv(name);
    char *end = NULL;
    long v;
    if (!text || !*text) return 0;
    v = strtol(text, &end, 10);
    if (*end != 0 || v < 0 || v > INT_MAX) {
        par__fail(PAR_EINVAL, "environment variable %s=\"%s\" is not a non-negative integer", name, text);
        return -1;
    }
    *value = (int)v;
    return 1;
}

/* The timeout a context made from `desc` will use. */
static PAR__MAYBE_UNUSED par_status par__ctx_timeout(const par_ctx_desc *desc, int *ms) {
    int env = 0, got;
    if (desc && desc->timeout_ms < 0)
        return par__fail(PAR_EINVAL, "par_ctx_desc.timeout_ms %d must be >= 0 (0 = default)", desc->timeout_ms);
    if (desc && desc->timeout_ms > 0) {
        *ms = desc->timeout_ms;
        return PAR_OK;
    }
    got = par__env_int("PARALLEL_TIMEOUT_MS", &env);
    if (got < 0) return PAR_EINVAL;
    *ms = got && env > 0 ? env : PAR__DEFAULT_TIMEOUT_MS;
    return PAR_OK;
}

/* Online cores of this host (1 if unknown). */
static int par__host_cores(void) {
#if defined(_SC_NPROCESSORS_ONLN)
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < INT_MAX ? (int)n : 1;
#else
    return 1;
#endif
}

/* How many ranks share this host: all of them for in-process threads, else what
   the launcher says. */
static int par__ranks_on_host(const par_comm_table *comm) {
    int local = 0;
    if (comm->name && strcmp(comm->name, "threads") == 0) return comm->size;
    if (par__env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &local) > 0 && local > 0) return local;
    if (par__env_int("LOCAL_WORLD_SIZE", &local) > 0 && local > 0) return local;
    par_clear_error();
    return 1;
}

/* The mesh of a context: desc->mesh, or 1-D "world" over every rank. */
static par_status par__ctx_mesh(const par_ctx_desc *desc, int size, par_mesh *mesh) {
    static const char *const world_name[1] = {"world"};
    char text[256];
    par_status st;
    if (!desc || !desc->mesh) return par_mesh_init(mesh, 1, &size, world_name);
    if ((st = par_mesh_parse(desc->mesh, mesh)) != PAR_OK) return st;
    if (par_mesh_size(mesh) != size) {
        par_mesh_format(mesh, text, sizeof text);
        return par__fail(PAR_EINVAL, "mesh %s has %d devices but the world has %d ranks", text, par_mesh_size(mesh),
                         size);
    }
    return PAR_OK;
}

/* Which required comm hooks are missing (NULL if none). */
static const char *par__comm_missing_hook(const par_comm_table *c) {
    if (!c->group_create) return "group_create";
    if (!c->group_destroy) return "group_destroy";
    if (!c->all_reduce) return "all_reduce";
    if (!c->all_gather) return "all_gather";
    if (!c->reduce_scatter) return "reduce_scatter";
    if (!c->all_to_all) return "all_to_all";
    if (!c->broadcast) return "broadcast";
    if (!c->send) return "send";
    if (!c->recv) return "recv";
    if (!c->barrier) return "barrier";
    if (!c->wait) return "wait";
    if (!c->test) return "test";
    return NULL;
}

static par_status par__comm_table_check(const par_comm_table *c) {
    const char *missing;
    if (c->version != PAR_COMM_TABLE_VERSION)
        return par__fail(PAR_EINVAL, "comm table version %d, this parallel.h speaks version %d", c->version,
                         PAR_COMM_TABLE_VERSION);
    if (c->size < 1 || c->rank < 0 || c->rank >= c->size)
        return par__fail(PAR_EINVAL, "comm table rank %d / size %d: need 0 <= rank < size", c->rank, c->size);
    if ((missing = par__comm_missing_hook(c)) != NULL)
        return par__fail(PAR_EINVAL, "comm table \"%s\" has no %s hook", c->name ? c->name : "?", missing);
    return PAR_OK;
}

static par_status par__compute_table_check(const par_compute_table *c) {
    if (c->version != PAR_COMPUTE_TABLE_VERSION)
        return par__fail(PAR_EINVAL, "compute table version %d, this parallel.h speaks version %d", c->version,
                         PAR_COMPUTE_TABLE_VERSION);
    if (!c->alloc || !c->free || !c->memcpy || !c->memset)
        return par__fail(PAR_EINVAL, "compute table \"%s\" lacks one of alloc, free, memcpy, memset",
                         c->name ? c->name : "?");
    return PAR_OK;
}

/* Checks of a desc every launcher makes before it starts anything. */
static par_status par__ctx_desc_check(const par_ctx_desc *desc) {
    int ms;
    par_status st;
    if (!desc) return PAR_OK;
    if ((st = par__ctx_timeout(desc, &ms)) != PAR_OK) return st;
    if (desc->kernel_threads < 0)
        return par__fail(PAR_EINVAL, "par_ctx_desc.kernel_threads %d must be >= 0 (0 = automatic)", desc->kernel_threads);
    if ((st = par__allocator_check(&desc->allocator, "par_ctx_desc.allocator")) != PAR_OK) return st;
    if (desc->compute) return par__compute_table_check(desc->compute);
    return PAR_OK;
}

/* Run a cleanup (either signature) without losing the failure sentence it may
   overwrite: the caller reports the original error. */
static void par__keep_error_across(par_status st, void (*ctx_fn)(par_ctx *), par_ctx *ctx, void (*user_fn)(void *),
                                   void *user) {
    char saved[512];
    par__copy_text(saved, sizeof saved, par_last_error());
    if (ctx_fn) ctx_fn(ctx);
    if (user_fn) user_fn(user);
    par_set_error(st, "%s", saved);
}

/* The one constructor behind every launcher. `comm` is copied; with owns_comm the
   context calls comm->destroy when destroyed (also when this fails). */
static PAR__MAYBE_UNUSED par_status par__ctx_create(const par_ctx_desc *desc, const par_comm_table *comm,
                                                     int owns_comm, par_ctx **out) {
    par_ctx *ctx;
    par_status st;
    int on_host;
    if (!comm || !out) return par__fail(PAR_EINVAL, "par_ctx: NULL argument");
    *out = NULL;
    if ((st = par__comm_table_check(comm)) != PAR_OK) goto fail_comm;
    if ((st = par__ctx_desc_check(desc)) != PAR_OK) goto fail_comm;
    ctx = (par_ctx *)par__alloc_malloc(desc ? &desc->allocator : NULL, sizeof *ctx);
    if (!ctx) {
        st = par__fail(PAR_ENOMEM, "par_ctx: out of memory");
        goto fail_comm;
    }
    memset(ctx, 0, sizeof *ctx);
    if (desc && desc->allocator.malloc) {
        ctx->allocator = desc->allocator;
    } else {
        ctx->allocator.malloc = par__default_malloc;
        ctx->allocator.realloc = par__default_realloc;
        ctx->allocator.free = par__default_free;
    }
    ctx->comm = *comm;
    ctx->owns_comm = owns_comm;
    ctx->rank = comm->rank;
    ctx->size = comm->size;
    if ((st = par__ctx_mesh(desc, comm->size, &ctx->mesh)) != PAR_OK) goto fail;
    if ((st = par__ctx_timeout(desc, &ctx->timeout_ms)) != PAR_OK) goto fail;
    on_host = par__ranks_on_host(comm);
    ctx->kernel_threads = desc && desc->kernel_threads > 0 ? desc->kernel_threads : par__host_cores() / on_host;
    if (ctx->kernel_threads < 1) ctx->kernel_threads = 1;
    ctx->scratch_ranks = (int *)par__ctx_malloc(ctx, sizeof(int) * (size_t)comm->size);
    if (!ctx->scratch_ranks) {
        st = par__fail(PAR_ENOMEM, "par_ctx: out of memory");
        goto fail;
    }
    if (desc && desc->compute) {
        ctx->compute = *desc->compute;
    } else {
        par_cpu_desc cpu;
        memset(&cpu, 0, sizeof cpu);
        cpu.threads = ctx->kernel_threads;
        cpu.allocator = ctx->allocator;
        if ((st = par_compute_cpu(&cpu, &ctx->compute)) != PAR_OK) goto fail;
        ctx->owns_compute = 1;
    }
    *out = ctx;
    return PAR_OK;
fail:
    par__keep_error_across(st, par_ctx_destroy, ctx, NULL, NULL);
    return st;
fail_comm:
    if (owns_comm && comm->destroy) par__keep_error_across(st, NULL, NULL, comm->destroy, comm->user);
    return st;
}

PARALLEL_DEF par_status par_ctx_init(const par_ctx_desc *desc, par_ctx **ctx) {
    if (!ctx) return par__fail(PAR_EINVAL, "par_ctx_init: NULL ctx");
    *ctx = NULL;
    if (!desc || !desc->comm)
        return par__fail(PAR_EINVAL, "par_ctx_init: desc->comm (the host's transport) is required; "
                                     "use par_run_threads or par_ctx_init_mpi for the built-in backends");
    return par__ctx_create(desc, desc->comm, 0, ctx);
}

#ifndef PARALLEL_WITH_MPI
PARALLEL_DEF par_status par_ctx_init_mpi(const par_ctx_desc *desc, par_ctx **ctx) {
    (void)desc;
    if (ctx) *ctx = NULL;
    return par__fail(PAR_EUNSUPPORTED, "par_ctx_init_mpi: this build has no MPI backend "
                                       "(define PARALLEL_WITH_MPI and build with mpicc)");
}
#endif

PARALLEL_DEF void par_ctx_destroy(par_ctx *ctx) {
    par_allocator allocator;
    int i;
    if (!ctx) return;
    for (i = 0; i < ctx->num_groups; i++) {
        if (ctx->groups[i].group) ctx->comm.group_destroy(ctx->comm.user, ctx->groups[i].group);
        par__ctx_free(ctx, ctx->groups[i].ranks);
    }
    par__ctx_free(ctx, ctx->groups);
    par__ctx_free(ctx, ctx->scratch_ranks);
    if (ctx->owns_compute && ctx->compute.destroy) ctx->compute.destroy(ctx->compute.user);
    if (ctx->owns_comm && ctx->comm.destroy) ctx->comm.destroy(ctx->comm.user);
    allocator = ctx->allocator; /* the context's own memory goes last, through a copy */
    par__alloc_free(&allocator, ctx);
}

PARALLEL_DEF int par_ctx_rank(const par_ctx *ctx) { return ctx ? ctx->rank : -1; }
PARALLEL_DEF int par_ctx_size(const par_ctx *ctx) { return ctx ? ctx->size : 0; }
PARALLEL_DEF const par_mesh *par_ctx_mesh(const par_ctx *ctx) { return ctx ? &ctx->mesh : NULL; }
PARALLEL_DEF const par_comm_table *par_ctx_comm(const par_ctx *ctx) { return ctx ? &ctx->comm : NULL; }
PARALLEL_DEF const par_compute_table *par_ctx_compute(const par_ctx *ctx) { return ctx ? &ctx->compute : NULL; }
PARALLEL_DEF int par_ctx_timeout_ms(const par_ctx *ctx) { return ctx ? ctx->timeout_ms : 0; }
PARALLEL_DEF int par_ctx_kernel_threads(const par_ctx *ctx) { return ctx ? ctx->kernel_threads : 0; }
PARALLEL_DEF const par_allocator *par_ctx_allocator(const par_ctx *ctx) { return ctx ? &ctx->allocator : NULL; }

static par__group_entry *par__ctx_find_group(par_ctx *ctx, const int *ranks, int count) {
    int i;
    for (i = 0; i < ctx->num_groups; i++)
        if (ctx->groups[i].count == count && memcmp(ctx->groups[i].ranks, ranks, sizeof(int) * (size_t)count) == 0)
            return &ctx->groups[i];
    return NULL;
}

static par_status par__check_rank_list(const par_ctx *ctx, const int *ranks, int count) {
    int i, j, self = 0;
    if (!ranks || count < 1 || count > ctx->size)
        return par__fail(PAR_EINVAL, "group: %d ranks listed, need 1..%d", count, ctx->size);
    for (i = 0; i < count; i++) {
        if (ranks[i] < 0 || ranks[i] >= ctx->size)
            return par__fail(PAR_EINVAL, "group: rank %d (entry %d) is outside the world of %d", ranks[i], i,
                             ctx->size);
        for (j = 0; j < i; j++)
            if (ranks[j] == ranks[i]) return par__fail(PAR_EINVAL, "group: rank %d is listed twice", ranks[i]);
        self |= ranks[i] == ctx->rank;
    }
    if (!self) return par__fail(PAR_EINVAL, "group: rank %d is not among the %d ranks listed", ctx->rank, count);
    return PAR_OK;
}

PARALLEL_DEF par_status par_ctx_group_ranks(par_ctx *ctx, const int *ranks, int count, par_comm_group **group) {
    par__group_entry *e;
    par_status st;
    if (!ctx || !group) return par__fail(PAR_EINVAL, "par_ctx_group_ranks: NULL argument");
    *group = NULL;
    if ((st = par__check_rank_list(ctx, ranks, count)) != PAR_OK) return st;
    if ((e = par__ctx_find_group(ctx, ranks, count)) != NULL) {
        *group = e->group;
        return PAR_OK;
    }
    if (ctx->num_groups == ctx->cap_groups) {
        int cap = ctx->cap_groups ? 2 * ctx->cap_groups : 8;
        par__group_entry *g = (par__group_entry *)par__ctx_realloc(ctx, ctx->groups, sizeof *g * (size_t)cap);
        if (!g) return par__fail(PAR_ENOMEM, "par_ctx_group: out of memory");
        ctx->groups = g;
        ctx->cap_groups = cap;
    }
    e = &ctx->groups[ctx->num_groups];
    e->count = count;
    e->group = NULL;
    e->ranks = (int *)par__ctx_malloc(ctx, sizeof(int) * (size_t)count);
    if (!e->ranks) return par__fail(PAR_ENOMEM, "par_ctx_group: out of memory");
    memcpy(e->ranks, ranks, sizeof(int) * (size_t)count);
    if ((st = ctx->comm.group_create(ctx->comm.user, ranks, count, &e->group)) != PAR_OK) {
        par__ctx_free(ctx, e->ranks);
        return st;
    }
    ctx->num_groups++;
    *group = e->group;
    return PAR_OK;
}

PARALLEL_DEF par_status par_ctx_group(par_ctx *ctx, uint32_t dev_mask, par_comm_group **group, int *index,
                                      int *count) {
    int n = 0, i;
    par_status st;
    if (!ctx || !group) return par__fail(PAR_EINVAL, "par_ctx_group: NULL argument");
    *group = NULL;
    if (dev_mask >> ctx->mesh.ndim)
        return par__fail(PAR_EINVAL, "par_ctx_group: dev_mask 0x%x names device dims beyond the mesh's %d",
                         (unsigned)dev_mask, ctx->mesh.ndim);
    if ((st = par_mesh_group(&ctx->mesh, ctx->rank, dev_mask, ctx->scratch_ranks, &n)) != PAR_OK) return st;
    if ((st = par_ctx_group_ranks(ctx, ctx->scratch_ranks, n, group)) != PAR_OK) return st;
    if (index)
        for (i = 0; i < n; i++)
            if (ctx->scratch_ranks[i] == ctx->rank) *index = i;
    if (count) *count = n;
    return PAR_OK;
}

/* Read one launcher variable pair; 1 if found, 0 if not, -1 on a bad value. */
static int par__env_rank_size(const char *rank_var, const char *size_var, int *rank, int *size) {
    int r = 0, s = 0, got_r = par__env_int(rank_var, &r), got_s = par__env_int(size_var, &s);
    if (got_r < 0 || got_s < 0) return -1;
    if (!got_r && !got_s) return 0;
    if (got_r != got_s) {
        par__fail(PAR_EINVAL, "launcher sets %s but not %s", got_r ? rank_var : size_var, got_r ? size_var : rank_var);
        return -1;
    }
    if (s < 1 || r >= s) {
        par__fail(PAR_EINVAL, "launcher says %s=%d, %s=%d: need 0 <= rank < size", rank_var, r, size_var, s);
        return -1;
    }
    *rank = r;
    *size = s;
    return 1;
}

PARALLEL_DEF par_status par_launch_env(int *rank, int *size, int *local_rank) {
    static const char *const vars[][3] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                                          {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
                                          {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"}};
    int i, r = 0, s = 0, local = 0, got, got_local;
    if (!rank || !size) return par__fail(PAR_EINVAL, "par_launch_env: NULL argument");
    for (i = 0; i < 3; i++) {
        got = par__env_rank_size(vars[i][0], vars[i][1], &r, &s);
        if (got < 0) return PAR_EINVAL;
        if (got == 0) continue;
        got_local = par__env_int(vars[i][2], &local);
        if (got_local < 0) return PAR_EINVAL;
        if (!got_local) local = 0;
        if (local >= s) return par__fail(PAR_EINVAL, "launcher says %s=%d but the world has %d ranks", vars[i][2], local, s);
        *rank = r;
        *size = s;
        if (local_rank) *local_rank = local;
        return PAR_OK;
    }
    return par__fail(PAR_EINVAL, "no launcher environment: none of OMPI_COMM_WORLD_RANK/SIZE, RANK/WORLD_SIZE, "
                                 "PMI_RANK/PMI_SIZE is set");
}

/* The world size when a launcher started this process as one of several (0 if
   not): OMPI_COMM_WORLD_SIZE alone counts, since mpirun sets it even where the
   rest of par_launch_env's variables look odd. */
static int par__launched_size(void) {
    int rank = 0, size = 0;
    const char *ompi = getenv("OMPI_COMM_WORLD_SIZE");
    long n;
    if (par_launch_env(&rank, &size, NULL) == PAR_OK && size > 1) return size;
    par_clear_error();
    if (!ompi || !*ompi) return 0;
    n = strtol(ompi, NULL, 10);
    return n > 1 && n <= INT_MAX ? (int)n : 1;
}

PARALLEL_DEF par_status par_launch(const par_ctx_desc *desc, int threads, par_rank_fn fn, void *arg) {
    par_mesh mesh;
    par_status st;
    int world;
    if (!fn) return par__fail(PAR_EINVAL, "par_launch: NULL rank function");
    if (threads < 0) return par__fail(PAR_EINVAL, "par_launch: threads is %d; it must be >= 0 (0 = the mesh's size)", threads);
    world = par__launched_size();
    if (world > 0) {
#ifdef PARALLEL_WITH_MPI
        par_ctx *ctx = NULL;
        if (threads > 0 && threads != world)
            return par__fail(PAR_EINVAL,
                             "par_launch: threads is %d but the launcher started %d processes (pass 0 to use the "
                             "launcher's count)",
                             threads, world);
        if ((st = par_ctx_init_mpi(desc, &ctx)) != PAR_OK) return st;
        st = fn(ctx, arg);
        if (st != PAR_OK)
            par__keep_error_across(st, par_ctx_destroy, ctx, NULL, NULL);
        else
            par_ctx_destroy(ctx);
        return st;
#else
        return par__fail(PAR_EUNSUPPORTED,
                         "par_launch: the launcher started this process as one of %d (mpirun?), but this build has no "
                         "MPI backend: build with mpicc -DPARALLEL_WITH_MPI",
                         world);
#endif
    }
    if (threads == 0) {
        if (!desc || !desc->mesh)
            return par__fail(PAR_EINVAL, "par_launch: threads is 0 and there is no desc->mesh to take the rank count "
                                         "from");
        if ((st = par_mesh_parse(desc->mesh, &mesh)) != PAR_OK) return st;
        threads = par_mesh_size(&mesh);
    }
    return par_run_threads_desc(desc, threads, fn, arg);
}

/* ---- collectives on a context ---------------------------------------------- */

/* The table and group of a call: NULL group = the world. */
static par_status par__ctx_call(const char *who, par_ctx *ctx, par_comm_group **group) {
    if (!ctx) return par__fail(PAR_EINVAL, "%s: NULL ctx", who);
    if (group && !*group) return par_ctx_group(ctx, (1u << ctx->mesh.ndim) - 1, group, NULL, NULL);
    return PAR_OK;
}

PARALLEL_DEF par_status par_all_reduce(par_ctx *ctx, par_comm_group *group, const void *send, void *recv,
                                       int64_t count, par_dtype dtype, par_reduce_op op, par_request **req) {
    par_status st = par__ctx_call("par_all_reduce", ctx, &group);
    return st != PAR_OK ? st : ctx->comm.all_reduce(ctx->comm.user, group, send, recv, count, dtype, op, req);
}

PARALLEL_DEF par_status par_all_gather(par_ctx *ctx, par_comm_group *group, const void *send, void *recv,
                                       int64_t count, par_dtype dtype, par_request **req) {
    par_status st = par__ctx_call("par_all_gather", ctx, &group);
    return st != PAR_OK ? st : ctx->comm.all_gather(ctx->comm.user, group, send, recv, count, dtype, req);
}

PARALLEL_DEF par_status par_reduce_scatter(par_ctx *ctx, par_comm_group *group, const void *send, void *recv,
                                           int64_t count, par_dtype dtype, par_reduce_op op, par_request **req) {
    par_status st = par__ctx_call("par_reduce_scatter", ctx, &group);
    return st != PAR_OK ? st : ctx->comm.reduce_scatter(ctx->comm.user, group, send, recv, count, dtype, op, req);
}

PARALLEL_DEF par_status par_all_to_all(par_ctx *ctx, par_comm_group *group, const void *send, void *recv,
                                       int64_t count, par_dtype dtype, par_request **req) {
    par_status st = par__ctx_call("par_all_to_all", ctx, &group);
    return st != PAR_OK ? st : ctx->comm.all_to_all(ctx->comm.user, group, send, recv, count, dtype, req);
}

PARALLEL_DEF par_status par_broadcast(par_ctx *ctx, par_comm_group *group, void *buf, int64_t count, par_dtype dtype,
                                      int root, par_request **req) {
    par_status st = par__ctx_call("par_broadcast", ctx, &group);
    return st != PAR_OK ? st : ctx->comm.broadcast(ctx->comm.user, group, buf, count, dtype, root, req);
}

PARALLEL_DEF par_status par_send(par_ctx *ctx, par_comm_group *group, const void *buf, int64_t count, par_dtype dtype,
                                 int peer, par_request **req) {
    par_status st = par__ctx_call("par_send", ctx, &group);
    return st != PAR_OK ? st : ctx->comm.send(ctx->comm.user, group, buf, count, dtype, peer, req);
}

PARALLEL_DEF par_status par_recv(par_ctx *ctx, par_comm_group *group, void *buf, int64_t count, par_dtype dtype,
                                 int peer, par_request **req) {
    par_status st = par__ctx_call("par_recv", ctx, &group);
    return st != PAR_OK ? st : ctx->comm.recv(ctx->comm.user, group, buf, count, dtype, peer, req);
}

PARALLEL_DEF par_status par_barrier(par_ctx *ctx, par_comm_group *group) {
    par_status st = par__ctx_call("par_barrier", ctx, &group);
    return st != PAR_OK ? st : ctx->comm.barrier(ctx->comm.user, group);
}

PARALLEL_DEF par_status par_wait(par_ctx *ctx, par_request *req) {
    par_status st = par__ctx_call("par_wait", ctx, NULL);
    if (st != PAR_OK || !req) return st;
    return ctx->comm.wait(ctx->comm.user, req);
}

PARALLEL_DEF par_status par_test(par_ctx *ctx, par_request *req, int *done) {
    par_status st = par__ctx_call("par_test", ctx, NULL);
    if (st != PAR_OK) return st;
    if (!done) return par__fail(PAR_EINVAL, "par_test: NULL done");
    if (!req) return (*done = 1, PAR_OK);
    return ctx->comm.test(ctx->comm.user, req, done);
}

// >>comm-threads
/* The in-process threads backend: par_run_threads starts one thread per rank,
   all sharing one "world". Collectives work directly on the members' buffers
   (each member publishes its pointers, the others read and write them), so a
   collective moves every byte the minimum number of times:
     all_reduce      member i reduces slice i of every member's send buffer into
                     a small L1 block and writes it to every member's recv buffer
                     (reads n*count, writes n*count over all members: the floor;
                     streamed past the cache when the working set is large);
     reduce_scatter  member i reduces block i of every send into its own recv;
     all_gather, all_to_all, broadcast
                     every member copies straight from its peers' buffers.
   A collective is two rendezvous on the group: "arrive" (pointers published,
   bounded by the context timeout, fails fast when a member failed or exited) and
   "done" (everyone finished touching the others' buffers; never times out,
   because a member past "arrive" only runs this file's copy loops).
   Point to point is a matching queue per receiver: whichever of send and recv is
   posted second does the copy, so neither side waits for the other to arrive
   and nonblocking rings (isend next, irecv prev) cannot deadlock. When that
   second post is async and the message is large (PAR__THR_ASYNC_COPY bytes or
   more), the copy goes to the poster's copier thread instead, so it runs while
   the rank computes (a ring's next block arrives behind its current one) the
   way a NIC's DMA would; deliveries never wait on anything, so the copier
   cannot deadlock either.
   Async collectives run in issue order on a per-rank helper thread created on
   first use; a blocking collective issued while async ones are pending is queued
   behind them. Waits spin briefly (only when there are at least as many cores as
   threads), yield a few times, then sleep on a condition variable in slices of
   at most 50 ms, so oversubscribed ranks do not burn the cores their peers need.
   Time is read with C11 timespec_get (CLOCK_MONOTONIC needs POSIX feature macros
   that an -std=c11 user program does not set). */

#ifdef PARALLEL_NO_THREADS

PARALLEL_DEF par_status par_run_threads_desc(const par_ctx_desc *desc, int n, par_rank_fn fn, void *arg) {
    (void)desc; (void)n; (void)fn; (void)arg;
    return par__fail(PAR_EUNSUPPORTED, "par_run_threads: this build defines PARALLEL_NO_THREADS");
}

#else

#include <pthread.h>
#include <sched.h>
#include <time.h>
#if defined(__SSE2__) && !defined(__SANITIZE_THREAD__)
#include <emmintrin.h> /* non-temporal stores for large all_reduce results */
#endif

#define PAR__THR_MAX_RANKS 1024
#define PAR__THR_SLICE_NS 50000000LL /* longest single sleep: a safety net for wake-ups */
#define PAR__THR_BLOCK 2048          /* elements per all_reduce block (8 KiB of f32: stays in L1) */
#define PAR__THR_ASYNC_COPY 65536    /* bytes from which an async p2p copy runs on the copier thread */
#define PAR__THR_GROUP_MAGIC 0x54475250u
#define PAR__THR_REQ_MAGIC 0x54515250u

#if defined(__GNUC__) || defined(__clang__)
#define PAR__THR_RESTRICT __restrict__
#else
#define PAR__THR_RESTRICT
#endif

/* Shared words between threads go through these (gcc/clang builtins work in C and C++). */
#define PAR__THR_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define PAR__THR_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

enum { PAR__THR_RUNNING = 0, PAR__THR_FAILED = 1, PAR__THR_EXITED = 2 };
enum {
    PAR__THR_ALL_REDUCE = PAR_CALL_ALL_REDUCE,
    PAR__THR_ALL_GATHER = PAR_CALL_ALL_GATHER,
    PAR__THR_REDUCE_SCATTER = PAR_CALL_REDUCE_SCATTER,
    PAR__THR_ALL_TO_ALL = PAR_CALL_ALL_TO_ALL,
    PAR__THR_BROADCAST = PAR_CALL_BROADCAST,
    PAR__THR_BARRIER = PAR_CALL_BARRIER
};
static const char *par__thr_op_name(int op) { return par_comm_call_name((par_comm_call)op); }

static int64_t par__thr_now_ns(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}


static void par__thr_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* ---- blocking waits ----------------------------------------------------- */

/* A condition variable with a sleeper count, so notifiers skip the mutex when
   nobody sleeps. The waiter raises `sleepers` then rechecks its condition, the
   notifier publishes its state then reads `sleepers` (both sequentially
   consistent), so at least one of them sees the other. */
typedef struct par__thr_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sleepers;
    int spins, yields;
} par__thr_sync;

static int par__thr_sync_init(par__thr_sync *s, int spins, int yields) {
    s->sleepers = 0;
    s->spins = spins;
    s->yields = yields;
    if (pthread_mutex_init(&s->mu, NULL) != 0) return 0;
    if (pthread_cond_init(&s->cv, NULL) != 0) {
        pthread_mutex_destroy(&s->mu);
        return 0;
    }
    return 1;
}

static void par__thr_sync_destroy(par__thr_sync *s) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

static void par__thr_notify(par__thr_sync *s) {
    /* A read-modify-write, not a fence + load: it reads the latest count and
       orders like a full barrier (and ThreadSanitizer rejects fences). */
    if (__atomic_fetch_add(&s->sleepers, 0, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

typedef int (*par__thr_ready_fn)(void *arg);

/* Wait until ready(arg) or the deadline (ns, < 0 = none). 1 if ready. */
static int par__thr_await(par__thr_sync *s, par__thr_ready_fn ready, void *arg, int64_t deadline) {
    int i;
    for (i = 0;; i++) {
        int64_t now, slice;
        struct timespec until;
        if (ready(arg)) return 1;
        if (i < s->spins) {
            par__thr_relax();
            continue;
        }
        if (i < s->spins + s->yields) {
            sched_yield();
            continue;
        }
        now = par__thr_now_ns();
        if (deadline >= 0 && now >= deadline) return ready(arg);
        slice = deadline >= 0 && deadline - now < PAR__THR_SLICE_NS ? deadline - now : PAR__THR_SLICE_NS;
        until.tv_sec = (time_t)((now + slice) / 1000000000LL);
        until.tv_nsec = (long)((now + slice) % 1000000000LL);
        pthread_mutex_lock(&s->mu);
        __atomic_fetch_add(&s->sleepers, 1, __ATOMIC_SEQ_CST);
        if (!ready(arg)) pthread_cond_timedwait(&s->cv, &s->mu, &until);
        __atomic_fetch_sub(&s->sleepers, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&s->mu);
    }
}

/* ---- shared state ------------------------------------------------------- */

typedef struct par__thr_world par__thr_world;
typedef struct par__thr_group par__thr_group;
typedef struct par__thr_rank par__thr_rank;
typedef struct par__thr_handle par__thr_handle;

/* What member i published for its current collective; one cache line each. */
typedef struct par__thr_slot {
    int64_t arrive, done; /* atomic: sequence number + 1 of the last op reached / finished */
    int op, dtype, rop, root;
    int64_t count;
    const void *send;
    void *recv;
    char pad_[64 - 4 * 8 - 4 * 4 - 2 * sizeof(void *) > 0 ? 64 - 4 * 8 - 4 * 4 - 2 * sizeof(void *) : 1];
} par__thr_slot;

/* One posted send or recv waiting for its partner (lives in the poster's frame
   or request until `complete`). */
typedef struct par__thr_msg {
    struct par__thr_msg *next;
    int src, dst; /* member indices */
    int is_send;
    const void *sbuf;
    void *rbuf;
    int64_t count;
    par_dtype dtype;
    int matched;  /* under the group mutex: taken by a partner, copy in progress */
    int complete; /* atomic */
    int64_t seq;  /* the poster's p2p op number on the group (1, 2, ...), for messages */
    par_status status;
    char msg[200];
    /* a large matched pair whose second poster was async waits in that rank's
       copier queue: this node, its partner and the group */
    struct par__thr_msg *partner, *cnext;
    struct par__thr_group *cgroup;
} par__thr_msg;

struct par__thr_group {
    par__thr_world *world;
    int n;
    int *ranks;
    char name[96]; /* "[0,1,2,3]" for messages */
    par__thr_sync sync;
    par__thr_slot *slots;
    void *slots_raw;
    int broken; /* atomic: an op gave up half way; later collectives fail fast */
    par_status broken_status;
    char broken_msg[256];
    int *joined; /* world mutex: member i has a handle on this instance */
    int released;
    par__thr_msg **sendq, **recvq; /* group mutex: per receiving member, unmatched sends / recvs */
    par__thr_group *next;
};

struct par__thr_world {
    par_allocator alloc; /* par_ctx_desc.allocator: the backend's host memory */
    int size, timeout_ms;
    pthread_mutex_t mu; /* group registry, rank states */
    int *state;         /* atomic per rank: RUNNING / FAILED / EXITED */
    int failed_rank;    /* atomic: first failed rank + 1, 0 if none */
    int fail_seq;
    int spins, yields;
    par__thr_group *groups;
    par__thr_rank *ranks;
};

/* A rank's handle on a group (what par_comm_group * points to). */
struct par__thr_handle {
    uint32_t magic;
    par__thr_rank *owner;
    par__thr_group *g;
    int index;
    int64_t seq; /* collectives issued on the group by this member */
    int64_t p2p_seq; /* sends and recvs posted on the group by this member */
    int refs;    /* the creator's + one per live request */
    par__thr_handle *next_live;
};

typedef struct par__thr_coll {
    int op;
    par__thr_handle *h;
    const void *send;
    void *recv;
    int64_t count;
    par_dtype dtype;
    par_reduce_op rop;
    int root;
} par__thr_coll;

/* A request (what par_request * points to). */
typedef struct par__thr_req {
    uint32_t magic;
    par__thr_rank *owner;
    par__thr_handle *h;
    int is_p2p;
    par__thr_coll coll;
    par__thr_msg node;
    int done; /* atomic, collectives: executed by the helper */
    par_status status;
    char msg[256];
    struct par__thr_req *qnext, *lprev, *lnext;
} par__thr_req;

struct par__thr_rank {
    par__thr_world *world;
    int rank;
    par__thr_sync sync; /* helper queue and collective completion */
    pthread_t helper;
    int helper_started, quit;
    par__thr_req *qhead, *qtail;
    int queued; /* atomic: collectives handed to the helper and not finished */
    pthread_t copier;          /* copies of large async p2p pairs, off the rank's thread */
    int copier_started, cquit;
    par__thr_msg *chead, *ctail; /* under sync.mu */
    par__thr_req *live;
    par__thr_handle *handles;
    /* par_run_threads bookkeeping */
    pthread_t thread;
    int started, sync_ok, fail_order;
    par_status result;
    char msg[512];
    const par_ctx_desc *desc;
    par_rank_fn fn;
    void *arg;
};

static int par__thr_state(par__thr_world *w, int rank) { return PAR__THR_LOAD(&w->state[rank]); }

/* Record that `rank` failed or exited and wake everyone waiting anywhere. */
static void par__thr_mark(par__thr_world *w, int rank, int state) {
    par__thr_group *g;
    pthread_mutex_lock(&w->mu);
    if (state == PAR__THR_FAILED && par__thr_state(w, rank) != PAR__THR_FAILED) {
        PAR__THR_STORE(&w->state[rank], PAR__THR_FAILED);
        w->ranks[rank].fail_order = ++w->fail_seq;
        if (!PAR__THR_LOAD(&w->failed_rank)) PAR__THR_STORE(&w->failed_rank, rank + 1);
    } else if (state == PAR__THR_EXITED && par__thr_state(w, rank) == PAR__THR_RUNNING) {
        PAR__THR_STORE(&w->state[rank], PAR__THR_EXITED);
    }
    for (g = w->groups; g; g = g->next) {
        pthread_mutex_lock(&g->sync.mu);
        pthread_cond_broadcast(&g->sync.cv);
        pthread_mutex_unlock(&g->sync.mu);
    }
    pthread_mutex_unlock(&w->mu);
}

/* ---- groups ------------------------------------------------------------- */

static void par__thr_group_free(par__thr_group *g) {
    const par_allocator *a = &g->world->alloc;
    par__thr_sync_destroy(&g->sync);
    par__alloc_free(a, g->ranks);
    par__alloc_free(a, g->joined);
    par__alloc_free(a, g->slots_raw);
    par__alloc_free(a, g->sendq);
    par__alloc_free(a, g->recvq);
    par__alloc_free(a, g);
}

static par__thr_group *par__thr_group_new(par__thr_world *w, const int *ranks, int n) {
    const par_allocator *a = &w->alloc;
    par__thr_group *g = (par__thr_group *)par__alloc_malloc(a, sizeof *g);
    par__buf b;
    int i;
    if (!g) return NULL;
    memset(g, 0, sizeof *g);
    g->world = w;
    g->n = n;
    g->ranks = (int *)par__alloc_malloc(a, sizeof(int) * (size_t)n);
    g->joined = (int *)par__alloc_malloc(a, sizeof(int) * (size_t)n);
    g->slots_raw = par__alloc_malloc(a, sizeof(par__thr_slot) * (size_t)n + 64);
    g->sendq = (par__thr_msg **)par__alloc_malloc(a, sizeof(par__thr_msg *) * (size_t)n);
    g->recvq = (par__thr_msg **)par__alloc_malloc(a, sizeof(par__thr_msg *) * (size_t)n);
    if (!g->ranks || !g->joined || !g->slots_raw || !g->sendq || !g->recvq ||
        !par__thr_sync_init(&g->sync, w->spins, w->yields)) {
        par__alloc_free(a, g->ranks);
        par__alloc_free(a, g->joined);
        par__alloc_free(a, g->slots_raw);
        par__alloc_free(a, g->sendq);
        par__alloc_free(a, g->recvq);
        par__alloc_free(a, g);
        return NULL;
    }
    memcpy(g->ranks, ranks, sizeof(int) * (size_t)n);
    memset(g->joined, 0, sizeof(int) * (size_t)n);
    g->slots = (par__thr_slot *)(void *)(((uintptr_t)g->slots_raw + 63) & ~(uintptr_t)63);
    memset(g->slots, 0, sizeof(par__thr_slot) * (size_t)n);
    for (i = 0; i < n; i++) g->sendq[i] = g->recvq[i] = NULL;
    par__buf_init(&b, g->name, sizeof g->name);
    par__bprintf(&b, "[");
    for (i = 0; i < n; i++) {
        if (b.len > sizeof g->name - 20 && i < n - 1) {
            par__bprintf(&b, "...,%d", ranks[n - 1]);
            break;
        }
        par__bprintf(&b, i ? ",%d" : "%d", ranks[i]);
    }
    par__bprintf(&b, "]");
    return g;
}

/* Drop one member's hold on g; the last one out frees it. */
static void par__thr_group_release(par__thr_group *g) {
    par__thr_world *w = g->world;
    par__thr_group **p;
    pthread_mutex_lock(&w->mu);
    if (++g->released == g->n) {
        for (p = &w->groups; *p; p = &(*p)->next)
            if (*p == g) {
                *p = g->next;
                break;
            }
        par__thr_group_free(g);
    }
    pthread_mutex_unlock(&w->mu);
}

static void par__thr_handle_unref(par__thr_handle *h) {
    par__thr_handle **p;
    if (--h->refs > 0) return;
    for (p = &h->owner->handles; *p; p = &(*p)->next_live)
        if (*p == h) {
            *p = h->next_live;
            break;
        }
    h->magic = 0;
    par__thr_group_release(h->g);
    par__alloc_free(&h->owner->world->alloc, h);
}

static par_status par__thr_group_create(void *user, const int *ranks, int count, par_comm_group **out) {
    par__thr_rank *r = (par__thr_rank *)user;
    par__thr_world *w = r->world;
    par__thr_handle *h;
    par__thr_group *g;
    int index;
    par_status st;
    if (!out) return par__fail(PAR_EINVAL, "threads group_create: NULL group");
    *out = NULL;
    if ((st = par_comm_check_ranks("threads", ranks, count, w->size, r->rank, &index)) != PAR_OK) return st;
    h = (par__thr_handle *)par__alloc_malloc(&w->alloc, sizeof *h);
    if (!h) return par__fail(PAR_ENOMEM, "group_create: out of memory");
    /* The k-th creation of a rank list by each member meets the k-th instance. */
    pthread_mutex_lock(&w->mu);
    for (g = w->groups; g; g = g->next)
        if (g->n == count && !g->joined[index] && memcmp(g->ranks, ranks, sizeof(int) * (size_t)count) == 0) break;
    if (!g) {
        if ((g = par__thr_group_new(w, ranks, count)) == NULL) {
            pthread_mutex_unlock(&w->mu);
            par__alloc_free(&w->alloc, h);
            return par__fail(PAR_ENOMEM, "group_create: out of memory");
        }
        g->next = w->groups;
        w->groups = g;
    }
    g->joined[index] = 1;
    pthread_mutex_unlock(&w->mu);
    h->magic = PAR__THR_GROUP_MAGIC;
    h->owner = r;
    h->g = g;
    h->index = index;
    h->seq = 0;
    h->p2p_seq = 0;
    h->refs = 1;
    h->next_live = r->handles;
    r->handles = h;
    *out = (par_comm_group *)(void *)h;
    return PAR_OK;
}

static void par__thr_group_destroy(void *user, par_comm_group *group) {
    par__thr_handle *h = (par__thr_handle *)(void *)group;
    if (!h || h->magic != PAR__THR_GROUP_MAGIC || h->owner != (par__thr_rank *)user) return;
    h->magic = 0; /* no new ops; live requests keep it until they are waited */
    par__thr_handle_unref(h);
}

/* The handle behind `group`, or NULL with PAR_EINVAL set. */
static par__thr_handle *par__thr_handle_of(par__thr_rank *r, par_comm_group *group, const char *op) {
    par__thr_handle *h = (par__thr_handle *)(void *)group;
    if (!h) {
        par__fail(PAR_EINVAL, "%s: NULL group", op);
        return NULL;
    }
    if (h->magic != PAR__THR_GROUP_MAGIC || h->owner != r) {
        par__fail(PAR_EINVAL, "%s: the group was not created by rank %d of this par_run_threads world "
                              "(another rank's or world's group, or destroyed)", op, r->rank);
        return NULL;
    }
    return h;
}

/* ---- element kernels ---------------------------------------------------- */

/* acc += x. Fixed 16-wide steps: -O2's cheap vectorizer only takes loops whose
   trip count needs no scalar epilogue, and the sum is memory bound only when
   vectorized. */
static void par__thr_add_f32(float *PAR__THR_RESTRICT acc, const float *PAR__THR_RESTRICT x, int64_t len) {
    int64_t k = 0;
    int j;
    for (; k + 16 <= len; k += 16)
        for (j = 0; j < 16; j++) acc[k + j] += x[k + j];
    for (; k < len; k++) acc[k] += x[k];
}

/* acc[0..len) = op over the n members' send + off (elements); f32 accumulators
   for f32/bf16/f16, the type itself for f64, i32, i64 (integer sums wrap). */
static void par__thr_reduce_block(const par__thr_slot *s, int n, int64_t off, int64_t len, par_dtype dt,
                                  par_reduce_op op, void *acc_) {
    int i;
    int64_t k;
    switch (dt) {
    case PAR_F32:
    case PAR_BF16:
    case PAR_F16: {
        float *PAR__THR_RESTRICT acc = (float *)acc_;
        for (i = 0; i < n; i++) {
            if (dt == PAR_F32) {
                const float *PAR__THR_RESTRICT x = (const float *)s[i].send + off;
                if (i == 0) memcpy(acc, x, (size_t)len * 4);
                else if (op == PAR_REDUCE_MAX)
                    for (k = 0; k < len; k++) acc[k] = x[k] > acc[k] ? x[k] : acc[k];
                else
                    par__thr_add_f32(acc, x, len);
            } else {
                const uint16_t *x = (const uint16_t *)s[i].send + off;
                for (k = 0; k < len; k++) {
                    float v = dt == PAR_BF16 ? par__bf16_to_f32(x[k]) : par__f16_to_f32(x[k]);
                    acc[k] = i == 0 ? v : op == PAR_REDUCE_MAX ? (v > acc[k] ? v : acc[k]) : acc[k] + v;
                }
            }
        }
        if (op == PAR_REDUCE_AVG)
            for (k = 0; k < len; k++) acc[k] /= (float)n;
        if (dt != PAR_F32) { /* narrow in place: element k's 2 bytes never overtake float k */
            uint16_t *out = (uint16_t *)acc_;
            for (k = 0; k < len; k++) {
                float v = acc[k];
                out[k] = dt == PAR_BF16 ? par__f32_to_bf16(v) : par__f32_to_f16(v);
            }
        }
        break;
    }
    case PAR_F64: {
        double *PAR__THR_RESTRICT acc = (double *)acc_;
        for (i = 0; i < n; i++) {
            const double *PAR__THR_RESTRICT x = (const double *)s[i].send + off;
            if (i == 0) memcpy(acc, x, (size_t)len * 8);
            else if (op == PAR_REDUCE_MAX)
                for (k = 0; k < len; k++) acc[k] = x[k] > acc[k] ? x[k] : acc[k];
            else
                for (k = 0; k < len; k++) acc[k] += x[k];
        }
        if (op == PAR_REDUCE_AVG)
            for (k = 0; k < len; k++) acc[k] /= (double)n;
        break;
    }
/* The integer types: sums wrap (added as unsigned), avg truncates. */
#define PAR__THR_REDUCE_INT(T, U)                                                    \
    do {                                                                             \
        T *PAR__THR_RESTRICT acc = (T *)acc_;                                        \
        for (i = 0; i < n; i++) {                                                    \
            const T *PAR__THR_RESTRICT x = (const T *)s[i].send + off;               \
            if (i == 0) memcpy(acc, x, (size_t)len * sizeof(T));                     \
            else if (op == PAR_REDUCE_MAX)                                           \
                for (k = 0; k < len; k++) acc[k] = x[k] > acc[k] ? x[k] : acc[k];    \
            else                                                                     \
                for (k = 0; k < len; k++) acc[k] = (T)((U)acc[k] + (U)x[k]);         \
        }                                                                            \
        if (op == PAR_REDUCE_AVG)                                                    \
            for (k = 0; k < len; k++) acc[k] /= n;                                   \
    } while (0)
    case PAR_I32:
        PAR__THR_REDUCE_INT(int32_t, uint32_t);
        break;
    default: /* PAR_I64 */
        PAR__THR_REDUCE_INT(int64_t, uint64_t);
        break;
#undef PAR__THR_REDUCE_INT
    }
}

#define PAR__THR_STREAM_BYTES (48.0 * 1024 * 1024) /* working sets above this bypass the caches */

/* dst <- src (bytes). stream: non-temporal stores where the ISA has them, so a
   result the writer will not read again does not first pull dst's cache lines in
   (a third of the memory traffic of an all_reduce larger than the cache). */
static void par__thr_put(char *dst, const void *src, size_t bytes, int stream) {
#if defined(__SSE2__) && !defined(__SANITIZE_THREAD__)
    if (stream) {
        const char *s = (const char *)src;
        size_t head = (size_t)(-(uintptr_t)dst & 15u), k;
        if (head > bytes) head = bytes;
        memcpy(dst, s, head);
        for (k = head; k + 16 <= bytes; k += 16)
            _mm_stream_si128((__m128i *)(void *)(dst + k), _mm_loadu_si128((const __m128i *)(const void *)(s + k)));
        memcpy(dst + k, s + k, bytes - k);
        return;
    }
#endif
    (void)stream;
    memcpy(dst, src, bytes);
}

/* Do member `me`'s share of an op whose n members all published their slots. */
static void par__thr_work(const par__thr_slot *s, int n, int me) {
    const par__thr_slot *mine = &s[me];
    par_dtype dt = (par_dtype)mine->dtype;
    par_reduce_op rop = (par_reduce_op)mine->rop;
    size_t esz = par_dtype_size(dt);
    int64_t count = mine->count, k, len;
    size_t bytes = (size_t)count * esz;
    union { float f[PAR__THR_BLOCK]; double d[PAR__THR_BLOCK / 2]; } acc;
    int i;
    if (count == 0) return;
    switch (mine->op) {
    case PAR__THR_ALL_REDUCE: {
        /* Slices aligned to 64 bytes so no two members write one cache line. */
        int64_t align = (int64_t)(64 / esz), per = (count + n - 1) / n, lo, hi;
        int64_t block = esz == 8 ? PAR__THR_BLOCK / 2 : PAR__THR_BLOCK;
        /* past the last-level cache, stream the results (no read-for-ownership) */
        int stream = (double)bytes * n * 2 > PAR__THR_STREAM_BYTES;
        per = (per + align - 1) / align * align;
        lo = (int64_t)me * per < count ? (int64_t)me * per : count;
        hi = lo + per < count ? lo + per : count;
        for (k = lo; k < hi; k += len) {
            len = hi - k < block ? hi - k : block;
            par__thr_reduce_block(s, n, k, len, dt, rop, &acc);
            for (i = 0; i < n; i++)
                par__thr_put((char *)s[(me + i) % n].recv + (size_t)k * esz, &acc, (size_t)len * esz, stream);
        }
        break;
    }
    case PAR__THR_REDUCE_SCATTER: {
        int64_t block = esz == 8 ? PAR__THR_BLOCK / 2 : PAR__THR_BLOCK;
        for (k = 0; k < count; k += len) {
            len = count - k < block ? count - k : block;
            par__thr_reduce_block(s, n, (int64_t)me * count + k, len, dt, rop, &acc);
            memcpy((char *)mine->recv + (size_t)k * esz, &acc, (size_t)len * esz);
        }
        break;
    }
    case PAR__THR_ALL_GATHER:
        for (i = 0; i < n; i++) {
            char *dst = (char *)mine->recv + (size_t)i * bytes;
            if (dst != s[i].send) memcpy(dst, s[i].send, bytes);
        }
        break;
    case PAR__THR_ALL_TO_ALL:
        for (i = 0; i < n; i++)
            memcpy((char *)mine->recv + (size_t)i * bytes, (const char *)s[i].send + (size_t)me * bytes, bytes);
        break;
    case PAR__THR_BROADCAST:
        if (me != mine->root) memcpy(mine->recv, s[mine->root].send, bytes);
        break;
    default:
        break;
    }
}

/* ---- collectives -------------------------------------------------------- */

typedef struct par__thr_wait_arg {
    par__thr_group *g;
    int64_t target;
    int done_phase;
} par__thr_wait_arg;

static int par__thr_all_reached(par__thr_group *g, int64_t target, int done_phase) {
    int i;
    for (i = 0; i < g->n; i++)
        if ((done_phase ? PAR__THR_LOAD(&g->slots[i].done) : PAR__THR_LOAD(&g->slots[i].arrive)) < target) return 0;
    return 1;
}

/* Arrive phase: everyone arrived, or a reason to give up (broken, failure, a
   missing member gone). */
static int par__thr_arrive_ready(void *p) {
    par__thr_wait_arg *a = (par__thr_wait_arg *)p;
    par__thr_group *g = a->g;
    int i;
    if (par__thr_all_reached(g, a->target, 0)) return 1;
    if (PAR__THR_LOAD(&g->broken) || PAR__THR_LOAD(&g->world->failed_rank)) return 1;
    for (i = 0; i < g->n; i++)
        if (PAR__THR_LOAD(&g->slots[i].arrive) < a->target && par__thr_state(g->world, g->ranks[i]) != PAR__THR_RUNNING)
            return 1;
    return 0;
}

static int par__thr_done_ready(void *p) {
    par__thr_wait_arg *a = (par__thr_wait_arg *)p;
    return par__thr_all_reached(a->g, a->target, 1);
}

/* Fails fast if the world or the group is already unusable. */
static par_status par__thr_precheck(par__thr_rank *r, par__thr_group *g, const char *op) {
    par__thr_world *w = r->world;
    int f = PAR__THR_LOAD(&w->failed_rank);
    if (f) return par__fail(PAR_ECOMM, "%s on group %s: rank %d failed", op, g->name, f - 1);
    if (par__thr_state(w, r->rank) != PAR__THR_RUNNING)
        return par__fail(PAR_ECOMM, "%s on group %s: rank %d (this rank) has already returned from its function", op,
                         g->name, r->rank);
    if (PAR__THR_LOAD(&g->broken))
        return par__fail(g->broken_status, "%s on group %s: the group is unusable after an earlier failure: %s", op,
                         g->name, g->broken_msg);
    return PAR_OK;
}

/* Called with g->sync.mu held when not every member arrived for op `target`:
   decide why, break the group so everybody gives up with the same message. */
static par_status par__thr_give_up(par__thr_rank *r, par__thr_group *g, const char *op, int64_t target) {
    par__thr_world *w = r->world;
    par__buf b;
    int i, f, missing = 0;
    if (PAR__THR_LOAD(&g->broken)) return par__fail(g->broken_status, "%s", g->broken_msg);
    par__buf_init(&b, g->broken_msg, sizeof g->broken_msg);
    f = PAR__THR_LOAD(&w->failed_rank);
    for (i = 0; i < g->n && !f; i++)
        if (PAR__THR_LOAD(&g->slots[i].arrive) < target && par__thr_state(w, g->ranks[i]) != PAR__THR_RUNNING) {
            g->broken_status = PAR_ECOMM;
            par__bprintf(&b, "%s on group %s: rank %d %s", op, g->name, g->ranks[i],
                         par__thr_state(w, g->ranks[i]) == PAR__THR_FAILED ? "failed"
                                                                          : "returned from its function without joining");
            break;
        }
    if (f) {
        g->broken_status = PAR_ECOMM;
        par__bprintf(&b, "%s on group %s: rank %d failed", op, g->name, f - 1);
    } else if (!b.len) {
        g->broken_status = PAR_ETIMEOUT;
        par__bprintf(&b, "%s on group %s: rank", op, g->name);
        for (i = 0; i < g->n; i++)
            if (PAR__THR_LOAD(&g->slots[i].arrive) < target) par__bprintf(&b, "%s %d", missing++ ? "," : "", g->ranks[i]);
        par__bprintf(&b, " did not arrive within %d ms", w->timeout_ms);
    }
    /* which collective of the group it was: every member is at the same one */
    par__bprintf(&b, " (collective #%lld on this group)", (long long)target);
    PAR__THR_STORE(&g->broken, 1);
    pthread_cond_broadcast(&g->sync.cv);
    return par__fail(g->broken_status, "%s", g->broken_msg);
}

/* Members must agree on the op and its arguments; every member finds the same
   first mismatch, so they all fail alike. */
static par_status par__thr_check_match(const par__thr_group *g, const char *op, int64_t seq) {
    const par__thr_slot *s = g->slots;
    long long q = (long long)seq;
    int i;
    for (i = 1; i < g->n; i++) {
        if (s[i].op != s[0].op)
            return par__fail(PAR_EINVAL,
                             "collective mismatch on group %s: rank %d called %s but rank %d called %s (collective #%lld "
                             "on this group)", g->name, g->ranks[0], par__thr_op_name(s[0].op), g->ranks[i],
                             par__thr_op_name(s[i].op), q);
        if (s[i].count != s[0].count)
            return par__fail(PAR_EINVAL,
                             "%s on group %s: rank %d passed count %lld but rank %d passed count %lld (collective #%lld "
                             "on this group)", op, g->name, g->ranks[0], (long long)s[0].count, g->ranks[i],
                             (long long)s[i].count, q);
        if (s[i].dtype != s[0].dtype)
            return par__fail(PAR_EINVAL, "%s on group %s: rank %d passed dtype %s but rank %d passed %s (collective #%lld "
                             "on this group)", op, g->name, g->ranks[0], par_dtype_name((par_dtype)s[0].dtype),
                             g->ranks[i], par_dtype_name((par_dtype)s[i].dtype), q);
        if (s[i].rop != s[0].rop)
            return par__fail(PAR_EINVAL, "%s on group %s: rank %d passed op %s but rank %d passed %s (collective #%lld "
                             "on this group)", op, g->name, g->ranks[0], par_reduce_op_name((par_reduce_op)s[0].rop),
                             g->ranks[i], par_reduce_op_name((par_reduce_op)s[i].rop), q);
        if (s[i].root != s[0].root)
            return par__fail(PAR_EINVAL,
                             "%s on group %s: rank %d passed root %d but rank %d passed root %d (collective #%lld on "
                             "this group)", op, g->name, g->ranks[0], s[0].root, g->ranks[i], s[i].root, q);
    }
    return PAR_OK;
}

/* Run one collective on the calling thread (the rank's or its helper). */
static par_status par__thr_run_coll(const par__thr_coll *c) {
    par__thr_handle *h = c->h;
    par__thr_rank *r = h->owner;
    par__thr_group *g = h->g;
    par__thr_slot *mine = &g->slots[h->index];
    const char *op = par__thr_op_name(c->op);
    par__thr_wait_arg a;
    par_status st;
    int64_t target = h->seq + 1;
    if ((st = par__thr_precheck(r, g, op)) != PAR_OK) return st;
    pthread_mutex_lock(&g->sync.mu);
    if (PAR__THR_LOAD(&g->broken)) {
        pthread_mutex_unlock(&g->sync.mu);
        return par__thr_precheck(r, g, op);
    }
    mine->op = c->op;
    mine->dtype = (int)c->dtype;
    mine->rop = (int)c->rop;
    mine->root = c->root;
    mine->count = c->count;
    mine->send = c->send;
    mine->recv = c->recv;
    h->seq = target;
    PAR__THR_STORE(&mine->arrive, target);
    if (__atomic_load_n(&g->sync.sleepers, __ATOMIC_SEQ_CST) > 0) pthread_cond_broadcast(&g->sync.cv);
    pthread_mutex_unlock(&g->sync.mu);

    a.g = g;
    a.target = target;
    a.done_phase = 0;
    if (!par__thr_await(&g->sync, par__thr_arrive_ready, &a, par__thr_now_ns() + (int64_t)r->world->timeout_ms * 1000000LL) ||
        !par__thr_all_reached(g, target, 0)) {
        /* Giving up is decided under the mutex: once every member arrived the op
           goes ahead for all of them, so nobody touches a buffer whose owner left. */
        pthread_mutex_lock(&g->sync.mu);
        if (!par__thr_all_reached(g, target, 0)) {
            st = par__thr_give_up(r, g, op, target);
            pthread_mutex_unlock(&g->sync.mu);
            return st;
        }
        pthread_mutex_unlock(&g->sync.mu);
    }
    st = par__thr_check_match(g, op, target);
    if (st == PAR_OK) par__thr_work(g->slots, g->n, h->index);
#if defined(__SSE2__) && !defined(__SANITIZE_THREAD__)
    _mm_sfence(); /* streamed stores are weakly ordered: publish them before "done" */
#endif
    PAR__THR_STORE(&mine->done, target);
    par__thr_notify(&g->sync);
    a.done_phase = 1;
    par__thr_await(&g->sync, par__thr_done_ready, &a, -1);
    return st;
}

/* ---- the async helper --------------------------------------------------- */

static int par__thr_queue_ready(void *p) {
    par__thr_rank *r = (par__thr_rank *)p;
    return PAR__THR_LOAD(&r->qhead) != NULL || PAR__THR_LOAD(&r->quit);
}

static void *par__thr_helper_main(void *p) {
    par__thr_rank *r = (par__thr_rank *)p;
    for (;;) {
        par__thr_req *q;
        par__thr_await(&r->sync, par__thr_queue_ready, r, -1);
        pthread_mutex_lock(&r->sync.mu);
        q = r->qhead;
        if (q) {
            PAR__THR_STORE(&r->qhead, q->qnext);
            if (!q->qnext) r->qtail = NULL;
        }
        pthread_mutex_unlock(&r->sync.mu);
        if (!q) {
            if (PAR__THR_LOAD(&r->quit)) break;
            continue;
        }
        q->status = par__thr_run_coll(&q->coll);
        if (q->status != PAR_OK) par__copy_text(q->msg, sizeof q->msg, par_last_error());
        __atomic_fetch_sub(&r->queued, 1, __ATOMIC_ACQ_REL);
        PAR__THR_STORE(&q->done, 1);
        par__thr_notify(&r->sync);
    }
    return NULL;
}

static par_status par__thr_enqueue(par__thr_rank *r, par__thr_req *q) {
    if (!r->helper_started) {
        if (pthread_create(&r->helper, NULL, par__thr_helper_main, r) != 0)
            return par__fail(PAR_ENOMEM, "rank %d: could not start the thread that runs async collectives", r->rank);
        r->helper_started = 1;
    }
    q->qnext = NULL;
    q->done = 0;
    __atomic_fetch_add(&r->queued, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&r->sync.mu);
    if (r->qtail) r->qtail->qnext = q;
    else PAR__THR_STORE(&r->qhead, q);
    r->qtail = q;
    pthread_cond_broadcast(&r->sync.cv);
    pthread_mutex_unlock(&r->sync.mu);
    return PAR_OK;
}

static int par__thr_req_done_ready(void *p) { return PAR__THR_LOAD(&((par__thr_req *)p)->done); }

static par__thr_req *par__thr_req_new(par__thr_rank *r, par__thr_handle *h) {
    par__thr_req *q = (par__thr_req *)par__alloc_malloc(&r->world->alloc, sizeof *q);
    if (!q) return NULL;
    memset(q, 0, sizeof *q);
    q->magic = PAR__THR_REQ_MAGIC;
    q->owner = r;
    q->h = h;
    h->refs++;
    q->lnext = r->live;
    if (r->live) r->live->lprev = q;
    r->live = q;
    return q;
}

static void par__thr_req_free(par__thr_req *q) {
    par__thr_rank *r = q->owner;
    if (q->lprev) q->lprev->lnext = q->lnext;
    else r->live = q->lnext;
    if (q->lnext) q->lnext->lprev = q->lprev;
    q->magic = 0;
    par__thr_handle_unref(q->h);
    par__alloc_free(&r->world->alloc, q);
}

/* Validated collective: inline, queued behind pending async ones, or async. */
static par_status par__thr_submit(par__thr_rank *r, const par__thr_coll *c, par_request **req) {
    par__thr_req *q, local;
    par_status st;
    if (req) {
        if ((q = par__thr_req_new(r, c->h)) == NULL)
            return par__fail(PAR_ENOMEM, "%s: out of memory for the request", par__thr_op_name(c->op));
        q->coll = *c;
        if ((st = par__thr_enqueue(r, q)) != PAR_OK) {
            par__thr_req_free(q);
            return st;
        }
        *req = (par_request *)(void *)q;
        return PAR_OK;
    }
    if (PAR__THR_LOAD(&r->queued) == 0) return par__thr_run_coll(c);
    memset(&local, 0, sizeof local);
    local.coll = *c;
    if ((st = par__thr_enqueue(r, &local)) != PAR_OK) return st;
    par__thr_await(&r->sync, par__thr_req_done_ready, &local, -1);
    return local.status == PAR_OK ? PAR_OK : par__fail(local.status, "%s", local.msg);
}

/* Argument checks every member does alone, before arriving. */
static par_status par__thr_prepare(par__thr_rank *r, par_comm_group *group, int op, const void *send, void *recv,
                                   int64_t count, par_dtype dtype, par_reduce_op rop, int root, par__thr_coll *c) {
    par__thr_handle *h = par__thr_handle_of(r, group, par__thr_op_name(op));
    par_comm_args a;
    par_status st;
    if (!h) return PAR_EINVAL;
    a.call = (par_comm_call)op, a.send = send, a.recv = recv, a.count = count, a.dtype = dtype, a.op = rop, a.peer = root;
    if ((st = par_comm_check_args("threads", h->g->name, h->g->n, h->index, &a)) != PAR_OK) return st;
    c->op = op;
    c->h = h;
    c->send = send;
    c->recv = recv;
    c->count = count;
    c->dtype = dtype;
    c->rop = op == PAR__THR_ALL_REDUCE || op == PAR__THR_REDUCE_SCATTER ? rop : PAR_REDUCE_SUM;
    c->root = op == PAR__THR_BROADCAST ? root : 0;
    return PAR_OK;
}

static par_status par__thr_coll_entry(void *user, par_comm_group *group, int op, const void *send, void *recv,
                                      int64_t count, par_dtype dtype, par_reduce_op rop, int root, par_request **req) {
    par__thr_rank *r = (par__thr_rank *)user;
    par__thr_coll c;
    par_status st;
    if (req) *req = NULL;
    if ((st = par__thr_prepare(r, group, op, send, recv, count, dtype, rop, root, &c)) != PAR_OK) return st;
    return par__thr_submit(r, &c, req);
}

static par_status par__thr_all_reduce(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                                      par_dtype dtype, par_reduce_op op, par_request **req) {
    return par__thr_coll_entry(user, group, PAR__THR_ALL_REDUCE, send, recv, count, dtype, op, 0, req);
}
static par_status par__thr_all_gather(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                                      par_dtype dtype, par_request **req) {
    return par__thr_coll_entry(user, group, PAR__THR_ALL_GATHER, send, recv, count, dtype, PAR_REDUCE_SUM, 0, req);
}
static par_status par__thr_reduce_scatter(void *user, par_comm_group *group, const void *send, void *recv,
                                          int64_t count, par_dtype dtype, par_reduce_op op, par_request **req) {
    return par__thr_coll_entry(user, group, PAR__THR_REDUCE_SCATTER, send, recv, count, dtype, op, 0, req);
}
static par_status par__thr_all_to_all(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                                      par_dtype dtype, par_request **req) {
    return par__thr_coll_entry(user, group, PAR__THR_ALL_TO_ALL, send, recv, count, dtype, PAR_REDUCE_SUM, 0, req);
}
static par_status par__thr_broadcast(void *user, par_comm_group *group, void *buf, int64_t count, par_dtype dtype,
                                     int root, par_request **req) {
    return par__thr_coll_entry(user, group, PAR__THR_BROADCAST, buf, buf, count, dtype, PAR_REDUCE_SUM, root, req);
}
static par_status par__thr_barrier(void *user, par_comm_group *group) {
    return par__thr_coll_entry(user, group, PAR__THR_BARRIER, NULL, NULL, 0, PAR_F32, PAR_REDUCE_SUM, 0, NULL);
}

/* ---- the copier: large async p2p copies off the rank's thread ------------ */

static void par__thr_deliver(par__thr_group *g, par__thr_msg *s, par__thr_msg *rv);

static int par__thr_copier_ready(void *p) {
    par__thr_rank *r = (par__thr_rank *)p;
    return PAR__THR_LOAD(&r->chead) != NULL || PAR__THR_LOAD(&r->cquit);
}

static void *par__thr_copier_main(void *p) {
    par__thr_rank *r = (par__thr_rank *)p;
    for (;;) {
        par__thr_msg *m;
        par__thr_await(&r->sync, par__thr_copier_ready, r, -1);
        pthread_mutex_lock(&r->sync.mu);
        m = r->chead;
        if (m) {
            PAR__THR_STORE(&r->chead, m->cnext);
            if (!m->cnext) r->ctail = NULL;
        }
        pthread_mutex_unlock(&r->sync.mu);
        if (!m) {
            if (PAR__THR_LOAD(&r->cquit)) break; /* quit only once the queue is empty */
            continue;
        }
        if (m->is_send) par__thr_deliver(m->cgroup, m, m->partner);
        else par__thr_deliver(m->cgroup, m->partner, m);
    }
    return NULL;
}

/* Hand the matched pair (m, its partner p) to r's copier; an error (no thread)
   leaves the copy to the caller. */
static par_status par__thr_copier_push(par__thr_rank *r, par__thr_group *g, par__thr_msg *m, par__thr_msg *p) {
    if (!r->copier_started) {
        if (pthread_create(&r->copier, NULL, par__thr_copier_main, r) != 0) return PAR_ENOMEM;
        r->copier_started = 1;
    }
    m->partner = p, m->cgroup = g, m->cnext = NULL;
    pthread_mutex_lock(&r->sync.mu);
    if (r->ctail) r->ctail->cnext = m;
    else PAR__THR_STORE(&r->chead, m);
    r->ctail = m;
    pthread_cond_broadcast(&r->sync.cv);
    pthread_mutex_unlock(&r->sync.mu);
    return PAR_OK;
}

/* ---- point to point ----------------------------------------------------- */

/* Copy a matched pair and complete both (the partner may free its node the
   moment its `complete` is set, so it is the last write to it). */
static void par__thr_deliver(par__thr_group *g, par__thr_msg *s, par__thr_msg *rv) {
    if (s->count != rv->count || s->dtype != rv->dtype) {
        snprintf(s->msg, sizeof s->msg, "send to rank %d on group %s: %lld %s elements sent, the matching recv "
                 "expects %lld %s", g->ranks[s->dst], g->name, (long long)s->count, par_dtype_name(s->dtype),
                 (long long)rv->count, par_dtype_name(rv->dtype));
        snprintf(rv->msg, sizeof rv->msg, "recv from rank %d on group %s: expects %lld %s elements, the matching "
                 "send has %lld %s", g->ranks[rv->src], g->name, (long long)rv->count, par_dtype_name(rv->dtype),
                 (long long)s->count, par_dtype_name(s->dtype));
        s->status = rv->status = PAR_EINVAL;
    } else {
        if (s->count) memcpy(rv->rbuf, s->sbuf, (size_t)s->count * par_dtype_size(s->dtype));
        s->status = rv->status = PAR_OK;
    }
    PAR__THR_STORE(&s->complete, 1);
    PAR__THR_STORE(&rv->complete, 1);
    par__thr_notify(&g->sync);
}

static void par__thr_list_append(par__thr_msg **head, par__thr_msg *m) {
    m->next = NULL;
    while (*head) head = &(*head)->next;
    *head = m;
}

static int par__thr_list_remove(par__thr_msg **head, par__thr_msg *m) {
    for (; *head; head = &(*head)->next)
        if (*head == m) {
            *head = m->next;
            return 1;
        }
    return 0;
}

static par_status par__thr_peer_gone(par__thr_world *w, par__thr_group *g, par__thr_msg *m, const char *what) {
    int peer = g->ranks[m->is_send ? m->dst : m->src], f = PAR__THR_LOAD(&w->failed_rank);
    const char *dir = m->is_send ? "send to" : "recv from";
    if (f)
        return par__fail(PAR_ECOMM, "%s rank %d on group %s: rank %d failed (p2p op #%lld of this rank on the group)", dir,
                         peer, g->name, f - 1, (long long)m->seq);
    if (par__thr_state(w, peer) != PAR__THR_RUNNING)
        return par__fail(PAR_ECOMM, "%s rank %d on group %s: rank %d returned from its function %s (p2p op #%lld of "
                         "this rank on the group)", dir, peer, g->name, peer, what, (long long)m->seq);
    return PAR_OK;
}

/* Post m: match it with the oldest compatible partner or queue it. */
static par_status par__thr_post(par__thr_rank *r, par__thr_group *g, par__thr_msg *m, int async) {
    par__thr_msg **q, *p;
    par_status st;
    m->matched = 0;
    m->complete = 0;
    pthread_mutex_lock(&g->sync.mu);
    if ((st = par__thr_peer_gone(r->world, g, m, "before matching it")) != PAR_OK) {
        pthread_mutex_unlock(&g->sync.mu);
        return st;
    }
    q = m->is_send ? &g->recvq[m->dst] : &g->sendq[m->dst];
    for (p = *q; p && p->src != m->src; p = p->next) {
    }
    if (!p) {
        par__thr_list_append(m->is_send ? &g->sendq[m->dst] : &g->recvq[m->dst], m);
        pthread_mutex_unlock(&g->sync.mu);
        return PAR_OK;
    }
    par__thr_list_remove(q, p);
    p->matched = m->matched = 1;
    pthread_mutex_unlock(&g->sync.mu);
    if (async && m->count * (int64_t)par_dtype_size(m->dtype) >= PAR__THR_ASYNC_COPY &&
        par__thr_copier_push(r, g, m, p) == PAR_OK)
        return PAR_OK;
    if (m->is_send) par__thr_deliver(g, m, p);
    else par__thr_deliver(g, p, m);
    return PAR_OK;
}

typedef struct par__thr_msg_wait {
    par__thr_world *w;
    par__thr_group *g;
    par__thr_msg *m;
} par__thr_msg_wait;

static int par__thr_msg_ready(void *p) {
    par__thr_msg_wait *a = (par__thr_msg_wait *)p;
    int peer = a->g->ranks[a->m->is_send ? a->m->dst : a->m->src];
    return PAR__THR_LOAD(&a->m->complete) || PAR__THR_LOAD(&a->w->failed_rank) ||
           par__thr_state(a->w, peer) != PAR__THR_RUNNING;
}

static int par__thr_msg_complete(void *p) { return PAR__THR_LOAD(&((par__thr_msg_wait *)p)->m->complete); }

/* Finish m: wait for its partner until `deadline` (< 0: do not wait, just
   withdraw an unmatched m); 1 with *st set when finished, 0 if still pending. */
static int par__thr_finish(par__thr_rank *r, par__thr_group *g, par__thr_msg *m, int64_t deadline, int poll,
                           par_status *st) {
    par__thr_msg_wait a;
    int ready;
    a.w = r->world;
    a.g = g;
    a.m = m;
    ready = poll ? par__thr_msg_ready(&a) : par__thr_await(&g->sync, par__thr_msg_ready, &a, deadline);
    if (!PAR__THR_LOAD(&m->complete)) {
        if (poll && !ready) return 0;
        pthread_mutex_lock(&g->sync.mu);
        if (!m->matched) {
            par__thr_list_remove(m->is_send ? &g->sendq[m->dst] : &g->recvq[m->dst], m);
            pthread_mutex_unlock(&g->sync.mu);
            *st = par__thr_peer_gone(r->world, g, m, "without matching it");
            if (*st == PAR_OK)
                *st = par__fail(PAR_ETIMEOUT,
                                "%s rank %d on group %s: no matching %s within %d ms (p2p op #%lld of this rank on the "
                                "group)", m->is_send ? "send to" : "recv from", g->ranks[m->is_send ? m->dst : m->src],
                                g->name, m->is_send ? "recv" : "send", r->world->timeout_ms, (long long)m->seq);
            return 1;
        }
        pthread_mutex_unlock(&g->sync.mu);
        par__thr_await(&g->sync, par__thr_msg_complete, &a, -1); /* the partner is copying now */
    }
    *st = m->status == PAR_OK ? PAR_OK : par__fail(m->status, "%s", m->msg);
    return 1;
}

static par_status par__thr_p2p(void *user, par_comm_group *group, const void *sbuf, void *rbuf, int64_t count,
                               par_dtype dtype, int peer, par_request **req, int is_send) {
    par__thr_rank *r = (par__thr_rank *)user;
    const char *name = is_send ? "send" : "recv";
    par__thr_handle *h;
    par__thr_msg local, *m = &local;
    par__thr_req *q = NULL;
    par_comm_args a;
    par_status st;
    if (req) *req = NULL;
    if ((h = par__thr_handle_of(r, group, name)) == NULL) return PAR_EINVAL;
    a.call = is_send ? PAR_CALL_SEND : PAR_CALL_RECV, a.send = sbuf, a.recv = rbuf, a.count = count, a.dtype = dtype;
    a.op = PAR_REDUCE_SUM, a.peer = peer;
    if ((st = par_comm_check_args("threads", h->g->name, h->g->n, h->index, &a)) != PAR_OK) return st;
    if (req) {
        if ((q = par__thr_req_new(r, h)) == NULL) return par__fail(PAR_ENOMEM, "%s: out of memory for the request", name);
        q->is_p2p = 1;
        m = &q->node;
    } else {
        memset(&local, 0, sizeof local);
    }
    m->is_send = is_send;
    m->src = is_send ? h->index : peer;
    m->dst = is_send ? peer : h->index;
    m->sbuf = sbuf;
    m->rbuf = rbuf;
    m->count = count;
    m->dtype = dtype;
    m->seq = ++h->p2p_seq;
    if ((st = par__thr_post(r, h->g, m, req != NULL)) != PAR_OK) {
        if (q) par__thr_req_free(q);
        return st;
    }
    if (q) {
        *req = (par_request *)(void *)q;
        return PAR_OK;
    }
    par__thr_finish(r, h->g, m, par__thr_now_ns() + (int64_t)r->world->timeout_ms * 1000000LL, 0, &st);
    return st;
}

static par_status par__thr_send(void *user, par_comm_group *group, const void *buf, int64_t count, par_dtype dtype,
                                int peer, par_request **req) {
    return par__thr_p2p(user, group, buf, NULL, count, dtype, peer, req, 1);
}
static par_status par__thr_recv(void *user, par_comm_group *group, void *buf, int64_t count, par_dtype dtype, int peer,
                                par_request **req) {
    return par__thr_p2p(user, group, NULL, buf, count, dtype, peer, req, 0);
}

/* ---- wait / test / destroy ---------------------------------------------- */

static par__thr_req *par__thr_req_of(par__thr_rank *r, par_request *req, const char *fn) {
    par__thr_req *q = (par__thr_req *)(void *)req;
    if (!q) {
        par__fail(PAR_EINVAL, "%s: NULL request", fn);
        return NULL;
    }
    if (q->magic != PAR__THR_REQ_MAGIC || q->owner != r) {
        par__fail(PAR_EINVAL, "%s: not a pending request of rank %d (already completed, or another rank's)", fn, r->rank);
        return NULL;
    }
    return q;
}

/* Complete q (blocking unless poll); frees it when finished. */
static int par__thr_req_finish(par__thr_rank *r, par__thr_req *q, int poll, par_status *st) {
    if (q->is_p2p) {
        if (!par__thr_finish(r, q->h->g, &q->node, par__thr_now_ns() + (int64_t)r->world->timeout_ms * 1000000LL, poll,
                             st))
            return 0;
    } else {
        if (poll && !PAR__THR_LOAD(&q->done)) return 0;
        par__thr_await(&r->sync, par__thr_req_done_ready, q, -1);
        *st = q->status == PAR_OK ? PAR_OK : par__fail(q->status, "%s", q->msg);
    }
    par__thr_req_free(q);
    return 1;
}

static par_status par__thr_wait(void *user, par_request *req) {
    par__thr_rank *r = (par__thr_rank *)user;
    par__thr_req *q = par__thr_req_of(r, req, "wait");
    par_status st = PAR_OK;
    if (!q) return PAR_EINVAL;
    par__thr_req_finish(r, q, 0, &st);
    return st;
}

static par_status par__thr_test(void *user, par_request *req, int *done) {
    par__thr_rank *r = (par__thr_rank *)user;
    par__thr_req *q;
    par_status st = PAR_OK;
    if (!done) return par__fail(PAR_EINVAL, "test: NULL done");
    *done = 0;
    if ((q = par__thr_req_of(r, req, "test")) == NULL) return PAR_EINVAL;
    *done = par__thr_req_finish(r, q, 1, &st);
    return st;
}

/* The rank is leaving: finish the helper's queue, withdraw unmatched messages,
   free whatever the user left behind. The rank struct belongs to the world. */
static void par__thr_rank_destroy(void *user) {
    par__thr_rank *r = (par__thr_rank *)user;
    par_status st;
    par__thr_mark(r->world, r->rank, PAR__THR_EXITED);
    if (r->helper_started) {
        pthread_mutex_lock(&r->sync.mu);
        PAR__THR_STORE(&r->quit, 1);
        pthread_cond_broadcast(&r->sync.cv);
        pthread_mutex_unlock(&r->sync.mu);
        pthread_join(r->helper, NULL);
        r->helper_started = 0;
    }
    while (r->live) par__thr_req_finish(r, r->live, 0, &st);
    if (r->copier_started) { /* after the requests: their copies may be queued here */
        pthread_mutex_lock(&r->sync.mu);
        PAR__THR_STORE(&r->cquit, 1);
        pthread_cond_broadcast(&r->sync.cv);
        pthread_mutex_unlock(&r->sync.mu);
        pthread_join(r->copier, NULL);
        r->copier_started = 0;
    }
    while (r->handles) {
        r->handles->refs = 1;
        par__thr_handle_unref(r->handles);
    }
    par_clear_error();
}

static void par__thr_fill_table(par__thr_rank *r, par_comm_table *t) {
    memset(t, 0, sizeof *t);
    t->version = PAR_COMM_TABLE_VERSION;
    t->name = "threads";
    t->user = r;
    t->rank = r->rank;
    t->size = r->world->size;
    t->group_create = par__thr_group_create;
    t->group_destroy = par__thr_group_destroy;
    t->all_reduce = par__thr_all_reduce;
    t->all_gather = par__thr_all_gather;
    t->reduce_scatter = par__thr_reduce_scatter;
    t->all_to_all = par__thr_all_to_all;
    t->broadcast = par__thr_broadcast;
    t->send = par__thr_send;
    t->recv = par__thr_recv;
    t->barrier = par__thr_barrier;
    t->wait = par__thr_wait;
    t->test = par__thr_test;
    t->set_stream = NULL;
    t->destroy = par__thr_rank_destroy;
}

/* ---- par_run_threads ---------------------------------------------------- */

static void par__thr_keep_error(par__thr_rank *r, par_status st) {
    const char *e = par_last_error();
    r->result = st;
    par__copy_text(r->msg, sizeof r->msg, e && *e ? e : par_status_string(st));
}

static void *par__thr_rank_main(void *p) {
    par__thr_rank *r = (par__thr_rank *)p;
    par_comm_table t;
    par_ctx *ctx = NULL;
    par_status st;
    par__thr_fill_table(r, &t);
    par_clear_error();
    st = par__ctx_create(r->desc, &t, 1, &ctx);
    if (st != PAR_OK) {
        par__thr_keep_error(r, st);
        par__thr_mark(r->world, r->rank, PAR__THR_FAILED);
        return NULL;
    }
    st = r->fn(ctx, r->arg);
    if (st != PAR_OK) {
        par__thr_keep_error(r, st);
        par__thr_mark(r->world, r->rank, PAR__THR_FAILED); /* before destroy: peers stop waiting now */
    }
    par_ctx_destroy(ctx);
    return NULL;
}

PARALLEL_DEF par_status par_run_threads_desc(const par_ctx_desc *desc, int n, par_rank_fn fn, void *arg) {
    par__thr_world w;
    par_mesh mesh;
    par_status st = PAR_OK;
    int i, timeout, cores, first = -1, ok = 1;
    if (n < 1 || n > PAR__THR_MAX_RANKS)
        return par__fail(PAR_EINVAL, "par_run_threads: %d ranks, need 1..%d", n, PAR__THR_MAX_RANKS);
    if (!fn) return par__fail(PAR_EINVAL, "par_run_threads: NULL rank function");
    if ((st = par__ctx_desc_check(desc)) != PAR_OK) return st;
    if ((st = par__ctx_timeout(desc, &timeout)) != PAR_OK) return st;
    if ((st = par__ctx_mesh(desc, n, &mesh)) != PAR_OK) return st;
    memset(&w, 0, sizeof w);
    if (desc) w.alloc = desc->allocator;
    w.size = n;
    w.timeout_ms = timeout;
    cores = par__host_cores();
    w.spins = cores >= n ? 2000 : 0; /* spinning only pays when every rank has a core */
    w.yields = cores >= n ? 4 : 2;
    w.state = (int *)par__alloc_malloc(&w.alloc, sizeof(int) * (size_t)n);
    w.ranks = (par__thr_rank *)par__alloc_malloc(&w.alloc, sizeof(par__thr_rank) * (size_t)n);
    if (!w.state || !w.ranks || pthread_mutex_init(&w.mu, NULL) != 0) {
        par__alloc_free(&w.alloc, w.state);
        par__alloc_free(&w.alloc, w.ranks);
        return par__fail(PAR_ENOMEM, "par_run_threads: out of memory for %d ranks", n);
    }
    memset(w.state, 0, sizeof(int) * (size_t)n);
    memset(w.ranks, 0, sizeof(par__thr_rank) * (size_t)n);
    for (i = 0; i < n; i++) {
        par__thr_rank *r = &w.ranks[i];
        r->world = &w;
        r->rank = i;
        r->desc = desc;
        r->fn = fn;
        r->arg = arg;
        r->result = PAR_OK;
        if (ok && !(r->sync_ok = par__thr_sync_init(&r->sync, w.spins, w.yields))) ok = 0;
        if (!ok) {
            r->result = PAR_ENOMEM;
            snprintf(r->msg, sizeof r->msg, "out of memory for rank %d's state", i);
            par__thr_mark(&w, i, PAR__THR_FAILED);
        }
    }
    for (i = 0; i < n; i++) {
        par__thr_rank *r = &w.ranks[i];
        if (r->result != PAR_OK) continue;
        if (pthread_create(&r->thread, NULL, par__thr_rank_main, r) != 0) {
            r->result = PAR_ENOMEM;
            snprintf(r->msg, sizeof r->msg, "could not start its thread");
            par__thr_mark(&w, i, PAR__THR_FAILED);
            continue;
        }
        r->started = 1;
    }
    for (i = 0; i < n; i++)
        if (w.ranks[i].started) pthread_join(w.ranks[i].thread, NULL);
    for (i = 0; i < n; i++)
        if (w.ranks[i].result != PAR_OK && (first < 0 || w.ranks[i].fail_order < w.ranks[first].fail_order)) first = i;
    for (i = 0; i < n; i++)
        if (w.ranks[i].sync_ok) par__thr_sync_destroy(&w.ranks[i].sync);
    while (w.groups) { /* instances some member never joined or released */
        par__thr_group *g = w.groups;
        w.groups = g->next;
        par__thr_group_free(g);
    }
    pthread_mutex_destroy(&w.mu);
    if (first >= 0) {
        st = w.ranks[first].result;
        par__fail(st, "rank %d: %s", first, w.ranks[first].msg);
    } else {
        st = PAR_OK;
    }
    par__alloc_free(&w.alloc, w.state);
    par__alloc_free(&w.alloc, w.ranks);
    return st;
}

#endif /* PARALLEL_NO_THREADS */

PARALLEL_DEF par_status par_run_threads(int n, par_rank_fn fn, void *arg) { return par_run_threads_desc(NULL, n, fn, arg); }

#ifdef PARALLEL_WITH_MPI
// >>comm-mpi
/* The OpenMPI backend (compiled with PARALLEL_WITH_MPI; build with mpicc).

   One process per rank under mpirun. par_ctx_init_mpi initializes MPI if the
   host has not (MPI_THREAD_SERIALIZED requested: the context's ops may come from
   any thread, one at a time) and finalizes it when that context is destroyed -
   only then, and MPI cannot be initialized twice in a process: after destroying
   the context that initialized MPI no other MPI context can be made. Hosts that
   need several contexts in a row call MPI_Init themselves and MPI_Finalize at the
   end; a context then never finalizes.

   Design choices, and why:
     * Every op runs on a private duplicate of MPI_COMM_WORLD (or a communicator
       made from it) with MPI_ERRORS_RETURN, so the host's own MPI traffic never
       matches ours and an MPI failure becomes PAR_ECOMM with MPI's message.
     * Every op is non-blocking MPI; blocking calls post the op and wait for it
       with MPI_Testall polling against the context timeout. Nothing waits
       forever: a peer that never arrives is PAR_ETIMEOUT naming the op and the
       rank list (MPI cannot tell which member is missing). A collective cannot
       be cancelled in MPI, so after a timeout the group is marked unusable and
       the pending request (with its temporaries) is kept until the backend is
       destroyed.
     * bf16/f16 reductions convert to f32 buffers, reduce with MPI_FLOAT and round
       to nearest even once at the end. A user-defined MPI_Op on 2-byte elements
       would round after every pairwise step (a different, order-dependent
       result from the threads backend's single rounding); the f32 detour costs
       twice the bytes, which is fine for the CPU fallback transport. Moves
       without arithmetic (gather, all-to-all, broadcast, p2p) ship the 2-byte
       values unchanged.
     * MPI counts are int: larger counts are split into chunks of at most
       PAR__MPI_MAX_COUNT elements (block layouts of gather / all-to-all via
       resized datatypes, reduce_scatter via one reduce per block), all posted
       at once under one request. Tests lower the macro to exercise this.
     * Groups: MPI_Comm_create_group over the list (member i = ranks[i]), only
       the members take part. Its tag is a hash of the list: every member
       computes the same one, and creations of different overlapping lists that
       run concurrently do not cross-match.
     * p2p uses one tag per group communicator, so MPI's non-overtaking rule gives
       FIFO order per pair. A blocking send to oneself only completes when the
       matching receive is already posted (use the async form).
     * Mismatched collectives (members calling different ops, counts, dtypes,
       reduce ops or roots, or being at different collective numbers on the
       group) are undefined in MPI: a hang, a wrong result that looks like
       success, or (OpenMPI 4, counts that differ) MPI_ERR_TRUNCATE raised on
       MPI_COMM_WORLD, whose default handler aborts the job. So every
       collective first all-reduces its 96-byte signature (max of each field
       and of its negation: all equal iff max == -max(-x)) and waits for it,
       within the timeout; a mismatch is PAR_EINVAL naming the field, its range
       and the collective's number, and the data part is never posted. The
       cost: one small collective's latency per op, and an async collective's
       issue waits until every member has issued it (its data still moves in
       the background). */

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* C++ builds: keep OpenMPI's deprecated C++ bindings out */
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <sched.h>
#include <poll.h>

#ifndef PAR__MPI_MAX_COUNT
#define PAR__MPI_MAX_COUNT INT_MAX /* elements per MPI call (MPI counts are int) */
#endif

#define PAR__MPI_P2P_TAG 7
#define PAR__MPI_SIG 6 /* a collective's signature: call, count, dtype, reduce op, root, number on the group */

typedef struct par__mpi_req par__mpi_req;

/* table->user: one per process. */
typedef struct par__mpi {
    MPI_Comm world;       /* duplicate of MPI_COMM_WORLD, errors returned */
    int rank, size;
    int timeout_ms;
    int finalize;         /* we called MPI_Init, so we call MPI_Finalize */
    par__mpi_req *orphans; /* requests abandoned by a timeout */
} par__mpi;

/* What par_comm_group points to in this backend. A private struct name (cast to
   and from the opaque par_comm_group) so other backends in the same build keep
   their own definitions. */
typedef struct par__mpi_group {
    MPI_Comm comm;
    int n, index;
    int broken; /* a collective timed out or mismatched: MPI cannot cancel it */
    int64_t seq; /* collectives posted on the group by this rank */
    char text[96]; /* "[0,1,2,3]" for messages */
} par__mpi_group;

/* Work to do after the MPI requests complete. */
struct par__mpi_req {
    par__mpi *mpi;
    par__mpi_group *group;
    const char *op;
    int nreq, cap;
    MPI_Request *reqs;
    MPI_Status *stats;
    MPI_Datatype *types; /* derived datatypes of pending chunks (OpenMPI 4's
                            non-blocking collectives need them alive) */
    int ntypes;
    void *tmp;        /* owned temporary (f32 copy, or a private receive buffer) */
    void *dst;        /* where the result finally goes (post-processing) */
    int64_t count;    /* elements of dst */
    par_dtype dtype;  /* dtype of dst */
    int from_tmp;     /* 1: dst <- tmp (converted from f32 for bf16/f16) */
    int divide;       /* avg: divide by this (0 = no) */
    int64_t expect;   /* recv: elements that must arrive (-1 = no check) */
    size_t esize;     /* recv: bytes per element in the MPI datatype */
    int sig_slot;     /* collectives: index in reqs of the signature all-reduce (-1: p2p, none) */
    int64_t seq;      /* collectives: the collective's number on its group (1, 2, ...) */
    int64_t sig[2 * PAR__MPI_SIG], sig_out[2 * PAR__MPI_SIG]; /* the signature and its negation; their max */
    par__mpi_req *next;
};


static int par__mpi_is_half(par_dtype d) { return d == PAR_BF16 || d == PAR_F16; }

static void par__mpi_half_to_f32(par_dtype d, const void *src, float *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    int64_t i;
    if (d == PAR_BF16)
        for (i = 0; i < n; i++) dst[i] = par__bf16_to_f32(s[i]);
    else
        for (i = 0; i < n; i++) dst[i] = par__f16_to_f32(s[i]);
}

/* dst = round(src / divide) (divide 0 or 1: no division). */
static void par__mpi_f32_to_half(par_dtype d, const float *src, void *dst, int64_t n, int divide) {
    uint16_t *o = (uint16_t *)dst;
    int64_t i;
    for (i = 0; i < n; i++) {
        float v = divide > 1 ? src[i] / (float)divide : src[i];
        o[i] = d == PAR_BF16 ? par__f32_to_bf16(v) : par__f32_to_f16(v);
    }
}

/* In-place avg of n elements; integers truncate like C division. */
static void par__mpi_divide(void *buf, int64_t n, par_dtype d, int divide) {
    int64_t i;
    switch (d) {
    case PAR_F32: for (i = 0; i < n; i++) ((float *)buf)[i] /= (float)divide; break;
    case PAR_F64: for (i = 0; i < n; i++) ((double *)buf)[i] /= (double)divide; break;
    case PAR_I32: for (i = 0; i < n; i++) ((int32_t *)buf)[i] /= divide; break;
    case PAR_I64: for (i = 0; i < n; i++) ((int64_t *)buf)[i] /= divide; break;
    default: break;
    }
}

/* --- messages -------------------------------------------------------------- */

static void par__mpi_group_text(par__mpi_group *g, const int *ranks, int n) {
    par__buf b;
    int i;
    par__buf_init(&b, g->text, sizeof g->text);
    par__bprintf(&b, "[");
    for (i = 0; i < n; i++) par__bprintf(&b, "%s%d", i ? "," : "", ranks[i]);
    par__bprintf(&b, "]");
    if (b.len >= sizeof g->text) memcpy(g->text + sizeof g->text - 5, "...]", 5);
}

static par_status par__mpi_error(const par__mpi *mpi, const char *op, const par__mpi_group *g, int code) {
    char text[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
    text[len] = 0;
    return par__fail(PAR_ECOMM, "mpi %s on group %s (rank %d): MPI error %d: %s", op, g ? g->text : "world",
                     mpi->rank, code, len ? text : "(no description)");
}

/* --- requests -------------------------------------------------------------- */

/* mpi_alive = 0 after MPI_Finalize: then no MPI call is allowed. */
static void par__mpi_req_free(par__mpi_req *r, int mpi_alive) {
    int i;
    if (!r) return;
    for (i = 0; i < r->ntypes && mpi_alive; i++) MPI_Type_free(&r->types[i]);
    PARALLEL_FREE(r->types);
    PARALLEL_FREE(r->reqs);
    PARALLEL_FREE(r->stats);
    PARALLEL_FREE(r->tmp);
    PARALLEL_FREE(r);
}

static par_status par__mpi_req_new(par__mpi *mpi, par__mpi_group *g, const char *op, par__mpi_req **out) {
    par__mpi_req *r = (par__mpi_req *)PARALLEL_MALLOC(sizeof *r);
    *out = NULL;
    if (!r) return par__fail(PAR_ENOMEM, "mpi %s: out of memory", op);
    memset(r, 0, sizeof *r);
    r->mpi = mpi;
    r->group = g;
    r->op = op;
    r->expect = -1;
    r->sig_slot = -1;
    *out = r;
    return PAR_OK;
}

/* A slot for one more MPI request. */
static MPI_Request *par__mpi_req_slot(par__mpi_req *r) {
    if (r->nreq == r->cap) {
        int cap = r->cap ? 2 * r->cap : 1;
        MPI_Request *q = (MPI_Request *)PARALLEL_REALLOC(r->reqs, sizeof *q * (size_t)cap);
        MPI_Status *s;
        if (!q) return NULL;
        r->reqs = q;
        s = (MPI_Status *)PARALLEL_REALLOC(r->stats, sizeof *s * (size_t)cap);
        if (!s) return NULL;
        r->stats = s;
        r->cap = cap;
    }
    r->reqs[r->nreq] = MPI_REQUEST_NULL;
    return &r->reqs[r->nreq++];
}

/* The signature arrived: PAR_EINVAL naming the first field the members
   disagree on (its smallest and largest value and this rank's), else PAR_OK.
   A mismatch leaves the group unusable: its data part may still be pending. */
static par_status par__mpi_sig_check(par__mpi_req *r) {
    static const char *const field[PAR__MPI_SIG] = {"op", "count", "dtype", "reduce op", "root", "collective number"};
    char lo_s[32], hi_s[32], mine_s[32];
    int i;
    for (i = 0; i < PAR__MPI_SIG; i++) {
        int64_t hi = r->sig_out[i], lo = -r->sig_out[PAR__MPI_SIG + i], v[3];
        char *out[3];
        int k;
        if (lo == hi) continue;
        v[0] = lo, v[1] = hi, v[2] = r->sig[i], out[0] = lo_s, out[1] = hi_s, out[2] = mine_s;
        for (k = 0; k < 3; k++) {
            if (i == 0 && v[k] >= 0 && v[k] < PAR_CALL_COUNT) snprintf(out[k], 32, "%s", par_comm_call_name((par_comm_call)v[k]));
            else if (i == 2 && v[k] >= 0 && v[k] < PAR_DTYPE_COUNT) snprintf(out[k], 32, "%s", par_dtype_name((par_dtype)v[k]));
            else if (i == 3 && v[k] >= 0 && v[k] <= PAR_REDUCE_AVG) snprintf(out[k], 32, "%s", par_reduce_op_name((par_reduce_op)v[k]));
            else snprintf(out[k], 32, "%lld", (long long)v[k]);
        }
        r->group->broken = 1;
        return par__fail(PAR_EINVAL,
                         "mpi %s on group %s (rank %d, collective #%lld on this group): collective mismatch: the members "
                         "passed %s from %s to %s (this rank: %s)", r->op, r->group->text, r->mpi->rank,
                         (long long)r->seq, field[i], lo_s, hi_s, mine_s);
    }
    return PAR_OK;
}

static double par__mpi_now(void);

/* par__mpi_sign's outcomes besides MPI codes (which are >= 0); the error is set. */
#define PAR__MPI_SIG_TIMEOUT (-1001)
#define PAR__MPI_SIG_MISMATCH (-1002)

/* Before a collective's data: all-reduce its signature and wait for it within
   the timeout (see the section comment). MPI_SUCCESS when every member called
   the same op the same way; else an MPI error code, or one of the two codes
   above. */
static int par__mpi_sign(par__mpi_req *r, par_comm_call call, int64_t count, par_dtype dtype, par_reduce_op rop,
                         int root) {
    MPI_Request *slot = par__mpi_req_slot(r);
    double start = par__mpi_now(), now;
    int i, code, done = 0;
    if (!slot) return MPI_ERR_NO_MEM;
    r->seq = ++r->group->seq;
    r->sig[0] = (int64_t)call, r->sig[1] = count, r->sig[2] = (int64_t)dtype, r->sig[3] = (int64_t)rop;
    r->sig[4] = root, r->sig[5] = r->seq;
    for (i = 0; i < PAR__MPI_SIG; i++) r->sig[PAR__MPI_SIG + i] = -r->sig[i];
    r->sig_slot = r->nreq - 1;
    code = MPI_Iallreduce(r->sig, r->sig_out, 2 * PAR__MPI_SIG, MPI_INT64_T, MPI_MAX, r->group->comm, slot);
    while (code == MPI_SUCCESS && (code = MPI_Test(slot, &done, MPI_STATUS_IGNORE)) == MPI_SUCCESS && !done) {
        now = par__mpi_now();
        if (now > start + r->mpi->timeout_ms / 1000.0) {
            r->group->broken = 1;
            par__fail(PAR_ETIMEOUT, "mpi %s on group %s (rank %d, collective #%lld on this group) timed out after %d ms: "
                                    "some members of the group did not arrive (MPI cannot tell which); the group is "
                                    "unusable now", r->op, r->group->text, r->mpi->rank, (long long)r->seq,
                      r->mpi->timeout_ms);
            return PAR__MPI_SIG_TIMEOUT;
        }
        if (now - start > 0.05) /* as par__mpi_req_wait: OpenMPI progresses only inside MPI calls */
            poll(NULL, 0, 1);
        else
            sched_yield();
    }
    if (code != MPI_SUCCESS) return code;
    return par__mpi_sig_check(r) == PAR_OK ? MPI_SUCCESS : PAR__MPI_SIG_MISMATCH;
}

/* The MPI requests completed: check, post-process, report. Does not free r. */
static par_status par__mpi_req_complete(par__mpi_req *r, int code) {
    int i;
    if (code == MPI_ERR_IN_STATUS) {
        for (i = 0; i < r->nreq; i++)
            if (r->stats[i].MPI_ERROR != MPI_SUCCESS && r->stats[i].MPI_ERROR != MPI_ERR_PENDING)
                return par__mpi_error(r->mpi, r->op, r->group, r->stats[i].MPI_ERROR);
    }
    if (code != MPI_SUCCESS) return par__mpi_error(r->mpi, r->op, r->group, code);
    if (r->expect >= 0) { /* a receive: the sender's count must match ours */
        int64_t got = 0;
        for (i = 0; i < r->nreq; i++) {
            int c = 0;
            MPI_Get_count(&r->stats[i], MPI_BYTE, &c);
            got += c;
        }
        if (got != r->expect * (int64_t)r->esize)
            return par__fail(PAR_ECOMM, "mpi recv on group %s (rank %d): received %lld bytes, expected %lld elements "
                                        "of %s (%lld bytes): the sender's count differs",
                             r->group->text, r->mpi->rank, (long long)got, (long long)r->expect,
                             par_dtype_name(r->dtype), (long long)(r->expect * (int64_t)r->esize));
    }
    if (r->from_tmp && par__mpi_is_half(r->dtype))
        par__mpi_f32_to_half(r->dtype, (const float *)r->tmp, r->dst, r->count, r->divide);
    else if (r->from_tmp)
        memcpy(r->dst, r->tmp, (size_t)r->count * par_dtype_size(r->dtype));
    if (r->divide > 1 && !par__mpi_is_half(r->dtype)) par__mpi_divide(r->dst, r->count, r->dtype, r->divide);
    return PAR_OK;
}

static double par__mpi_now(void) { return MPI_Wtime(); }

/* Poll r to completion within the context timeout; frees r unless it timed out
   (then it is parked on the orphan list: MPI may still write its buffers). */
static par_status par__mpi_req_wait(par__mpi_req *r) {
    double start = par__mpi_now(), deadline = start + r->mpi->timeout_ms / 1000.0, now;
    int done = 0, code;
    par_status st;
    for (;;) {
        code = MPI_Testall(r->nreq, r->reqs, &done, r->stats);
        if (done || code != MPI_SUCCESS) break;
        now = par__mpi_now();
        if (now > deadline) {
            r->group->broken = 1;
            r->next = r->mpi->orphans;
            r->mpi->orphans = r;
            if (r->sig_slot >= 0)
                return par__fail(PAR_ETIMEOUT, "mpi %s on group %s (rank %d, collective #%lld on this group) timed out "
                                               "after %d ms: some members of the group did not arrive (MPI cannot tell "
                                               "which); the group is unusable now",
                                 r->op, r->group->text, r->mpi->rank, (long long)r->seq, r->mpi->timeout_ms);
            return par__fail(PAR_ETIMEOUT, "mpi %s on group %s (rank %d) timed out after %d ms: some members of the "
                                           "group did not arrive (MPI cannot tell which); the group is unusable now",
                             r->op, r->group->text, r->mpi->rank, r->mpi->timeout_ms);
        }
        /* OpenMPI progresses only inside MPI calls: spin politely (ranks often
           outnumber cores), and only nap once the wait is clearly long. */
        if (now - start > 0.05)
            poll(NULL, 0, 1);
        else
            sched_yield();
    }
    st = par__mpi_req_complete(r, code);
    par__mpi_req_free(r, 1);
    return st;
}

/* Hand r to the caller (async) or wait for it (blocking). On a posting error
   the posted part is drained first: MPI owns those buffers until done. */
static par_status par__mpi_req_finish(par__mpi_req *r, int code, par_request **req) {
    if (code == PAR__MPI_SIG_TIMEOUT) { /* the signature is still pending: MPI owns its buffers */
        r->next = r->mpi->orphans;
        r->mpi->orphans = r;
        return PAR_ETIMEOUT;
    }
    if (code == PAR__MPI_SIG_MISMATCH) { /* the signature completed; no data was posted */
        par__mpi_req_free(r, 1);
        return PAR_EINVAL;
    }
    if (code != MPI_SUCCESS) {
        par_status st;
        int c = MPI_Waitall(r->nreq, r->reqs, MPI_STATUSES_IGNORE);
        (void)c;
        st = par__mpi_error(r->mpi, r->op, r->group, code);
        par__mpi_req_free(r, 1);
        return st;
    }
    if (req) {
        *req = (par_request *)r;
        return PAR_OK;
    }
    return par__mpi_req_wait(r);
}

static par_status par__mpi_wait(void *user, par_request *req) {
    (void)user;
    if (!req) return par__fail(PAR_EINVAL, "mpi wait: NULL request");
    return par__mpi_req_wait((par__mpi_req *)req);
}

static par_status par__mpi_test(void *user, par_request *req, int *done) {
    par__mpi_req *r = (par__mpi_req *)req;
    int flag = 0, code;
    par_status st;
    (void)user;
    if (!req || !done) return par__fail(PAR_EINVAL, "mpi test: NULL %s", req ? "done" : "request");
    *done = 0;
    code = MPI_Testall(r->nreq, r->reqs, &flag, r->stats);
    if (!flag && code == MPI_SUCCESS) return PAR_OK;
    *done = 1;
    st = par__mpi_req_complete(r, code);
    par__mpi_req_free(r, 1);
    return st;
}

/* --- argument checks ------------------------------------------------------- */

static MPI_Datatype par__mpi_type(par_dtype d) {
    switch (d) {
    case PAR_F32: return MPI_FLOAT;
    case PAR_F64: return MPI_DOUBLE;
    case PAR_I32: return MPI_INT32_T;
    case PAR_I64: return MPI_INT64_T;
    default: return MPI_UINT16_T; /* bf16/f16 moved as raw 2-byte values */
    }
}

/* The shared argument rules (par_comm_check_args), then whether the group
   still works. */
static par_status par__mpi_check(par_comm_group *group, par_comm_call call, const void *send, const void *recv,
                                 int64_t count, par_dtype dtype, par_reduce_op rop, int peer) {
    const par__mpi_group *g = (const par__mpi_group *)group;
    par_comm_args a;
    par_status st;
    if (!g) return par__fail(PAR_EINVAL, "mpi %s: NULL group", par_comm_call_name(call));
    a.call = call, a.send = send, a.recv = recv, a.count = count, a.dtype = dtype, a.op = rop, a.peer = peer;
    if ((st = par_comm_check_args("mpi", g->text, g->n, g->index, &a)) != PAR_OK) return st;
    if (g->broken)
        return par__fail(PAR_ECOMM, "mpi %s: group %s is unusable after an earlier timeout or mismatch",
                         par_comm_call_name(call), g->text);
    return PAR_OK;
}

/* --- collectives ----------------------------------------------------------- */

/* count elements of `type` (esize bytes) as chunks of at most PAR__MPI_MAX_COUNT. */
#define PAR__MPI_CHUNKS(count) ((count) == 0 ? 1 : ((count) + PAR__MPI_MAX_COUNT - 1) / PAR__MPI_MAX_COUNT)
#define PAR__MPI_CHUNK(count, k) \
    ((int)((count) - (int64_t)(k) * PAR__MPI_MAX_COUNT < PAR__MPI_MAX_COUNT ? (count) - (int64_t)(k) * PAR__MPI_MAX_COUNT : PAR__MPI_MAX_COUNT))

static par_status par__mpi_all_reduce(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                                      par_dtype dtype, par_reduce_op op, par_request **req) {
    par__mpi *mpi = (par__mpi *)user;
    par__mpi_group *g = (par__mpi_group *)group;
    size_t es = par_dtype_size(dtype);
    par__mpi_req *r;
    par_status st;
    MPI_Datatype type;
    MPI_Op mop = op == PAR_REDUCE_MAX ? MPI_MAX : MPI_SUM;
    char *buf;
    int64_t k, chunks;
    int code = MPI_SUCCESS, in_place;
    if (req) *req = NULL;
    if ((st = par__mpi_check(group, PAR_CALL_ALL_REDUCE, send, recv, count, dtype, op, 0)) != PAR_OK) return st;
    if ((st = par__mpi_req_new(mpi, g, "all_reduce", &r)) != PAR_OK) return st;
    r->dst = recv;
    r->count = count;
    r->dtype = dtype;
    r->divide = op == PAR_REDUCE_AVG ? g->n : 0;
    if (par__mpi_is_half(dtype)) { /* reduce an f32 copy in place, round once at the end */
        r->tmp = PARALLEL_MALLOC(count ? (size_t)count * 4 : 1);
        if (!r->tmp) {
            par__mpi_req_free(r, 1);
            return par__fail(PAR_ENOMEM, "mpi all_reduce: out of memory for the f32 copy of %lld %s values",
                             (long long)count, par_dtype_name(dtype));
        }
        par__mpi_half_to_f32(dtype, send, (float *)r->tmp, count);
        r->from_tmp = 1;
        buf = (char *)r->tmp;
        type = MPI_FLOAT;
        es = 4;
        in_place = 1;
    } else {
        buf = (char *)recv;
        type = par__mpi_type(dtype);
        in_place = send == recv;
    }
    code = par__mpi_sign(r, PAR_CALL_ALL_REDUCE, count, dtype, op, 0);
    chunks = PAR__MPI_CHUNKS(count);
    for (k = 0; k < chunks && code == MPI_SUCCESS; k++) {
        size_t off = (size_t)(k * PAR__MPI_MAX_COUNT) * es;
        MPI_Request *slot = par__mpi_req_slot(r);
        if (!slot) {
            code = MPI_ERR_NO_MEM;
            break;
        }
        code = MPI_Iallreduce(in_place ? MPI_IN_PLACE : (const char *)send + off, buf + off, PAR__MPI_CHUNK(count, k),
                              type, mop, g->comm, slot);
    }
    return par__mpi_req_finish(r, code, req);
}

/* A datatype of c elements of `type` whose extent is `stride` elements: block
   k of every member in a layout of member blocks `stride` long. */
static int par__mpi_strided(par__mpi_req *r, MPI_Datatype type, int c, int64_t stride, size_t es, MPI_Datatype *out) {
    MPI_Datatype contig, *types;
    int code;
    types = (MPI_Datatype *)PARALLEL_REALLOC(r->types, sizeof *types * (size_t)(r->ntypes + 1));
    if (!types) return MPI_ERR_NO_MEM;
    r->types = types;
    if ((code = MPI_Type_contiguous(c, type, &contig)) != MPI_SUCCESS) return code;
    code = MPI_Type_create_resized(contig, 0, (MPI_Aint)(stride * (int64_t)es), out);
    MPI_Type_free(&contig);
    if (code != MPI_SUCCESS) return code;
    r->types[r->ntypes++] = *out; /* freed with the request */
    return MPI_Type_commit(out);
}

static par_status par__mpi_all_gather(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                                      par_dtype dtype, par_request **req) {
    par__mpi *mpi = (par__mpi *)user;
    par__mpi_group *g = (par__mpi_group *)group;
    size_t es = par_dtype_size(dtype);
    MPI_Datatype type = par__mpi_type(dtype);
    par__mpi_req *r;
    par_status st;
    int64_t k, chunks;
    int code = MPI_SUCCESS, in_place;
    if (req) *req = NULL;
    if ((st = par__mpi_check(group, PAR_CALL_ALL_GATHER, send, recv, count, dtype, PAR_REDUCE_SUM, 0)) != PAR_OK)
        return st;
    in_place = count > 0 && (const char *)send == (const char *)recv + (size_t)g->index * (size_t)count * es;
    if ((st = par__mpi_req_new(mpi, g, "all_gather", &r)) != PAR_OK) return st;
    code = par__mpi_sign(r, PAR_CALL_ALL_GATHER, count, dtype, PAR_REDUCE_SUM, 0);
    chunks = PAR__MPI_CHUNKS(count);
    for (k = 0; k < chunks && code == MPI_SUCCESS; k++) {
        size_t off = (size_t)(k * PAR__MPI_MAX_COUNT) * es;
        int c = PAR__MPI_CHUNK(count, k);
        MPI_Request *slot = par__mpi_req_slot(r);
        const void *s = in_place ? MPI_IN_PLACE : (const char *)send + off;
        if (!slot) {
            code = MPI_ERR_NO_MEM;
            break;
        }
        if (chunks == 1) {
            code = MPI_Iallgather(s, c, type, recv, c, type, g->comm, slot);
        } else { /* recv block of member j at j*count: one element of a resized type */
            MPI_Datatype strided;
            if ((code = par__mpi_strided(r, type, c, count, es, &strided)) != MPI_SUCCESS) break;
            code = MPI_Iallgather(s, c, type, (char *)recv + off, 1, strided, g->comm, slot);
        }
    }
    return par__mpi_req_finish(r, code, req);
}

static par_status par__mpi_reduce_scatter(void *user, par_comm_group *group, const void *send, void *recv,
                                          int64_t count, par_dtype dtype, par_reduce_op op, par_request **req) {
    par__mpi *mpi = (par__mpi *)user;
    par__mpi_group *g = (par__mpi_group *)group;
    size_t es = par_dtype_size(dtype);
    MPI_Datatype type;
    MPI_Op mop = op == PAR_REDUCE_MAX ? MPI_MAX : MPI_SUM;
    par__mpi_req *r;
    par_status st;
    const char *sbuf;
    char *rbuf;
    int64_t k, chunks, total;
    int code = MPI_SUCCESS, j;
    if (req) *req = NULL;
    if ((st = par__mpi_check(group, PAR_CALL_REDUCE_SCATTER, send, recv, count, dtype, op, 0)) != PAR_OK) return st;
    total = count * g->n;
    if ((st = par__mpi_req_new(mpi, g, "reduce_scatter", &r)) != PAR_OK) return st;
    r->dst = recv;
    r->count = count;
    r->dtype = dtype;
    r->divide = op == PAR_REDUCE_AVG ? g->n : 0;
    if (par__mpi_is_half(dtype)) { /* f32 result (read back by the completion), then an f32 copy of all n blocks */
        r->tmp = PARALLEL_MALLOC((size_t)(total + count) * 4 + 1);
        if (!r->tmp) {
            par__mpi_req_free(r, 1);
            return par__fail(PAR_ENOMEM, "mpi reduce_scatter: out of memory for the f32 copy of %lld %s values",
                             (long long)total, par_dtype_name(dtype));
        }
        par__mpi_half_to_f32(dtype, send, (float *)r->tmp + count, total);
        sbuf = (const char *)r->tmp + (size_t)count * 4;
        rbuf = (char *)r->tmp;
        type = MPI_FLOAT;
        es = 4;
        r->from_tmp = 1;
    } else if (count > 0 && (const char *)recv == (const char *)send + (size_t)g->index * (size_t)count * es) {
        /* in place (recv = send + index*count): MPI forbids aliasing, so receive privately */
        r->tmp = PARALLEL_MALLOC((size_t)count * es);
        if (!r->tmp) {
            par__mpi_req_free(r, 1);
            return par__fail(PAR_ENOMEM, "mpi reduce_scatter: out of memory");
        }
        sbuf = (const char *)send;
        rbuf = (char *)r->tmp;
        type = par__mpi_type(dtype);
        r->from_tmp = 1;
    } else {
        sbuf = (const char *)send;
        rbuf = (char *)recv;
        type = par__mpi_type(dtype);
    }
    code = par__mpi_sign(r, PAR_CALL_REDUCE_SCATTER, count, dtype, op, 0);
    chunks = PAR__MPI_CHUNKS(count);
    if (chunks == 1 && code == MPI_SUCCESS) {
        MPI_Request *slot = par__mpi_req_slot(r);
        code = slot ? MPI_Ireduce_scatter_block(sbuf, rbuf, (int)count, type, mop, g->comm, slot) : MPI_ERR_NO_MEM;
    } else if (chunks > 1) { /* one reduce per (block, chunk) to the block's member */
        for (j = 0; j < g->n && code == MPI_SUCCESS; j++) {
            for (k = 0; k < chunks && code == MPI_SUCCESS; k++) {
                size_t off = (size_t)(k * PAR__MPI_MAX_COUNT) * es;
                MPI_Request *slot = par__mpi_req_slot(r);
                if (!slot) {
                    code = MPI_ERR_NO_MEM;
                    break;
                }
                code = MPI_Ireduce(sbuf + (size_t)j * (size_t)count * es + off, j == g->index ? rbuf + off : NULL,
                                   PAR__MPI_CHUNK(count, k), type, mop, j, g->comm, slot);
            }
        }
    }
    return par__mpi_req_finish(r, code, req);
}

static par_status par__mpi_all_to_all(void *user, par_comm_group *group, const void *send, void *recv, int64_t count,
                                      par_dtype dtype, par_request **req) {
    par__mpi *mpi = (par__mpi *)user;
    par__mpi_group *g = (par__mpi_group *)group;
    size_t es = par_dtype_size(dtype);
    MPI_Datatype type = par__mpi_type(dtype);
    par__mpi_req *r;
    par_status st;
    int64_t k, chunks;
    int code = MPI_SUCCESS;
    if (req) *req = NULL;
    if ((st = par__mpi_check(group, PAR_CALL_ALL_TO_ALL, send, recv, count, dtype, PAR_REDUCE_SUM, 0)) != PAR_OK)
        return st;
    if ((st = par__mpi_req_new(mpi, g, "all_to_all", &r)) != PAR_OK) return st;
    code = par__mpi_sign(r, PAR_CALL_ALL_TO_ALL, count, dtype, PAR_REDUCE_SUM, 0);
    chunks = PAR__MPI_CHUNKS(count);
    for (k = 0; k < chunks && code == MPI_SUCCESS; k++) {
        size_t off = (size_t)(k * PAR__MPI_MAX_COUNT) * es;
        int c = PAR__MPI_CHUNK(count, k);
        MPI_Request *slot = par__mpi_req_slot(r);
        if (!slot) {
            code = MPI_ERR_NO_MEM;
            break;
        }
        if (chunks == 1) {
            code = MPI_Ialltoall(send, c, type, recv, c, type, g->comm, slot);
        } else {
            MPI_Datatype strided;
            if ((code = par__mpi_strided(r, type, c, count, es, &strided)) != MPI_SUCCESS) break;
            code = MPI_Ialltoall((const char *)send + off, 1, strided, (char *)recv + off, 1, strided, g->comm, slot);
        }
    }
    return par__mpi_req_finish(r, code, req);
}

static par_status par__mpi_broadcast(void *user, par_comm_group *group, void *buf, int64_t count, par_dtype dtype,
                                     int root, par_request **req) {
    par__mpi *mpi = (par__mpi *)user;
    par__mpi_group *g = (par__mpi_group *)group;
    size_t es = par_dtype_size(dtype);
    par__mpi_req *r;
    par_status st;
    int64_t k, chunks;
    int code = MPI_SUCCESS;
    if (req) *req = NULL;
    if ((st = par__mpi_check(group, PAR_CALL_BROADCAST, buf, buf, count, dtype, PAR_REDUCE_SUM, root)) != PAR_OK)
        return st;
    if ((st = par__mpi_req_new(mpi, g, "broadcast", &r)) != PAR_OK) return st;
    code = par__mpi_sign(r, PAR_CALL_BROADCAST, count, dtype, PAR_REDUCE_SUM, root);
    chunks = PAR__MPI_CHUNKS(count);
    for (k = 0; k < chunks && code == MPI_SUCCESS; k++) {
        MPI_Request *slot = par__mpi_req_slot(r);
        if (!slot) {
            code = MPI_ERR_NO_MEM;
            break;
        }
        code = MPI_Ibcast((char *)buf + (size_t)(k * PAR__MPI_MAX_COUNT) * es, PAR__MPI_CHUNK(count, k),
                          par__mpi_type(dtype), root, g->comm, slot);
    }
    return par__mpi_req_finish(r, code, req);
}

static par_status par__mpi_p2p(par__mpi *mpi, par_comm_group *group, void *buf, int64_t count, par_dtype dtype,
                               int peer, par_request **req, int is_send) {
    par__mpi_group *g = (par__mpi_group *)group;
    const char *op = is_send ? "send" : "recv";
    size_t es = par_dtype_size(dtype);
    par__mpi_req *r;
    par_status st;
    int64_t k, chunks;
    int code = MPI_SUCCESS;
    if (req) *req = NULL;
    if ((st = par__mpi_check(group, is_send ? PAR_CALL_SEND : PAR_CALL_RECV, buf, buf, count, dtype, PAR_REDUCE_SUM,
                             peer)) != PAR_OK)
        return st;
    if ((st = par__mpi_req_new(mpi, g, op, &r)) != PAR_OK) return st;
    if (!is_send) {
        r->expect = count;
        r->esize = es;
        r->dtype = dtype;
    }
    chunks = PAR__MPI_CHUNKS(count);
    for (k = 0; k < chunks && code == MPI_SUCCESS; k++) {
        char *p = (char *)buf + (size_t)(k * PAR__MPI_MAX_COUNT) * es;
        MPI_Request *slot = par__mpi_req_slot(r);
        if (!slot) {
            code = MPI_ERR_NO_MEM;
            break;
        }
        if (is_send)
            code = MPI_Isend(p, PAR__MPI_CHUNK(count, k), par__mpi_type(dtype), peer, PAR__MPI_P2P_TAG, g->comm, slot);
        else
            code = MPI_Irecv(p, PAR__MPI_CHUNK(count, k), par__mpi_type(dtype), peer, PAR__MPI_P2P_TAG, g->comm, slot);
    }
    return par__mpi_req_finish(r, code, req);
}

static par_status par__mpi_send(void *user, par_comm_group *group, const void *buf, int64_t count, par_dtype dtype,
                                int peer, par_request **req) {
    return par__mpi_p2p((par__mpi *)user, group, (void *)(uintptr_t)buf, count, dtype, peer, req, 1);
}

static par_status par__mpi_recv(void *user, par_comm_group *group, void *buf, int64_t count, par_dtype dtype, int peer,
                                par_request **req) {
    return par__mpi_p2p((par__mpi *)user, group, buf, count, dtype, peer, req, 0);
}

/* The signature all-reduce is the barrier: no member gets its result before
   every member contributed. */
static par_status par__mpi_barrier(void *user, par_comm_group *group) {
    par__mpi *mpi = (par__mpi *)user;
    par__mpi_req *r;
    par_status st;
    if ((st = par__mpi_check(group, PAR_CALL_BARRIER, NULL, NULL, 0, PAR_F32, PAR_REDUCE_SUM, 0)) != PAR_OK) return st;
    if ((st = par__mpi_req_new(mpi, (par__mpi_group *)group, "barrier", &r)) != PAR_OK) return st;
    return par__mpi_req_finish(r, par__mpi_sign(r, PAR_CALL_BARRIER, 0, PAR_F32, PAR_REDUCE_SUM, 0), NULL);
}

/* --- groups and the table -------------------------------------------------- */

static par_status par__mpi_group_create(void *user, const int *ranks, int count, par_comm_group **group) {
    par__mpi *mpi = (par__mpi *)user;
    par__mpi_group *g;
    MPI_Group world_group, sub;
    unsigned hash = 2166136261u;
    int i, index, code;
    par_status st;
    if (!group) return par__fail(PAR_EINVAL, "mpi group_create: NULL group");
    *group = NULL;
    if ((st = par_comm_check_ranks("mpi", ranks, count, mpi->size, mpi->rank, &index)) != PAR_OK) return st;
    for (i = 0; i < count; i++) hash = (hash ^ (unsigned)ranks[i]) * 16777619u;
    g = (par__mpi_group *)PARALLEL_MALLOC(sizeof *g);
    if (!g) return par__fail(PAR_ENOMEM, "mpi group_create: out of memory");
    memset(g, 0, sizeof *g);
    g->n = count;
    g->index = index;
    par__mpi_group_text(g, ranks, count);
    code = MPI_Comm_group(mpi->world, &world_group);
    if (code == MPI_SUCCESS) {
        code = MPI_Group_incl(world_group, count, ranks, &sub);
        MPI_Group_free(&world_group);
        if (code == MPI_SUCCESS) {
            /* 32767 is the smallest MPI_TAG_UB the standard allows. */
            code = MPI_Comm_create_group(mpi->world, sub, (int)(hash % 32768u), &g->comm);
            MPI_Group_free(&sub);
        }
    }
    if (code == MPI_SUCCESS) code = MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
    if (code != MPI_SUCCESS) {
        par_status st = par__mpi_error(mpi, "group_create", g, code);
        PARALLEL_FREE(g);
        return st;
    }
    *group = (par_comm_group *)g;
    return PAR_OK;
}

static void par__mpi_group_destroy(void *user, par_comm_group *group) {
    par__mpi_group *g = (par__mpi_group *)group;
    (void)user;
    if (!g) return;
    MPI_Comm_free(&g->comm); /* deferred by MPI while an abandoned op is pending */
    PARALLEL_FREE(g);
}

static void par__mpi_destroy(void *user) {
    par__mpi *mpi = (par__mpi *)user;
    par__mpi_req *r, *next;
    int done;
    if (!mpi) return;
    for (r = mpi->orphans, mpi->orphans = NULL; r; r = next) { /* free the ones that completed since */
        next = r->next;
        done = 0;
        MPI_Testall(r->nreq, r->reqs, &done, MPI_STATUSES_IGNORE);
        if (done) {
            par__mpi_req_free(r, 1);
        } else { /* MPI may still write these: leaked on purpose unless we finalize below */
            r->next = mpi->orphans;
            mpi->orphans = r;
        }
    }
    MPI_Comm_free(&mpi->world);
    if (mpi->finalize) {
        MPI_Finalize(); /* all traffic has stopped: the rest can go */
        for (r = mpi->orphans; r; r = next) {
            next = r->next;
            par__mpi_req_free(r, 0);
        }
    }
    PARALLEL_FREE(mpi);
}

PARALLEL_DEF par_status par_ctx_init_mpi(const par_ctx_desc *desc, par_ctx **ctx) {
    par_comm_table table;
    par__mpi *mpi;
    int initialized = 0, finalized = 0, provided = 0, code, env_rank = 0, env_size = 0, timeout_ms = 0;
    int have_env;
    if (!ctx) return par__fail(PAR_EINVAL, "par_ctx_init_mpi: NULL ctx");
    *ctx = NULL;
    if (par__ctx_timeout(desc, &timeout_ms) != PAR_OK) return PAR_EINVAL;
    MPI_Finalized(&finalized);
    if (finalized)
        return par__fail(PAR_EUNSUPPORTED, "par_ctx_init_mpi: MPI was already finalized in this process and cannot be "
                                           "initialized again (call MPI_Init yourself to keep it across contexts)");
    have_env = par_launch_env(&env_rank, &env_size, NULL) == PAR_OK;
    par_clear_error();
    mpi = (par__mpi *)PARALLEL_MALLOC(sizeof *mpi);
    if (!mpi) return par__fail(PAR_ENOMEM, "par_ctx_init_mpi: out of memory");
    memset(mpi, 0, sizeof *mpi);
    mpi->timeout_ms = timeout_ms;
    MPI_Initialized(&initialized);
    if (!initialized) {
        code = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (code != MPI_SUCCESS) {
            PARALLEL_FREE(mpi);
            return par__fail(PAR_ECOMM, "par_ctx_init_mpi: MPI_Init_thread failed with MPI error %d", code);
        }
        mpi->finalize = 1;
    }
    code = MPI_Comm_dup(MPI_COMM_WORLD, &mpi->world);
    if (code == MPI_SUCCESS) code = MPI_Comm_set_errhandler(mpi->world, MPI_ERRORS_RETURN);
    if (code == MPI_SUCCESS) code = MPI_Comm_rank(mpi->world, &mpi->rank);
    if (code == MPI_SUCCESS) code = MPI_Comm_size(mpi->world, &mpi->size);
    if (code != MPI_SUCCESS) {
        par_status st = par__mpi_error(mpi, "init", NULL, code);
        if (mpi->finalize) MPI_Finalize();
        PARALLEL_FREE(mpi);
        return st;
    }
    if (have_env && (env_rank != mpi->rank || env_size != mpi->size)) {
        par_status st = par__fail(PAR_EINVAL, "par_ctx_init_mpi: the launcher environment says rank %d of %d but MPI "
                                              "says rank %d of %d (a stale RANK/WORLD_SIZE, or the wrong launcher?)",
                                  env_rank, env_size, mpi->rank, mpi->size);
        par__mpi_destroy(mpi);
        return st;
    }
    memset(&table, 0, sizeof table);
    table.version = PAR_COMM_TABLE_VERSION;
    table.name = "mpi";
    table.user = mpi;
    table.rank = mpi->rank;
    table.size = mpi->size;
    table.group_create = par__mpi_group_create;
    table.group_destroy = par__mpi_group_destroy;
    table.all_reduce = par__mpi_all_reduce;
    table.all_gather = par__mpi_all_gather;
    table.reduce_scatter = par__mpi_reduce_scatter;
    table.all_to_all = par__mpi_all_to_all;
    table.broadcast = par__mpi_broadcast;
    table.send = par__mpi_send;
    table.recv = par__mpi_recv;
    table.barrier = par__mpi_barrier;
    table.wait = par__mpi_wait;
    table.test = par__mpi_test;
    table.destroy = par__mpi_destroy;
    return par__ctx_create(desc, &table, 1, ctx);
}
#endif /* PARALLEL_WITH_MPI */

// >>compute-cpu
/* Portable float32 CPU kernels behind par_compute_cpu() (../shared/DESIGN.md 3.7).

   Everything here is private (par__cpu_*); users reach it through the compute
   table. Conventions of the kernels:
   * float32 data, row-major, sizes and strides in ELEMENTS (int64_t).
   * Every table kernel returns par_status: PAR_EINVAL with a sentence naming the
     op and the argument ("rmsnorm_fwd: x is NULL"); nothing asserts on user input.
   * Reductions over a row (rmsnorm, softmax, sum of squares) accumulate in
     double, so results do not depend on blocking and stay accurate for long rows.

   GEMM. par__cpu_sgemm is the single-threaded core (also used by the attention
   kernels): the classic packed five-loop GEMM (jc/pc/ic over cache blocks, jr/ir
   over an MR x NR register tile). The micro-kernel is picked at run time with
   __builtin_cpu_supports, so a header compiled with plain -O2 still uses the
   host's vector units: AVX-512 (8 x 32 tile, 16 zmm accumulators), AVX2+FMA
   (6 x 16, 12 ymm) or the portable one (6 x 8 float arrays, which the compiler
   vectorizes with its baseline ISA). The ISA kernels use the compiler's vector
   types with target attributes (gcc/clang on x86-64 only) and the fmadd
   intrinsic: the explicit FMA is needed because ISO C mode (-std=c11) turns off
   floating-point contraction. With PARALLEL_WITH_CBLAS, cblas_sgemm is used
   instead. The compute table adds a reusable packing workspace and a small
   thread pool (par_cpu_desc.threads).

   Checked: the k loop of each ISA kernel is register-resident (objdump of a
   plain -O2 gcc 12 build: 16 vfmadd231ps zmm + 8 vbroadcastss + 2 loads per
   step for AVX-512, 12 ymm FMAs for AVX2, no stack traffic; the portable kernel
   gives 12 mulps/addps on xmm). Measured 1024^3, one core, plain -O2, same
   binary (bench/bench_kernels.c): built-in ~118-186 GFLOP/s vs OpenBLAS
   ~70-110 on the dev box (AVX-512 EPYC; numbers vary with machine load).
   Not done: bf16/f16, threading of the non-GEMM kernels, tuning of MC/KC/NC,
   RoPE angles computed in double (HF uses f32 pos*inv_freq). */

#ifndef PARALLEL_NO_CPU_KERNELS
#ifdef PARALLEL_WITH_CBLAS
#include <cblas.h>
#endif
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__CUDACC__)
#define PAR__CPU_X86 1
#include <immintrin.h>
#endif
/* AVX / AVX-512 code can leave the upper halves of the vector registers
   dirty (the compiler does not always end it with vzeroupper); legacy-SSE
   code that runs next, such as a scalar kernel built without -mavx, then
   pays a transition penalty on every instruction: SwiGLU measured 3.9 ns
   per element fresh and 170 ns after an attention call, which made it 70%
   of a small model's step. Every kernel run that may use vector code ends
   with this (on the thread that ran it). */
#ifdef PAR__CPU_X86
__attribute__((target("avx"))) static void par__cpu_vzeroupper(void) { _mm256_zeroupper(); }
static void par__cpu_clean_upper(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx")) par__cpu_vzeroupper();
}
#else
static void par__cpu_clean_upper(void) {}
#endif
#endif
/* The kernel thread pool serves only the kernels. */
#if !defined(PARALLEL_NO_THREADS) && !defined(_WIN32) && !defined(PARALLEL_NO_CPU_KERNELS)
#define PAR__CPU_THREADS 1
#include <pthread.h>
#endif

#if defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER)
#define PAR__RESTRICT __restrict
#else
#define PAR__RESTRICT
#endif

#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) /* nvcc rejects the pragma (#1675-D) */
#define PAR__CPU_UNROLL _Pragma("GCC unroll 16")
#else
#define PAR__CPU_UNROLL
#endif

/* ---------------------------- shared by the kernels and the memory hooks */

/* Align a pointer up to 64 bytes. */
static void *par__cpu_align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* ------------------------------------------------------- argument checks */

#define PAR__CPU_NEED(cond, ...)                                \
    do {                                                        \
        if (!(cond)) return par__fail(PAR_EINVAL, __VA_ARGS__); \
    } while (0)
/* Argument checks that name the op and the argument: "rmsnorm_fwd: dim is 0 (must be > 0)". */
#define PAR__CPU_NONNEG(fn, v) \
    PAR__CPU_NEED((v) >= 0, "%s: %s is %lld (must be >= 0)", fn, #v, (long long)(v))
#define PAR__CPU_POS(fn, v) PAR__CPU_NEED((v) > 0, "%s: %s is %lld (must be > 0)", fn, #v, (long long)(v))
#define PAR__CPU_PTR(fn, p) PAR__CPU_NEED((p) != NULL, "%s: %s is NULL", fn, #p)

#ifndef PARALLEL_NO_CPU_KERNELS /* the kernels, down to ">>compute-cpu (the table)" */

/* ------------------------------------------------------------- gemm core */

/* C[0:mr, 0:nr] = alpha * (a_panel * b_panel) + beta * C, over kc steps of the
   packed panels (a: kc x MR, b: kc x NR). beta == 0 does not read C. */
typedef void (*par__cpu_ukernel_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int mr,
                                    int nr, float alpha, float beta);

/* One micro-kernel and the cache blocks tuned for it: MC x KC of packed A stays
   in L2 and one KC x NR micro-panel of B in L1 while the ir loop sweeps A. */
typedef struct par__cpu_gemm_isa {
    const char *name;
    int mr, nr;
    int64_t mc, kc, nc;
    par__cpu_ukernel_fn kernel;
} par__cpu_gemm_isa;

/* Store an MR x NR accumulator tile (row i at tile + i*NR): the edge case of
   every micro-kernel (only mr x nr of it is inside C). */
static void par__cpu_store_edge(const float *tile, int NR, float *c, int64_t ldc, int mr, int nr, float alpha,
                                float beta) {
    int i, j;
    for (i = 0; i < mr; i++)
        for (j = 0; j < nr; j++)
            c[i * ldc + j] = beta == 0.0f ? alpha * tile[i * NR + j] : alpha * tile[i * NR + j] + beta * c[i * ldc + j];
}

/* Portable micro-kernel, 6 x 8. With gcc/clang it is written in the compiler's
   generic 4-float vector type (SSE2 on x86-64, NEON on arm64, emulated
   elsewhere) with the tile loops unrolled, so the 12 accumulators stay in
   registers; other compilers get the plain-array form. */
#define PAR__CPU_GMR 6
#define PAR__CPU_GNR 8
#if defined(__GNUC__) || defined(__clang__)
typedef float par__cpu_v4 __attribute__((vector_size(16)));
static void par__cpu_ukernel_generic(int64_t kc, const float *PAR__RESTRICT a, const float *PAR__RESTRICT b,
                                     float *PAR__RESTRICT c, int64_t ldc, int mr, int nr, float alpha, float beta) {
    par__cpu_v4 acc[PAR__CPU_GMR][2], b0, b1;
    const par__cpu_v4 vzero = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t p;
    int i;
    PAR__CPU_UNROLL
    for (i = 0; i < PAR__CPU_GMR; i++) acc[i][0] = acc[i][1] = vzero;
    for (p = 0; p < kc; p++) {
        const float *ap = a + p * PAR__CPU_GMR;
        memcpy(&b0, b + p * PAR__CPU_GNR, sizeof b0);
        memcpy(&b1, b + p * PAR__CPU_GNR + 4, sizeof b1);
        PAR__CPU_UNROLL
        for (i = 0; i < PAR__CPU_GMR; i++) {
            const par__cpu_v4 ai = vzero + ap[i];
            acc[i][0] += ai * b0;
            acc[i][1] += ai * b1;
        }
    }
    {
        float tile[PAR__CPU_GMR * PAR__CPU_GNR];
        PAR__CPU_UNROLL
        for (i = 0; i < PAR__CPU_GMR; i++) {
            memcpy(tile + i * PAR__CPU_GNR, &acc[i][0], sizeof b0);
            memcpy(tile + i * PAR__CPU_GNR + 4, &acc[i][1], sizeof b0);
        }
        par__cpu_store_edge(tile, PAR__CPU_GNR, c, ldc, mr, nr, alpha, beta);
    }
}
#else
static void par__cpu_ukernel_generic(int64_t kc, const float *PAR__RESTRICT a, const float *PAR__RESTRICT b,
                                     float *PAR__RESTRICT c, int64_t ldc, int mr, int nr, float alpha, float beta) {
    float acc[PAR__CPU_GMR][PAR__CPU_GNR];
    int64_t p;
    int i, j;
    for (i = 0; i < PAR__CPU_GMR; i++)
        for (j = 0; j < PAR__CPU_GNR; j++) acc[i][j] = 0.0f;
    for (p = 0; p < kc; p++) {
        const float *PAR__RESTRICT bp = b + p * PAR__CPU_GNR;
        const float *PAR__RESTRICT ap = a + p * PAR__CPU_GMR;
        for (i = 0; i < PAR__CPU_GMR; i++) {
            const float ai = ap[i];
            for (j = 0; j < PAR__CPU_GNR; j++) acc[i][j] += ai * bp[j];
        }
    }
    par__cpu_store_edge(&acc[0][0], PAR__CPU_GNR, c, ldc, mr, nr, alpha, beta);
}
#endif

static const par__cpu_gemm_isa par__cpu_isa_generic = {"portable 6x8", PAR__CPU_GMR, PAR__CPU_GNR, 96, 256, 4096,
                                                       par__cpu_ukernel_generic};

#ifdef PAR__CPU_X86
/* g++ 12 flags its own AVX-512 intrinsics (their "undefined" vectors) as used
   uninitialized when inlined in C++ (gcc bug 105593); the warning is not ours. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/* AVX-512: 8 rows x 2 zmm. 16 accumulators + 2 B vectors + 1 broadcast of the
   32 zmm registers; per k step 16 FMAs against 2 loads and 8 broadcasts. The
   tile loops are fully unrolled (the pragma) so acc never leaves registers. */
#define PAR__CPU_Z_MR 8
__attribute__((target("avx512f"))) static void par__cpu_ukernel_avx512(int64_t kc, const float *PAR__RESTRICT a,
                                                                       const float *PAR__RESTRICT b,
                                                                       float *PAR__RESTRICT c, int64_t ldc, int mr,
                                                                       int nr, float alpha, float beta) {
    __m512 c0[PAR__CPU_Z_MR], c1[PAR__CPU_Z_MR];
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    int64_t p;
    int i;
    PAR__CPU_UNROLL
    for (i = 0; i < PAR__CPU_Z_MR; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    for (p = 0; p < kc; p++) {
        const __m512 b0 = _mm512_load_ps(b + p * 32), b1 = _mm512_load_ps(b + p * 32 + 16);
        const float *ap = a + p * PAR__CPU_Z_MR;
        PAR__CPU_UNROLL
        for (i = 0; i < PAR__CPU_Z_MR; i++) {
            const __m512 ai = _mm512_set1_ps(ap[i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
    }
    if (mr == PAR__CPU_Z_MR && nr == 32) {
        PAR__CPU_UNROLL
        for (i = 0; i < PAR__CPU_Z_MR; i++) {
            float *ci = c + i * ldc;
            if (beta == 0.0f) {
                _mm512_storeu_ps(ci, va * c0[i]);
                _mm512_storeu_ps(ci + 16, va * c1[i]);
            } else {
                _mm512_storeu_ps(ci, va * c0[i] + vb * _mm512_loadu_ps(ci));
                _mm512_storeu_ps(ci + 16, va * c1[i] + vb * _mm512_loadu_ps(ci + 16));
            }
        }
    } else {
        float tile[PAR__CPU_Z_MR * 32];
        for (i = 0; i < PAR__CPU_Z_MR; i++) {
            _mm512_storeu_ps(tile + i * 32, c0[i]);
            _mm512_storeu_ps(tile + i * 32 + 16, c1[i]);
        }
        /* gcc omits the vzeroupper before this call; without it the caller's
           SSE code runs ~5x slower (dirty upper register state) */
        _mm256_zeroupper();
        par__cpu_store_edge(tile, 32, c, ldc, mr, nr, alpha, beta);
    }
}

/* AVX2 + FMA: 6 rows x 2 ymm = 12 accumulators + 2 B + 1 broadcast of 16 ymm. */
__attribute__((target("avx2,fma"))) static void par__cpu_ukernel_avx2(int64_t kc, const float *PAR__RESTRICT a,
                                                                      const float *PAR__RESTRICT b,
                                                                      float *PAR__RESTRICT c, int64_t ldc, int mr,
                                                                      int nr, float alpha, float beta) {
    __m256 c0[6], c1[6];
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    int64_t p;
    int i;
    PAR__CPU_UNROLL
    for (i = 0; i < 6; i++) c0[i] = c1[i] = _mm256_setzero_ps();
    for (p = 0; p < kc; p++) {
        const __m256 b0 = _mm256_load_ps(b + p * 16), b1 = _mm256_load_ps(b + p * 16 + 8);
        const float *ap = a + p * 6;
        PAR__CPU_UNROLL
        for (i = 0; i < 6; i++) {
            const __m256 ai = _mm256_broadcast_ss(ap + i);
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
        }
    }
    if (mr == 6 && nr == 16) {
        PAR__CPU_UNROLL
        for (i = 0; i < 6; i++) {
            float *ci = c + i * ldc;
            if (beta == 0.0f) {
                _mm256_storeu_ps(ci, va * c0[i]);
                _mm256_storeu_ps(ci + 8, va * c1[i]);
            } else {
                _mm256_storeu_ps(ci, va * c0[i] + vb * _mm256_loadu_ps(ci));
                _mm256_storeu_ps(ci + 8, va * c1[i] + vb * _mm256_loadu_ps(ci + 8));
            }
        }
    } else {
        float tile[6 * 16];
        for (i = 0; i < 6; i++) {
            _mm256_storeu_ps(tile + i * 16, c0[i]);
            _mm256_storeu_ps(tile + i * 16 + 8, c1[i]);
        }
        /* gcc omits the vzeroupper before this call; without it the caller's
           SSE code runs ~5x slower (dirty upper register state) */
        _mm256_zeroupper();
        par__cpu_store_edge(tile, 16, c, ldc, mr, nr, alpha, beta);
    }
}

static const par__cpu_gemm_isa par__cpu_isa_avx512 = {"avx512 8x32", PAR__CPU_Z_MR, 32, 128, 256, 4096,
                                                      par__cpu_ukernel_avx512};
static const par__cpu_gemm_isa par__cpu_isa_avx2 = {"avx2 6x16", 6, 16, 96, 256, 4096, par__cpu_ukernel_avx2};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* PAR__CPU_X86 */

/* The kernels this CPU can run, best first (index 0 is what GEMM uses). Reads
   the CPU model that the compiler runtime fills once at startup, so it is cheap
   and race-free (no state of ours). */
static int par__cpu_gemm_isas(const par__cpu_gemm_isa **out) {
    int n = 0;
#ifdef PAR__CPU_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) out[n++] = &par__cpu_isa_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) out[n++] = &par__cpu_isa_avx2;
#endif
    out[n++] = &par__cpu_isa_generic;
    return n;
}

static const par__cpu_gemm_isa *par__cpu_gemm_best(void) {
    const par__cpu_gemm_isa *list[4];
    par__cpu_gemm_isas(list);
    return list[0];
}

/* Pack rows [i0, i0+mc) x cols [p0, p0+kc) of op(A) into MR-row panels: panel q
   holds, for each p, the MR values op(A)[i0+q*MR+i, p0+p], zero-padded. */
static void par__cpu_pack_a(int MR, int transa, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t p0,
                            int64_t kc, float *PAR__RESTRICT dst) {
    int64_t ir, p;
    int i;
    for (ir = 0; ir < mc; ir += MR) {
        int mr = (int)(mc - ir < MR ? mc - ir : MR);
        if (transa) { /* op(A)[i,p] = A[p*lda + i]: MR contiguous values per p */
            for (p = 0; p < kc; p++) {
                const float *src = A + (p0 + p) * lda + i0 + ir;
                float *d = dst + p * MR;
                for (i = 0; i < mr; i++) d[i] = src[i];
                for (; i < MR; i++) d[i] = 0.0f;
            }
        } else {
            for (i = 0; i < mr; i++) {
                const float *src = A + (i0 + ir + i) * lda + p0;
                for (p = 0; p < kc; p++) dst[p * MR + i] = src[p];
            }
            for (; i < MR; i++)
                for (p = 0; p < kc; p++) dst[p * MR + i] = 0.0f;
        }
        dst += kc * MR;
    }
}

/* Pack rows [p0, p0+kc) x cols [j0, j0+nc) of op(B) into NR-column panels. */
static void par__cpu_pack_b(int NR, int transb, const float *B, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                            int64_t nc, float *PAR__RESTRICT dst) {
    int64_t jr, p;
    int j;
    for (jr = 0; jr < nc; jr += NR) {
        int nr = (int)(nc - jr < NR ? nc - jr : NR);
        if (!transb) { /* op(B)[p,j] = B[p*ldb + j]: rows are contiguous */
            for (p = 0; p < kc; p++) {
                const float *src = B + (p0 + p) * ldb + j0 + jr;
                float *d = dst + p * NR;
                for (j = 0; j < nr; j++) d[j] = src[j];
                for (; j < NR; j++) d[j] = 0.0f;
            }
        } else { /* op(B)[p,j] = B[j*ldb + p] */
            for (j = 0; j < nr; j++) {
                const float *src = B + (j0 + jr + j) * ldb + p0;
                for (p = 0; p < kc; p++) dst[p * NR + j] = src[p];
            }
            for (; j < NR; j++)
                for (p = 0; p < kc; p++) dst[p * NR + j] = 0.0f;
        }
        dst += kc * NR;
    }
}

/* C = beta * C over an m x n block (beta == 0 writes zeros without reading C). */
static void par__cpu_scale_c(int64_t m, int64_t n, float beta, float *C, int64_t ldc) {
    int64_t i, j;
    if (beta == 1.0f) return;
    for (i = 0; i < m; i++) {
        float *c = C + i * ldc;
        if (beta == 0.0f)
            for (j = 0; j < n; j++) c[j] = 0.0f;
        else
            for (j = 0; j < n; j++) c[j] *= beta;
    }
}

/* Cache blocks for one problem: the isa's, shrunk to the problem, then (if
   `cap` floats of packing space are not enough) shrunk to fit `cap`. */
typedef struct par__cpu_blocks {
    int64_t mc, kc, nc;
} par__cpu_blocks;

static int64_t par__cpu_round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

static par__cpu_blocks par__cpu_gemm_blocks(const par__cpu_gemm_isa *isa, int64_t m, int64_t n, int64_t k,
                                            int64_t cap) {
    par__cpu_blocks b;
    b.kc = k < isa->kc ? (k > 0 ? k : 1) : isa->kc;
    b.mc = par__cpu_round_up(m < isa->mc ? (m > 0 ? m : 1) : isa->mc, isa->mr);
    b.nc = par__cpu_round_up(n < isa->nc ? (n > 0 ? n : 1) : isa->nc, isa->nr);
    if (cap > 0) {
        /* Fit: first the k block (never below 64: short k steps waste the tile
           setup), then n, then m, down to one register tile each. */
        while ((b.mc + b.nc) * b.kc > cap && b.kc > 64) b.kc = (b.kc + 1) / 2;
        while ((b.mc + b.nc) * b.kc > cap && b.nc > isa->nr) b.nc = par__cpu_round_up(b.nc / 2, isa->nr);
        while ((b.mc + b.nc) * b.kc > cap && b.mc > isa->mr) b.mc = par__cpu_round_up(b.mc / 2, isa->mr);
        while ((b.mc + b.nc) * b.kc > cap && b.kc > 1) b.kc = (b.kc + 1) / 2;
    }
    return b;
}

/* Packing floats the blocks need (A block then B block; both 64-byte aligned
   when the base is, since MR*4 and NR*4 multiply kc... A's size is rounded up). */
static int64_t par__cpu_blocks_floats(par__cpu_blocks b) { return par__cpu_round_up(b.mc * b.kc, 16) + b.kc * b.nc; }

/* The five-loop GEMM on caller-provided packing space `ws` (>= blocks_floats,
   64-byte aligned). Arguments are trusted (checked by the callers). */
static void par__cpu_gemm_blocked(const par__cpu_gemm_isa *isa, par__cpu_blocks bl, int transa, int transb,
                                  int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, float *ws) {
    const int MR = isa->mr, NR = isa->nr;
    float *pa = ws, *pb = ws + par__cpu_round_up(bl.mc * bl.kc, 16);
    int64_t jc, pc, ic, jr, ir;
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        par__cpu_scale_c(m, n, beta, C, ldc);
        return;
    }
    for (jc = 0; jc < n; jc += bl.nc) {
        const int64_t nc = n - jc < bl.nc ? n - jc : bl.nc;
        for (pc = 0; pc < k; pc += bl.kc) {
            const int64_t kc = k - pc < bl.kc ? k - pc : bl.kc;
            const float beta_now = pc == 0 ? beta : 1.0f; /* later k blocks add to C */
            par__cpu_pack_b(NR, transb, B, ldb, pc, kc, jc, nc, pb);
            for (ic = 0; ic < m; ic += bl.mc) {
                const int64_t mc = m - ic < bl.mc ? m - ic : bl.mc;
                par__cpu_pack_a(MR, transa, A, lda, ic, mc, pc, kc, pa);
                for (jr = 0; jr < nc; jr += NR) {
                    const int nr = (int)(nc - jr < NR ? nc - jr : NR);
                    for (ir = 0; ir < mc; ir += MR) {
                        const int mr = (int)(mc - ir < MR ? mc - ir : MR);
                        isa->kernel(kc, pa + ir * kc, pb + jr * kc, C + (ic + ir) * ldc + jc + jr, ldc, mr, nr,
                                    alpha, beta_now);
                    }
                }
            }
        }
    }
}

/* Stack packing space for small GEMMs (16 KB: safe on small thread stacks). */
#define PAR__CPU_STACK_FLOATS 4096

/* C = alpha op(A) op(B) + beta C with a given micro-kernel, single-threaded.
   Small problems pack into a stack buffer; large ones malloc their packing
   space (negligible next to the arithmetic), falling back to the stack blocks if
   that fails, so this never fails. */
static void par__cpu_sgemm_isa_a(const par_allocator *alloc, const par__cpu_gemm_isa *isa, int transa, int transb,
                                 int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    float stack[PAR__CPU_STACK_FLOATS + 16];
    par__cpu_blocks bl = par__cpu_gemm_blocks(isa, m, n, k, 0);
    int64_t need = par__cpu_blocks_floats(bl);
    void *heap = NULL;
    float *ws;
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        par__cpu_scale_c(m, n, beta, C, ldc);
        return;
    }
    if (need > PAR__CPU_STACK_FLOATS) heap = par__alloc_malloc(alloc, (size_t)need * sizeof(float) + 64);
    if (heap) {
        ws = (float *)par__cpu_align64(heap);
    } else {
        bl = par__cpu_gemm_blocks(isa, m, n, k, PAR__CPU_STACK_FLOATS);
        ws = (float *)par__cpu_align64(stack);
    }
    par__cpu_gemm_blocked(isa, bl, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, ws);
    par__alloc_free(alloc, heap);
}

/* The same with the PARALLEL_MALLOC macros (tests and benches call it). */
static PAR__MAYBE_UNUSED void par__cpu_sgemm_isa(const par__cpu_gemm_isa *isa, int transa, int transb, int64_t m,
                                                 int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                                                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    par__cpu_sgemm_isa_a(NULL, isa, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* The internal single-threaded SGEMM (row-major, C = alpha op(A) op(B) + beta C,
   beta == 0 does not read C). Arguments are NOT checked: callers pass valid
   sizes and leading dims. cblas_sgemm under PARALLEL_WITH_CBLAS. Packing space
   for large problems comes from `alloc` (NULL: the PARALLEL_MALLOC macros). */
static PAR__MAYBE_UNUSED void par__cpu_sgemm_a(const par_allocator *alloc, int transa, int transb, int64_t m,
                                               int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                                               const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
#ifdef PARALLEL_WITH_CBLAS
    (void)alloc;
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        par__cpu_scale_c(m, n, beta, C, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                (int)k, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#else
    par__cpu_sgemm_isa_a(alloc, par__cpu_gemm_best(), transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

static PAR__MAYBE_UNUSED void par__cpu_sgemm(int transa, int transb, int64_t m, int64_t n, int64_t k, float alpha,
                                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                                             float *C, int64_t ldc) {
    par__cpu_sgemm_a(NULL, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---------------------------------------------------------------- rmsnorm */

static PAR__MAYBE_UNUSED par_status par__cpu_rmsnorm_fwd(int64_t rows, int64_t dim, const float *x, const float *w, float eps,
                                            float *y, float *rstd) {
    int64_t r, j;
    PAR__CPU_NONNEG("rmsnorm_fwd", rows);
    PAR__CPU_POS("rmsnorm_fwd", dim);
    if (rows > 0) {
        PAR__CPU_PTR("rmsnorm_fwd", x); PAR__CPU_PTR("rmsnorm_fwd", w); PAR__CPU_PTR("rmsnorm_fwd", y);
    }
    for (r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        double ss = 0.0;
        float s;
        for (j = 0; j < dim; j++) ss += (double)xr[j] * xr[j];
        s = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
        if (rstd) rstd[r] = s;
        for (j = 0; j < dim; j++) yr[j] = w[j] * (xr[j] * s);
    }
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_rmsnorm_bwd(int64_t rows, int64_t dim, const float *x, const float *w,
                                            const float *rstd, const float *dy, float *dx, float *dw) {
    int64_t r, j;
    PAR__CPU_NONNEG("rmsnorm_bwd", rows);
    PAR__CPU_POS("rmsnorm_bwd", dim);
    if (rows > 0) {
        PAR__CPU_PTR("rmsnorm_bwd", x); PAR__CPU_PTR("rmsnorm_bwd", w); PAR__CPU_PTR("rmsnorm_bwd", rstd); PAR__CPU_PTR("rmsnorm_bwd", dy); PAR__CPU_PTR("rmsnorm_bwd", dx); PAR__CPU_PTR("rmsnorm_bwd", dw);
    }
    for (r = 0; r < rows; r++) {
        const float *xr = x + r * dim, *dyr = dy + r * dim;
        float *dxr = dx + r * dim;
        const float s = rstd[r];
        double dot = 0.0; /* sum_j dy_j w_j x_j */
        float c;
        for (j = 0; j < dim; j++) dot += (double)dyr[j] * w[j] * xr[j];
        /* dx_j = s w_j dy_j - x_j s^3 dot / dim */
        c = (float)(dot * (double)s * s * s / (double)dim);
        for (j = 0; j < dim; j++) {
            const float g = dyr[j];
            dw[j] += g * xr[j] * s;
            dxr[j] = s * w[j] * g - xr[j] * c;
        }
    }
    return PAR_OK;
}

/* ------------------------------------------------------------------- rope */

static par_status par__cpu_rope(const char *fn, int64_t tokens, int64_t heads, int64_t head_dim, const int64_t *pos,
                                float theta, const float *x, float *y, double sign) {
    int64_t t, hh, i, half = head_dim / 2;
    PAR__CPU_NONNEG(fn, tokens);
    PAR__CPU_NONNEG(fn, heads);
    PAR__CPU_NEED(head_dim > 0 && head_dim % 2 == 0, "%s: head_dim is %lld (must be even and > 0)", fn,
                  (long long)head_dim);
    PAR__CPU_NEED(theta > 0.0f, "%s: theta is %g (must be > 0)", fn, (double)theta);
    if (tokens > 0 && heads > 0) {
        PAR__CPU_PTR(fn, pos); PAR__CPU_PTR(fn, x); PAR__CPU_PTR(fn, y);
    }
    for (t = 0; t < tokens; t++) {
        for (i = 0; i < half; i++) {
            const double a = (double)pos[t] * pow((double)theta, -2.0 * (double)i / (double)head_dim);
            const float c = (float)cos(a), s = (float)(sign * sin(a));
            for (hh = 0; hh < heads; hh++) {
                const float *xv = x + (t * heads + hh) * head_dim;
                float *yv = y + (t * heads + hh) * head_dim;
                const float x0 = xv[i], x1 = xv[i + half];
                yv[i] = x0 * c - x1 * s;
                yv[i + half] = x1 * c + x0 * s;
            }
        }
    }
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_rope_fwd(int64_t tokens, int64_t heads, int64_t head_dim, const int64_t *pos,
                                         float theta, const float *x, float *y) {
    return par__cpu_rope("rope_fwd", tokens, heads, head_dim, pos, theta, x, y, 1.0);
}

static PAR__MAYBE_UNUSED par_status par__cpu_rope_bwd(int64_t tokens, int64_t heads, int64_t head_dim, const int64_t *pos,
                                         float theta, const float *dy, float *dx) {
    if (tokens > 0 && heads > 0) { /* named here: the shared body calls them x and y */
        PAR__CPU_PTR("rope_bwd", dy);
        PAR__CPU_PTR("rope_bwd", dx);
    }
    return par__cpu_rope("rope_bwd", tokens, heads, head_dim, pos, theta, dy, dx, -1.0);
}

/* ----------------------------------------------------------------- swiglu */

static PAR__MAYBE_UNUSED par_status par__cpu_swiglu_fwd(int64_t n, const float *g, const float *u, float *h) {
    int64_t i;
    PAR__CPU_NONNEG("swiglu_fwd", n);
    if (n > 0) {
        PAR__CPU_PTR("swiglu_fwd", g); PAR__CPU_PTR("swiglu_fwd", u); PAR__CPU_PTR("swiglu_fwd", h);
    }
    for (i = 0; i < n; i++) {
        const float gi = g[i];
        h[i] = gi / (1.0f + expf(-gi)) * u[i];
    }
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_swiglu_bwd(int64_t n, const float *g, const float *u, const float *dh, float *dg,
                                           float *du) {
    int64_t i;
    PAR__CPU_NONNEG("swiglu_bwd", n);
    if (n > 0) {
        PAR__CPU_PTR("swiglu_bwd", g); PAR__CPU_PTR("swiglu_bwd", u); PAR__CPU_PTR("swiglu_bwd", dh); PAR__CPU_PTR("swiglu_bwd", dg); PAR__CPU_PTR("swiglu_bwd", du);
    }
    for (i = 0; i < n; i++) {
        const float gi = g[i], ui = u[i], d = dh[i];
        const float s = 1.0f / (1.0f + expf(-gi));
        dg[i] = d * ui * (s * (1.0f + gi * (1.0f - s)));
        du[i] = d * gi * s;
    }
    return PAR_OK;
}

/* -------------------------------------------------------------- embedding */

static PAR__MAYBE_UNUSED par_status par__cpu_embedding_fwd(int64_t n, const int32_t *ids, const float *table, int64_t rows,
                                              int64_t dim, int64_t start, float *out) {
    int64_t t;
    PAR__CPU_NONNEG("embedding_fwd", n);
    PAR__CPU_NONNEG("embedding_fwd", rows);
    PAR__CPU_POS("embedding_fwd", dim);
    PAR__CPU_NONNEG("embedding_fwd", start);
    if (n > 0) {
        PAR__CPU_PTR("embedding_fwd", ids); PAR__CPU_PTR("embedding_fwd", out);
        if (rows > 0) PAR__CPU_PTR("embedding_fwd", table);
    }
    for (t = 0; t < n; t++) {
        const int64_t id = ids[t], r = id - start;
        PAR__CPU_NEED(id >= 0, "embedding_fwd: token %lld has negative id %lld", (long long)t, (long long)id);
        if (r >= 0 && r < rows)
            memcpy(out + t * dim, table + r * dim, (size_t)dim * sizeof(float));
        else
            memset(out + t * dim, 0, (size_t)dim * sizeof(float));
    }
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_embedding_bwd(int64_t n, const int32_t *ids, const float *dout, int64_t rows,
                                              int64_t dim, int64_t start, float *dtable) {
    int64_t t, j;
    PAR__CPU_NONNEG("embedding_bwd", n);
    PAR__CPU_NONNEG("embedding_bwd", rows);
    PAR__CPU_POS("embedding_bwd", dim);
    PAR__CPU_NONNEG("embedding_bwd", start);
    if (n > 0) {
        PAR__CPU_PTR("embedding_bwd", ids); PAR__CPU_PTR("embedding_bwd", dout);
        if (rows > 0) PAR__CPU_PTR("embedding_bwd", dtable);
    }
    for (t = 0; t < n; t++) {
        const int64_t id = ids[t], r = id - start;
        PAR__CPU_NEED(id >= 0, "embedding_bwd: token %lld has negative id %lld", (long long)t, (long long)id);
        if (r >= 0 && r < rows) {
            float *dst = dtable + r * dim;
            const float *src = dout + t * dim;
            for (j = 0; j < dim; j++) dst[j] += src[j];
        }
    }
    return PAR_OK;
}

/* ---------------------------------------------------- softmax cross-entropy */

static float par__cpu_row_max(const float *x, int64_t n) {
    float mx = -INFINITY;
    int64_t j;
    for (j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

static double par__cpu_row_sumexp(const float *x, int64_t n, float mx) {
    double s = 0.0;
    int64_t j;
    for (j = 0; j < n; j++) s += (double)expf(x[j] - mx);
    return s;
}

static PAR__MAYBE_UNUSED par_status par__cpu_xent(int64_t rows, int64_t vocab, const float *logits, const int32_t *targets,
                                     float *loss, float *dlogits, float scale) {
    int64_t r, j;
    PAR__CPU_NONNEG("xent", rows);
    PAR__CPU_POS("xent", vocab);
    if (rows > 0) {
        PAR__CPU_PTR("xent", logits); PAR__CPU_PTR("xent", targets); PAR__CPU_PTR("xent", loss);
    }
    for (r = 0; r < rows; r++)
        PAR__CPU_NEED(targets[r] < vocab, "xent: row %lld has target %d outside the vocab of %lld",
                      (long long)r, (int)targets[r], (long long)vocab);
    for (r = 0; r < rows; r++) {
        const float *x = logits + r * vocab;
        const int32_t tg = targets[r];
        float mx, inv;
        double s;
        if (tg < 0) {
            loss[r] = 0.0f;
            if (dlogits) memset(dlogits + r * vocab, 0, (size_t)vocab * sizeof(float));
            continue;
        }
        mx = par__cpu_row_max(x, vocab);
        s = par__cpu_row_sumexp(x, vocab, mx);
        loss[r] = (float)(log(s) + (double)mx - (double)x[tg]);
        if (dlogits) {
            float *d = dlogits + r * vocab;
            const float xt = x[tg]; /* read before d (which may alias x) is written */
            inv = (float)(1.0 / s);
            for (j = 0; j < vocab; j++) d[j] = expf(x[j] - mx) * inv * scale;
            d[tg] = (expf(xt - mx) * inv - 1.0f) * scale;
        }
    }
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_xent_local_max(int64_t rows, int64_t v_local, const float *logits, float *max_out) {
    int64_t r;
    PAR__CPU_NONNEG("xent_local_max", rows);
    PAR__CPU_NONNEG("xent_local_max", v_local);
    if (rows > 0) {
        PAR__CPU_PTR("xent_local_max", max_out);
        if (v_local > 0) PAR__CPU_PTR("xent_local_max", logits);
    }
    for (r = 0; r < rows; r++) max_out[r] = par__cpu_row_max(logits + r * v_local, v_local);
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_xent_local_sumexp(int64_t rows, int64_t v_local, const float *logits,
                                                  const float *gmax, float *sum_out) {
    int64_t r;
    PAR__CPU_NONNEG("xent_local_sumexp", rows);
    PAR__CPU_NONNEG("xent_local_sumexp", v_local);
    if (rows > 0) {
        PAR__CPU_PTR("xent_local_sumexp", gmax); PAR__CPU_PTR("xent_local_sumexp", sum_out);
        if (v_local > 0) PAR__CPU_PTR("xent_local_sumexp", logits);
    }
    for (r = 0; r < rows; r++) sum_out[r] = (float)par__cpu_row_sumexp(logits + r * v_local, v_local, gmax[r]);
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_xent_local_target(int64_t rows, int64_t v_local, const float *logits,
                                                  const int32_t *targets, int64_t start, float *tgt_out) {
    int64_t r;
    PAR__CPU_NONNEG("xent_local_target", rows);
    PAR__CPU_NONNEG("xent_local_target", v_local);
    PAR__CPU_NONNEG("xent_local_target", start);
    if (rows > 0) {
        PAR__CPU_PTR("xent_local_target", targets); PAR__CPU_PTR("xent_local_target", tgt_out);
        if (v_local > 0) PAR__CPU_PTR("xent_local_target", logits);
    }
    for (r = 0; r < rows; r++) {
        const int64_t j = (int64_t)targets[r] - start;
        tgt_out[r] = (targets[r] >= 0 && j >= 0 && j < v_local) ? logits[r * v_local + j] : 0.0f;
    }
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_xent_loss_from_pieces(int64_t rows, const float *gmax, const float *gsum,
                                                      const float *tgt, const int32_t *targets, float *loss) {
    int64_t r;
    PAR__CPU_NONNEG("xent_loss_from_pieces", rows);
    if (rows > 0) {
        PAR__CPU_PTR("xent_loss_from_pieces", gmax); PAR__CPU_PTR("xent_loss_from_pieces", gsum); PAR__CPU_PTR("xent_loss_from_pieces", tgt); PAR__CPU_PTR("xent_loss_from_pieces", targets); PAR__CPU_PTR("xent_loss_from_pieces", loss);
    }
    for (r = 0; r < rows; r++)
        loss[r] = targets[r] < 0 ? 0.0f : (float)(log((double)gsum[r]) + (double)gmax[r] - (double)tgt[r]);
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_xent_bwd_split(int64_t rows, int64_t v_local, const float *logits,
                                               const int32_t *targets, int64_t start, const float *gmax,
                                               const float *gsum, float scale, float *dlogits) {
    int64_t r, j;
    PAR__CPU_NONNEG("xent_bwd_split", rows);
    PAR__CPU_NONNEG("xent_bwd_split", v_local);
    PAR__CPU_NONNEG("xent_bwd_split", start);
    if (rows > 0 && v_local > 0) {
        PAR__CPU_PTR("xent_bwd_split", logits); PAR__CPU_PTR("xent_bwd_split", targets); PAR__CPU_PTR("xent_bwd_split", gmax); PAR__CPU_PTR("xent_bwd_split", gsum); PAR__CPU_PTR("xent_bwd_split", dlogits);
    }
    for (r = 0; r < rows; r++) {
        const float *x = logits + r * v_local;
        float *d = dlogits + r * v_local;
        const int64_t jt = (int64_t)targets[r] - start;
        const float mx = gmax[r];
        const float inv = (float)(1.0 / (double)gsum[r]);
        if (targets[r] < 0) {
            memset(d, 0, (size_t)v_local * sizeof(float));
            continue;
        }
        for (j = 0; j < v_local; j++) d[j] = expf(x[j] - mx) * inv * scale;
        if (jt >= 0 && jt < v_local) d[jt] -= scale;
    }
    return PAR_OK;
}

/* ------------------------------------------------------------------ adamw */

static PAR__MAYBE_UNUSED par_status par__cpu_adamw(int64_t n, float *p, const float *g, float *m, float *v, float lr, float beta1,
                                      float beta2, float eps, float weight_decay, int64_t step) {
    int64_t i;
    float bc1, bc2, step_size, decay, inv_sqrt_bc2;
    PAR__CPU_NONNEG("adamw", n);
    PAR__CPU_NEED(step >= 1, "adamw: step is %lld; steps count from 1", (long long)step);
    PAR__CPU_NEED(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
                  "adamw: betas (%g, %g) must be in [0, 1)", (double)beta1, (double)beta2);
    if (n > 0) {
        PAR__CPU_PTR("adamw", p); PAR__CPU_PTR("adamw", g); PAR__CPU_PTR("adamw", m); PAR__CPU_PTR("adamw", v);
    }
    /* bias corrections in double: beta^step underflows gracefully and 1 - beta^t
       for small t is computed without f32 cancellation. */
    bc1 = (float)(1.0 - pow((double)beta1, (double)step));
    bc2 = (float)(1.0 - pow((double)beta2, (double)step));
    step_size = lr / bc1;
    inv_sqrt_bc2 = (float)(1.0 / sqrt((double)bc2));
    decay = 1.0f - lr * weight_decay;
    for (i = 0; i < n; i++) {
        const float gi = g[i];
        const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
    return PAR_OK;
}

/* ------------------------------------------------------------- reductions */

static PAR__MAYBE_UNUSED par_status par__cpu_scale(int64_t n, float alpha, float *x) {
    int64_t i;
    PAR__CPU_NONNEG("scale", n);
    if (n > 0) PAR__CPU_PTR("scale", x);
    for (i = 0; i < n; i++) x[i] *= alpha;
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_axpy(int64_t n, float alpha, const float *x, float *y) {
    int64_t i;
    PAR__CPU_NONNEG("axpy", n);
    if (n > 0) {
        PAR__CPU_PTR("axpy", x); PAR__CPU_PTR("axpy", y);
    }
    for (i = 0; i < n; i++) y[i] += alpha * x[i];
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_sumsq(int64_t n, const float *x, double *out) {
    int64_t i;
    double s = 0.0;
    PAR__CPU_NONNEG("sumsq", n);
    PAR__CPU_PTR("sumsq", out);
    if (n > 0) PAR__CPU_PTR("sumsq", x);
    for (i = 0; i < n; i++) s += (double)x[i] * x[i];
    *out = s;
    return PAR_OK;
}

// >>compute-cpu (attention)
/* Float32 flash attention for the CPU compute table (../shared/DESIGN.md 3.7): the
   attention_fwd / attention_bwd / attention_merge entries of par_compute_table,
   contract in >>compute (par_attn_desc). Included after the CPU GEMM
   (par__cpu_sgemm) and before the table that wraps these three functions.

   Forward, per (batch, q head, tile of BQ queries), over tiles of BK keys:
     S = scale * Q_t K_t^T                       GEMM (q/k rows strided by heads*d)
     mask (causal, global positions) only on tiles the causal boundary crosses;
     tiles entirely above it are skipped, so causal costs about half;
     online softmax: m' = max(m, rowmax S), P = exp(S - m'), l = l e^(m-m') + rowsum P,
     acc = acc e^(m-m') + P V_t                  GEMM
   then o = acc / l, lse = m + log l.
   Backward (FlashAttention-2 form), per (batch, q head, q tile): D = rowsum(dO * O);
   per key tile P = exp(scale Q K^T - lse) is recomputed from the GIVEN lse (so a key
   block of a ring step with the globally merged o and lse gets exact, additive
   gradients), then dV += P^T dO, dP = dO V^T, dS = P (dP - D), dQ += scale dS K,
   dK += scale dS^T Q - five GEMMs, accumulated straight into dq, dk, dv.
   Memory: one workspace of O(BQ*BK + BQ*d) floats per call; never S x S.

   Speed. The O(BQ*BK*d) work is in par__cpu_sgemm (run-time ISA dispatch). The
   per-score work (row max, exp + row sum, dS) runs over the FULL tile width BK (a
   constant; padding columns hold -inf scores / zero probabilities) in row kernels
   with our own exp (no libm call): AVX-512 intrinsics picked at run time like the
   GEMM kernels, else portable C written so gcc vectorizes it at plain -O2 (see
   par__attn_exp_sum_c). Without that, exp alone cost about as much as the GEMMs.
   fwd+bwd = 7 GEMM passes over the (unmasked) score tiles against 6 for a naive
   attention that keeps P, so without causality flash is at best ~7/6 of naive;
   with causality it skips the hidden tiles. */

/* Tile sizes (the AVX-512 row kernels need BK % 16 == 0, else the portable ones
   run). Measured (S = 1024 and 2048, d = 64, CPU time, one core, AVX-512 GEMM):
   128 x 256 was 5-15% faster than 64 x 128 or 64 x 256 (fewer, larger GEMM calls
   amortize the packing); the two BQ x BK f32 tiles of the backward (256 KB) stay
   in L2. */
#ifndef PAR__ATTN_BQ
#define PAR__ATTN_BQ 128
#endif
#ifndef PAR__ATTN_BK
#define PAR__ATTN_BK 256
#endif

/* x[j] = exp(x[j] - sub) over the BK entries of a score row, returning their sum;
   exp(-inf) = 0 and NaN stays NaN. exp(t) = 2^n e^r with n = round(t / ln2) and
   r = t - n ln2 in [-ln2/2, ln2/2] (ln2 split in a short high part, so n*ln2_hi is
   exact, and a low part). e^r is its degree-7 Taylor polynomial: truncation
   r^8/8! < 5.3e-9 relative (0.1 ulp), so results are within ~2 ulp of expf. 2^n is
   built in the exponent field. Arguments below -87 give 0 (e^-87 = 1.6e-38 is the
   bottom of the normal range; a softmax never needs subnormals); above 88 clamp
   (softmax arguments are <= 0).
   Two versions: AVX-512 intrinsics (picked at run time, like the GEMM kernels, so a
   plain -O2 build uses the host's full vector width), and portable C that the
   compiler vectorizes with its baseline ISA (SSE2 at plain -O2). */
#define PAR__ATTN_EXP_POLY(P, R)                                                                                \
    P = 1.0f / 5040.0f;                                                                                         \
    P = P * R + 1.0f / 720.0f;                                                                                  \
    P = P * R + 1.0f / 120.0f;                                                                                  \
    P = P * R + 1.0f / 24.0f;                                                                                   \
    P = P * R + 1.0f / 6.0f;                                                                                    \
    P = P * R + 0.5f;                                                                                           \
    P = P * R + 1.0f;                                                                                           \
    P = P * R + 1.0f

/* Portable version, written as passes that gcc vectorizes at plain -O2 (checked
   with -fopt-info-vec): under the default -ftrapping-math it will not if-convert
   a select whose arms hold float arithmetic (the arithmetic could raise a flag
   only on one path), so every select here picks between values already in
   memory or registers, and the arithmetic runs unconditionally in its own pass.
   The int -> float reinterpretation goes through a union of arrays (defined in C;
   gcc and clang document it for C++ too). */
static float par__attn_exp_sum_c(float *x, float sub, int w) {
    union {
        int32_t i[PAR__ATTN_BK];
        float f[PAR__ATTN_BK];
    } two_n;
    float c[PAR__ATTN_BK], p[PAR__ATTN_BK], lanes[16], sum = 0.0f;
    int j, u;
    for (j = 0; j < w; j++) { /* clamp: NaN -> -87 keeps the int conversion defined */
        const float t = x[j] - sub;
        const float lo = t > -87.0f ? t : -87.0f;
        c[j] = lo < 88.0f ? lo : 88.0f;
    }
    for (j = 0; j < w; j++) {
        const float n = (c[j] * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
        float r = c[j] - n * 0.693359375f, q;
        r = r - n * -2.12194440054690583e-4f;
        PAR__ATTN_EXP_POLY(q, r);
        p[j] = q;
        two_n.i[j] = ((int32_t)n + 127) * 8388608; /* exponent field; a multiply, not a shift of a signed value */
    }
    for (j = 0; j < w; j++) p[j] = p[j] * two_n.f[j];
    for (j = 0; j < w; j++) { /* below -87: 0; NaN stays NaN */
        const float t = x[j] - sub;
        c[j] = t;
        x[j] = t < -87.0f ? 0.0f : p[j];
    }
    for (j = 0; j < w; j++) x[j] = c[j] == c[j] ? x[j] : c[j];
    for (u = 0; u < 16; u++) lanes[u] = 0.0f;
    for (j = 0; j + 16 <= w; j += 16)
        for (u = 0; u < 16; u++) lanes[u] += x[j + u];
    for (; j < w; j++) lanes[0] += x[j];
    for (u = 0; u < 16; u++) sum += lanes[u];
    return sum;
}

/* Row max through 16 independent lanes (a fixed inner loop the vectorizer packs). */
static float par__attn_max_c(const float *x, int w) {
    float lanes[16], m;
    int j, u;
    for (u = 0; u < 16; u++) lanes[u] = x[0];
    for (j = 0; j + 16 <= w; j += 16)
        for (u = 0; u < 16; u++) lanes[u] = x[j + u] > lanes[u] ? x[j + u] : lanes[u];
    for (; j < w; j++) lanes[0] = x[j] > lanes[0] ? x[j] : lanes[0];
    m = lanes[0];
    for (u = 1; u < 16; u++) m = lanes[u] > m ? lanes[u] : m;
    return m;
}

/* ds[j] = p[j] * (ds[j] - dsum): dS = P (dP - D) in place over dP. */
static void par__attn_ds_c(float *ds, const float *p, float dsum, int w) {
    int j;
    for (j = 0; j < w; j++) ds[j] = p[j] * (ds[j] - dsum);
}

/* PAR__ATTN_NO_SIMD (private, for tests) keeps only the portable row kernels. */
#if defined(PAR__CPU_X86) && PAR__ATTN_BK % 16 == 0 && !defined(PAR__ATTN_NO_SIMD)
#define PAR__ATTN_AVX512 1
/* Only intrinsics whose gcc definitions avoid _mm512_undefined_*: g++ 12 reports
   those as -Wuninitialized (hence the mask_ forms with all lanes set and the
   scalar final reductions). */
__attribute__((target("avx512f"))) static float par__attn_exp_sum_avx512(float *x, float sub, int w) {
    const __m512 vsub = _mm512_set1_ps(sub), lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.0f);
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f), magic = _mm512_set1_ps(12582912.0f);
    const __m512 ln2hi = _mm512_set1_ps(0.693359375f), ln2lo = _mm512_set1_ps(-2.12194440054690583e-4f);
    const __m512i bias = _mm512_set1_epi32(127), two23 = _mm512_set1_epi32(8388608);
    __m512 acc = _mm512_setzero_ps();
    float lanes[16], sum = 0.0f;
    int j;
    for (j = 0; j < w; j += 16) {
        const __m512 t = _mm512_sub_ps(_mm512_loadu_ps(x + j), vsub);
        /* max(t, lo) gives lo for NaN t (vmaxps returns the second operand) */
        const __m512 c = _mm512_mask_min_ps(hi, 0xFFFF, _mm512_mask_max_ps(lo, 0xFFFF, t, lo), hi);
        /* y + 1.5*2^23 rounds y to an integer held in the low mantissa bits */
        const __m512 yb = _mm512_add_ps(_mm512_mul_ps(c, log2e), magic);
        const __m512 n = _mm512_sub_ps(yb, magic);
        const __m512 r = _mm512_fnmadd_ps(n, ln2lo, _mm512_fnmadd_ps(n, ln2hi, c));
        const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(yb), _mm512_castps_si512(magic));
        const __m512i e = _mm512_mullo_epi32(_mm512_add_epi32(ni, bias), two23);
        __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        p = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
        p = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, lo, _CMP_GE_OQ), p);   /* t < -87: 0 */
        p = _mm512_mask_mov_ps(p, _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q), t); /* NaN stays */
        _mm512_storeu_ps(x + j, p);
        acc = _mm512_add_ps(acc, p);
    }
    _mm512_storeu_ps(lanes, acc);
    for (j = 0; j < 16; j++) sum += lanes[j];
    return sum;
}
__attribute__((target("avx512f"))) static float par__attn_max_avx512(const float *x, int w) {
    __m512 m = _mm512_loadu_ps(x);
    float lanes[16], r;
    int j;
    for (j = 16; j < w; j += 16) m = _mm512_mask_max_ps(m, 0xFFFF, _mm512_loadu_ps(x + j), m);
    _mm512_storeu_ps(lanes, m);
    r = lanes[0];
    for (j = 1; j < 16; j++) r = lanes[j] > r ? lanes[j] : r;
    return r;
}
__attribute__((target("avx512f"))) static void par__attn_ds_avx512(float *ds, const float *p, float dsum, int w) {
    const __m512 d = _mm512_set1_ps(dsum);
    int j;
    for (j = 0; j < w; j += 16)
        _mm512_storeu_ps(ds + j, _mm512_mul_ps(_mm512_loadu_ps(p + j), _mm512_sub_ps(_mm512_loadu_ps(ds + j), d)));
}
#endif

/* 1 when the AVX-512 row kernels can run here (read once per call). */
static int par__attn_isa(void) {
#ifdef PAR__ATTN_AVX512
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
    return 0;
#endif
}
/* The row kernels run over the first w columns of a BK-wide tile row: the key
   tile's valid columns rounded up to 16 (par__attn_width); the GEMMs read only
   the valid ones, so short tiles (a ring step's block, a short sequence) do not
   pay for BK. */
static int par__attn_width(int64_t nk) { return (int)((nk + 15) / 16 * 16); }
static float par__attn_exp_sum(int isa, float *x, float sub, int w) {
#ifdef PAR__ATTN_AVX512
    if (isa) return par__attn_exp_sum_avx512(x, sub, w);
#endif
    (void)isa;
    return par__attn_exp_sum_c(x, sub, w);
}
static float par__attn_max(int isa, const float *x, int w) {
#ifdef PAR__ATTN_AVX512
    if (isa) return par__attn_max_avx512(x, w);
#endif
    (void)isa;
    return par__attn_max_c(x, w);
}
static void par__attn_ds(int isa, float *ds, const float *p, float dsum, int w) {
#ifdef PAR__ATTN_AVX512
    if (isa) {
        par__attn_ds_avx512(ds, p, dsum, w);
        return;
    }
#endif
    (void)isa;
    par__attn_ds_c(ds, p, dsum, w);
}

/* Validation shared by the three entries; `fn` names the table entry. Pointers may
   be NULL only for tensors with zero elements. */
static PAR__MAYBE_UNUSED par_status par__attn_check(const char *fn, const par_attn_desc *d) {
    int64_t limit;
    if (!d) return par__fail(PAR_EINVAL, "%s: desc is NULL", fn);
    if (d->dtype != PAR_F32)
        return par__fail(PAR_EUNSUPPORTED, "%s: dtype %s is not supported by the CPU table (f32 only)", fn,
                         par_dtype_name(d->dtype));
    if (d->batch < 1 || d->q_heads < 1 || d->kv_heads < 1 || d->head_dim < 1)
        return par__fail(PAR_EINVAL, "%s: batch %d, q_heads %d, kv_heads %d and head_dim %d must all be >= 1", fn,
                         d->batch, d->q_heads, d->kv_heads, d->head_dim);
    if (d->q_len < 0 || d->k_len < 0)
        return par__fail(PAR_EINVAL, "%s: q_len %lld and k_len %lld must be >= 0", fn, (long long)d->q_len,
                         (long long)d->k_len);
    if (d->q_heads % d->kv_heads != 0)
        return par__fail(PAR_EINVAL, "%s: q_heads %d is not a multiple of kv_heads %d (GQA needs whole groups)", fn,
                         d->q_heads, d->kv_heads);
    if (!(d->scale == d->scale) || d->scale - d->scale != 0.0f)
        return par__fail(PAR_EINVAL, "%s: scale %g is not finite", fn, (double)d->scale);
    /* element counts and offsets must fit int64 */
    limit = INT64_MAX / d->batch / d->q_heads / d->head_dim;
    if (d->q_len > limit || d->k_len > limit)
        return par__fail(PAR_EINVAL, "%s: q_len %lld or k_len %lld is too large (tensor sizes overflow int64)", fn,
                         (long long)d->q_len, (long long)d->k_len);
    return PAR_OK;
}

#define PAR__ATTN_NEED(ptr, numel, fn, name)                                                              \
    do {                                                                                                  \
        if (!(ptr) && (numel) > 0) return par__fail(PAR_EINVAL, "%s: %s is NULL", fn, name);             \
    } while (0)

/* The checks forward and backward share: the desc, the element counts of q
   (and o, do) and of k (and v), and the pointers both directions take. */
static PAR__MAYBE_UNUSED par_status par__attn_inputs(const char *fn, const par_attn_desc *d, const float *q,
                                                     const float *k, const float *v, const float *o,
                                                     const float *lse, int64_t *nqe, int64_t *nke) {
    par_status st = par__attn_check(fn, d);
    if (st != PAR_OK) return st;
    *nqe = (int64_t)d->batch * d->q_len * d->q_heads * d->head_dim;
    *nke = (int64_t)d->batch * d->k_len * d->kv_heads * d->head_dim;
    PAR__ATTN_NEED(q, *nqe, fn, "q");
    PAR__ATTN_NEED(k, *nke, fn, "k");
    PAR__ATTN_NEED(v, *nke, fn, "v");
    PAR__ATTN_NEED(o, *nqe, fn, "o");
    PAR__ATTN_NEED(lse, *nqe, fn, "lse");
    return PAR_OK;
}

static PAR__MAYBE_UNUSED float par__attn_scale(const par_attn_desc *d) {
    return d->scale != 0.0f ? d->scale : (float)(1.0 / sqrt((double)d->head_dim));
}

static PAR__MAYBE_UNUSED int64_t par__attn_pos(const int64_t *pos, int64_t i) { return pos ? pos[i] : i; }

/* Min and max position over [i0, i0+n). */
static PAR__MAYBE_UNUSED void par__attn_pos_range(const int64_t *pos, int64_t i0, int64_t n, int64_t *lo,
                                                  int64_t *hi) {
    int64_t i, a, b;
    if (!pos) {
        *lo = i0, *hi = i0 + n - 1;
        return;
    }
    a = b = pos[i0];
    for (i = 1; i < n; i++) {
        a = pos[i0 + i] < a ? pos[i0 + i] : a;
        b = pos[i0 + i] > b ? pos[i0 + i] : b;
    }
    *lo = a, *hi = b;
}

/* Score tile s [nq x BK] = scale * Q_t K_t^T, with -inf for padding columns (nk..BK)
   and, when the causal boundary crosses the tile, for keys after the query. Returns 0
   when the whole tile is masked (nothing computed), 1 otherwise. kp is BK int64 of
   scratch. */
static PAR__MAYBE_UNUSED int par__attn_score_tile(const par_allocator *alloc, const par_attn_desc *d, float scale,
                                                  const float *qt, int64_t ldq, const float *kt, int64_t ldk,
                                                  int64_t i0, int64_t nq, int64_t j0, int64_t nk, float *s,
                                                  int64_t *kp) {
    int64_t i, j, qlo = 0, qhi = 0, klo = 0, khi = 0;
    int mask = 0;
    if (d->causal) {
        par__attn_pos_range(d->q_pos, i0, nq, &qlo, &qhi);
        par__attn_pos_range(d->k_pos, j0, nk, &klo, &khi);
        if (klo > qhi) return 0; /* every key after every query */
        mask = khi > qlo;        /* some key after some query */
    }
    par__cpu_sgemm_a(alloc, 0, 1, nq, nk, d->head_dim, scale, qt, ldq, kt, ldk, 0.0f, s, PAR__ATTN_BK);
    if (mask) {
        for (j = 0; j < nk; j++) kp[j] = par__attn_pos(d->k_pos, j0 + j);
        for (; j < PAR__ATTN_BK; j++) kp[j] = INT64_MAX;
        for (i = 0; i < nq; i++) {
            const int64_t qp = par__attn_pos(d->q_pos, i0 + i);
            float *si = s + i * PAR__ATTN_BK;
            for (j = 0; j < PAR__ATTN_BK; j++) si[j] = kp[j] > qp ? -INFINITY : si[j];
        }
    } else if (nk < PAR__ATTN_BK) {
        for (i = 0; i < nq; i++)
            for (j = nk; j < PAR__ATTN_BK; j++) s[i * PAR__ATTN_BK + j] = -INFINITY;
    }
    return 1;
}

static PAR__MAYBE_UNUSED par_status par__cpu_attention_fwd(const par_allocator *alloc, const par_attn_desc *d,
                                                           const float *q, const float *k, const float *v, float *o,
                                                           float *lse) {
    static const char fn[] = "attention_fwd";
    int64_t nqe = 0, nke = 0, b, i0, j0, i;
    int h, c, dim, group;
    float scale, *work, *s, *acc, *m, *l;
    int64_t *kp;
    const int isa = par__attn_isa();
    size_t bytes;
    par_status st = par__attn_inputs(fn, d, q, k, v, o, lse, &nqe, &nke);
    if (st != PAR_OK) return st;
    dim = d->head_dim;
    if (nqe == 0) return PAR_OK;
    if (nke == 0) { /* no keys: every row sees nothing (k and v may be NULL) */
        for (i = 0; i < nqe; i++) o[i] = 0.0f;
        for (i = 0; i < (int64_t)d->batch * d->q_heads * d->q_len; i++) lse[i] = -INFINITY;
        return PAR_OK;
    }
    group = d->q_heads / d->kv_heads;
    scale = par__attn_scale(d);
    bytes = sizeof(int64_t) * PAR__ATTN_BK +
            sizeof(float) * ((size_t)PAR__ATTN_BQ * PAR__ATTN_BK + (size_t)PAR__ATTN_BQ * dim + 2 * PAR__ATTN_BQ);
    work = (float *)par__alloc_malloc(alloc, bytes);
    if (!work) return par__fail(PAR_ENOMEM, "%s: cannot allocate %zu bytes of workspace", fn, bytes);
    kp = (int64_t *)(void *)work; /* int64 first: malloc alignment holds for it */
    s = work + 2 * PAR__ATTN_BK;
    acc = s + (size_t)PAR__ATTN_BQ * PAR__ATTN_BK;
    m = acc + (size_t)PAR__ATTN_BQ * dim;
    l = m + PAR__ATTN_BQ;
    {
        const int64_t ldq = (int64_t)d->q_heads * dim, ldk = (int64_t)d->kv_heads * dim;
        for (b = 0; b < d->batch; b++)
            for (h = 0; h < d->q_heads; h++) {
                const int g = h / group;
                const float *qh = q + (b * d->q_len * d->q_heads + h) * (int64_t)dim;
                const float *kh = k + (b * d->k_len * d->kv_heads + g) * (int64_t)dim;
                const float *vh = v + (b * d->k_len * d->kv_heads + g) * (int64_t)dim;
                float *oh = o + (b * d->q_len * d->q_heads + h) * (int64_t)dim;
                float *lh = lse + (b * d->q_heads + h) * d->q_len;
                for (i0 = 0; i0 < d->q_len; i0 += PAR__ATTN_BQ) {
                    const int64_t nq = d->q_len - i0 < PAR__ATTN_BQ ? d->q_len - i0 : PAR__ATTN_BQ;
                    for (i = 0; i < nq; i++) m[i] = -INFINITY, l[i] = 0.0f;
                    for (i = 0; i < nq * dim; i++) acc[i] = 0.0f;
                    for (j0 = 0; j0 < d->k_len; j0 += PAR__ATTN_BK) {
                        const int64_t nk = d->k_len - j0 < PAR__ATTN_BK ? d->k_len - j0 : PAR__ATTN_BK;
                        const int w = par__attn_width(nk);
                        if (!par__attn_score_tile(alloc, d, scale, qh + i0 * ldq, ldq, kh + j0 * ldk, ldk, i0, nq,
                                                  j0, nk, s, kp))
                            continue;
                        for (i = 0; i < nq; i++) {
                            float *si = s + i * PAR__ATTN_BK, *ai = acc + i * dim;
                            const float mt = par__attn_max(isa, si, w), mn = mt > m[i] ? mt : m[i];
                            float alpha;
                            if (mn == -INFINITY) { /* nothing visible to this row yet: P row = 0 */
                                for (c = 0; c < w; c++) si[c] = 0.0f;
                                continue;
                            }
                            alpha = m[i] == -INFINITY ? 0.0f : expf(m[i] - mn);
                            l[i] = l[i] * alpha + par__attn_exp_sum(isa, si, mn, w);
                            m[i] = mn;
                            if (alpha != 1.0f)
                                for (c = 0; c < dim; c++) ai[c] *= alpha;
                        }
                        par__cpu_sgemm_a(alloc, 0, 0, nq, dim, nk, 1.0f, s, PAR__ATTN_BK, vh + j0 * ldk, ldk, 1.0f,
                                         acc, dim);
                    }
                    for (i = 0; i < nq; i++) {
                        float *oi = oh + (i0 + i) * ldq;
                        const float *ai = acc + i * dim;
                        if (l[i] > 0.0f) {
                            const float inv = 1.0f / l[i];
                            for (c = 0; c < dim; c++) oi[c] = ai[c] * inv;
                            lh[i0 + i] = m[i] + logf(l[i]);
                        } else { /* no visible key */
                            for (c = 0; c < dim; c++) oi[c] = 0.0f;
                            lh[i0 + i] = -INFINITY;
                        }
                    }
                }
            }
    }
    par__alloc_free(alloc, work);
    return PAR_OK;
}

static PAR__MAYBE_UNUSED par_status par__cpu_attention_bwd(const par_allocator *alloc, const par_attn_desc *d,
                                                           const float *q, const float *k, const float *v,
                                                           const float *o, const float *lse, const float *do_,
                                                           float *dq, float *dk, float *dv, int accumulate) {
    static const char fn[] = "attention_bwd";
    int64_t nqe = 0, nke = 0, b, i0, j0, i, j;
    int h, c, dim, group;
    float scale, *work, *p, *ds, *drow;
    int64_t *kp;
    const int isa = par__attn_isa();
    size_t bytes;
    par_status st = par__attn_inputs(fn, d, q, k, v, o, lse, &nqe, &nke);
    if (st != PAR_OK) return st;
    dim = d->head_dim;
    PAR__ATTN_NEED(do_, nqe, fn, "do_");
    PAR__ATTN_NEED(dq, nqe, fn, "dq");
    PAR__ATTN_NEED(dk, nke, fn, "dk");
    PAR__ATTN_NEED(dv, nke, fn, "dv");
    if (!accumulate) {
        for (i = 0; i < nqe; i++) dq[i] = 0.0f;
        for (i = 0; i < nke; i++) dk[i] = 0.0f, dv[i] = 0.0f;
    }
    if (nqe == 0 || nke == 0) return PAR_OK;
    group = d->q_heads / d->kv_heads;
    scale = par__attn_scale(d);
    bytes = sizeof(int64_t) * PAR__ATTN_BK + sizeof(float) * (2 * (size_t)PAR__ATTN_BQ * PAR__ATTN_BK + PAR__ATTN_BQ);
    work = (float *)par__alloc_malloc(alloc, bytes);
    if (!work) return par__fail(PAR_ENOMEM, "%s: cannot allocate %zu bytes of workspace", fn, bytes);
    kp = (int64_t *)(void *)work;
    p = work + 2 * PAR__ATTN_BK;
    ds = p + (size_t)PAR__ATTN_BQ * PAR__ATTN_BK;
    drow = ds + (size_t)PAR__ATTN_BQ * PAR__ATTN_BK;
    {
        const int64_t ldq = (int64_t)d->q_heads * dim, ldk = (int64_t)d->kv_heads * dim;
        for (b = 0; b < d->batch; b++)
            for (h = 0; h < d->q_heads; h++) {
                const int g = h / group;
                const int64_t qoff = (b * d->q_len * d->q_heads + h) * (int64_t)dim;
                const int64_t koff = (b * d->k_len * d->kv_heads + g) * (int64_t)dim;
                const float *lh = lse + (b * d->q_heads + h) * d->q_len;
                for (i0 = 0; i0 < d->q_len; i0 += PAR__ATTN_BQ) {
                    const int64_t nq = d->q_len - i0 < PAR__ATTN_BQ ? d->q_len - i0 : PAR__ATTN_BQ;
                    const float *qt = q + qoff + i0 * ldq, *dot = do_ + qoff + i0 * ldq;
                    float *dqt = dq + qoff + i0 * ldq;
                    for (i = 0; i < nq; i++) { /* D = rowsum(dO * O), in double: it is subtracted from dP */
                        const float *oi = o + qoff + (i0 + i) * ldq, *doi = dot + i * ldq;
                        double sum = 0.0;
                        for (c = 0; c < dim; c++) sum += (double)doi[c] * oi[c];
                        drow[i] = (float)sum;
                    }
                    for (j0 = 0; j0 < d->k_len; j0 += PAR__ATTN_BK) {
                        const int64_t nk = d->k_len - j0 < PAR__ATTN_BK ? d->k_len - j0 : PAR__ATTN_BK;
                        const float *kt = k + koff + j0 * ldk, *vt = v + koff + j0 * ldk;
                        const int w = par__attn_width(nk);
                        if (!par__attn_score_tile(alloc, d, scale, qt, ldq, kt, ldk, i0, nq, j0, nk, p, kp)) continue;
                        for (i = 0; i < nq; i++) { /* P = exp(S - lse); a row with no visible key has P = 0 */
                            float *pi = p + i * PAR__ATTN_BK;
                            if (lh[i0 + i] == -INFINITY)
                                for (j = 0; j < w; j++) pi[j] = 0.0f;
                            else
                                (void)par__attn_exp_sum(isa, pi, lh[i0 + i], w);
                        }
                        /* dV_t += P^T dO_t */
                        par__cpu_sgemm_a(alloc, 1, 0, nk, dim, nq, 1.0f, p, PAR__ATTN_BK, dot, ldq, 1.0f,
                                         dv + koff + j0 * ldk, ldk);
                        /* dP = dO_t V_t^T, then dS = P (dP - D) in place (padding columns: P = 0) */
                        par__cpu_sgemm_a(alloc, 0, 1, nq, nk, dim, 1.0f, dot, ldq, vt, ldk, 0.0f, ds, PAR__ATTN_BK);
                        for (i = 0; i < nq; i++) {
                            const float *pi = p + i * PAR__ATTN_BK;
                            float *dsi = ds + i * PAR__ATTN_BK;
                            /* padding columns are never read by the GEMMs below; zeroed so
                               the row kernel never computes on uninitialized memory */
                            for (j = nk; j < w; j++) dsi[j] = 0.0f;
                            par__attn_ds(isa, dsi, pi, drow[i], w);
                        }
                        /* dQ_t += scale dS K_t;  dK_t += scale dS^T Q_t */
                        par__cpu_sgemm_a(alloc, 0, 0, nq, dim, nk, scale, ds, PAR__ATTN_BK, kt, ldk, 1.0f, dqt, ldq);
                        par__cpu_sgemm_a(alloc, 1, 0, nk, dim, nq, scale, ds, PAR__ATTN_BK, qt, ldq, 1.0f,
                                         dk + koff + j0 * ldk, ldk);
                    }
                }
            }
    }
    par__alloc_free(alloc, work);
    return PAR_OK;
}

/* (o, lse) <- merge of (o, lse) and (o_b, lse_b), both shaped as o and lse of desc:
   L' = max(L, Lb) + log1p(exp(-|L - Lb|)), O' = e^(L-L') O + e^(Lb-L') Ob. A row
   whose lse_b is -inf (the block saw no key) is left alone; a row whose lse is -inf
   takes (o_b, lse_b). So starting from o = 0, lse = -inf and merging every block gives
   attention over all keys. */
static PAR__MAYBE_UNUSED par_status par__cpu_attention_merge(const par_attn_desc *d, float *o, float *lse,
                                                             const float *o_b, const float *lse_b) {
    static const char fn[] = "attention_merge";
    par_status st = par__attn_check(fn, d);
    int64_t nqe, b, i;
    int h, c, dim;
    if (st != PAR_OK) return st;
    dim = d->head_dim;
    nqe = (int64_t)d->batch * d->q_len * d->q_heads * dim;
    PAR__ATTN_NEED(o, nqe, fn, "o");
    PAR__ATTN_NEED(lse, nqe, fn, "lse");
    PAR__ATTN_NEED(o_b, nqe, fn, "o_b");
    PAR__ATTN_NEED(lse_b, nqe, fn, "lse_b");
    for (b = 0; b < d->batch; b++)
        for (h = 0; h < d->q_heads; h++)
            for (i = 0; i < d->q_len; i++) {
                const int64_t li = (b * d->q_heads + h) * d->q_len + i;
                const int64_t oi = ((b * d->q_len + i) * d->q_heads + h) * (int64_t)dim;
                const float la = lse[li], lb = lse_b[li];
                float *oa = o + oi;
                const float *ob = o_b + oi;
                if (lb == -INFINITY) continue;
                if (la == -INFINITY) {
                    for (c = 0; c < dim; c++) oa[c] = ob[c];
                    lse[li] = lb;
                } else {
                    const float mx = la > lb ? la : lb;
                    const float ln = mx + log1pf(expf(-fabsf(la - lb)));
                    const float wa = expf(la - ln), wb = expf(lb - ln);
                    for (c = 0; c < dim; c++) oa[c] = wa * oa[c] + wb * ob[c];
                    lse[li] = ln;
                }
            }
    return PAR_OK;
}

#undef PAR__ATTN_NEED

#endif /* PARALLEL_NO_CPU_KERNELS */

// >>compute-cpu (the table)
/* par_compute_cpu: the kernels above behind a par_compute_table.

   State per table (one rank): memory accounting, the GEMM micro-kernel chosen
   for this CPU, one packing workspace per kernel thread, and, with threads > 1,
   a pool of threads - 1 persistent pthreads (the calling thread is worker 0).
   A table is used by one thread at a time (its rank), like a device stream;
   its kernels may fan out over the pool internally.

   Memory: every allocation carries a 64-byte header in front of the returned
   (64-byte aligned, zero-filled) pointer with its size and category, so free
   needs no lookup and the per-category current/peak counters stay exact. The
   table's own GEMM packing space counts as PAR_MEM_WORKSPACE. */

#define PAR__CPU_MAGIC 0x70617263707561ull /* "parcpua" */
#define PAR__CPU_MAX_THREADS 256

typedef struct par__cpu_hdr {
    void *raw;      /* what the table's allocator returned */
    uint64_t bytes; /* requested size */
    uint64_t magic; /* PAR__CPU_MAGIC while live; 0 once freed */
    int category;
} par__cpu_hdr;

typedef struct par__cpu_state par__cpu_state;
typedef void (*par__cpu_task_fn)(void *arg, int worker);

#ifdef PAR__CPU_THREADS
typedef struct par__cpu_worker {
    par__cpu_state *state;
    int index; /* 1..threads-1 */
} par__cpu_worker;
#endif

struct par__cpu_state {
    par_allocator alloc; /* the desc's: every host byte of the table, buffers included */
    int threads;
    par_mem_report mem;
#ifndef PARALLEL_NO_CPU_KERNELS
    const par__cpu_gemm_isa *isa;
    void *ws_raw[PAR__CPU_MAX_THREADS]; /* packing space per worker */
    int64_t ws_floats[PAR__CPU_MAX_THREADS];
#endif
#ifdef PAR__CPU_THREADS
    pthread_t *tids;
    par__cpu_worker *workers;
    int started; /* pool threads running */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t generation; /* bumped per job; workers run each generation once */
    int pending, stop;
    par__cpu_task_fn fn;
    void *arg;
#endif
};

static void par__cpu_mem_add(par__cpu_state *s, int category, int64_t bytes) {
    s->mem.current[category] += bytes;
    s->mem.current_total += bytes;
    if (s->mem.current[category] > s->mem.peak[category]) s->mem.peak[category] = s->mem.current[category];
    if (s->mem.current_total > s->mem.peak_total) s->mem.peak_total = s->mem.current_total;
}

/* ------------------------------------------------------------ thread pool */

#ifdef PAR__CPU_THREADS
static void *par__cpu_worker_main(void *p) {
    par__cpu_worker *w = (par__cpu_worker *)p;
    par__cpu_state *s = w->state;
    uint64_t seen = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        par__cpu_task_fn fn;
        void *arg;
        while (!s->stop && s->generation == seen) pthread_cond_wait(&s->go, &s->mu);
        if (s->stop) break;
        seen = s->generation;
        fn = s->fn;
        arg = s->arg;
        pthread_mutex_unlock(&s->mu);
        fn(arg, w->index);
        par__cpu_clean_upper();
        pthread_mutex_lock(&s->mu);
        if (--s->pending == 0) pthread_cond_signal(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void par__cpu_pool_stop(par__cpu_state *s) {
    int i;
    if (!s->tids) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->go);
    pthread_mutex_unlock(&s->mu);
    for (i = 0; i < s->started; i++) pthread_join(s->tids[i], NULL);
    pthread_cond_destroy(&s->go);
    pthread_cond_destroy(&s->done);
    pthread_mutex_destroy(&s->mu);
    par__alloc_free(&s->alloc, s->tids);
    par__alloc_free(&s->alloc, s->workers);
    s->tids = NULL;
    s->workers = NULL;
    s->started = 0;
}

static par_status par__cpu_pool_start(par__cpu_state *s) {
    int i, n = s->threads - 1;
    s->tids = (pthread_t *)par__alloc_malloc(&s->alloc, sizeof(pthread_t) * (size_t)n);
    s->workers = (par__cpu_worker *)par__alloc_malloc(&s->alloc, sizeof(par__cpu_worker) * (size_t)n);
    if (!s->tids || !s->workers) {
        par__alloc_free(&s->alloc, s->tids);
        par__alloc_free(&s->alloc, s->workers);
        s->tids = NULL;
        s->workers = NULL;
        return par__fail(PAR_ENOMEM, "par_compute_cpu: cannot allocate the pool of %d threads", s->threads);
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->go, NULL);
    pthread_cond_init(&s->done, NULL);
    for (i = 0; i < n; i++) {
        s->workers[i].state = s;
        s->workers[i].index = i + 1;
        if (pthread_create(&s->tids[i], NULL, par__cpu_worker_main, &s->workers[i]) != 0) {
            par__cpu_pool_stop(s);
            return par__fail(PAR_ENOMEM, "par_compute_cpu: cannot start kernel thread %d of %d", i + 2, s->threads);
        }
        s->started = i + 1;
    }
    return PAR_OK;
}
#endif

#ifndef PARALLEL_NO_CPU_KERNELS
/* Run fn(arg, w) for every worker w in [0, threads) and wait for all; the
   calling thread is worker 0. */
static void par__cpu_parallel(par__cpu_state *s, par__cpu_task_fn fn, void *arg) {
    (void)s;
#ifdef PAR__CPU_THREADS
    if (s->threads > 1) {
        pthread_mutex_lock(&s->mu);
        s->fn = fn;
        s->arg = arg;
        s->pending = s->threads - 1;
        s->generation++;
        pthread_cond_broadcast(&s->go);
        pthread_mutex_unlock(&s->mu);
        fn(arg, 0);
        par__cpu_clean_upper();
        pthread_mutex_lock(&s->mu);
        while (s->pending > 0) pthread_cond_wait(&s->done, &s->mu);
        pthread_mutex_unlock(&s->mu);
        return;
    }
#endif
    fn(arg, 0);
    par__cpu_clean_upper();
}
#endif

/* ------------------------------------------------------------------ memory */

static par_status par__cpu_t_alloc(void *user, size_t bytes, par_mem_category category, void **ptr) {
    par__cpu_state *s = (par__cpu_state *)user;
    par__cpu_hdr *h;
    void *raw;
    char *p;
    if (!ptr) return par__fail(PAR_EINVAL, "alloc: ptr is NULL");
    *ptr = NULL;
    if ((unsigned)category >= PAR_MEM_CATEGORY_COUNT)
        return par__fail(PAR_EINVAL, "alloc: category is %d (must be 0..%d)", (int)category,
                         PAR_MEM_CATEGORY_COUNT - 1);
    if (bytes > (size_t)INT64_MAX - 256 || bytes > SIZE_MAX - 256)
        return par__fail(PAR_ENOMEM, "alloc: %zu bytes is too large", bytes);
    raw = par__alloc_malloc(&s->alloc, bytes + 128);
    if (!raw)
        return par__fail(PAR_ENOMEM, "alloc: out of memory allocating %zu bytes of %s", bytes,
                         par_mem_category_name(category));
    p = (char *)par__cpu_align64((char *)raw + sizeof(par__cpu_hdr));
    h = (par__cpu_hdr *)(p - sizeof(par__cpu_hdr));
    h->raw = raw;
    h->bytes = (uint64_t)bytes;
    h->magic = PAR__CPU_MAGIC;
    h->category = (int)category;
    memset(p, 0, bytes);
    par__cpu_mem_add(s, (int)category, (int64_t)bytes);
    *ptr = p;
    return PAR_OK;
}

static void par__cpu_t_free(void *user, void *ptr) {
    par__cpu_state *s = (par__cpu_state *)user;
    par__cpu_hdr *h;
    if (!ptr) return;
    h = (par__cpu_hdr *)((char *)ptr - sizeof(par__cpu_hdr));
    if (h->magic != PAR__CPU_MAGIC || (unsigned)h->category >= PAR_MEM_CATEGORY_COUNT) {
        /* Not ours or freed twice: leave it (freeing would corrupt the heap). */
        par__fail(PAR_EINVAL, "free: %p was not allocated by this cpu table or was already freed", ptr);
        return;
    }
    h->magic = 0;
    par__cpu_mem_add(s, h->category, -(int64_t)h->bytes);
    par__alloc_free(&s->alloc, h->raw);
}

static par_status par__cpu_t_memcpy(void *user, void *dst, const void *src, size_t bytes, par_copy_kind kind) {
    (void)user;
    if ((unsigned)kind > PAR_COPY_DEVICE_TO_DEVICE)
        return par__fail(PAR_EINVAL, "memcpy: kind is %d (must be a par_copy_kind)", (int)kind);
    if (bytes == 0) return PAR_OK;
    PAR__CPU_PTR("memcpy", dst);
    PAR__CPU_PTR("memcpy", src);
    memmove(dst, src, bytes); /* every kind is host memory here; overlap is harmless */
    return PAR_OK;
}

static par_status par__cpu_t_memset(void *user, void *dst, int value, size_t bytes) {
    (void)user;
    if (bytes == 0) return PAR_OK;
    PAR__CPU_PTR("memset", dst);
    memset(dst, value, bytes);
    return PAR_OK;
}

static par_status par__cpu_t_memcpy_2d(void *user, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                                       size_t width, size_t height) {
    size_t r;
    (void)user;
    if (width == 0 || height == 0) return PAR_OK;
    PAR__CPU_PTR("memcpy_2d", dst);
    PAR__CPU_PTR("memcpy_2d", src);
    if (height > 1 && dst_pitch < width)
        return par__fail(PAR_EINVAL, "memcpy_2d: dst_pitch %zu is smaller than width %zu", dst_pitch, width);
    if (height > 1 && src_pitch < width)
        return par__fail(PAR_EINVAL, "memcpy_2d: src_pitch %zu is smaller than width %zu", src_pitch, width);
    for (r = 0; r < height; r++) memmove((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, width);
    return PAR_OK;
}

static par_status par__cpu_t_memory_report(void *user, par_mem_report *report) {
    PAR__CPU_PTR("memory_report", report);
    *report = ((par__cpu_state *)user)->mem;
    return PAR_OK;
}

#ifndef PARALLEL_NO_CPU_KERNELS
/* GEMM packing space is the CPU table's only kept scratch: per worker thread,
   the blocks of the largest problem, which only grow with m, n and k (attention
   tiles are allocated and freed within each call). CBLAS packs in its own memory. */
static par_status par__cpu_t_scratch_bound(void *user, const par_scratch_query *q, size_t *bytes) {
    par__cpu_state *s = (par__cpu_state *)user;
    PAR__CPU_PTR("scratch_bound", q);
    PAR__CPU_PTR("scratch_bound", bytes);
    *bytes = 0;
    PAR__CPU_NEED(q->gemm_m >= 0 && q->gemm_n >= 0 && q->gemm_k >= 0 && q->attn_rows >= 0,
                  "scratch_bound: gemm m %lld, n %lld, k %lld and attn_rows %lld must be >= 0", (long long)q->gemm_m,
                  (long long)q->gemm_n, (long long)q->gemm_k, (long long)q->attn_rows);
#ifndef PARALLEL_WITH_CBLAS
    if (q->gemm_m > 0 && q->gemm_n > 0 && q->gemm_k > 0)
        *bytes = (size_t)s->threads *
                 (size_t)par__cpu_blocks_floats(par__cpu_gemm_blocks(s->isa, q->gemm_m, q->gemm_n, q->gemm_k, 0)) *
                 sizeof(float);
#else
    (void)s;
#endif
    return PAR_OK;
}
#endif

static par_status par__cpu_t_synchronize(void *user) {
    (void)user; /* kernels run synchronously */
    return PAR_OK;
}

#ifndef PARALLEL_NO_CPU_KERNELS /* the kernel hooks, down to the table */

/* -------------------------------------------------------------------- gemm */

/* Grow worker w's packing space to `floats` (contents are scratch). */
static par_status par__cpu_ws_reserve(par__cpu_state *s, int w, int64_t floats) {
    void *raw;
    if (s->ws_floats[w] >= floats) return PAR_OK;
    raw = par__alloc_malloc(&s->alloc, (size_t)floats * sizeof(float) + 64);
    if (!raw)
        return par__fail(PAR_ENOMEM, "gemm: out of memory allocating %lld bytes of packing space",
                         (long long)floats * 4);
    if (s->ws_raw[w]) {
        par__alloc_free(&s->alloc, s->ws_raw[w]);
        par__cpu_mem_add(s, PAR_MEM_WORKSPACE, -s->ws_floats[w] * (int64_t)sizeof(float));
    }
    s->ws_raw[w] = raw;
    s->ws_floats[w] = floats;
    par__cpu_mem_add(s, PAR_MEM_WORKSPACE, floats * (int64_t)sizeof(float));
    return PAR_OK;
}

typedef struct par__cpu_gemm_job {
    par__cpu_state *s;
    par_gemm_desc d; /* normalized: tight lds filled in, batch >= 1 */
    const float *a, *b;
    float *c;
    int workers;     /* workers taking part */
    int parts;       /* slices per problem (1 = whole problems per worker) */
    int split_m;     /* slices are row blocks (else column blocks) */
    int64_t step;    /* rows or columns per slice (a multiple of MR or NR) */
    par__cpu_blocks bl;
} par__cpu_gemm_job;

static void par__cpu_gemm_task(void *arg, int w) {
    const par__cpu_gemm_job *j = (const par__cpu_gemm_job *)arg;
    const par_gemm_desc *d = &j->d;
    const int T = j->workers;
    float *ws = (float *)par__cpu_align64(j->s->ws_raw[w]);
    int64_t bi;
    if (j->parts == 1) { /* whole problems, round robin */
        for (bi = w; bi < d->batch; bi += T)
            par__cpu_gemm_blocked(j->s->isa, j->bl, d->transa, d->transb, d->m, d->n, d->k, d->alpha,
                                  j->a + bi * d->stride_a, d->lda, j->b + bi * d->stride_b, d->ldb, d->beta,
                                  j->c + bi * d->stride_c, d->ldc, ws);
        return;
    }
    for (bi = 0; bi < d->batch; bi++) {
        const float *A = j->a + bi * d->stride_a, *B = j->b + bi * d->stride_b;
        float *C = j->c + bi * d->stride_c;
        const int64_t lo = (int64_t)w * j->step, total = j->split_m ? d->m : d->n;
        const int64_t len = lo >= total ? 0 : (total - lo < j->step ? total - lo : j->step);
        if (len <= 0) continue;
        if (j->split_m) /* rows lo.. of op(A) and C */
            par__cpu_gemm_blocked(j->s->isa, j->bl, d->transa, d->transb, len, d->n, d->k, d->alpha,
                                  d->transa ? A + lo : A + lo * d->lda, d->lda, B, d->ldb, d->beta, C + lo * d->ldc,
                                  d->ldc, ws);
        else /* columns lo.. of op(B) and C */
            par__cpu_gemm_blocked(j->s->isa, j->bl, d->transa, d->transb, d->m, len, d->k, d->alpha, A, d->lda,
                                  d->transb ? B + lo * d->ldb : B + lo, d->ldb, d->beta, C + lo, d->ldc, ws);
    }
}

/* Below this many multiply-adds a GEMM stays on the calling thread: waking the
   pool costs tens of microseconds (more on a busy machine), ~2^23 flops here. */
#define PAR__CPU_GEMM_MT_MIN ((int64_t)1 << 23)

static par_status par__cpu_t_gemm(void *user, const par_gemm_desc *desc, const void *a, const void *b, void *c) {
    par__cpu_state *s = (par__cpu_state *)user;
    par__cpu_gemm_job job;
    par_gemm_desc *d = &job.d;
    int64_t need_a, need_b, work;
    int w, T;
    if (!desc) return par__fail(PAR_EINVAL, "gemm: desc is NULL");
    *d = *desc;
    if (d->a_type != PAR_F32)
        return par__fail(PAR_EUNSUPPORTED, "gemm: a_type %s is not supported by the cpu table (f32 only)",
                         par_dtype_name(d->a_type));
    if (d->c_type != PAR_F32)
        return par__fail(PAR_EUNSUPPORTED, "gemm: c_type %s is not supported by the cpu table (f32 only)",
                         par_dtype_name(d->c_type));
    PAR__CPU_NEED(d->transa == 0 || d->transa == 1, "gemm: transa is %d (must be 0 or 1)", d->transa);
    PAR__CPU_NEED(d->transb == 0 || d->transb == 1, "gemm: transb is %d (must be 0 or 1)", d->transb);
    PAR__CPU_NEED(d->m >= 0, "gemm: m is %lld (must be >= 0)", (long long)d->m);
    PAR__CPU_NEED(d->n >= 0, "gemm: n is %lld (must be >= 0)", (long long)d->n);
    PAR__CPU_NEED(d->k >= 0, "gemm: k is %lld (must be >= 0)", (long long)d->k);
    PAR__CPU_NEED(d->batch >= 0, "gemm: batch is %lld (must be >= 0)", (long long)d->batch);
    if (d->batch == 0) d->batch = 1;
    /* stored row lengths: A is m x k or k x m, B is k x n or n x k */
    need_a = d->transa ? d->m : d->k;
    need_b = d->transb ? d->k : d->n;
    if (d->lda == 0) d->lda = need_a;
    if (d->ldb == 0) d->ldb = need_b;
    if (d->ldc == 0) d->ldc = d->n;
    PAR__CPU_NEED(d->lda >= need_a && d->lda >= 0, "gemm: lda is %lld, less than the %lld columns of A as stored "
                  "(transa = %d)", (long long)d->lda, (long long)need_a, d->transa);
    PAR__CPU_NEED(d->ldb >= need_b && d->ldb >= 0, "gemm: ldb is %lld, less than the %lld columns of B as stored "
                  "(transb = %d)", (long long)d->ldb, (long long)need_b, d->transb);
    PAR__CPU_NEED(d->ldc >= d->n && d->ldc >= 0, "gemm: ldc is %lld, less than n = %lld", (long long)d->ldc,
                  (long long)d->n);
    PAR__CPU_NEED(d->stride_a >= 0, "gemm: stride_a is %lld (must be >= 0)", (long long)d->stride_a);
    PAR__CPU_NEED(d->stride_b >= 0, "gemm: stride_b is %lld (must be >= 0)", (long long)d->stride_b);
    PAR__CPU_NEED(d->stride_c >= 0, "gemm: stride_c is %lld (must be >= 0)", (long long)d->stride_c);
    if (d->m == 0 || d->n == 0) return PAR_OK;
    if (d->batch > 1)
        PAR__CPU_NEED(d->stride_c >= (d->m - 1) * d->ldc + d->n,
                      "gemm: stride_c is %lld, so the C matrices of the batch overlap (need >= %lld)",
                      (long long)d->stride_c, (long long)((d->m - 1) * d->ldc + d->n));
    PAR__CPU_PTR("gemm", c);
    if (d->k > 0 && d->alpha != 0.0f) {
        PAR__CPU_PTR("gemm", a);
        PAR__CPU_PTR("gemm", b);
    }
    job.s = s;
    job.a = (const float *)a;
    job.b = (const float *)b;
    job.c = (float *)c;
#ifdef PARALLEL_WITH_CBLAS
    {
        int64_t bi;
        PAR__CPU_NEED(d->m <= INT_MAX && d->n <= INT_MAX && d->k <= INT_MAX && d->lda <= INT_MAX &&
                          d->ldb <= INT_MAX && d->ldc <= INT_MAX,
                      "gemm: a size or leading dim exceeds the int range of CBLAS");
        for (bi = 0; bi < d->batch; bi++)
            par__cpu_sgemm(d->transa, d->transb, d->m, d->n, d->k, d->alpha, job.a + bi * d->stride_a, d->lda,
                           job.b + bi * d->stride_b, d->ldb, d->beta, job.c + bi * d->stride_c, d->ldc);
        return PAR_OK;
    }
#endif
    if (d->k == 0 || d->alpha == 0.0f) {
        int64_t bi;
        for (bi = 0; bi < d->batch; bi++) par__cpu_scale_c(d->m, d->n, d->beta, job.c + bi * d->stride_c, d->ldc);
        return PAR_OK;
    }
    /* Work split: whole problems per worker when the batch covers the workers,
       else every problem cut into T row (or column) slices of whole tiles; small
       GEMMs stay on the calling thread. */
    T = s->threads;
    work = d->m * d->n * d->k; /* per problem; cannot overflow for buffers that exist */
    job.parts = 1;
    job.split_m = 1;
    job.step = 0;
    if (T > 1 && d->batch >= T && work * d->batch >= PAR__CPU_GEMM_MT_MIN) {
        job.bl = par__cpu_gemm_blocks(s->isa, d->m, d->n, d->k, 0);
    } else if (T > 1 && work >= PAR__CPU_GEMM_MT_MIN) {
        job.split_m = d->m >= d->n;
        job.step = job.split_m ? par__cpu_round_up((d->m + T - 1) / T, s->isa->mr)
                               : par__cpu_round_up((d->n + T - 1) / T, s->isa->nr);
        job.parts = T;
        job.bl = par__cpu_gemm_blocks(s->isa, job.split_m ? job.step : d->m, job.split_m ? d->n : job.step, d->k,
                                      0);
    } else {
        T = 1;
        job.bl = par__cpu_gemm_blocks(s->isa, d->m, d->n, d->k, 0);
    }
    job.workers = T;
    for (w = 0; w < T; w++) {
        par_status st = par__cpu_ws_reserve(s, w, par__cpu_blocks_floats(job.bl));
        if (st != PAR_OK) return st;
    }
    if (T == 1) {
        par__cpu_gemm_task(&job, 0); /* with parts = 1 worker 0 takes every problem */
        par__cpu_clean_upper();
        return PAR_OK;
    }
    par__cpu_parallel(s, par__cpu_gemm_task, &job);
    return PAR_OK;
}

/* --------------------------------------------------------------- attention */

static par_status par__cpu_attn_dtype(const char *fn, const par_attn_desc *d) {
    if (!d) return par__fail(PAR_EINVAL, "%s: desc is NULL", fn);
    if (d->dtype != PAR_F32)
        return par__fail(PAR_EUNSUPPORTED, "%s: dtype %s is not supported by the cpu table (f32 only)", fn,
                         par_dtype_name(d->dtype));
    return PAR_OK;
}

/* Attention over several sequences fans out over the pool by batch: each
   worker runs the single-threaded kernel on its own sequences (in backward a
   sequence's dK/dV are its own too, so workers never write the same rows). */
typedef struct par__cpu_attn_job {
    const par__cpu_state *s;
    const par_attn_desc *d;
    const float *q, *k, *v, *o, *do_;
    float *out, *lse, *dq, *dk, *dv;
    int backward, accumulate, parts;
    par_status st[PAR__CPU_MAX_THREADS];
} par__cpu_attn_job;

static void par__cpu_attn_task(void *arg, int worker) {
    par__cpu_attn_job *j = (par__cpu_attn_job *)arg;
    const par_attn_desc *d = j->d;
    const int64_t b0 = (int64_t)d->batch * worker / j->parts, b1 = (int64_t)d->batch * (worker + 1) / j->parts;
    const int64_t qo = b0 * d->q_len * d->q_heads * d->head_dim, ko = b0 * d->k_len * d->kv_heads * d->head_dim;
    const int64_t lo = b0 * d->q_heads * d->q_len;
    par_attn_desc sub = *d;
    j->st[worker] = PAR_OK;
    if (worker >= j->parts || b0 == b1) return;
    sub.batch = (int)(b1 - b0);
    if (j->backward)
        j->st[worker] = par__cpu_attention_bwd(&j->s->alloc, &sub, j->q + qo, j->k + ko, j->v + ko, j->o + qo,
                                               j->lse + lo, j->do_ + qo, j->dq + qo, j->dk + ko, j->dv + ko,
                                               j->accumulate);
    else
        j->st[worker] = par__cpu_attention_fwd(&j->s->alloc, &sub, j->q + qo, j->k + ko, j->v + ko, j->out + qo,
                                               j->lse + lo);
}

/* 1 when the job can fan out (valid arguments, several sequences, threads). */
static int par__cpu_attn_fan_out(const par__cpu_state *s, const par_attn_desc *d, int pointers_ok) {
    return s->threads > 1 && pointers_ok && d->batch >= 2 && par__attn_check("attention", d) == PAR_OK &&
           d->q_len > 0 && d->k_len > 0;
}

static par_status par__cpu_attn_run(par__cpu_state *s, par__cpu_attn_job *j, const char *fn) {
    int w;
    j->parts = s->threads < j->d->batch ? s->threads : j->d->batch;
    par__cpu_parallel(s, par__cpu_attn_task, j);
    for (w = 0; w < j->parts; w++)
        if (j->st[w] != PAR_OK) return par__fail(j->st[w], "%s: a kernel thread failed (%s)", fn, par_status_string(j->st[w]));
    return PAR_OK;
}

static par_status par__cpu_t_attention_fwd(void *user, const par_attn_desc *desc, const void *q, const void *k,
                                           const void *v, void *o, float *lse) {
    par__cpu_state *s = (par__cpu_state *)user;
    par_status st = par__cpu_attn_dtype("attention_fwd", desc);
    if (st != PAR_OK) return st;
    if (par__cpu_attn_fan_out(s, desc, q && k && v && o && lse)) {
        par__cpu_attn_job j;
        memset(&j, 0, sizeof j);
        j.s = s, j.d = desc, j.q = (const float *)q, j.k = (const float *)k, j.v = (const float *)v;
        j.out = (float *)o, j.lse = lse;
        return par__cpu_attn_run(s, &j, "attention_fwd");
    }
    st = par__cpu_attention_fwd(&s->alloc, desc, (const float *)q, (const float *)k, (const float *)v, (float *)o, lse);
    par__cpu_clean_upper();
    return st;
}

static par_status par__cpu_t_attention_bwd(void *user, const par_attn_desc *desc, const void *q, const void *k,
                                           const void *v, const void *o, const float *lse, const void *do_,
                                           void *dq, void *dk, void *dv, int accumulate) {
    par__cpu_state *s = (par__cpu_state *)user;
    par_status st = par__cpu_attn_dtype("attention_bwd", desc);
    if (st != PAR_OK) return st;
    if (par__cpu_attn_fan_out(s, desc, q && k && v && o && lse && do_ && dq && dk && dv)) {
        par__cpu_attn_job j;
        memset(&j, 0, sizeof j);
        j.s = s, j.d = desc, j.q = (const float *)q, j.k = (const float *)k, j.v = (const float *)v;
        j.o = (const float *)o;
        j.lse = (float *)(uintptr_t)lse, j.do_ = (const float *)do_;
        j.dq = (float *)dq, j.dk = (float *)dk, j.dv = (float *)dv, j.backward = 1, j.accumulate = accumulate;
        return par__cpu_attn_run(s, &j, "attention_bwd");
    }
    st = par__cpu_attention_bwd(&s->alloc, desc, (const float *)q, (const float *)k, (const float *)v,
                                (const float *)o, lse, (const float *)do_, (float *)dq, (float *)dk, (float *)dv,
                                accumulate);
    par__cpu_clean_upper();
    return st;
}

static par_status par__cpu_t_attention_merge(void *user, const par_attn_desc *desc, float *o, float *lse,
                                             const float *o_b, const float *lse_b) {
    par_status st = par__cpu_attn_dtype("attention_merge", desc);
    (void)user;
    if (st != PAR_OK) return st;
    return par__cpu_attention_merge(desc, o, lse, o_b, lse_b);
}

/* ------------------------------------------------------ other kernels */

/* The table entry for kernel X is par__cpu_X without the user pointer. */
/* ------------------------------------------- row-parallel kernels (the pool) */

/* Kernels whose rows (or elements) are independent run as contiguous ranges,
   one per kernel thread, each through the single-threaded kernel. A failing
   range keeps its own sentence (the error text is per thread). Bad arguments
   never get here: the wrappers fan out only with valid pointers and sizes, so
   argument errors come from the direct call, on the caller's thread. */
#define PAR__CPU_FAN_MAX 16
typedef par_status (*par__cpu_range_fn)(const void *args, int64_t begin, int64_t end);

typedef struct par__cpu_range_job {
    par__cpu_range_fn fn;
    const void *args;
    int64_t n;
    int parts;
    par_status st[PAR__CPU_FAN_MAX];
    char msg[PAR__CPU_FAN_MAX][160];
} par__cpu_range_job;

static void par__cpu_range_task(void *arg, int worker) {
    par__cpu_range_job *j = (par__cpu_range_job *)arg;
    if (worker >= j->parts) return;
    j->st[worker] = j->fn(j->args, j->n * worker / j->parts, j->n * (worker + 1) / j->parts);
    if (j->st[worker] != PAR_OK) par__copy_text(j->msg[worker], sizeof j->msg[worker], par_last_error());
}

/* Run fn over [0, n) in up to `threads` ranges of at least min_chunk. */
static par_status par__cpu_fan_range(par__cpu_state *s, int64_t n, int64_t min_chunk, par__cpu_range_fn fn,
                                     const void *args) {
    par__cpu_range_job j;
    int64_t parts = n / (min_chunk > 0 ? min_chunk : 1);
    int w;
    if (parts > s->threads) parts = s->threads;
    if (parts > PAR__CPU_FAN_MAX) parts = PAR__CPU_FAN_MAX;
    if (parts <= 1) return fn(args, 0, n);
    j.fn = fn, j.args = args, j.n = n, j.parts = (int)parts;
    par__cpu_parallel(s, par__cpu_range_task, &j);
    for (w = 0; w < j.parts; w++)
        if (j.st[w] != PAR_OK) return par__fail(j.st[w], "%s", j.msg[w]);
    return PAR_OK;
}

typedef struct par__cpu_rows_args {
    int64_t dim, heads, head_dim;
    const float *a, *b, *c;
    float *x, *y, *z;
    const int32_t *ids;
    const int64_t *pos;
    float f0, f1, f2, f3, f4;
    int64_t i0;
} par__cpu_rows_args;

static par_status par__cpu_rmsnorm_range(const void *p, int64_t b, int64_t e) {
    const par__cpu_rows_args *r = (const par__cpu_rows_args *)p;
    return par__cpu_rmsnorm_fwd(e - b, r->dim, r->a + b * r->dim, r->b, r->f0, r->x + b * r->dim, r->y ? r->y + b : NULL);
}

static par_status par__cpu_t_rmsnorm_fwd(void *user, int64_t rows, int64_t dim, const float *x, const float *w,
                                         float eps, float *y, float *rstd) {
    par__cpu_rows_args r;
    if (!x || !w || !y || rows <= 0 || dim <= 0) return par__cpu_rmsnorm_fwd(rows, dim, x, w, eps, y, rstd);
    memset(&r, 0, sizeof r);
    r.dim = dim, r.a = x, r.b = w, r.f0 = eps, r.x = y, r.y = rstd;
    return par__cpu_fan_range((par__cpu_state *)user, rows, 32768 / dim + 1, par__cpu_rmsnorm_range, &r);
}
static par_status par__cpu_t_rmsnorm_bwd(void *user, int64_t rows, int64_t dim, const float *x, const float *w,
                                         const float *rstd, const float *dy, float *dx, float *dw) {
    (void)user;
    return par__cpu_rmsnorm_bwd(rows, dim, x, w, rstd, dy, dx, dw);
}
static par_status par__cpu_rope_range(const void *p, int64_t b, int64_t e) {
    const par__cpu_rows_args *r = (const par__cpu_rows_args *)p;
    const int64_t row = r->heads * r->head_dim;
    return r->f1 > 0 ? par__cpu_rope_fwd(e - b, r->heads, r->head_dim, r->pos + b, r->f0, r->a + b * row, r->x + b * row)
                     : par__cpu_rope_bwd(e - b, r->heads, r->head_dim, r->pos + b, r->f0, r->a + b * row, r->x + b * row);
}

static par_status par__cpu_rope_fan(par__cpu_state *s, int64_t tokens, int64_t heads, int64_t head_dim,
                                    const int64_t *pos, float theta, const float *x, float *y, float direction) {
    par__cpu_rows_args r;
    memset(&r, 0, sizeof r);
    r.heads = heads, r.head_dim = head_dim, r.pos = pos, r.f0 = theta, r.f1 = direction, r.a = x, r.x = y;
    return par__cpu_fan_range(s, tokens, 32768 / (heads * head_dim) + 1, par__cpu_rope_range, &r);
}

static int par__cpu_rope_fan_ok(int64_t tokens, int64_t heads, int64_t head_dim, const int64_t *pos, float theta,
                                const float *x, const float *y) {
    return tokens > 0 && heads > 0 && head_dim > 0 && head_dim % 2 == 0 && theta > 0.0f && pos && x && y;
}

static par_status par__cpu_t_rope_fwd(void *user, int64_t tokens, int64_t heads, int64_t head_dim,
                                      const int64_t *pos, float theta, const float *x, float *y) {
    if (!par__cpu_rope_fan_ok(tokens, heads, head_dim, pos, theta, x, y))
        return par__cpu_rope_fwd(tokens, heads, head_dim, pos, theta, x, y);
    return par__cpu_rope_fan((par__cpu_state *)user, tokens, heads, head_dim, pos, theta, x, y, 1.0f);
}
static par_status par__cpu_t_rope_bwd(void *user, int64_t tokens, int64_t heads, int64_t head_dim,
                                      const int64_t *pos, float theta, const float *dy, float *dx) {
    if (!par__cpu_rope_fan_ok(tokens, heads, head_dim, pos, theta, dy, dx))
        return par__cpu_rope_bwd(tokens, heads, head_dim, pos, theta, dy, dx);
    return par__cpu_rope_fan((par__cpu_state *)user, tokens, heads, head_dim, pos, theta, dy, dx, -1.0f);
}

static par_status par__cpu_swiglu_fwd_range(const void *p, int64_t b, int64_t e) {
    const par__cpu_rows_args *r = (const par__cpu_rows_args *)p;
    return par__cpu_swiglu_fwd(e - b, r->a + b, r->b + b, r->x + b);
}
static par_status par__cpu_t_swiglu_fwd(void *user, int64_t n, const float *g, const float *u, float *h) {
    par__cpu_rows_args r;
    if (!g || !u || !h || n <= 0) return par__cpu_swiglu_fwd(n, g, u, h);
    memset(&r, 0, sizeof r);
    r.a = g, r.b = u, r.x = h;
    return par__cpu_fan_range((par__cpu_state *)user, n, 32768, par__cpu_swiglu_fwd_range, &r);
}
static par_status par__cpu_swiglu_bwd_range(const void *p, int64_t b, int64_t e) {
    const par__cpu_rows_args *r = (const par__cpu_rows_args *)p;
    return par__cpu_swiglu_bwd(e - b, r->a + b, r->b + b, r->c + b, r->x + b, r->y + b);
}
static par_status par__cpu_t_swiglu_bwd(void *user, int64_t n, const float *g, const float *u, const float *dh,
                                        float *dg, float *du) {
    par__cpu_rows_args r;
    if (!g || !u || !dh || !dg || !du || n <= 0) return par__cpu_swiglu_bwd(n, g, u, dh, dg, du);
    memset(&r, 0, sizeof r);
    r.a = g, r.b = u, r.c = dh, r.x = dg, r.y = du;
    return par__cpu_fan_range((par__cpu_state *)user, n, 32768, par__cpu_swiglu_bwd_range, &r);
}
static par_status par__cpu_t_embedding_fwd(void *user, int64_t n, const int32_t *ids, const float *table,
                                           int64_t rows, int64_t dim, int64_t start, float *out) {
    (void)user;
    return par__cpu_embedding_fwd(n, ids, table, rows, dim, start, out);
}
static par_status par__cpu_t_embedding_bwd(void *user, int64_t n, const int32_t *ids, const float *dout,
                                           int64_t rows, int64_t dim, int64_t start, float *dtable) {
    (void)user;
    return par__cpu_embedding_bwd(n, ids, dout, rows, dim, start, dtable);
}
static par_status par__cpu_xent_range(const void *p, int64_t b, int64_t e) {
    const par__cpu_rows_args *r = (const par__cpu_rows_args *)p;
    return par__cpu_xent(e - b, r->dim, r->a + b * r->dim, r->ids + b, r->x + b, r->y ? r->y + b * r->dim : NULL, r->f0);
}
static par_status par__cpu_t_xent(void *user, int64_t rows, int64_t vocab, const float *logits,
                                  const int32_t *targets, float *loss, float *dlogits, float scale) {
    par__cpu_rows_args r;
    if (!logits || !targets || !loss || rows <= 0 || vocab <= 0)
        return par__cpu_xent(rows, vocab, logits, targets, loss, dlogits, scale);
    memset(&r, 0, sizeof r);
    r.dim = vocab, r.a = logits, r.ids = targets, r.x = loss, r.y = dlogits, r.f0 = scale;
    return par__cpu_fan_range((par__cpu_state *)user, rows, 32768 / vocab + 1, par__cpu_xent_range, &r);
}
static par_status par__cpu_t_xent_local_max(void *user, int64_t rows, int64_t v_local, const float *logits,
                                            float *max_out) {
    (void)user;
    return par__cpu_xent_local_max(rows, v_local, logits, max_out);
}
static par_status par__cpu_t_xent_local_sumexp(void *user, int64_t rows, int64_t v_local, const float *logits,
                                               const float *gmax, float *sum_out) {
    (void)user;
    return par__cpu_xent_local_sumexp(rows, v_local, logits, gmax, sum_out);
}
static par_status par__cpu_t_xent_local_target(void *user, int64_t rows, int64_t v_local, const float *logits,
                                               const int32_t *targets, int64_t start, float *tgt_out) {
    (void)user;
    return par__cpu_xent_local_target(rows, v_local, logits, targets, start, tgt_out);
}
static par_status par__cpu_t_xent_loss_from_pieces(void *user, int64_t rows, const float *gmax, const float *gsum,
                                                   const float *tgt, const int32_t *targets, float *loss) {
    (void)user;
    return par__cpu_xent_loss_from_pieces(rows, gmax, gsum, tgt, targets, loss);
}
static par_status par__cpu_t_xent_bwd_split(void *user, int64_t rows, int64_t v_local, const float *logits,
                                            const int32_t *targets, int64_t start, const float *gmax,
                                            const float *gsum, float scale, float *dlogits) {
    (void)user;
    return par__cpu_xent_bwd_split(rows, v_local, logits, targets, start, gmax, gsum, scale, dlogits);
}
static par_status par__cpu_adamw_range(const void *q, int64_t b, int64_t e) {
    const par__cpu_rows_args *r = (const par__cpu_rows_args *)q;
    return par__cpu_adamw(e - b, r->x + b, r->a + b, r->y + b, r->z + b, r->f0, r->f1, r->f2, r->f3, r->f4, r->i0);
}
static par_status par__cpu_t_adamw(void *user, int64_t n, float *p, const float *g, float *m, float *v, float lr,
                                   float beta1, float beta2, float eps, float weight_decay, int64_t step) {
    par__cpu_rows_args r;
    if (!p || !g || !m || !v || n <= 0 || step < 1)
        return par__cpu_adamw(n, p, g, m, v, lr, beta1, beta2, eps, weight_decay, step);
    memset(&r, 0, sizeof r);
    r.x = p, r.a = g, r.y = m, r.z = v, r.f0 = lr, r.f1 = beta1, r.f2 = beta2, r.f3 = eps, r.f4 = weight_decay;
    r.i0 = step;
    return par__cpu_fan_range((par__cpu_state *)user, n, 32768, par__cpu_adamw_range, &r);
}
static par_status par__cpu_t_scale(void *user, int64_t n, float alpha, float *x) {
    (void)user;
    return par__cpu_scale(n, alpha, x);
}
static par_status par__cpu_t_axpy(void *user, int64_t n, float alpha, const float *x, float *y) {
    (void)user;
    return par__cpu_axpy(n, alpha, x, y);
}
static par_status par__cpu_t_sumsq(void *user, int64_t n, const float *x, double *out) {
    (void)user;
    return par__cpu_sumsq(n, x, out);
}

#endif /* PARALLEL_NO_CPU_KERNELS */

/* ------------------------------------------------------------ the table */

static void par__cpu_t_destroy(void *user) {
    par__cpu_state *s = (par__cpu_state *)user;
    par_allocator a;
    int w;
    if (!s) return;
#ifdef PAR__CPU_THREADS
    par__cpu_pool_stop(s);
#endif
    a = s->alloc;
#ifndef PARALLEL_NO_CPU_KERNELS
    for (w = 0; w < PAR__CPU_MAX_THREADS; w++) par__alloc_free(&a, s->ws_raw[w]);
#else
    (void)w;
#endif
    par__alloc_free(&a, s);
}

PARALLEL_DEF par_status par_compute_cpu(const par_cpu_desc *desc, par_compute_table *table) {
    par__cpu_state *s;
    int threads = desc ? desc->threads : 0;
    if (!table) return par__fail(PAR_EINVAL, "par_compute_cpu: table is NULL");
    memset(table, 0, sizeof *table);
    if (threads < 0 || threads > PAR__CPU_MAX_THREADS)
        return par__fail(PAR_EINVAL, "par_compute_cpu: threads is %d (must be 0..%d)", threads, PAR__CPU_MAX_THREADS);
    if (threads == 0) threads = 1;
#ifndef PAR__CPU_THREADS
    threads = 1; /* PARALLEL_NO_THREADS: kernels run on the calling thread only */
#endif
    if (desc && par__allocator_check(&desc->allocator, "par_cpu_desc.allocator") != PAR_OK) return PAR_EINVAL;
    s = (par__cpu_state *)par__alloc_malloc(desc ? &desc->allocator : NULL, sizeof *s);
    if (!s) return par__fail(PAR_ENOMEM, "par_compute_cpu: out of memory");
    memset(s, 0, sizeof *s);
    if (desc) s->alloc = desc->allocator;
    s->threads = threads;
#ifndef PARALLEL_NO_CPU_KERNELS
    s->isa = par__cpu_gemm_best();
#endif
#ifdef PAR__CPU_THREADS
    if (threads > 1) {
        par_status st = par__cpu_pool_start(s);
        if (st != PAR_OK) {
            par__alloc_free(&s->alloc, s);
            return st;
        }
    }
#endif
    table->version = PAR_COMPUTE_TABLE_VERSION;
    table->name = "cpu";
    table->user = s;
    table->device_memory = 0;
    table->stream = NULL;
    table->alloc = par__cpu_t_alloc;
    table->free = par__cpu_t_free;
    table->memcpy = par__cpu_t_memcpy;
    table->memset = par__cpu_t_memset;
    table->memcpy_2d = par__cpu_t_memcpy_2d;
    table->memory_report = par__cpu_t_memory_report;
    table->synchronize = par__cpu_t_synchronize;
#ifndef PARALLEL_NO_CPU_KERNELS /* else a memory-only table: the kernel hooks stay NULL */
    table->gemm = par__cpu_t_gemm;
    table->attention_fwd = par__cpu_t_attention_fwd;
    table->attention_bwd = par__cpu_t_attention_bwd;
    table->attention_merge = par__cpu_t_attention_merge;
    table->rmsnorm_fwd = par__cpu_t_rmsnorm_fwd;
    table->rmsnorm_bwd = par__cpu_t_rmsnorm_bwd;
    table->rope_fwd = par__cpu_t_rope_fwd;
    table->rope_bwd = par__cpu_t_rope_bwd;
    table->swiglu_fwd = par__cpu_t_swiglu_fwd;
    table->swiglu_bwd = par__cpu_t_swiglu_bwd;
    table->embedding_fwd = par__cpu_t_embedding_fwd;
    table->embedding_bwd = par__cpu_t_embedding_bwd;
    table->xent = par__cpu_t_xent;
    table->xent_local_max = par__cpu_t_xent_local_max;
    table->xent_local_sumexp = par__cpu_t_xent_local_sumexp;
    table->xent_local_target = par__cpu_t_xent_local_target;
    table->xent_loss_from_pieces = par__cpu_t_xent_loss_from_pieces;
    table->xent_bwd_split = par__cpu_t_xent_bwd_split;
    table->adamw = par__cpu_t_adamw;
    table->scale = par__cpu_t_scale;
    table->axpy = par__cpu_t_axpy;
    table->sumsq = par__cpu_t_sumsq;
    table->scratch_bound = par__cpu_t_scratch_bound;
#endif
    table->destroy = par__cpu_t_destroy;
    return PAR_OK;
}

// >>executor

struct par_executor {
    par_ctx *ctx;
    void *buf[4];    /* two ping-pong slices, a pack buffer and a receive buffer */
    size_t capacity; /* bytes of each */
};

PARALLEL_DEF par_status par_executor_create(par_ctx *ctx, par_executor **exec) {
    par_executor *e;
    if (!ctx || !exec) return par__fail(PAR_EINVAL, "par_executor_create: NULL argument");
    e = (par_executor *)par__ctx_malloc(ctx, sizeof *e);
    if (!e) return par__fail(PAR_ENOMEM, "par_executor_create: out of memory");
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    *exec = e;
    return PAR_OK;
}

static void par__exec_release(par_executor *e) {
    int i;
    for (i = 0; i < 4; i++)
        if (e->buf[i]) e->ctx->compute.free(e->ctx->compute.user, e->buf[i]);
    memset(e->buf, 0, sizeof e->buf);
    e->capacity = 0;
}

PARALLEL_DEF void par_executor_destroy(par_executor *exec) {
    if (!exec) return;
    par__exec_release(exec);
    par__ctx_free(exec->ctx, exec);
}

/* Grow the workspace to `bytes` per buffer; kept for later plans. */
static par_status par__exec_reserve(par_executor *e, size_t bytes) {
    const par_compute_table *c = &e->ctx->compute;
    par_status st;
    int i;
    if (bytes <= e->capacity) return PAR_OK;
    par__exec_release(e);
    for (i = 0; i < 4; i++)
        if ((st = c->alloc(c->user, bytes, PAR_MEM_COMM, &e->buf[i])) != PAR_OK) {
            par__exec_release(e);
            return st;
        }
    e->capacity = bytes;
    return PAR_OK;
}

/* height rows of width bytes, through the table (memcpy_2d if it has one). */
static par_status par__exec_copy2d(par_executor *e, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                                   size_t width, size_t height) {
    const par_compute_table *c = &e->ctx->compute;
    par_copy_kind kind = c->device_memory ? PAR_COPY_DEVICE_TO_DEVICE : PAR_COPY_HOST_TO_HOST;
    par_status st = PAR_OK;
    size_t r;
    if (!width || !height) return PAR_OK;
    if (c->memcpy_2d) return c->memcpy_2d(c->user, dst, dst_pitch, src, src_pitch, width, height);
    if (dst_pitch == width && src_pitch == width) return c->memcpy(c->user, dst, src, width * height, kind);
    for (r = 0; r < height && st == PAR_OK; r++)
        st = c->memcpy(c->user, (char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, width, kind);
    return st;
}

/* A row-major local block seen as [outer, mid, inner] around tensor dim d, in bytes
   for inner. */
typedef struct par__exec_view {
    size_t outer, mid, inner_bytes;
} par__exec_view;

static par__exec_view par__exec_around(const par_layout *l, int d, size_t elem) {
    int64_t shape[PARALLEL_MAX_DIMS];
    par__exec_view v;
    int t;
    par_layout_local_shape(l, shape);
    v.outer = 1;
    v.inner_bytes = elem;
    for (t = 0; t < d; t++) v.outer *= (size_t)shape[t];
    for (t = d + 1; t < l->ndim; t++) v.inner_bytes *= (size_t)shape[t];
    v.mid = (size_t)shape[d];
    return v;
}

/* dst (contiguous) = chunk c of n along dim d of src, whose view is v. */
static par_status par__exec_take_chunk(par_executor *e, void *dst, const void *src, par__exec_view v, int n, int c) {
    size_t piece = v.mid / (size_t)n * v.inner_bytes;
    return par__exec_copy2d(e, dst, piece, (const char *)src + (size_t)c * piece, v.mid * v.inner_bytes, piece, v.outer);
}

/* Chunk j of n along dim d of dst (view v) = part (contiguous). */
static par_status par__exec_put_chunk(par_executor *e, void *dst, par__exec_view v, int n, int j, const void *part) {
    size_t piece = v.mid / (size_t)n * v.inner_bytes;
    return par__exec_copy2d(e, (char *)dst + (size_t)j * piece, v.mid * v.inner_bytes, part, piece, piece, v.outer);
}

/* One op for this rank: src holds the slice before it, dst receives the slice after. */
static par_status par__exec_op(par_executor *e, const par_redist_op *op, const par_layout *before,
                               const par_layout *after, par_dtype dtype, const void *src, void *dst) {
    const par_comm_table *comm = &e->ctx->comm;
    size_t elem = par_dtype_size(dtype);
    int64_t numel = par_layout_local_numel(before);
    size_t bytes = (size_t)numel * elem;
    par_comm_group *group = NULL;
    int index = 0, n = 1, j;
    par_status st;
    if (op->kind != PAR_REDIST_RESHAPE && !par__mesh_same_shape(&before->mesh, &e->ctx->mesh)) {
        /* an op on a factored mesh (the unified view): its group by rank list, same rank numbers */
        int *ranks = e->ctx->scratch_ranks;
        if ((st = par_mesh_group(&before->mesh, e->ctx->rank, 1u << op->device_dim, ranks, &n)) != PAR_OK) return st;
        for (j = 0; j < n; j++)
            if (ranks[j] == e->ctx->rank) index = j;
        if ((st = par_ctx_group_ranks(e->ctx, ranks, n, &group)) != PAR_OK) return st;
    } else if (op->kind != PAR_REDIST_RESHAPE) {
        if ((st = par_ctx_group(e->ctx, 1u << op->device_dim, &group, &index, &n)) != PAR_OK) return st;
        if (n != op->group)
            return par__fail(PAR_EINVAL, "executor: plan op wants a group of %d on device dim %d, the mesh has %d",
                             op->group, op->device_dim, n);
    }
    switch (op->kind) {
    case PAR_REDIST_SPLIT:
        return par__exec_take_chunk(e, dst, src, par__exec_around(before, op->tensor_dim, elem), n, index);
    case PAR_REDIST_ALL_GATHER: {
        par__exec_view v = par__exec_around(after, op->tensor_dim, elem);
        if (v.outer == 1) return comm->all_gather(comm->user, group, src, dst, numel, dtype, NULL);
        if ((st = comm->all_gather(comm->user, group, src, e->buf[2], numel, dtype, NULL)) != PAR_OK) return st;
        for (j = 0; j < n && st == PAR_OK; j++) st = par__exec_put_chunk(e, dst, v, n, j, (char *)e->buf[2] + (size_t)j * bytes);
        return st;
    }
    case PAR_REDIST_ALL_TO_ALL: {
        /* block j of the send buffer = chunk j along to_dim (goes to member j); block j
           received (member j's chunk `index`) lands as chunk j along tensor_dim */
        par__exec_view from = par__exec_around(before, op->to_dim, elem), to = par__exec_around(after, op->tensor_dim, elem);
        size_t block = bytes / (size_t)n;
        void *packed = e->buf[2];
        for (j = 0; j < n; j++)
            if ((st = par__exec_take_chunk(e, (char *)packed + (size_t)j * block, src, from, n, j)) != PAR_OK) return st;
        if (to.outer == 1) return comm->all_to_all(comm->user, group, packed, dst, numel / n, dtype, NULL);
        if ((st = comm->all_to_all(comm->user, group, packed, e->buf[3], numel / n, dtype, NULL)) != PAR_OK) return st;
        for (j = 0; j < n && st == PAR_OK; j++) st = par__exec_put_chunk(e, dst, to, n, j, (char *)e->buf[3] + (size_t)j * block);
        return st;
    }
    case PAR_REDIST_ALL_REDUCE:
        return comm->all_reduce(comm->user, group, src, dst, numel, dtype, PAR_REDUCE_SUM, NULL);
    case PAR_REDIST_REDUCE_SCATTER: {
        par__exec_view v = par__exec_around(before, op->tensor_dim, elem);
        size_t block = bytes / (size_t)n;
        if (v.outer == 1) return comm->reduce_scatter(comm->user, group, src, dst, numel / n, dtype, PAR_REDUCE_SUM, NULL);
        for (j = 0; j < n; j++)
            if ((st = par__exec_take_chunk(e, (char *)e->buf[2] + (size_t)j * block, src, v, n, j)) != PAR_OK) return st;
        return comm->reduce_scatter(comm->user, group, e->buf[2], dst, numel / n, dtype, PAR_REDUCE_SUM, NULL);
    }
    case PAR_REDIST_RESHAPE:
        return src == dst ? PAR_OK : par__exec_copy2d(e, dst, bytes, src, bytes, bytes, 1);
    }
    return par__fail(PAR_EINVAL, "executor: unknown op kind %d", (int)op->kind);
}

PARALLEL_DEF par_status par_execute_plan(par_executor *exec, const par_plan *plan, par_dtype dtype, const void *in,
                                         void *out) {
    size_t elem = par_dtype_size(dtype), final_bytes;
    par_layout before, after;
    const void *src = in;
    void *dst;
    char text[128];
    par_status st;
    int i;
    if (!exec || !plan || !in || !out) return par__fail(PAR_EINVAL, "par_execute_plan: NULL argument");
    if (elem == 0) return par__fail(PAR_EINVAL, "par_execute_plan: unknown dtype %d", (int)dtype);
    if (!par__mesh_same_shape(&plan->from.mesh, &exec->ctx->mesh)) {
        par_mesh_format(&plan->from.mesh, text, sizeof text);
        return par__fail(PAR_EINVAL, "par_execute_plan: the plan's mesh %s is not the context's mesh", text);
    }
    if (plan->num_ops < 0 || plan->num_ops > PAR_MAX_PLAN_OPS || plan->max_local_numel < 0)
        return par__fail(PAR_EINVAL, "par_execute_plan: the plan is corrupt (%d ops)", plan->num_ops);
    final_bytes = (size_t)par_layout_local_numel(&plan->to) * elem;
    if (plan->num_ops == 0)
        return in == out ? PAR_OK : par__exec_copy2d(exec, out, final_bytes, in, final_bytes, final_bytes, 1);
    if ((st = par__exec_reserve(exec, (size_t)plan->max_local_numel * elem)) != PAR_OK) return st;
    for (i = 0; i < plan->num_ops; i++) {
        int last = i == plan->num_ops - 1;
        if ((st = par_plan_layout_after(plan, i - 1, &before)) != PAR_OK) return st;
        if ((st = par_plan_layout_after(plan, i, &after)) != PAR_OK) return st;
        /* the last op writes straight into out unless out is also the input */
        dst = last && out != in ? out : exec->buf[i & 1];
        if ((st = par__exec_op(exec, &plan->ops[i], &before, &after, dtype, src, dst)) != PAR_OK) {
            char where[256];
            par__copy_text(where, sizeof where, par_last_error());
            return par__fail(st, "par_execute_plan: op %d (%s): %s", i, par_redist_kind_name(plan->ops[i].kind), where);
        }
        src = dst;
    }
    return src == out ? PAR_OK : par__exec_copy2d(exec, out, final_bytes, src, final_bytes, final_bytes, 1);
}

// >>checkpoint

/* Files go through POSIX descriptors where there are some: lseek/read take a
   64-bit off_t on every LP64 system, open(O_EXCL) makes a private temporary
   file, fsync makes the save durable. Elsewhere stdio does the same, except that
   fseek limits offsets to LONG_MAX and rename cannot replace an existing file
   atomically on every system. */
#if !defined(PARALLEL_NO_CHECKPOINT) || !defined(PARALLEL_NO_TRACE)
/* Shared with >>trace's writer (compiled unless both sections are left out):
   UTF-8 validation and writing a file atomically. */
#include <errno.h>
#if defined(__unix__) || defined(__APPLE__)
#define PAR__ST_POSIX 1
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#else
#define PAR__ST_POSIX 0
#endif

#define PAR__ST_IO_MAX ((size_t)1 << 30) /* bytes per read()/write() call */

/* Length of the valid UTF-8 sequence at p (1..4), 0 if invalid (overlong forms,
   surrogates and code points past U+10FFFF are invalid). */
static int par__st_utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0], lo = 0x80, hi = 0xbf;
    int n, i;
    if (c < 0x80) return 1;
    if (c < 0xc2 || c > 0xf4) return 0;
    n = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (end - p < n) return 0;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
    if (p[1] < lo || p[1] > hi) return 0;
    for (i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return n;
}

/* ---- file access: NULL on success, else a reason for the message ---- */

typedef struct par__st_io {
#if PAR__ST_POSIX
    int fd;
#else
    FILE *fp;
#endif
} par__st_io;

static void par__st_io_init(par__st_io *io) {
#if PAR__ST_POSIX
    io->fd = -1;
#else
    io->fp = NULL;
#endif
}

/* Create a file that must not exist yet. *exists = 1 when it did. */
static const char *par__st_io_create(par__st_io *io, const char *path, int *exists) {
    *exists = 0;
#if PAR__ST_POSIX
    io->fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (io->fd >= 0) return NULL;
    *exists = errno == EEXIST;
    return strerror(errno);
#else
    io->fp = fopen(path, "wbx");
    if (io->fp) return NULL;
    *exists = errno == EEXIST;
    return strerror(errno);
#endif
}

static const char *par__st_io_write_at(par__st_io *io, uint64_t offset, const void *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)buf;
#if PAR__ST_POSIX
    if (offset > (uint64_t)(sizeof(off_t) >= 8 ? INT64_MAX : INT32_MAX)) return "offset too large for this system";
    if (lseek(io->fd, (off_t)offset, SEEK_SET) < 0) return strerror(errno);
    while (n) {
        ssize_t r = write(io->fd, p, n < PAR__ST_IO_MAX ? n : PAR__ST_IO_MAX);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? strerror(errno) : "nothing written";
        p += r;
        n -= (size_t)r;
    }
    return NULL;
#else
    if (offset > (uint64_t)LONG_MAX || fseek(io->fp, (long)offset, SEEK_SET) != 0) return "cannot seek";
    return fwrite(p, 1, n, io->fp) == n ? NULL : "write error";
#endif
}

/* Flush to the disk and close (the descriptor is closed even on failure). */
static const char *par__st_io_sync_close(par__st_io *io) {
    const char *why = NULL;
#if PAR__ST_POSIX
    if (fsync(io->fd) != 0) why = strerror(errno);
    if (close(io->fd) != 0 && !why) why = strerror(errno);
    io->fd = -1;
#else
    if (fflush(io->fp) != 0) why = "flush failed";
    if (fclose(io->fp) != 0 && !why) why = "close failed";
    io->fp = NULL;
#endif
    return why;
}

/* Put `tmp` in place of `path`. */
static const char *par__st_replace(const char *tmp, const char *path) {
    if (rename(tmp, path) == 0) return NULL;
#if PAR__ST_POSIX
    return strerror(errno);
#else
    {
        /* rename does not replace an existing file everywhere (Windows): move the
           old file aside, and back if the new one cannot take its place */
        size_t n = strlen(path) + 5;
        char *old = (char *)PARALLEL_MALLOC(n);
        const char *why = NULL;
        if (!old) return "out of memory";
        snprintf(old, n, "%s.old", path);
        remove(old);
        if (rename(path, old) != 0) why = strerror(errno);
        else if (rename(tmp, path) != 0) {
            why = strerror(errno);
            rename(old, path);
        } else {
            remove(old);
        }
        PARALLEL_FREE(old);
        return why;
    }
#endif
}

/* Make the rename itself durable (best effort: not every file system allows it). */
static void par__st_sync_dir(const par_allocator *alloc, const char *path) {
#if PAR__ST_POSIX
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    char *dir = (char *)par__alloc_malloc(alloc, n + 2);
    int fd;
    if (!dir) return;
    if (!slash) memcpy(dir, ".", 2);
    else if (n == 0) memcpy(dir, "/", 2);
    else {
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    par__alloc_free(alloc, dir);
#else
    (void)alloc, (void)path;
#endif
}

/* Create a private temporary file beside `path` for an atomic write: tmp (n
   bytes) receives "<path>.tmp.<pid>.<k>" (pid private to this process, k
   separating writers of one path in one process, e.g. rank threads). NULL on
   success, else why the last attempt failed (tmp then names it). */
static const char *par__st_create_temp(par__st_io *io, const char *path, char *tmp, size_t n) {
    const char *why = NULL;
    int attempt, exists = 1;
    for (attempt = 0; attempt < 1000 && exists; attempt++) {
#if PAR__ST_POSIX
        snprintf(tmp, n, "%s.tmp.%ld.%d", path, (long)getpid(), attempt);
#else
        snprintf(tmp, n, "%s.tmp.%d", path, attempt);
#endif
        why = par__st_io_create(io, tmp, &exists);
    }
    return why;
}

#endif /* !PARALLEL_NO_CHECKPOINT || !PARALLEL_NO_TRACE */

#ifndef PARALLEL_NO_CHECKPOINT

#define PAR__ST_MAX_HEADER 100000000ull  /* the safetensors limit on the JSON header */
#define PAR__ST_CHUNK ((size_t)16 << 20) /* bytes per read/convert/checksum step */
#define PAR__ST_CRC_PREFIX "par.crc32."
#define PAR__ST_CRC_PREFIX_LEN 10

/* ---- CRC-32 (IEEE 802.3, reflected 0xEDB88320, zlib's crc32), 8 bytes a step ---- */

typedef struct par__st_crc_table {
    uint32_t t[8][256];
} par__st_crc_table;

static void par__st_crc_init(par__st_crc_table *c) {
    uint32_t i, k, v;
    for (i = 0; i < 256; i++) {
        v = i;
        for (k = 0; k < 8; k++) v = (v & 1u) ? 0xEDB88320u ^ (v >> 1) : v >> 1;
        c->t[0][i] = v;
    }
    for (i = 0; i < 256; i++)
        for (k = 1; k < 8; k++) c->t[k][i] = (c->t[k - 1][i] >> 8) ^ c->t[0][c->t[k - 1][i] & 0xffu];
}

/* `state` starts at 0xFFFFFFFF; the CRC is the final state ^ 0xFFFFFFFF. */
static uint32_t par__st_crc_update(const par__st_crc_table *c, uint32_t state, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    while (n >= 8) {
        uint32_t a = state ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t b = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        state = c->t[7][a & 0xffu] ^ c->t[6][(a >> 8) & 0xffu] ^ c->t[5][(a >> 16) & 0xffu] ^ c->t[4][a >> 24] ^
                c->t[3][b & 0xffu] ^ c->t[2][(b >> 8) & 0xffu] ^ c->t[1][(b >> 16) & 0xffu] ^ c->t[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) state = c->t[0][(state ^ *p++) & 0xffu] ^ (state >> 8);
    return state;
}

/* ---- small helpers ---- */

/* The format stores little-endian bytes and every path here copies them as is. */
static int par__st_host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static char *par__st_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = (char *)PARALLEL_MALLOC(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* "F32" ... as the safetensors header spells them, indexed by par_dtype. */
static const char *const par__st_dtype_tags[PAR_DTYPE_COUNT] = {"F32", "BF16", "F16", "I32", "I64", "F64"};

static int par__st_is_float(par_dtype d) { return d == PAR_F32 || d == PAR_BF16 || d == PAR_F16 || d == PAR_F64; }


static int par__st_valid_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    while (p < end) {
        int n = par__st_utf8_len(p, end);
        if (!n) return 0;
        p += n;
    }
    return 1;
}

/* ---- file access for the reader ---- */

static const char *par__st_io_open_read(par__st_io *io, const char *path, uint64_t *size) {
#if PAR__ST_POSIX
    struct stat st;
    const char *why;
    io->fd = open(path, O_RDONLY);
    if (io->fd < 0) return strerror(errno);
    if (fstat(io->fd, &st) != 0) why = strerror(errno);
    else if (S_ISDIR(st.st_mode)) why = "it is a directory";
    else if (!S_ISREG(st.st_mode)) why = "it is not a regular file";
    else why = NULL;
    if (why) {
        close(io->fd);
        io->fd = -1;
        return why;
    }
    *size = (uint64_t)st.st_size;
    return NULL;
#else
    long n;
    io->fp = fopen(path, "rb");
    if (!io->fp) return strerror(errno);
    if (fseek(io->fp, 0, SEEK_END) != 0 || (n = ftell(io->fp)) < 0) {
        fclose(io->fp);
        io->fp = NULL;
        return "cannot determine its size";
    }
    *size = (uint64_t)n;
    return NULL;
#endif
}

/* Read n bytes at `offset`; *got = bytes read (less than n at the end of the file). */
static const char *par__st_io_read_at(par__st_io *io, uint64_t offset, void *buf, size_t n, size_t *got) {
    unsigned char *p = (unsigned char *)buf;
    *got = 0;
#if PAR__ST_POSIX
    if (offset > (uint64_t)(sizeof(off_t) >= 8 ? INT64_MAX : INT32_MAX)) return "offset too large for this system";
    if (lseek(io->fd, (off_t)offset, SEEK_SET) < 0) return strerror(errno);
    while (*got < n) {
        size_t want = n - *got < PAR__ST_IO_MAX ? n - *got : PAR__ST_IO_MAX;
        ssize_t r = read(io->fd, p + *got, want);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return strerror(errno);
        if (r == 0) break;
        *got += (size_t)r;
    }
    return NULL;
#else
    if (offset > (uint64_t)LONG_MAX || fseek(io->fp, (long)offset, SEEK_SET) != 0) return "cannot seek";
    *got = fread(p, 1, n, io->fp);
    return ferror(io->fp) ? "read error" : NULL;
#endif
}

static void par__st_io_close(par__st_io *io) {
#if PAR__ST_POSIX
    if (io->fd >= 0) close(io->fd);
    io->fd = -1;
#else
    if (io->fp) fclose(io->fp);
    io->fp = NULL;
#endif
}

static int par__st_io_is_open(const par__st_io *io) {
#if PAR__ST_POSIX
    return io->fd >= 0;
#else
    return io->fp != NULL;
#endif
}

/* ---- the reader ---- */

typedef struct par__st_meta {
    const char *key, *value;
} par__st_meta;

struct par_st_file {
    char *path;
    par__st_io io;
    uint64_t data_start, data_size; /* data section: file bytes [data_start, data_start + data_size) */
    char *strings;                  /* decoded names, metadata keys and values */
    par_st_tensor *tensors;         /* sorted by name */
    int count, cap;
    par__st_meta *meta; /* sorted by key */
    int meta_count, meta_cap;
    par__st_crc_table crc;
};

static PAR__PRINTF(3, 4) par_status par__st_open_fail(const char *path, par_status status, const char *fmt, ...) {
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return par__fail(status, "par_st_open: %.200s: %s", path, what);
}

/* Recursive-descent reader of the header JSON. Decoded strings go to `out`, which
   holds as many bytes as the header (a decoded string plus its 0 is never longer
   than its quoted JSON form). */
typedef struct par__st_parser {
    par_st_file *f;
    const unsigned char *begin, *p, *end;
    char *out;
} par__st_parser;

static PAR__PRINTF(2, 3) par_status par__st_syntax(par__st_parser *ps, const char *fmt, ...) {
    char what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return par__st_open_fail(ps->f->path, PAR_EPARSE, "header byte %lu: %s", (unsigned long)(ps->p - ps->begin), what);
}

/* What stands at the cursor, for messages: "'x'", "byte 0x07" or "the end of the header". */
static const char *par__st_here(const par__st_parser *ps, char *buf, size_t size) {
    if (ps->p >= ps->end) return "the end of the header";
    if (*ps->p >= 0x20 && *ps->p < 0x7f) snprintf(buf, size, "'%c'", *ps->p);
    else snprintf(buf, size, "byte 0x%02x", *ps->p);
    return buf;
}

static void par__st_ws(par__st_parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

/* Skip whitespace, then require character c. */
static par_status par__st_expect(par__st_parser *ps, char c, const char *context) {
    char here[16];
    par__st_ws(ps);
    if (ps->p < ps->end && *ps->p == (unsigned char)c) {
        ps->p++;
        return PAR_OK;
    }
    return par__st_syntax(ps, "expected '%c' %s, found %s", c, context, par__st_here(ps, here, sizeof here));
}

/* After an element of an object or array: 1 if another follows (','), 0 at `close`. */
static par_status par__st_next(par__st_parser *ps, char close, const char *context, int *more) {
    char here[16];
    par__st_ws(ps);
    if (ps->p < ps->end && (*ps->p == ',' || *ps->p == (unsigned char)close)) {
        *more = *ps->p++ == ',';
        return PAR_OK;
    }
    return par__st_syntax(ps, "expected ',' or '%c' %s, found %s", close, context, par__st_here(ps, here, sizeof here));
}

static int par__st_hex4(const unsigned char *p, const unsigned char *end, unsigned *v) {
    int i;
    *v = 0;
    if (end - p < 4) return 0;
    for (i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        *v = *v * 16 + d;
    }
    return 1;
}

static char *par__st_put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xc0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xe0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *o++ = (char)(0xf0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    }
    return o;
}

/* A \u escape at p (just past the 'u'); a high surrogate takes its low half too. */
static par_status par__st_unicode_escape(par__st_parser *ps, char **o) {
    unsigned cp, lo;
    if (!par__st_hex4(ps->p, ps->end, &cp)) return par__st_syntax(ps, "\\u must be followed by 4 hex digits");
    ps->p += 4;
    if (cp >= 0xdc00 && cp < 0xe000) return par__st_syntax(ps, "\\u%04x is a lone low surrogate", cp);
    if (cp >= 0xd800 && cp < 0xdc00) {
        if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || !par__st_hex4(ps->p + 2, ps->end, &lo) ||
            lo < 0xdc00 || lo >= 0xe000)
            return par__st_syntax(ps, "\\u%04x (a high surrogate) is not followed by a \\u low surrogate", cp);
        ps->p += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp == 0) return par__st_syntax(ps, "\\u0000 cannot be part of a name, key or value");
    *o = par__st_put_utf8(*o, cp);
    return PAR_OK;
}

/* A JSON string, decoded (UTF-8, 0-terminated) into the parser's output area. */
static par_status par__st_string(par__st_parser *ps, const char **result, const char *context) {
    char here[16], *o = ps->out;
    par_status st;
    par__st_ws(ps);
    if (ps->p >= ps->end || *ps->p != '"')
        return par__st_syntax(ps, "expected a string %s, found %s", context, par__st_here(ps, here, sizeof here));
    ps->p++;
    for (;;) {
        unsigned c;
        int n;
        if (ps->p >= ps->end) return par__st_syntax(ps, "unterminated string %s", context);
        c = *ps->p;
        if (c == '"') break;
        if (c < 0x20) return par__st_syntax(ps, "raw control byte 0x%02x in a string %s (JSON escapes it)", c, context);
        if (c != '\\') {
            if (!(n = par__st_utf8_len(ps->p, ps->end)))
                return par__st_syntax(ps, "invalid UTF-8 in a string %s", context);
            memcpy(o, ps->p, (size_t)n);
            o += n;
            ps->p += n;
            continue;
        }
        if (++ps->p >= ps->end) return par__st_syntax(ps, "unterminated string %s", context);
        c = *ps->p++;
        switch (c) {
        case '"':
        case '\\':
        case '/': *o++ = (char)c; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u':
            if ((st = par__st_unicode_escape(ps, &o)) != PAR_OK) return st;
            break;
        default:
            ps->p--;
            return par__st_syntax(ps, "unknown escape \\%s in a string %s", par__st_here(ps, here, sizeof here),
                                  context);
        }
    }
    ps->p++; /* the closing quote */
    *o++ = 0;
    *result = ps->out;
    ps->out = o;
    return PAR_OK;
}

/* A non-negative JSON integer up to INT64_MAX; NULL, or why it is not one. */
static const char *par__st_uint(par__st_parser *ps, uint64_t *v) {
    const unsigned char *p;
    uint64_t x = 0;
    par__st_ws(ps);
    p = ps->p;
    if (p < ps->end && *p == '-') return "is negative";
    if (p >= ps->end || *p < '0' || *p > '9') return "is not a number";
    if (*p == '0' && p + 1 < ps->end && p[1] >= '0' && p[1] <= '9') return "has a leading zero";
    while (p < ps->end && *p >= '0' && *p <= '9') {
        uint64_t d = (uint64_t)(*p++ - '0');
        if (x > ((uint64_t)INT64_MAX - d) / 10) return "is larger than 2^63-1";
        x = x * 10 + d;
    }
    if (p < ps->end && (*p == '.' || *p == 'e' || *p == 'E')) return "is not an integer";
    ps->p = p;
    *v = x;
    return NULL;
}

/* Skip any JSON value (a tensor's fields this library does not use). */
static par_status par__st_skip(par__st_parser *ps, int depth) {
    char here[16];
    const char *s;
    int more;
    par_status st;
    par__st_ws(ps);
    if (depth > 64) return par__st_syntax(ps, "values nested more than 64 deep");
    if (ps->p >= ps->end) return par__st_syntax(ps, "expected a value, found the end of the header");
    switch (*ps->p) {
    case '"': return par__st_string(ps, &s, "in an ignored field");
    case '{':
        ps->p++;
        par__st_ws(ps);
        if (ps->p < ps->end && *ps->p == '}') return ps->p++, PAR_OK;
        do {
            if ((st = par__st_string(ps, &s, "as a key")) != PAR_OK ||
                (st = par__st_expect(ps, ':', "after a key")) != PAR_OK ||
                (st = par__st_skip(ps, depth + 1)) != PAR_OK ||
                (st = par__st_next(ps, '}', "in an object", &more)) != PAR_OK)
                return st;
        } while (more);
        return PAR_OK;
    case '[':
        ps->p++;
        par__st_ws(ps);
        if (ps->p < ps->end && *ps->p == ']') return ps->p++, PAR_OK;
        do {
            if ((st = par__st_skip(ps, depth + 1)) != PAR_OK ||
                (st = par__st_next(ps, ']', "in an array", &more)) != PAR_OK)
                return st;
        } while (more);
        return PAR_OK;
    default: break;
    }
    if ((size_t)(ps->end - ps->p) >= 4 && (!memcmp(ps->p, "true", 4) || !memcmp(ps->p, "null", 4)))
        return ps->p += 4, PAR_OK;
    if ((size_t)(ps->end - ps->p) >= 5 && !memcmp(ps->p, "false", 5)) return ps->p += 5, PAR_OK;
    if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) {
        while (ps->p < ps->end && *ps->p && strchr("+-.eE0123456789", *ps->p)) ps->p++;
        return PAR_OK;
    }
    return par__st_syntax(ps, "expected a value, found %s", par__st_here(ps, here, sizeof here));
}

/* [n, n, ...] of non-negative integers: at most `max` of them into v. */
static par_status par__st_uint_array(par__st_parser *ps, const char *name, const char *field, int max, uint64_t *v,
                                     int *n) {
    const char *why;
    int more;
    par_status st;
    char context[160];
    snprintf(context, sizeof context, "for tensor \"%.100s\" %s", name, field);
    if ((st = par__st_expect(ps, '[', context)) != PAR_OK) return st;
    *n = 0;
    par__st_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') return ps->p++, PAR_OK;
    do {
        uint64_t x;
        if ((why = par__st_uint(ps, &x)) != NULL)
            return par__st_syntax(ps, "tensor \"%.100s\" %s entry %d %s", name, field, *n, why);
        if (*n == max) {
            if (max == PARALLEL_MAX_DIMS) /* a shape */
                return par__st_open_fail(ps->f->path, PAR_EUNSUPPORTED,
                                         "tensor \"%.100s\" has more than %d dims (PARALLEL_MAX_DIMS)", name, max);
            return par__st_syntax(ps, "tensor \"%.100s\" %s has more than %d entries", name, field, max);
        }
        v[(*n)++] = x;
        if ((st = par__st_next(ps, ']', context, &more)) != PAR_OK) return st;
    } while (more);
    return PAR_OK;
}

static par_status par__st_dtype(par__st_parser *ps, const char *name, const char *tag, par_dtype *dtype) {
    static const char *const other[] = {"BOOL",    "U8",      "I8",      "U16", "I16",     "U32",     "U64",
                                        "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};
    size_t i;
    for (i = 0; i < PAR_DTYPE_COUNT; i++) {
        if (strcmp(tag, par__st_dtype_tags[i]) == 0) {
            *dtype = (par_dtype)i;
            return PAR_OK;
        }
    }
    for (i = 0; i < sizeof other / sizeof other[0]; i++)
        if (strcmp(tag, other[i]) == 0)
            return par__st_open_fail(ps->f->path, PAR_EUNSUPPORTED,
                                     "tensor \"%.100s\" has dtype %s, which parallel.h does not read "
                                     "(F32, BF16, F16, F64, I32, I64)",
                                     name, tag);
    return par__st_open_fail(ps->f->path, PAR_EPARSE,
                             "tensor \"%.100s\" has unknown dtype \"%.40s\" (expected F32, BF16, F16, F64, I32 or I64)",
                             name, tag);
}

/* numel and bytes from the shape, and their agreement with data_offsets. */
static par_status par__st_check_size(par__st_parser *ps, par_st_tensor *t, uint64_t begin, uint64_t end) {
    uint64_t elem = par_dtype_size(t->dtype);
    char shape[200];
    int i;
    t->numel = 1;
    par__shape_text(shape, sizeof shape, t->ndim, t->shape);
    for (i = 0; i < t->ndim; i++) {
        if (t->shape[i] && t->numel > INT64_MAX / t->shape[i])
            return par__st_open_fail(ps->f->path, PAR_EPARSE, "tensor \"%.100s\" shape %s has more than 2^63 elements",
                                     t->name, shape);
        t->numel *= t->shape[i];
    }
    if ((uint64_t)t->numel > (uint64_t)INT64_MAX / elem)
        return par__st_open_fail(ps->f->path, PAR_EPARSE, "tensor \"%.100s\" shape %s has more than 2^63 bytes",
                                 t->name, shape);
    if (begin > end)
        return par__st_open_fail(ps->f->path, PAR_EPARSE,
                                 "tensor \"%.100s\" has data_offsets [%llu,%llu], which end before they begin", t->name,
                                 (unsigned long long)begin, (unsigned long long)end);
    t->offset = begin;
    t->nbytes = (uint64_t)t->numel * elem;
    if (end - begin != t->nbytes)
        return par__st_open_fail(
            ps->f->path, PAR_EPARSE,
            "tensor \"%.100s\" has shape %s of %s (%llu bytes) but data_offsets [%llu,%llu] span %llu bytes", t->name,
            shape, par__st_dtype_tags[t->dtype], (unsigned long long)t->nbytes, (unsigned long long)begin,
            (unsigned long long)end, (unsigned long long)(end - begin));
    return PAR_OK;
}

static par_status par__st_push_tensor(par_st_file *f, const par_st_tensor *t) {
    if (f->count == f->cap) {
        int cap = f->cap ? f->cap * 2 : 64;
        par_st_tensor *p = (par_st_tensor *)PARALLEL_REALLOC(f->tensors, (size_t)cap * sizeof *p);
        if (!p) return par__st_open_fail(f->path, PAR_ENOMEM, "out of memory for %d tensors", cap);
        f->tensors = p;
        f->cap = cap;
    }
    f->tensors[f->count++] = *t;
    return PAR_OK;
}

static par_status par__st_push_meta(par_st_file *f, const char *key, const char *value) {
    if (f->meta_count == f->meta_cap) {
        int cap = f->meta_cap ? f->meta_cap * 2 : 64;
        par__st_meta *p = (par__st_meta *)PARALLEL_REALLOC(f->meta, (size_t)cap * sizeof *p);
        if (!p) return par__st_open_fail(f->path, PAR_ENOMEM, "out of memory for %d metadata entries", cap);
        f->meta = p;
        f->meta_cap = cap;
    }
    f->meta[f->meta_count].key = key;
    f->meta[f->meta_count++].value = value;
    return PAR_OK;
}

/* One tensor entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]} (other fields ignored). */
static par_status par__st_tensor_entry(par__st_parser *ps, const char *name) {
    par_st_tensor t;
    uint64_t dims[PARALLEL_MAX_DIMS], offsets[2] = {0, 0};
    int have_dtype = 0, have_shape = 0, have_offsets = 0, *have, n, i, more;
    const char *key, *tag;
    char context[160];
    par_status st;
    memset(&t, 0, sizeof t);
    t.name = name;
    snprintf(context, sizeof context, "for tensor \"%.100s\"", name);
    par__st_ws(ps);
    if (ps->p >= ps->end || *ps->p != '{')
        return par__st_syntax(ps, "tensor \"%.100s\" is not an object with dtype, shape and data_offsets", name);
    ps->p++;
    par__st_ws(ps);
    more = !(ps->p < ps->end && *ps->p == '}');
    if (!more) ps->p++;
    while (more) {
        if ((st = par__st_string(ps, &key, context)) != PAR_OK) return st;
        if ((st = par__st_expect(ps, ':', context)) != PAR_OK) return st;
        have = strcmp(key, "dtype") == 0          ? &have_dtype
               : strcmp(key, "shape") == 0        ? &have_shape
               : strcmp(key, "data_offsets") == 0 ? &have_offsets
                                                  : NULL;
        if (have && (*have)++) return par__st_syntax(ps, "tensor \"%.100s\" has \"%s\" twice", name, key);
        if (have == &have_dtype) {
            if ((st = par__st_string(ps, &tag, context)) != PAR_OK) return st;
            if ((st = par__st_dtype(ps, name, tag, &t.dtype)) != PAR_OK) return st;
        } else if (have == &have_shape) {
            if ((st = par__st_uint_array(ps, name, "shape", PARALLEL_MAX_DIMS, dims, &t.ndim)) != PAR_OK) return st;
            for (i = 0; i < t.ndim; i++) t.shape[i] = (int64_t)dims[i];
        } else if (have == &have_offsets) {
            if ((st = par__st_uint_array(ps, name, "data_offsets", 2, offsets, &n)) != PAR_OK) return st;
            if (n != 2) return par__st_syntax(ps, "tensor \"%.100s\" data_offsets has %d entries, not 2", name, n);
        } else if ((st = par__st_skip(ps, 1)) != PAR_OK) { /* a field this library does not use */
            return st;
        }
        if ((st = par__st_next(ps, '}', context, &more)) != PAR_OK) return st;
    }
    if (!have_dtype || !have_shape || !have_offsets)
        return par__st_open_fail(ps->f->path, PAR_EPARSE, "tensor \"%.100s\" has no \"%s\"", name,
                                 !have_dtype   ? "dtype"
                                 : !have_shape ? "shape"
                                               : "data_offsets");
    if ((st = par__st_check_size(ps, &t, offsets[0], offsets[1])) != PAR_OK) return st;
    return par__st_push_tensor(ps->f, &t);
}

/* "__metadata__": {"key": "value", ...} or null. */
static par_status par__st_metadata_entry(par__st_parser *ps) {
    const char *key, *value;
    char here[16];
    int more;
    par_status st;
    par__st_ws(ps);
    if ((size_t)(ps->end - ps->p) >= 4 && !memcmp(ps->p, "null", 4)) return ps->p += 4, PAR_OK;
    if (ps->p >= ps->end || *ps->p != '{')
        return par__st_syntax(ps, "__metadata__ must be an object of strings, found %s",
                              par__st_here(ps, here, sizeof here));
    ps->p++;
    par__st_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') return ps->p++, PAR_OK;
    do {
        if ((st = par__st_string(ps, &key, "as a __metadata__ key")) != PAR_OK) return st;
        if ((st = par__st_expect(ps, ':', "after a __metadata__ key")) != PAR_OK) return st;
        par__st_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"')
            return par__st_syntax(
                ps, "__metadata__ value of \"%.100s\" is %s, not a string (safetensors metadata values are strings)",
                key, par__st_here(ps, here, sizeof here));
        if ((st = par__st_string(ps, &value, "as a __metadata__ value")) != PAR_OK) return st;
        if ((st = par__st_push_meta(ps->f, key, value)) != PAR_OK) return st;
        if ((st = par__st_next(ps, '}', "in __metadata__", &more)) != PAR_OK) return st;
    } while (more);
    return PAR_OK;
}

static par_status par__st_parse_header(par__st_parser *ps) {
    const char *key;
    char here[16];
    int more, seen_meta = 0;
    par_status st;
    par__st_ws(ps);
    if (ps->p >= ps->end || *ps->p != '{')
        return par__st_syntax(ps, "expected '{' (the header is not a JSON object), found %s",
                              par__st_here(ps, here, sizeof here));
    ps->p++;
    par__st_ws(ps);
    more = !(ps->p < ps->end && *ps->p == '}');
    if (!more) ps->p++;
    while (more) {
        if ((st = par__st_string(ps, &key, "as a tensor name")) != PAR_OK) return st;
        if ((st = par__st_expect(ps, ':', "after a tensor name")) != PAR_OK) return st;
        if (strcmp(key, "__metadata__") == 0) {
            if (seen_meta++) return par__st_syntax(ps, "__metadata__ appears twice");
            st = par__st_metadata_entry(ps);
        } else {
            st = par__st_tensor_entry(ps, key);
        }
        if (st != PAR_OK) return st;
        if ((st = par__st_next(ps, '}', "in the header object", &more)) != PAR_OK) return st;
    }
    par__st_ws(ps);
    if (ps->p < ps->end)
        return par__st_syntax(ps, "%s after the header's JSON object (only space padding may follow)",
                              par__st_here(ps, here, sizeof here));
    return PAR_OK;
}

static int par__st_cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const par_st_tensor *)a)->name, ((const par_st_tensor *)b)->name);
}

static int par__st_cmp_meta_key(const void *a, const void *b) {
    return strcmp(((const par__st_meta *)a)->key, ((const par__st_meta *)b)->key);
}

static int par__st_cmp_tensor_offset(const void *a, const void *b) {
    const par_st_tensor *x = *(const par_st_tensor *const *)a, *y = *(const par_st_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The tensors must tile the data section: sorted by offset, each begins where the
   previous ended, the last ends at its end. */
static par_status par__st_check_coverage(par_st_file *f) {
    const par_st_tensor **order, *prev = NULL;
    uint64_t cursor = 0;
    par_status st = PAR_OK;
    int i;
    if (!f->count) {
        if (f->data_size)
            return par__st_open_fail(f->path, PAR_EPARSE, "%llu bytes of data follow a header without tensors",
                                     (unsigned long long)f->data_size);
        return PAR_OK;
    }
    order = (const par_st_tensor **)PARALLEL_MALLOC((size_t)f->count * sizeof *order);
    if (!order) return par__st_open_fail(f->path, PAR_ENOMEM, "out of memory");
    for (i = 0; i < f->count; i++) order[i] = &f->tensors[i];
    qsort((void *)order, (size_t)f->count, sizeof *order, par__st_cmp_tensor_offset);
    for (i = 0; i < f->count && st == PAR_OK; i++) {
        const par_st_tensor *t = order[i];
        if (t->offset < cursor)
            st = par__st_open_fail(
                f->path, PAR_EPARSE,
                "tensor \"%.100s\" (bytes [%llu,%llu)) overlaps tensor \"%.100s\" (bytes [%llu,%llu))", t->name,
                (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes), prev->name,
                (unsigned long long)prev->offset, (unsigned long long)(prev->offset + prev->nbytes));
        else if (t->offset > cursor)
            st = par__st_open_fail(f->path, PAR_EPARSE,
                                   "%llu unused bytes before tensor \"%.100s\" at data offset %llu (tensors must cover "
                                   "the data section without gaps)",
                                   (unsigned long long)(t->offset - cursor), t->name, (unsigned long long)t->offset);
        else if (t->offset + t->nbytes > f->data_size)
            st = par__st_open_fail(
                f->path, PAR_EIO,
                "tensor \"%.100s\" ends at data byte %llu but the data section has only %llu bytes (truncated file?)",
                t->name, (unsigned long long)(t->offset + t->nbytes), (unsigned long long)f->data_size);
        cursor = t->offset + t->nbytes;
        prev = t;
    }
    PARALLEL_FREE((void *)order);
    if (st == PAR_OK && cursor < f->data_size)
        st = par__st_open_fail(f->path, PAR_EPARSE,
                               "%llu bytes of data after the last tensor (tensors must cover the data section exactly)",
                               (unsigned long long)(f->data_size - cursor));
    return st;
}

/* Sort, reject duplicates, attach "par.crc32.<name>" checksums to their tensors. */
static par_status par__st_index(par_st_file *f) {
    int i, k;
    if (f->count) qsort(f->tensors, (size_t)f->count, sizeof *f->tensors, par__st_cmp_tensor_name);
    if (f->meta_count) qsort(f->meta, (size_t)f->meta_count, sizeof *f->meta, par__st_cmp_meta_key);
    for (i = 1; i < f->count; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            return par__st_open_fail(f->path, PAR_EPARSE, "tensor \"%.100s\" appears twice", f->tensors[i].name);
    for (i = 1; i < f->meta_count; i++)
        if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0)
            return par__st_open_fail(f->path, PAR_EPARSE, "__metadata__ key \"%.100s\" appears twice", f->meta[i].key);
    for (i = 0; i < f->meta_count; i++) {
        const char *key = f->meta[i].key, *v = f->meta[i].value;
        par_st_tensor *t;
        uint32_t crc = 0;
        if (strncmp(key, PAR__ST_CRC_PREFIX, PAR__ST_CRC_PREFIX_LEN) != 0) continue;
        for (k = 0; k < 8; k++) {
            unsigned c = (unsigned char)v[k], d;
            if (c >= '0' && c <= '9') d = c - '0';
            else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
            else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
            else break;
            crc = crc << 4 | d;
        }
        if (k < 8 || v[8])
            return par__st_open_fail(f->path, PAR_EPARSE,
                                     "__metadata__ \"%.100s\" is \"%.40s\", not 8 hex digits (a CRC-32)", key, v);
        t = (par_st_tensor *)par_st_find(f, key + PAR__ST_CRC_PREFIX_LEN);
        if (t) { /* a checksum for a tensor the file lacks is ignored */
            t->has_checksum = 1;
            t->checksum = crc;
        }
    }
    return PAR_OK;
}

PARALLEL_DEF void par_st_close(par_st_file *file) {
    if (!file) return;
    par__st_io_close(&file->io);
    PARALLEL_FREE(file->path);
    PARALLEL_FREE(file->strings);
    PARALLEL_FREE(file->tensors);
    PARALLEL_FREE(file->meta);
    PARALLEL_FREE(file);
}

/* Read the length field and the header, parse and validate. */
static par_status par__st_load(par_st_file *f, uint64_t size) {
    unsigned char len8[8], *header;
    uint64_t hlen = 0;
    size_t got;
    const char *why;
    par__st_parser ps;
    par_status st;
    int i;
    if (size == 0)
        return par__st_open_fail(f->path, PAR_EIO,
                                 "the file is empty (a safetensors file starts with an 8-byte header length)");
    if (size < 8)
        return par__st_open_fail(f->path, PAR_EIO, "the file has %llu bytes, fewer than the 8-byte header length",
                                 (unsigned long long)size);
    if ((why = par__st_io_read_at(&f->io, 0, len8, 8, &got)) != NULL || got != 8)
        return par__st_open_fail(f->path, PAR_EIO, "cannot read the header length (%s)", why ? why : "short read");
    for (i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen == 0)
        return par__st_open_fail(f->path, PAR_EPARSE, "the header length is 0 (the header must be a JSON object)");
    if (hlen > PAR__ST_MAX_HEADER)
        return par__st_open_fail(f->path, PAR_EPARSE,
                                 "the header length %llu exceeds the %llu-byte limit (not a safetensors file?)",
                                 (unsigned long long)hlen, PAR__ST_MAX_HEADER);
    if (hlen > size - 8)
        return par__st_open_fail(f->path, PAR_EIO,
                                 "the header length says %llu bytes but only %llu follow (truncated file?)",
                                 (unsigned long long)hlen, (unsigned long long)(size - 8));
    f->data_start = 8 + hlen;
    f->data_size = size - f->data_start;
    header = (unsigned char *)PARALLEL_MALLOC((size_t)hlen);
    f->strings = (char *)PARALLEL_MALLOC((size_t)hlen + 1);
    if (!header || !f->strings) {
        PARALLEL_FREE(header);
        return par__st_open_fail(f->path, PAR_ENOMEM, "out of memory for a %llu-byte header", (unsigned long long)hlen);
    }
    if ((why = par__st_io_read_at(&f->io, 8, header, (size_t)hlen, &got)) != NULL || got != hlen) {
        PARALLEL_FREE(header);
        return par__st_open_fail(f->path, PAR_EIO, "cannot read the header (%s)", why ? why : "short read");
    }
    ps.f = f;
    ps.begin = ps.p = header;
    ps.end = header + hlen;
    ps.out = f->strings;
    st = par__st_parse_header(&ps);
    PARALLEL_FREE(header);
    if (st != PAR_OK) return st;
    if ((st = par__st_index(f)) != PAR_OK) return st;
    return par__st_check_coverage(f);
}

PARALLEL_DEF par_status par_st_open(const char *path, par_st_file **file) {
    par_st_file *f;
    uint64_t size = 0;
    const char *why;
    par_status st;
    if (file) *file = NULL;
    if (!path || !file) return par__fail(PAR_EINVAL, "par_st_open: NULL argument");
    if (!par__st_host_is_little_endian())
        return par__fail(PAR_EUNSUPPORTED, "par_st_open: %.200s: big-endian hosts are not supported", path);
    f = (par_st_file *)PARALLEL_MALLOC(sizeof *f);
    if (!f) return par__fail(PAR_ENOMEM, "par_st_open: %.200s: out of memory", path);
    memset(f, 0, sizeof *f);
    par__st_io_init(&f->io);
    if (!(f->path = par__st_strdup(path))) {
        PARALLEL_FREE(f);
        return par__fail(PAR_ENOMEM, "par_st_open: %.200s: out of memory", path);
    }
    par__st_crc_init(&f->crc);
    if ((why = par__st_io_open_read(&f->io, path, &size)) != NULL) {
        st = par__st_open_fail(path, PAR_EIO, "cannot open (%s)", why);
    } else {
        st = par__st_load(f, size);
    }
    if (st != PAR_OK) {
        par_st_close(f);
        return st;
    }
    *file = f;
    return PAR_OK;
}

PARALLEL_DEF int par_st_count(const par_st_file *file) { return file ? file->count : 0; }

PARALLEL_DEF const par_st_tensor *par_st_tensor_at(const par_st_file *file, int index) {
    return file && index >= 0 && index < file->count ? &file->tensors[index] : NULL;
}

PARALLEL_DEF const par_st_tensor *par_st_find(const par_st_file *file, const char *name) {
    int lo = 0, hi;
    if (!file || !name) return NULL;
    hi = file->count;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(file->tensors[mid].name, name);
        if (c == 0) return &file->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

PARALLEL_DEF const char *par_st_metadata(const par_st_file *file, const char *key) {
    int lo = 0, hi;
    if (!file || !key) return NULL;
    hi = file->meta_count;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(file->meta[mid].key, key);
        if (c == 0) return file->meta[mid].value;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

PARALLEL_DEF int par_st_metadata_count(const par_st_file *file) { return file ? file->meta_count : 0; }

PARALLEL_DEF par_status par_st_metadata_at(const par_st_file *file, int index, const char **key, const char **value) {
    if (!file || !key || !value) return par__fail(PAR_EINVAL, "par_st_metadata_at: NULL argument");
    if (index < 0 || index >= file->meta_count)
        return par__fail(PAR_EINVAL, "par_st_metadata_at: index %d is outside the %d metadata entries", index,
                         file->meta_count);
    *key = file->meta[index].key;
    *value = file->meta[index].value;
    return PAR_OK;
}

/* Convert n elements between float dtypes (to nearest even; via f32 for 16-bit targets). */
static void par__st_convert(void *dst, par_dtype to, const void *src, par_dtype from, size_t n) {
    const unsigned char *s = (const unsigned char *)src;
    unsigned char *d = (unsigned char *)dst;
    size_t i, se = par_dtype_size(from), de = par_dtype_size(to);
    if (to == PAR_F32 && from == PAR_BF16) { /* the common load: 16-bit weights into f32 */
        for (i = 0; i < n; i++) {
            uint16_t h;
            uint32_t u;
            memcpy(&h, s + 2 * i, 2);
            u = (uint32_t)h << 16;
            memcpy(d + 4 * i, &u, 4);
        }
        return;
    }
    if (to == PAR_F32 && from == PAR_F16) {
        for (i = 0; i < n; i++) {
            uint16_t h;
            float f;
            memcpy(&h, s + 2 * i, 2);
            f = par__f16_to_f32(h);
            memcpy(d + 4 * i, &f, 4);
        }
        return;
    }
    for (i = 0; i < n; i++) {
        double v = 0;
        float f;
        uint16_t h;
        switch (from) {
        case PAR_F32:
            memcpy(&f, s + i * se, 4);
            v = f;
            break;
        case PAR_F64: memcpy(&v, s + i * se, 8); break;
        case PAR_BF16:
            memcpy(&h, s + i * se, 2);
            v = par__bf16_to_f32(h);
            break;
        case PAR_F16:
            memcpy(&h, s + i * se, 2);
            v = par__f16_to_f32(h);
            break;
        default: break;
        }
        switch (to) {
        case PAR_F32:
            f = (float)v;
            memcpy(d + i * de, &f, 4);
            break;
        case PAR_F64: memcpy(d + i * de, &v, 8); break;
        case PAR_BF16:
            h = par__f32_to_bf16((float)v);
            memcpy(d + i * de, &h, 2);
            break;
        case PAR_F16:
            h = par__f32_to_f16((float)v);
            memcpy(d + i * de, &h, 2);
            break;
        default: break;
        }
    }
}

/* Read raw bytes at a data-section offset; a short read means the file shrank. */
static par_status par__st_read_raw(par_st_file *f, const char *fn, const par_st_tensor *t, uint64_t offset, void *buf,
                                   size_t n) {
    size_t got;
    const char *why = par__st_io_read_at(&f->io, f->data_start + offset, buf, n, &got);
    if (why) return par__fail(PAR_EIO, "%s: %.200s: cannot read tensor \"%.100s\" (%s)", fn, f->path, t->name, why);
    if (got != n)
        return par__fail(PAR_EIO, "%s: %.200s: the file ends inside tensor \"%.100s\" (truncated after opening?)", fn,
                         f->path, t->name);
    return PAR_OK;
}

static par_status par__st_checksum_mismatch(const char *fn, const par_st_file *f, const par_st_tensor *t,
                                            uint32_t got) {
    return par__fail(PAR_EIO,
                     "%s: %.200s: checksum mismatch in tensor \"%.100s\" (the file says %08lx, the data has %08lx)", fn,
                     f->path, t->name, (unsigned long)t->checksum, (unsigned long)got);
}

PARALLEL_DEF par_status par_st_read(par_st_file *file, const char *name, int ndim, const int64_t *shape, int64_t first,
                                    int64_t count, par_dtype dtype, void *dst) {
    const par_st_tensor *t;
    size_t se, de, bytes;
    uint32_t crc = 0xffffffffu;
    int whole, i;
    par_status st;
    if (!file || !name) return par__fail(PAR_EINVAL, "par_st_read: NULL argument");
    if (!(t = par_st_find(file, name)))
        return par__fail(PAR_EINVAL, "par_st_read: %.200s: no tensor \"%.100s\" in the file", file->path, name);
    if (shape) {
        int same = ndim == t->ndim;
        for (i = 0; same && i < ndim; i++) same = shape[i] == t->shape[i];
        if (!same) {
            char have[200], want[200];
            par__shape_text(have, sizeof have, t->ndim, t->shape);
            if (ndim < 0 || ndim > PARALLEL_MAX_DIMS) snprintf(want, sizeof want, "%d dims", ndim);
            else par__shape_text(want, sizeof want, ndim, shape);
            return par__fail(PAR_ESHAPE, "par_st_read: %.200s: tensor \"%.100s\" has shape %s, expected %s", file->path,
                             name, have, want);
        }
    }
    if ((unsigned)dtype >= PAR_DTYPE_COUNT) return par__fail(PAR_EINVAL, "par_st_read: unknown dtype %d", (int)dtype);
    if (dtype != t->dtype && !(par__st_is_float(dtype) && par__st_is_float(t->dtype)))
        return par__fail(PAR_EINVAL,
                         "par_st_read: %.200s: tensor \"%.100s\" is %s and cannot be read as %s (integer tensors read "
                         "only as themselves)",
                         file->path, name, par_dtype_name(t->dtype), par_dtype_name(dtype));
    if (first < 0 || count < 0 || first > t->numel || count > t->numel - first)
        return par__fail(
            PAR_EINVAL,
            "par_st_read: %.200s: elements [%lld, %lld + %lld) are outside tensor \"%.100s\" (%lld elements)",
            file->path, (long long)first, (long long)first, (long long)count, name, (long long)t->numel);
    if (count == 0) return PAR_OK;
    if (!dst) return par__fail(PAR_EINVAL, "par_st_read: NULL dst");
    se = par_dtype_size(t->dtype);
    de = par_dtype_size(dtype);
    if ((uint64_t)count > (uint64_t)SIZE_MAX / (se > de ? se : de))
        return par__fail(PAR_EINVAL, "par_st_read: %.200s: %lld elements do not fit in memory on this system",
                         file->path, (long long)count);
    bytes = (size_t)count * se;
    whole = t->has_checksum && first == 0 && count == t->numel;
    if (dtype == t->dtype) {
        if ((st = par__st_read_raw(file, "par_st_read", t, t->offset + (uint64_t)first * se, dst, bytes)) != PAR_OK)
            return st;
        if (whole) crc = par__st_crc_update(&file->crc, crc, dst, bytes);
    } else {
        size_t per = PAR__ST_CHUNK / se, done = 0, n;
        unsigned char *tmp = (unsigned char *)PARALLEL_MALLOC((size_t)count < per ? bytes : per * se);
        if (!tmp) return par__fail(PAR_ENOMEM, "par_st_read: out of memory for a conversion buffer");
        for (done = 0; done < (size_t)count; done += n) {
            n = (size_t)count - done < per ? (size_t)count - done : per;
            st = par__st_read_raw(file, "par_st_read", t, t->offset + ((uint64_t)first + done) * se, tmp, n * se);
            if (st != PAR_OK) {
                PARALLEL_FREE(tmp);
                return st;
            }
            if (whole) crc = par__st_crc_update(&file->crc, crc, tmp, n * se);
            par__st_convert((unsigned char *)dst + done * de, dtype, tmp, t->dtype, n);
        }
        PARALLEL_FREE(tmp);
    }
    if (whole && (crc ^ 0xffffffffu) != t->checksum)
        return par__st_checksum_mismatch("par_st_read", file, t, crc ^ 0xffffffffu);
    return PAR_OK;
}

PARALLEL_DEF par_status par_st_read_slice(par_st_file *file, const char *name, const par_layout *layout, int rank,
                                          par_dtype dtype, void *dst) {
    const par_st_tensor *t;
    int64_t shape[PARALLEL_MAX_DIMS], off[PARALLEL_MAX_DIMS], idx[PARALLEL_MAX_DIMS] = {0}, run, runs = 1, r, first;
    char want[96], got[96];
    size_t elem = par_dtype_size(dtype);
    int d, inner, status;
    if (!file || !name || !layout || (!dst && par_layout_local_numel(layout) > 0))
        return par__fail(PAR_EINVAL, "par_st_read_slice: NULL argument");
    if (!elem) return par__fail(PAR_EINVAL, "par_st_read_slice: unknown dtype %d", (int)dtype);
    if ((status = par_layout_check(layout)) != PAR_OK) return (par_status)status;
    if (!(t = par_st_find(file, name))) return par__fail(PAR_EINVAL, "par_st_read_slice: no tensor \"%s\"", name);
    if (t->ndim != layout->ndim || memcmp(t->shape, layout->shape, (size_t)layout->ndim * sizeof(int64_t)) != 0) {
        par__shape_text(want, sizeof want, layout->ndim, layout->shape);
        par__shape_text(got, sizeof got, t->ndim, t->shape);
        return par__fail(PAR_ESHAPE, "par_st_read_slice: tensor \"%s\" has shape %s, the layout %s", name, got, want);
    }
    par_layout_local_shape(layout, shape);
    PAR__CHECK(par_layout_local_offset(layout, rank, off));
    /* runs: the innermost dims the slice covers whole merge into one */
    inner = layout->ndim - 1;
    run = layout->ndim ? shape[inner] : 1;
    while (inner > 0 && shape[inner] == layout->shape[inner]) inner--, run *= shape[inner];
    for (d = 0; d < inner; d++) runs *= shape[d];
    for (r = 0; r < runs; r++) {
        int64_t stride = 1;
        first = 0;
        for (d = layout->ndim - 1; d >= 0; d--) {
            first += (off[d] + (d < inner ? idx[d] : 0)) * stride;
            stride *= layout->shape[d];
        }
        PAR__CHECK(par_st_read(file, name, 0, NULL, first, run, dtype, (char *)dst + (size_t)(r * run) * elem));
        for (d = inner - 1; d >= 0; d--) { /* next run: odometer over the outer dims */
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_st_verify(par_st_file *file, int *checked) {
    unsigned char *buf;
    par_status st = PAR_OK;
    int i, n = 0;
    if (checked) *checked = 0;
    if (!file) return par__fail(PAR_EINVAL, "par_st_verify: NULL argument");
    buf = (unsigned char *)PARALLEL_MALLOC(PAR__ST_CHUNK);
    if (!buf) return par__fail(PAR_ENOMEM, "par_st_verify: out of memory");
    for (i = 0; i < file->count && st == PAR_OK; i++) {
        const par_st_tensor *t = &file->tensors[i];
        uint32_t crc = 0xffffffffu;
        uint64_t done = 0;
        if (!t->has_checksum) continue;
        while (done < t->nbytes && st == PAR_OK) {
            size_t step = t->nbytes - done < PAR__ST_CHUNK ? (size_t)(t->nbytes - done) : PAR__ST_CHUNK;
            st = par__st_read_raw(file, "par_st_verify", t, t->offset + done, buf, step);
            crc = par__st_crc_update(&file->crc, crc, buf, step);
            done += step;
        }
        if (st == PAR_OK && (crc ^ 0xffffffffu) != t->checksum)
            st = par__st_checksum_mismatch("par_st_verify", file, t, crc ^ 0xffffffffu);
        n += st == PAR_OK;
    }
    PARALLEL_FREE(buf);
    if (checked) *checked = n;
    return st;
}

/* ---- the writer ---- */

typedef struct par__st_wtensor {
    char *name;
    par_dtype dtype;
    int ndim;
    int64_t shape[PARALLEL_MAX_DIMS];
    uint64_t nbytes, offset; /* offset: in the data section, set when the header is made */
    const void *data;        /* NULL: streamed with par_st_writer_write */
    uint64_t written;        /* bytes streamed so far */
    uint32_t crc;            /* running CRC state */
    size_t crc_at;           /* where its 8 hex digits sit in the header text */
} par__st_wtensor;

typedef struct par__st_kv {
    char *key, *value;
} par__st_kv;

/* A growing text buffer; `failed` latches an allocation failure. */
typedef struct par__st_text {
    char *p;
    size_t len, cap;
    int failed;
} par__st_text;

struct par_st_writer {
    char *path, *tmp;
    par__st_io io;
    par__st_wtensor *t;
    int count, cap;
    par__st_kv *meta;
    int meta_count, meta_cap;
    int begun;            /* layout fixed, header written: no more add/metadata */
    par_status broken;    /* a failure that lost the save: every later call reports it */
    char broken_why[300]; /* ...with this sentence */
    par__st_text header;  /* JSON with padding (checksum digits patched at finish) */
    uint64_t data_start;
    par__st_crc_table crc;
};

static void par__st_text_add(par__st_text *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;
        while (cap < b->len + n + 1) cap *= 2;
        if (!(p = (char *)PARALLEL_REALLOC(b->p, cap))) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void par__st_text_str(par__st_text *b, const char *s) { par__st_text_add(b, s, strlen(s)); }

static void par__st_text_u64(par__st_text *b, uint64_t v) {
    char s[24];
    snprintf(s, sizeof s, "%llu", (unsigned long long)v);
    par__st_text_str(b, s);
}

/* The JSON string of prefix (plain ASCII) + s: quotes, backslashes and control
   bytes escaped; UTF-8 as is. */
static void par__st_text_json(par__st_text *b, const char *prefix, const char *s) {
    par__st_text_add(b, "\"", 1);
    par__st_text_str(b, prefix);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            par__st_text_add(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            par__st_text_add(b, esc, 6);
        } else {
            par__st_text_add(b, s, 1);
        }
    }
    par__st_text_add(b, "\"", 1);
}

/* Remember a failure that makes the save impossible, and return it. */
static par_status par__st_writer_break(par_st_writer *w, par_status st) {
    w->broken = st;
    par__copy_text(w->broken_why, sizeof w->broken_why, par_last_error());
    return st;
}

static par_status par__st_writer_broken(const par_st_writer *w, const char *fn) {
    return par__fail(w->broken, "%s: %.200s: an earlier call failed: %s", fn, w->path, w->broken_why);
}

static void par__st_writer_free(par_st_writer *w) {
    int i;
    if (par__st_io_is_open(&w->io)) par__st_io_close(&w->io);
    if (w->tmp) remove(w->tmp);
    for (i = 0; i < w->count; i++) PARALLEL_FREE(w->t[i].name);
    for (i = 0; i < w->meta_count; i++) {
        PARALLEL_FREE(w->meta[i].key);
        PARALLEL_FREE(w->meta[i].value);
    }
    PARALLEL_FREE(w->t);
    PARALLEL_FREE(w->meta);
    PARALLEL_FREE(w->header.p);
    PARALLEL_FREE(w->tmp);
    PARALLEL_FREE(w->path);
    PARALLEL_FREE(w);
}

PARALLEL_DEF par_status par_st_writer_create(const char *path, par_st_writer **writer) {
    par_st_writer *w;
    size_t n;
    const char *why;
    if (writer) *writer = NULL;
    if (!path || !writer) return par__fail(PAR_EINVAL, "par_st_writer_create: NULL argument");
    if (!path[0]) return par__fail(PAR_EINVAL, "par_st_writer_create: empty path");
    if (!par__st_host_is_little_endian())
        return par__fail(PAR_EUNSUPPORTED, "par_st_writer_create: %.200s: big-endian hosts are not supported", path);
    w = (par_st_writer *)PARALLEL_MALLOC(sizeof *w);
    if (!w) return par__fail(PAR_ENOMEM, "par_st_writer_create: out of memory");
    memset(w, 0, sizeof *w);
    par__st_io_init(&w->io);
    n = strlen(path) + 64;
    w->path = par__st_strdup(path);
    w->tmp = (char *)PARALLEL_MALLOC(n);
    if (!w->path || !w->tmp) {
        par__st_writer_free(w);
        return par__fail(PAR_ENOMEM, "par_st_writer_create: out of memory");
    }
    if ((why = par__st_create_temp(&w->io, path, w->tmp, n)) != NULL) {
        par_status st = par__fail(PAR_EIO, "par_st_writer_create: %.200s: cannot create the temporary file %.200s (%s)",
                                  path, w->tmp, why);
        PARALLEL_FREE(w->tmp);
        w->tmp = NULL; /* nothing of ours to remove */
        par__st_writer_free(w);
        return st;
    }
    par__st_crc_init(&w->crc);
    *writer = w;
    return PAR_OK;
}

PARALLEL_DEF par_status par_st_writer_add(par_st_writer *w, const char *name, par_dtype dtype, int ndim,
                                          const int64_t *shape, const void *data) {
    par__st_wtensor *t;
    uint64_t numel = 1;
    int i;
    if (!w || !name || (ndim > 0 && !shape)) return par__fail(PAR_EINVAL, "par_st_writer_add: NULL argument");
    if (w->begun)
        return par__fail(PAR_EINVAL, "par_st_writer_add: %.200s: tensor \"%.100s\" added after streaming began",
                         w->path, name);
    if (strcmp(name, "__metadata__") == 0 || !par__st_valid_utf8(name))
        return par__fail(PAR_EINVAL, "par_st_writer_add: %.200s: \"%.100s\" cannot be a tensor name (%s)", w->path,
                         name, name[0] == '_' ? "reserved for the metadata" : "not valid UTF-8");
    if ((unsigned)dtype >= PAR_DTYPE_COUNT)
        return par__fail(PAR_EINVAL, "par_st_writer_add: %.200s: tensor \"%.100s\" has unknown dtype %d", w->path, name,
                         (int)dtype);
    if (ndim < 0 || ndim > PARALLEL_MAX_DIMS)
        return par__fail(PAR_EINVAL, "par_st_writer_add: %.200s: tensor \"%.100s\" has %d dims (0..%d allowed)",
                         w->path, name, ndim, PARALLEL_MAX_DIMS);
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return par__fail(PAR_EINVAL, "par_st_writer_add: %.200s: tensor \"%.100s\" dim %d is negative (%lld)",
                             w->path, name, i, (long long)shape[i]);
        if (shape[i] && numel > (uint64_t)INT64_MAX / 8 / (uint64_t)shape[i])
            return par__fail(PAR_EINVAL, "par_st_writer_add: %.200s: tensor \"%.100s\" is larger than 2^63 bytes",
                             w->path, name);
        numel *= (uint64_t)shape[i];
    }
    if (w->count == w->cap) {
        int cap = w->cap ? w->cap * 2 : 64;
        par__st_wtensor *p = (par__st_wtensor *)PARALLEL_REALLOC(w->t, (size_t)cap * sizeof *p);
        if (!p) return par__fail(PAR_ENOMEM, "par_st_writer_add: out of memory");
        w->t = p;
        w->cap = cap;
    }
    t = &w->t[w->count];
    memset(t, 0, sizeof *t);
    if (!(t->name = par__st_strdup(name))) return par__fail(PAR_ENOMEM, "par_st_writer_add: out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    for (i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = numel * par_dtype_size(dtype);
    t->data = data;
    t->crc = 0xffffffffu;
    w->count++;
    return PAR_OK;
}

PARALLEL_DEF par_status par_st_writer_metadata(par_st_writer *w, const char *key, const char *value) {
    char *k, *v;
    int i;
    if (!w || !key || !value) return par__fail(PAR_EINVAL, "par_st_writer_metadata: NULL argument");
    if (w->begun)
        return par__fail(PAR_EINVAL, "par_st_writer_metadata: %.200s: key \"%.100s\" set after streaming began",
                         w->path, key);
    if (strncmp(key, PAR__ST_CRC_PREFIX, PAR__ST_CRC_PREFIX_LEN) == 0)
        return par__fail(PAR_EINVAL,
                         "par_st_writer_metadata: %.200s: keys starting with \"" PAR__ST_CRC_PREFIX
                         "\" are reserved for checksums (\"%.100s\")",
                         w->path, key);
    if (!par__st_valid_utf8(key) || !par__st_valid_utf8(value))
        return par__fail(PAR_EINVAL, "par_st_writer_metadata: %.200s: key \"%.100s\" or its value is not valid UTF-8",
                         w->path, key);
    if (!(v = par__st_strdup(value))) return par__fail(PAR_ENOMEM, "par_st_writer_metadata: out of memory");
    for (i = 0; i < w->meta_count; i++) {
        if (strcmp(w->meta[i].key, key) == 0) {
            PARALLEL_FREE(w->meta[i].value);
            w->meta[i].value = v;
            return PAR_OK;
        }
    }
    if (w->meta_count == w->meta_cap) {
        int cap = w->meta_cap ? w->meta_cap * 2 : 16;
        par__st_kv *p = (par__st_kv *)PARALLEL_REALLOC(w->meta, (size_t)cap * sizeof *p);
        if (!p) {
            PARALLEL_FREE(v);
            return par__fail(PAR_ENOMEM, "par_st_writer_metadata: out of memory");
        }
        w->meta = p;
        w->meta_cap = cap;
    }
    if (!(k = par__st_strdup(key))) {
        PARALLEL_FREE(v);
        return par__fail(PAR_ENOMEM, "par_st_writer_metadata: out of memory");
    }
    w->meta[w->meta_count].key = k;
    w->meta[w->meta_count++].value = v;
    return PAR_OK;
}

static int par__st_cmp_wtensor(const void *a, const void *b) {
    return strcmp(((const par__st_wtensor *)a)->name, ((const par__st_wtensor *)b)->name);
}

static int par__st_cmp_kv(const void *a, const void *b) {
    return strcmp(((const par__st_kv *)a)->key, ((const par__st_kv *)b)->key);
}

/* Fix the layout: sort, assign offsets, build the header (checksums as
   placeholders) and write it. */
static par_status par__st_writer_layout(par_st_writer *w, const char *fn) {
    par__st_text *h = &w->header;
    uint64_t offset = 0;
    unsigned char len8[8];
    const char *why;
    int i, first = 1;
    if (w->count) qsort(w->t, (size_t)w->count, sizeof *w->t, par__st_cmp_wtensor);
    if (w->meta_count) qsort(w->meta, (size_t)w->meta_count, sizeof *w->meta, par__st_cmp_kv);
    for (i = 0; i < w->count; i++) {
        if (i && strcmp(w->t[i - 1].name, w->t[i].name) == 0)
            return par__fail(PAR_EINVAL, "%s: %.200s: tensor \"%.100s\" was added twice", fn, w->path, w->t[i].name);
        if (w->t[i].nbytes > (uint64_t)INT64_MAX - offset)
            return par__fail(PAR_EINVAL, "%s: %.200s: the tensors add up to more than 2^63 bytes", fn, w->path);
        w->t[i].offset = offset;
        offset += w->t[i].nbytes;
    }
    /* __metadata__ first (user keys sorted, then the checksums in tensor order), then the tensors */
    par__st_text_str(h, "{");
    if (w->meta_count || w->count) {
        par__st_text_str(h, "\"__metadata__\":{");
        for (i = 0; i < w->meta_count; i++, first = 0) {
            if (!first) par__st_text_str(h, ",");
            par__st_text_json(h, "", w->meta[i].key);
            par__st_text_str(h, ":");
            par__st_text_json(h, "", w->meta[i].value);
        }
        for (i = 0; i < w->count; i++, first = 0) {
            if (!first) par__st_text_str(h, ",");
            par__st_text_json(h, PAR__ST_CRC_PREFIX, w->t[i].name);
            par__st_text_str(h, ":\"");
            w->t[i].crc_at = h->len;
            par__st_text_str(h, "00000000\"");
        }
        par__st_text_str(h, "}");
    }
    for (i = 0; i < w->count; i++) {
        const par__st_wtensor *t = &w->t[i];
        int d;
        par__st_text_str(h, ",");
        par__st_text_json(h, "", t->name);
        par__st_text_str(h, ":{\"dtype\":\"");
        par__st_text_str(h, par__st_dtype_tags[t->dtype]);
        par__st_text_str(h, "\",\"shape\":[");
        for (d = 0; d < t->ndim; d++) {
            if (d) par__st_text_str(h, ",");
            par__st_text_u64(h, (uint64_t)t->shape[d]);
        }
        par__st_text_str(h, "],\"data_offsets\":[");
        par__st_text_u64(h, t->offset);
        par__st_text_str(h, ",");
        par__st_text_u64(h, t->offset + t->nbytes);
        par__st_text_str(h, "]}");
    }
    par__st_text_str(h, "}");
    while (h->len % 8) par__st_text_str(h, " "); /* the data starts 8-byte aligned */
    if (h->failed) return par__fail(PAR_ENOMEM, "%s: out of memory for the header", fn);
    if (h->len > PAR__ST_MAX_HEADER)
        return par__fail(PAR_EINVAL, "%s: %.200s: the header would be %llu bytes, over the safetensors limit of %llu",
                         fn, w->path, (unsigned long long)h->len, PAR__ST_MAX_HEADER);
    for (i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h->len >> (8 * i));
    w->data_start = 8 + (uint64_t)h->len;
    if ((why = par__st_io_write_at(&w->io, 0, len8, 8)) != NULL ||
        (why = par__st_io_write_at(&w->io, 8, h->p, h->len)) != NULL)
        return par__fail(PAR_EIO, "%s: %.200s: cannot write the header to %.200s (%s)", fn, w->path, w->tmp, why);
    return PAR_OK;
}

/* By the first stream write or by finish; a failure here loses the save. */
static par_status par__st_writer_begin(par_st_writer *w, const char *fn) {
    par_status st;
    w->begun = 1;
    return (st = par__st_writer_layout(w, fn)) == PAR_OK ? PAR_OK : par__st_writer_break(w, st);
}

/* Append bytes to tensor t at its write position, updating its checksum. */
static par_status par__st_writer_put(par_st_writer *w, const char *fn, par__st_wtensor *t, const void *data,
                                     uint64_t n) {
    const unsigned char *p = (const unsigned char *)data;
    while (n) {
        size_t step = n < PAR__ST_CHUNK ? (size_t)n : PAR__ST_CHUNK;
        const char *why = par__st_io_write_at(&w->io, w->data_start + t->offset + t->written, p, step);
        if (why)
            return par__st_writer_break(w,
                                        par__fail(PAR_EIO, "%s: %.200s: cannot write tensor \"%.100s\" to %.200s (%s)",
                                                  fn, w->path, t->name, w->tmp, why));
        t->crc = par__st_crc_update(&w->crc, t->crc, p, step);
        t->written += step;
        p += step;
        n -= step;
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_st_writer_write(par_st_writer *w, const char *name, const void *data, int64_t count) {
    par__st_wtensor key, *t;
    uint64_t bytes;
    par_status st;
    if (!w || !name || (!data && count > 0)) return par__fail(PAR_EINVAL, "par_st_writer_write: NULL argument");
    if (w->broken) return par__st_writer_broken(w, "par_st_writer_write");
    if (!w->begun && (st = par__st_writer_begin(w, "par_st_writer_write")) != PAR_OK) return st;
    key.name = (char *)name;
    t = w->count ? (par__st_wtensor *)bsearch(&key, w->t, (size_t)w->count, sizeof *w->t, par__st_cmp_wtensor) : NULL;
    if (!t) return par__fail(PAR_EINVAL, "par_st_writer_write: %.200s: no tensor \"%.100s\" was added", w->path, name);
    if (t->data)
        return par__fail(PAR_EINVAL,
                         "par_st_writer_write: %.200s: tensor \"%.100s\" was added with its data, not for streaming",
                         w->path, name);
    bytes = (uint64_t)(count < 0 ? 0 : count) * par_dtype_size(t->dtype);
    if (count < 0 || (uint64_t)count > t->nbytes / par_dtype_size(t->dtype) || bytes > t->nbytes - t->written)
        return par__fail(PAR_EINVAL,
                         "par_st_writer_write: %.200s: %lld more elements would overflow tensor \"%.100s\" "
                         "(%llu of %llu bytes written)",
                         w->path, (long long)count, name, (unsigned long long)t->written,
                         (unsigned long long)t->nbytes);
    return par__st_writer_put(w, "par_st_writer_write", t, data, bytes);
}

/* Everything finish does before freeing the writer. */
static par_status par__st_writer_complete(par_st_writer *w) {
    const char *fn = "par_st_writer_finish", *why;
    par_status st;
    int i;
    if (w->broken) return par__st_writer_broken(w, fn);
    if (!w->begun && (st = par__st_writer_begin(w, fn)) != PAR_OK) return st;
    for (i = 0; i < w->count; i++) {
        par__st_wtensor *t = &w->t[i];
        char hex[9];
        if (t->data && (st = par__st_writer_put(w, fn, t, t->data, t->nbytes)) != PAR_OK) return st;
        if (t->written != t->nbytes)
            return par__fail(PAR_EINVAL,
                             "%s: %.200s: streamed tensor \"%.100s\" is incomplete (%llu of %llu bytes written)", fn,
                             w->path, t->name, (unsigned long long)t->written, (unsigned long long)t->nbytes);
        snprintf(hex, sizeof hex, "%08lx", (unsigned long)(t->crc ^ 0xffffffffu));
        memcpy(w->header.p + t->crc_at, hex, 8);
    }
    if ((why = par__st_io_write_at(&w->io, 8, w->header.p, w->header.len)) != NULL)
        return par__fail(PAR_EIO, "%s: %.200s: cannot write the header to %.200s (%s)", fn, w->path, w->tmp, why);
    if ((why = par__st_io_sync_close(&w->io)) != NULL)
        return par__fail(PAR_EIO, "%s: %.200s: cannot flush %.200s to disk (%s)", fn, w->path, w->tmp, why);
    if ((why = par__st_replace(w->tmp, w->path)) != NULL)
        return par__fail(PAR_EIO, "%s: %.200s: cannot rename %.200s over it (%s); the old file is unchanged", fn,
                         w->path, w->tmp, why);
    PARALLEL_FREE(w->tmp);
    w->tmp = NULL; /* renamed: nothing to remove */
    par__st_sync_dir(NULL, w->path);
    return PAR_OK;
}

PARALLEL_DEF par_status par_st_writer_finish(par_st_writer *w) {
    par_status st;
    if (!w) return par__fail(PAR_EINVAL, "par_st_writer_finish: NULL argument");
    st = par__st_writer_complete(w);
    par__st_writer_free(w);
    return st;
}

PARALLEL_DEF void par_st_writer_abort(par_st_writer *w) {
    if (w) par__st_writer_free(w);
}

#endif /* PARALLEL_NO_CHECKPOINT */

// >>trace
/* PARALLEL_NO_TRACE leaves this whole section out. Code in any other section
   that calls par_trace_* (sections appended after this one included) must be
   inside `#ifndef PARALLEL_NO_TRACE` as well: tests/conventions.sh compiles the
   header with the macro, so a call outside the guard fails the build there. */
#ifndef PARALLEL_NO_TRACE

#include <time.h>

/* A span as stored, sent between ranks and written: fixed size (a multiple
   of 8 bytes, sent as i64 elements), names inline. Besides spans, the writers
   describe a rank with one PROCESS record (name = process name, value =
   dropped spans, aux = capacity) and one CATEGORY record per category
   (name = category, tid = its track base). */
enum { PAR__TRACE_SPAN = 0, PAR__TRACE_PROCESS = 1, PAR__TRACE_CATEGORY = 2 };
#define PAR__TRACE_SUBTRACKS 8 /* tracks per category: tid = category * 8 + k */

typedef struct par__trace_rec {
    double t0, t1;    /* microseconds on the trace clock */
    int64_t value;    /* PROCESS: dropped spans */
    int64_t aux;      /* PROCESS: capacity */
    int32_t pid, tid; /* tid: category index * PAR__TRACE_SUBTRACKS (track chosen at write time) */
    int32_t kind, reserved;
    char name[PAR_TRACE_NAME_MAX];
    char cat[PAR_TRACE_CATEGORY_MAX];
} par__trace_rec;

/* compile-time check: records travel as whole i64 elements */
typedef char par__trace_rec_size_check[(sizeof(par__trace_rec) % 8 == 0) ? 1 : -1];

typedef struct par__trace_open {
    double t0;
    int category;
    char name[PAR_TRACE_NAME_MAX];
} par__trace_open;

struct par_trace {
    int rank, capacity;
    char process_name[PAR_TRACE_NAME_MAX];
    par__trace_rec *recs;
    int64_t count, allocated, dropped;
    par__trace_open stack[PAR_TRACE_MAX_DEPTH];
    int depth, overflow_depth; /* overflow_depth: begins beyond the stack, dropped */
    int num_categories;
    char categories[PAR_TRACE_MAX_CATEGORIES][PAR_TRACE_CATEGORY_MAX];
    char misuse[160]; /* the first misuse, reported again by the writers */
};

PARALLEL_DEF double par_trace_now_us(void) {
    struct timespec ts;
#ifdef CLOCK_MONOTONIC
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Copy whole UTF-8 characters of src that fit (invalid bytes become '?'), so
   a cut name is still valid UTF-8 and the JSON stays valid. */
static void par__trace_copy_name(char *dst, size_t size, const char *src) {
    const unsigned char *p = (const unsigned char *)src, *end = p + strlen(src);
    size_t n = 0;
    while (p < end) {
        int len = par__st_utf8_len(p, end);
        if (!len) {
            if (n + 1 >= size) break;
            dst[n++] = '?', p++;
            continue;
        }
        if (n + (size_t)len >= size) break;
        memcpy(dst + n, p, (size_t)len);
        n += (size_t)len, p += len;
    }
    dst[n] = 0;
}

PARALLEL_DEF par_status par_trace_create(const par_trace_desc *desc, par_trace **trace) {
    static const char *const standard[4] = {"compute", "comm", "optimizer", "io"};
    par_trace *t;
    int i;
    if (trace) *trace = NULL;
    if (!desc || !trace) return par__fail(PAR_EINVAL, "par_trace_create: NULL argument");
    if (desc->rank < 0) return par__fail(PAR_EINVAL, "par_trace_create: rank %d is negative", desc->rank);
    if (desc->capacity < 0)
        return par__fail(PAR_EINVAL, "par_trace_create: capacity %d is negative (0 means the default %d)",
                         desc->capacity, PAR_TRACE_DEFAULT_CAPACITY);
    t = (par_trace *)PARALLEL_MALLOC(sizeof *t);
    if (!t) return par__fail(PAR_ENOMEM, "par_trace_create: out of memory");
    memset(t, 0, sizeof *t);
    t->rank = desc->rank;
    t->capacity = desc->capacity ? desc->capacity : PAR_TRACE_DEFAULT_CAPACITY;
    if (desc->process_name) par__trace_copy_name(t->process_name, sizeof t->process_name, desc->process_name);
    else snprintf(t->process_name, sizeof t->process_name, "rank %d", desc->rank);
    /* the usual categories get the same tracks on every rank */
    for (i = 0; i < 4; i++) par__copy_text(t->categories[i], PAR_TRACE_CATEGORY_MAX, standard[i]);
    t->num_categories = 4;
    *trace = t;
    return PAR_OK;
}

PARALLEL_DEF void par_trace_destroy(par_trace *trace) {
    if (!trace) return;
    PARALLEL_FREE(trace->recs);
    PARALLEL_FREE(trace);
}

PARALLEL_DEF int64_t par_trace_count(const par_trace *trace) { return trace ? trace->count : 0; }

PARALLEL_DEF int64_t par_trace_dropped(const par_trace *trace) { return trace ? trace->dropped : 0; }

/* Index of `category` (registered on first use); -1 when the table is full. */
static int par__trace_category(par_trace *t, const char *category) {
    char cut[PAR_TRACE_CATEGORY_MAX];
    int i;
    par__trace_copy_name(cut, sizeof cut, category);
    for (i = 0; i < t->num_categories; i++)
        if (strcmp(t->categories[i], cut) == 0) return i;
    if (t->num_categories == PAR_TRACE_MAX_CATEGORIES) return -1;
    memcpy(t->categories[t->num_categories], cut, sizeof cut);
    return t->num_categories++;
}

static par_status par__trace_category_full(const par_trace *t, const char *fn, const char *category) {
    return par__fail(PAR_ECAPACITY, "%s: rank %d: category \"%.40s\" would be the %dth; a trace has at most %d", fn,
                     t->rank, category, PAR_TRACE_MAX_CATEGORIES + 1, PAR_TRACE_MAX_CATEGORIES);
}

/* Append a closed span, or count it as dropped when there is no room. Storage
   doubles up to the capacity (a failed growth also drops, it does not fail). */
static void par__trace_push(par_trace *t, const char *name, int category, double t0, double t1) {
    par__trace_rec *r;
    if (t->count == t->allocated) {
        int64_t n = t->allocated ? 2 * t->allocated : 1024;
        par__trace_rec *grown;
        if (n > t->capacity) n = t->capacity;
        grown = n > t->allocated ? (par__trace_rec *)PARALLEL_REALLOC(t->recs, (size_t)n * sizeof *grown) : NULL;
        if (!grown) {
            t->dropped++;
            return;
        }
        t->recs = grown, t->allocated = n;
    }
    r = &t->recs[t->count++];
    memset(r, 0, sizeof *r);
    r->t0 = t0, r->t1 = t1;
    r->pid = t->rank, r->tid = category * PAR__TRACE_SUBTRACKS, r->kind = PAR__TRACE_SPAN;
    par__copy_text(r->name, sizeof r->name, name); /* already cut to whole characters */
    memcpy(r->cat, t->categories[category], sizeof r->cat);
}

static void par__trace_misuse(par_trace *t, const char *what) {
    if (!t->misuse[0]) par__copy_text(t->misuse, sizeof t->misuse, what);
}

PARALLEL_DEF par_status par_trace_begin(par_trace *trace, const char *name, const char *category) {
    par__trace_open *o;
    int c;
    if (!trace || !name || !category) return par__fail(PAR_EINVAL, "par_trace_begin: NULL argument");
    if ((c = par__trace_category(trace, category)) < 0)
        return par__trace_category_full(trace, "par_trace_begin", category);
    if (trace->depth == PAR_TRACE_MAX_DEPTH) { /* too deep to keep: its end drops it */
        trace->overflow_depth++;
        return PAR_OK;
    }
    o = &trace->stack[trace->depth++];
    par__trace_copy_name(o->name, sizeof o->name, name);
    o->category = c;
    o->t0 = par_trace_now_us();
    return PAR_OK;
}

PARALLEL_DEF par_status par_trace_end(par_trace *trace) {
    const double now = par_trace_now_us();
    par__trace_open *o;
    if (!trace) return par__fail(PAR_EINVAL, "par_trace_end: NULL argument");
    if (trace->overflow_depth) {
        trace->overflow_depth--;
        trace->dropped++;
        return PAR_OK;
    }
    if (!trace->depth) {
        par__trace_misuse(trace, "par_trace_end was called with no span open (an end without its begin)");
        return par__fail(PAR_EINVAL, "par_trace_end: rank %d: no span is open (an end without its begin)",
                         trace->rank);
    }
    o = &trace->stack[--trace->depth];
    par__trace_push(trace, o->name, o->category, o->t0, now < o->t0 ? o->t0 : now);
    return PAR_OK;
}

PARALLEL_DEF par_status par_trace_span(par_trace *trace, const char *name, const char *category, double t0_us,
                                       double t1_us) {
    char cut[PAR_TRACE_NAME_MAX];
    int c;
    if (!trace || !name || !category) return par__fail(PAR_EINVAL, "par_trace_span: NULL argument");
    if (!isfinite(t0_us) || !isfinite(t1_us))
        return par__fail(PAR_EINVAL, "par_trace_span: rank %d: span \"%.48s\" has a non-finite time", trace->rank,
                         name);
    if (t1_us < t0_us)
        return par__fail(PAR_EINVAL, "par_trace_span: rank %d: span \"%.48s\" ends (%.3f us) before it starts (%.3f us)",
                         trace->rank, name, t1_us, t0_us);
    if ((c = par__trace_category(trace, category)) < 0)
        return par__trace_category_full(trace, "par_trace_span", category);
    par__trace_copy_name(cut, sizeof cut, name);
    par__trace_push(trace, cut, c, t0_us, t1_us);
    return PAR_OK;
}

/* ---- coverage: unions of intervals ---- */

typedef struct par__trace_iv {
    double a, b;
} par__trace_iv;

static int par__trace_iv_cmp(const void *x, const void *y) {
    const par__trace_iv *p = (const par__trace_iv *)x, *q = (const par__trace_iv *)y;
    return p->a < q->a ? -1 : p->a > q->a ? 1 : 0;
}

/* Sort and merge n intervals in place into disjoint ones; returns their count. */
static int64_t par__trace_union(par__trace_iv *v, int64_t n) {
    int64_t i, m = 0;
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof *v, par__trace_iv_cmp);
    for (i = 1; i < n; i++) {
        if (v[i].a <= v[m].b) {
            if (v[i].b > v[m].b) v[m].b = v[i].b;
        } else {
            v[++m] = v[i];
        }
    }
    return m + 1;
}

PARALLEL_DEF par_status par_trace_coverage(const par_trace *trace, const char *category, const char *const *hidden_by,
                                           int num_hidden, double t0_us, double t1_us, double *busy_us,
                                           double *exposed_us) {
    par__trace_iv *mine, *other;
    int64_t nm = 0, no = 0, i, j;
    double busy = 0.0, hidden = 0.0;
    int k;
    if (busy_us) *busy_us = 0.0;
    if (exposed_us) *exposed_us = 0.0;
    if (!trace || !category || (num_hidden > 0 && !hidden_by))
        return par__fail(PAR_EINVAL, "par_trace_coverage: NULL argument");
    if (num_hidden < 0 || !(t1_us >= t0_us))
        return par__fail(PAR_EINVAL, "par_trace_coverage: rank %d: bad window [%.3f, %.3f] or num_hidden %d",
                         trace->rank, t0_us, t1_us, num_hidden);
    mine = (par__trace_iv *)PARALLEL_MALLOC((size_t)(2 * trace->count + 1) * sizeof *mine);
    if (!mine) return par__fail(PAR_ENOMEM, "par_trace_coverage: out of memory");
    other = mine + trace->count;
    for (i = 0; i < trace->count; i++) {
        const par__trace_rec *r = &trace->recs[i];
        const double a = r->t0 > t0_us ? r->t0 : t0_us, b = r->t1 < t1_us ? r->t1 : t1_us;
        int is_mine = strncmp(r->cat, category, PAR_TRACE_CATEGORY_MAX - 1) == 0, hides = 0;
        if (b <= a) continue;
        if (!is_mine) {
            if (num_hidden == 0) hides = 1;
            for (k = 0; k < num_hidden && !hides; k++)
                hides = hidden_by[k] && strncmp(r->cat, hidden_by[k], PAR_TRACE_CATEGORY_MAX - 1) == 0;
        }
        if (is_mine) mine[nm].a = a, mine[nm++].b = b;
        else if (hides) other[no].a = a, other[no++].b = b;
    }
    nm = par__trace_union(mine, nm);
    no = par__trace_union(other, no);
    for (i = 0; i < nm; i++) busy += mine[i].b - mine[i].a;
    /* both lists are disjoint and sorted: sweep their intersection */
    for (i = 0, j = 0; i < nm && j < no;) {
        const double a = mine[i].a > other[j].a ? mine[i].a : other[j].a;
        const double b = mine[i].b < other[j].b ? mine[i].b : other[j].b;
        if (b > a) hidden += b - a;
        if (mine[i].b < other[j].b) i++;
        else j++;
    }
    PARALLEL_FREE(mine);
    if (busy_us) *busy_us = busy;
    if (exposed_us) *exposed_us = busy - hidden > 0 ? busy - hidden : 0.0;
    return PAR_OK;
}

/* ---- serialising a rank: PROCESS, CATEGORY records, then its spans ---- */

static int64_t par__trace_record_count(const par_trace *t) { return 1 + t->num_categories + t->count; }

static void par__trace_serialise(const par_trace *t, par__trace_rec *out) {
    int c;
    memset(out, 0, (size_t)(1 + t->num_categories) * sizeof *out);
    out[0].kind = PAR__TRACE_PROCESS, out[0].pid = t->rank;
    out[0].value = t->dropped, out[0].aux = t->capacity;
    memcpy(out[0].name, t->process_name, sizeof out[0].name);
    for (c = 0; c < t->num_categories; c++) {
        par__trace_rec *r = &out[1 + c];
        r->kind = PAR__TRACE_CATEGORY, r->pid = t->rank, r->tid = c * PAR__TRACE_SUBTRACKS;
        memcpy(r->cat, t->categories[c], sizeof r->cat);
    }
    if (t->count) memcpy(out + 1 + t->num_categories, t->recs, (size_t)t->count * sizeof *out);
}

/* A rank's trace can be written: no open spans, no remembered misuse. */
static par_status par__trace_check(const par_trace *t, const char *fn) {
    if (t->misuse[0]) return par__fail(PAR_EINVAL, "%s: rank %d: %s", fn, t->rank, t->misuse);
    if (t->depth || t->overflow_depth)
        return par__fail(PAR_EINVAL, "%s: rank %d: %d span(s) still open (innermost \"%s\"); end them before writing",
                         fn, t->rank, t->depth + t->overflow_depth, t->depth ? t->stack[t->depth - 1].name : "?");
    return PAR_OK;
}

static int64_t par__trace_min_ns(const par_trace *t) {
    int64_t i, m = INT64_MAX;
    for (i = 0; i < t->count; i++) {
        const int64_t v = (int64_t)floor(t->recs[i].t0 * 1e3);
        if (v < m) m = v;
    }
    return m;
}

/* ---- the JSON writer: a buffer flushed to the temporary file ---- */

typedef struct par__trace_out {
    par__st_io io;
    const par_allocator *alloc; /* of buf and tmp; NULL = the PARALLEL_MALLOC macros */
    char *tmp;
    const char *path;
    uint64_t offset;
    char *buf;
    size_t len, cap;
    const char *why; /* first write failure */
    int events;      /* events written so far (for the commas) */
} par__trace_out;

#define PAR__TRACE_FLUSH_AT ((size_t)1 << 20)

static void par__trace_flush(par__trace_out *o) {
    const char *why;
    if (!o->why && o->len && (why = par__st_io_write_at(&o->io, o->offset, o->buf, o->len)) != NULL) o->why = why;
    o->offset += o->len;
    o->len = 0;
}

static void par__trace_put(par__trace_out *o, const char *s, size_t n) {
    if (o->len + n > o->cap) par__trace_flush(o);
    if (n > o->cap) { /* cannot happen with our short pieces; keep it correct anyway */
        if (!o->why && par__st_io_write_at(&o->io, o->offset, s, n)) o->why = "write failed";
        o->offset += n;
        return;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

static void par__trace_puts(par__trace_out *o, const char *s) { par__trace_put(o, s, strlen(s)); }

/* A JSON string: quotes, backslashes and control characters escaped (names are
   valid UTF-8 already, see par__trace_copy_name). */
static void par__trace_put_string(par__trace_out *o, const char *s) {
    char esc[8];
    par__trace_put(o, "\"", 1);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') esc[0] = '\\', esc[1] = (char)c, par__trace_put(o, esc, 2);
        else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c), par__trace_put(o, esc, 6);
        else par__trace_put(o, (const char *)&c, 1);
    }
    par__trace_put(o, "\"", 1);
}

/* Nanoseconds since the origin as microseconds with three decimals: exact, so
   a nested span's end never rounds past its parent's. */
static void par__trace_put_us(par__trace_out *o, int64_t ns) {
    char num[48];
    snprintf(num, sizeof num, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
    par__trace_puts(o, num);
}

static void par__trace_event_start(par__trace_out *o) {
    par__trace_puts(o, o->events++ ? ",\n" : "\n");
}

/* {"name":"thread_name"|"process_name"|...,"ph":"M","pid":P,"tid":T,"ts":0,"args":{"name":VALUE}} */
static void par__trace_put_meta(par__trace_out *o, const char *what, int pid, int tid, const char *key,
                                const char *text_value, long long int_value) {
    char num[96];
    par__trace_event_start(o);
    par__trace_puts(o, "{\"name\":");
    par__trace_put_string(o, what);
    snprintf(num, sizeof num, ",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"ts\":0,\"args\":{\"", pid, tid);
    par__trace_puts(o, num);
    par__trace_puts(o, key);
    par__trace_puts(o, "\":");
    if (text_value) par__trace_put_string(o, text_value);
    else snprintf(num, sizeof num, "%lld", int_value), par__trace_puts(o, num);
    par__trace_puts(o, "}}");
}

static int par__trace_rec_cmp(const void *x, const void *y) {
    const par__trace_rec *p = (const par__trace_rec *)x, *q = (const par__trace_rec *)y;
    if (p->tid != q->tid) return p->tid < q->tid ? -1 : 1;
    if (p->t0 != q->t0) return p->t0 < q->t0 ? -1 : 1;
    if (p->t1 != q->t1) return p->t1 > q->t1 ? -1 : 1; /* the longer (outer) span first */
    return 0;
}

static int64_t par__trace_ns(double us, int64_t origin_ns) { return (int64_t)llround(us * 1e3) - origin_ns; }

/* Write one rank's serialised records (sorted here in place). Each span goes
   on the first track of its category where it nests or follows; a span that
   overlaps another without nesting takes the next track. */
static void par__trace_emit_rank(par__trace_out *o, par__trace_rec *recs, int64_t n, int64_t origin_ns) {
    int64_t ends[PAR__TRACE_SUBTRACKS][PAR_TRACE_MAX_DEPTH];
    int depth[PAR__TRACE_SUBTRACKS], used[PAR_TRACE_MAX_CATEGORIES];
    const par__trace_rec *proc = NULL, *cats[PAR_TRACE_MAX_CATEGORIES];
    int64_t i, first_span = 0;
    int c, k, cur = -1;
    char num[160];
    memset(cats, 0, sizeof cats);
    memset(used, 0, sizeof used);
    for (i = 0; i < n && recs[i].kind != PAR__TRACE_SPAN; i++) {
        if (recs[i].kind == PAR__TRACE_PROCESS) proc = &recs[i];
        else if (recs[i].tid / PAR__TRACE_SUBTRACKS < PAR_TRACE_MAX_CATEGORIES)
            cats[recs[i].tid / PAR__TRACE_SUBTRACKS] = &recs[i];
    }
    first_span = i;
    if (proc) {
        par__trace_put_meta(o, "process_name", proc->pid, 0, "name", proc->name, 0);
        par__trace_put_meta(o, "process_sort_index", proc->pid, 0, "sort_index", NULL, proc->pid);
        if (proc->value > 0) {
            snprintf(num, sizeof num, "dropped %lld spans (trace capacity %lld)", (long long)proc->value,
                     (long long)proc->aux);
            par__trace_put_meta(o, "process_labels", proc->pid, 0, "labels", num, 0);
            par__trace_put_meta(o, "trace_dropped_spans", proc->pid, 0, "dropped", NULL, proc->value);
        }
    }
    qsort(recs + first_span, (size_t)(n - first_span), sizeof *recs, par__trace_rec_cmp);
    for (i = first_span; i < n; i++) {
        par__trace_rec *r = &recs[i];
        const int64_t a = par__trace_ns(r->t0, origin_ns), b = par__trace_ns(r->t1, origin_ns);
        c = r->tid / PAR__TRACE_SUBTRACKS;
        if (c != cur) memset(depth, 0, sizeof depth), cur = c;
        for (k = 0; k < PAR__TRACE_SUBTRACKS; k++) {
            while (depth[k] && ends[k][depth[k] - 1] <= a) depth[k]--;
            if (depth[k] < PAR_TRACE_MAX_DEPTH && (!depth[k] || ends[k][depth[k] - 1] >= b)) break;
        }
        if (k == PAR__TRACE_SUBTRACKS) k = PAR__TRACE_SUBTRACKS - 1; /* out of tracks: drawn overlapping */
        else ends[k][depth[k]++] = b;
        if (c >= 0 && c < PAR_TRACE_MAX_CATEGORIES && k + 1 > used[c]) used[c] = k + 1;
        par__trace_event_start(o);
        par__trace_puts(o, "{\"name\":");
        par__trace_put_string(o, r->name);
        par__trace_puts(o, ",\"cat\":");
        par__trace_put_string(o, r->cat);
        par__trace_puts(o, ",\"ph\":\"X\",\"ts\":");
        par__trace_put_us(o, a);
        par__trace_puts(o, ",\"dur\":");
        par__trace_put_us(o, b - a);
        snprintf(num, sizeof num, ",\"pid\":%d,\"tid\":%d}", r->pid, r->tid + k);
        par__trace_puts(o, num);
    }
    /* name the tracks: every category, and the extra tracks that were used */
    for (c = 0; c < PAR_TRACE_MAX_CATEGORIES; c++) {
        if (!cats[c]) continue;
        for (k = 0; k < (used[c] ? used[c] : 1); k++) {
            const int tid = c * PAR__TRACE_SUBTRACKS + k;
            if (k) snprintf(num, sizeof num, "%s #%d", cats[c]->cat, k + 1);
            else snprintf(num, sizeof num, "%s", cats[c]->cat);
            par__trace_put_meta(o, "thread_name", cats[c]->pid, tid, "name", num, 0);
            par__trace_put_meta(o, "thread_sort_index", cats[c]->pid, tid, "sort_index", NULL, tid);
        }
    }
}

/* Create "<path>.tmp.<pid>.<n>" and start the JSON; buffers from `alloc` (NULL:
   the PARALLEL_MALLOC macros). */
static par_status par__trace_open_out(par__trace_out *o, const par_allocator *alloc, const char *fn,
                                      const char *path) {
    const char *why;
    const size_t n = strlen(path) + 64;
    memset(o, 0, sizeof *o);
    par__st_io_init(&o->io);
    o->alloc = alloc;
    o->path = path;
    o->cap = PAR__TRACE_FLUSH_AT;
    o->buf = (char *)par__alloc_malloc(alloc, o->cap);
    o->tmp = (char *)par__alloc_malloc(alloc, n);
    if (!o->buf || !o->tmp) {
        par__alloc_free(alloc, o->buf), par__alloc_free(alloc, o->tmp);
        o->buf = o->tmp = NULL;
        return par__fail(PAR_ENOMEM, "%s: out of memory", fn);
    }
    if ((why = par__st_create_temp(&o->io, path, o->tmp, n)) != NULL) {
        par_status st = par__fail(PAR_EIO, "%s: %.200s: cannot create the temporary file %.200s (%s)", fn, path,
                                  o->tmp, why);
        par__alloc_free(alloc, o->buf), par__alloc_free(alloc, o->tmp);
        o->buf = o->tmp = NULL;
        return st;
    }
    par__trace_puts(o, "{\"traceEvents\":[");
    return PAR_OK;
}

/* Finish the JSON, sync, rename over the path (ok) or remove the temporary
   file (on a failure before, or here); frees o's buffers either way. */
static par_status par__trace_close_out(par__trace_out *o, const char *fn, int ok) {
    par_status st = PAR_OK;
    const char *why;
    if (ok) {
        par__trace_puts(o, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"parallel.h\"}}\n");
        par__trace_flush(o);
        if (o->why) {
            st = par__fail(PAR_EIO, "%s: %.200s: cannot write %.200s (%s)", fn, o->path, o->tmp, o->why);
            ok = 0;
        }
    }
    if ((why = par__st_io_sync_close(&o->io)) != NULL && ok) {
        st = par__fail(PAR_EIO, "%s: %.200s: cannot flush %.200s to disk (%s)", fn, o->path, o->tmp, why);
        ok = 0;
    }
    if (ok && (why = par__st_replace(o->tmp, o->path)) != NULL) {
        st = par__fail(PAR_EIO, "%s: %.200s: cannot rename %.200s over it (%s); the old file is unchanged", fn,
                       o->path, o->tmp, why);
        ok = 0;
    }
    if (ok) par__st_sync_dir(o->alloc, o->path);
    else remove(o->tmp);
    par__alloc_free(o->alloc, o->buf), par__alloc_free(o->alloc, o->tmp);
    o->buf = o->tmp = NULL;
    return st;
}

PARALLEL_DEF par_status par_trace_write(par_trace *const *traces, int count, const char *path) {
    static const char fn[] = "par_trace_write";
    par__trace_out o;
    par__trace_rec *recs = NULL;
    int64_t origin = INT64_MAX, most = 0;
    par_status st;
    int i, j;
    if (!traces || !path) return par__fail(PAR_EINVAL, "%s: NULL argument", fn);
    if (count < 1) return par__fail(PAR_EINVAL, "%s: count %d; give at least one trace", fn, count);
    if (!path[0]) return par__fail(PAR_EINVAL, "%s: empty path", fn);
    for (i = 0; i < count; i++) {
        if (!traces[i]) return par__fail(PAR_EINVAL, "%s: traces[%d] is NULL", fn, i);
        if ((st = par__trace_check(traces[i], fn)) != PAR_OK) return st;
        for (j = 0; j < i; j++)
            if (traces[j]->rank == traces[i]->rank)
                return par__fail(PAR_EINVAL, "%s: traces[%d] and traces[%d] both have rank %d", fn, j, i,
                                 traces[i]->rank);
        if (par__trace_min_ns(traces[i]) < origin) origin = par__trace_min_ns(traces[i]);
        if (par__trace_record_count(traces[i]) > most) most = par__trace_record_count(traces[i]);
    }
    if (origin == INT64_MAX) origin = 0;
    recs = (par__trace_rec *)PARALLEL_MALLOC((size_t)most * sizeof *recs);
    if (!recs) return par__fail(PAR_ENOMEM, "%s: out of memory for %lld records", fn, (long long)most);
    if ((st = par__trace_open_out(&o, NULL, fn, path)) != PAR_OK) return PARALLEL_FREE(recs), st;
    for (i = 0; i < count; i++) {
        par__trace_serialise(traces[i], recs);
        par__trace_emit_rank(&o, recs, par__trace_record_count(traces[i]), origin);
    }
    PARALLEL_FREE(recs);
    return par__trace_close_out(&o, fn, 1);
}

/* ---- gathering over a context ---- */

/* A comm call on host memory, staged through table memory on device tables. */
typedef struct par__trace_comm {
    const par_comm_table *cm;
    const par_compute_table *ct;
    par_comm_group *group;
    void *dev;        /* staging buffer (device tables) */
    size_t dev_bytes; /* its size */
} par__trace_comm;

static par_status par__trace_stage(par__trace_comm *c, size_t bytes) {
    par_status st;
    if (!c->ct->device_memory || bytes <= c->dev_bytes) return PAR_OK;
    if (c->dev) c->ct->free(c->ct->user, c->dev);
    c->dev = NULL, c->dev_bytes = 0;
    if ((st = c->ct->alloc(c->ct->user, bytes, PAR_MEM_COMM, &c->dev)) != PAR_OK) return st;
    c->dev_bytes = bytes;
    return PAR_OK;
}

/* recv[0..n*count) = every member's send[0..count) (i64 elements). */
static par_status par__trace_all_gather(par__trace_comm *c, const int64_t *send, int64_t *recv, int n, int count) {
    const size_t one = (size_t)count * 8, all = one * (size_t)n;
    par_status st;
    if (!c->ct->device_memory) {
        memcpy(recv, send, one); /* in place is not required: plain buffers */
        return c->cm->all_gather(c->cm->user, c->group, send, recv, count, PAR_I64, NULL);
    }
    if ((st = par__trace_stage(c, all + one)) != PAR_OK) return st;
    if ((st = c->ct->memcpy(c->ct->user, (char *)c->dev + all, send, one, PAR_COPY_HOST_TO_DEVICE)) != PAR_OK) return st;
    if ((st = c->cm->all_gather(c->cm->user, c->group, (char *)c->dev + all, c->dev, count, PAR_I64, NULL)) != PAR_OK)
        return st;
    if ((st = c->ct->memcpy(c->ct->user, recv, c->dev, all, PAR_COPY_DEVICE_TO_HOST)) != PAR_OK) return st;
    return c->ct->synchronize(c->ct->user);
}

/* Send (is_send) or receive `bytes` (a multiple of 8) to/from member `peer`. */
static par_status par__trace_p2p(par__trace_comm *c, int is_send, void *buf, size_t bytes, int peer) {
    const int64_t count = (int64_t)(bytes / 8);
    void *b = buf;
    par_status st;
    if (c->ct->device_memory) {
        if ((st = par__trace_stage(c, bytes)) != PAR_OK) return st;
        b = c->dev;
        if (is_send && (st = c->ct->memcpy(c->ct->user, b, buf, bytes, PAR_COPY_HOST_TO_DEVICE)) != PAR_OK) return st;
    }
    st = is_send ? c->cm->send(c->cm->user, c->group, b, count, PAR_I64, peer, NULL)
                 : c->cm->recv(c->cm->user, c->group, b, count, PAR_I64, peer, NULL);
    if (st != PAR_OK || !c->ct->device_memory) return st;
    if (!is_send && (st = c->ct->memcpy(c->ct->user, buf, b, bytes, PAR_COPY_DEVICE_TO_HOST)) != PAR_OK) return st;
    return c->ct->synchronize(c->ct->user);
}

/* Member 0's status to every member. */
static par_status par__trace_share_status(par__trace_comm *c, int64_t *status) {
    void *b = status;
    par_status st;
    if (c->ct->device_memory) {
        if ((st = par__trace_stage(c, 8)) != PAR_OK) return st;
        b = c->dev;
        if ((st = c->ct->memcpy(c->ct->user, b, status, 8, PAR_COPY_HOST_TO_DEVICE)) != PAR_OK) return st;
    }
    if ((st = c->cm->broadcast(c->cm->user, c->group, b, 1, PAR_I64, 0, NULL)) != PAR_OK) return st;
    if (!c->ct->device_memory) return PAR_OK;
    if ((st = c->ct->memcpy(c->ct->user, status, b, 8, PAR_COPY_DEVICE_TO_HOST)) != PAR_OK) return st;
    return c->ct->synchronize(c->ct->user);
}

enum { PAR__TRACE_X_RECORDS = 0, PAR__TRACE_X_OK, PAR__TRACE_X_ORIGIN, PAR__TRACE_X_RANK, PAR__TRACE_X_COUNT };

/* Member 0: check the exchanged table (distinct ranks), size the receive
   buffer. Sets *origin and returns the buffer through *theirs. */
static par_status par__trace_gather_plan(const par_ctx *ctx, const char *fn, const int64_t *info, int n,
                                         par__trace_rec **theirs) {
    int64_t most = 0;
    int i, j;
    *theirs = NULL;
    for (i = 0; i < n; i++) {
        const int64_t *v = info + (size_t)i * PAR__TRACE_X_COUNT;
        for (j = 0; j < i; j++)
            if (info[(size_t)j * PAR__TRACE_X_COUNT + PAR__TRACE_X_RANK] == v[PAR__TRACE_X_RANK])
                return par__fail(PAR_EINVAL, "%s: members %d and %d of the world both have trace rank %lld", fn, j, i,
                                 (long long)v[PAR__TRACE_X_RANK]);
        if (i && v[PAR__TRACE_X_RECORDS] > most) most = v[PAR__TRACE_X_RECORDS];
    }
    if (most && !(*theirs = (par__trace_rec *)par__ctx_malloc(ctx, (size_t)most * sizeof **theirs)))
        return par__fail(PAR_ENOMEM, "%s: out of memory for %lld records", fn, (long long)most);
    return PAR_OK;
}

/* Protocol (every member takes part in every step, so a failure anywhere
   ends all members at the same step instead of leaving one waiting):
     1. all_gather {records, ok, earliest ns, trace rank}: a member that is not
        ok (bad trace, member 0 cannot create the file) fails everyone;
     2. member 0 checks the table and allocates; broadcasts go / no-go;
     3. every other member sends its records to member 0, which writes them;
     4. member 0 broadcasts the result of finishing the file. */
PARALLEL_DEF par_status par_trace_gather_write(par_ctx *ctx, par_trace *trace, const char *path) {
    static const char fn[] = "par_trace_gather_write";
    par__trace_comm c;
    par__trace_out o;
    par__trace_rec *mine = NULL, *theirs = NULL;
    int64_t mine_n = 0, *info = NULL, origin = INT64_MAX, status = PAR_OK, x[PAR__TRACE_X_COUNT];
    char why[512] = "";
    par_status st = PAR_OK, local = PAR_OK;
    int index = 0, n = 0, i, writer_open = 0;
    if (!ctx) return par__fail(PAR_EINVAL, "%s: NULL context", fn);
    memset(&c, 0, sizeof c);
    memset(&o, 0, sizeof o);
    c.cm = par_ctx_comm(ctx), c.ct = par_ctx_compute(ctx);
    if ((st = par_ctx_group(ctx, (1u << par_ctx_mesh(ctx)->ndim) - 1u, &c.group, &index, &n)) != PAR_OK) return st;

    /* local preparation: a failure is reported through the exchange */
    info = (int64_t *)par__ctx_malloc(ctx, (size_t)n * PAR__TRACE_X_COUNT * sizeof *info);
    if (!info) return par__fail(PAR_ENOMEM, "%s: rank %d: out of memory", fn, par_ctx_rank(ctx)); /* peers time out */
    if (!trace) local = par__fail(PAR_EINVAL, "%s: rank %d: NULL trace", fn, par_ctx_rank(ctx));
    else if (index == 0 && (!path || !path[0]))
        local = par__fail(PAR_EINVAL, "%s: rank %d writes the file but its path is %s", fn, par_ctx_rank(ctx),
                          path ? "empty" : "NULL");
    else local = par__trace_check(trace, fn);
    if (local == PAR_OK) {
        mine_n = par__trace_record_count(trace);
        if (!(mine = (par__trace_rec *)par__ctx_malloc(ctx, (size_t)mine_n * sizeof *mine)))
            local = par__fail(PAR_ENOMEM, "%s: rank %d: out of memory", fn, par_ctx_rank(ctx));
        else par__trace_serialise(trace, mine);
    }
    if (local == PAR_OK && index == 0)
        writer_open = (local = par__trace_open_out(&o, &ctx->allocator, fn, path)) == PAR_OK;
    if (local != PAR_OK) par__copy_text(why, sizeof why, par_last_error());

    /* 1. the exchange */
    x[PAR__TRACE_X_RECORDS] = local == PAR_OK ? mine_n : 0;
    x[PAR__TRACE_X_OK] = local == PAR_OK;
    x[PAR__TRACE_X_ORIGIN] = local == PAR_OK ? par__trace_min_ns(trace) : INT64_MAX;
    x[PAR__TRACE_X_RANK] = trace ? trace->rank : -1 - par_ctx_rank(ctx);
    if ((st = par__trace_all_gather(&c, x, info, n, PAR__TRACE_X_COUNT)) != PAR_OK) goto done;
    for (i = 0; i < n; i++) {
        const int64_t *v = info + (size_t)i * PAR__TRACE_X_COUNT;
        if (!v[PAR__TRACE_X_OK] && st == PAR_OK && i != index)
            st = par__fail(PAR_EINVAL, "%s: rank %lld could not contribute its events (see its error)", fn,
                           (long long)(v[PAR__TRACE_X_RANK] >= 0 ? v[PAR__TRACE_X_RANK] : -1 - v[PAR__TRACE_X_RANK]));
        if (v[PAR__TRACE_X_ORIGIN] < origin) origin = v[PAR__TRACE_X_ORIGIN];
    }
    if (local != PAR_OK) st = par__fail(local, "%s", why);
    if (st != PAR_OK) goto done;
    if (origin == INT64_MAX) origin = 0;

    /* 2. go / no-go from member 0 */
    if (index == 0 && (status = par__trace_gather_plan(ctx, fn, info, n, &theirs)) != PAR_OK)
        par__copy_text(why, sizeof why, par_last_error());
    if ((st = par__trace_share_status(&c, &status)) != PAR_OK) goto done;
    if (status != PAR_OK) {
        st = index == 0 ? par__fail((par_status)status, "%s", why)
                        : par__fail((par_status)status, "%s: rank 0 cannot gather the traces (see its error)", fn);
        goto done;
    }

    /* 3. the records */
    if (index == 0) {
        par__trace_emit_rank(&o, mine, mine_n, origin);
        for (i = 1; i < n && st == PAR_OK; i++) {
            const int64_t cnt = info[(size_t)i * PAR__TRACE_X_COUNT + PAR__TRACE_X_RECORDS];
            st = par__trace_p2p(&c, 0, theirs, (size_t)cnt * sizeof *theirs, i);
            if (st == PAR_OK) par__trace_emit_rank(&o, theirs, cnt, origin);
        }
    } else {
        st = par__trace_p2p(&c, 1, mine, (size_t)mine_n * sizeof *mine, 0);
    }
    if (st != PAR_OK) goto done; /* the transport broke: the backend's message */

    /* 4. the file's fate */
    if (index == 0) {
        writer_open = 0;
        if ((status = par__trace_close_out(&o, fn, 1)) != PAR_OK) par__copy_text(why, sizeof why, par_last_error());
    }
    if ((st = par__trace_share_status(&c, &status)) != PAR_OK) goto done;
    if (status != PAR_OK)
        st = index == 0 ? par__fail((par_status)status, "%s", why)
                        : par__fail((par_status)status, "%s: rank 0 failed to write the trace file (see its error)", fn);
done:
    if (writer_open) {
        par__copy_text(why, sizeof why, par_last_error());
        par__trace_close_out(&o, fn, 0); /* removes the temporary file */
        par__fail(st, "%s", why);
    }
    if (c.dev) c.ct->free(c.ct->user, c.dev);
    par__ctx_free(ctx, mine), par__ctx_free(ctx, info), par__ctx_free(ctx, theirs);
    return st;
}

#endif /* PARALLEL_NO_TRACE */

// >>params

#define PAR__DEFAULT_BUCKET_BYTES (25 * 1024 * 1024)

typedef struct par__param {
    char *name;
    par_layout layout;
    int64_t numel, offset;   /* this rank's slice; its place in the flat buffers */
    int bucket, decay;
    uint32_t replica_dims;   /* dims holding copies of the slice */
    uint32_t extra_partial;  /* grad partial dims other than the data-parallel ones */
    uint32_t count_dims;     /* the norm counts the slice where this rank's index on these is 0 */
    int counts;              /* ... which it is */
    int ready;
} par__param;

typedef struct par__bucket {
    int64_t start, count, padded; /* flat range (elements), padded to a multiple of the data degree */
    int64_t chunk, chunk_begin;   /* this rank's ZeRO shard of it */
    int64_t shard_offset;         /* where the shard lives in the shard buffers */
    int first, num, pending;
    int slot;                     /* ZeRO-2: the gradient buffer it holds, -1 none */
    par_request *req;             /* reduction in flight */
    const char *req_op;
    double req_t0;
} par__bucket;

struct par_params {
    par_ctx *ctx;
    const par_compute_table *ct;
    const par_comm_table *cm;
    int n, nb, zero;
    par_reduce_op reduce;
    par__param *p;
    par__bucket *b;
    uint32_t data_dims, stage_dims;
    par_comm_group *data_group, *world_group;
    int data_size, data_index;
    int64_t total, shard_total, max_padded, max_chunk;
    float *value, *grad, *m, *v, *gshard;
    float **slots, **rs_tmp;  /* ZeRO-2 */
    int *slot_bucket;         /* bucket holding each slot, -1 free */
    int num_slots, cap_slots;
    int next_launch;          /* the next bucket to launch (they go last to first) */
    int micro, num_micro, in_micro;
    int64_t step;
    struct par_trace *trace;
    par_layout batch;
    int has_batch;
    int64_t planned[PAR_MEM_CATEGORY_COUNT];
    /* par_params_gather's workspace */
    float *tmp_whole, *tmp_bucket;
    int64_t tmp_whole_n, tmp_bucket_n;
    int tmp_bucket_of, tmp_bucket_field;
    par_planner *planner;
    par_executor *exec;
};

static double par__params_now(const par_params *ps) {
#ifndef PARALLEL_NO_TRACE
    return ps->trace ? par_trace_now_us() : 0.0;
#else
    (void)ps;
    return 0.0;
#endif
}

static void par__params_span(par_params *ps, const char *cat, double t0, const char *what, int bucket) {
#ifndef PARALLEL_NO_TRACE
    char name[PAR_TRACE_NAME_MAX];
    if (!ps->trace) return;
    if (bucket >= 0) snprintf(name, sizeof name, "%s bucket %d", what, bucket);
    else snprintf(name, sizeof name, "%s", what);
    (void)par_trace_span(ps->trace, name, cat, t0, par_trace_now_us());
#else
    (void)ps, (void)cat, (void)t0, (void)what, (void)bucket;
#endif
}

/* Device dims of size > 1 of the mesh. */
static uint32_t par__mesh_dims_mask(const par_mesh *mesh) {
    uint32_t m = 0;
    int v;
    for (v = 0; v < mesh->ndim; v++)
        if (par_mesh_dev_size(mesh, v) > 1) m |= 1u << v;
    return m;
}

/* 1 if `rank` has index 0 on every device dim of mask. */
static int par__first_on(const par_mesh *mesh, int rank, uint32_t mask) {
    int coords[PARALLEL_MAX_DIMS], v;
    if (par_mesh_coords(mesh, rank, coords) != PAR_OK) return 0;
    for (v = 0; v < mesh->ndim; v++)
        if ((mask >> v & 1u) && coords[mesh->ndim - 1 - v] != 0) return 0;
    return 1;
}

static par_status par__params_alloc(par_params *ps, int64_t n, par_mem_category cat, float **ptr) {
    void *q = NULL;
    par_status st;
    *ptr = NULL;
    if (n <= 0) return PAR_OK;
    st = ps->ct->alloc(ps->ct->user, (size_t)n * sizeof(float), cat, &q);
    if (st != PAR_OK) return st;
    *ptr = (float *)q;
    ps->planned[cat] += n * (int64_t)sizeof(float);
    return PAR_OK;
}

static void par__params_free_ptr(par_params *ps, void *q) {
    if (q) ps->ct->free(ps->ct->user, q);
}

PARALLEL_DEF void par_params_destroy(par_params *ps) {
    int i;
    if (!ps) return;
    if (ps->b) /* requests still in flight complete before their buffers go */
        for (i = 0; i < ps->nb; i++)
            if (ps->b[i].req) (void)ps->cm->wait(ps->cm->user, ps->b[i].req);
    if (ps->p)
        for (i = 0; i < ps->n; i++) par__ctx_free(ps->ctx, ps->p[i].name);
    if (ps->ct) {
        par__params_free_ptr(ps, ps->value), par__params_free_ptr(ps, ps->grad), par__params_free_ptr(ps, ps->m);
        par__params_free_ptr(ps, ps->v), par__params_free_ptr(ps, ps->gshard);
        par__params_free_ptr(ps, ps->tmp_whole), par__params_free_ptr(ps, ps->tmp_bucket);
        for (i = 0; i < ps->num_slots; i++) par__params_free_ptr(ps, ps->slots[i]), par__params_free_ptr(ps, ps->rs_tmp[i]);
    }
    par__ctx_free(ps->ctx, ps->slots), par__ctx_free(ps->ctx, ps->rs_tmp), par__ctx_free(ps->ctx, ps->slot_bucket);
    par__ctx_free(ps->ctx, ps->p), par__ctx_free(ps->ctx, ps->b);
    if (ps->exec) par_executor_destroy(ps->exec);
    if (ps->planner) par_planner_destroy(ps->planner);
    par__ctx_free(ps->ctx, ps);
}

/* Check parameter i of the desc and fill its entry (not its offset). */
static par_status par__params_check_one(par_params *ps, const par_param_desc *d, int i) {
    const par_mesh *mesh = par_ctx_mesh(ps->ctx);
    const uint32_t all = par__mesh_dims_mask(mesh);
    par__param *p = &ps->p[i];
    uint32_t split;
    size_t len;
    int j;
    char lay[160];
    if (!d->name || !*d->name) return par__fail(PAR_EINVAL, "par_params_create: parameter %d has no name", i);
    for (j = 0; j < i; j++)
        if (strcmp(ps->p[j].name, d->name) == 0)
            return par__fail(PAR_EINVAL, "par_params_create: parameters %d and %d are both called \"%s\"", j, i, d->name);
    if (par_layout_check(&d->layout) != PAR_OK) {
        par__copy_text(lay, sizeof lay, par_last_error());
        return par__fail(PAR_ELAYOUT, "par_params_create: parameter \"%s\": %s", d->name, lay);
    }
    if (!par__mesh_same_shape(&d->layout.mesh, mesh))
        return par__fail(PAR_EINVAL, "par_params_create: parameter \"%s\" has a layout on another mesh than the context's",
                         d->name);
    if (d->layout.map.partial)
        return par__fail(PAR_ELAYOUT, "par_params_create: parameter \"%s\" has partial dims (a parameter holds values, "
                                      "not partial sums)", d->name);
    if ((unsigned)d->decay > (unsigned)PAR_DECAY_OFF)
        return par__fail(PAR_EINVAL, "par_params_create: parameter \"%s\": unknown decay %d", d->name, (int)d->decay);
    split = par_layout_split_dims(&d->layout) & all;
    if (split & ps->data_dims) {
        par_layout_format(&d->layout, lay, sizeof lay);
        return par__fail(PAR_ELAYOUT, "par_params_create: parameter \"%s\" (layout %s) is split over a device dim that "
                                      "splits the batch (data-parallel ranks hold whole copies; ZeRO shards the "
                                      "optimizer instead)", d->name, lay);
    }
    if (d->grad_partial & ~(uint32_t)((1u << mesh->ndim) - 1u))
        return par__fail(PAR_EINVAL, "par_params_create: parameter \"%s\": grad_partial 0x%x names device dims the "
                                     "mesh does not have", d->name, (unsigned)d->grad_partial);
    if (d->grad_partial & split)
        return par__fail(PAR_EINVAL, "par_params_create: parameter \"%s\": grad_partial names device dims that split "
                                     "the parameter (its gradient there is a slice, not a partial sum)", d->name);
    if ((split | d->grad_partial) & ps->stage_dims)
        return par__fail(PAR_ELAYOUT, "par_params_create: parameter \"%s\" is split or partial over a stage dim (each "
                                      "stage holds its own parameters whole)", d->name);
    len = strlen(d->name);
    if (!(p->name = (char *)par__ctx_malloc(ps->ctx, len + 1))) return par__fail(PAR_ENOMEM, "par_params_create: out of memory");
    memcpy(p->name, d->name, len + 1);
    p->layout = d->layout;
    p->numel = par_layout_local_numel(&d->layout);
    p->decay = d->decay == PAR_DECAY_ON || (d->decay == PAR_DECAY_AUTO && d->layout.ndim >= 2);
    p->replica_dims = all & ~split & ~ps->stage_dims; /* other stages hold other tensors, not copies */
    p->extra_partial = d->grad_partial & all & ~ps->data_dims;
    /* after the reductions every copy holds the same gradient: count one. Under
       ZeRO the data-parallel ranks hold disjoint shards of it: all count. */
    p->count_dims = ps->zero ? p->replica_dims & ~ps->data_dims : p->replica_dims;
    p->counts = par__first_on(mesh, par_ctx_rank(ps->ctx), p->count_dims);
    return PAR_OK;
}

/* Buckets and flat offsets: parameters packed in order, each bucket padded. */
static par_status par__params_buckets(par_params *ps, const par_params_desc *desc) {
    const int64_t cap = desc->bucket_bytes == 0 ? PAR__DEFAULT_BUCKET_BYTES : desc->bucket_bytes;
    const int64_t g = ps->data_size;
    int i, nb = 0;
    int64_t bytes = 0;
    for (i = 0; i < ps->n; i++) { /* count first */
        const int64_t pb = ps->p[i].numel * (int64_t)sizeof(float);
        if (i == 0 || desc->params[i].new_bucket || (cap > 0 && bytes > 0 && bytes + pb > cap)) nb++, bytes = 0;
        bytes += pb;
    }
    ps->nb = nb;
    ps->b = (par__bucket *)par__ctx_malloc(ps->ctx, (size_t)(nb ? nb : 1) * sizeof(par__bucket));
    if (!ps->b) return par__fail(PAR_ENOMEM, "par_params_create: out of memory");
    memset(ps->b, 0, (size_t)(nb ? nb : 1) * sizeof(par__bucket));
    for (i = 0, nb = -1, bytes = 0; i < ps->n; i++) {
        const int64_t pb = ps->p[i].numel * (int64_t)sizeof(float);
        par__bucket *b;
        if (i == 0 || desc->params[i].new_bucket || (cap > 0 && bytes > 0 && bytes + pb > cap)) {
            if (nb >= 0) ps->total += ps->b[nb].padded;
            nb++, bytes = 0;
            ps->b[nb].start = ps->total, ps->b[nb].first = i, ps->b[nb].slot = -1;
        }
        b = &ps->b[nb];
        bytes += pb;
        ps->p[i].bucket = nb, ps->p[i].offset = b->start + b->count;
        b->count += ps->p[i].numel, b->num++;
        b->padded = (b->count + g - 1) / g * g;
    }
    if (nb >= 0) ps->total += ps->b[nb].padded;
    for (i = 0; i < ps->nb; i++) {
        par__bucket *b = &ps->b[i];
        b->chunk = b->padded / g, b->chunk_begin = (int64_t)ps->data_index * b->chunk;
        b->shard_offset = ps->shard_total, ps->shard_total += b->chunk;
        if (b->padded > ps->max_padded) ps->max_padded = b->padded;
        if (b->chunk > ps->max_chunk) ps->max_chunk = b->chunk;
    }
    return PAR_OK;
}

static par_status par__params_add_slot(par_params *ps) {
    if (ps->num_slots == ps->cap_slots) {
        const int cap = ps->cap_slots ? 2 * ps->cap_slots : 4;
        float **s = (float **)par__ctx_realloc(ps->ctx, ps->slots, (size_t)cap * sizeof(float *));
        float **r;
        int *sb;
        if (!s) return par__fail(PAR_ENOMEM, "par_params: out of memory");
        ps->slots = s;
        if (!(r = (float **)par__ctx_realloc(ps->ctx, ps->rs_tmp, (size_t)cap * sizeof(float *))))
            return par__fail(PAR_ENOMEM, "par_params: out of memory");
        ps->rs_tmp = r;
        if (!(sb = (int *)par__ctx_realloc(ps->ctx, ps->slot_bucket, (size_t)cap * sizeof(int))))
            return par__fail(PAR_ENOMEM, "par_params: out of memory");
        ps->slot_bucket = sb;
        ps->cap_slots = cap;
    }
    ps->slots[ps->num_slots] = ps->rs_tmp[ps->num_slots] = NULL;
    ps->slot_bucket[ps->num_slots] = -1;
    ps->num_slots++;
    PAR__CHECK(par__params_alloc(ps, ps->max_padded, PAR_MEM_GRADS, &ps->slots[ps->num_slots - 1]));
    return par__params_alloc(ps, ps->max_chunk, PAR_MEM_COMM, &ps->rs_tmp[ps->num_slots - 1]);
}

PARALLEL_DEF par_status par_params_create(par_ctx *ctx, const par_params_desc *desc, par_params **out) {
    par_params *ps;
    par_status st;
    const par_mesh *mesh;
    par_comm_group *g;
    int i;
    if (out) *out = NULL;
    if (!ctx || !desc || !out) return par__fail(PAR_EINVAL, "par_params_create: NULL argument");
    if (desc->num_params < 0 || (desc->num_params > 0 && !desc->params))
        return par__fail(PAR_EINVAL, "par_params_create: %d parameters but no array", desc->num_params);
    if (desc->zero_level == 3)
        return par__fail(PAR_EUNSUPPORTED, "par_params_create: zero_level 3 (parameter sharding) is not supported: the "
                                           "host's layers read whole parameters; use 1 (optimizer state) or 2 (and "
                                           "gradients)");
    if (desc->zero_level < 0 || desc->zero_level > 3)
        return par__fail(PAR_EINVAL, "par_params_create: zero_level %d is not 0, 1 or 2", desc->zero_level);
    if (desc->grad_slots < 0) return par__fail(PAR_EINVAL, "par_params_create: grad_slots %d < 0", desc->grad_slots);
    mesh = par_ctx_mesh(ctx);
    {
        const par_compute_table *ct = par_ctx_compute(ctx);
        if (!ct->adamw || !ct->sumsq || !ct->axpy || !ct->scale)
            return par__fail(PAR_EUNSUPPORTED, "par_params_create: the compute table \"%s\" lacks adamw, sumsq, axpy or "
                                               "scale (built with PARALLEL_NO_CPU_KERNELS?)", ct->name ? ct->name : "?");
    }
    if (desc->batch) {
        if (par_layout_check(desc->batch) != PAR_OK) {
            char why[200];
            par__copy_text(why, sizeof why, par_last_error());
            return par__fail(PAR_ELAYOUT, "par_params_create: batch layout: %s", why);
        }
        if (!par__mesh_same_shape(&desc->batch->mesh, mesh))
            return par__fail(PAR_EINVAL, "par_params_create: the batch layout is on another mesh than the context's");
        if (desc->batch->map.partial)
            return par__fail(PAR_ELAYOUT, "par_params_create: the batch layout has partial dims");
    }
    ps = (par_params *)par__ctx_malloc(ctx, sizeof *ps);
    if (!ps) return par__fail(PAR_ENOMEM, "par_params_create: out of memory");
    memset(ps, 0, sizeof *ps);
    ps->ctx = ctx, ps->ct = par_ctx_compute(ctx), ps->cm = par_ctx_comm(ctx);
    ps->zero = desc->zero_level, ps->reduce = desc->sum_gradients ? PAR_REDUCE_SUM : PAR_REDUCE_AVG;
    ps->trace = desc->trace;
    ps->tmp_bucket_of = -1;
    ps->data_dims = desc->batch ? par_layout_split_dims(desc->batch) & par__mesh_dims_mask(mesh) : 0u;
    ps->stage_dims = desc->stage_dims;
    if (desc->stage_dims & ~par__mesh_dims_mask(mesh))
        return par_params_destroy(ps), par__fail(PAR_EINVAL, "par_params_create: stage_dims 0x%x names device dims the "
                                                              "mesh does not have", (unsigned)desc->stage_dims);
    if (desc->stage_dims & ps->data_dims) {
        const unsigned data = (unsigned)ps->data_dims;
        par_params_destroy(ps);
        return par__fail(PAR_EINVAL, "par_params_create: stage_dims 0x%x overlap the data-parallel dims 0x%x (the "
                                     "batch layout splits them)", (unsigned)desc->stage_dims, data);
    }
    if (desc->batch) ps->batch = *desc->batch, ps->has_batch = 1;
    ps->p = (par__param *)par__ctx_malloc(ctx, (size_t)(desc->num_params ? desc->num_params : 1) * sizeof(par__param));
    if (!ps->p) return par_params_destroy(ps), par__fail(PAR_ENOMEM, "par_params_create: out of memory");
    memset(ps->p, 0, (size_t)(desc->num_params ? desc->num_params : 1) * sizeof(par__param));
    if ((st = par_ctx_group(ctx, ps->data_dims, &ps->data_group, &ps->data_index, &ps->data_size)) != PAR_OK ||
        (st = par_ctx_group(ctx, (1u << mesh->ndim) - 1u, &ps->world_group, NULL, NULL)) != PAR_OK)
        return par_params_destroy(ps), st;
    for (i = 0; i < desc->num_params; i++, ps->n++)
        if ((st = par__params_check_one(ps, &desc->params[i], i)) != PAR_OK) return par_params_destroy(ps), st;
    for (i = 0; i < ps->n; i++) /* groups for the extra partial sums, made now (collective) */
        if (ps->p[i].extra_partial && (st = par_ctx_group(ctx, ps->p[i].extra_partial, &g, NULL, NULL)) != PAR_OK)
            return par_params_destroy(ps), st;
    if ((st = par__params_buckets(ps, desc)) != PAR_OK) return par_params_destroy(ps), st;
    ps->next_launch = ps->nb - 1;
    st = par__params_alloc(ps, ps->total, PAR_MEM_PARAMS, &ps->value);
    if (st == PAR_OK && ps->zero == 0) {
        st = par__params_alloc(ps, ps->total, PAR_MEM_GRADS, &ps->grad);
        if (st == PAR_OK) st = par__params_alloc(ps, ps->total, PAR_MEM_OPTIMIZER, &ps->m);
        if (st == PAR_OK) st = par__params_alloc(ps, ps->total, PAR_MEM_OPTIMIZER, &ps->v);
    } else if (st == PAR_OK) {
        if (ps->zero == 1) st = par__params_alloc(ps, ps->total, PAR_MEM_GRADS, &ps->grad);
        for (i = 0; st == PAR_OK && ps->zero == 2 && i < (desc->grad_slots ? desc->grad_slots : 2); i++)
            st = par__params_add_slot(ps);
        if (st == PAR_OK) st = par__params_alloc(ps, ps->shard_total, PAR_MEM_GRADS, &ps->gshard);
        if (st == PAR_OK) st = par__params_alloc(ps, ps->shard_total, PAR_MEM_OPTIMIZER, &ps->m);
        if (st == PAR_OK) st = par__params_alloc(ps, ps->shard_total, PAR_MEM_OPTIMIZER, &ps->v);
    }
    if (st != PAR_OK) return par_params_destroy(ps), st;
    *out = ps;
    return PAR_OK;
}

PARALLEL_DEF int par_params_count(const par_params *ps) { return ps ? ps->n : 0; }

PARALLEL_DEF int par_params_find(const par_params *ps, const char *name) {
    int i;
    if (!ps || !name) return -1;
    for (i = 0; i < ps->n; i++)
        if (strcmp(ps->p[i].name, name) == 0) return i;
    return -1;
}

static par_status par__params_index(const par_params *ps, int i, const char *fn) {
    if (!ps) return par__fail(PAR_EINVAL, "%s: NULL parameter set", fn);
    if (i < 0 || i >= ps->n) return par__fail(PAR_EINVAL, "%s: parameter index %d is not in [0, %d)", fn, i, ps->n);
    return PAR_OK;
}

PARALLEL_DEF par_status par_params_info(const par_params *ps, int i, par_param_info *info) {
    const par__param *p;
    PAR__CHECK(par__params_index(ps, i, "par_params_info"));
    if (!info) return par__fail(PAR_EINVAL, "par_params_info: NULL info");
    p = &ps->p[i];
    memset(info, 0, sizeof *info);
    info->name = p->name, info->layout = p->layout, info->numel = p->numel, info->bucket = p->bucket;
    info->decay = p->decay, info->replica_dims = p->replica_dims;
    info->grad_partial = p->extra_partial | (ps->data_dims & p->replica_dims);
    par_layout_local_shape(&p->layout, info->local_shape);
    return par_layout_local_offset(&p->layout, par_ctx_rank(ps->ctx), info->start);
}

PARALLEL_DEF float *par_params_value(par_params *ps, int i) {
    if (par__params_index(ps, i, "par_params_value") != PAR_OK) return NULL;
    return ps->value + ps->p[i].offset;
}

PARALLEL_DEF par_status par_params_memory(const par_params *ps, int64_t bytes[PAR_MEM_CATEGORY_COUNT]) {
    if (!ps || !bytes) return par__fail(PAR_EINVAL, "par_params_memory: NULL argument");
    memcpy(bytes, ps->planned, sizeof ps->planned);
    return PAR_OK;
}

PARALLEL_DEF par_status par_params_grads_begin(par_params *ps, int mb, int num) {
    int i;
    if (!ps) return par__fail(PAR_EINVAL, "par_params_grads_begin: NULL parameter set");
    if (num < 1 || mb < 0 || mb >= num)
        return par__fail(PAR_EINVAL, "par_params_grads_begin: micro-batch %d of %d (want 0 <= micro_batch < num >= 1)", mb,
                         num);
    if (ps->in_micro) return par__fail(PAR_EINVAL, "par_params_grads_begin: micro-batch %d was not ended with "
                                                   "par_params_grads_wait", ps->micro);
    if (mb > 0 && (mb != ps->micro + 1 || num != ps->num_micro))
        return par__fail(PAR_EINVAL, "par_params_grads_begin: micro-batch %d of %d after %d of %d (they go in order)", mb,
                         num, ps->micro, ps->num_micro);
    if (mb == 0) {
        if (ps->grad) PAR__CHECK(ps->ct->memset(ps->ct->user, ps->grad, 0, (size_t)ps->total * sizeof(float)));
        if (ps->gshard) PAR__CHECK(ps->ct->memset(ps->ct->user, ps->gshard, 0, (size_t)ps->shard_total * sizeof(float)));
    }
    for (i = 0; i < ps->n; i++) ps->p[i].ready = 0;
    for (i = 0; i < ps->nb; i++) ps->b[i].pending = ps->b[i].num;
    ps->micro = mb, ps->num_micro = num, ps->in_micro = 1;
    ps->next_launch = ps->nb - 1;
    return PAR_OK;
}

/* ZeRO-2: bucket b's reduce-scatter is done: add it into the shard, free its slot. */
static par_status par__params_finish_rs(par_params *ps, int b) {
    par__bucket *bk = &ps->b[b];
    par_request *r = bk->req;
    const int s = bk->slot;
    if (!r) return PAR_OK;
    bk->req = NULL;
    PAR__CHECK(ps->cm->wait(ps->cm->user, r));
    par__params_span(ps, "comm", bk->req_t0, bk->req_op, b);
    PAR__CHECK(ps->ct->axpy(ps->ct->user, bk->chunk, 1.0f, ps->rs_tmp[s], ps->gshard + bk->shard_offset));
    ps->slot_bucket[s] = -1, bk->slot = -1;
    return PAR_OK;
}

/* A free ZeRO-2 slot for bucket b: a free one, else the one freed by the oldest
   reduction in flight (buckets go last to first), else a new one. */
static par_status par__params_take_slot(par_params *ps, int b) {
    int s, oldest = -1;
    for (s = 0; s < ps->num_slots; s++)
        if (ps->slot_bucket[s] < 0) break;
    if (s == ps->num_slots) {
        for (s = 0; s < ps->num_slots; s++) {
            const int ob = ps->slot_bucket[s];
            if (ps->b[ob].req && (oldest < 0 || ob > ps->slot_bucket[oldest])) oldest = s;
        }
        if (oldest >= 0) {
            PAR__CHECK(par__params_finish_rs(ps, ps->slot_bucket[oldest]));
            s = oldest;
        } else {
            PAR__CHECK(par__params_add_slot(ps));
            s = ps->num_slots - 1;
        }
    }
    ps->slot_bucket[s] = b, ps->b[b].slot = s;
    return ps->ct->memset(ps->ct->user, ps->slots[s], 0, (size_t)ps->b[b].padded * sizeof(float));
}

PARALLEL_DEF par_status par_params_grad(par_params *ps, int i, float **grad) {
    par__bucket *bk;
    PAR__CHECK(par__params_index(ps, i, "par_params_grad"));
    if (!grad) return par__fail(PAR_EINVAL, "par_params_grad: NULL grad");
    *grad = NULL;
    if (!ps->in_micro) return par__fail(PAR_EINVAL, "par_params_grad: no micro-batch begun (par_params_grads_begin)");
    if (ps->p[i].ready)
        return par__fail(PAR_EINVAL, "par_params_grad: parameter \"%s\" was already marked ready in this micro-batch",
                         ps->p[i].name);
    bk = &ps->b[ps->p[i].bucket];
    if (ps->zero != 2) return *grad = ps->grad + ps->p[i].offset, PAR_OK;
    if (bk->slot < 0) PAR__CHECK(par__params_take_slot(ps, ps->p[i].bucket));
    *grad = ps->slots[bk->slot] + (ps->p[i].offset - bk->start);
    return PAR_OK;
}

/* The buffer bucket b's gradients accumulate in. */
static float *par__params_bucket_grad(par_params *ps, int b) {
    return ps->zero == 2 ? ps->slots[ps->b[b].slot] : ps->grad + ps->b[b].start;
}

/* Launch bucket b's reduction (async): extra partial sums first (blocking:
   they are small, e.g. norm weights under sequence parallelism). */
static par_status par__params_launch(par_params *ps, int b) {
    par__bucket *bk = &ps->b[b];
    const int last = ps->micro == ps->num_micro - 1;
    float *g;
    int i;
    if (ps->zero != 2 && !last) return PAR_OK; /* accumulate; reduce once after the last micro-batch */
    if (ps->zero == 2 && bk->slot < 0) PAR__CHECK(par__params_take_slot(ps, b)); /* no gradient was asked for */
    g = par__params_bucket_grad(ps, b);
    for (i = bk->first; i < bk->first + bk->num; i++) {
        const par__param *p = &ps->p[i];
        par_comm_group *grp;
        if (!p->extra_partial) continue;
        PAR__CHECK(par_ctx_group(ps->ctx, p->extra_partial, &grp, NULL, NULL));
        PAR__CHECK(ps->cm->all_reduce(ps->cm->user, grp, g + (p->offset - bk->start), g + (p->offset - bk->start),
                                      p->numel, PAR_F32, PAR_REDUCE_SUM, NULL));
    }
    bk->req_t0 = par__params_now(ps);
    if (ps->zero == 2) {
        bk->req_op = "reduce_scatter";
        return ps->cm->reduce_scatter(ps->cm->user, ps->data_group, g, ps->rs_tmp[bk->slot], bk->chunk, PAR_F32,
                                      ps->reduce, &bk->req);
    }
    if (ps->zero == 1) {
        bk->req_op = "reduce_scatter";
        return ps->cm->reduce_scatter(ps->cm->user, ps->data_group, g, ps->gshard + bk->shard_offset, bk->chunk, PAR_F32,
                                      ps->reduce, &bk->req);
    }
    if (ps->data_size == 1) return PAR_OK;
    bk->req_op = "all_reduce";
    return ps->cm->all_reduce(ps->cm->user, ps->data_group, g, g, bk->padded, PAR_F32, ps->reduce, &bk->req);
}

PARALLEL_DEF par_status par_params_grad_ready(par_params *ps, int i) {
    par__bucket *bk;
    PAR__CHECK(par__params_index(ps, i, "par_params_grad_ready"));
    if (!ps->in_micro) return par__fail(PAR_EINVAL, "par_params_grad_ready: no micro-batch begun (par_params_grads_begin)");
    if (ps->p[i].ready)
        return par__fail(PAR_EINVAL, "par_params_grad_ready: parameter \"%s\" is marked ready twice in micro-batch %d",
                         ps->p[i].name, ps->micro);
    ps->p[i].ready = 1;
    bk = &ps->b[ps->p[i].bucket];
    bk->pending--;
    while (ps->next_launch >= 0 && ps->b[ps->next_launch].pending == 0) {
        PAR__CHECK(par__params_launch(ps, ps->next_launch));
        ps->next_launch--;
    }
    return PAR_OK;
}

/* Wait for every reduction in flight (ZeRO-2: and fold it into the shard). */
static par_status par__params_wait_all(par_params *ps) {
    par_status st = PAR_OK, s;
    int b;
    for (b = ps->nb - 1; b >= 0; b--) {
        par__bucket *bk = &ps->b[b];
        if (!bk->req) continue;
        if (ps->zero == 2) s = par__params_finish_rs(ps, b);
        else {
            par_request *r = bk->req;
            bk->req = NULL;
            s = ps->cm->wait(ps->cm->user, r);
            par__params_span(ps, "comm", bk->req_t0, bk->req_op, b);
        }
        if (st == PAR_OK) st = s;
    }
    return st;
}

PARALLEL_DEF par_status par_params_grads_wait(par_params *ps) {
    int i;
    if (!ps) return par__fail(PAR_EINVAL, "par_params_grads_wait: NULL parameter set");
    if (!ps->in_micro) return par__fail(PAR_EINVAL, "par_params_grads_wait: no micro-batch begun (par_params_grads_begin)");
    for (i = 0; i < ps->n; i++)
        if (!ps->p[i].ready) {
            par__params_wait_all(ps); /* what was launched still completes */
            ps->in_micro = 0;
            return par__fail(PAR_EINVAL, "par_params_grads_wait: parameter \"%s\" was never marked ready in micro-batch "
                                         "%d (par_params_grad_ready)", ps->p[i].name, ps->micro);
        }
    ps->in_micro = 0;
    return par__params_wait_all(ps);
}

/* Sum of squares of the reduced gradient elements this rank counts. */
static par_status par__params_sumsq(par_params *ps, double *ss) {
    int i;
    *ss = 0.0;
    for (i = 0; i < ps->n; i++) {
        const par__param *p = &ps->p[i];
        int64_t lo = p->offset, hi = p->offset + p->numel;
        const float *g;
        double part = 0.0;
        if (!p->counts || !p->numel) continue;
        if (ps->zero) { /* the part inside this rank's shard of the bucket */
            const par__bucket *bk = &ps->b[p->bucket];
            const int64_t c0 = bk->start + bk->chunk_begin, c1 = c0 + bk->chunk;
            if (lo < c0) lo = c0;
            if (hi > c1) hi = c1;
            if (lo >= hi) continue;
            g = ps->gshard + bk->shard_offset + (lo - c0);
        } else {
            g = ps->grad + lo;
        }
        PAR__CHECK(ps->ct->sumsq(ps->ct->user, hi - lo, g, &part));
        *ss += part;
    }
    return PAR_OK;
}

/* AdamW on [lo, hi) of the flat layout, parameter by parameter (decay per
   parameter; padding untouched): p/g/m/v point at flat index `base`. */
static par_status par__params_adamw(par_params *ps, const par_adamw *o, int64_t base, int64_t lo, int64_t hi, float *p,
                                    const float *g, float *m, float *v) {
    int i;
    for (i = 0; i < ps->n; i++) {
        const par__param *q = &ps->p[i];
        const int64_t a = q->offset > lo ? q->offset : lo, e = q->offset + q->numel < hi ? q->offset + q->numel : hi;
        const int64_t at = a - base;
        if (a >= e) continue;
        PAR__CHECK(ps->ct->adamw(ps->ct->user, e - a, p + at, g + at, m + at, v + at, o->lr, o->beta1, o->beta2, o->eps,
                                 q->decay ? o->weight_decay : 0.0f, ps->step));
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_params_step(par_params *ps, const par_adamw *o, par_step_stats *stats) {
    double ss = 0.0, norm, t0;
    float clip = 1.0f;
    int b;
    if (!ps || !o) return par__fail(PAR_EINVAL, "par_params_step: NULL argument");
    if (ps->in_micro) return par__fail(PAR_EINVAL, "par_params_step: micro-batch %d is still open (par_params_grads_wait)",
                                       ps->micro);
    if (!(o->lr >= 0.0f) || !(o->beta1 >= 0.0f && o->beta1 < 1.0f) || !(o->beta2 >= 0.0f && o->beta2 < 1.0f) ||
        !(o->eps > 0.0f) || !(o->weight_decay >= 0.0f) || !(o->max_grad_norm >= 0.0f))
        return par__fail(PAR_EINVAL, "par_params_step: AdamW settings out of range (lr %g >= 0, beta1 %g and beta2 %g in "
                                     "[0, 1), eps %g > 0, weight_decay %g >= 0, max_grad_norm %g >= 0)",
                         (double)o->lr, (double)o->beta1, (double)o->beta2, (double)o->eps, (double)o->weight_decay,
                         (double)o->max_grad_norm);
    t0 = par__params_now(ps);
    PAR__CHECK(par__params_sumsq(ps, &ss));
    par__params_span(ps, "optimizer", t0, "grad norm", -1);
    t0 = par__params_now(ps);
    PAR__CHECK(par_ctx_all_reduce_host(ps->ctx, (1u << par_ctx_mesh(ps->ctx)->ndim) - 1u, PAR_REDUCE_SUM, PAR_F64, &ss, 1));
    par__params_span(ps, "comm", t0, "all_reduce grad norm", -1);
    norm = sqrt(ss);
    if (o->max_grad_norm > 0.0f) { /* PyTorch's clip_grad_norm_: max / (norm + 1e-6), clamped to 1 */
        const double c = (double)o->max_grad_norm / (norm + 1e-6);
        if (c < 1.0) clip = (float)c;
    }
    ps->step++;
    ps->tmp_bucket_of = -1; /* the moments change: a gathered bucket is stale */
    t0 = par__params_now(ps);
    if (!ps->zero) {
        if (clip != 1.0f) PAR__CHECK(ps->ct->scale(ps->ct->user, ps->total, clip, ps->grad));
        PAR__CHECK(par__params_adamw(ps, o, 0, 0, ps->total, ps->value, ps->grad, ps->m, ps->v));
        par__params_span(ps, "optimizer", t0, "adamw", -1);
    } else {
        if (clip != 1.0f) PAR__CHECK(ps->ct->scale(ps->ct->user, ps->shard_total, clip, ps->gshard));
        for (b = 0; b < ps->nb; b++) {
            const par__bucket *bk = &ps->b[b];
            const int64_t c0 = bk->start + bk->chunk_begin, so = bk->shard_offset;
            PAR__CHECK(par__params_adamw(ps, o, c0, c0, c0 + bk->chunk, ps->value + c0, ps->gshard + so, ps->m + so,
                                         ps->v + so));
        }
        par__params_span(ps, "optimizer", t0, "adamw (ZeRO shard)", -1);
        for (b = 0; b < ps->nb; b++) { /* every rank updated its shard: gather the parameters */
            par__bucket *bk = &ps->b[b];
            float *full = ps->value + bk->start;
            bk->req_t0 = par__params_now(ps), bk->req_op = "all_gather";
            PAR__CHECK(ps->cm->all_gather(ps->cm->user, ps->data_group, full + bk->chunk_begin, full, bk->chunk, PAR_F32,
                                          &bk->req));
        }
        for (b = 0; b < ps->nb; b++) { /* plain waits (not the ZeRO-2 fold) */
            par__bucket *bk = &ps->b[b];
            par_request *r = bk->req;
            bk->req = NULL;
            PAR__CHECK(ps->cm->wait(ps->cm->user, r));
            par__params_span(ps, "comm", bk->req_t0, bk->req_op, b);
        }
    }
    if (stats) stats->grad_norm = norm, stats->clip = clip, stats->step = ps->step;
    return PAR_OK;
}

PARALLEL_DEF int64_t par_params_step_count(const par_params *ps) { return ps ? ps->step : 0; }

PARALLEL_DEF par_status par_params_set_step(par_params *ps, int64_t step) {
    if (!ps) return par__fail(PAR_EINVAL, "par_params_set_step: NULL parameter set");
    if (step < 0) return par__fail(PAR_EINVAL, "par_params_set_step: step %lld < 0", (long long)step);
    ps->step = step;
    return PAR_OK;
}

PARALLEL_DEF par_status par_params_broadcast(par_params *ps) {
    int i;
    if (!ps) return par__fail(PAR_EINVAL, "par_params_broadcast: NULL parameter set");
    for (i = 0; i < ps->n; i++) {
        const par__param *p = &ps->p[i];
        par_comm_group *g;
        int count = 1;
        if (!p->replica_dims || !p->numel) continue;
        PAR__CHECK(par_ctx_group(ps->ctx, p->replica_dims, &g, NULL, &count));
        if (count > 1)
            PAR__CHECK(ps->cm->broadcast(ps->cm->user, g, ps->value + p->offset, p->numel, PAR_F32, 0, NULL));
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_params_data_shard(const par_params *ps, int *shard_id, int *num_shards) {
    int64_t off[PARALLEL_MAX_DIMS], shape[PARALLEL_MAX_DIMS];
    if (!ps || !shard_id || !num_shards) return par__fail(PAR_EINVAL, "par_params_data_shard: NULL argument");
    *shard_id = 0, *num_shards = 1;
    if (!ps->has_batch || ps->batch.ndim < 1) return PAR_OK;
    par_layout_local_shape(&ps->batch, shape);
    PAR__CHECK(par_layout_local_offset(&ps->batch, par_ctx_rank(ps->ctx), off));
    *num_shards = (int)par_layout_shards(&ps->batch, 0), *shard_id = (int)(off[0] / shape[0]);
    return PAR_OK;
}

PARALLEL_DEF par_status par_params_reduce_loss(par_params *ps, double *sum, double *count) {
    double v[2];
    if (!ps || !sum || !count) return par__fail(PAR_EINVAL, "par_params_reduce_loss: NULL argument");
    if (ps->data_size == 1 && !ps->stage_dims) return PAR_OK;
    v[0] = *sum, v[1] = *count;
    PAR__CHECK(par_ctx_all_reduce_host(ps->ctx, ps->data_dims | ps->stage_dims, PAR_REDUCE_SUM, PAR_F64, v, 2));
    *sum = v[0], *count = v[1];
    return PAR_OK;
}

/* Device buffer of at least n floats in *buf (workspace, kept). */
static par_status par__params_tmp(par_params *ps, float **buf, int64_t *have, int64_t n) {
    if (*buf && *have >= n) return PAR_OK;
    if (*buf) ps->ct->free(ps->ct->user, *buf), *buf = NULL, *have = 0;
    {
        void *q = NULL;
        PAR__CHECK(ps->ct->alloc(ps->ct->user, (size_t)n * sizeof(float), PAR_MEM_WORKSPACE, &q));
        *buf = (float *)q, *have = n;
    }
    return PAR_OK;
}

/* This rank's slice of `field` of parameter i, in device memory: the flat
   buffer itself, or (ZeRO moments) the bucket gathered from the shards. */
static par_status par__params_local_of(par_params *ps, par_param_field field, int i, const float **out) {
    const par__param *p = &ps->p[i];
    const par__bucket *bk = &ps->b[p->bucket];
    const float *shard = field == PAR_PARAM_EXP_AVG ? ps->m : ps->v;
    if (field == PAR_PARAM_VALUE || !ps->zero) {
        *out = (field == PAR_PARAM_VALUE ? ps->value : shard) + p->offset;
        return PAR_OK;
    }
    if (ps->tmp_bucket_of != p->bucket || ps->tmp_bucket_field != (int)field) {
        PAR__CHECK(par__params_tmp(ps, &ps->tmp_bucket, &ps->tmp_bucket_n, ps->max_padded));
        PAR__CHECK(ps->cm->all_gather(ps->cm->user, ps->data_group, shard + bk->shard_offset, ps->tmp_bucket, bk->chunk,
                                      PAR_F32, NULL));
        ps->tmp_bucket_of = p->bucket, ps->tmp_bucket_field = (int)field;
    }
    *out = ps->tmp_bucket + (p->offset - bk->start);
    return PAR_OK;
}

PARALLEL_DEF par_status par_params_gather(par_params *ps, par_param_field field, int i, float *whole) {
    const par__param *p;
    const float *local = NULL;
    const float *src;
    par_layout rep;
    par_plan plan;
    int64_t global = 1;
    int d;
    PAR__CHECK(par__params_index(ps, i, "par_params_gather"));
    if ((unsigned)field > (unsigned)PAR_PARAM_EXP_AVG_SQ)
        return par__fail(PAR_EINVAL, "par_params_gather: unknown field %d", (int)field);
    p = &ps->p[i];
    for (d = 0; d < p->layout.ndim; d++) global *= p->layout.shape[d];
    PAR__CHECK(par__params_local_of(ps, field, i, &local));
    src = local;
    if (par_layout_split_dims(&p->layout) & par__mesh_dims_mask(&p->layout.mesh)) {
        if (!ps->planner) PAR__CHECK(par__ctx_planner_create(ps->ctx, NULL, &ps->planner));
        if (!ps->exec) PAR__CHECK(par_executor_create(ps->ctx, &ps->exec));
        PAR__CHECK(par_layout_init(&rep, &p->layout.mesh, p->layout.ndim, p->layout.shape, NULL, 0));
        PAR__CHECK(par_planner_plan(ps->planner, &p->layout, &rep, NULL, &plan));
        PAR__CHECK(par__params_tmp(ps, &ps->tmp_whole, &ps->tmp_whole_n, plan.max_local_numel > global ? plan.max_local_numel : global));
        PAR__CHECK(par_execute_plan(ps->exec, &plan, PAR_F32, local, ps->tmp_whole));
        src = ps->tmp_whole;
    }
    if (!whole) return PAR_OK;
    return ps->ct->memcpy(ps->ct->user, whole, src, (size_t)global * sizeof(float),
                          ps->ct->device_memory ? PAR_COPY_DEVICE_TO_HOST : PAR_COPY_HOST_TO_HOST);
}

PARALLEL_DEF par_status par_params_set_local(par_params *ps, par_param_field field, int i, const float *local) {
    const par_copy_kind up = ps && ps->ct->device_memory ? PAR_COPY_HOST_TO_DEVICE : PAR_COPY_HOST_TO_HOST;
    const par__param *p;
    float *dst;
    PAR__CHECK(par__params_index(ps, i, "par_params_set_local"));
    if ((unsigned)field > (unsigned)PAR_PARAM_EXP_AVG_SQ)
        return par__fail(PAR_EINVAL, "par_params_set_local: unknown field %d", (int)field);
    if (!local && ps->p[i].numel) return par__fail(PAR_EINVAL, "par_params_set_local: NULL data");
    p = &ps->p[i];
    ps->tmp_bucket_of = -1; /* the gather cache may be stale now */
    if (field == PAR_PARAM_VALUE || !ps->zero) {
        dst = (field == PAR_PARAM_VALUE ? ps->value : field == PAR_PARAM_EXP_AVG ? ps->m : ps->v) + p->offset;
        return ps->ct->memcpy(ps->ct->user, dst, local, (size_t)p->numel * sizeof(float), up);
    }
    {   /* ZeRO: the part of the parameter inside this rank's shard of its bucket */
        const par__bucket *bk = &ps->b[p->bucket];
        const int64_t c0 = bk->start + bk->chunk_begin, c1 = c0 + bk->chunk;
        const int64_t lo = p->offset > c0 ? p->offset : c0, hi = p->offset + p->numel < c1 ? p->offset + p->numel : c1;
        if (lo >= hi) return PAR_OK;
        dst = (field == PAR_PARAM_EXP_AVG ? ps->m : ps->v) + bk->shard_offset + (lo - c0);
        return ps->ct->memcpy(ps->ct->user, dst, local + (lo - p->offset), (size_t)(hi - lo) * sizeof(float), up);
    }
}

PARALLEL_DEF par_status par_ctx_all_reduce_host(par_ctx *ctx, uint32_t dev_mask, par_reduce_op op, par_dtype dtype,
                                                void *values, int count) {
    const par_compute_table *ct;
    const par_comm_table *cm;
    const size_t bytes = (size_t)count * par_dtype_size(dtype);
    par_comm_group *g;
    void *buf = NULL;
    par_status st;
    int n = 1;
    if (!ctx || (!values && count > 0)) return par__fail(PAR_EINVAL, "par_ctx_all_reduce_host: NULL argument");
    if (count < 0 || !par_dtype_size(dtype))
        return par__fail(PAR_EINVAL, "par_ctx_all_reduce_host: count %d, dtype %d", count, (int)dtype);
    PAR__CHECK(par_ctx_group(ctx, dev_mask, &g, NULL, &n));
    if (n == 1 || count == 0) return PAR_OK;
    ct = par_ctx_compute(ctx), cm = par_ctx_comm(ctx);
    if (!ct->device_memory) return cm->all_reduce(cm->user, g, values, values, count, dtype, op, NULL);
    /* device transports (NCCL) reduce device memory: stage through it */
    PAR__CHECK(ct->alloc(ct->user, bytes, PAR_MEM_COMM, &buf));
    st = ct->memcpy(ct->user, buf, values, bytes, PAR_COPY_HOST_TO_DEVICE);
    if (st == PAR_OK) st = cm->all_reduce(cm->user, g, buf, buf, count, dtype, op, NULL);
    if (st == PAR_OK) st = ct->memcpy(ct->user, values, buf, bytes, PAR_COPY_DEVICE_TO_HOST);
    ct->free(ct->user, buf);
    return st;
}

#ifndef PARALLEL_NO_CHECKPOINT
/* ---- sharded checkpoints ------------------------------------------------------ */

#define PAR__CKPT_INDEX "model.safetensors.index.json"
#define PAR__CKPT_FORMAT "parallel.h-sharded-1"
static const char *const par__ckpt_fields[3] = {"value", "exp_avg", "exp_avg_sq"};
static const char *const par__ckpt_prefix[3] = {"", "exp_avg.", "exp_avg_sq."};

/* One piece this rank writes: where it lies and where its data is. */
typedef struct par__ckpt_piece {
    int param, field, ndim;
    int64_t start[PARALLEL_MAX_DIMS], local[PARALLEL_MAX_DIMS];
    int64_t begin, end;  /* flat range of the slice */
    const float *src;    /* device or host memory: elements [begin, end) */
    char name[300];      /* stored tensor name */
} par__ckpt_piece;

/* Every rank learns whether all succeeded: a sum of failure flags over the
   mesh. A rank that was fine but sees another's failure reports that. */
static par_status par__ckpt_agree(par_params *ps, par_status st, const char *fn) {
    int32_t bad = st != PAR_OK;
    par_status cs = par_ctx_all_reduce_host(ps->ctx, (1u << par_ctx_mesh(ps->ctx)->ndim) - 1u, PAR_REDUCE_SUM, PAR_I32,
                                            &bad, 1);
    if (st != PAR_OK) return st;
    if (cs != PAR_OK) return cs;
    if (bad) return par__fail(PAR_EIO, "%s: %d other rank(s) failed (see their errors)", fn, (int)bad);
    return PAR_OK;
}

#if PAR__ST_POSIX
#include <dirent.h>

/* Remove a directory of plain files (the step directories hold nothing else). */
static void par__ckpt_rmdir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[2048];
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        (void)unlink(path);
    }
    closedir(d);
    (void)rmdir(dir);
}

static void par__ckpt_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) (void)fsync(fd), close(fd);
}

/* Write a small text file atomically: temp name, fsync, rename, fsync the directory. */
static par_status par__ckpt_write_text(const char *fn, const char *path, const char *text, size_t n) {
    char tmp[2100];
    int fd;
    size_t done = 0;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return par__fail(PAR_EIO, "%s: %s: cannot create: %s", fn, tmp, strerror(errno));
    while (done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w <= 0) {
            const char *why = strerror(errno);
            close(fd), unlink(tmp);
            return par__fail(PAR_EIO, "%s: %s: write failed: %s", fn, tmp, why);
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        unlink(tmp);
        return par__fail(PAR_EIO, "%s: %s: fsync failed: %s", fn, tmp, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        const char *why = strerror(errno);
        unlink(tmp);
        return par__fail(PAR_EIO, "%s: cannot rename %s to %s: %s", fn, tmp, path, why);
    }
    par__st_sync_dir(NULL, path);
    return PAR_OK;
}

/* Growing text for the index. */
typedef struct par__ckpt_text {
    char *p;
    size_t n, cap;
    int oom;
} par__ckpt_text;

static void par__ckpt_put(par__ckpt_text *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        char *q;
        while (cap < t->n + n + 1) cap *= 2;
        if (!(q = (char *)PARALLEL_REALLOC(t->p, cap))) {
            t->oom = 1;
            return;
        }
        t->p = q, t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
}

static void par__ckpt_puts(par__ckpt_text *t, const char *s) { par__ckpt_put(t, s, strlen(s)); }

/* A JSON string: quotes, backslashes and control bytes escaped (UTF-8 as is). */
static void par__ckpt_json_string(par__ckpt_text *t, const char *s) {
    char esc[8];
    par__ckpt_puts(t, "\"");
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') esc[0] = '\\', esc[1] = (char)c, par__ckpt_put(t, esc, 2);
        else if (c == '\n') par__ckpt_put(t, "\\n", 2);
        else if (c == '\t') par__ckpt_put(t, "\\t", 2);
        else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c), par__ckpt_put(t, esc, 6);
        else par__ckpt_put(t, s, 1);
    }
    par__ckpt_puts(t, "\"");
}

/* This rank's index among the ranks that differ from it only on the device
   dims of mask (row-major over those dims; any fixed order would do, since
   it is only compared with a number every rank computes alike), and their
   count. */
static int par__ckpt_index_on(const par_mesh *mesh, int rank, uint32_t mask, int *size) {
    int coords[PARALLEL_MAX_DIMS], v, idx = 0;
    *size = 1;
    if (par_mesh_coords(mesh, rank, coords) != PAR_OK) return -1;
    for (v = mesh->ndim - 1; v >= 0; v--)
        if (mask >> v & 1u) {
            const int n = par_mesh_dev_size(mesh, v);
            idx = idx * n + coords[mesh->ndim - 1 - v], *size *= n;
        }
    return idx;
}

/* The pieces this rank writes (count first with out == NULL). Of the ranks
   holding the same piece, one writes it: piece k of the set goes to copy
   k mod copies, so replicated tensors spread over the ranks (pure data
   parallel writes from every rank, not all from rank 0). */
static int par__ckpt_pieces(par_params *ps, par__ckpt_piece *out) {
    const par_mesh *mesh = par_ctx_mesh(ps->ctx);
    const int rank = par_ctx_rank(ps->ctx);
    int i, f, n = 0;
    for (i = 0; i < ps->n; i++) {
        const par__param *p = &ps->p[i];
        const par__bucket *bk = &ps->b[p->bucket];
        int64_t global = 1;
        int d;
        for (d = 0; d < p->layout.ndim; d++) global *= p->layout.shape[d];
        for (f = 0; f < 3; f++) {
            const int zero = f > 0 && ps->zero;
            int64_t lo = 0, hi = p->numel;
            const float *src;
            par__ckpt_piece *q = out ? &out[n] : NULL;
            {
                int copies, idx = par__ckpt_index_on(mesh, rank, zero ? p->replica_dims & ~ps->data_dims : p->replica_dims,
                                                    &copies);
                if (idx != (3 * i + f) % copies) continue;
            }
            if (zero) { /* the part of the parameter inside this rank's shard of its bucket */
                const int64_t c0 = bk->start + bk->chunk_begin, c1 = c0 + bk->chunk;
                lo = (p->offset > c0 ? p->offset : c0) - p->offset;
                hi = (p->offset + p->numel < c1 ? p->offset + p->numel : c1) - p->offset;
                if (lo >= hi) continue;
                src = (f == 1 ? ps->m : ps->v) + bk->shard_offset + (p->offset + lo - c0);
            } else {
                src = (f == 0 ? ps->value : f == 1 ? ps->m : ps->v) + p->offset;
            }
            n++;
            if (!q) continue;
            memset(q, 0, sizeof *q);
            q->param = i, q->field = f, q->ndim = p->layout.ndim, q->begin = lo, q->end = hi, q->src = src;
            par_layout_local_shape(&p->layout, q->local);
            (void)par_layout_local_offset(&p->layout, rank, q->start);
            if (lo == 0 && hi == global) snprintf(q->name, sizeof q->name, "%s%s", par__ckpt_prefix[f], p->name);
            else snprintf(q->name, sizeof q->name, "%s%s@%d", par__ckpt_prefix[f], p->name, rank);
        }
    }
    return n;
}

static void par__ckpt_dims(char *buf, size_t size, int n, const int64_t *v) {
    int d;
    size_t at = strlen(buf);
    for (d = 0; d < n && at < size; d++) at += (size_t)snprintf(buf + at, size - at, " %lld", (long long)v[d]);
}

/* This rank's shard file in directory tmp. */
static par_status par__ckpt_write_shard(par_params *ps, const par_ckpt_desc *d, const char *tmpdir, int nshards) {
    const int rank = par_ctx_rank(ps->ctx);
    const int np = par__ckpt_pieces(ps, NULL);
    par__ckpt_piece *pc = (par__ckpt_piece *)par__ctx_malloc(ps->ctx, (size_t)(np ? np : 1) * sizeof *pc);
    par_st_writer *w = NULL;
    char path[2100], key[400], val[1024];
    float *bounce = NULL;
    int64_t bounce_n = 0;
    par_status st;
    int k;
    if (!pc) return par__fail(PAR_ENOMEM, "par_params_save: out of memory");
    par__ckpt_pieces(ps, pc);
    snprintf(path, sizeof path, "%s/shard-%05d-of-%05d.safetensors", tmpdir, rank, nshards);
    st = par_st_writer_create(path, &w);
    for (k = 0; k < np && st == PAR_OK; k++) {
        const par__ckpt_piece *q = &pc[k];
        const par__param *p = &ps->p[q->param];
        int64_t whole = 1, one;
        int dd, full;
        for (dd = 0; dd < q->ndim; dd++) whole *= q->local[dd];
        full = q->begin == 0 && q->end == whole;
        one = q->end - q->begin;
        /* the whole slice keeps its shape (the global one when it is the tensor) */
        st = par_st_writer_add(w, q->name, PAR_F32, full ? q->ndim : 1, full ? q->local : &one,
                               ps->ct->device_memory ? NULL : (const void *)q->src);
        snprintf(key, sizeof key, "par.piece.%s", q->name);
        snprintf(val, sizeof val, "%s %d", par__ckpt_fields[q->field], q->ndim);
        par__ckpt_dims(val, sizeof val, q->ndim, p->layout.shape);
        par__ckpt_dims(val, sizeof val, q->ndim, q->start);
        par__ckpt_dims(val, sizeof val, q->ndim, q->local);
        snprintf(val + strlen(val), sizeof val - strlen(val), " %lld %lld %s", (long long)q->begin, (long long)q->end,
                 p->name);
        if (st == PAR_OK) st = par_st_writer_metadata(w, key, val);
    }
    snprintf(val, sizeof val, "%lld", (long long)ps->step);
    if (st == PAR_OK) st = par_st_writer_metadata(w, "par.step", val);
    snprintf(val, sizeof val, "%d", nshards);
    if (st == PAR_OK) st = par_st_writer_metadata(w, "par.num_shards", val);
    snprintf(val, sizeof val, "%d", rank);
    if (st == PAR_OK) st = par_st_writer_metadata(w, "par.shard", val);
    if (st == PAR_OK) st = par_st_writer_metadata(w, "par.format", PAR__CKPT_FORMAT);
    for (k = 0; rank == 0 && k < d->num_meta && st == PAR_OK; k++) {
        snprintf(key, sizeof key, "host.%s", d->meta_keys[k]);
        st = par_st_writer_metadata(w, key, d->meta_values[k]);
    }
    if (st == PAR_OK && ps->ct->device_memory && np) { /* through a bounded host buffer */
        bounce_n = (d->buffer_bytes > 0 ? d->buffer_bytes : 4 << 20) / (int64_t)sizeof(float);
        if (bounce_n < 1) bounce_n = 1;
        if (!(bounce = (float *)par__ctx_malloc(ps->ctx, (size_t)bounce_n * sizeof(float))))
            st = par__fail(PAR_ENOMEM, "par_params_save: out of memory (bounce buffer)");
        for (k = 0; k < np && st == PAR_OK; k++) {
            int64_t at;
            for (at = pc[k].begin; at < pc[k].end && st == PAR_OK; at += bounce_n) {
                const int64_t c = pc[k].end - at < bounce_n ? pc[k].end - at : bounce_n;
                st = ps->ct->memcpy(ps->ct->user, bounce, pc[k].src + (at - pc[k].begin), (size_t)c * sizeof(float),
                                    PAR_COPY_DEVICE_TO_HOST);
                if (st == PAR_OK) st = par_st_writer_write(w, pc[k].name, bounce, c);
            }
        }
    }
    if (st == PAR_OK) st = par_st_writer_finish(w);
    else if (w) par_st_writer_abort(w);
    par__ctx_free(ps->ctx, bounce), par__ctx_free(ps->ctx, pc);
    return st;
}

/* Rank 0: the index from the shard headers just written. */
static par_status par__ckpt_write_index(const par_ckpt_desc *d, const char *tmpdir, int nshards, int64_t step) {
    par__ckpt_text t;
    char path[2100], file[64], num[64];
    int64_t total = 0;
    par_status st = PAR_OK;
    int r, k, first = 1;
    memset(&t, 0, sizeof t);
    par__ckpt_puts(&t, "{\n  \"weight_map\": {");
    for (r = 0; r < nshards && st == PAR_OK; r++) {
        par_st_file *f = NULL;
        snprintf(file, sizeof file, "shard-%05d-of-%05d.safetensors", r, nshards);
        snprintf(path, sizeof path, "%s/%s", tmpdir, file);
        if ((st = par_st_open(path, &f)) != PAR_OK) break;
        for (k = 0; k < par_st_count(f); k++) {
            const par_st_tensor *ti = par_st_tensor_at(f, k);
            par__ckpt_puts(&t, first ? "\n    " : ",\n    ");
            first = 0;
            par__ckpt_json_string(&t, ti->name);
            par__ckpt_puts(&t, ": ");
            par__ckpt_json_string(&t, file);
            total += (int64_t)ti->nbytes;
        }
        par_st_close(f);
    }
    par__ckpt_puts(&t, "\n  },\n  \"metadata\": {\n    \"total_size\": ");
    snprintf(num, sizeof num, "%lld", (long long)total);
    par__ckpt_puts(&t, num);
    par__ckpt_puts(&t, ",\n    \"par.format\": \"" PAR__CKPT_FORMAT "\",\n    \"par.num_shards\": \"");
    snprintf(num, sizeof num, "%d", nshards);
    par__ckpt_puts(&t, num);
    par__ckpt_puts(&t, "\",\n    \"par.step\": \"");
    snprintf(num, sizeof num, "%lld", (long long)step);
    par__ckpt_puts(&t, num);
    par__ckpt_puts(&t, "\"");
    for (k = 0; k < d->num_meta; k++) {
        char key[400];
        snprintf(key, sizeof key, "host.%s", d->meta_keys[k]);
        par__ckpt_puts(&t, ",\n    ");
        par__ckpt_json_string(&t, key);
        par__ckpt_puts(&t, ": ");
        par__ckpt_json_string(&t, d->meta_values[k]);
    }
    par__ckpt_puts(&t, "\n  }\n}\n");
    if (st == PAR_OK && t.oom) st = par__fail(PAR_ENOMEM, "par_params_save: out of memory (index)");
    snprintf(path, sizeof path, "%s/" PAR__CKPT_INDEX, tmpdir);
    if (st == PAR_OK) st = par__ckpt_write_text("par_params_save", path, t.p, t.n);
    PARALLEL_FREE(t.p);
    return st;
}

/* 1: "step-N" (a complete step directory); 2: "step-N.tmp" / "step-N.old"
   (left by a save that was killed); 0: anything else. */
static int par__ckpt_step_of(const char *name, int64_t *step) {
    char *end = NULL;
    long long v;
    if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9') return 0;
    v = strtoll(name + 5, &end, 10);
    *step = v;
    if (!*end) return 1;
    return strcmp(end, ".tmp") == 0 || strcmp(end, ".old") == 0 ? 2 : 0;
}

/* Rank 0: remove step directories beyond the newest `keep` (never `current`). */
static void par__ckpt_prune(const char *dir, int keep, const char *current) {
    int64_t *steps = NULL, s;
    int n = 0, cap = 0, i, j;
    DIR *d;
    struct dirent *e;
    char path[2100];
    if (keep < 0 || !(d = opendir(dir))) return;
    while ((e = readdir(d)) != NULL) {
        const int kind = par__ckpt_step_of(e->d_name, &s);
        if (kind == 2) { /* a killed save's leftovers: only this save writes here now */
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            par__ckpt_rmdir(path);
        } else if (kind == 1) {
            if (n == cap) {
                int64_t *q = (int64_t *)PARALLEL_REALLOC(steps, (size_t)(cap ? 2 * cap : 16) * sizeof *q);
                if (!q) break;
                steps = q, cap = cap ? 2 * cap : 16;
            }
            steps[n++] = s;
        }
    }
    closedir(d);
    for (i = 1; i < n; i++) /* newest first */
        for (j = i; j > 0 && steps[j - 1] < steps[j]; j--) s = steps[j], steps[j] = steps[j - 1], steps[j - 1] = s;
    for (i = keep; i < n; i++) {
        snprintf(path, sizeof path, "step-%08lld", (long long)steps[i]);
        if (strcmp(path, current) == 0) continue;
        snprintf(path, sizeof path, "%s/step-%08lld", dir, (long long)steps[i]);
        par__ckpt_rmdir(path);
    }
    if (n > keep) par__ckpt_fsync_path(dir);
    PARALLEL_FREE(steps);
}
#endif /* PAR__ST_POSIX */

static void par__ckpt_stage(const par_ckpt_desc *d, int rank, const char *stage) {
    if (rank == 0 && d->on_stage) d->on_stage(d->user, stage);
}

PARALLEL_DEF par_status par_params_save(par_params *ps, const par_ckpt_desc *d) {
#if PAR__ST_POSIX
    char tmpdir[1200], final[1100], name[64], aside[1200], line[80];
    struct stat sb;
    par_status st = PAR_OK;
    int rank, nshards, k, j;
    if (!ps || !d) return par__fail(PAR_EINVAL, "par_params_save: NULL argument");
    if (!d->dir || !*d->dir) return par__fail(PAR_EINVAL, "par_params_save: desc.dir is empty");
    if (strlen(d->dir) > 1000) return par__fail(PAR_EINVAL, "par_params_save: desc.dir is longer than 1000 bytes");
    if (d->step < 0 || d->step > 99999999)
        return par__fail(PAR_EINVAL, "par_params_save: desc.step %lld is not in [0, 99999999]", (long long)d->step);
    if (d->num_meta < 0 || (d->num_meta > 0 && (!d->meta_keys || !d->meta_values)))
        return par__fail(PAR_EINVAL, "par_params_save: desc.num_meta %d without meta_keys and meta_values", d->num_meta);
    if (d->buffer_bytes < 0)
        return par__fail(PAR_EINVAL, "par_params_save: desc.buffer_bytes %lld < 0", (long long)d->buffer_bytes);
    for (k = 0; k < d->num_meta; k++) {
        if (!d->meta_keys[k] || !*d->meta_keys[k] || !d->meta_values[k])
            return par__fail(PAR_EINVAL, "par_params_save: host metadata %d has an empty key or a NULL value", k);
        if (strlen(d->meta_keys[k]) > 200 || strlen(d->meta_values[k]) > 65536)
            return par__fail(PAR_EINVAL, "par_params_save: host metadata \"%.40s\": key over 200 or value over "
                                         "65536 bytes", d->meta_keys[k]);
        for (j = 0; j < k; j++)
            if (strcmp(d->meta_keys[j], d->meta_keys[k]) == 0)
                return par__fail(PAR_EINVAL, "par_params_save: host metadata key \"%s\" given twice", d->meta_keys[k]);
    }
    if (ps->in_micro)
        return par__fail(PAR_EINVAL, "par_params_save: micro-batch %d is still open (par_params_grads_wait)", ps->micro);
    rank = par_ctx_rank(ps->ctx), nshards = par_ctx_size(ps->ctx);
    snprintf(name, sizeof name, "step-%08lld", (long long)d->step);
    snprintf(final, sizeof final, "%s/%s", d->dir, name);
    snprintf(tmpdir, sizeof tmpdir, "%s.tmp", final);
    /* 1. rank 0 makes the root and a fresh temporary step directory */
    if (rank == 0) {
        if (stat(d->dir, &sb) != 0 && mkdir(d->dir, 0755) != 0 && errno != EEXIST)
            st = par__fail(PAR_EIO, "par_params_save: cannot create the checkpoint directory %s: %s", d->dir,
                           strerror(errno));
        else if (stat(d->dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = par__fail(PAR_EIO, "par_params_save: %s is not a directory", d->dir);
        if (st == PAR_OK) {
            par__ckpt_rmdir(tmpdir); /* left by a save that crashed */
            if (mkdir(tmpdir, 0755) != 0)
                st = par__fail(PAR_EIO, "par_params_save: cannot create %s: %s", tmpdir, strerror(errno));
        }
    }
    PAR__CHECK(par__ckpt_agree(ps, st, "par_params_save"));
    /* 2. every rank its shard */
    st = par__ckpt_write_shard(ps, d, tmpdir, nshards);
    if ((st = par__ckpt_agree(ps, st, "par_params_save")) != PAR_OK) {
        if (rank == 0) par__ckpt_rmdir(tmpdir);
        return st;
    }
    if (rank == 0) {
        par__ckpt_stage(d, rank, "shards written");
        /* 3. the index, last inside the directory */
        st = par__ckpt_write_index(d, tmpdir, nshards, ps->step);
        if (st == PAR_OK) par__ckpt_stage(d, rank, "index written");
        /* 4. into place: a re-save of the same step moves the old one aside first */
        if (st == PAR_OK) {
            par__ckpt_fsync_path(tmpdir);
            snprintf(aside, sizeof aside, "%s.old", final);
            par__ckpt_rmdir(aside);
            if (stat(final, &sb) == 0 && rename(final, aside) != 0)
                st = par__fail(PAR_EIO, "par_params_save: cannot move the old %s aside: %s", final, strerror(errno));
            else if (rename(tmpdir, final) != 0) {
                st = par__fail(PAR_EIO, "par_params_save: cannot rename %s to %s: %s", tmpdir, final, strerror(errno));
                (void)rename(aside, final); /* the old one back where it was */
            }
            if (st == PAR_OK) par__ckpt_fsync_path(d->dir), par__ckpt_stage(d, rank, "renamed");
        }
        /* 5. latest, atomically */
        if (st == PAR_OK) {
            char lpath[1100];
            snprintf(lpath, sizeof lpath, "%s/latest", d->dir);
            snprintf(line, sizeof line, "%s\n", name);
            st = par__ckpt_write_text("par_params_save", lpath, line, strlen(line));
            if (st == PAR_OK) par__ckpt_stage(d, rank, "latest");
        }
        /* 6. only now the old ones go */
        if (st == PAR_OK) {
            par__ckpt_rmdir(aside);
            par__ckpt_prune(d->dir, d->keep == 0 ? 2 : d->keep, name);
            par__ckpt_stage(d, rank, "pruned");
        } else {
            par__ckpt_rmdir(tmpdir);
        }
    }
    return par__ckpt_agree(ps, st, "par_params_save");
#else
    (void)ps, (void)d;
    return par__fail(PAR_EUNSUPPORTED, "par_params_save: sharded checkpoints need a POSIX system");
#endif
}

/* ---- reading ---- */

typedef struct par__ckpt_rpiece {
    int file, field, ndim;
    int64_t shape[PARALLEL_MAX_DIMS], start[PARALLEL_MAX_DIMS], local[PARALLEL_MAX_DIMS];
    int64_t begin, end;
    const char *name;   /* stored tensor (owned by the file) */
    const char *param;  /* parameter name (inside the file's metadata value) */
} par__ckpt_rpiece;

typedef struct par__ckpt {
    int nfiles, npieces;
    par_st_file **files;
    par__ckpt_rpiece *pieces;
    char **paths;
} par__ckpt;

static void par__ckpt_close(par__ckpt *c) {
    int i;
    for (i = 0; i < c->nfiles; i++) {
        if (c->files) par_st_close(c->files[i]);
        if (c->paths) PARALLEL_FREE(c->paths[i]);
    }
    PARALLEL_FREE(c->files), PARALLEL_FREE(c->paths), PARALLEL_FREE(c->pieces);
    memset(c, 0, sizeof *c);
}

PARALLEL_DEF void par_ckpt_info_free(par_ckpt_info *info) {
    if (!info) return;
    PARALLEL_FREE(info->meta_);
    info->meta_ = NULL, info->meta_len_ = 0;
}

PARALLEL_DEF const char *par_ckpt_metadata(const par_ckpt_info *info, const char *key) {
    int64_t at = 0;
    if (!info || !key || !info->meta_) return NULL;
    while (at < info->meta_len_) {
        const char *k = info->meta_ + at, *v = k + strlen(k) + 1;
        if (strcmp(k, key) == 0) return v;
        at = (v - info->meta_) + (int64_t)strlen(v) + 1;
    }
    return NULL;
}

/* "<field> <ndim> dims... <begin> <end> <name>" */
static int par__ckpt_parse_piece(const char *s, par__ckpt_rpiece *p) {
    char *end;
    int f, d, k;
    for (f = 0; f < 3; f++) {
        const size_t n = strlen(par__ckpt_fields[f]);
        if (strncmp(s, par__ckpt_fields[f], n) == 0 && s[n] == ' ') break;
    }
    if (f == 3) return 0;
    p->field = f;
    s += strlen(par__ckpt_fields[f]);
    p->ndim = (int)strtol(s, &end, 10);
    if (end == s || p->ndim < 0 || p->ndim > PARALLEL_MAX_DIMS) return 0;
    s = end;
    for (k = 0; k < 3; k++)
        for (d = 0; d < p->ndim; d++) {
            int64_t *v = k == 0 ? p->shape : k == 1 ? p->start : p->local;
            v[d] = (int64_t)strtoll(s, &end, 10);
            if (end == s || v[d] < 0) return 0;
            s = end;
        }
    p->begin = (int64_t)strtoll(s, &end, 10);
    if (end == s) return 0;
    s = end;
    p->end = (int64_t)strtoll(s, &end, 10);
    if (end == s || *end != ' ' || !end[1]) return 0;
    p->param = end + 1;
    {
        int64_t n = 1;
        for (d = 0; d < p->ndim; d++) {
            if (p->start[d] + p->local[d] > p->shape[d]) return 0;
            n *= p->local[d];
        }
        if (p->begin < 0 || p->begin > p->end || p->end > n) return 0;
    }
    return 1;
}

/* Resolve `path` (a step directory, or a root holding `latest`) into dir. */
static par_status par__ckpt_resolve(const char *fn, const char *path, char *dir, size_t size) {
#if PAR__ST_POSIX
    struct stat sb;
    char p[1100];
    if (!path || !*path) return par__fail(PAR_EINVAL, "%s: empty checkpoint path", fn);
    if (strlen(path) > 1000) return par__fail(PAR_EINVAL, "%s: checkpoint path longer than 1000 bytes", fn);
    snprintf(p, sizeof p, "%s/" PAR__CKPT_INDEX, path);
    if (stat(p, &sb) == 0) return snprintf(dir, size, "%s", path), PAR_OK;
    snprintf(p, sizeof p, "%s/latest", path);
    if (stat(p, &sb) == 0) {
        char line[200];
        size_t n;
        FILE *f = fopen(p, "r");
        if (!f || !fgets(line, sizeof line, f)) {
            if (f) fclose(f);
            return par__fail(PAR_EIO, "%s: %s: cannot read it", fn, p);
        }
        fclose(f);
        n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (!n || strchr(line, '/'))
            return par__fail(PAR_EPARSE, "%s: %s: \"%s\" is not a step directory name", fn, p, line);
        snprintf(dir, size, "%s/%s", path, line);
        snprintf(p, sizeof p, "%s/" PAR__CKPT_INDEX, dir);
        if (stat(p, &sb) != 0)
            return par__fail(PAR_EIO, "%s: %s names %s, which has no " PAR__CKPT_INDEX " (incomplete or removed)", fn,
                             path, dir);
        return PAR_OK;
    }
    return par__fail(PAR_EIO, "%s: %s: not a checkpoint (no " PAR__CKPT_INDEX " and no latest)", fn, path);
#else
    (void)path, (void)dir, (void)size;
    return par__fail(PAR_EUNSUPPORTED, "%s: sharded checkpoints need a POSIX system", fn);
#endif
}

/* A metadata string of the index: the value after "\"key\": \"". */
static int par__ckpt_index_value(const char *text, const char *key, char *out, size_t size) {
    char pat[128];
    const char *s, *e;
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    if (!(s = strstr(text, pat))) return 0;
    s += strlen(pat);
    if (!(e = strchr(s, '"')) || (size_t)(e - s) >= size) return 0;
    memcpy(out, s, (size_t)(e - s));
    out[e - s] = 0;
    return 1;
}

/* Open the index and every shard header; parse the pieces and host metadata. */
static par_status par__ckpt_open(const char *fn, const char *path, par__ckpt *c, par_ckpt_info *info) {
    char ipath[1200], num[64], stepbuf[64], *text = NULL, *end = NULL;
    long nshards;
    long long step;
    FILE *f;
    size_t n = 0, cap = 0;
    int r, k;
    memset(c, 0, sizeof *c);
    memset(info, 0, sizeof *info);
    PAR__CHECK(par__ckpt_resolve(fn, path, info->dir, sizeof info->dir));
    snprintf(ipath, sizeof ipath, "%s/" PAR__CKPT_INDEX, info->dir);
    if (!(f = fopen(ipath, "rb"))) return par__fail(PAR_EIO, "%s: %s: cannot open: %s", fn, ipath, strerror(errno));
    for (;;) {
        size_t got;
        if (n + 4097 > cap) {
            char *q = (char *)PARALLEL_REALLOC(text, cap = cap ? 2 * cap : 65536);
            if (!q) return fclose(f), PARALLEL_FREE(text), par__fail(PAR_ENOMEM, "%s: out of memory", fn);
            text = q;
        }
        if (!(got = fread(text + n, 1, 4096, f))) break;
        n += got;
    }
    fclose(f);
    text[n] = 0;
    if (!par__ckpt_index_value(text, "par.format", num, sizeof num) || strcmp(num, PAR__CKPT_FORMAT) != 0 ||
        !par__ckpt_index_value(text, "par.num_shards", num, sizeof num) ||
        !par__ckpt_index_value(text, "par.step", stepbuf, sizeof stepbuf) || !strstr(text, "\"weight_map\"")) {
        PARALLEL_FREE(text);
        return par__fail(PAR_EPARSE, "%s: %s: not a parallel.h sharded index (par.format \"" PAR__CKPT_FORMAT
                                     "\", par.num_shards, par.step and weight_map are required)", fn, ipath);
    }
    PARALLEL_FREE(text);
    nshards = strtol(num, &end, 10);
    if (*end || nshards < 1 || nshards > 1000000)
        return par__fail(PAR_EPARSE, "%s: %s: par.num_shards \"%s\" is not a positive count", fn, ipath, num);
    step = strtoll(stepbuf, &end, 10);
    if (*end || step < 0) return par__fail(PAR_EPARSE, "%s: %s: par.step \"%s\" is not a step", fn, ipath, stepbuf);
    info->step = step, info->num_shards = (int)nshards;
    c->files = (par_st_file **)PARALLEL_MALLOC((size_t)nshards * sizeof *c->files);
    c->paths = (char **)PARALLEL_MALLOC((size_t)nshards * sizeof *c->paths);
    if (!c->files || !c->paths) return par__ckpt_close(c), par__fail(PAR_ENOMEM, "%s: out of memory", fn);
    memset(c->files, 0, (size_t)nshards * sizeof *c->files), memset(c->paths, 0, (size_t)nshards * sizeof *c->paths);
    c->nfiles = (int)nshards;
    for (r = 0; r < nshards; r++) {
        const char *v;
        char want[64];
        if (!(c->paths[r] = (char *)PARALLEL_MALLOC(1200))) return par__ckpt_close(c), par__fail(PAR_ENOMEM, "%s: out of memory", fn);
        snprintf(c->paths[r], 1200, "%s/shard-%05d-of-%05ld.safetensors", info->dir, r, nshards);
        if (par_st_open(c->paths[r], &c->files[r]) != PAR_OK) {
            char why[600];
            par__copy_text(why, sizeof why, par_last_error());
            par__ckpt_close(c);
            return par__fail(PAR_EIO, "%s: %s", fn, why);
        }
        snprintf(want, sizeof want, "%ld", nshards);
        if (!(v = par_st_metadata(c->files[r], "par.num_shards")) || strcmp(v, want) != 0 ||
            !(v = par_st_metadata(c->files[r], "par.step")) || strcmp(v, stepbuf) != 0) {
            par__fail(PAR_EPARSE, "%s: %s: par.num_shards or par.step differ from the index's (%s, %s)", fn,
                      c->paths[r], want, stepbuf);
            return par__ckpt_close(c), PAR_EPARSE;
        }
        c->npieces += par_st_count(c->files[r]);
    }
    c->pieces = (par__ckpt_rpiece *)PARALLEL_MALLOC((size_t)(c->npieces ? c->npieces : 1) * sizeof *c->pieces);
    if (!c->pieces) return par__ckpt_close(c), par__fail(PAR_ENOMEM, "%s: out of memory", fn);
    c->npieces = 0;
    for (r = 0; r < c->nfiles; r++) {
        par_st_file *sf = c->files[r];
        for (k = 0; k < par_st_count(sf); k++) {
            const par_st_tensor *t = par_st_tensor_at(sf, k);
            par__ckpt_rpiece *p = &c->pieces[c->npieces];
            char key[400];
            const char *v;
            snprintf(key, sizeof key, "par.piece.%s", t->name);
            memset(p, 0, sizeof *p);
            if (!(v = par_st_metadata(sf, key)) || !par__ckpt_parse_piece(v, p)) {
                par__fail(PAR_EPARSE, "%s: %s: tensor \"%s\": %s", fn, c->paths[r], t->name,
                          v ? "malformed piece description" : "no piece description (par.piece.<name>)");
                return par__ckpt_close(c), PAR_EPARSE;
            }
            if (t->dtype != PAR_F32 || t->numel != p->end - p->begin) {
                par__fail(PAR_EPARSE, "%s: %s: tensor \"%s\" holds %lld %s elements, its description says %lld F32", fn,
                          c->paths[r], t->name, (long long)t->numel, par_dtype_name(t->dtype),
                          (long long)(p->end - p->begin));
                return par__ckpt_close(c), PAR_EPARSE;
            }
            p->file = r, p->name = t->name;
            if (p->field > 0) info->has_moments = 1;
            c->npieces++;
        }
    }
    { /* host metadata of shard 0: "host.<key>" */
        int64_t len = 0;
        int m;
        const char *key, *val;
        for (m = 0; m < par_st_metadata_count(c->files[0]); m++)
            if (par_st_metadata_at(c->files[0], m, &key, &val) == PAR_OK && strncmp(key, "host.", 5) == 0)
                len += (int64_t)strlen(key) - 5 + 1 + (int64_t)strlen(val) + 1;
        if (len) {
            if (!(info->meta_ = (char *)PARALLEL_MALLOC((size_t)len)))
                return par__ckpt_close(c), par__fail(PAR_ENOMEM, "%s: out of memory", fn);
            for (m = 0; m < par_st_metadata_count(c->files[0]); m++)
                if (par_st_metadata_at(c->files[0], m, &key, &val) == PAR_OK && strncmp(key, "host.", 5) == 0) {
                    memcpy(info->meta_ + info->meta_len_, key + 5, strlen(key) - 4);
                    info->meta_len_ += (int64_t)strlen(key) - 4;
                    memcpy(info->meta_ + info->meta_len_, val, strlen(val) + 1);
                    info->meta_len_ += (int64_t)strlen(val) + 1;
                }
        }
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_ckpt_inspect(const char *path, int verify, par_ckpt_info *info) {
    par__ckpt c;
    par_ckpt_info tmp;
    par_status st = PAR_OK;
    int r;
    if (!info) info = &tmp;
    st = par__ckpt_open("par_ckpt_inspect", path, &c, info);
    if (st != PAR_OK) return st;
    for (r = 0; verify && r < c.nfiles && st == PAR_OK; r++) st = par_st_verify(c.files[r], NULL);
    par__ckpt_close(&c);
    if (st != PAR_OK || info == &tmp) par_ckpt_info_free(info);
    return st;
}

/* Copy the part of piece q (data: its elements [begin, end)) that falls in
   this rank's slice (start ms, shape ml) and its needed flat range [na, nb)
   into dst (the slice), marking what was filled. By runs along the last dim.
   With data NULL it only counts (so a piece with nothing for this rank, e.g.
   another rank's ZeRO range of the same slice, is never read). Returns the
   number of elements placed. */
static int64_t par__ckpt_place(const par__ckpt_rpiece *q, const float *data, const int64_t *ms, const int64_t *ml,
                            int64_t na, int64_t nb, float *dst, unsigned char *filled) {
    const int nd = q->ndim;
    const int64_t last = nd ? q->local[nd - 1] : 1;
    int64_t k = q->begin, placed = 0;
    while (k < q->end) {
        int64_t c[PARALLEL_MAX_DIMS] = {0}, rem = k, run, g0, lo, hi, off = 0;
        int d, inside = 1;
        for (d = nd - 1; d >= 0; d--) c[d] = rem % q->local[d], rem /= q->local[d];
        run = last - (nd ? c[nd - 1] : 0);
        if (run > q->end - k) run = q->end - k;
        for (d = 0; d + 1 < nd; d++) {
            const int64_t g = q->start[d] + c[d];
            if (g < ms[d] || g >= ms[d] + ml[d]) inside = 0;
            off = off * ml[d] + (g - ms[d]);
        }
        if (inside) {
            g0 = nd ? q->start[nd - 1] + c[nd - 1] : 0;
            lo = nd ? (g0 > ms[nd - 1] ? g0 : ms[nd - 1]) : 0;
            hi = nd ? (g0 + run < ms[nd - 1] + ml[nd - 1] ? g0 + run : ms[nd - 1] + ml[nd - 1]) : 1;
            if (lo < hi) {
                int64_t a = (nd ? off * ml[nd - 1] + (lo - ms[nd - 1]) : 0), b = a + (hi - lo), src = k - q->begin + (lo - g0);
                if (a < na) src += na - a, a = na;
                if (b > nb) b = nb;
                if (a < b && data) {
                    memcpy(dst + a, data + src, (size_t)(b - a) * sizeof(float));
                    memset(filled + a, 1, (size_t)(b - a));
                }
                if (a < b) placed += b - a;
            }
        }
        k += run;
    }
    return placed;
}

/* Host buffers of a load, grown as needed and kept across parameters (fresh
   large allocations cost a page fault per 4 KiB). */
typedef struct par__ckpt_ws {
    float *piece, *local;
    unsigned char *filled;
    int64_t piece_n, local_n;
} par__ckpt_ws;

static int par__ckpt_grow(float **p, int64_t *have, int64_t n) {
    float *q;
    if (*have >= n) return 1;
    if (!(q = (float *)PARALLEL_REALLOC(*p, (size_t)(n ? n : 1) * sizeof(float)))) return 0;
    *p = q, *have = n;
    return 1;
}

/* Fill parameter i's `field` on this rank from the pieces. */
static par_status par__ckpt_load_one(par_params *ps, par__ckpt *c, int i, int field, par__ckpt_ws *ws) {
    const par__param *p = &ps->p[i];
    int64_t ms[PARALLEL_MAX_DIMS], ml[PARALLEL_MAX_DIMS], na = 0, nb = p->numel, k;
    float *local;
    unsigned char *filled;
    par_status st = PAR_OK;
    int j, d, found = 0;
    par_layout_local_shape(&p->layout, ml);
    PAR__CHECK(par_layout_local_offset(&p->layout, par_ctx_rank(ps->ctx), ms));
    if (field > 0 && ps->zero) { /* only this rank's ZeRO range is kept */
        const par__bucket *bk = &ps->b[p->bucket];
        const int64_t c0 = bk->start + bk->chunk_begin, c1 = c0 + bk->chunk;
        na = (p->offset > c0 ? p->offset : c0) - p->offset;
        nb = (p->offset + p->numel < c1 ? p->offset + p->numel : c1) - p->offset;
        if (nb < na) nb = na;
    }
    if (ws->local_n < p->numel) {
        unsigned char *f = (unsigned char *)PARALLEL_REALLOC(ws->filled, (size_t)p->numel);
        if (!f) return par__fail(PAR_ENOMEM, "par_params_load: out of memory");
        ws->filled = f;
        if (!par__ckpt_grow(&ws->local, &ws->local_n, p->numel)) return par__fail(PAR_ENOMEM, "par_params_load: out of memory");
    }
    local = ws->local, filled = ws->filled;
    /* only [na, nb) is used (set_local keeps a ZeRO rank's range of the moments) and
       every element of it is placed or reported missing: no need to clear `local` */
    if (nb > na) memset(filled + na, 0, (size_t)(nb - na));
    for (j = 0; j < c->npieces && st == PAR_OK; j++) {
        const par__ckpt_rpiece *q = &c->pieces[j];
        int overlap = 1;
        if (q->field != field || strcmp(q->param, p->name) != 0) continue;
        found = 1;
        if (q->ndim != p->layout.ndim) overlap = -1;
        for (d = 0; d < q->ndim && overlap >= 0; d++) {
            if (q->shape[d] != p->layout.shape[d]) overlap = -1;
            else if (q->start[d] >= ms[d] + ml[d] || ms[d] >= q->start[d] + q->local[d]) overlap = 0;
        }
        if (overlap < 0) {
            char want[160];
            par_layout_format(&p->layout, want, sizeof want);
            st = par__fail(PAR_ESHAPE, "par_params_load: %s: tensor \"%s\" is a piece of a %d-dim tensor of another "
                                       "shape than parameter \"%s\" (%s)", c->paths[q->file], q->name, q->ndim,
                           p->name, want);
            break;
        }
        if (!overlap || na >= nb || par__ckpt_place(q, NULL, ms, ml, na, nb, NULL, NULL) == 0) continue;
        if (!par__ckpt_grow(&ws->piece, &ws->piece_n, q->end - q->begin)) {
            st = par__fail(PAR_ENOMEM, "par_params_load: out of memory");
            break;
        }
        /* whole, so par_st_read verifies the CRC-32 (its message names file and tensor) */
        st = par_st_read(c->files[q->file], q->name, 0, NULL, 0, q->end - q->begin, PAR_F32, ws->piece);
        if (st == PAR_OK) (void)par__ckpt_place(q, ws->piece, ms, ml, na, nb, local, filled);
    }
    if (st == PAR_OK && !found)
        st = par__fail(PAR_EINVAL, "par_params_load: %s: parameter \"%s\" has no %s in the checkpoint", 
                       c->nfiles ? c->paths[0] : "?", p->name, par__ckpt_fields[field]);
    for (k = na; st == PAR_OK && k < nb; k++)
        if (!filled[k])
            st = par__fail(PAR_EIO, "par_params_load: the checkpoint lacks element %lld of this rank's slice of %s of "
                                    "parameter \"%s\" (a piece is missing)", (long long)k, par__ckpt_fields[field],
                           p->name);
    if (st == PAR_OK) st = par_params_set_local(ps, (par_param_field)field, i, local);
    return st;
}

PARALLEL_DEF par_status par_params_load(par_params *ps, const char *path, par_ckpt_info *info) {
    par__ckpt c;
    par_ckpt_info tmp;
    par_status st;
    par__ckpt_ws ws;
    int i, f, j;
    memset(&ws, 0, sizeof ws);
    if (!ps) return par__fail(PAR_EINVAL, "par_params_load: NULL parameter set");
    if (!info) info = &tmp;
    st = par__ckpt_open("par_params_load", path, &c, info);
    /* nothing the set lacks; a pipeline stage's set (stage_dims) holds only its
       own tensors, the others belong to other stages (the host checks the whole) */
    for (j = 0; st == PAR_OK && !ps->stage_dims && j < c.npieces; j++)
        if (par_params_find(ps, c.pieces[j].param) < 0)
            st = par__fail(PAR_EINVAL, "par_params_load: %s: tensor \"%s\" is a piece of \"%s\", which is not a "
                                       "parameter of the set", c.paths[c.pieces[j].file], c.pieces[j].name,
                           c.pieces[j].param);
    for (i = 0; st == PAR_OK && i < ps->n; i++)
        for (f = 0; st == PAR_OK && f < (info->has_moments ? 3 : 1); f++) st = par__ckpt_load_one(ps, &c, i, f, &ws);
    if (st == PAR_OK && !info->has_moments) { /* a values-only checkpoint: fresh moments */
        for (i = 0; st == PAR_OK && i < ps->n; i++) {
            float *zero = (float *)PARALLEL_MALLOC((size_t)(ps->p[i].numel ? ps->p[i].numel : 1) * sizeof(float));
            if (!zero) { st = par__fail(PAR_ENOMEM, "par_params_load: out of memory"); break; }
            memset(zero, 0, (size_t)ps->p[i].numel * sizeof(float));
            st = par_params_set_local(ps, PAR_PARAM_EXP_AVG, i, zero);
            if (st == PAR_OK) st = par_params_set_local(ps, PAR_PARAM_EXP_AVG_SQ, i, zero);
            PARALLEL_FREE(zero);
        }
    }
    if (st == PAR_OK) st = par_params_set_step(ps, info->has_moments ? info->step : 0);
    if (c.nfiles || c.files) par__ckpt_close(&c);
    PARALLEL_FREE(ws.piece), PARALLEL_FREE(ws.local), PARALLEL_FREE(ws.filled);
    st = par__ckpt_agree(ps, st, "par_params_load");
    if (st != PAR_OK || info == &tmp) par_ckpt_info_free(info);
    return st;
}
#endif /* PARALLEL_NO_CHECKPOINT */

// >>tensor-parallel

/* ---- multi-copy: the turn and the comm tickets ------------------------------------ */

struct par_copies {
    par_ctx *ctx;
    int k;
#ifndef PARALLEL_NO_THREADS
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
    int turn;                  /* the copy that may compute */
    int *done;                 /* per copy: finished */
    long next_ticket, serving; /* collectives: issued in ticket order */
    int running;               /* inside par_copies_run: 1 on threads, -1 one after another */
    par_status first;          /* the first failure, its message below */
    char why[512];
    par_status (*fn)(void *user, int copy);
    void *user;
    struct par_trace *trace;
    double since;              /* when the current turn began (trace clock) */
};

PARALLEL_DEF par_status par_copies_create(par_ctx *ctx, int copies, struct par_trace *trace, par_copies **out) {
    par_copies *mc;
    if (out) *out = NULL;
    if (!ctx || !out) return par__fail(PAR_EINVAL, "par_copies_create: NULL argument");
    if (copies < 1 || copies > 64)
        return par__fail(PAR_EINVAL, "par_copies_create: %d copies; use 1 to 64 (micro_batch_interleave_num)", copies);
    mc = (par_copies *)par__ctx_malloc(ctx, sizeof *mc);
    if (!mc) return par__fail(PAR_ENOMEM, "par_copies_create: out of memory");
    memset(mc, 0, sizeof *mc);
    mc->ctx = ctx, mc->k = copies, mc->trace = trace;
    mc->done = (int *)par__ctx_malloc(ctx, sizeof(int) * (size_t)copies);
    if (!mc->done) return par__ctx_free(ctx, mc), par__fail(PAR_ENOMEM, "par_copies_create: out of memory");
#ifndef PARALLEL_NO_THREADS
    pthread_mutex_init(&mc->mu, NULL);
    pthread_cond_init(&mc->cv, NULL);
#endif
    *out = mc;
    return PAR_OK;
}

PARALLEL_DEF void par_copies_destroy(par_copies *mc) {
    if (!mc) return;
#ifndef PARALLEL_NO_THREADS
    pthread_cond_destroy(&mc->cv);
    pthread_mutex_destroy(&mc->mu);
#endif
    par__ctx_free(mc->ctx, mc->done);
    par__ctx_free(mc->ctx, mc);
}

#ifndef PARALLEL_NO_THREADS
/* The turn of `copy` begins / ends: its stretch as a span (called by the
   turn's holder, so one thread writes the trace at a time). */
static void par__copies_turn_begins(par_copies *mc) {
#ifndef PARALLEL_NO_TRACE
    if (mc->trace) mc->since = par_trace_now_us();
#else
    (void)mc;
#endif
}

static void par__copies_turn_ends(par_copies *mc, int copy) {
#ifndef PARALLEL_NO_TRACE
    char name[32];
    if (!mc->trace) return;
    snprintf(name, sizeof name, "copy %d", copy);
    (void)par_trace_span(mc->trace, name, "compute", mc->since, par_trace_now_us());
#else
    (void)mc, (void)copy;
#endif
}

/* Under mu: the turn to the next copy after `from` that has not finished
   (from itself when it is the only one left). */
static void par__copies_pass(par_copies *mc, int from) {
    int j;
    for (j = 1; j <= mc->k; j++)
        if (!mc->done[(from + j) % mc->k]) {
            mc->turn = (from + j) % mc->k;
            break;
        }
    pthread_cond_broadcast(&mc->cv);
}

/* Copy `copy` (holding the turn) is about to run a collective: it takes the
   next ticket, hands the turn on and waits until its ticket is served. */
static void par__copies_comm_begin(par_copies *mc, int copy, long *ticket) {
    if (!mc || mc->running <= 0) return;
    par__copies_turn_ends(mc, copy);
    pthread_mutex_lock(&mc->mu);
    *ticket = mc->next_ticket++;
    par__copies_pass(mc, copy);
    while (mc->serving != *ticket) pthread_cond_wait(&mc->cv, &mc->mu);
    pthread_mutex_unlock(&mc->mu);
}

/* Its collective is done: the next ticket may run; wait for the turn. */
static void par__copies_comm_end(par_copies *mc, int copy) {
    if (!mc || mc->running <= 0) return;
    pthread_mutex_lock(&mc->mu);
    mc->serving++;
    pthread_cond_broadcast(&mc->cv);
    while (mc->turn != copy) pthread_cond_wait(&mc->cv, &mc->mu);
    pthread_mutex_unlock(&mc->mu);
    par__copies_turn_begins(mc);
}

typedef struct par__copy_arg {
    par_copies *mc;
    int copy;
} par__copy_arg;

static void *par__copy_main(void *p) {
    par__copy_arg *a = (par__copy_arg *)p;
    par_copies *mc = a->mc;
    par_status st;
    pthread_mutex_lock(&mc->mu);
    while (mc->turn != a->copy) pthread_cond_wait(&mc->cv, &mc->mu);
    pthread_mutex_unlock(&mc->mu);
    par__copies_turn_begins(mc);
    st = mc->fn(mc->user, a->copy);
    par__copies_turn_ends(mc, a->copy);
    pthread_mutex_lock(&mc->mu);
    if (st != PAR_OK && mc->first == PAR_OK) {
        mc->first = st;
        const char *text = par_last_error();
        const int head = snprintf(mc->why, sizeof mc->why, "copy %d of %d: ", a->copy, mc->k);
        if (head > 0 && (size_t)head < sizeof mc->why) { /* the copy's message, cut to fit */
            size_t room = sizeof mc->why - (size_t)head - 1, len = strlen(text);
            memcpy(mc->why + head, text, len < room ? len : room), mc->why[head + (len < room ? len : room)] = 0;
        }
    }
    mc->done[a->copy] = 1;
    par__copies_pass(mc, a->copy);
    pthread_mutex_unlock(&mc->mu);
    return NULL;
}
#else
static void par__copies_comm_begin(par_copies *mc, int copy, long *ticket) { (void)mc, (void)copy, (void)ticket; }
static void par__copies_comm_end(par_copies *mc, int copy) { (void)mc, (void)copy; }
#endif

PARALLEL_DEF par_status par_copies_run(par_copies *mc, par_status (*fn)(void *user, int copy), void *user) {
    int c;
    if (!mc || !fn) return par__fail(PAR_EINVAL, "par_copies_run: NULL argument");
    if (mc->running) return par__fail(PAR_EINVAL, "par_copies_run: already running (copies do not nest)");
#ifndef PARALLEL_NO_THREADS
    if (mc->k > 1) {
        pthread_t tids[64];
        par__copy_arg args[64];
        int started = 0;
        mc->fn = fn, mc->user = user, mc->first = PAR_OK, mc->why[0] = 0;
        mc->turn = 0, mc->next_ticket = mc->serving = 0, mc->running = 1;
        for (c = 0; c < mc->k; c++) mc->done[c] = 0;
        for (c = 0; c < mc->k; c++) {
            args[c].mc = mc, args[c].copy = c;
            if (pthread_create(&tids[c], NULL, par__copy_main, &args[c]) != 0) break;
            started++;
        }
        if (started < mc->k) { /* the copies never started are done; those that did run to the end */
            pthread_mutex_lock(&mc->mu);
            for (c = started; c < mc->k; c++) mc->done[c] = 1;
            if (mc->first == PAR_OK) mc->first = PAR_ENOMEM;
            snprintf(mc->why, sizeof mc->why, "cannot start the thread of copy %d of %d", started, mc->k);
            if (mc->done[mc->turn]) par__copies_pass(mc, mc->turn);
            pthread_mutex_unlock(&mc->mu);
        }
        for (c = 0; c < started; c++) pthread_join(tids[c], NULL);
        mc->running = 0;
        if (mc->first != PAR_OK) return par__fail(mc->first, "par_copies_run: %.400s", mc->why);
        return PAR_OK;
    }
#endif
    { /* one after another (one copy, or no threads): no hand-over */
        par_status st = PAR_OK;
        mc->running = -1;
        for (c = 0; c < mc->k && st == PAR_OK; c++) st = fn(user, c);
        mc->running = 0;
        return st;
    }
}

struct par_tp {
    par_ctx *ctx;
    const par_compute_table *ct;
    const par_comm_table *cm;
    int64_t rows, hidden;
    par_strategy column, row;
    int degree, index, data_degree, sp, no_a2a;
    uint32_t tp_dims, data_dims;
    int data_order[PARALLEL_MAX_DIMS], n_data; /* device dims splitting the rows, major first */
    int tp_order[PARALLEL_MAX_DIMS], n_tp;     /* tensor-parallel dims, major first */
    par_comm_group *group;
    par_planner *planner;
    par_executor *exec;
    par_plan plan;
    struct par_trace *trace;
    double comm_us;
    par_copies *copies;
    int copy;
};

PARALLEL_DEF void par_tp_destroy(par_tp *tp) {
    if (!tp) return;
    if (tp->exec) par_executor_destroy(tp->exec);
    if (tp->planner) par_planner_destroy(tp->planner);
    par__ctx_free(tp->ctx, tp);
}

/* par_op_infer of x [rows, in] . W^T (W [out, in]) under `st`, on the context's mesh. */
static par_status par__tp_matmul(const par_tp *tp, const char *name, const par_strategy *st, int64_t in, int64_t out,
                                 par_op_info *info) {
    par_op_desc op;
    memset(&op, 0, sizeof op);
    op.kind = PAR_OP_MATMUL, op.name = name, op.transpose_b = 1, op.params = 2;
    op.ndim[0] = op.ndim[1] = 2;
    op.shape[0][0] = tp->rows, op.shape[0][1] = in, op.shape[1][0] = out, op.shape[1][1] = in;
    PAR__CHECK(par_op_infer(&op, st, par_mesh_size(par_ctx_mesh(tp->ctx)), info));
    return par_op_info_on_mesh(info, par_ctx_mesh(tp->ctx), NULL, info);
}

static uint32_t par__tp_dim_mask(const par_layout *l, int d, int *order, int *count) {
    uint32_t m = 0;
    int k, c = 0;
    for (k = 0; k < l->map.count[d]; k++) {
        const int v = l->map.dev[d][k];
        if (par_mesh_dev_size(&l->mesh, v) <= 1) continue;
        m |= 1u << v;
        if (order) order[c] = v;
        c++;
    }
    if (count) *count = c;
    return m;
}

static par_status par__tp_parse(par_tp *tp, const char *text, const char *which, par_strategy *st) {
    char why[200];
    if (!text) return par__fail(PAR_EINVAL, "par_tp_create: no %s strategy", which);
    if (par_strategy_parse_mesh(text, par_ctx_mesh(tp->ctx), st) == PAR_OK) return PAR_OK;
    par__copy_text(why, sizeof why, par_last_error());
    return par__fail(PAR_ESTRATEGY, "par_tp_create: %s strategy \"%s\": %s", which, text, why);
}

PARALLEL_DEF par_status par_tp_create(par_ctx *ctx, const par_tp_desc *desc, par_tp **out) {
    par_op_info col, row;
    par_comm_group *data_group;
    par_tp *tp;
    par_status st;
    int order[PARALLEL_MAX_DIMS], n;
    if (out) *out = NULL;
    if (!ctx || !desc || !out) return par__fail(PAR_EINVAL, "par_tp_create: NULL argument");
    if (desc->rows < 1 || desc->hidden < 1)
        return par__fail(PAR_EINVAL, "par_tp_create: rows %lld and hidden %lld must be >= 1", (long long)desc->rows,
                         (long long)desc->hidden);
    tp = (par_tp *)par__ctx_malloc(ctx, sizeof *tp);
    if (!tp) return par__fail(PAR_ENOMEM, "par_tp_create: out of memory");
    memset(tp, 0, sizeof *tp);
    tp->ctx = ctx, tp->ct = par_ctx_compute(ctx), tp->cm = par_ctx_comm(ctx);
    tp->rows = desc->rows, tp->hidden = desc->hidden, tp->sp = desc->sequence_parallel != 0;
    tp->no_a2a = desc->no_all_to_all != 0, tp->trace = desc->trace;
    tp->copies = desc->copies, tp->copy = desc->copy;
    if (desc->copies && (desc->copy < 0 || desc->copy >= desc->copies->k))
        return par_tp_destroy(tp), par__fail(PAR_EINVAL, "par_tp_create: copy %d of %d copies", desc->copy,
                                             desc->copies->k);
    if ((st = par__tp_parse(tp, desc->column, "column", &tp->column)) != PAR_OK ||
        (st = par__tp_parse(tp, desc->row, "row", &tp->row)) != PAR_OK)
        return par_tp_destroy(tp), st;
    /* probe shapes: W's split dim as large as its shard count, so only the
       strategies' own rules can fail here; real linears are checked by par_tp_linear */
    if (tp->column.num_inputs != 2 || tp->row.num_inputs != 2 || tp->column.ndim[1] != 2 || tp->row.ndim[1] != 2)
        return par_tp_destroy(tp), par__fail(PAR_ESTRATEGY, "par_tp_create: MatMul strategies have two 2-D inputs");
    if ((st = par__tp_matmul(tp, "column-parallel linear", &tp->column, tp->hidden, tp->column.shard[1][0], &col)) !=
            PAR_OK ||
        (st = par__tp_matmul(tp, "row-parallel linear", &tp->row, tp->row.shard[1][1], tp->hidden, &row)) != PAR_OK)
        return par_tp_destroy(tp), st;
    tp->data_dims = par__tp_dim_mask(&col.inputs[0], 0, tp->data_order, &tp->n_data);
    tp->tp_dims = par__tp_dim_mask(&col.inputs[1], 0, tp->tp_order, &tp->n_tp);
    if (par__tp_dim_mask(&col.inputs[0], 1, NULL, NULL))
        return par_tp_destroy(tp), par__fail(PAR_ESTRATEGY, "par_tp_create: the column strategy %s splits the input "
                                                             "features (a column-parallel linear reads whole rows)",
                                             desc->column);
    if (par__tp_dim_mask(&row.inputs[0], 0, order, &n) != tp->data_dims ||
        par__tp_dim_mask(&row.inputs[1], 1, NULL, NULL) != tp->tp_dims ||
        par__tp_dim_mask(&row.inputs[1], 0, NULL, NULL) != 0)
        return par_tp_destroy(tp), par__fail(PAR_ESTRATEGY, "par_tp_create: the row strategy %s must split the rows "
                                                             "like the column strategy %s does and the contraction "
                                                             "(W's in) over the dims that split the column W's out",
                                             desc->row, desc->column);
    if ((st = par_ctx_group(ctx, tp->tp_dims, &tp->group, &tp->index, &tp->degree)) != PAR_OK ||
        (st = par_ctx_group(ctx, tp->data_dims, &data_group, NULL, &tp->data_degree)) != PAR_OK)
        return par_tp_destroy(tp), st;
    if (tp->rows % ((int64_t)tp->data_degree * (tp->sp ? tp->degree : 1)) != 0)
        return par_tp_destroy(tp), par__fail(PAR_ESHAPE, "par_tp_create: %lld rows do not split over %d data-parallel "
                                                          "ranks%s", (long long)tp->rows, tp->data_degree,
                                             tp->sp ? " times the tensor-parallel degree (sequence parallelism)" : "");
    if (tp->degree > 1 && ((st = par__ctx_planner_create(ctx, NULL, &tp->planner)) != PAR_OK ||
                           (st = par_executor_create(ctx, &tp->exec)) != PAR_OK))
        return par_tp_destroy(tp), st;
    *out = tp;
    return PAR_OK;
}

/* [G, cols] with the rows split over the data dims (and the tp dims when
   with_tp), partial over the tp dims when partial. */
static par_status par__tp_rows_layout(const par_tp *tp, int64_t global, int64_t cols, int with_tp, int partial,
                                      par_layout *l) {
    const int64_t shape[2] = {global, cols};
    int k;
    PAR__CHECK(par_layout_init(l, par_ctx_mesh(tp->ctx), 2, shape, NULL, 0));
    for (k = 0; k < tp->n_data; k++) l->map.dev[0][l->map.count[0]++] = (int8_t)tp->data_order[k];
    for (k = 0; with_tp && k < tp->n_tp; k++) l->map.dev[0][l->map.count[0]++] = (int8_t)tp->tp_order[k];
    if (partial) l->map.partial = tp->tp_dims;
    return par_layout_check(l);
}

/* A collective of this region begins: under multi-copy it waits for its
   ticket while the next copy computes. */
static void par__tp_comm_begin(par_tp *tp) {
    long ticket = 0;
    par__copies_comm_begin(tp->copies, tp->copy, &ticket);
}

/* ... and ends: the span is recorded once the turn is back (the trace is
   written by one thread at a time), from its start to its completion. */
static void par__tp_done(par_tp *tp, double t0, const char *what) {
#ifndef PARALLEL_NO_TRACE
    char name[PAR_TRACE_NAME_MAX];
    const double t1 = tp->trace ? par_trace_now_us() : 0.0;
    par__copies_comm_end(tp->copies, tp->copy);
    if (!tp->trace) return;
    snprintf(name, sizeof name, "tp %s", what);
    (void)par_trace_span(tp->trace, name, "comm", t0, t1);
    tp->comm_us += t1 - t0;
#else
    par__copies_comm_end(tp->copies, tp->copy);
    (void)t0, (void)what;
#endif
}

static double par__tp_now(const par_tp *tp) {
#ifndef PARALLEL_NO_TRACE
    return tp->trace ? par_trace_now_us() : 0.0;
#else
    (void)tp;
    return 0.0;
#endif
}

static par_status par__tp_redistribute(par_tp *tp, const par_layout *from, const par_layout *to, const void *in,
                                       void *out, const char *what) {
    double t0;
    par_cost_model cost;
    par_status st;
    memset(&cost, 0, sizeof cost);
    cost.no_all_to_all = tp->no_a2a;
    PAR__CHECK(par_planner_plan(tp->planner, from, to, &cost, &tp->plan));
    par__tp_comm_begin(tp);
    t0 = par__tp_now(tp);
    st = par_execute_plan(tp->exec, &tp->plan, PAR_F32, in, out);
    par__tp_done(tp, t0, what); /* also on failure: the turn comes back */
    return st;
}

static par_status par__tp_check_n(const par_tp *tp, const char *fn, int64_t n, int64_t cols, const void *a) {
    if (n < 0 || cols < 0) return par__fail(PAR_EINVAL, "%s: n %lld and cols %lld must be >= 0", fn, (long long)n, (long long)cols);
    if (!a && n * cols > 0) return par__fail(PAR_EINVAL, "%s: NULL buffer", fn);
    if (tp->sp && n % tp->degree)
        return par__fail(PAR_ESHAPE, "%s: n = %lld rows are not divisible by the tensor-parallel degree %d (sequence "
                                     "parallelism splits them)", fn, (long long)n, tp->degree);
    return PAR_OK;
}

PARALLEL_DEF int64_t par_tp_rows(const par_tp *tp, int64_t n) { return tp && tp->sp ? n / tp->degree : n; }

PARALLEL_DEF int64_t par_tp_pad_rows(const par_tp *tp, int64_t n) {
    return tp && tp->sp && tp->degree > 1 ? (n + tp->degree - 1) / tp->degree * tp->degree : n;
}

PARALLEL_DEF int64_t par_tp_workspace_bytes(const par_tp *tp, int64_t n, int64_t cols) {
    /* the executor keeps 4 buffers of the largest slice a plan holds: all n rows */
    return tp && tp->degree > 1 ? 4 * n * cols * (int64_t)sizeof(float) : 0;
}

PARALLEL_DEF par_status par_tp_get_info(const par_tp *tp, par_tp_info *info) {
    if (!tp || !info) return par__fail(PAR_EINVAL, "par_tp_get_info: NULL argument");
    memset(info, 0, sizeof *info);
    info->degree = tp->degree, info->index = tp->index, info->data_degree = tp->data_degree;
    info->sequence_parallel = tp->sp, info->tp_dims = tp->tp_dims, info->data_dims = tp->data_dims;
    info->comm_us = tp->comm_us;
    return par__tp_rows_layout(tp, tp->rows, tp->hidden, tp->sp, 0, &info->residual);
}

PARALLEL_DEF par_status par_tp_gather_rows(par_tp *tp, int64_t n, int64_t cols, const float *x, float *work,
                                           const float **full) {
    par_layout from, to;
    if (!tp || !full) return par__fail(PAR_EINVAL, "par_tp_gather_rows: NULL argument");
    PAR__CHECK(par__tp_check_n(tp, "par_tp_gather_rows", n, cols, x));
    *full = x;
    if (!tp->sp || tp->degree == 1 || n * cols == 0) return PAR_OK;
    if (!work) return par__fail(PAR_EINVAL, "par_tp_gather_rows: NULL work");
    PAR__CHECK(par__tp_rows_layout(tp, n * tp->data_degree, cols, 1, 0, &from));
    PAR__CHECK(par__tp_rows_layout(tp, n * tp->data_degree, cols, 0, 0, &to));
    *full = work;
    return par__tp_redistribute(tp, &from, &to, x, work, "all_gather");
}

/* Partial [n, cols] -> summed on this rank's residual rows, into dst (may be p when not sequence parallel). */
static par_status par__tp_reduce(par_tp *tp, int64_t n, int64_t cols, float *p, float *dst) {
    par_layout from, to;
    PAR__CHECK(par__tp_rows_layout(tp, n * tp->data_degree, cols, 0, 1, &from));
    PAR__CHECK(par__tp_rows_layout(tp, n * tp->data_degree, cols, tp->sp, 0, &to));
    return par__tp_redistribute(tp, &from, &to, p, dst, tp->sp ? "reduce_scatter" : "all_reduce");
}

PARALLEL_DEF par_status par_tp_reduce_rows(par_tp *tp, int64_t n, int64_t cols, float *p, float *work, float **out) {
    if (!tp || !out) return par__fail(PAR_EINVAL, "par_tp_reduce_rows: NULL argument");
    PAR__CHECK(par__tp_check_n(tp, "par_tp_reduce_rows", n, cols, p));
    *out = p;
    if (tp->degree == 1 || n * cols == 0) return PAR_OK;
    if (tp->sp && !work) return par__fail(PAR_EINVAL, "par_tp_reduce_rows: NULL work");
    if (tp->sp) *out = work;
    return par__tp_reduce(tp, n, cols, p, *out);
}

PARALLEL_DEF par_status par_tp_linear(const par_tp *tp, const char *name, par_linear_kind kind, int64_t in, int64_t out,
                                      par_linear *lin) {
    par_op_info info;
    int64_t shape[PARALLEL_MAX_DIMS], start[PARALLEL_MAX_DIMS];
    if (!tp || !lin) return par__fail(PAR_EINVAL, "par_tp_linear: NULL argument");
    if ((unsigned)kind > (unsigned)PAR_LINEAR_ROW) return par__fail(PAR_EINVAL, "par_tp_linear: unknown kind %d", (int)kind);
    if (in < 1 || out < 1)
        return par__fail(PAR_EINVAL, "par_tp_linear: %s: in %lld and out %lld must be >= 1", name ? name : "linear",
                         (long long)in, (long long)out);
    memset(lin, 0, sizeof *lin);
    PAR__CHECK(par__tp_matmul(tp, name, kind == PAR_LINEAR_COLUMN ? &tp->column : &tp->row, in, out, &info));
    lin->kind = kind, lin->in = in, lin->out = out, lin->weight = info.inputs[1];
    par_layout_local_shape(&lin->weight, shape);
    PAR__CHECK(par_layout_local_offset(&lin->weight, par_ctx_rank(tp->ctx), start));
    lin->out_local = shape[0], lin->in_local = shape[1], lin->out_start = start[0], lin->in_start = start[1];
    lin->grad_partial = tp->data_dims;
    return PAR_OK;
}

PARALLEL_DEF par_status par_tp_linear_param(const par_linear *lin, const char *name, par_param_desc *pd) {
    if (!lin || !pd) return par__fail(PAR_EINVAL, "par_tp_linear_param: NULL argument");
    memset(pd, 0, sizeof *pd);
    pd->name = name, pd->layout = lin->weight, pd->grad_partial = lin->grad_partial;
    return PAR_OK;
}

PARALLEL_DEF par_status par_tp_norm_param(const par_tp *tp, const char *name, int64_t dim, par_param_desc *pd) {
    par_layout resid;
    if (!tp || !pd) return par__fail(PAR_EINVAL, "par_tp_norm_param: NULL argument");
    if (dim < 1) return par__fail(PAR_EINVAL, "par_tp_norm_param: %s: dim %lld < 1", name ? name : "norm", (long long)dim);
    memset(pd, 0, sizeof *pd);
    PAR__CHECK(par_layout_init(&pd->layout, par_ctx_mesh(tp->ctx), 1, &dim, NULL, 0));
    /* each rank's gradient sums over the rows it normalized: partial over the
       dims that split the residual stream's rows */
    PAR__CHECK(par__tp_rows_layout(tp, tp->rows, tp->hidden, tp->sp, 0, &resid));
    pd->name = name, pd->grad_partial = par_layout_split_dims(&resid);
    return PAR_OK;
}

PARALLEL_DEF par_status par_tp_heads(const par_tp *tp, int64_t heads, int64_t kv_heads, int64_t *hl, int64_t *kvl) {
    if (!tp || !hl || !kvl) return par__fail(PAR_EINVAL, "par_tp_heads: NULL argument");
    if (heads < 1 || kv_heads < 1 || heads % kv_heads)
        return par__fail(PAR_EINVAL, "par_tp_heads: %lld heads and %lld kv heads (kv heads must divide heads)",
                         (long long)heads, (long long)kv_heads);
    if (heads % tp->degree)
        return par__fail(PAR_ESHAPE, "par_tp_heads: %lld heads are not divisible by the tensor-parallel degree %d",
                         (long long)heads, tp->degree);
    if (kv_heads % tp->degree)
        return par__fail(PAR_ESHAPE, "par_tp_heads: %lld kv heads are not divisible by the tensor-parallel degree %d "
                                     "(kv heads are split, never replicated: each rank keeps whole GQA groups)",
                         (long long)kv_heads, tp->degree);
    *hl = heads / tp->degree, *kvl = kv_heads / tp->degree;
    return PAR_OK;
}

PARALLEL_DEF par_status par_tp_gather_columns(par_tp *tp, const par_linear *lin, int64_t nrows, const float *y,
                                              float *full) {
    const int64_t shape[2] = {nrows, lin ? lin->out : 0};
    par_layout from, to;
    int k, order[PARALLEL_MAX_DIMS], n;
    if (!tp || !lin || (!y && nrows) || (!full && nrows)) return par__fail(PAR_EINVAL, "par_tp_gather_columns: NULL argument");
    if (lin->kind != PAR_LINEAR_COLUMN)
        return par__fail(PAR_EINVAL, "par_tp_gather_columns: the linear is not column-parallel");
    if (nrows < 0) return par__fail(PAR_EINVAL, "par_tp_gather_columns: nrows %lld < 0", (long long)nrows);
    if (tp->degree == 1 || nrows == 0)
        return y == full ? PAR_OK : tp->ct->memcpy(tp->ct->user, full, y, (size_t)(nrows * lin->out) * sizeof(float),
                                                   tp->ct->device_memory ? PAR_COPY_DEVICE_TO_DEVICE : PAR_COPY_HOST_TO_HOST);
    par__tp_dim_mask(&lin->weight, 0, order, &n);
    PAR__CHECK(par_layout_init(&from, par_ctx_mesh(tp->ctx), 2, shape, NULL, 0));
    for (k = 0; k < n; k++) from.map.dev[1][from.map.count[1]++] = (int8_t)order[k];
    PAR__CHECK(par_layout_check(&from));
    PAR__CHECK(par_layout_init(&to, par_ctx_mesh(tp->ctx), 2, shape, NULL, 0));
    return par__tp_redistribute(tp, &from, &to, y, full, "all_gather columns");
}

PARALLEL_DEF par_status par_tp_embedding(const par_tp *tp, const char *name, int64_t vocab, int64_t dim,
                                         int vocab_parallel, par_embedding *emb) {
    par_op_desc op;
    par_op_info info;
    par_strategy st;
    par_layout resid;
    int64_t shape[PARALLEL_MAX_DIMS], start[PARALLEL_MAX_DIMS];
    if (!tp || !emb) return par__fail(PAR_EINVAL, "par_tp_embedding: NULL argument");
    if (vocab < 1 || dim < 1)
        return par__fail(PAR_EINVAL, "par_tp_embedding: %s: vocab %lld and dim %lld must be >= 1", name ? name : "embedding",
                         (long long)vocab, (long long)dim);
    memset(emb, 0, sizeof *emb);
    memset(&op, 0, sizeof op);
    memset(&st, 0, sizeof st);
    /* MindSpore Gather: table [V, H], indices [rows]; ((tp,1),(data,)) splits
       the vocabulary, ((1,1),(data,)) replicates the table */
    op.kind = PAR_OP_GATHER, op.name = name, op.params = 1;
    op.ndim[0] = 2, op.shape[0][0] = vocab, op.shape[0][1] = dim, op.ndim[1] = 1, op.shape[1][0] = tp->rows;
    st.num_inputs = 2, st.ndim[0] = 2, st.ndim[1] = 1;
    st.shard[0][0] = vocab_parallel ? tp->degree : 1, st.shard[0][1] = 1, st.shard[1][0] = tp->data_degree;
    if (vocab_parallel && tp->degree > 1) {
        PAR__CHECK(par_op_infer(&op, &st, par_mesh_size(par_ctx_mesh(tp->ctx)), &info));
        PAR__CHECK(par_op_info_on_mesh(&info, par_ctx_mesh(tp->ctx), NULL, &info));
        emb->table = info.inputs[0];
        emb->grad_partial = tp->data_dims;
    } else {
        PAR__CHECK(par_layout_init(&emb->table, par_ctx_mesh(tp->ctx), 2, op.shape[0], NULL, 0));
        PAR__CHECK(par__tp_rows_layout(tp, tp->rows, tp->hidden, tp->sp, 0, &resid));
        emb->grad_partial = par_layout_split_dims(&resid); /* it sums over the rows this rank embedded */
    }
    emb->vocab_parallel = vocab_parallel && tp->degree > 1, emb->vocab = vocab, emb->dim = dim;
    par_layout_local_shape(&emb->table, shape);
    PAR__CHECK(par_layout_local_offset(&emb->table, par_ctx_rank(tp->ctx), start));
    emb->rows_local = shape[0], emb->row_start = start[0];
    return PAR_OK;
}

PARALLEL_DEF par_status par_tp_embedding_param(const par_embedding *emb, const char *name, par_param_desc *pd) {
    if (!emb || !pd) return par__fail(PAR_EINVAL, "par_tp_embedding_param: NULL argument");
    memset(pd, 0, sizeof *pd);
    pd->name = name, pd->layout = emb->table, pd->grad_partial = emb->grad_partial;
    return PAR_OK;
}

PARALLEL_DEF par_status par_tp_embedding_fwd(par_tp *tp, const par_embedding *e, int64_t n, const int32_t *ids,
                                             const float *table, float *out, float *work) {
    const int64_t held = par_tp_rows(tp, n);
    if (!tp || !e || !ids || !table || !out) return par__fail(PAR_EINVAL, "par_tp_embedding_fwd: NULL argument");
    PAR__CHECK(par__tp_check_n(tp, "par_tp_embedding_fwd", n, e->dim, out));
    if (!tp->ct->embedding_fwd) return par__fail(PAR_EUNSUPPORTED, "par_tp_embedding_fwd: the compute table has no embedding_fwd");
    if (!e->vocab_parallel) /* a rank looks up the rows it holds */
        return tp->ct->embedding_fwd(tp->ct->user, held, ids + (n - held ? tp->index * held : 0), table, e->rows_local,
                                     e->dim, 0, out);
    if (!work) return par__fail(PAR_EINVAL, "par_tp_embedding_fwd: NULL work (vocabulary-parallel)");
    /* zeros for ids outside this shard: partial over the tp ranks */
    PAR__CHECK(tp->ct->embedding_fwd(tp->ct->user, n, ids, table, e->rows_local, e->dim, e->row_start, work));
    return par__tp_reduce(tp, n, e->dim, work, out);
}

PARALLEL_DEF par_status par_tp_embedding_bwd(par_tp *tp, const par_embedding *e, int64_t n, const int32_t *ids,
                                             const float *dout, float *dtable, float *work) {
    const int64_t held = par_tp_rows(tp, n);
    const float *full = dout;
    if (!tp || !e || !ids || !dout || !dtable) return par__fail(PAR_EINVAL, "par_tp_embedding_bwd: NULL argument");
    PAR__CHECK(par__tp_check_n(tp, "par_tp_embedding_bwd", n, e->dim, dout));
    if (!tp->ct->embedding_bwd) return par__fail(PAR_EUNSUPPORTED, "par_tp_embedding_bwd: the compute table has no embedding_bwd");
    if (!e->vocab_parallel)
        return tp->ct->embedding_bwd(tp->ct->user, held, ids + (n - held ? tp->index * held : 0), dout, e->rows_local,
                                     e->dim, 0, dtable);
    PAR__CHECK(par_tp_gather_rows(tp, n, e->dim, dout, work, &full));
    return tp->ct->embedding_bwd(tp->ct->user, n, ids, full, e->rows_local, e->dim, e->row_start, dtable);
}

static par_status par__tp_all_reduce(par_tp *tp, float *x, int64_t n, par_reduce_op op, const char *what) {
    double t0;
    par_status st;
    par__tp_comm_begin(tp);
    t0 = par__tp_now(tp);
    st = tp->cm->all_reduce(tp->cm->user, tp->group, x, x, n, PAR_F32, op, NULL);
    par__tp_done(tp, t0, what);
    return st;
}

PARALLEL_DEF par_status par_tp_cross_entropy(par_tp *tp, const par_linear *head, int64_t n, float *logits,
                                             const int32_t *targets, float *losses, float scale, float *work) {
    const par_compute_table *ct;
    float *gmax, *gsum, *tgt;
    void *u;
    int64_t v;
    if (!tp || !head || (n > 0 && (!logits || !targets || !losses)))
        return par__fail(PAR_EINVAL, "par_tp_cross_entropy: NULL argument");
    if (n < 0) return par__fail(PAR_EINVAL, "par_tp_cross_entropy: n %lld < 0", (long long)n);
    ct = tp->ct, u = ct->user, v = head->out_local;
    if (!ct->xent || !ct->xent_local_max || !ct->xent_local_sumexp || !ct->xent_local_target ||
        !ct->xent_loss_from_pieces || !ct->xent_bwd_split)
        return par__fail(PAR_EUNSUPPORTED, "par_tp_cross_entropy: the compute table lacks the cross-entropy kernels");
    if (tp->degree == 1 || head->out_local == head->out)
        return ct->xent(u, n, v, logits, targets, losses, logits, scale);
    if (!work) return par__fail(PAR_EINVAL, "par_tp_cross_entropy: NULL work");
    gmax = work, gsum = work + n, tgt = work + 2 * n;
    PAR__CHECK(ct->xent_local_max(u, n, v, logits, gmax));
    PAR__CHECK(par__tp_all_reduce(tp, gmax, n, PAR_REDUCE_MAX, "all_reduce max"));
    PAR__CHECK(ct->xent_local_sumexp(u, n, v, logits, gmax, gsum));
    PAR__CHECK(par__tp_all_reduce(tp, gsum, n, PAR_REDUCE_SUM, "all_reduce"));
    PAR__CHECK(ct->xent_local_target(u, n, v, logits, targets, head->out_start, tgt));
    PAR__CHECK(par__tp_all_reduce(tp, tgt, n, PAR_REDUCE_SUM, "all_reduce"));
    PAR__CHECK(ct->xent_loss_from_pieces(u, n, gmax, gsum, tgt, targets, losses));
    return ct->xent_bwd_split(u, n, v, logits, targets, head->out_start, gmax, gsum, scale, logits);
}


// >>context-parallel

struct par_cp {
    par_ctx *ctx;
    const par_compute_table *ct;
    const par_comm_table *cm;
    par_cp_algo algo;
    int zigzag, causal, no_a2a;
    int batch, hq, hkv, hd;
    float scale;
    int P, c, R, r, U, u;      /* cp, ring and Ulysses degrees and this rank's indices */
    int hqh, hkvh, rep;        /* heads per rank after the all-to-all; kv copies (1: none) */
    int64_t seq, S, Sr;        /* sequence, this rank's tokens, its ring rank's tokens (U x S) */
    uint32_t dims;
    par_comm_group *ring, *uly;
    int64_t *pos;              /* host [P][S]: every cp rank's positions; ring rank r's are [r*U*S, +Sr) */
    int64_t *dpos;             /* the same in compute-table memory (the kernels read it) */
    float *kv[2], *acc[3], *tmp, *ob, *lseb;       /* ring */
    float *send, *recv, *do_h, *dq_h, *dk_h, *dv_h; /* Ulysses */
    int64_t a2a_blk;           /* largest all-to-all block (floats) */
    int64_t bytes[PAR_MEM_CATEGORY_COUNT];
    struct par_trace *trace;
    double comm_us;
};

PARALLEL_DEF const char *par_cp_algo_name(par_cp_algo algo) {
    switch (algo) {
    case PAR_CP_RING: return "ring";
    case PAR_CP_ULYSSES: return "ulysses";
    case PAR_CP_HYBRID: return "hybrid";
    }
    return "?";
}

PARALLEL_DEF par_status par_cp_algo_parse(const char *text, par_cp_algo *algo) {
    static const struct {
        const char *name;
        par_cp_algo algo;
    } names[] = {{"ring", PAR_CP_RING},       {"colossalai_cp", PAR_CP_RING}, {"ulysses", PAR_CP_ULYSSES},
                 {"ulysses_cp", PAR_CP_ULYSSES}, {"hybrid", PAR_CP_HYBRID},   {"hybrid_cp", PAR_CP_HYBRID},
                 {"hybird_cp", PAR_CP_HYBRID}};
    size_t i;
    if (!text || !algo) return par__fail(PAR_EINVAL, "par_cp_algo_parse: NULL argument");
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (par__st_iequal(text, names[i].name)) return *algo = names[i].algo, PAR_OK;
    return par__fail(PAR_EINVAL, "context-parallel algorithm \"%s\" is unknown; accepted: ring (colossalai_cp), ulysses "
                                 "(ulysses_cp), hybrid (hybrid_cp, hybird_cp)", text);
}

PARALLEL_DEF void par_cp_destroy(par_cp *cp) {
    float *bufs[16];
    int i, n = 0;
    if (!cp) return;
    bufs[n++] = cp->kv[0], bufs[n++] = cp->kv[1], bufs[n++] = cp->acc[0], bufs[n++] = cp->acc[1];
    bufs[n++] = cp->acc[2], bufs[n++] = cp->tmp, bufs[n++] = cp->ob, bufs[n++] = cp->lseb, bufs[n++] = cp->send;
    bufs[n++] = cp->recv, bufs[n++] = cp->do_h, bufs[n++] = cp->dq_h, bufs[n++] = cp->dk_h, bufs[n++] = cp->dv_h;
    for (i = 0; i < n; i++)
        if (bufs[i]) cp->ct->free(cp->ct->user, bufs[i]);
    if (cp->dpos) cp->ct->free(cp->ct->user, cp->dpos);
    par__ctx_free(cp->ctx, cp->pos);
    par__ctx_free(cp->ctx, cp);
}

/* Positions of every cp rank (see the section's comment on token order). */
static void par__cp_fill_positions(par_cp *cp) {
    const int64_t half = cp->seq / (2 * cp->R);
    int r;
    int64_t t;
    for (r = 0; r < cp->R; r++) {
        int64_t *list = cp->pos + (int64_t)r * cp->Sr; /* ring rank r's tokens = its U pieces in order */
        for (t = 0; t < cp->Sr; t++)
            list[t] = !cp->zigzag ? r * cp->Sr + t : t < half ? r * half + t : (2 * cp->R - 1 - r) * half + (t - half);
    }
}

static par_status par__cp_alloc(par_cp *cp, int64_t floats, par_mem_category cat, float **p) {
    void *ptr = NULL;
    *p = NULL;
    if (floats <= 0) return PAR_OK;
    PAR__CHECK(cp->ct->alloc(cp->ct->user, (size_t)floats * sizeof(float), cat, &ptr));
    cp->bytes[cat] += floats * (int64_t)sizeof(float);
    *p = (float *)ptr;
    return PAR_OK;
}

/* The groups: cp members in mesh order over the cp dims (index = ring x U + Ulysses). */
static par_status par__cp_groups(par_cp *cp, int *ranks, int *sub) {
    int n = 0, k;
    PAR__CHECK(par_mesh_group(par_ctx_mesh(cp->ctx), par_ctx_rank(cp->ctx), cp->dims, ranks, &n));
    for (k = 0; k < n; k++)
        if (ranks[k] == par_ctx_rank(cp->ctx)) cp->c = k;
    cp->r = cp->c / cp->U, cp->u = cp->c % cp->U;
    for (k = 0; k < cp->U; k++) sub[k] = ranks[cp->r * cp->U + k];
    if (cp->U > 1) PAR__CHECK(par_ctx_group_ranks(cp->ctx, sub, cp->U, &cp->uly));
    for (k = 0; k < cp->R; k++) sub[k] = ranks[k * cp->U + cp->u];
    if (cp->R > 1) PAR__CHECK(par_ctx_group_ranks(cp->ctx, sub, cp->R, &cp->ring));
    return PAR_OK;
}

static par_status par__cp_check(const par_cp *cp, const par_cp_desc *d) {
    if (d->batch < 1 || d->heads < 1 || d->kv_heads < 1 || d->head_dim < 1)
        return par__fail(PAR_EINVAL, "par_cp_create: batch %d, heads %d, kv_heads %d and head_dim %d must be >= 1",
                         d->batch, d->heads, d->kv_heads, d->head_dim);
    if (d->heads % d->kv_heads)
        return par__fail(PAR_ESHAPE, "par_cp_create: %d q heads are not a multiple of %d kv heads (GQA groups)", d->heads,
                         d->kv_heads);
    if (cp->seq % cp->P)
        return par__fail(PAR_ESHAPE, "par_cp_create: sequence length %lld does not split over %d context-parallel "
                                     "ranks; pad the data to a multiple of %d", (long long)cp->seq, cp->P, cp->P);
    if (cp->zigzag && cp->seq % (2 * cp->R))
        return par__fail(PAR_ESHAPE, "par_cp_create: sequence length %lld does not split into 2 x %d = %d zigzag chunks "
                                     "(ring degree %d); pad the data to a multiple of %d or use contiguous blocks",
                         (long long)cp->seq, cp->R, 2 * cp->R, cp->R, 2 * cp->R * (cp->P / cp->R));
    if (cp->U > 1 && d->heads % cp->U)
        return par__fail(PAR_ESHAPE, "par_cp_create: %d q heads (this rank's) are not divisible by the Ulysses degree %d",
                         d->heads, cp->U);
    if (cp->U > 1 && d->kv_heads % cp->U && cp->U % d->kv_heads)
        return par__fail(PAR_ESHAPE, "par_cp_create: %d kv heads (this rank's) and the Ulysses degree %d: one must "
                                     "divide the other (kv heads are split, or each replicated %d / kv_heads times)",
                         d->kv_heads, cp->U, cp->U);
    return PAR_OK;
}

static par_status par__cp_degrees(par_cp *cp, const par_cp_desc *d) {
    const par_layout *t = d->tokens;
    if (t->ndim != 2) return par__fail(PAR_ESHAPE, "par_cp_create: the tokens layout must be 2-D [batch, seq], not %d-D", t->ndim);
    if (t->map.partial) return par__fail(PAR_ELAYOUT, "par_cp_create: the tokens layout is partial");
    cp->dims = 0;
    {
        int k;
        for (k = 0; k < t->map.count[1]; k++)
            if (par_mesh_dev_size(&t->mesh, t->map.dev[1][k]) > 1) cp->dims |= 1u << t->map.dev[1][k];
    }
    cp->P = (int)par_layout_shards(t, 1), cp->seq = t->shape[1];
    switch (d->algo) {
    case PAR_CP_RING: cp->U = 1; break;
    case PAR_CP_ULYSSES: cp->U = cp->P; break;
    case PAR_CP_HYBRID:
        cp->U = d->ulysses_degree ? d->ulysses_degree : 1;
        if (cp->U < 1 || cp->P % cp->U)
            return par__fail(PAR_EINVAL, "par_cp_create: ulysses_degree %d does not divide the context-parallel degree %d",
                             d->ulysses_degree, cp->P);
        break;
    default: return par__fail(PAR_EINVAL, "par_cp_create: unknown algorithm %d", (int)d->algo);
    }
    cp->R = cp->P / cp->U;
    return PAR_OK;
}

PARALLEL_DEF par_status par_cp_create(par_ctx *ctx, const par_cp_desc *d, par_cp **out) {
    par_cp *cp;
    par_status st;
    int64_t qn, kvn, need;
    int *ranks;
    if (out) *out = NULL;
    if (!ctx || !d || !out || !d->tokens) return par__fail(PAR_EINVAL, "par_cp_create: NULL argument");
    if (!par__mesh_same_shape(&d->tokens->mesh, par_ctx_mesh(ctx)))
        return par__fail(PAR_ELAYOUT, "par_cp_create: the tokens layout is not on the context's mesh");
    cp = (par_cp *)par__ctx_malloc(ctx, sizeof *cp);
    if (!cp) return par__fail(PAR_ENOMEM, "par_cp_create: out of memory");
    memset(cp, 0, sizeof *cp);
    cp->ctx = ctx, cp->ct = par_ctx_compute(ctx), cp->cm = par_ctx_comm(ctx), cp->algo = d->algo;
    cp->causal = !d->full_attention, cp->no_a2a = d->no_all_to_all != 0, cp->trace = d->trace;
    cp->batch = d->batch, cp->hq = d->heads, cp->hkv = d->kv_heads, cp->hd = d->head_dim;
    cp->scale = d->scale > 0 ? d->scale : 1.0f / sqrtf((float)(d->head_dim > 0 ? d->head_dim : 1));
    if ((st = par__cp_degrees(cp, d)) != PAR_OK) return par_cp_destroy(cp), st;
    cp->zigzag = !d->contiguous && cp->R > 1;
    if ((st = par__cp_check(cp, d)) != PAR_OK) return par_cp_destroy(cp), st;
    if (!cp->ct->attention_fwd || !cp->ct->attention_bwd || !cp->ct->attention_merge || !cp->ct->memcpy_2d ||
        !cp->ct->axpy)
        return par_cp_destroy(cp), par__fail(PAR_EUNSUPPORTED, "par_cp_create: the compute table lacks attention, "
                                                                "merge, memcpy_2d or axpy");
    cp->S = cp->seq / cp->P, cp->Sr = cp->S * cp->U;
    cp->hqh = cp->hq / cp->U, cp->hkvh = cp->hkv >= cp->U ? cp->hkv / cp->U : 1;
    cp->rep = cp->hkv >= cp->U ? 1 : cp->U / cp->hkv;
    cp->pos = (int64_t *)par__ctx_malloc(ctx, sizeof(int64_t) * (size_t)cp->seq);
    if (!cp->pos) return par_cp_destroy(cp), par__fail(PAR_ENOMEM, "par_cp_create: out of memory");
    par__cp_fill_positions(cp);
    ranks = (int *)par__ctx_malloc(ctx, 2 * sizeof(int) * (size_t)par_ctx_size(ctx));
    st = ranks ? par__cp_groups(cp, ranks, ranks + par_ctx_size(ctx)) : par__fail(PAR_ENOMEM, "par_cp_create: out of memory");
    par__ctx_free(ctx, ranks);
    if (st != PAR_OK) return par_cp_destroy(cp), st;
    /* workspace, all of it now: memory is planned up front */
    qn = (int64_t)cp->batch * cp->Sr * cp->hqh * cp->hd, kvn = (int64_t)cp->batch * cp->Sr * cp->hkvh * cp->hd;
    st = cp->ct->alloc(cp->ct->user, sizeof(int64_t) * (size_t)cp->seq, PAR_MEM_WORKSPACE, (void **)&cp->dpos);
    if (st == PAR_OK) cp->bytes[PAR_MEM_WORKSPACE] += (int64_t)sizeof(int64_t) * cp->seq;
    if (st == PAR_OK)
        st = cp->ct->memcpy(cp->ct->user, cp->dpos, cp->pos, sizeof(int64_t) * (size_t)cp->seq,
                            cp->ct->device_memory ? PAR_COPY_HOST_TO_DEVICE : PAR_COPY_HOST_TO_HOST);
    if (cp->R > 1) {
        int k;
        for (k = 0; k < 2 && st == PAR_OK; k++) st = par__cp_alloc(cp, 2 * kvn, PAR_MEM_COMM, &cp->kv[k]);
        for (k = 0; k < 3 && st == PAR_OK; k++) st = par__cp_alloc(cp, 2 * kvn, PAR_MEM_COMM, &cp->acc[k]);
        if (st == PAR_OK) st = par__cp_alloc(cp, 2 * kvn, PAR_MEM_WORKSPACE, &cp->tmp);
        if (st == PAR_OK) st = par__cp_alloc(cp, qn, PAR_MEM_WORKSPACE, &cp->ob);
        if (st == PAR_OK) st = par__cp_alloc(cp, (int64_t)cp->batch * cp->hqh * cp->Sr, PAR_MEM_WORKSPACE, &cp->lseb);
    }
    if (cp->U > 1) {
        /* one block per Ulysses rank: its heads of q, k and v (kv copies included) */
        cp->a2a_blk = (int64_t)cp->batch * cp->S * (cp->hqh + 2 * cp->hkvh) * cp->hd;
        need = cp->U * cp->a2a_blk;
        if (st == PAR_OK) st = par__cp_alloc(cp, need, PAR_MEM_COMM, &cp->send);
        if (st == PAR_OK) st = par__cp_alloc(cp, cp->no_a2a ? cp->U * need : need, PAR_MEM_COMM, &cp->recv);
        if (st == PAR_OK) st = par__cp_alloc(cp, qn, PAR_MEM_WORKSPACE, &cp->do_h);
        if (st == PAR_OK) st = par__cp_alloc(cp, qn, PAR_MEM_WORKSPACE, &cp->dq_h);
        if (st == PAR_OK) st = par__cp_alloc(cp, kvn, PAR_MEM_WORKSPACE, &cp->dk_h);
        if (st == PAR_OK) st = par__cp_alloc(cp, kvn, PAR_MEM_WORKSPACE, &cp->dv_h);
    }
    if (st != PAR_OK) return par_cp_destroy(cp), st;
    *out = cp;
    return PAR_OK;
}

PARALLEL_DEF par_status par_cp_get_info(const par_cp *cp, par_cp_info *info) {
    if (!cp || !info) return par__fail(PAR_EINVAL, "par_cp_get_info: NULL argument");
    memset(info, 0, sizeof *info);
    info->degree = cp->P, info->index = cp->c, info->ring_degree = cp->R, info->ring_index = cp->r;
    info->ulysses_degree = cp->U, info->ulysses_index = cp->u, info->zigzag = cp->zigzag, info->algo = cp->algo;
    info->cp_dims = cp->dims, info->seq = cp->seq, info->seq_local = cp->S;
    info->lse_floats = (int64_t)cp->batch * cp->hq * cp->S;
    /* Ulysses keeps the head-split q, k, v and o for backward */
    info->saved_floats = cp->U > 1 ? (int64_t)cp->batch * cp->Sr * 2 * (cp->hqh + cp->hkvh) * cp->hd : 0;
    info->comm_us = cp->comm_us;
    return PAR_OK;
}

PARALLEL_DEF par_status par_cp_positions_of(const par_cp *cp, int index, int64_t *pos) {
    if (!cp || !pos) return par__fail(PAR_EINVAL, "par_cp_positions: NULL argument");
    if (index < 0 || index >= cp->P)
        return par__fail(PAR_EINVAL, "par_cp_positions_of: index %d outside 0..%d", index, cp->P - 1);
    memcpy(pos, cp->pos + (int64_t)index * cp->S, sizeof(int64_t) * (size_t)cp->S);
    return PAR_OK;
}

PARALLEL_DEF par_status par_cp_positions(const par_cp *cp, int64_t *pos) {
    if (!cp) return par__fail(PAR_EINVAL, "par_cp_positions: NULL argument");
    return par_cp_positions_of(cp, cp->c, pos);
}

PARALLEL_DEF par_status par_cp_memory(const par_cp *cp, int64_t bytes[PAR_MEM_CATEGORY_COUNT]) {
    int k;
    if (!cp || !bytes) return par__fail(PAR_EINVAL, "par_cp_memory: NULL argument");
    for (k = 0; k < PAR_MEM_CATEGORY_COUNT; k++) bytes[k] = cp->bytes[k];
    return PAR_OK;
}

/* ---- timing ------------------------------------------------------------------ */

static double par__cp_now(const par_cp *cp) {
#ifndef PARALLEL_NO_TRACE
    return cp->trace ? par_trace_now_us() : 0.0;
#else
    (void)cp;
    return 0.0;
#endif
}

static void par__cp_span(par_cp *cp, const char *category, double t0, const char *what) {
#ifndef PARALLEL_NO_TRACE
    double t1;
    if (!cp->trace) return;
    t1 = par_trace_now_us();
    (void)par_trace_span(cp->trace, what, category, t0, t1);
    if (strcmp(category, "comm") == 0) cp->comm_us += t1 - t0;
#else
    (void)cp, (void)category, (void)t0, (void)what;
#endif
}

/* ---- Ulysses: all-to-all between [S tokens, H heads] and [U x S tokens, H/U heads] -- */

/* Heads a Ulysses rank receives of a tensor with H heads (H / U, or 1 copy when H < U). */
static int par__cp_block_heads(const par_cp *cp, int H) { return H >= cp->U ? H / cp->U : 1; }
static int par__cp_first_head(const par_cp *cp, int H, int j) { return H >= cp->U ? j * (H / cp->U) : j / (cp->U / H); }

static par_status par__cp_copy2d(par_cp *cp, float *dst, int64_t dpitch, const float *src, int64_t spitch, int64_t width,
                                 int64_t height) {
    if (width <= 0 || height <= 0) return PAR_OK;
    return cp->ct->memcpy_2d(cp->ct->user, dst, (size_t)dpitch * sizeof(float), src, (size_t)spitch * sizeof(float),
                             (size_t)width * sizeof(float), (size_t)height);
}

/* x [b, S, H, d] -> send block j at offset `off`: the heads of Ulysses rank j. */
static par_status par__cp_pack_heads(par_cp *cp, const float *x, int H, int64_t blk, int64_t off) {
    const int hb = par__cp_block_heads(cp, H), d = cp->hd;
    int j;
    for (j = 0; j < cp->U; j++)
        PAR__CHECK(par__cp_copy2d(cp, cp->send + j * blk + off, (int64_t)hb * d, x + (int64_t)par__cp_first_head(cp, H, j) * d,
                                  (int64_t)H * d, (int64_t)hb * d, (int64_t)cp->batch * cp->S));
    return PAR_OK;
}

/* y [b, U x S, hb, d] -> send block j at `off`: Ulysses rank j's tokens. */
static par_status par__cp_pack_tokens(par_cp *cp, const float *y, int hb, int64_t blk, int64_t off) {
    const int64_t piece = cp->S * hb * cp->hd;
    int j;
    for (j = 0; j < cp->U; j++)
        PAR__CHECK(par__cp_copy2d(cp, cp->send + j * blk + off, piece, y + j * piece, cp->Sr * hb * cp->hd, piece,
                                  cp->batch));
    return PAR_OK;
}

/* All-to-all of `blk` floats per rank (or all-gather + slice); *recv, *stride
   and *off say where received block j starts: *recv + j * *stride + *off. */
static par_status par__cp_exchange(par_cp *cp, int64_t blk, const float **recv, int64_t *stride, int64_t *off) {
    const double t0 = par__cp_now(cp);
    if (!cp->no_a2a) {
        PAR__CHECK(cp->cm->all_to_all(cp->cm->user, cp->uly, cp->send, cp->recv, blk, PAR_F32, NULL));
        *recv = cp->recv, *stride = blk, *off = 0;
    } else { /* every rank's whole send buffer: rank j's block for me is at j*U*blk + u*blk */
        PAR__CHECK(cp->cm->all_gather(cp->cm->user, cp->uly, cp->send, cp->recv, cp->U * blk, PAR_F32, NULL));
        *recv = cp->recv, *stride = cp->U * blk, *off = cp->u * blk;
    }
    par__cp_span(cp, "comm", t0, cp->no_a2a ? "cp all_gather" : "cp all_to_all");
    return PAR_OK;
}

/* Received blocks (Ulysses rank j's tokens, my heads) -> y [b, U x S, hb, d]. */
static par_status par__cp_unpack_tokens(par_cp *cp, const float *recv, int64_t stride, int64_t off, int hb, float *y) {
    const int64_t piece = cp->S * hb * cp->hd;
    int j;
    for (j = 0; j < cp->U; j++)
        PAR__CHECK(par__cp_copy2d(cp, y + j * piece, cp->Sr * hb * cp->hd, recv + j * stride + off, piece, piece, cp->batch));
    return PAR_OK;
}

/* Received blocks (my tokens, Ulysses rank j's heads) -> x [b, S, H, d]; the
   copies of a replicated head are summed (their gradients). Writes into the
   receive buffer. */
static par_status par__cp_unpack_heads(par_cp *cp, float *recv, int64_t stride, int64_t off, int H, float *x) {
    const int hb = par__cp_block_heads(cp, H), d = cp->hd, rep = H >= cp->U ? 1 : cp->U / H;
    const int64_t n = (int64_t)cp->batch * cp->S * hb * d;
    int j, k;
    for (j = 0; j < cp->U; j += rep) {
        float *first = recv + j * stride + off;
        for (k = 1; k < rep; k++) PAR__CHECK(cp->ct->axpy(cp->ct->user, n, 1.0f, recv + (j + k) * stride + off, first));
        PAR__CHECK(par__cp_copy2d(cp, x + (int64_t)par__cp_first_head(cp, H, j) * d, (int64_t)H * d, first, (int64_t)hb * d,
                                  (int64_t)hb * d, (int64_t)cp->batch * cp->S));
    }
    return PAR_OK;
}

/* ---- ring ------------------------------------------------------------------------ */

static par_attn_desc par__cp_attn(const par_cp *cp, int q_ring, int k_ring) {
    par_attn_desc a;
    memset(&a, 0, sizeof a);
    a.batch = cp->batch, a.q_heads = cp->hqh, a.kv_heads = cp->hkvh, a.head_dim = cp->hd;
    a.q_len = a.k_len = cp->Sr, a.causal = cp->causal, a.scale = cp->scale, a.dtype = PAR_F32;
    a.q_pos = cp->dpos + (int64_t)q_ring * cp->Sr, a.k_pos = cp->dpos + (int64_t)k_ring * cp->Sr;
    return a;
}

/* 1 when causality hides every key of ring rank k_ring from every query of q_ring. */
static int par__cp_block_hidden(const par_cp *cp, int q_ring, int k_ring) {
    const int64_t *qp = cp->pos + (int64_t)q_ring * cp->Sr, *kp = cp->pos + (int64_t)k_ring * cp->Sr;
    int64_t qmax = -1, kmin = INT64_MAX, t;
    if (!cp->causal) return 0;
    for (t = 0; t < cp->Sr; t++) {
        if (qp[t] > qmax) qmax = qp[t];
        if (kp[t] < kmin) kmin = kp[t];
    }
    return kmin > qmax;
}

/* One ring transfer in flight: this rank's send to the next ring rank and
   receive from the previous one, posted at t0. With a trace it becomes a "p2p"
   span from t0 to when it was seen complete: right after the compute it ran
   behind when it had finished by then (hidden), else the end of the wait
   (the rest exposed, also a "comm" span "cp ring wait"). */
typedef struct par__cp_xfer {
    par_request *s, *r;
    double t0, t_done;
} par__cp_xfer;

/* Post recv (from the previous ring rank) into rbuf and send (to the next) of
   sbuf, `count` floats each; a test launches backends that defer. */
static par_status par__cp_shift(par_cp *cp, const float *sbuf, float *rbuf, int64_t count, par__cp_xfer *x) {
    const int next = (cp->r + 1) % cp->R, prev = (cp->r + cp->R - 1) % cp->R;
    int done = 0;
    x->t0 = par__cp_now(cp), x->t_done = 0;
    PAR__CHECK(cp->cm->recv(cp->cm->user, cp->ring, rbuf, count, PAR_F32, prev, &x->r));
    PAR__CHECK(cp->cm->send(cp->cm->user, cp->ring, sbuf, count, PAR_F32, next, &x->s));
    PAR__CHECK(cp->cm->test(cp->cm->user, x->s, &done));
    if (done) x->s = NULL;
    return PAR_OK;
}

/* After the compute it overlapped: note whether the transfer is already done. */
static par_status par__cp_poll(par_cp *cp, par__cp_xfer *x) {
    int done = 0;
    if (!cp->trace || x->t_done > 0 || (!x->s && !x->r)) return PAR_OK;
    if (x->r) PAR__CHECK(cp->cm->test(cp->cm->user, x->r, &done));
    if (x->r && done) x->r = NULL;
    if (x->s) PAR__CHECK(cp->cm->test(cp->cm->user, x->s, &done));
    if (x->s && done) x->s = NULL;
    if (!x->s && !x->r) x->t_done = par__cp_now(cp);
    return PAR_OK;
}

/* Complete the transfer (waiting for what is left) and record its spans. */
static par_status par__cp_finish(par_cp *cp, par__cp_xfer *x, const char *what) {
    const double t0 = par__cp_now(cp);
    par_status st = PAR_OK, w;
    if (x->r) w = cp->cm->wait(cp->cm->user, x->r), st = st == PAR_OK ? w : st, x->r = NULL;
    if (x->s) w = cp->cm->wait(cp->cm->user, x->s), st = st == PAR_OK ? w : st, x->s = NULL;
    if (st != PAR_OK || !cp->trace || x->t0 <= 0) return st;
    if (x->t_done <= 0) {
        par__cp_span(cp, "comm", t0, "cp ring wait");
        x->t_done = par__cp_now(cp);
    }
#ifndef PARALLEL_NO_TRACE
    (void)par_trace_span(cp->trace, what, "p2p", x->t0, x->t_done);
#else
    (void)what;
#endif
    x->t0 = 0;
    return PAR_OK;
}

static par_status par__cp_copy(par_cp *cp, float *dst, const float *src, int64_t n) {
    return cp->ct->memcpy(cp->ct->user, dst, src, (size_t)n * sizeof(float),
                          cp->ct->device_memory ? PAR_COPY_DEVICE_TO_DEVICE : PAR_COPY_HOST_TO_HOST);
}

/* Attention of the ring rank's Sr queries (head-split when Ulysses is in
   front) over every ring rank's keys: o and lse merged in f32. */
static par_status par__cp_ring_fwd(par_cp *cp, const float *q, const float *k, const float *v, float *o, float *lse) {
    const par_compute_table *ct = cp->ct;
    const int64_t kvn = (int64_t)cp->batch * cp->Sr * cp->hkvh * cp->hd;
    par__cp_xfer x = {NULL, NULL, 0, 0};
    par_status st = PAR_OK;
    int s;
    if (cp->R == 1) {
        const par_attn_desc a = par__cp_attn(cp, 0, 0);
        const double t0 = par__cp_now(cp);
        PAR__CHECK(ct->attention_fwd(ct->user, &a, q, k, v, o, lse));
        par__cp_span(cp, "compute", t0, "cp attention");
        return PAR_OK;
    }
    PAR__CHECK(par__cp_copy(cp, cp->kv[0], k, kvn));
    PAR__CHECK(par__cp_copy(cp, cp->kv[0] + kvn, v, kvn));
    for (s = 0; s < cp->R && st == PAR_OK; s++) {
        const int src = (cp->r - s + cp->R) % cp->R;
        const float *cur = cp->kv[s % 2];
        const par_attn_desc a = par__cp_attn(cp, cp->r, src);
        double t0;
        if (s < cp->R - 1) st = par__cp_shift(cp, cur, cp->kv[(s + 1) % 2], 2 * kvn, &x);
        t0 = par__cp_now(cp);
        if (st == PAR_OK && s == 0) st = ct->attention_fwd(ct->user, &a, q, cur, cur + kvn, o, lse);
        else if (st == PAR_OK && !par__cp_block_hidden(cp, cp->r, src)) {
            st = ct->attention_fwd(ct->user, &a, q, cur, cur + kvn, cp->ob, cp->lseb);
            if (st == PAR_OK) st = ct->attention_merge(ct->user, &a, o, lse, cp->ob, cp->lseb);
        }
        par__cp_span(cp, "compute", t0, "cp attention block");
        if (st == PAR_OK) st = par__cp_poll(cp, &x);
        if (st == PAR_OK) st = par__cp_finish(cp, &x, "cp kv transfer");
    }
    if (st != PAR_OK) (void)par__cp_finish(cp, &x, "cp kv transfer"); /* no request left behind */
    return st;
}

/* Backward of par__cp_ring_fwd: dq of the own queries; dK/dV accumulators
   (f32, packed [dk | dv]) travel with the blocks and come home after a turn.
   The accumulator of step s arrives in acc[s % 3]: the buffer sent two steps
   earlier, whose send is complete by then. */
static par_status par__cp_ring_bwd(par_cp *cp, const float *q, const float *k, const float *v, const float *o,
                                   const float *lse, const float *do_, float *dq, float *dk, float *dv) {
    const par_compute_table *ct = cp->ct;
    const int64_t kvn = (int64_t)cp->batch * cp->Sr * cp->hkvh * cp->hd;
    const int64_t qn = (int64_t)cp->batch * cp->Sr * cp->hqh * cp->hd;
    par__cp_xfer kv = {NULL, NULL, 0, 0}, acc = {NULL, NULL, 0, 0};
    par_status st = PAR_OK;
    int s;
    if (cp->R == 1) {
        const par_attn_desc a = par__cp_attn(cp, 0, 0);
        const double t0 = par__cp_now(cp);
        PAR__CHECK(ct->attention_bwd(ct->user, &a, q, k, v, o, lse, do_, dq, dk, dv, 0));
        par__cp_span(cp, "compute", t0, "cp attention bwd");
        return PAR_OK;
    }
    PAR__CHECK(ct->memset(ct->user, dq, 0, (size_t)qn * sizeof(float)));
    PAR__CHECK(par__cp_copy(cp, cp->kv[0], k, kvn));
    PAR__CHECK(par__cp_copy(cp, cp->kv[0] + kvn, v, kvn));
    for (s = 0; s < cp->R && st == PAR_OK; s++) {
        const int src = (cp->r - s + cp->R) % cp->R;
        const float *cur = cp->kv[s % 2];
        float *mine = s == 0 ? cp->acc[0] : cp->tmp;
        const par_attn_desc a = par__cp_attn(cp, cp->r, src);
        const int hidden = par__cp_block_hidden(cp, cp->r, src);
        double t0;
        if (s < cp->R - 1) st = par__cp_shift(cp, cur, cp->kv[(s + 1) % 2], 2 * kvn, &kv);
        t0 = par__cp_now(cp);
        if (st == PAR_OK && (s == 0 || !hidden)) st = ct->memset(ct->user, mine, 0, (size_t)(2 * kvn) * sizeof(float));
        if (st == PAR_OK && !hidden)
            st = ct->attention_bwd(ct->user, &a, q, cur, cur + kvn, o, lse, do_, dq, mine, mine + kvn, 1);
        par__cp_span(cp, "compute", t0, "cp attention block bwd");
        /* the block's accumulator (from the previous rank, sent last step) + this rank's share */
        if (st == PAR_OK) st = par__cp_poll(cp, &acc);
        if (st == PAR_OK) st = par__cp_finish(cp, &acc, "cp dkv transfer");
        if (st == PAR_OK && s > 0 && !hidden) st = ct->axpy(ct->user, 2 * kvn, 1.0f, mine, cp->acc[s % 3]);
        /* pass it on; the next one arrives in the third buffer */
        if (st == PAR_OK) st = par__cp_shift(cp, cp->acc[s % 3], cp->acc[(s + 1) % 3], 2 * kvn, &acc);
        if (st == PAR_OK) st = par__cp_poll(cp, &kv);
        if (st == PAR_OK) st = par__cp_finish(cp, &kv, "cp kv transfer");
    }
    /* after a full turn the accumulator of this rank's own block is home */
    if (st == PAR_OK) st = par__cp_finish(cp, &acc, "cp dkv transfer");
    if (st == PAR_OK) st = par__cp_copy(cp, dk, cp->acc[cp->R % 3], kvn);
    if (st == PAR_OK) st = par__cp_copy(cp, dv, cp->acc[cp->R % 3] + kvn, kvn);
    if (st != PAR_OK) (void)par__cp_finish(cp, &kv, "cp kv transfer"), (void)par__cp_finish(cp, &acc, "cp dkv transfer");
    return st;
}

/* ---- the public calls -------------------------------------------------------------- */

static par_status par__cp_args(const par_cp *cp, const char *fn, const void *a, const void *b, const void *c,
                               const void *d, const void *e) {
    if (!cp) return par__fail(PAR_EINVAL, "%s: NULL cp", fn);
    if (!a || !b || !c || !d || !e) return par__fail(PAR_EINVAL, "%s: NULL buffer", fn);
    return PAR_OK;
}

PARALLEL_DEF par_status par_cp_attention_fwd(par_cp *cp, const float *q, const float *k, const float *v, float *o,
                                             float *lse, float *saved) {
    int64_t qn, kvn, stride, off;
    const float *recv;
    float *qh, *kh, *vh, *oh;
    PAR__CHECK(par__cp_args(cp, "par_cp_attention_fwd", q, k, v, o, lse));
    if (cp->U == 1) return par__cp_ring_fwd(cp, q, k, v, o, lse);
    if (!saved) return par__fail(PAR_EINVAL, "par_cp_attention_fwd: NULL saved (Ulysses keeps %lld floats per call)",
                                 (long long)((int64_t)cp->batch * cp->Sr * 2 * (cp->hqh + cp->hkvh) * cp->hd));
    qn = (int64_t)cp->batch * cp->Sr * cp->hqh * cp->hd, kvn = (int64_t)cp->batch * cp->Sr * cp->hkvh * cp->hd;
    qh = saved, kh = qh + qn, vh = kh + kvn, oh = vh + kvn;
    /* q, k and v in one all-to-all: block j = [q | k | v] heads of rank j */
    PAR__CHECK(par__cp_pack_heads(cp, q, cp->hq, cp->a2a_blk, 0));
    PAR__CHECK(par__cp_pack_heads(cp, k, cp->hkv, cp->a2a_blk, qn / cp->U));
    PAR__CHECK(par__cp_pack_heads(cp, v, cp->hkv, cp->a2a_blk, qn / cp->U + kvn / cp->U));
    PAR__CHECK(par__cp_exchange(cp, cp->a2a_blk, &recv, &stride, &off));
    PAR__CHECK(par__cp_unpack_tokens(cp, recv, stride, off, cp->hqh, qh));
    PAR__CHECK(par__cp_unpack_tokens(cp, recv, stride, off + qn / cp->U, cp->hkvh, kh));
    PAR__CHECK(par__cp_unpack_tokens(cp, recv, stride, off + qn / cp->U + kvn / cp->U, cp->hkvh, vh));
    PAR__CHECK(par__cp_ring_fwd(cp, qh, kh, vh, oh, lse));
    PAR__CHECK(par__cp_pack_tokens(cp, oh, cp->hqh, qn / cp->U, 0));
    PAR__CHECK(par__cp_exchange(cp, qn / cp->U, &recv, &stride, &off));
    return par__cp_unpack_heads(cp, (float *)recv, stride, off, cp->hq, o);
}

PARALLEL_DEF par_status par_cp_attention_bwd(par_cp *cp, const float *q, const float *k, const float *v,
                                             const float *o, const float *lse, const float *saved, const float *do_,
                                             float *dq, float *dk, float *dv) {
    int64_t qn, kvn, stride, off;
    const float *recv, *qh, *kh, *vh, *oh;
    PAR__CHECK(par__cp_args(cp, "par_cp_attention_bwd", q, k, v, o, lse));
    if (!do_ || !dq || !dk || !dv) return par__fail(PAR_EINVAL, "par_cp_attention_bwd: NULL buffer");
    if (cp->U == 1) return par__cp_ring_bwd(cp, q, k, v, o, lse, do_, dq, dk, dv);
    if (!saved) return par__fail(PAR_EINVAL, "par_cp_attention_bwd: NULL saved");
    qn = (int64_t)cp->batch * cp->Sr * cp->hqh * cp->hd, kvn = (int64_t)cp->batch * cp->Sr * cp->hkvh * cp->hd;
    qh = saved, kh = qh + qn, vh = kh + kvn, oh = vh + kvn;
    PAR__CHECK(par__cp_pack_heads(cp, do_, cp->hq, qn / cp->U, 0));
    PAR__CHECK(par__cp_exchange(cp, qn / cp->U, &recv, &stride, &off));
    PAR__CHECK(par__cp_unpack_tokens(cp, recv, stride, off, cp->hqh, cp->do_h));
    PAR__CHECK(par__cp_ring_bwd(cp, qh, kh, vh, oh, lse, cp->do_h, cp->dq_h, cp->dk_h, cp->dv_h));
    PAR__CHECK(par__cp_pack_tokens(cp, cp->dq_h, cp->hqh, cp->a2a_blk, 0));
    PAR__CHECK(par__cp_pack_tokens(cp, cp->dk_h, cp->hkvh, cp->a2a_blk, qn / cp->U));
    PAR__CHECK(par__cp_pack_tokens(cp, cp->dv_h, cp->hkvh, cp->a2a_blk, qn / cp->U + kvn / cp->U));
    PAR__CHECK(par__cp_exchange(cp, cp->a2a_blk, &recv, &stride, &off));
    PAR__CHECK(par__cp_unpack_heads(cp, (float *)recv, stride, off, cp->hq, dq));
    PAR__CHECK(par__cp_unpack_heads(cp, (float *)recv, stride, off + qn / cp->U, cp->hkv, dk));
    return par__cp_unpack_heads(cp, (float *)recv, stride, off + qn / cp->U + kvn / cp->U, cp->hkv, dv);
}


// >>pipeline

struct par_pp_schedule {
    int p, v, m;
    int *count, *cap;
    par_pp_action **a;
};

static const char *const par__pp_kind_names[PAR_PP_KIND_COUNT] = {"gpipe", "1f1b", "interleaved", "zb-h1"};
static const char *const par__pp_op_text[PAR_PP_OP_COUNT] = {"F", "B", "I", "W", "SA", "RA", "SG", "RG"};

PARALLEL_DEF const char *par_pp_kind_name(par_pp_kind kind) {
    return (unsigned)kind < (unsigned)PAR_PP_KIND_COUNT ? par__pp_kind_names[kind] : "?";
}

PARALLEL_DEF par_status par_pp_kind_parse(const char *text, par_pp_kind *kind) {
    static const struct {
        const char *name;
        par_pp_kind kind;
    } names[] = {{"gpipe", PAR_PP_GPIPE},       {"1f1b", PAR_PP_1F1B},          {"interleaved", PAR_PP_INTERLEAVED},
                 {"interleaved_1f1b", PAR_PP_INTERLEAVED}, {"zb-h1", PAR_PP_ZB_H1}, {"zbh1", PAR_PP_ZB_H1},
                 {"zero_bubble", PAR_PP_ZB_H1}};
    size_t i;
    if (!text || !kind) return par__fail(PAR_EINVAL, "par_pp_kind_parse: NULL argument");
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (par__st_iequal(text, names[i].name)) return *kind = names[i].kind, PAR_OK;
    return par__fail(PAR_EINVAL, "pipeline schedule \"%s\" is unknown; accepted: gpipe, 1f1b, interleaved "
                                 "(interleaved_1f1b), zb-h1 (zbh1, zero_bubble)", text);
}

PARALLEL_DEF void par_pp_schedule_destroy(par_pp_schedule *s) {
    int r;
    if (!s) return;
    for (r = 0; s->a && r < s->p; r++) PARALLEL_FREE(s->a[r]);
    PARALLEL_FREE(s->a), PARALLEL_FREE(s->count), PARALLEL_FREE(s->cap), PARALLEL_FREE(s);
}

PARALLEL_DEF par_status par_pp_schedule_create(int stages, int chunks, int micro_batches, par_pp_schedule **out) {
    par_pp_schedule *s;
    if (out) *out = NULL;
    if (!out) return par__fail(PAR_EINVAL, "par_pp_schedule_create: NULL schedule");
    if (chunks == 0) chunks = 1;
    if (stages < 1 || chunks < 1 || micro_batches < 1 || stages > 65536 || chunks > 4096 || micro_batches > 1 << 20)
        return par__fail(PAR_EINVAL, "pipeline: stages %d, chunks %d and micro-batches %d must be >= 1 (and at most "
                                     "65536, 4096, 1048576)", stages, chunks, micro_batches);
    s = (par_pp_schedule *)PARALLEL_MALLOC(sizeof *s);
    if (!s) return par__fail(PAR_ENOMEM, "pipeline: out of memory");
    memset(s, 0, sizeof *s);
    s->p = stages, s->v = chunks, s->m = micro_batches;
    s->count = (int *)PARALLEL_MALLOC(sizeof(int) * (size_t)stages);
    s->cap = (int *)PARALLEL_MALLOC(sizeof(int) * (size_t)stages);
    s->a = (par_pp_action **)PARALLEL_MALLOC(sizeof(par_pp_action *) * (size_t)stages);
    if (!s->count || !s->cap || !s->a) return par_pp_schedule_destroy(s), par__fail(PAR_ENOMEM, "pipeline: out of memory");
    memset(s->count, 0, sizeof(int) * (size_t)stages), memset(s->cap, 0, sizeof(int) * (size_t)stages);
    memset(s->a, 0, sizeof(par_pp_action *) * (size_t)stages);
    *out = s;
    return PAR_OK;
}

PARALLEL_DEF par_status par_pp_schedule_append(par_pp_schedule *s, int rank, par_pp_op op, int micro_batch, int chunk) {
    if (!s) return par__fail(PAR_EINVAL, "par_pp_schedule_append: NULL schedule");
    if (rank < 0 || rank >= s->p || (unsigned)op >= (unsigned)PAR_PP_OP_COUNT || micro_batch < 0 ||
        micro_batch >= s->m || chunk < 0 || chunk >= s->v)
        return par__fail(PAR_EINVAL, "par_pp_schedule_append: rank %d, op %d, micro-batch %d or chunk %d outside "
                                     "%d ranks, %d micro-batches, %d chunks", rank, (int)op, micro_batch, chunk, s->p,
                         s->m, s->v);
    if (s->count[rank] == s->cap[rank]) {
        const int cap = s->cap[rank] ? 2 * s->cap[rank] : 16;
        par_pp_action *a = (par_pp_action *)PARALLEL_REALLOC(s->a[rank], sizeof(par_pp_action) * (size_t)cap);
        if (!a) return par__fail(PAR_ENOMEM, "pipeline: out of memory");
        s->a[rank] = a, s->cap[rank] = cap;
    }
    s->a[rank][s->count[rank]].op = op, s->a[rank][s->count[rank]].micro_batch = micro_batch;
    s->a[rank][s->count[rank]++].chunk = chunk;
    return PAR_OK;
}

PARALLEL_DEF int par_pp_schedule_stages(const par_pp_schedule *s) { return s ? s->p : 0; }
PARALLEL_DEF int par_pp_schedule_chunks(const par_pp_schedule *s) { return s ? s->v : 0; }
PARALLEL_DEF int par_pp_schedule_micro_batches(const par_pp_schedule *s) { return s ? s->m : 0; }

PARALLEL_DEF const par_pp_action *par_pp_schedule_actions(const par_pp_schedule *s, int rank, int *n) {
    if (n) *n = 0;
    if (!s || rank < 0 || rank >= s->p) return NULL;
    if (n) *n = s->count[rank];
    return s->a[rank];
}

PARALLEL_DEF par_status par_pp_schedule_slots(const par_pp_schedule *s, int rank, int *slots) {
    int *seen, k, held = 0, peak = 0;
    if (slots) *slots = 0;
    if (!s || !slots || rank < 0 || rank >= s->p)
        return par__fail(PAR_EINVAL, "par_pp_schedule_slots: NULL schedule or slots, or rank %d outside %d stages",
                         rank, s ? s->p : 0);
    /* per micro-batch: forwards seen (in the low half) and backwards finished */
    seen = (int *)PARALLEL_MALLOC(sizeof(int) * 2 * (size_t)s->m);
    if (!seen) return par__fail(PAR_ENOMEM, "pipeline: out of memory");
    memset(seen, 0, sizeof(int) * 2 * (size_t)s->m);
    for (k = 0; k < s->count[rank]; k++) {
        const par_pp_action *a = &s->a[rank][k];
        if (a->op == PAR_PP_F && seen[a->micro_batch]++ == 0 && ++held > peak) peak = held;
        if ((a->op == PAR_PP_B || a->op == PAR_PP_W) && ++seen[s->m + a->micro_batch] == s->v) held--;
    }
    PARALLEL_FREE(seen);
    *slots = peak;
    return PAR_OK;
}

/* ---- generators ------------------------------------------------------------------- */

/* Virtual stage of (rank, chunk), and whether it is the first / last one. */
static int par__pp_vstage(const par_pp_schedule *s, int rank, int chunk) { return chunk * s->p + rank; }

/* A forward with its receive before and send after (skipped at the ends of the model). */
static par_status par__pp_emit_fwd(par_pp_schedule *s, int r, int mb, int c) {
    const int vs = par__pp_vstage(s, r, c), last = s->p * s->v - 1;
    if (vs > 0 && s->p > 1) PAR__CHECK(par_pp_schedule_append(s, r, PAR_PP_RECV_ACT, mb, c));
    PAR__CHECK(par_pp_schedule_append(s, r, PAR_PP_F, mb, c));
    if (vs < last && s->p > 1) PAR__CHECK(par_pp_schedule_append(s, r, PAR_PP_SEND_ACT, mb, c));
    return PAR_OK;
}

/* A backward (B, or I for zero bubble) with its receive before and send after. */
static par_status par__pp_emit_bwd(par_pp_schedule *s, int r, int mb, int c, par_pp_op op) {
    const int vs = par__pp_vstage(s, r, c), last = s->p * s->v - 1;
    if (vs < last && s->p > 1) PAR__CHECK(par_pp_schedule_append(s, r, PAR_PP_RECV_GRAD, mb, c));
    PAR__CHECK(par_pp_schedule_append(s, r, op, mb, c));
    if (vs > 0 && s->p > 1) PAR__CHECK(par_pp_schedule_append(s, r, PAR_PP_SEND_GRAD, mb, c));
    return PAR_OK;
}

static par_status par__pp_gen_gpipe(par_pp_schedule *s, int r) {
    int mb, c;
    for (mb = 0; mb < s->m; mb++)
        for (c = 0; c < s->v; c++) PAR__CHECK(par__pp_emit_fwd(s, r, mb, c));
    for (mb = 0; mb < s->m; mb++)
        for (c = s->v - 1; c >= 0; c--) PAR__CHECK(par__pp_emit_bwd(s, r, mb, c, PAR_PP_B));
    return PAR_OK;
}

/* 1F1B: p - r - 1 warm-up forwards, then one forward and one backward, then
   the cool-down backwards. */
static par_status par__pp_gen_1f1b(par_pp_schedule *s, int r) {
    const int warm = s->p - r - 1 < s->m ? s->p - r - 1 : s->m;
    int k;
    for (k = 0; k < warm; k++) PAR__CHECK(par__pp_emit_fwd(s, r, k, 0));
    for (k = 0; k < s->m; k++) {
        if (warm + k < s->m) PAR__CHECK(par__pp_emit_fwd(s, r, warm + k, 0));
        PAR__CHECK(par__pp_emit_bwd(s, r, k, 0, PAR_PP_B));
    }
    return PAR_OK;
}

/* ZB-H1 (zero bubble at 1F1B's peak memory): backward split into I (input
   gradient, on the critical path) and W (weight gradient, not). Rank r warms
   up with 1F1B's p - r - 1 forwards, then runs r rounds of F, I that leave
   their W for later, then F, I, W rounds while forwards remain, I, W rounds
   after, and ends with the r deferred W. The deferred W are what makes it
   work: the last micro-batch's input gradients reach the first stage without
   waiting behind weight gradients, and the W fill the tail 1F1B leaves idle.
   Each rank holds at most p micro-batches (F done, W not), 1F1B's peak. With
   F = I = W = 1 and m >= p the bubble is (p - 1) / (3m + p - 1), a third of
   1F1B's (p - 1)(F + B), the published ideal; for m < p it is what the
   warm-up allows. */
static par_status par__pp_gen_zb_h1(par_pp_schedule *s, int r) {
    const int p = s->p, m = s->m;
    int f = 0, i = 0, w = 0, k;
    for (k = 0; k < p - r - 1 && f < m; k++) PAR__CHECK(par__pp_emit_fwd(s, r, f++, 0));
    for (k = 0; k < r && f < m; k++) {
        PAR__CHECK(par__pp_emit_fwd(s, r, f++, 0));
        PAR__CHECK(par__pp_emit_bwd(s, r, i++, 0, PAR_PP_I));
    }
    for (; f < m; w++) {
        PAR__CHECK(par__pp_emit_fwd(s, r, f++, 0));
        PAR__CHECK(par__pp_emit_bwd(s, r, i++, 0, PAR_PP_I));
        PAR__CHECK(par_pp_schedule_append(s, r, PAR_PP_W, w, 0));
    }
    for (; i < m; w++) {
        PAR__CHECK(par__pp_emit_bwd(s, r, i++, 0, PAR_PP_I));
        PAR__CHECK(par_pp_schedule_append(s, r, PAR_PP_W, w, 0));
    }
    for (; w < m; w++) PAR__CHECK(par_pp_schedule_append(s, r, PAR_PP_W, w, 0));
    return PAR_OK;
}

/* Megatron's interleaved 1F1B: forward k of rank r runs chunk (k / p) % v of
   micro-batch (k / (p v)) p + k % p; backwards the chunks in reverse. */
static par_status par__pp_gen_interleaved(par_pp_schedule *s, int r) {
    const int total = s->m * s->v, p = s->p, v = s->v;
    int warm = s->m == p ? total : (p - r - 1) * 2 + (v - 1) * p, k;
    if (warm > total) warm = total;
    for (k = 0; k < warm; k++) PAR__CHECK(par__pp_emit_fwd(s, r, (k / (p * v)) * p + k % p, (k / p) % v));
    for (k = 0; k < total; k++) {
        if (warm + k < total) {
            const int f = warm + k;
            PAR__CHECK(par__pp_emit_fwd(s, r, (f / (p * v)) * p + f % p, (f / p) % v));
        }
        PAR__CHECK(par__pp_emit_bwd(s, r, (k / (p * v)) * p + k % p, v - 1 - (k / p) % v, PAR_PP_B));
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_pp_schedule_make(const par_pp_schedule_desc *d, par_pp_schedule **out) {
    par_pp_schedule *s = NULL;
    par_status st = PAR_OK;
    int r, v;
    if (out) *out = NULL;
    if (!d || !out) return par__fail(PAR_EINVAL, "par_pp_schedule_make: NULL argument");
    v = d->chunks ? d->chunks : 1;
    if ((unsigned)d->kind >= (unsigned)PAR_PP_KIND_COUNT)
        return par__fail(PAR_EINVAL, "par_pp_schedule_make: unknown schedule kind %d", (int)d->kind);
    if (d->kind == PAR_PP_INTERLEAVED && v < 2)
        return par__fail(PAR_EINVAL, "pipeline: the interleaved schedule needs at least 2 model chunks per rank, "
                                     "not %d (use 1f1b for one)", v);
    if (d->kind != PAR_PP_INTERLEAVED && v != 1)
        return par__fail(PAR_EINVAL, "pipeline: %d model chunks per rank need the interleaved schedule, not %s", v,
                         par_pp_kind_name(d->kind));
    if (d->kind == PAR_PP_INTERLEAVED && d->stages > 0 && d->micro_batches % d->stages)
        return par__fail(PAR_EINVAL, "pipeline: the interleaved schedule needs the micro-batches (%d) to be a "
                                     "multiple of the stages (%d) (Megatron's constraint)", d->micro_batches, d->stages);
    if ((double)d->stages * v * d->micro_batches > (double)(1 << 24))
        return par__fail(PAR_ECAPACITY, "pipeline: %d stages x %d chunks x %d micro-batches is more than the "
                                        "generators make (2^24 micro-batch chunks)", d->stages, v, d->micro_batches);
    PAR__CHECK(par_pp_schedule_create(d->stages, v, d->micro_batches, &s));
    for (r = 0; r < s->p && st == PAR_OK; r++) {
        switch (d->kind) {
        case PAR_PP_GPIPE: st = par__pp_gen_gpipe(s, r); break;
        case PAR_PP_1F1B: st = par__pp_gen_1f1b(s, r); break;
        case PAR_PP_ZB_H1: st = par__pp_gen_zb_h1(s, r); break;
        default: st = par__pp_gen_interleaved(s, r); break;
        }
    }
    if (st != PAR_OK) return par_pp_schedule_destroy(s), st;
    *out = s;
    return PAR_OK;
}

/* ---- text form --------------------------------------------------------------------- */

PARALLEL_DEF int par_pp_schedule_format(const par_pp_schedule *s, char *buf, size_t size) {
    size_t used = 0;
    int r, k;
#define PAR__PP_PUT(...)                                                                   \
    do {                                                                                  \
        int n_ = snprintf(buf && used < size ? buf + used : NULL, buf && used < size ? size - used : 0, __VA_ARGS__); \
        if (n_ > 0) used += (size_t)n_;                                                   \
    } while (0)
    if (buf && size) buf[0] = 0;
    if (!s) return 0;
    PAR__PP_PUT("pipeline stages=%d chunks=%d micro_batches=%d\n", s->p, s->v, s->m);
    for (r = 0; r < s->p; r++) {
        PAR__PP_PUT("rank %d:", r);
        for (k = 0; k < s->count[r]; k++)
            PAR__PP_PUT("%s %s %d %d", k ? "," : "", par__pp_op_text[s->a[r][k].op], s->a[r][k].micro_batch,
                        s->a[r][k].chunk);
        PAR__PP_PUT("\n");
    }
#undef PAR__PP_PUT
    return (int)used;
}

/* Skip blanks and comments inside a line. */
static const char *par__pp_blank(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (*p == '#')
        while (*p && *p != '\n') p++;
    return p;
}

static int par__pp_int(const char **p, int *v) {
    char *end;
    long x;
    *p = par__pp_blank(*p);
    if (!(**p >= '0' && **p <= '9')) return 0;
    x = strtol(*p, &end, 10);
    if (x < 0 || x > INT_MAX) return 0;
    *p = end, *v = (int)x;
    return 1;
}

PARALLEL_DEF par_status par_pp_schedule_parse(const char *text, par_pp_schedule **out) {
    par_pp_schedule *s = NULL;
    const char *p = text;
    int line = 1, stages, chunks, mbs, n = 0;
    if (out) *out = NULL;
    if (!text || !out) return par__fail(PAR_EINVAL, "par_pp_schedule_parse: NULL argument");
    while (*(p = par__pp_blank(p)) == '\n') p++, line++;
    if (sscanf(p, "pipeline stages=%d chunks=%d micro_batches=%d%n", &stages, &chunks, &mbs, &n) != 3 || n == 0)
        return par__fail(PAR_EPARSE, "pipeline schedule, line %d: expected \"pipeline stages=P chunks=V "
                                     "micro_batches=M\"", line);
    PAR__CHECK(par_pp_schedule_create(stages, chunks, mbs, &s));
    p += n;
    for (;;) {
        int rank, k;
        p = par__pp_blank(p);
        if (*p == '\n') {
            p++, line++;
            continue;
        }
        if (!*p) break;
        if (strncmp(p, "rank", 4) != 0 || (p += 4, !par__pp_int(&p, &rank)) || *(p = par__pp_blank(p)) != ':')
            return par_pp_schedule_destroy(s), par__fail(PAR_EPARSE, "pipeline schedule, line %d: expected "
                                                                      "\"rank R: ...\"", line);
        p++;
        if (rank >= stages)
            return par_pp_schedule_destroy(s), par__fail(PAR_EPARSE, "pipeline schedule, line %d: rank %d of %d "
                                                                      "stages", line, rank, stages);
        for (k = 0;; k++) {
            char op[3] = {0, 0, 0};
            int o, mb, c, found = -1;
            p = par__pp_blank(p);
            if (!*p || *p == '\n') break;
            if (k && *p++ != ',')
                return par_pp_schedule_destroy(s), par__fail(PAR_EPARSE, "pipeline schedule, line %d: expected ',' "
                                                                          "between actions", line);
            p = par__pp_blank(p);
            for (o = 0; o < 2 && ((p[o] >= 'A' && p[o] <= 'Z')); o++) op[o] = p[o];
            for (o = 0; o < (int)PAR_PP_OP_COUNT; o++)
                if (!strcmp(op, par__pp_op_text[o])) found = o;
            if (found < 0 || (p += strlen(op), !par__pp_int(&p, &mb)) || !par__pp_int(&p, &c))
                return par_pp_schedule_destroy(s), par__fail(PAR_EPARSE, "pipeline schedule, line %d, action %d: "
                                                                          "expected OP MICRO_BATCH CHUNK with OP one "
                                                                          "of F B I W SA RA SG RG", line, k + 1);
            if (par_pp_schedule_append(s, rank, (par_pp_op)found, mb, c) != PAR_OK) {
                char why[256];
                par__copy_text(why, sizeof why, par_last_error());
                return par_pp_schedule_destroy(s), par__fail(PAR_EPARSE, "pipeline schedule, line %d, action %d: %s",
                                                             line, k + 1, why);
            }
        }
    }
    *out = s;
    return PAR_OK;
}

/* ---- checker ------------------------------------------------------------------------ */

typedef struct par__pp_msg {
    int mb, chunk;
    double t;
} par__pp_msg;

typedef struct par__pp_sim {
    const par_pp_schedule *s;
    int *pc;
    double *t, *busy;
    unsigned char *state;   /* per (rank-owned virtual stage, mb): bits below */
    int *inflight;
    par__pp_msg *q[2];      /* channels: [kind][src] FIFO, kind 0 activations to src+1, 1 gradients to src-1 */
    int *head[2], *tail[2], qcap;
} par__pp_sim;

enum { PAR__PP_FDONE = 1, PAR__PP_BDONE = 2, PAR__PP_IDONE = 4, PAR__PP_WDONE = 8, PAR__PP_RA = 16, PAR__PP_RG = 32 };

static unsigned char *par__pp_state(par__pp_sim *x, int r, int mb, int c) {
    return &x->state[((size_t)r * (size_t)x->s->v + (size_t)c) * (size_t)x->s->m + (size_t)mb];
}

/* The action as text, "RA 2 0". */
static void par__pp_action_text(const par_pp_action *a, char *buf, size_t n) {
    snprintf(buf, n, "%s %d %d", par__pp_op_text[a->op], a->micro_batch, a->chunk);
}

/* Per rank, what it ran and where it stopped. */
static void par__pp_grid(const par__pp_sim *x, char *grid, size_t size) {
    size_t used = 0;
    int r, k;
    if (!grid || !size) return;
    grid[0] = 0;
    for (r = 0; r < x->s->p && used < size; r++) {
        used += (size_t)snprintf(grid + used, size - used, "rank %d:", r);
        for (k = 0; k < x->s->count[r] && used < size; k++) {
            char a[32];
            par__pp_action_text(&x->s->a[r][k], a, sizeof a);
            used += (size_t)snprintf(grid + used, size - used, "%s%s%s", k == x->pc[r] ? " >>" : " ", a,
                                     k + 1 < x->s->count[r] ? "," : "");
            if (k == x->pc[r] + 2 && k + 1 < x->s->count[r]) {
                if (used < size) used += (size_t)snprintf(grid + used, size - used, " ...");
                break;
            }
        }
        if (used < size) used += (size_t)snprintf(grid + used, size - used, "%s\n", x->pc[r] >= x->s->count[r] ? " (done)" : "");
    }
}

static par_status par__pp_bad(par__pp_sim *x, int r, const char *fmt, ...) PAR__PRINTF(3, 4);
static par_status par__pp_bad(par__pp_sim *x, int r, const char *fmt, ...) {
    char why[256], a[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    par__pp_action_text(&x->s->a[r][x->pc[r]], a, sizeof a);
    return par__fail(PAR_EINVAL, "pipeline schedule: rank %d, step %d (%s): %s", r, x->pc[r], a, why);
}

/* Run rank r's next action if it can: 1 done, 0 blocked (waiting for a
   message), -1 invalid (error set). */
static int par__pp_step(par__pp_sim *x, int r) {
    const par_pp_schedule *s = x->s;
    const par_pp_action *a = &s->a[r][x->pc[r]];
    const int p = s->p, vs = a->chunk * p + r, last = p * s->v - 1;
    unsigned char *st = par__pp_state(x, r, a->micro_batch, a->chunk);
    const double cost[4] = {1.0, 2.0, 1.0, 1.0};
    if (a->op == PAR_PP_F) {
        if (*st & PAR__PP_FDONE) return par__pp_bad(x, r, "a second forward of this micro-batch chunk"), -1;
        if (vs > 0 && p > 1 && !(*st & PAR__PP_RA))
            return par__pp_bad(x, r, "its input activation has not been received (no RA before it)"), -1;
        if (vs > 0 && p == 1 && !(*par__pp_state(x, r, a->micro_batch, a->chunk - 1) & PAR__PP_FDONE))
            return par__pp_bad(x, r, "the forward of chunk %d (its input) has not run", a->chunk - 1), -1;
        *st |= PAR__PP_FDONE;
        if (++x->inflight[r] > x->inflight[p + r]) x->inflight[p + r] = x->inflight[r];
    } else if (a->op == PAR_PP_B || a->op == PAR_PP_I) {
        const int next_ok = vs == last || (p > 1 ? (*st & PAR__PP_RG) != 0
                                                 : (*par__pp_state(x, r, a->micro_batch, a->chunk + 1) &
                                                    (PAR__PP_BDONE | PAR__PP_IDONE)) != 0);
        if (*st & (PAR__PP_BDONE | PAR__PP_IDONE)) return par__pp_bad(x, r, "a second backward"), -1;
        if (!(*st & PAR__PP_FDONE)) return par__pp_bad(x, r, "backward before its forward"), -1;
        if (!next_ok) return par__pp_bad(x, r, "its output gradient has not been received (no RG before it)"), -1;
        *st |= a->op == PAR_PP_B ? PAR__PP_BDONE : PAR__PP_IDONE;
        if (a->op == PAR_PP_B) x->inflight[r]--;
    } else if (a->op == PAR_PP_W) {
        if (!(*st & PAR__PP_IDONE)) return par__pp_bad(x, r, "weight gradient before its input gradient (I)"), -1;
        if (*st & PAR__PP_WDONE) return par__pp_bad(x, r, "a second weight gradient"), -1;
        *st |= PAR__PP_WDONE;
        x->inflight[r]--;
    } else if (p == 1) {
        return par__pp_bad(x, r, "a send or receive in a one-stage schedule"), -1;
    } else if (a->op == PAR_PP_SEND_ACT || a->op == PAR_PP_SEND_GRAD) {
        const int g = a->op == PAR_PP_SEND_GRAD;
        par__pp_msg *m;
        if (!g && (vs == last || !(*st & PAR__PP_FDONE)))
            return par__pp_bad(x, r, vs == last ? "the last virtual stage has no next stage"
                                                : "sends an activation its forward has not produced"), -1;
        if (g && (vs == 0 || !(*st & (PAR__PP_BDONE | PAR__PP_IDONE))))
            return par__pp_bad(x, r, vs == 0 ? "the first virtual stage has no previous stage"
                                             : "sends a gradient its backward has not produced"), -1;
        m = &x->q[g][(size_t)r * (size_t)x->qcap + (size_t)x->tail[g][r]++];
        m->mb = a->micro_batch, m->chunk = a->chunk, m->t = x->t[r];
        x->pc[r]++;
        return 1;
    } else { /* receives */
        const int g = a->op == PAR_PP_RECV_GRAD, src = g ? (r + 1) % p : (r + p - 1) % p;
        const int want_chunk = g ? (r == p - 1 ? a->chunk + 1 : a->chunk) : (r == 0 ? a->chunk - 1 : a->chunk);
        const par__pp_msg *m;
        if ((!g && vs == 0) || (g && vs == last))
            return par__pp_bad(x, r, g ? "the last virtual stage receives no gradient"
                                       : "the first virtual stage receives no activation"), -1;
        if (x->head[g][src] == x->tail[g][src]) return 0; /* nothing sent yet: wait */
        m = &x->q[g][(size_t)src * (size_t)x->qcap + (size_t)x->head[g][src]];
        if (m->mb != a->micro_batch || m->chunk != want_chunk)
            return par__pp_bad(x, r, "the next %s from rank %d is for micro-batch %d chunk %d (sends and receives "
                                     "between two ranks must be in the same order)",
                               g ? "gradient" : "activation", src, m->mb, m->chunk), -1;
        x->head[g][src]++;
        if (m->t > x->t[r]) x->t[r] = m->t;
        *st |= g ? PAR__PP_RG : PAR__PP_RA;
        x->pc[r]++;
        return 1;
    }
    x->t[r] += cost[a->op], x->busy[r] += cost[a->op];
    x->pc[r]++;
    return 1;
}

static void par__pp_sim_free(par__pp_sim *x) {
    PARALLEL_FREE(x->pc), PARALLEL_FREE(x->t), PARALLEL_FREE(x->busy), PARALLEL_FREE(x->state);
    PARALLEL_FREE(x->inflight), PARALLEL_FREE(x->q[0]), PARALLEL_FREE(x->q[1]);
    PARALLEL_FREE(x->head[0]), PARALLEL_FREE(x->head[1]), PARALLEL_FREE(x->tail[0]), PARALLEL_FREE(x->tail[1]);
}

static par_status par__pp_sim_init(par__pp_sim *x, const par_pp_schedule *s) {
    const size_t p = (size_t)s->p;
    int r, g;
    memset(x, 0, sizeof *x);
    x->s = s;
    for (r = 0; r < s->p; r++) x->qcap = s->count[r] > x->qcap ? s->count[r] : x->qcap;
    x->pc = (int *)PARALLEL_MALLOC(sizeof(int) * p);
    x->t = (double *)PARALLEL_MALLOC(sizeof(double) * p);
    x->busy = (double *)PARALLEL_MALLOC(sizeof(double) * p);
    x->inflight = (int *)PARALLEL_MALLOC(sizeof(int) * 2 * p);
    x->state = (unsigned char *)PARALLEL_MALLOC(p * (size_t)s->v * (size_t)s->m);
    for (g = 0; g < 2; g++) {
        x->q[g] = (par__pp_msg *)PARALLEL_MALLOC(sizeof(par__pp_msg) * p * (size_t)(x->qcap ? x->qcap : 1));
        x->head[g] = (int *)PARALLEL_MALLOC(sizeof(int) * p), x->tail[g] = (int *)PARALLEL_MALLOC(sizeof(int) * p);
    }
    if (!x->pc || !x->t || !x->busy || !x->inflight || !x->state || !x->q[0] || !x->q[1] || !x->head[0] ||
        !x->head[1] || !x->tail[0] || !x->tail[1])
        return par__pp_sim_free(x), par__fail(PAR_ENOMEM, "pipeline checker: out of memory");
    memset(x->pc, 0, sizeof(int) * p), memset(x->inflight, 0, sizeof(int) * 2 * p);
    memset(x->state, 0, p * (size_t)s->v * (size_t)s->m);
    for (r = 0; r < s->p; r++) x->t[r] = x->busy[r] = 0;
    for (g = 0; g < 2; g++) memset(x->head[g], 0, sizeof(int) * p), memset(x->tail[g], 0, sizeof(int) * p);
    return PAR_OK;
}

/* After the run: everything done exactly once, nothing left in flight. */
static par_status par__pp_sim_finish(par__pp_sim *x) {
    const par_pp_schedule *s = x->s;
    int r, c, mb, g;
    for (r = 0; r < s->p; r++)
        for (c = 0; c < s->v; c++)
            for (mb = 0; mb < s->m; mb++) {
                const unsigned char st = *par__pp_state(x, r, mb, c);
                const char *missing = !(st & PAR__PP_FDONE) ? "forward (F)"
                                      : (st & PAR__PP_IDONE) && !(st & PAR__PP_WDONE) ? "weight gradient (W)"
                                      : !(st & (PAR__PP_BDONE | PAR__PP_IDONE)) ? "backward (B or I)" : NULL;
                if (missing)
                    return par__fail(PAR_EINVAL, "pipeline schedule: rank %d never runs the %s of micro-batch %d "
                                                 "chunk %d", r, missing, mb, c);
            }
    for (g = 0; g < 2; g++)
        for (r = 0; r < s->p; r++)
            if (x->head[g][r] != x->tail[g][r]) {
                const par__pp_msg *m = &x->q[g][(size_t)r * (size_t)x->qcap + (size_t)x->head[g][r]];
                return par__fail(PAR_EINVAL, "pipeline schedule: rank %d sends the %s of micro-batch %d chunk %d to "
                                             "rank %d, which never receives it (an unpaired send)", r,
                                 g ? "gradient" : "activation", m->mb, m->chunk, g ? (r + s->p - 1) % s->p : (r + 1) % s->p);
            }
    return PAR_OK;
}

PARALLEL_DEF par_status par_pp_schedule_check(const par_pp_schedule *s, par_pp_check *res, char *grid,
                                              size_t grid_size) {
    par__pp_sim x;
    par_status st = PAR_OK;
    int r, progress = 1, left;
    double makespan = 0, busy = 0;
    if (res) memset(res, 0, sizeof *res);
    if (grid && grid_size) grid[0] = 0;
    if (!s) return par__fail(PAR_EINVAL, "par_pp_schedule_check: NULL schedule");
    if ((double)s->p * s->v * s->m > (double)(1 << 28))
        return par__fail(PAR_ECAPACITY, "par_pp_schedule_check: %d stages x %d chunks x %d micro-batches is more than "
                                        "the checker tracks (2^28 micro-batch chunks)", s->p, s->v, s->m);
    PAR__CHECK(par__pp_sim_init(&x, s));
    while (progress && st == PAR_OK) {
        progress = 0;
        for (r = 0; r < s->p && st == PAR_OK; r++)
            while (x.pc[r] < s->count[r]) {
                const int k = par__pp_step(&x, r);
                if (k < 0) st = PAR_EINVAL;
                if (k <= 0) break;
                progress = 1;
            }
    }
    for (r = 0, left = 0; r < s->p; r++) left += x.pc[r] < s->count[r];
    if (st == PAR_OK && left) {
        char what[512];
        size_t used = 0;
        what[0] = 0;
        for (r = 0; r < s->p && used < sizeof what; r++)
            if (x.pc[r] < s->count[r]) {
                char a[32];
                par__pp_action_text(&s->a[r][x.pc[r]], a, sizeof a);
                used += (size_t)snprintf(what + used, sizeof what - used, "%srank %d step %d (%s)", used ? ", " : "",
                                         r, x.pc[r], a);
            }
        st = par__fail(PAR_EINVAL, "pipeline schedule: deadlock: every unfinished rank waits for a message no "
                                   "rank will send: %s", what);
    }
    if (st == PAR_OK) st = par__pp_sim_finish(&x);
    if (st != PAR_OK) {
        char msg[512];
        par__copy_text(msg, sizeof msg, par_last_error());
        par__pp_grid(&x, grid, grid_size);
        par__pp_sim_free(&x);
        return par__fail(st, "%s", msg);
    }
    for (r = 0; r < s->p; r++) makespan = x.t[r] > makespan ? x.t[r] : makespan, busy += x.busy[r];
    if (res) {
        res->makespan = makespan;
        res->bubble = makespan > 0 ? 1.0 - busy / ((double)s->p * makespan) : 0.0;
        for (r = 0; r < s->p; r++) {
            if (r < 64) res->peak_in_flight[r] = x.inflight[s->p + r];
            if (x.inflight[s->p + r] > res->max_in_flight) res->max_in_flight = x.inflight[s->p + r];
        }
    }
    par__pp_grid(&x, grid, grid_size);
    par__pp_sim_free(&x);
    return PAR_OK;
}

/* ---- executor ------------------------------------------------------------------------ */

static par_status par__pp_fail_at(int stage, int step, const par_pp_action *a, par_status st) {
    char why[300], txt[32];
    par__copy_text(why, sizeof why, par_last_error());
    par__pp_action_text(a, txt, sizeof txt);
    return par__fail(st, "par_pp_run: stage %d, step %d (%s): %s", stage, step, txt, why);
}

static void par__pp_span(struct par_trace *trace, const char *cat, double t0, const par_pp_action *a) {
#ifndef PARALLEL_NO_TRACE
    char name[PAR_TRACE_NAME_MAX];
    if (!trace) return;
    snprintf(name, sizeof name, "pp %s %d %d", par__pp_op_text[a->op], a->micro_batch, a->chunk);
    (void)par_trace_span(trace, name, cat, t0, par_trace_now_us());
#else
    (void)trace, (void)cat, (void)t0, (void)a;
#endif
}

static double par__pp_now(struct par_trace *trace) {
#ifndef PARALLEL_NO_TRACE
    return trace ? par_trace_now_us() : 0.0;
#else
    (void)trace;
    return 0.0;
#endif
}

/* One action of this stage. Sends are posted (their requests kept in reqs). */
static par_status par__pp_do(par_ctx *ctx, const par_pp_run_desc *d, const par_pp_action *a, int stage, int p,
                             par_comm_group *acts, par_comm_group *grads, par_request **req) {
    const par_pp_callbacks *cb = &d->callbacks;
    const double t0 = par__pp_now(d->trace);
    const int g = a->op == PAR_PP_SEND_GRAD || a->op == PAR_PP_RECV_GRAD;
    const int input = a->op == PAR_PP_RECV_ACT || a->op == PAR_PP_SEND_GRAD;
    float *buf = NULL;
    int64_t count = 0;
    switch (a->op) {
    case PAR_PP_F:
        PAR__CHECK(cb->forward(cb->user, a->micro_batch, a->chunk));
        par__pp_span(d->trace, "compute", t0, a);
        return PAR_OK;
    case PAR_PP_B:
    case PAR_PP_I:
    case PAR_PP_W:
        PAR__CHECK(cb->backward(cb->user, a->micro_batch, a->chunk, a->op));
        par__pp_span(d->trace, "compute", t0, a);
        return PAR_OK;
    default: break;
    }
    if (p == 1) return par__fail(PAR_EINVAL, "a send or receive in a one-stage schedule");
    PAR__CHECK(cb->buffer(cb->user, a->micro_batch, a->chunk, g, input, &buf, &count));
    if (!buf && count > 0) return par__fail(PAR_EINVAL, "the buffer callback gave NULL for %lld floats", (long long)count);
    /* activations go to stage + 1 on `acts` (member = stage); gradients to
       stage - 1 on `grads`, whose member list is reversed (member = p-1-stage) */
    switch (a->op) {
    case PAR_PP_SEND_ACT: return par_send(ctx, acts, buf, count, PAR_F32, (stage + 1) % p, req);
    case PAR_PP_SEND_GRAD: return par_send(ctx, grads, buf, count, PAR_F32, p - 1 - (stage + p - 1) % p, req);
    case PAR_PP_RECV_ACT:
        PAR__CHECK(par_recv(ctx, acts, buf, count, PAR_F32, (stage + p - 1) % p, NULL));
        break;
    default:
        PAR__CHECK(par_recv(ctx, grads, buf, count, PAR_F32, p - 1 - (stage + 1) % p, NULL));
        break;
    }
    par__pp_span(d->trace, "comm", t0, a);
    return PAR_OK;
}

PARALLEL_DEF par_status par_pp_run(par_ctx *ctx, const par_pp_run_desc *d) {
    const par_pp_schedule *s;
    par_comm_group *acts = NULL, *grads = NULL;
    par_request **reqs = NULL;
    par_status st = PAR_OK;
    int *ranks = NULL, n = 1, stage = 0, k, nreq = 0;
    if (!ctx || !d || !d->schedule) return par__fail(PAR_EINVAL, "par_pp_run: NULL argument");
    if (!d->callbacks.forward || !d->callbacks.backward || !d->callbacks.buffer)
        return par__fail(PAR_EINVAL, "par_pp_run: the forward, backward and buffer callbacks are required");
    s = d->schedule;
    ranks = (int *)par__ctx_malloc(ctx, sizeof(int) * 2 * (size_t)par_ctx_size(ctx));
    if (!ranks) return par__fail(PAR_ENOMEM, "par_pp_run: out of memory");
    st = par_mesh_group(par_ctx_mesh(ctx), par_ctx_rank(ctx), d->stage_dims, ranks, &n);
    if (st == PAR_OK && n != s->p)
        st = par__fail(PAR_EINVAL, "par_pp_run: the schedule has %d stages but the stage dims (mask 0x%x) hold %d "
                                   "ranks", s->p, (unsigned)d->stage_dims, n);
    for (k = 0; st == PAR_OK && k < n; k++)
        if (ranks[k] == par_ctx_rank(ctx)) stage = k;
    if (st == PAR_OK && n > 1) {
        for (k = 0; k < n; k++) ranks[n + k] = ranks[n - 1 - k];
        st = par_ctx_group_ranks(ctx, ranks, n, &acts);
        if (st == PAR_OK) st = par_ctx_group_ranks(ctx, ranks + n, n, &grads);
    }
    if (st == PAR_OK && s->count[stage]) {
        reqs = (par_request **)par__ctx_malloc(ctx, sizeof(par_request *) * (size_t)s->count[stage]);
        if (!reqs) st = par__fail(PAR_ENOMEM, "par_pp_run: out of memory");
    }
    for (k = 0; st == PAR_OK && k < s->count[stage]; k++) {
        const par_pp_action *a = &s->a[stage][k];
        par_request *req = NULL;
        st = par__pp_do(ctx, d, a, stage, n, acts, grads,
                        a->op == PAR_PP_SEND_ACT || a->op == PAR_PP_SEND_GRAD ? &req : NULL);
        if (st != PAR_OK) st = par__pp_fail_at(stage, k, a, st);
        if (req) reqs[nreq++] = req;
    }
    for (k = 0; k < nreq; k++) { /* every send completes before the host may touch its buffer */
        const par_status w = par_wait(ctx, reqs[k]);
        if (st == PAR_OK && w != PAR_OK) st = w;
    }
    par__ctx_free(ctx, reqs);
    par__ctx_free(ctx, ranks);
    return st;
}

// >>planner

static const char *const par__search_mode_names[PAR_SEARCH_MODE_COUNT] = {
    "dynamic_programming", "sharding_propagation", "recursive_programming"};

PARALLEL_DEF const char *par_search_mode_name(par_search_mode mode) {
    return (int)mode >= 0 && mode < PAR_SEARCH_MODE_COUNT ? par__search_mode_names[mode] : "?";
}

static int par__gr_ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        int x = *a >= 'A' && *a <= 'Z' ? *a + 32 : *a, y = *b >= 'A' && *b <= 'Z' ? *b + 32 : *b;
        if (x != y) return 0;
    }
    return *a == *b;
}

PARALLEL_DEF par_status par_search_mode_parse(const char *text, par_search_mode *mode) {
    static const char *const aliases[PAR_SEARCH_MODE_COUNT] = {"dp", "propagation", "rec"};
    int i;
    if (!text || !mode) return par__fail(PAR_EINVAL, "par_search_mode_parse: NULL argument");
    for (i = 0; i < PAR_SEARCH_MODE_COUNT; i++)
        if (par__gr_ieq(text, par__search_mode_names[i]) || par__gr_ieq(text, aliases[i])) {
            *mode = (par_search_mode)i;
            return PAR_OK;
        }
    return par__fail(PAR_EINVAL,
                     "unknown search_mode '%.40s' (expected dynamic_programming, sharding_propagation or "
                     "recursive_programming)",
                     text);
}

#define PAR__GR_NAME 32

typedef struct par__gr_op {
    char name[PAR__GR_NAME];
    par_op_desc desc;   /* desc.name points at name */
    int fixed;
    int ncand;
    par_strategy *cand; /* ncand */
    par_op_info *info;  /* ncand */
} par__gr_op;

typedef struct par__gr_edge {
    int from, out, to, in;
    double *cost; /* lazily: ncand(from) x ncand(to), row-major */
} par__gr_edge;

struct par_graph {
    par_graph_desc d;
    par__gr_op *ops;
    int nops, cap_ops;
    par__gr_edge *edges;
    int nedges, cap_edges;
    int *chosen;
    par_planner *planner;
};

static void *par__gr_alloc(const par_graph *g, size_t n) { return par__alloc_malloc(&g->d.allocator, n ? n : 1); }
static void par__gr_free(const par_graph *g, void *p) { par__alloc_free(&g->d.allocator, p); }

PARALLEL_DEF par_status par_graph_create(const par_graph_desc *desc, par_graph **graph) {
    par_graph *g;
    par_planner_desc pd;
    par_graph_desc d;
    par_status st;
    if (!graph) return par__fail(PAR_EINVAL, "par_graph_create: NULL argument");
    *graph = NULL;
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    PAR__CHECK(par__allocator_check(&d.allocator, "par_graph_desc.allocator"));
    if (d.devices < 0 || d.devices > PAR__MAX_DEVICES)
        return par__fail(PAR_EINVAL, "par_graph_desc.devices is %d; it must be 1 to %d", d.devices, PAR__MAX_DEVICES);
    if (d.max_candidates < 0) return par__fail(PAR_EINVAL, "par_graph_desc.max_candidates is negative");
    if (!(d.device_flops >= 0) || !(d.link_bandwidth >= 0) || !(d.link_latency >= 0) ||
        d.device_flops > 1e30 || d.link_bandwidth > 1e30 || d.link_latency > 1e30)
        return par__fail(PAR_EINVAL, "par_graph_desc: device_flops, link_bandwidth and link_latency must be finite "
                                     "and >= 0 (0 = default)");
    if (!d.max_candidates) d.max_candidates = 32;
    if (d.device_flops == 0) d.device_flops = 1e12;
    if (d.link_bandwidth == 0) d.link_bandwidth = 1e10;
    g = (par_graph *)par__alloc_malloc(&d.allocator, sizeof *g);
    if (!g) return par__fail(PAR_ENOMEM, "par_graph_create: out of memory");
    memset(g, 0, sizeof *g);
    g->d = d;
    memset(&pd, 0, sizeof pd);
    pd.allocator = d.allocator;
    if ((st = par_planner_create(&pd, &g->planner)) != PAR_OK) {
        par__alloc_free(&d.allocator, g);
        return st;
    }
    *graph = g;
    return PAR_OK;
}

PARALLEL_DEF void par_graph_destroy(par_graph *g) {
    int i;
    if (!g) return;
    for (i = 0; i < g->nops; i++) {
        par__gr_free(g, g->ops[i].cand);
        par__gr_free(g, g->ops[i].info);
    }
    for (i = 0; i < g->nedges; i++) par__gr_free(g, g->edges[i].cost);
    par__gr_free(g, g->ops);
    par__gr_free(g, g->edges);
    par__gr_free(g, g->chosen);
    par_planner_destroy(g->planner);
    par__alloc_free(&g->d.allocator, g);
}

static int par__gr_find(const par_graph *g, const char *name) {
    int i;
    for (i = 0; i < g->nops; i++)
        if (!strcmp(g->ops[i].name, name)) return i;
    return -1;
}

/* Grow an array of `elem`-byte items to hold `need`. */
static par_status par__gr_reserve(const par_graph *g, void **p, int *cap, int need, size_t elem) {
    void *q;
    int n;
    if (need <= *cap) return PAR_OK;
    n = *cap ? *cap * 2 : 16;
    while (n < need) n *= 2;
    q = par__alloc_realloc(&g->d.allocator, *p, (size_t)n * elem);
    if (!q) return par__fail(PAR_ENOMEM, "par_graph: out of memory");
    *p = q;
    *cap = n;
    return PAR_OK;
}

/* Fill the op's candidates: its fixed strategy, or the cheapest max_candidates. */
static par_status par__gr_candidates(par_graph *g, par__gr_op *o, const par_strategy *fixed) {
    int count = 0, n, k;
    par_status st;
    if (fixed) {
        n = 1;
    } else {
        st = par_op_strategies(&o->desc, g->d.devices, NULL, NULL, 0, &count);
        if (st != PAR_OK && st != PAR_ECAPACITY) return st;
        n = count < g->d.max_candidates ? count : g->d.max_candidates;
        if (n < 1) return par__fail(PAR_ESTRATEGY, "op '%s': no valid strategy on %d devices", o->name, g->d.devices);
    }
    o->cand = (par_strategy *)par__gr_alloc(g, (size_t)n * sizeof *o->cand);
    o->info = (par_op_info *)par__gr_alloc(g, (size_t)n * sizeof *o->info);
    if (!o->cand || !o->info) return par__fail(PAR_ENOMEM, "par_graph_add_op: out of memory");
    if (fixed) {
        o->cand[0] = *fixed;
    } else {
        st = par_op_strategies(&o->desc, g->d.devices, o->cand, NULL, n, &count);
        if (st != PAR_OK && st != PAR_ECAPACITY) return st;
    }
    for (k = 0; k < n; k++)
        if ((st = par_op_infer(&o->desc, &o->cand[k], g->d.devices, &o->info[k])) != PAR_OK) return st;
    o->ncand = n;
    o->fixed = fixed != NULL;
    return PAR_OK;
}

PARALLEL_DEF par_status par_graph_add_op(par_graph *g, const par_op_desc *op, const par_strategy *fixed, int *id) {
    par__gr_op *o;
    char name[PAR__GR_NAME];
    par_status st;
    if (!g || !op) return par__fail(PAR_EINVAL, "par_graph_add_op: NULL argument");
    if (g->d.devices < 1) return par__fail(PAR_EINVAL, "par_graph_add_op: the graph has no device count (devices)");
    if (op->name && strlen(op->name) >= PAR__GR_NAME)
        return par__fail(PAR_EINVAL, "op name '%.40s...' is longer than %d bytes", op->name, PAR__GR_NAME - 1);
    if (op->name) par__copy_text(name, sizeof name, op->name);
    else snprintf(name, sizeof name, "op%d", g->nops);
    if (!name[0] || par__gr_find(g, name) >= 0)
        return par__fail(PAR_EINVAL, "op name '%s' is %s", name, name[0] ? "used twice" : "empty");
    PAR__CHECK(par__gr_reserve(g, (void **)&g->ops, &g->cap_ops, g->nops + 1, sizeof *g->ops));
    o = &g->ops[g->nops];
    memset(o, 0, sizeof *o);
    par__copy_text(o->name, sizeof o->name, name);
    o->desc = *op;
    o->desc.name = o->name;
    if (o->desc.device_flops <= 0) o->desc.device_flops = g->d.device_flops;
    if (o->desc.link_bandwidth <= 0) o->desc.link_bandwidth = g->d.link_bandwidth;
    if ((st = par__gr_candidates(g, o, fixed)) != PAR_OK) {
        par__gr_free(g, o->cand);
        par__gr_free(g, o->info);
        return st;
    }
    if (id) *id = g->nops;
    g->nops++;
    par__gr_free(g, g->chosen);
    g->chosen = NULL;
    return PAR_OK;
}

static int64_t par__gr_numel(const par_layout *l) {
    int64_t n = 1;
    int d;
    for (d = 0; d < l->ndim; d++) n *= l->shape[d];
    return n;
}

PARALLEL_DEF par_status par_graph_add_edge(par_graph *g, int from, int out, int to, int in) {
    const par__gr_op *a, *b;
    int e;
    if (!g) return par__fail(PAR_EINVAL, "par_graph_add_edge: NULL graph");
    if (from < 0 || from >= g->nops || to < 0 || to >= g->nops)
        return par__fail(PAR_EINVAL, "dangling edge %d.%d -> %d.%d: the graph has ops 0 to %d", from, out, to, in,
                         g->nops - 1);
    a = &g->ops[from];
    b = &g->ops[to];
    if (out < 0 || out >= a->info[0].num_outputs)
        return par__fail(PAR_EINVAL, "dangling edge %s.%d -> %s.%d: op '%s' has %d output(s)", a->name, out, b->name,
                         in, a->name, a->info[0].num_outputs);
    if (in < 0 || in >= b->info[0].num_inputs)
        return par__fail(PAR_EINVAL, "dangling edge %s.%d -> %s.%d: op '%s' has %d input(s)", a->name, out, b->name,
                         in, b->name, b->info[0].num_inputs);
    for (e = 0; e < g->nedges; e++)
        if (g->edges[e].to == to && g->edges[e].in == in)
            return par__fail(PAR_EINVAL, "edge %s.%d -> %s.%d: input %d of '%s' is already fed by '%s'", a->name, out,
                             b->name, in, in, b->name, g->ops[g->edges[e].from].name);
    if (par__gr_numel(&a->info[0].outputs[out]) != par__gr_numel(&b->info[0].inputs[in]))
        return par__fail(PAR_EINVAL, "edge %s.%d -> %s.%d: the output has %lld elements, the input %lld", a->name,
                         out, b->name, in, (long long)par__gr_numel(&a->info[0].outputs[out]),
                         (long long)par__gr_numel(&b->info[0].inputs[in]));
    PAR__CHECK(par__gr_reserve(g, (void **)&g->edges, &g->cap_edges, g->nedges + 1, sizeof *g->edges));
    g->edges[g->nedges].from = from;
    g->edges[g->nedges].out = out;
    g->edges[g->nedges].to = to;
    g->edges[g->nedges].in = in;
    g->edges[g->nedges].cost = NULL;
    g->nedges++;
    return PAR_OK;
}

PARALLEL_DEF int par_graph_num_ops(const par_graph *g) { return g ? g->nops : 0; }
PARALLEL_DEF int par_graph_num_edges(const par_graph *g) { return g ? g->nedges : 0; }
PARALLEL_DEF const char *par_graph_op_name(const par_graph *g, int op) {
    return g && op >= 0 && op < g->nops ? g->ops[op].name : "?";
}
PARALLEL_DEF int par_graph_num_candidates(const par_graph *g, int op) {
    return g && op >= 0 && op < g->nops ? g->ops[op].ncand : 0;
}

PARALLEL_DEF par_status par_graph_candidate(const par_graph *g, int op, int k, par_strategy *strategy,
                                            par_op_cost *cost) {
    if (!g || op < 0 || op >= g->nops || k < 0 || k >= g->ops[op].ncand)
        return par__fail(PAR_EINVAL, "par_graph_candidate: no candidate %d of op %d", k, op);
    if (strategy) *strategy = g->ops[op].cand[k];
    if (cost) *cost = g->ops[op].info[k].cost;
    return PAR_OK;
}

PARALLEL_DEF par_status par_graph_edge(const par_graph *g, int e, int *from, int *out, int *to, int *in) {
    if (!g || e < 0 || e >= g->nedges) return par__fail(PAR_EINVAL, "par_graph_edge: no edge %d", e);
    if (from) *from = g->edges[e].from;
    if (out) *out = g->edges[e].out;
    if (to) *to = g->edges[e].to;
    if (in) *in = g->edges[e].in;
    return PAR_OK;
}

/* ---- edge costs: layouts of two device matrices on one mesh ----------------------- */

/* Every op's device matrix holds the same devices in row-major order, so
   splitting each axis into its prime factors (ascending) keeps the ranks in
   place: [2,4] and [4,2] both become [2,2,2], and a layout on either becomes a
   layout on that common mesh. Returns 0 when the factors do not fit
   PARALLEL_MAX_DIMS. */
static int par__gr_expand(const par_layout *in, par_layout *outl) {
    int start[PARALLEL_MAX_DIMS], count[PARALLEL_MAX_DIMS], dims[PARALLEL_MAX_DIMS];
    int n = in->mesh.ndim, e = 0, i, t, c, v, f;
    par_layout o;
    for (i = 0; i < n; i++) {
        int d = in->mesh.dims[i];
        start[i] = e;
        for (f = 2; d > 1; f++)
            while (d % f == 0) {
                if (e == PARALLEL_MAX_DIMS) return 0;
                dims[e++] = f;
                d /= f;
            }
        count[i] = e - start[i];
    }
    memset(&o, 0, sizeof o);
    if (e == 0) dims[e++] = 1;
    o.mesh.ndim = e;
    for (i = 0; i < e; i++) o.mesh.dims[i] = dims[i];
    o.ndim = in->ndim;
    for (t = 0; t < in->ndim; t++) {
        o.shape[t] = in->shape[t];
        for (c = 0; c < in->map.count[t]; c++) {
            i = n - 1 - in->map.dev[t][c]; /* the original axis, major first */
            for (v = 0; v < count[i]; v++) {
                if (o.map.count[t] == PARALLEL_MAX_DIMS) return 0;
                o.map.dev[t][o.map.count[t]++] = (int8_t)(e - 1 - (start[i] + v));
            }
        }
    }
    for (v = 0; v < n; v++)
        if (in->map.partial >> v & 1u) {
            i = n - 1 - v;
            for (c = 0; c < count[i]; c++) o.map.partial |= 1u << (e - 1 - (start[i] + c));
        }
    *outl = o;
    return 1;
}

/* The producer's output after its forward communication: an all-reduce
   leaves no partial sums (a reduce-scatter output is already scattered). */
static par_layout par__gr_produced(const par_op_info *info, int out) {
    par_layout l = info->outputs[out];
    int i;
    for (i = 0; i < info->num_forward; i++) l.map.partial &= ~info->forward[i].dev_mask;
    return l;
}

static par_status par__gr_plan_cost(par_graph *g, const par_layout *from, const par_layout *to, int elem,
                                    double *cost) {
    par_cost_model cm;
    par_plan plan;
    par_status st;
    int v;
    memset(&cm, 0, sizeof cm);
    for (v = 0; v < PARALLEL_MAX_DIMS; v++) {
        cm.link[v].latency = g->d.link_latency;
        cm.link[v].bandwidth = g->d.link_bandwidth;
    }
    cm.elem_size = elem;
    if ((st = par_planner_plan(g->planner, from, to, &cm, &plan)) != PAR_OK) return st;
    *cost = plan.cost;
    return PAR_OK;
}

/* Cost of edge e for candidates (ka, kb): the optimal plan on the common mesh;
   when the device matrices share no mesh (e.g. [2,3] and [3,2]) or the planner
   cannot bridge the shapes, gather the producer's output to every device
   (a local split then gives any input layout). */
static par_status par__gr_edge_cost(par_graph *g, const par__gr_edge *ed, int ka, int kb, double *cost) {
    const par__gr_op *a = &g->ops[ed->from], *b = &g->ops[ed->to];
    par_layout from = par__gr_produced(&a->info[ka], ed->out), to = b->info[kb].inputs[ed->in], fe, te, full;
    int elem = (int)par_dtype_size(a->desc.dtype);
    if (elem <= 0) elem = 4;
    if (par__gr_expand(&from, &fe) && par__gr_expand(&to, &te) && par_mesh_size(&fe.mesh) == par_mesh_size(&te.mesh) &&
        fe.mesh.ndim == te.mesh.ndim && !memcmp(fe.mesh.dims, te.mesh.dims, sizeof(int) * (size_t)fe.mesh.ndim) &&
        par__gr_plan_cost(g, &fe, &te, elem, cost) == PAR_OK)
        return PAR_OK;
    full = from;
    memset(&full.map, 0, sizeof full.map);
    if (par__gr_plan_cost(g, &from, &full, elem, cost) == PAR_OK) return PAR_OK;
    return par__fail(PAR_EUNSUPPORTED, "edge %s.%d -> %s.%d: no redistribution between candidates %d and %d",
                     a->name, ed->out, b->name, ed->in, ka, kb);
}

/* Every edge's cost table (once per graph). */
static par_status par__gr_edge_tables(par_graph *g) {
    int e, ka, kb;
    for (e = 0; e < g->nedges; e++) {
        par__gr_edge *ed = &g->edges[e];
        const int na = g->ops[ed->from].ncand, nb = g->ops[ed->to].ncand;
        if (ed->cost) continue;
        ed->cost = (double *)par__gr_alloc(g, (size_t)na * (size_t)nb * sizeof(double));
        if (!ed->cost) return par__fail(PAR_ENOMEM, "par_graph_search: out of memory");
        for (ka = 0; ka < na; ka++)
            for (kb = 0; kb < nb; kb++) {
                par_status st = par__gr_edge_cost(g, ed, ka, kb, &ed->cost[ka * nb + kb]);
                if (st != PAR_OK) {
                    par__gr_free(g, ed->cost);
                    ed->cost = NULL;
                    return st;
                }
            }
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_graph_edge_cost(par_graph *g, int e, int ka, int kb, double *cost) {
    const par__gr_edge *ed;
    if (!g || !cost || e < 0 || e >= g->nedges) return par__fail(PAR_EINVAL, "par_graph_edge_cost: no edge %d", e);
    ed = &g->edges[e];
    if (ka < 0 || ka >= g->ops[ed->from].ncand || kb < 0 || kb >= g->ops[ed->to].ncand)
        return par__fail(PAR_EINVAL, "par_graph_edge_cost: no candidates (%d, %d) on edge %d", ka, kb, e);
    PAR__CHECK(par__gr_edge_tables(g));
    *cost = ed->cost[ka * g->ops[ed->to].ncand + kb];
    return PAR_OK;
}

static double par__gr_ecost(const par_graph *g, const par__gr_edge *ed, int ka, int kb) {
    return ed->cost[ka * g->ops[ed->to].ncand + kb];
}

/* ---- search --------------------------------------------------------------------- */

/* Kahn's order; a cycle is PAR_EINVAL naming an op on it. */
static par_status par__gr_topo(const par_graph *g, int *order, int *indeg) {
    int i, e, head = 0, tail = 0;
    for (i = 0; i < g->nops; i++) indeg[i] = 0;
    for (e = 0; e < g->nedges; e++) indeg[g->edges[e].to]++;
    for (i = 0; i < g->nops; i++)
        if (!indeg[i]) order[tail++] = i;
    while (head < tail) {
        const int x = order[head++];
        for (e = 0; e < g->nedges; e++)
            if (g->edges[e].from == x && --indeg[g->edges[e].to] == 0) order[tail++] = g->edges[e].to;
    }
    if (tail < g->nops) {
        for (i = 0; i < g->nops && !indeg[i]; i++) {
        }
        /* walk back along unfinished inputs until an op repeats: it is on a cycle */
        {
            int steps, x = i;
            for (steps = 0; steps < g->nops; steps++)
                for (e = 0; e < g->nedges; e++)
                    if (g->edges[e].to == x && indeg[g->edges[e].from]) {
                        x = g->edges[e].from;
                        break;
                    }
            return par__fail(PAR_EINVAL, "the graph has a cycle through op '%s': an op's input may not depend on "
                                         "its own output",
                             g->ops[x].name);
        }
    }
    return PAR_OK;
}

typedef struct par__gr_ctx {
    par_graph *g;
    int *order, *pos, *scratch;
    double *minmem, *suffix_min; /* per op; suffix over the order */
    double cap;
} par__gr_ctx;

/* Memory the smallest candidate of each op needs. */
static double par__gr_min_mem(const par__gr_op *o) {
    double m = o->info[0].cost.memory_bytes;
    int k;
    for (k = 1; k < o->ncand; k++)
        if (o->info[k].cost.memory_bytes < m) m = o->info[k].cost.memory_bytes;
    return m;
}

/* A point of the DP: (memory, cost) reached with op order[step] at `strat`,
   coming from point `parent` of the previous step, in new state `state`. */
typedef struct par__gr_point {
    double mem, cost;
    int64_t parent;
    int strat, state;
} par__gr_point;

static int par__gr_point_cmp(const void *pa, const void *pb) {
    const par__gr_point *a = (const par__gr_point *)pa, *b = (const par__gr_point *)pb;
    if (a->state != b->state) return a->state < b->state ? -1 : 1;
    if (a->mem != b->mem) return a->mem < b->mem ? -1 : 1;
    if (a->cost != b->cost) return a->cost < b->cost ? -1 : 1;
    return 0;
}

#define PAR__GR_MAX_POINTS (1 << 22)

typedef struct par__gr_dp {
    int *frontier, nf;       /* ops whose strategies later edges still need (by topological position) */
    int *keys;               /* states x nf strategies */
    int nstates, cap_states;
    int *hash;               /* open addressing over state indices, -1 empty */
    int hash_size;
    par__gr_point *pts;      /* this step's points, grouped by state after pruning */
    int64_t npts, cap_pts;
    int64_t *first;          /* per state: its first point in pts (nstates + 1) */
} par__gr_dp;

static uint64_t par__gr_key_hash(const int *key, int n) {
    uint64_t h = 1469598103934665603ull;
    int i;
    for (i = 0; i < n; i++) h = (h ^ (uint64_t)(unsigned)key[i]) * 1099511628211ull;
    return h;
}

/* The state with this key, added if new; -1 out of memory. */
static int par__gr_state(par_graph *g, par__gr_dp *s, const int *key) {
    uint64_t h;
    int i;
    if (2 * (s->nstates + 1) > s->hash_size) {
        int n = s->hash_size ? s->hash_size * 2 : 64, j;
        int *nh = (int *)par__gr_alloc(g, (size_t)n * sizeof(int));
        if (!nh) return -1;
        for (j = 0; j < n; j++) nh[j] = -1;
        for (j = 0; j < s->nstates; j++) {
            uint64_t hh = par__gr_key_hash(s->keys + (size_t)j * (size_t)s->nf, s->nf) & (uint64_t)(n - 1);
            while (nh[hh] >= 0) hh = (hh + 1) & (uint64_t)(n - 1);
            nh[hh] = j;
        }
        par__gr_free(g, s->hash);
        s->hash = nh;
        s->hash_size = n;
    }
    h = par__gr_key_hash(key, s->nf) & (uint64_t)(s->hash_size - 1);
    for (; s->hash[h] >= 0; h = (h + 1) & (uint64_t)(s->hash_size - 1))
        if (!memcmp(s->keys + (size_t)s->hash[h] * (size_t)s->nf, key, (size_t)s->nf * sizeof(int)))
            return s->hash[h];
    if (s->nstates == s->cap_states) {
        int n = s->cap_states ? s->cap_states * 2 : 64;
        int *nk = (int *)par__alloc_realloc(&g->d.allocator, s->keys, (size_t)n * (size_t)(s->nf ? s->nf : 1) * sizeof(int));
        if (!nk) return -1;
        s->keys = nk;
        s->cap_states = n;
    }
    i = s->nstates++;
    if (s->nf) memcpy(s->keys + (size_t)i * (size_t)s->nf, key, (size_t)s->nf * sizeof(int));
    s->hash[h] = i;
    return i;
}

static void par__gr_dp_free(par_graph *g, par__gr_dp *s) {
    par__gr_free(g, s->frontier);
    par__gr_free(g, s->keys);
    par__gr_free(g, s->hash);
    par__gr_free(g, s->pts);
    par__gr_free(g, s->first);
    memset(s, 0, sizeof *s);
}

/* Sort the step's points by state, drop the dominated ones and index them. */
static par_status par__gr_dp_prune(par_graph *g, par__gr_dp *s) {
    int64_t i, n = 0;
    int st = -1;
    double best = 0;
    qsort(s->pts, (size_t)s->npts, sizeof *s->pts, par__gr_point_cmp);
    for (i = 0; i < s->npts; i++) {
        const par__gr_point p = s->pts[i];
        if (p.state != st) st = p.state, best = p.cost + 1.0;
        if (p.cost < best) { /* less memory came first: keep only what is also cheaper */
            s->pts[n++] = p;
            best = p.cost;
        }
    }
    s->npts = n;
    s->first = (int64_t *)par__gr_alloc(g, (size_t)(s->nstates + 1) * sizeof(int64_t));
    if (!s->first) return par__fail(PAR_ENOMEM, "par_graph_search: out of memory");
    for (i = 0; i <= s->nstates; i++) s->first[i] = n;
    for (i = n - 1; i >= 0; i--) s->first[s->pts[i].state] = i;
    for (i = s->nstates - 1; i >= 0; i--)
        if (s->first[i] > s->first[i + 1]) s->first[i] = s->first[i + 1];
    return PAR_OK;
}

/* Last topological position that reads op x's output (its own if none). */
static int par__gr_last_use(const par__gr_ctx *c, int x) {
    int e, last = c->pos[x];
    for (e = 0; e < c->g->nedges; e++)
        if (c->g->edges[e].from == x && c->pos[c->g->edges[e].to] > last) last = c->pos[c->g->edges[e].to];
    return last;
}

static par_status par__gr_search_dp(par__gr_ctx *c, par_graph_result *res) {
    par_graph *g = c->g;
    par__gr_dp prev, cur;
    par__gr_point **hist = NULL, *init = NULL; /* hist[t]: step t's points, for the walk back */
    int t, e, i, k, s, nf;
    int *key = NULL, *lastuse = NULL;
    par_status st = PAR_OK;
    int64_t total = 0, p, bestp = -1;
    memset(&prev, 0, sizeof prev);
    memset(&cur, 0, sizeof cur);
    hist = (par__gr_point **)par__gr_alloc(g, (size_t)g->nops * sizeof *hist);
    key = (int *)par__gr_alloc(g, (size_t)g->nops * sizeof(int));
    lastuse = (int *)par__gr_alloc(g, (size_t)g->nops * sizeof(int));
    init = (par__gr_point *)par__gr_alloc(g, sizeof *init);
    prev.first = (int64_t *)par__gr_alloc(g, 2 * sizeof(int64_t));
    if (hist) memset(hist, 0, (size_t)g->nops * sizeof *hist);
    if (!hist || !key || !lastuse || !init || !prev.first) {
        st = par__fail(PAR_ENOMEM, "par_graph_search: out of memory");
        goto done;
    }
    for (i = 0; i < g->nops; i++) lastuse[i] = par__gr_last_use(c, i);
    /* before the first op: one empty state holding the point (0, 0) */
    memset(init, 0, sizeof *init);
    init->parent = -1;
    prev.pts = init;
    prev.npts = 1;
    prev.nstates = 1;
    prev.first[0] = 0, prev.first[1] = 1;
    for (t = 0; t < g->nops; t++) {
        const int x = c->order[t];
        const par__gr_op *o = &g->ops[x];
        /* the new frontier: the old one and x, less the ops nothing after t reads */
        cur.frontier = (int *)par__gr_alloc(g, (size_t)(prev.nf + 1) * sizeof(int));
        if (!cur.frontier) {
            st = par__fail(PAR_ENOMEM, "par_graph_search: out of memory");
            goto done;
        }
        for (nf = 0, i = 0; i < prev.nf; i++)
            if (lastuse[prev.frontier[i]] > t) cur.frontier[nf++] = prev.frontier[i];
        if (lastuse[x] > t) cur.frontier[nf++] = x;
        cur.nf = nf;
        for (s = 0; s < prev.nstates; s++) {
            const int *pk = prev.keys ? prev.keys + (size_t)s * (size_t)prev.nf : NULL;
            if (prev.first[s] == prev.first[s + 1]) continue;
            for (k = 0; k < o->ncand; k++) {
                double add = o->info[k].cost.total, m = o->info[k].cost.memory_bytes;
                int ns = -2, j;
                for (e = 0; e < g->nedges; e++) {
                    const par__gr_edge *ed = &g->edges[e];
                    if (ed->to != x) continue;
                    for (j = 0; j < prev.nf && prev.frontier[j] != ed->from; j++) {
                    }
                    add += par__gr_ecost(g, ed, pk[j], k);
                }
                for (j = 0, i = 0; i < prev.nf; i++)
                    if (lastuse[prev.frontier[i]] > t) key[j++] = pk[i];
                if (lastuse[x] > t) key[j++] = k;
                for (p = prev.first[s]; p < prev.first[s + 1]; p++) {
                    const par__gr_point *q = &prev.pts[p];
                    par__gr_point np;
                    /* prune: the ops after t could not fit even with their smallest candidates */
                    if (c->cap > 0 && q->mem + m + c->suffix_min[t + 1] > c->cap) continue;
                    if (ns == -2 && (ns = par__gr_state(g, &cur, key)) < 0) {
                        st = par__fail(PAR_ENOMEM, "par_graph_search: out of memory");
                        goto done;
                    }
                    if (cur.npts == cur.cap_pts) {
                        int64_t n = cur.cap_pts ? cur.cap_pts * 2 : 256;
                        par__gr_point *grown;
                        if (n > PAR__GR_MAX_POINTS) {
                            st = par__fail(PAR_ECAPACITY,
                                           "dynamic_programming: more than %d Pareto points at op '%s' (the graph is "
                                           "too wide); use sharding_propagation or recursive_programming",
                                           PAR__GR_MAX_POINTS, o->name);
                            goto done;
                        }
                        grown = (par__gr_point *)par__alloc_realloc(&g->d.allocator, cur.pts, (size_t)n * sizeof *grown);
                        if (!grown) {
                            st = par__fail(PAR_ENOMEM, "par_graph_search: out of memory");
                            goto done;
                        }
                        cur.pts = grown;
                        cur.cap_pts = n;
                    }
                    np.mem = q->mem + m;
                    np.cost = q->cost + add;
                    np.parent = p;
                    np.strat = k;
                    np.state = ns;
                    cur.pts[cur.npts++] = np;
                }
            }
        }
        if ((st = par__gr_dp_prune(g, &cur)) != PAR_OK) goto done;
        total += cur.npts;
        hist[t] = cur.pts; /* hist owns the points from here on */
        prev.pts = NULL;
        par__gr_dp_free(g, &prev);
        prev = cur;
        memset(&cur, 0, sizeof cur);
        if (prev.npts == 0) break;
    }
    if (prev.npts == 0) {
        st = PAR_ECAPACITY; /* the caller words it: nothing fits */
        goto done;
    }
    for (p = 0; p < prev.npts; p++)
        if (bestp < 0 || prev.pts[p].cost < prev.pts[bestp].cost) bestp = p;
    res->states = total;
    for (t = g->nops - 1, p = bestp; t >= 0; t--) {
        g->chosen[c->order[t]] = hist[t][p].strat;
        p = hist[t][p].parent;
    }
done:
    prev.pts = NULL; /* init's or a hist entry */
    par__gr_dp_free(g, &prev);
    par__gr_dp_free(g, &cur);
    for (t = 0; hist && t < g->nops; t++) par__gr_free(g, hist[t]);
    par__gr_free(g, hist);
    par__gr_free(g, init);
    par__gr_free(g, key);
    par__gr_free(g, lastuse);
    return st;
}

/* Whether op x may take candidate k with `used` bytes placed and `open` the
   smallest memory of the other ops still open. */
static int par__gr_fits(const par__gr_ctx *c, int x, int k, double used, double open) {
    return c->cap <= 0 || used + c->g->ops[x].info[k].cost.memory_bytes + open <= c->cap;
}

/* The candidate of op x cheapest with its placed neighbours (inputs only when
   `inputs_only`), among those that fit. */
static int par__gr_pick(const par__gr_ctx *c, int x, int inputs_only, double used, double open) {
    const par_graph *g = c->g;
    const par__gr_op *o = &g->ops[x];
    double best = 0;
    int k, e, bk = -1;
    for (k = 0; k < o->ncand; k++) {
        double v = o->info[k].cost.total;
        if (!par__gr_fits(c, x, k, used, open)) continue;
        for (e = 0; e < g->nedges; e++) {
            const par__gr_edge *ed = &g->edges[e];
            if (ed->to == x && g->chosen[ed->from] >= 0) v += par__gr_ecost(g, ed, g->chosen[ed->from], k);
            if (!inputs_only && ed->from == x && g->chosen[ed->to] >= 0) v += par__gr_ecost(g, ed, k, g->chosen[ed->to]);
        }
        if (bk < 0 || v < best) best = v, bk = k;
    }
    return bk;
}

/* Sharding propagation: fixed ops first, then breadth-first along edges. */
static void par__gr_search_propagate(par__gr_ctx *c, double open) {
    par_graph *g = c->g;
    int *queue = c->scratch, head = 0, tail = 0, i, e;
    double used = 0;
    for (i = 0; i < g->nops; i++)
        if (g->ops[i].fixed) {
            g->chosen[i] = 0;
            used += g->ops[i].info[0].cost.memory_bytes;
            open -= c->minmem[i];
            queue[tail++] = i;
        }
    for (;;) {
        while (head < tail) {
            const int y = queue[head++];
            for (e = 0; e < g->nedges; e++) {
                const par__gr_edge *ed = &g->edges[e];
                const int z = ed->from == y ? ed->to : ed->to == y ? ed->from : -1;
                if (z < 0 || g->chosen[z] >= 0) continue;
                open -= c->minmem[z];
                g->chosen[z] = par__gr_pick(c, z, 0, used, open);
                used += g->ops[z].info[g->chosen[z]].cost.memory_bytes;
                queue[tail++] = z;
            }
        }
        if (tail == g->nops) return;
        { /* a part nothing fixed: seed it at its most expensive op, placed alone */
            int seed = -1;
            for (i = 0; i < g->nops; i++)
                if (g->chosen[i] < 0 && (seed < 0 || g->ops[i].info[0].cost.total > g->ops[seed].info[0].cost.total))
                    seed = i;
            open -= c->minmem[seed];
            g->chosen[seed] = par__gr_pick(c, seed, 0, used, open);
            used += g->ops[seed].info[g->chosen[seed]].cost.memory_bytes;
            queue[tail++] = seed;
        }
    }
}

/* The fast heuristic: one pass in topological order. */
static void par__gr_search_greedy(par__gr_ctx *c, double open) {
    par_graph *g = c->g;
    double used = 0;
    int t;
    for (t = 0; t < g->nops; t++) {
        const int x = c->order[t];
        open -= c->minmem[x];
        g->chosen[x] = par__gr_pick(c, x, 1, used, open);
        used += g->ops[x].info[g->chosen[x]].cost.memory_bytes;
    }
}

static void par__gr_totals(const par_graph *g, par_graph_result *r) {
    int i, e;
    r->cost = r->compute = r->comm = r->redistribution = r->memory_bytes = 0;
    for (i = 0; i < g->nops; i++) {
        const par__gr_op *o = &g->ops[i];
        const par_op_cost *k = &o->info[g->chosen[i]].cost;
        r->compute += k->compute_flops / o->desc.device_flops;
        r->comm += k->comm_bytes / o->desc.link_bandwidth;
        r->cost += k->total;
        r->memory_bytes += k->memory_bytes;
    }
    for (e = 0; e < g->nedges; e++) {
        const par__gr_edge *ed = &g->edges[e];
        r->redistribution += par__gr_ecost(g, ed, g->chosen[ed->from], g->chosen[ed->to]);
    }
    r->cost += r->redistribution;
}

PARALLEL_DEF par_status par_graph_search(par_graph *g, par_search_mode mode, double memory_cap,
                                         par_graph_result *result) {
    par__gr_ctx c;
    par_graph_result r;
    double smallest = 0;
    par_status st = PAR_OK;
    int i, t;
    if (!g || !result) return par__fail(PAR_EINVAL, "par_graph_search: NULL argument");
    if ((int)mode < 0 || mode >= PAR_SEARCH_MODE_COUNT)
        return par__fail(PAR_EINVAL, "par_graph_search: unknown search_mode %d (expected dynamic_programming, "
                                     "sharding_propagation or recursive_programming)",
                         (int)mode);
    if (!(memory_cap == memory_cap)) return par__fail(PAR_EINVAL, "par_graph_search: the memory cap is NaN");
    if (g->nops == 0) return par__fail(PAR_EINVAL, "par_graph_search: the graph has no ops");
    memset(&c, 0, sizeof c);
    memset(&r, 0, sizeof r);
    c.g = g;
    c.cap = memory_cap;
    par__gr_free(g, g->chosen);
    g->chosen = (int *)par__gr_alloc(g, (size_t)g->nops * sizeof(int));
    c.order = (int *)par__gr_alloc(g, (size_t)g->nops * sizeof(int));
    c.pos = (int *)par__gr_alloc(g, (size_t)g->nops * sizeof(int));
    c.scratch = (int *)par__gr_alloc(g, (size_t)g->nops * sizeof(int));
    c.minmem = (double *)par__gr_alloc(g, (size_t)g->nops * sizeof(double));
    c.suffix_min = (double *)par__gr_alloc(g, (size_t)(g->nops + 1) * sizeof(double));
    if (!g->chosen || !c.order || !c.pos || !c.scratch || !c.minmem || !c.suffix_min) {
        st = par__fail(PAR_ENOMEM, "par_graph_search: out of memory");
        goto done;
    }
    for (i = 0; i < g->nops; i++) g->chosen[i] = -1;
    if ((st = par__gr_topo(g, c.order, c.scratch)) != PAR_OK) goto done;
    if ((st = par__gr_edge_tables(g)) != PAR_OK) goto done;
    for (t = 0; t < g->nops; t++) c.pos[c.order[t]] = t;
    for (i = 0; i < g->nops; i++) smallest += c.minmem[i] = par__gr_min_mem(&g->ops[i]);
    c.suffix_min[g->nops] = 0;
    for (t = g->nops - 1; t >= 0; t--) c.suffix_min[t] = c.suffix_min[t + 1] + c.minmem[c.order[t]];
    if (memory_cap > 0 && smallest > memory_cap) {
        st = par__fail(PAR_ECAPACITY,
                       "no plan fits the memory cap of %.0f bytes per device: the smallest plan needs %.0f bytes",
                       memory_cap, smallest);
        goto done;
    }
    if (mode == PAR_SEARCH_DYNAMIC_PROGRAMMING) {
        st = par__gr_search_dp(&c, &r);
        if (st == PAR_ECAPACITY && !strstr(par_last_error(), "Pareto")) /* cannot happen: smallest fits */
            st = par__fail(PAR_ECAPACITY, "no plan fits the memory cap of %.0f bytes per device: the smallest plan "
                                          "needs %.0f bytes",
                           memory_cap, smallest);
    } else if (mode == PAR_SEARCH_SHARDING_PROPAGATION) {
        par__gr_search_propagate(&c, smallest);
        r.states = g->nops;
    } else {
        par__gr_search_greedy(&c, smallest);
        r.states = g->nops;
    }
    if (st == PAR_OK) {
        par__gr_totals(g, &r);
        *result = r;
    }
done:
    if (st != PAR_OK && g->chosen)
        for (i = 0; i < g->nops; i++) g->chosen[i] = -1;
    par__gr_free(g, c.order);
    par__gr_free(g, c.pos);
    par__gr_free(g, c.scratch);
    par__gr_free(g, c.minmem);
    par__gr_free(g, c.suffix_min);
    return st;
}

/* ---- text form ------------------------------------------------------------------ */

/* Re-word the latest error with the line it came from. */
static par_status par__gr_at_line(par_status st, int line) {
    char why[400];
    par__copy_text(why, sizeof why, par_last_error());
    return par__fail(st, "graph line %d: %s", line, why);
}

/* "[16,64]" -> ndim, shape. */
static int par__gr_parse_shape(const char *t, int *ndim, int64_t *shape) {
    int n = 0;
    if (*t++ != '[') return 0;
    if (*t == ']') return t[1] == 0 && (*ndim = 0, 1);
    for (;;) {
        char *end;
        long long v = strtoll(t, &end, 10);
        if (end == t || v < 1 || n == PARALLEL_MAX_DIMS) return 0;
        shape[n++] = v;
        t = end;
        if (*t == ',') t++;
        else if (*t == ']' && t[1] == 0) break;
        else return 0;
    }
    *ndim = n;
    return 1;
}

/* "name" or "name.3" -> op index and port (default 0); -1 when the op is unknown. */
static int par__gr_parse_port(const par_graph *g, const char *t, int *port) {
    char name[PAR__GR_NAME];
    const char *dot = strchr(t, '.');
    size_t n = dot ? (size_t)(dot - t) : strlen(t);
    char *end;
    *port = 0;
    if (n == 0 || n >= sizeof name) return -1;
    memcpy(name, t, n);
    name[n] = 0;
    if (dot) {
        long v = strtol(dot + 1, &end, 10);
        if (end == dot + 1 || *end) return -2;
        *port = (int)v;
    }
    return par__gr_find(g, name);
}

static par_status par__gr_parse_op(par_graph *g, char **tok, int n, int line) {
    par_op_desc d;
    par_strategy fixed;
    int have_fixed = 0, i, j;
    par_status st;
    memset(&d, 0, sizeof d);
    if (n < 4) return par__fail(PAR_EPARSE, "graph line %d: 'op' needs a name, a kind and the input shapes", line);
    d.name = tok[1];
    if (par_op_kind_parse(tok[2], &d.kind) != PAR_OK)
        return par__fail(PAR_EPARSE, "graph line %d: unknown op kind '%.40s'", line, tok[2]);
    for (i = 3; i < n; i++) {
        const char *t = tok[i];
        if (t[0] == '[') {
            if (d.num_inputs == PAR_MAX_INPUTS || !par__gr_parse_shape(t, &d.ndim[d.num_inputs], d.shape[d.num_inputs]))
                return par__fail(PAR_EPARSE, "graph line %d: bad input shape '%.40s' (want [16,64], at most %d inputs)",
                                 line, t, PAR_MAX_INPUTS);
            d.num_inputs++;
        } else if (!strncmp(t, "params=", 7)) {
            const char *p = t + 7;
            while (*p) {
                char *end;
                long v = strtol(p, &end, 10);
                if (end == p || v < 0 || v >= PAR_MAX_INPUTS)
                    return par__fail(PAR_EPARSE, "graph line %d: bad params '%.40s' (input indices 0 to %d)", line, t,
                                     PAR_MAX_INPUTS - 1);
                d.params |= 1u << v;
                p = *end == ',' ? end + 1 : end;
                if (*end && *end != ',') return par__fail(PAR_EPARSE, "graph line %d: bad params '%.40s'", line, t);
            }
        } else if (!strncmp(t, "dtype=", 6)) {
            if (par_dtype_parse(t + 6, &d.dtype) != PAR_OK) return par__gr_at_line(PAR_EPARSE, line);
        } else if (!strncmp(t, "flops=", 6)) {
            char *end;
            d.device_flops = strtod(t + 6, &end);
            if (*end || !(d.device_flops > 0))
                return par__fail(PAR_EPARSE, "graph line %d: flops must be a positive number", line);
        } else if (!strcmp(t, "transpose_a")) {
            d.transpose_a = 1;
        } else if (!strcmp(t, "transpose_b")) {
            d.transpose_b = 1;
        } else if (!strcmp(t, "reduce_scatter")) {
            d.reduce_scatter = 1;
        } else if (!strncmp(t, "strategy=", 9)) {
            if ((st = par_strategy_parse(t + 9, &fixed)) != PAR_OK) return par__gr_at_line(st, line);
            have_fixed = 1;
        } else {
            return par__fail(PAR_EPARSE, "graph line %d: unknown op option '%.40s'", line, t);
        }
    }
    for (j = 0; j < d.num_inputs; j++)
        if (d.ndim[j] == 0) return par__fail(PAR_EPARSE, "graph line %d: input %d has no dims", line, j);
    if ((st = par_graph_add_op(g, &d, have_fixed ? &fixed : NULL, NULL)) != PAR_OK) return par__gr_at_line(st, line);
    return PAR_OK;
}

static par_status par__gr_parse_line(par_graph *g, char *s, int line) {
    char *tok[32];
    int n = 0;
    par_status st;
    char *hash = strchr(s, '#');
    if (hash) *hash = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == '\r') *s++ = 0;
        if (!*s) break;
        if (n == 32) return par__fail(PAR_EPARSE, "graph line %d: more than 32 words", line);
        tok[n++] = s;
        while (*s && *s != ' ' && *s != '\t' && *s != '\r') s++;
    }
    if (n == 0) return PAR_OK;
    if (!strcmp(tok[0], "devices")) {
        char *end;
        long v = n == 2 ? strtol(tok[1], &end, 10) : 0;
        if (n != 2 || *end || v < 1 || v > PAR__MAX_DEVICES)
            return par__fail(PAR_EPARSE, "graph line %d: 'devices N' needs N from 1 to %d", line, PAR__MAX_DEVICES);
        if (g->nops) return par__fail(PAR_EPARSE, "graph line %d: 'devices' must come before the ops", line);
        g->d.devices = (int)v;
        return PAR_OK;
    }
    if (!strcmp(tok[0], "op")) {
        if (g->d.devices < 1)
            return par__fail(PAR_EINVAL, "graph line %d: no device count: write 'devices N' before the ops", line);
        return par__gr_parse_op(g, tok, n, line);
    }
    if (!strcmp(tok[0], "edge")) {
        int from, to, out, in;
        if (n != 4 || strcmp(tok[2], "->"))
            return par__fail(PAR_EPARSE, "graph line %d: want 'edge FROM[.OUT] -> TO.IN'", line);
        from = par__gr_parse_port(g, tok[1], &out);
        to = par__gr_parse_port(g, tok[3], &in);
        if (from == -2 || to == -2) return par__fail(PAR_EPARSE, "graph line %d: bad port number", line);
        if (from < 0 || to < 0)
        {
            const char *bad = from < 0 ? tok[1] : tok[3], *dot = strchr(bad, '.');
            return par__fail(PAR_EINVAL, "graph line %d: dangling edge %.40s -> %.40s: no op '%.*s'", line, tok[1],
                             tok[3], (int)(dot && dot - bad < 32 ? dot - bad : 31), bad);
        }
        if ((st = par_graph_add_edge(g, from, out, to, in)) != PAR_OK) return par__gr_at_line(st, line);
        return PAR_OK;
    }
    return par__fail(PAR_EPARSE, "graph line %d: unknown item '%.40s' (expected devices, op or edge)", line, tok[0]);
}

PARALLEL_DEF par_status par_graph_parse(const char *text, const par_graph_desc *desc, par_graph **graph) {
    par_graph *g = NULL;
    par_status st;
    const char *p;
    int line = 0;
    if (!text || !graph) return par__fail(PAR_EINVAL, "par_graph_parse: NULL argument");
    *graph = NULL;
    if ((st = par_graph_create(desc, &g)) != PAR_OK) return st;
    for (p = text; *p && st == PAR_OK; line++) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char buf[1024];
        if (len >= sizeof buf) {
            st = par__fail(PAR_EPARSE, "graph line %d: longer than %d bytes", line + 1, (int)sizeof buf - 1);
            break;
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        st = par__gr_parse_line(g, buf, line + 1);
        p += len + (nl != NULL);
    }
    if (st == PAR_OK && g->nops == 0) st = par__fail(PAR_EPARSE, "graph text has no ops");
    if (st != PAR_OK) {
        par_graph_destroy(g);
        return st;
    }
    *graph = g;
    return PAR_OK;
}

PARALLEL_DEF int par_graph_chosen(const par_graph *g, int op) {
    return g && g->chosen && op >= 0 && op < g->nops ? g->chosen[op] : -1;
}

PARALLEL_DEF int par_graph_format_result(const par_graph *g, const par_graph_result *r, char *buf, size_t size) {
    size_t n = 0;
    int i;
    char sbuf[160];
#define PAR__GR_PUT(...)                                                                       \
    do {                                                                                       \
        int w_ = snprintf(buf && n < size ? buf + n : NULL, buf && n < size ? size - n : 0, __VA_ARGS__); \
        if (w_ > 0) n += (size_t)w_;                                                           \
    } while (0)
    if (!g || !r) return 0;
    for (i = 0; i < g->nops; i++) {
        const int k = par_graph_chosen(g, i);
        if (k < 0) continue;
        par_strategy_format(&g->ops[i].cand[k], sbuf, sizeof sbuf);
        PAR__GR_PUT("%-12s %-14s strategy=%s%s cost=%.3gs memory=%.0fB\n", g->ops[i].name,
                    par_op_kind_name(g->ops[i].desc.kind), sbuf, g->ops[i].fixed ? " (fixed)" : "",
                    g->ops[i].info[k].cost.total, g->ops[i].info[k].cost.memory_bytes);
    }
    PAR__GR_PUT("total cost=%.4gs (compute %.4gs, comm %.4gs, redistribution %.4gs) memory=%.0fB per device\n",
                r->cost, r->compute, r->comm, r->redistribution, r->memory_bytes);
#undef PAR__GR_PUT
    return (int)n;
}

/* ---- whole-plan search ---------------------------------------------------------- */

static int par__au_finite(double x) { return x == x && x < 1e300 && x > -1e300; }

PARALLEL_DEF par_status par_cluster_check(const par_cluster *c) {
    if (!c) return par__fail(PAR_EINVAL, "par_cluster_check: NULL argument");
    if (c->devices < 1 || c->devices > PAR__MAX_DEVICES)
        return par__fail(PAR_EINVAL, "cluster: devices is %d; it must be 1 to %d", c->devices, PAR__MAX_DEVICES);
    if (c->devices_per_node < 0 || (c->devices_per_node > 0 && c->devices % c->devices_per_node))
        return par__fail(PAR_EINVAL, "cluster: devices_per_node is %d; it must divide devices (%d)",
                         c->devices_per_node, c->devices);
    if (!par__au_finite(c->intra_bandwidth) || c->intra_bandwidth <= 0)
        return par__fail(PAR_EINVAL, "cluster: intra_node_bandwidth is %g; it must be a finite number of bytes/s > 0",
                         c->intra_bandwidth);
    if (!par__au_finite(c->inter_bandwidth) || c->inter_bandwidth < 0)
        return par__fail(PAR_EINVAL, "cluster: inter_node_bandwidth is %g; it must be a finite number of bytes/s > 0",
                         c->inter_bandwidth);
    if (!par__au_finite(c->intra_latency) || c->intra_latency < 0 || c->intra_latency > 3600 ||
        !par__au_finite(c->inter_latency) || c->inter_latency < 0 || c->inter_latency > 3600)
        return par__fail(PAR_EINVAL, "cluster: latencies are %g and %g s; each must be finite, >= 0 and under an hour",
                         c->intra_latency, c->inter_latency);
    if (!par__au_finite(c->memory_bytes) || c->memory_bytes <= 0)
        return par__fail(PAR_EINVAL, "cluster: memory_per_device is %g; it must be a finite number of bytes > 0",
                         c->memory_bytes);
    if (!par__au_finite(c->flops) || c->flops <= 0)
        return par__fail(PAR_EINVAL, "cluster: flops_per_device is %g; it must be a finite flop/s > 0", c->flops);
    if (!par__au_finite(c->activation_rate) || c->activation_rate < 0)
        return par__fail(PAR_EINVAL, "cluster: activation_rate is %g; it must be a finite number of elements/s >= 0",
                         c->activation_rate);
    if (!par__au_finite(c->memory_bandwidth) || c->memory_bandwidth < 0)
        return par__fail(PAR_EINVAL, "cluster: memory_bandwidth is %g; it must be a finite number of bytes/s >= 0",
                         c->memory_bandwidth);
    if (!par__au_finite(c->attention_rate) || c->attention_rate < 0)
        return par__fail(PAR_EINVAL, "cluster: attention_rate is %g; it must be a finite flop/s >= 0",
                         c->attention_rate);
    if (!par__au_finite(c->attention_row_cost) || c->attention_row_cost < 0 || c->attention_row_cost > 3600)
        return par__fail(PAR_EINVAL, "cluster: attention_row_cost is %g s; it must be finite, >= 0 and under an hour",
                         c->attention_row_cost);
    if (!par__au_finite(c->kernel_latency) || c->kernel_latency < 0 || c->kernel_latency > 3600)
        return par__fail(PAR_EINVAL, "cluster: kernel_latency is %g s; it must be finite, >= 0 and under an hour",
                         c->kernel_latency);
    if (c->node_parallelism < 0 || c->node_parallelism > PAR__MAX_DEVICES)
        return par__fail(PAR_EINVAL, "cluster: node_parallelism is %d; it must be 0 (every rank) to %d",
                         c->node_parallelism, PAR__MAX_DEVICES);
    if (c->devices_per_node > 0 && c->devices_per_node < c->devices && c->inter_bandwidth == 0)
        return par__fail(PAR_EINVAL, "cluster: %d nodes need inter_node_bandwidth", c->devices / c->devices_per_node);
    return PAR_OK;
}

/* "80Gi", "1.5e9", "25G" -> a number; 0 for text that is no number. */
static int par__au_number(const char *t, double *v) {
    char *end;
    double x = strtod(t, &end), scale = 1;
    if (end == t) return 0;
    if (*end == 'K' || *end == 'M' || *end == 'G' || *end == 'T') {
        const int pow = *end == 'K' ? 1 : *end == 'M' ? 2 : *end == 'G' ? 3 : 4;
        const double base = end[1] == 'i' ? 1024.0 : 1000.0;
        int i;
        for (i = 0; i < pow; i++) scale *= base;
        end += end[1] == 'i' ? 2 : 1;
        if (*end == 'B') end++;
    }
    if (*end) return 0;
    *v = x * scale;
    return 1;
}

/* Split "  key: value  # note" into trimmed key and value (in place); 0 if the
   line has no key. */
static int par__au_key_value(char *line, char **key, char **value) {
    char *p = strchr(line, '#'), *colon, *e;
    if (p) *p = 0;
    while (*line == ' ' || *line == '\t' || *line == '-') line++;
    colon = strchr(line, ':');
    if (!colon) return 0;
    *colon = 0;
    for (e = colon; e > line && (e[-1] == ' ' || e[-1] == '\t'); e--) e[-1] = 0;
    p = colon + 1;
    while (*p == ' ' || *p == '\t') p++;
    for (e = p + strlen(p); e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'); e--) e[-1] = 0;
    *key = line;
    *value = p;
    return *line != 0;
}

PARALLEL_DEF par_status par_cluster_parse(const char *text, par_cluster *out) {
    static const char *const keys[] = {"devices",            "devices_per_node",   "intra_node_bandwidth",
                                       "intra_node_latency", "inter_node_bandwidth", "inter_node_latency",
                                       "memory_per_device",  "flops_per_device",     "memory_bandwidth",
                                       "activation_rate",    "attention_rate",       "kernel_latency",
                                       "node_parallelism",   "attention_row_cost"};
    enum { nkeys = (int)(sizeof keys / sizeof keys[0]) };
    par_cluster c;
    const char *p;
    int line = 0, seen = 0, i;
    if (!text || !out) return par__fail(PAR_EINVAL, "par_cluster_parse: NULL argument");
    memset(&c, 0, sizeof c);
    for (p = text; *p; line++) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char buf[256], *key, *value;
        double v;
        if (len >= sizeof buf) return par__fail(PAR_EPARSE, "cluster line %d: longer than 255 bytes", line + 1);
        memcpy(buf, p, len);
        buf[len] = 0;
        p += len + (nl != NULL);
        if (!par__au_key_value(buf, &key, &value)) {
            for (i = 0; buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r'; i++) {
            }
            if (buf[i]) return par__fail(PAR_EPARSE, "cluster line %d: want 'key: value'", line + 1);
            continue;
        }
        for (i = 0; i < nkeys && strcmp(key, keys[i]); i++) {
        }
        if (i == nkeys)
            return par__fail(PAR_EPARSE,
                             "cluster line %d: unknown key '%.40s' (devices, devices_per_node, intra_node_bandwidth, "
                             "intra_node_latency, inter_node_bandwidth, inter_node_latency, memory_per_device, "
                             "flops_per_device, memory_bandwidth, activation_rate, attention_rate, kernel_latency, "
                             "node_parallelism, attention_row_cost)",
                             line + 1, key);
        if (!par__au_number(value, &v))
            return par__fail(PAR_EPARSE, "cluster line %d: %s: '%.40s' is not a number", line + 1, key, value);
        if ((i == 0 || i == 1 || i == 12) && (v < 0 || v > 2e9 || v != floor(v))) /* range first: casting 1e10 is UB */
            return par__fail(PAR_EINVAL, "cluster line %d: %s is %g; it must be a whole number >= %d", line + 1, key, v,
                             i == 12 ? 0 : 1);
        seen |= 1 << i;
        switch (i) {
        case 0: c.devices = (int)v; break;
        case 1: c.devices_per_node = (int)v; break;
        case 2: c.intra_bandwidth = v; break;
        case 3: c.intra_latency = v; break;
        case 4: c.inter_bandwidth = v; break;
        case 5: c.inter_latency = v; break;
        case 6: c.memory_bytes = v; break;
        case 7: c.flops = v; break;
        case 8: c.memory_bandwidth = v; break;
        case 9: c.activation_rate = v; break;
        case 10: c.attention_rate = v; break;
        case 11: c.kernel_latency = v; break;
        case 12: c.node_parallelism = (int)v; break;
        default: c.attention_row_cost = v; break;
        }
    }
    for (i = 0; i < 8; i++)
        if ((0x45 >> i & 1) && !(seen >> i & 1)) /* devices, intra_node_bandwidth, memory_per_device */
            return par__fail(PAR_EINVAL, "cluster: %s is missing", keys[i]);
    if (!(seen >> 7 & 1)) return par__fail(PAR_EINVAL, "cluster: flops_per_device is missing");
    PAR__CHECK(par_cluster_check(&c));
    *out = c;
    return PAR_OK;
}

PARALLEL_DEF par_status par_model_shape_parse(const char *text, par_model_shape *out) {
    static const char *const keys[] = {"num_layers", "hidden_size",  "num_heads",  "n_kv_heads",
                                       "intermediate_size", "vocab_size", "seq_length", "batch_size"};
    long vals[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    par_model_shape m;
    const char *p;
    int line = 0, seen = 0, i;
    if (!text || !out) return par__fail(PAR_EINVAL, "par_model_shape_parse: NULL argument");
    for (p = text; *p; line++) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char buf[256], *key, *value, *end;
        p += len + (nl != NULL);
        if (len >= sizeof buf) continue; /* no key of ours is that long */
        memcpy(buf, p - len - (nl != NULL), len);
        buf[len] = 0;
        if (!par__au_key_value(buf, &key, &value)) continue;
        for (i = 0; i < 8 && strcmp(key, keys[i]); i++) {
        }
        if (i == 8) continue;
        vals[i] = strtol(value, &end, 10);
        if (end == value || *end || vals[i] < 0 || vals[i] > (1L << 30))
            return par__fail(PAR_EINVAL, "model line %d: %s: '%.40s' is not a whole number >= 0", line + 1, key,
                             value);
        seen |= 1 << i;
    }
    for (i = 0; i < 8; i++)
        if (i != 3 && !(seen >> i & 1)) return par__fail(PAR_EINVAL, "model: %s is missing", keys[i]);
    memset(&m, 0, sizeof m);
    m.layers = (int)vals[0], m.hidden = (int)vals[1], m.heads = (int)vals[2];
    m.kv_heads = vals[3] ? (int)vals[3] : (int)vals[2];
    m.ffn = (int)vals[4], m.vocab = (int)vals[5], m.seq = (int)vals[6], m.batch = (int)vals[7];
    *out = m;
    return PAR_OK;
}

static par_status par__au_check_model(const par_model_shape *m) {
    if (m->layers < 1 || m->hidden < 1 || m->heads < 1 || m->kv_heads < 1 || m->ffn < 1 || m->vocab < 1 ||
        m->seq < 1 || m->batch < 1)
        return par__fail(PAR_EINVAL, "model: layers, hidden, heads, kv_heads, ffn, vocab, seq and batch must be >= 1");
    if (m->hidden % m->heads || m->heads % m->kv_heads)
        return par__fail(PAR_EINVAL, "model: hidden (%d) must divide by heads (%d) and heads by kv_heads (%d)",
                         m->hidden, m->heads, m->kv_heads);
    if ((int)m->dtype < 0 || m->dtype >= PAR_DTYPE_COUNT) return par__fail(PAR_EINVAL, "model: unknown dtype");
    return PAR_OK;
}

/* Pipeline figures per (schedule, stages, micro-batches), from the checker. */
typedef struct par__au_pp {
    int kind, p, m, ok;
    double bubble;
    int in_flight;
} par__au_pp;

typedef struct par__au {
    const par_auto_desc *d;
    par_model_shape m;
    par_cluster c;
    double cap;
    par__au_pp *pp;
    int npp, cap_pp;
    par_auto_plan *out;
    int capacity, count;
    par_auto_cuts cuts;
    double smallest;
    int base_found;            /* the degree tuple being enumerated: its fastest plan that fits */
    par_auto_plan base_best;
    double base_min_mem;       /* and its smallest memory */
} par__au;

static const par__au_pp *par__au_pipeline(par__au *a, par_pp_kind kind, int p, int chunks, int m) {
    par_pp_schedule_desc sd;
    par_pp_schedule *s = NULL;
    par_pp_check chk;
    par__au_pp e;
    int i;
    for (i = 0; i < a->npp; i++)
        if (a->pp[i].kind == (int)kind && a->pp[i].p == p && a->pp[i].m == m) return &a->pp[i];
    if (a->npp == a->cap_pp) {
        int n = a->cap_pp ? 2 * a->cap_pp : 64;
        par__au_pp *q = (par__au_pp *)PARALLEL_REALLOC(a->pp, (size_t)n * sizeof *q);
        if (!q) return NULL;
        a->pp = q;
        a->cap_pp = n;
    }
    memset(&e, 0, sizeof e);
    e.kind = (int)kind, e.p = p, e.m = m;
    memset(&sd, 0, sizeof sd);
    sd.stages = p;
    sd.chunks = chunks;
    sd.micro_batches = m;
    sd.kind = kind;
    if (par_pp_schedule_make(&sd, &s) == PAR_OK && par_pp_schedule_check(s, &chk, NULL, 0) == PAR_OK) {
        e.ok = 1;
        e.bubble = chk.bubble;
        e.in_flight = chk.max_in_flight;
    }
    par_pp_schedule_destroy(s);
    a->pp[a->npp++] = e;
    return &a->pp[a->npp - 1];
}

/* Time of one collective step pattern over a group spanning `span` consecutive
   ranks: within a node when the span fits one. */
static double par__au_coll(const par__au *a, int span, int steps, double bytes) {
    const int dpn = a->c.devices_per_node ? a->c.devices_per_node : a->c.devices;
    const int intra = span <= dpn;
    const double bw = intra || a->c.inter_bandwidth <= 0 ? a->c.intra_bandwidth : a->c.inter_bandwidth;
    const double lat = intra ? a->c.intra_latency : a->c.inter_latency;
    return steps * lat + bytes / bw;
}

/* Its bytes-moving part alone: the work a rank's cores do for it when they
   copy (rank threads), which ranks sharing cores add up; the latency is waiting,
   in which the others run. */
static double par__au_coll_copy(const par__au *a, int span, double bytes) {
    const int dpn = a->c.devices_per_node ? a->c.devices_per_node : a->c.devices;
    const double bw = span <= dpn || a->c.inter_bandwidth <= 0 ? a->c.intra_bandwidth : a->c.inter_bandwidth;
    return bytes / bw;
}

/* Kernel scratch the host's compute table keeps for GEMMs up to these sizes. */
static double par__au_table_scratch(const par__au *a, double rows, double feat, double attn_rows) {
    const par_compute_table *ct = a->d->compute;
    par_scratch_query q;
    size_t b = 0;
    if (!ct || !ct->scratch_bound) return 0;
    q.gemm_m = q.gemm_k = (int64_t)(rows > feat ? rows : feat);
    q.gemm_n = (int64_t)feat;
    q.attn_rows = (int64_t)attn_rows;
    return ct->scratch_bound(ct->user, &q, &b) == PAR_OK ? (double)b : 0;
}

/* The built-in prediction: how parallel.h's blocks hold a Llama (the example
   trainer's layout, examples/llama/model.h), per rank of the busiest stage.
   Memory: weights, gradients (ZeRO-2: this rank's shard plus two bucket
   buffers of the largest bucket, a layer; every bucket under a pipeline) and
   AdamW's two f32 moments (ZeRO-1/2: sharded over dp x cp); per micro-batch
   in flight (the schedule's peak, from the >>pipeline checker) the saved
   activations of each layer and the final norm and logits; the backward
   scratch of one layer; the tensor-parallel executor's 4 buffers of the
   residual stream; the pipeline's boundary buffers; context parallel's ring
   or all-to-all buffers; the compute table's own scratch (desc.compute).
   Time: the linears' flops at the cluster's GEMM rate and attention's at its
   attention rate, the bytes the step moves through memory (activations
   written and read back, weights read three times, AdamW's state) at its
   memory bandwidth, the MLP's activation function (an exp per element,
   forward and backward: on a CPU it outweighs the small GEMMs) at its
   activation rate, a latency per kernel call, ring collectives
   (alpha-beta; gradients in per-layer buckets, ZeRO-2's every micro-batch),
   the bubble stretching the busiest stage; and where a node's ranks share
   its cores (node_parallelism), at least the node's summed work over them. */

/* Kernel calls of one layer's forward + backward (examples/llama/model.h: norms, 7 linears,
   rope, attention, SwiGLU, residual adds; backward about twice that) and of the embedding,
   head and loss: what kernel_latency is paid for. */
#define PAR__AU_LAYER_CALLS 40.0
#define PAR__AU_HEAD_CALLS 12.0

static void par__au_predict(const par__au *a, par_auto_plan *pl, int in_flight, double bubble) {
    const par_model_shape *m = &a->m;
    const double e = (double)par_dtype_size(m->dtype), h = m->hidden, hd = (double)m->hidden / m->heads;
    const double q = m->heads * hd, kv = m->kv_heads * hd, f = m->ffn, V = m->vocab, S = m->seq;
    const int tp = pl->tp, cp = pl->cp, pp = pl->pp, dp = pl->dp, chunks = pl->chunks > 0 ? pl->chunks : 1;
    const double ql = q / tp, kvl = kv / tp, fl = f / tp, Vl = V / tp, hl = (double)m->heads / tp;
    const double layers = (double)m->layers / pp;
    const double layer_mm = h * q * 2 + h * kv * 2 + 3 * h * f; /* matmul weights of one layer */
    const double layer_params = layer_mm / tp + 2 * h;
    const double first = layers * layer_params + V * h / tp + (pp == 1 ? V * h / tp + h : 0);
    const double last = layers * layer_params + V * h / tp + h;
    const double params = first > last ? first : last;
    const double shard = (double)dp * cp; /* ranks holding the same weights: ZeRO's group */
    const double bmb = (double)m->batch / (dp * pl->micro_batches); /* samples per micro-batch and rank */
    const double n = bmb * S / cp, rows = pl->sp ? n / tp : n;      /* its tokens; the residual stream's rows */
    double bucket = layer_params > V * h / tp ? layer_params : V * h / tp;
    double per_layer, slot, scratch, comm = 0, cpf = 0, feat, gemm, attn, traffic, calls, opt;
    double tp_t = 0, cp_t = 0, pp_t = 0, dp_t = 0, work, copies = 0;
    /* weights, gradients, optimizer */
    pl->weights_bytes = params * e;
    if (pl->zero >= 2)
        pl->grads_bytes = params * e / shard + (pp > 1 ? params : (2 * bucket < params ? 2 * bucket : params)) * e;
    else
        pl->grads_bytes = params * e;
    pl->optimizer_bytes = params * 8 / (pl->zero >= 1 ? shard : 1);
    /* activations of one micro-batch: per layer the norms' inputs and outputs (rows), q, k, v, the
       attention output, its log-sum-exp (and Ulysses' saved blocks), the MLP's gate, up and product */
    per_layer = rows * (4 * h + 2) + n * (2 * ql + 2 * kvl) + bmb * hl * S / cp + 3 * n * fl;
    if (cp > 1 && pl->cp_algo == PAR_CP_ULYSSES)
        per_layer += bmb * S * 2 * (hl / cp + (kvl / hd >= cp ? kvl / hd / cp : 1)) * hd;
    slot = layers * per_layer + rows * (2 * h + 1) + n * Vl + n;
    pl->activation_bytes = (pp > 1 ? in_flight : 1) * (slot * e + n * 16); /* + token ids, targets, positions */
    /* one layer's backward scratch (+ the tp gather and sequence-parallel rows) */
    scratch = n * (2 * h + 2 * ql + 2 * kvl + 3 * fl) + (tp > 1 ? n * h : 0) + (pl->sp ? n * h : 0);
    if (tp > 1) comm += 4 * n * h * 4;
    if (pp > 1) comm += pl->micro_batches * chunks * 4 * rows * h * 4;
    if (cp > 1 && pl->cp_algo == PAR_CP_RING) {
        const double kvn = bmb * S / cp * kvl, qn = bmb * S / cp * ql;
        cpf = 12 * kvn + qn + bmb * hl * S / cp;
    } else if (cp > 1) {
        const double hqh = hl / cp, hkvh = kvl / hd >= cp ? kvl / hd / cp : 1;
        const double blk = bmb * S / cp * (hqh + 2 * hkvh) * hd;
        cpf = 2 * cp * blk + 2 * bmb * S * hqh * hd + 2 * bmb * S * hkvh * hd;
    }
    feat = h;
    if (ql > feat) feat = ql;
    if (fl > feat) feat = fl;
    if (Vl > feat) feat = Vl;
    pl->memory_bytes = pl->weights_bytes + pl->grads_bytes + pl->optimizer_bytes + pl->activation_bytes +
                       scratch * e + comm + cpf * 4 + (cp > 1 ? S * 8 : 0) +
                       par__au_table_scratch(a, n, feat, bmb * hl * S / cp);
    /* compute per micro-batch: 6 flops per weight and token (forward + backward) at the GEMM rate,
       causal attention 6 S d per head and token at the attention rate (S the whole sequence, also
   under context parallelism), the bytes the step moves
       through memory, SwiGLU's exps, and a cost per kernel call */
    gemm = n * (layers * 6 * layer_mm / tp + 6 * V * h / tp) / a->c.flops;
    /* every query sees the whole sequence's keys: context parallelism splits the queries (and brings
       the keys round), not the keys a query attends to */
    attn = n * layers * 6 * S * q / tp / (a->c.attention_rate > 0 ? a->c.attention_rate : a->c.flops);
    /* and per query row and head of each call: a ring step's call takes every local query again */
    attn += n * layers * hl * (cp > 1 && pl->cp_algo == PAR_CP_RING ? cp : 1) * a->c.attention_row_cost;
    traffic = a->c.memory_bandwidth > 0 ? (3 * slot * e + 3 * params * e) / a->c.memory_bandwidth : 0;
    if (a->c.activation_rate > 0) traffic += layers * n * fl / a->c.activation_rate; /* SwiGLU's exps */
    calls = layers * (PAR__AU_LAYER_CALLS + (cp > 1 ? 3.0 * (cp - 1) : 0)) + PAR__AU_HEAD_CALLS;
    pl->compute_time = (gemm + attn + traffic + calls * a->c.kernel_latency) * pl->micro_batches;
    /* AdamW: p, g, m and v read, p, m and v written, over this rank's share of the weights */
    opt = a->c.memory_bandwidth > 0 ? params * 28 / (pl->zero >= 1 ? shard : 1) / a->c.memory_bandwidth : 0;
    opt += (layers * 9 + 3) * a->c.kernel_latency;
    pl->compute_time += opt;
    if (tp > 1) { /* two all-reduces forward and two backward per layer (sequence parallel: as many RS + AG) */
        tp_t = layers * 4 * par__au_coll(a, tp, 2 * (tp - 1), 2.0 * (tp - 1) / tp * n * h * e);
        copies += layers * 4 * par__au_coll_copy(a, tp, 2.0 * (tp - 1) / tp * n * h * e) * pl->micro_batches;
    }
    if (cp > 1 && pl->cp_algo == PAR_CP_RING) { /* k, v around the ring forward; k, v, dk, dv backward */
        cp_t = layers * 3 * par__au_coll(a, tp * cp, cp - 1, (cp - 1) * n * 2 * kvl * e);
        copies += layers * 3 * par__au_coll_copy(a, tp * cp, (cp - 1) * n * 2 * kvl * e) * pl->micro_batches;
    } else if (cp > 1) { /* four all-to-alls forward, four backward */
        const double bytes = (double)(cp - 1) / cp * n * (2 * ql + 2 * kvl) * e;
        cp_t = layers * 2 * par__au_coll(a, tp * cp, 4 * (cp - 1), bytes);
        copies += layers * 2 * par__au_coll_copy(a, tp * cp, bytes) * pl->micro_batches;
    }
    if (pp > 1) {
        pp_t = 2 * par__au_coll(a, tp * cp * pp, 1, rows * h * e);
        copies += 2 * par__au_coll_copy(a, tp * cp * pp, rows * h * e) * pl->micro_batches * chunks;
    }
    pl->tp_comm_time = tp_t * pl->micro_batches;
    pl->cp_comm_time = cp_t * pl->micro_batches;
    pl->pp_comm_time = pp_t * pl->micro_batches * chunks;
    if (shard > 1) {
        /* gradients in buckets of a layer (+ the embedding and the head): all-reduced once a step;
           ZeRO-1 reduce-scatters them once and all-gathers the weights; ZeRO-2 reduce-scatters every
           micro-batch's (the sharded buffer holds no sum of unreduced micro-batches) */
        const double buckets = layers + 2, span = dp > 1 ? a->c.devices : tp * cp;
        const double rs = (shard - 1) / shard * params * e, steps = shard - 1;
        if (pl->zero >= 2)
            dp_t = pl->micro_batches * par__au_coll(a, (int)span, (int)(buckets * steps), rs) +
                   par__au_coll(a, (int)span, (int)(buckets * steps), rs);
        else if (pl->zero == 1)
            dp_t = 2 * par__au_coll(a, (int)span, (int)(buckets * steps), rs);
        else
            dp_t = par__au_coll(a, (int)span, (int)(2 * buckets * steps), 2 * rs);
        copies += (pl->zero >= 2 ? pl->micro_batches + 1 : 2) * par__au_coll_copy(a, (int)span, rs);
    }
    pl->dp_comm_time = dp_t;
    pl->bubble = bubble;
    work = pl->compute_time - opt + pl->tp_comm_time + pl->cp_comm_time;
    pl->step_time = pl->critical_time = work / (1 - bubble) + opt + pl->pp_comm_time + pl->dp_comm_time;
    /* ranks sharing a node's cores beyond node_parallelism take turns: the node's summed work
       (compute and copying; idle pipeline ranks lend their cores, so no bubble here) over its
       parallelism, plus the collectives' latencies, bounds the step */
    pl->shared_time = 0;
    if (a->c.node_parallelism > 0) {
        const int dpn = a->c.devices_per_node ? a->c.devices_per_node : a->c.devices;
        const int on_node = dpn < a->c.devices ? dpn : a->c.devices;
        if (on_node > a->c.node_parallelism) {
            /* collectives' latencies are paid once per collective, by all its ranks together (the
               calibration measures them with every rank running) */
            const double comm = pl->tp_comm_time + pl->cp_comm_time + pl->pp_comm_time + pl->dp_comm_time;
            pl->shared_time = (pl->compute_time + copies) * on_node / a->c.node_parallelism + (comm - copies);
            if (pl->shared_time > pl->step_time) pl->step_time = pl->shared_time;
        }
    }
}

static void par__au_cut(char *example, int64_t *counter, const par_auto_plan *pl, const char *why) {
    if (!*counter) {
        char name[96];
        size_t n;
        par_auto_plan_name(pl, name, sizeof name);
        par__copy_text(example, 160, name);
        n = strlen(example);
        if (n + 2 < 160) {
            example[n] = ':', example[n + 1] = ' ';
            par__copy_text(example + n + 2, 160 - n - 2, why);
        }
    }
    (*counter)++;
}

/* Plans kept sorted, fastest first (ties: less memory). */
/* The ranking: faster first; at equal step time (ranks sharing cores: the node's
   work bounds both) the shorter critical path (a smaller bubble, fewer
   collectives), then less memory. */
static int par__au_before(const par_auto_plan *x, const par_auto_plan *y) {
    if (x->step_time != y->step_time) return x->step_time < y->step_time;
    if (x->critical_time != y->critical_time) return x->critical_time < y->critical_time;
    return x->memory_bytes < y->memory_bytes;
}

static void par__au_keep(par__au *a, const par_auto_plan *pl) {
    int i;
    a->count++;
    if (a->capacity < 1) return;
    i = a->count - 1 < a->capacity ? a->count - 1 : a->capacity;
    if (i == a->capacity) {
        if (!par__au_before(pl, &a->out[a->capacity - 1])) return;
        i = a->capacity - 1;
    }
    for (; i > 0 && par__au_before(pl, &a->out[i - 1]); i--) a->out[i] = a->out[i - 1];
    a->out[i] = *pl;
}

static void par__au_finish(par__au *a, par_auto_plan *pl) {
    char why[96];
    const int chunks = pl->chunks > 0 ? pl->chunks : 1;
    double bubble = 0;
    int in_flight = 1;
    a->cuts.considered++;
    if (pl->pp > 1) {
        const par__au_pp *r = par__au_pipeline(a, pl->schedule, pl->pp, chunks, pl->micro_batches);
        if (!r || !r->ok) {
            par__au_cut(a->cuts.schedule_example, &a->cuts.schedule, pl,
                        pl->schedule == PAR_PP_INTERLEAVED ? "interleaved needs micro-batches a multiple of the stages"
                                                           : "the schedule is refused");
            return;
        }
        bubble = r->bubble, in_flight = r->in_flight;
    }
    par__au_predict(a, pl, in_flight, bubble);
    if (a->d->memory) pl->memory_bytes = a->d->memory(a->d->user, pl);
    if (a->d->step_time) pl->step_time = a->d->step_time(a->d->user, pl);
    if (a->smallest == 0 || pl->memory_bytes < a->smallest) a->smallest = pl->memory_bytes;
    if (a->base_min_mem == 0 || pl->memory_bytes < a->base_min_mem) a->base_min_mem = pl->memory_bytes;
    if (pl->memory_bytes > a->cap) {
        snprintf(why, sizeof why, "%.4g MiB per rank is over the cap of %.4g MiB", pl->memory_bytes / 1048576.0,
                 a->cap / 1048576.0);
        par__au_cut(a->cuts.over_memory_example, &a->cuts.over_memory, pl, why);
        return;
    }
    if (!a->base_found || par__au_before(pl, &a->base_best)) a->base_best = *pl, a->base_found = 1;
    par__au_keep(a, pl);
}

/* The first rule of the model the degrees break, or NULL. */
static const char *par__au_divides(const par__au *a, const par_auto_plan *pl, char *why, size_t size) {
    const par_model_shape *m = &a->m;
    const int chunks = pl->chunks > 0 ? pl->chunks : 1;
    if (m->heads % pl->tp || m->kv_heads % pl->tp || m->ffn % pl->tp || m->vocab % pl->tp)
        snprintf(why, size, "tp %d does not divide the heads (%d), kv heads (%d), ffn (%d) and vocab (%d)", pl->tp,
                 m->heads, m->kv_heads, m->ffn, m->vocab);
    else if (m->layers % (pl->pp * chunks))
        snprintf(why, size, "%d layers do not split into %d stages x %d chunks", m->layers, pl->pp, chunks);
    else if (m->batch % (pl->dp * pl->micro_batches))
        snprintf(why, size, "batch %d does not split into dp %d x %d micro-batches", m->batch, pl->dp,
                 pl->micro_batches);
    else if (pl->cp > 1 && pl->cp_algo == PAR_CP_RING && m->seq % (2 * pl->cp))
        snprintf(why, size, "seq %d does not split into 2 x cp %d zigzag chunks", m->seq, pl->cp);
    else if (pl->cp > 1 && pl->cp_algo == PAR_CP_ULYSSES &&
             (m->seq % pl->cp || m->heads % (pl->tp * pl->cp) || m->kv_heads % pl->tp))
        snprintf(why, size, "ulysses needs seq (%d) and heads / tp (%d) divisible by cp %d", m->seq,
                 m->heads / pl->tp, pl->cp);
    else if (pl->sp && m->seq / pl->cp % pl->tp)
        snprintf(why, size, "sequence parallel needs the tokens per rank (%d) divisible by tp %d", m->seq / pl->cp,
                 pl->tp);
    else
        return NULL;
    return why;
}

/* Every knob beyond the four degrees. */
static void par__au_knobs(par__au *a, par_auto_plan base) {
    const uint32_t s = a->d->search ? a->d->search : (uint32_t)PAR_AUTO_ALL;
    const uint32_t kinds = a->d->schedules ? a->d->schedules : (1u << PAR_PP_GPIPE) | (1u << PAR_PP_1F1B);
    const uint32_t algos = a->d->cp_algos ? a->d->cp_algos : (1u << PAR_CP_RING) | (1u << PAR_CP_ULYSSES);
    const int max_m = a->d->max_micro_batches > 0 ? a->d->max_micro_batches : 16;
    const int max_zero = !(s & PAR_AUTO_ZERO) ? 0 : a->d->max_zero > 0 ? (a->d->max_zero < 2 ? a->d->max_zero : 2) : 2;
    int sp, algo, kind, mb, zero;
    char why[160];
    for (sp = 0; sp <= (base.tp > 1 && (s & PAR_AUTO_SP) ? 1 : 0); sp++)
        for (algo = 0; algo <= PAR_CP_ULYSSES; algo++) {
            if (base.cp == 1 ? algo > 0 : !(algos >> algo & 1u)) continue;
            for (kind = 0; kind < PAR_PP_KIND_COUNT; kind++) {
                if (base.pp == 1 ? kind != PAR_PP_1F1B : !(kinds >> kind & 1u)) continue;
                for (mb = 1; mb <= max_m; mb++) {
                    if (mb > 1 && base.pp == 1 && !(s & PAR_AUTO_ACCUMULATE)) break;
                    if (a->m.batch % mb) continue;
                    for (zero = 0; zero <= (base.dp * base.cp > 1 ? max_zero : 0); zero++) {
                        par_auto_plan pl = base;
                        pl.sp = sp;
                        pl.cp_algo = (par_cp_algo)algo;
                        pl.schedule = (par_pp_kind)kind;
                        pl.chunks = kind == PAR_PP_INTERLEAVED ? 2 : 1;
                        pl.micro_batches = mb;
                        pl.zero = zero;
                        if (par__au_divides(a, &pl, why, sizeof why)) {
                            a->cuts.considered++;
                            par__au_cut(a->cuts.not_divisible_example, &a->cuts.not_divisible, &pl, why);
                            continue;
                        }
                        par__au_finish(a, &pl);
                    }
                }
            }
        }
}

/* One degree tuple: its knobs, unless a degree the host fixed differs
   (sharding_propagation) or the mode it needs is off. 1 if visited. */
static int par__au_base(par__au *a, uint32_t s, int dp, int tp, int cp, int pp) {
    const par_auto_plan *f = &a->d->fixed;
    par_auto_plan base;
    if (a->d->mode == PAR_SEARCH_SHARDING_PROPAGATION &&
        ((f->dp > 0 && f->dp != dp) || (f->tp > 0 && f->tp != tp) || (f->cp > 0 && f->cp != cp) ||
         (f->pp > 0 && f->pp != pp)))
        return 0;
    if ((dp > 1 && !(s & PAR_AUTO_DP)) || (tp > 1 && !(s & PAR_AUTO_TP)) || (cp > 1 && !(s & PAR_AUTO_CP)) ||
        (pp > 1 && !(s & PAR_AUTO_PP)))
        return 0;
    memset(&base, 0, sizeof base);
    base.dp = dp, base.tp = tp, base.cp = cp, base.pp = pp;
    a->base_found = 0;
    a->base_min_mem = 0;
    par__au_knobs(a, base);
    return 1;
}

/* recursive_programming: see par_auto_desc.mode. */
static void par__au_recursive(par__au *a, uint32_t s) {
    int cur[4], steps;
    par_auto_plan best;
    int have;
    cur[0] = a->c.devices, cur[1] = cur[2] = cur[3] = 1; /* dp, tp, cp, pp */
    par__au_base(a, s, cur[0], cur[1], cur[2], cur[3]);
    have = a->base_found;
    best = a->base_best;
    for (steps = 0; steps < 64; steps++) {
        int nb[4], fast[4] = {0, 0, 0, 0}, small[4] = {0, 0, 0, 0}, q, t, got_fast = 0, got_small = 0;
        double small_mem = 0;
        par_auto_plan fast_plan;
        memset(&fast_plan, 0, sizeof fast_plan);
        for (q = 2; q <= cur[0] && cur[0] % q; q++) {
        }
        if (q > cur[0]) return; /* dp is 1: nothing left to move */
        for (t = 1; t < 4; t++) { /* the smallest prime factor of dp moves to tp, cp or pp */
            memcpy(nb, cur, sizeof nb);
            nb[0] /= q, nb[t] *= q;
            if (!par__au_base(a, s, nb[0], nb[1], nb[2], nb[3])) continue;
            if (a->base_found && (!got_fast || a->base_best.step_time < fast_plan.step_time)) {
                memcpy(fast, nb, sizeof fast);
                fast_plan = a->base_best;
                got_fast = 1;
            }
            if (a->base_min_mem > 0 && (!got_small || a->base_min_mem < small_mem)) {
                memcpy(small, nb, sizeof small);
                small_mem = a->base_min_mem;
                got_small = 1;
            }
        }
        if (got_fast && (!have || fast_plan.step_time < best.step_time)) {
            memcpy(cur, fast, sizeof cur);
            best = fast_plan;
            have = 1;
        } else if (!have && got_small) {
            memcpy(cur, small, sizeof cur); /* nothing fits yet: toward less memory */
        } else {
            return;
        }
    }
}

PARALLEL_DEF par_status par_auto_search(const par_auto_desc *desc, par_auto_plan *plans, int capacity, int *count,
                                        par_auto_cuts *cuts) {
    par__au a;
    const uint32_t s = desc && desc->search ? desc->search : (uint32_t)PAR_AUTO_ALL;
    int n, tp, cp, pp;
    if (!desc || !count || capacity < 0 || (capacity > 0 && !plans))
        return par__fail(PAR_EINVAL, "par_auto_search: NULL argument or negative capacity");
    PAR__CHECK(par__au_check_model(&desc->model));
    PAR__CHECK(par_cluster_check(&desc->cluster));
    if (!(desc->memory_cap >= 0) || !par__au_finite(desc->memory_cap))
        return par__fail(PAR_EINVAL, "par_auto_desc.memory_cap is %g; it must be finite and >= 0", desc->memory_cap);
    if (desc->max_zero < 0 || desc->max_zero > 2 || desc->max_micro_batches < 0)
        return par__fail(PAR_EINVAL, "par_auto_desc: max_zero must be 0 to 2 and max_micro_batches >= 0");
    if ((int)desc->mode < 0 || desc->mode >= PAR_SEARCH_MODE_COUNT)
        return par__fail(PAR_EINVAL, "par_auto_desc: unknown search_mode %d (expected dynamic_programming, "
                                     "sharding_propagation or recursive_programming)",
                         (int)desc->mode);
    if (desc->fixed.dp < 0 || desc->fixed.tp < 0 || desc->fixed.cp < 0 || desc->fixed.pp < 0)
        return par__fail(PAR_EINVAL, "par_auto_desc.fixed: degrees must be >= 0 (0 = searched)");
    memset(&a, 0, sizeof a);
    a.d = desc;
    a.m = desc->model;
    a.c = desc->cluster;
    a.cap = desc->memory_cap > 0 ? desc->memory_cap : desc->cluster.memory_bytes;
    a.out = plans;
    a.capacity = capacity;
    n = a.c.devices;
    if (desc->mode == PAR_SEARCH_RECURSIVE_PROGRAMMING) {
        par__au_recursive(&a, s);
    } else {
        for (tp = 1; tp <= n; tp++) {
            if (n % tp || (tp > 1 && !(s & PAR_AUTO_TP))) continue;
            for (cp = 1; cp <= n / tp; cp++) {
                if ((n / tp) % cp || (cp > 1 && !(s & PAR_AUTO_CP))) continue;
                for (pp = 1; pp <= n / tp / cp; pp++) {
                    if ((n / tp / cp) % pp || (pp > 1 && !(s & PAR_AUTO_PP))) continue;
                    par__au_base(&a, s, n / tp / cp / pp, tp, cp, pp);
                }
            }
        }
    }
    PARALLEL_FREE(a.pp);
    a.cuts.ranked = a.count;
    a.cuts.smallest_memory = a.smallest;
    if (cuts) *cuts = a.cuts;
    *count = a.count;
    if (a.count == 0) {
        if (a.smallest > 0)
            return par__fail(PAR_ECAPACITY,
                             "no plan fits the memory cap of %.4g MiB per rank: the smallest plan needs %.4g MiB "
                             "(%lld plans considered)",
                             a.cap / 1048576.0, a.smallest / 1048576.0, (long long)a.cuts.considered);
        return par__fail(PAR_EINVAL, "no plan divides the model on %d devices (e.g. %s)", n,
                         a.cuts.not_divisible_example[0] ? a.cuts.not_divisible_example
                                                         : a.cuts.schedule_example);
    }
    return PAR_OK;
}

PARALLEL_DEF par_status par_auto_predict(const par_auto_desc *desc, par_auto_plan *plan) {
    par__au a;
    char why[160];
    if (!desc || !plan) return par__fail(PAR_EINVAL, "par_auto_predict: NULL argument");
    PAR__CHECK(par__au_check_model(&desc->model));
    PAR__CHECK(par_cluster_check(&desc->cluster));
    if (plan->dp < 1 || plan->tp < 1 || plan->cp < 1 || plan->pp < 1 || plan->micro_batches < 1 || plan->zero < 0 ||
        plan->zero > 2 || (long long)plan->dp * plan->tp * plan->cp * plan->pp != desc->cluster.devices)
        return par__fail(PAR_EINVAL, "par_auto_predict: dp x tp x cp x pp must be the cluster's %d devices, "
                                     "micro_batches >= 1 and zero 0 to 2",
                         desc->cluster.devices);
    memset(&a, 0, sizeof a);
    a.d = desc;
    a.m = desc->model;
    a.c = desc->cluster;
    a.cap = 1e300; /* predict, do not cut */
    if (par__au_divides(&a, plan, why, sizeof why)) return par__fail(PAR_EINVAL, "par_auto_predict: %s", why);
    par__au_finish(&a, plan);
    PARALLEL_FREE(a.pp);
    if (a.cuts.schedule) return par__fail(PAR_EINVAL, "par_auto_predict: %s", a.cuts.schedule_example);
    return PAR_OK;
}

PARALLEL_DEF int par_auto_plan_name(const par_auto_plan *p, char *buf, size_t size) {
    char cpb[32] = "", ppb[48] = "";
    if (!p) return 0;
    if (p->cp > 1) snprintf(cpb, sizeof cpb, " cp=%d %s", p->cp, p->cp_algo == PAR_CP_RING ? "ring" : "ulysses");
    if (p->pp > 1) snprintf(ppb, sizeof ppb, " pp=%d %s", p->pp, par_pp_kind_name(p->schedule));
    return snprintf(buf, size, "dp=%d tp=%d%s%s%s m=%d zero=%d", p->dp, p->tp, p->sp ? " sp" : "", cpb, ppb,
                    p->micro_batches, p->zero);
}

/* ---- calibration ---------------------------------------------------------------- */

static double par__au_now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int par__au_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* What par__au_time runs: kinds 0, 2, 3, 6 and 7 on rank 0 alone (the others
   wait at the barriers), 1, 4 and 5 on every rank. */
typedef struct par__au_work {
    int kind;
    int64_t n;      /* GEMM columns and depth; floats copied or reduced; SwiGLU elements */
    int64_t rows;   /* GEMM rows */
    par_attn_desc attn;
    int inner;
} par__au_work;

/* Least seconds of `repeats` runs (every rank in step) of `inner` GEMMs
   rows x n x n (kind 0), one all-reduce of n floats (kind 1), `inner` copies
   of n floats (kind 2), `inner` SwiGLU forward + backward of n elements
   (kind 3), `inner` attention forward + backward (kind 6) or `inner` SwiGLU
   forwards of n elements (kind 7: n tiny, the per-call cost); kinds 4 and 5:
   `inner` 256^3 GEMMs each followed (4) or not (5) by a one-float all-reduce:
   their difference is what a blocking collective costs between real compute
   (ranks arriving unevenly, oversubscribed threads waking up). */
static par_status par__au_time(par_ctx *ctx, par_comm_group *world, const par__au_work *w, int repeats, int warm,
                               float *a, float *b, float *c, double *median) {
    const par_compute_table *ct = par_ctx_compute(ctx);
    const par_comm_table *cm = par_ctx_comm(ctx);
    const int kind = w->kind, solo = kind == 0 || kind == 2 || kind == 3 || kind >= 6;
    const int64_t n = w->n;
    const int inner = solo && par_ctx_rank(ctx) != 0 ? 0 : w->inner;
    double t[16];
    int i, k;
    for (i = warm ? 0 : 1; i <= repeats; i++) { /* run 0 (when warm) warms up */
        double t0;
        PAR__CHECK(par_barrier(ctx, world));
        t0 = par__au_now();
        for (k = 0; k < inner; k++) {
            if (kind == 4 || kind == 5) { /* a 256^3 GEMM, then (kind 4) a one-float all-reduce */
                par_gemm_desc g;
                memset(&g, 0, sizeof g);
                g.m = g.n = g.k = 256;
                g.alpha = 1.0f;
                PAR__CHECK(ct->gemm(ct->user, &g, a, b, c));
                if (kind == 4) PAR__CHECK(cm->all_reduce(cm->user, world, a, c, 1, PAR_F32, PAR_REDUCE_SUM, NULL));
            } else if (kind == 0) {
                par_gemm_desc g;
                memset(&g, 0, sizeof g);
                g.m = w->rows, g.n = g.k = n;
                g.alpha = 1.0f;
                PAR__CHECK(ct->gemm(ct->user, &g, a, b, c));
            } else if (kind == 6) { /* q, k, v, o, lse in a; do, dq, dk, dv in b */
                const int64_t e = (int64_t)w->attn.batch * w->attn.q_len * w->attn.q_heads * w->attn.head_dim;
                PAR__CHECK(ct->attention_fwd(ct->user, &w->attn, a, a + e, a + 2 * e, a + 3 * e, c));
                PAR__CHECK(ct->attention_bwd(ct->user, &w->attn, a, a + e, a + 2 * e, a + 3 * e, c, b, b + e,
                                             b + 2 * e, b + 3 * e, 0));
            } else if (kind == 7) {
                PAR__CHECK(ct->swiglu_fwd(ct->user, n, a, b, c));
            } else if (kind == 1) {
                PAR__CHECK(cm->all_reduce(cm->user, world, a, c, n, PAR_F32, PAR_REDUCE_SUM, NULL));
            } else if (kind == 2) {
                PAR__CHECK(ct->memcpy(ct->user, c, k & 1 ? b : a, (size_t)n * sizeof(float),
                                      ct->device_memory ? PAR_COPY_DEVICE_TO_DEVICE : PAR_COPY_HOST_TO_HOST));
            } else { /* SwiGLU forward and backward on n elements: g, u in the first halves, h, dg, du after */
                PAR__CHECK(ct->swiglu_fwd(ct->user, n, a, b, c));
                PAR__CHECK(ct->swiglu_bwd(ct->user, n, a, b, c, a + n, b + n));
            }
        }
        if (ct->synchronize) PAR__CHECK(ct->synchronize(ct->user));
        if (i > 0) t[i - 1] = par__au_now() - t0;
    }
    /* the fastest run: what the machine does when nothing else disturbs it (on a shared machine
       the median moves with the neighbours' load) */
    qsort(t, (size_t)repeats, sizeof t[0], par__au_cmp);
    *median = t[0];
    return PAR_OK;
}

/* The timed attention: `seq` tokens, 256 / head_dim heads (at least 1), one
   sample; its flops as par__au_predict counts them. */
static par_attn_desc par__au_calib_attn(int head_dim, int seq) {
    par_attn_desc d;
    memset(&d, 0, sizeof d);
    d.batch = 1;
    d.q_heads = d.kv_heads = 256 / head_dim > 1 ? 256 / head_dim : 1;
    d.head_dim = head_dim;
    d.q_len = d.k_len = seq;
    d.causal = 1;
    d.dtype = PAR_F32;
    return d;
}

PARALLEL_DEF par_status par_calibrate(par_ctx *ctx, const par_calibrate_desc *desc, par_cluster *out) {
    const par_compute_table *ct;
    par_calibrate_desc d;
    par_comm_group *world = NULL;
    par_cluster c;
    par__au_work w;
    par_attn_desc attn;
    float *a = NULL, *b = NULL, *cc = NULL;
    double t_gemm = 0, t_small = 0, t_hot = 0, t_big = 0, t_copy = 0, t_act = 0, t_sync = 0, t_nosync = 0;
    double t_attn = 0, t_attn_half = 0, t_call = 0;
    int64_t n, rows, count, elems, attn_elems;
    int inner_gemm, inner_copy, inner_act, inner_attn;
    const int inner_call = 256;
    int p, threads;
    uint32_t all;
    par_status st;
    if (!ctx || !out) return par__fail(PAR_EINVAL, "par_calibrate: NULL argument");
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    if (d.gemm_size < 0 || d.gemm_size > 8192 || d.gemm_rows < 0 || d.gemm_rows > (1 << 20) || d.head_dim < 0 ||
        d.head_dim > 256 || d.seq < 0 || d.seq > 8192 || d.bytes < 0 || d.bytes > ((int64_t)1 << 32) ||
        d.repeats < 0 || d.repeats > 15 || !(d.memory_bytes >= 0))
        return par__fail(PAR_EINVAL, "par_calibrate_desc: gemm_size 0..8192, gemm_rows 0..2^20, head_dim 0..256, "
                                     "seq 0..8192, bytes 0..4 GiB, repeats 0..15 and memory_bytes >= 0 (0 = defaults)");
    n = d.gemm_size ? d.gemm_size : 256;
    rows = d.gemm_rows ? d.gemm_rows : n;
    count = (d.bytes ? d.bytes : 4 << 20) / 4;
    if (count < 1) count = 1;
    if (!d.repeats) d.repeats = 5;
    attn = par__au_calib_attn(d.head_dim ? d.head_dim : 64, d.seq ? d.seq : 256);
    attn_elems = attn.q_len * attn.q_heads * attn.head_dim;
    /* enough work per timing (~0.5 Gflop, ~0.25 GB: tens of ms) that the clock's and the scheduler's
       granularity do not matter */
    inner_gemm = (int)(5e8 / (2.0 * (double)rows * (double)n * (double)n)) + 1;
    inner_copy = (int)(1.25e8 / (8.0 * (double)count)) + 1;
    inner_act = (int)(2e6 / (double)(count / 2 > 0 ? count / 2 : 1)) + 1;
    inner_attn = (int)(2e8 / (6.0 * (double)attn.q_len * (double)attn_elems)) + 1;
    ct = par_ctx_compute(ctx);
    if (!ct->gemm || !ct->alloc || !ct->memset)
        return par__fail(PAR_EUNSUPPORTED, "par_calibrate: the compute table has no gemm (or alloc, memset) to time");
    p = par_ctx_size(ctx);
    threads = par_ctx_kernel_threads(ctx);
    all = (1u << par_ctx_mesh(ctx)->ndim) - 1;
    if ((st = par_ctx_group(ctx, all, &world, NULL, NULL)) != PAR_OK) return st;
    elems = (rows > n ? rows : n) * n;
    if (count > elems) elems = count;
    if (4 * attn_elems > elems) elems = 4 * attn_elems;
    st = ct->alloc(ct->user, (size_t)elems * sizeof(float), PAR_MEM_WORKSPACE, (void **)&a);
    if (st == PAR_OK) st = ct->alloc(ct->user, (size_t)elems * sizeof(float), PAR_MEM_WORKSPACE, (void **)&b);
    if (st == PAR_OK) st = ct->alloc(ct->user, (size_t)elems * sizeof(float), PAR_MEM_WORKSPACE, (void **)&cc);
    if (st == PAR_OK) { /* values like activations: zeros would take expf's fast path and flatter SwiGLU */
        float *host = (float *)PARALLEL_MALLOC((size_t)elems * sizeof(float));
        int64_t i;
        if (!host) st = par__fail(PAR_ENOMEM, "par_calibrate: out of memory");
        for (i = 0; host && i < elems; i++) host[i] = 0.25f * (float)(i % 17 - 8);
        if (st == PAR_OK)
            st = ct->memcpy(ct->user, a, host, (size_t)elems * sizeof(float),
                            ct->device_memory ? PAR_COPY_HOST_TO_DEVICE : PAR_COPY_HOST_TO_HOST);
        if (st == PAR_OK)
            st = ct->memcpy(ct->user, b, host, (size_t)elems * sizeof(float),
                            ct->device_memory ? PAR_COPY_HOST_TO_DEVICE : PAR_COPY_HOST_TO_HOST);
        PARALLEL_FREE(host);
    }
    /* rank 0's own rates, interleaved: each repeat times every kind once, so that a slow spell of
       a shared machine lands on one sample of each kind rather than on every sample of one */
    {
        par__au_work ws[6];
        double *outs[6];
        int nk = 0, r, k;
        memset(ws, 0, sizeof ws);
        ws[nk].kind = 0, ws[nk].n = n, ws[nk].rows = rows, ws[nk].inner = inner_gemm, outs[nk++] = &t_gemm;
        ws[nk].kind = 2, ws[nk].n = count, ws[nk].inner = inner_copy, outs[nk++] = &t_copy;
        if (ct->swiglu_fwd && ct->swiglu_bwd) ws[nk].kind = 3, ws[nk].n = count / 2, ws[nk].inner = inner_act, outs[nk++] = &t_act;
        if (ct->swiglu_fwd) ws[nk].kind = 7, ws[nk].n = 64, ws[nk].inner = inner_call, outs[nk++] = &t_call;
        if (ct->attention_fwd && ct->attention_bwd) {
            ws[nk].kind = 6, ws[nk].attn = attn, ws[nk].inner = inner_attn, outs[nk++] = &t_attn;
            ws[nk] = ws[nk - 1], outs[nk] = &t_attn_half;
            ws[nk].attn.batch = 4, ws[nk].attn.q_len = ws[nk].attn.k_len = attn.q_len / 4 > 0 ? attn.q_len / 4 : 1;
            nk++;
        }
        for (r = 0; st == PAR_OK && r < d.repeats; r++)
            for (k = 0; st == PAR_OK && k < nk; k++) {
                double t = 0;
                st = par__au_time(ctx, world, &ws[k], 1, r == 0, a, b, cc, &t);
                if (st == PAR_OK && (r == 0 || t < *outs[k])) *outs[k] = t;
            }
    }
    memset(&w, 0, sizeof w);
    if (st == PAR_OK && p > 1 && elems >= 256 * 256) {
        w.kind = 4, w.n = 1, w.inner = 8;
        st = par__au_time(ctx, world, &w, d.repeats, 1, a, b, cc, &t_sync);
        w.kind = 5;
        if (st == PAR_OK) st = par__au_time(ctx, world, &w, d.repeats, 1, a, b, cc, &t_nosync);
        t_small = t_sync > t_nosync ? (t_sync - t_nosync) / 8 : 0;
    } else if (st == PAR_OK && p > 1) {
        w.kind = 1, w.n = 1, w.inner = 1;
        st = par__au_time(ctx, world, &w, d.repeats, 1, a, b, cc, &t_small);
    }
    w.kind = 1, w.n = 1, w.inner = 1;
    if (st == PAR_OK && p > 1) st = par__au_time(ctx, world, &w, d.repeats, 1, a, b, cc, &t_hot);
    w.n = count;
    if (st == PAR_OK && p > 1) st = par__au_time(ctx, world, &w, d.repeats, 1, a, b, cc, &t_big);
    if (cc) ct->free(ct->user, cc);
    if (b) ct->free(ct->user, b);
    if (a) ct->free(ct->user, a);
    if (st != PAR_OK) return st;
    memset(&c, 0, sizeof c);
    c.devices = c.devices_per_node = p;
    c.flops = inner_gemm * 2.0 * (double)rows * (double)n * (double)n / (t_gemm > 1e-9 ? t_gemm : 1e-9);
    c.memory_bandwidth = inner_copy * 8.0 * (double)count / (t_copy > 1e-9 ? t_copy : 1e-9); /* read + write */
    c.activation_rate = t_act > 0 ? inner_act * (double)(count / 2) / t_act : 0;
    if (t_attn > 0) { /* t = flops / rate + rows x row cost, at two sizes with the same rows */
        const double rows = (double)attn.q_len * attn.q_heads, quarter = (double)(attn.q_len / 4 > 0 ? attn.q_len / 4 : 1);
        const double f1 = 6.0 * (double)attn.q_len * (double)attn_elems,
                     f2 = 6.0 * quarter * 4 * quarter * attn.q_heads * attn.head_dim;
        const double t1 = t_attn / inner_attn, t2 = t_attn_half / inner_attn;
        double per_flop = f1 > f2 && t1 > t2 ? (t1 - t2) / (f1 - f2) : t1 / f1;
        double row = (t1 - per_flop * f1) / rows;
        if (row < 0 || t2 <= 0) row = 0, per_flop = t1 / f1;
        c.attention_rate = 1.0 / per_flop;
        c.attention_row_cost = row;
    }
    c.kernel_latency = t_call > 0 ? t_call / inner_call : 0;
    c.node_parallelism = ct->device_memory ? 0 : par__host_cores() / (threads > 0 ? threads : 1);
    if (!ct->device_memory && c.node_parallelism < 1) c.node_parallelism = 1;
    if (p > 1) {
        const double steps = 2.0 * (p - 1), bytes = 2.0 * (p - 1) / p * 4.0 * (double)count;
        c.intra_latency = t_small / steps;
        c.intra_bandwidth = bytes / (t_big - t_hot > 1e-9 ? t_big - t_hot : 1e-9);
    } else {
        c.intra_bandwidth = 1e12; /* one device: nothing to move; any bandwidth predicts the same */
    }
    c.memory_bytes = d.memory_bytes > 0 ? d.memory_bytes : 8.0 * (1u << 30);
    /* every rank reports rank 0's figures, so that all of them plan alike */
    {
        const par_comm_table *cm = par_ctx_comm(ctx);
        const int me = par_ctx_rank(ctx) == 0;
        double v[9];
        v[0] = me ? c.flops : 0, v[1] = me ? c.intra_latency : 0, v[2] = me ? c.intra_bandwidth : 0;
        v[3] = me ? c.memory_bandwidth : 0, v[4] = me ? c.activation_rate : 0, v[5] = me ? c.attention_rate : 0;
        v[6] = me ? c.kernel_latency : 0, v[7] = me ? (double)c.node_parallelism : 0;
        v[8] = me ? c.attention_row_cost : 0;
        if (p > 1 && (st = cm->all_reduce(cm->user, world, v, v, 9, PAR_F64, PAR_REDUCE_SUM, NULL)) != PAR_OK)
            return st;
        c.flops = v[0], c.intra_latency = v[1], c.intra_bandwidth = v[2], c.memory_bandwidth = v[3];
        c.activation_rate = v[4], c.attention_rate = v[5], c.kernel_latency = v[6];
        c.node_parallelism = (int)v[7];
        c.attention_row_cost = v[8];
    }
    PAR__CHECK(par_cluster_check(&c));
    *out = c;
    return PAR_OK;
}

static int64_t par__au_clamp(double v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : (int64_t)v; }

PARALLEL_DEF par_status par_calibrate_desc_for_model(const par_model_shape *m, int ranks, par_calibrate_desc *d) {
    int64_t n;
    double rows_max;
    if (!m || !d) return par__fail(PAR_EINVAL, "par_calibrate_desc_for_model: NULL argument");
    if (ranks < 1 || m->hidden < 1 || m->heads < 1 || m->seq < 1 || m->batch < 1)
        return par__fail(PAR_EINVAL,
                         "par_calibrate_desc_for_model: ranks %d, hidden %d, heads %d, seq %d and batch %d must all be >= 1",
                         ranks, m->hidden, m->heads, m->seq, m->batch);
    n = par__au_clamp(m->hidden, 16, 1024); /* the model's GEMMs are this narrow: their rate, not a large GEMM's */
    rows_max = 1e9 / (2.0 * (double)n * (double)n);
    if (rows_max > (1 << 20)) rows_max = 1 << 20; /* par_calibrate's limit */
    d->gemm_size = (int)n;
    d->gemm_rows = (int)par__au_clamp((double)m->batch * m->seq / ranks, 16, rows_max > 16 ? (int64_t)rows_max : 16);
    d->head_dim = (int)par__au_clamp((double)m->hidden / m->heads, 1, 256);
    d->seq = (int)par__au_clamp(m->seq, 1, 8192);
    return PAR_OK;
}

typedef struct par__au_threads_arg {
    const par_calibrate_desc *desc;
    par_cluster cluster;
    int threads;
} par__au_threads_arg;

static par_status par__au_threads_rank(par_ctx *ctx, void *p) {
    par__au_threads_arg *a = (par__au_threads_arg *)p;
    par_cluster c;
    par_status st = par_calibrate(ctx, a->desc, &c);
    if (st == PAR_OK && par_ctx_rank(ctx) == 0) a->cluster = c, a->threads = par_ctx_kernel_threads(ctx);
    return st;
}

PARALLEL_DEF par_status par_calibrate_threads(int ranks, const par_calibrate_desc *desc, par_cluster *cluster,
                                              int *kernel_threads) {
    par__au_threads_arg a;
    par_status st;
    if (!cluster) return par__fail(PAR_EINVAL, "par_calibrate_threads: NULL cluster");
    memset(&a, 0, sizeof a);
    a.desc = desc;
    if ((st = par_run_threads(ranks, par__au_threads_rank, &a)) != PAR_OK) return st;
    *cluster = a.cluster;
    if (kernel_threads) *kernel_threads = a.threads;
    return PAR_OK;
}

PARALLEL_DEF int par_cluster_format(const par_cluster *c, char *buf, size_t size) {
    if (!c) return 0;
    return snprintf(buf, size,
                    "devices: %d\ndevices_per_node: %d\nintra_node_bandwidth: %.6g\nintra_node_latency: %.6g\n"
                    "inter_node_bandwidth: %.6g\ninter_node_latency: %.6g\nmemory_per_device: %.6g\n"
                    "flops_per_device: %.6g\nmemory_bandwidth: %.6g\nactivation_rate: %.6g\n"
                    "attention_rate: %.6g\nattention_row_cost: %.6g\nkernel_latency: %.6g\nnode_parallelism: %d\n",
                    c->devices, c->devices_per_node ? c->devices_per_node : c->devices, c->intra_bandwidth,
                    c->intra_latency, c->inter_bandwidth > 0 ? c->inter_bandwidth : c->intra_bandwidth,
                    c->inter_bandwidth > 0 ? c->inter_latency : c->intra_latency, c->memory_bytes, c->flops,
                    c->memory_bandwidth, c->activation_rate, c->attention_rate, c->attention_row_cost,
                    c->kernel_latency, c->node_parallelism);
}

#endif /* PARALLEL_IMPLEMENTATION_DONE */
#endif /* PARALLEL_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT No Attribution License (MIT-0)

Copyright (c) 2026 the parallel.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)

This is free and unencumbered software released into the public domain.

Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.

In jurisdictions that recognize copyright laws, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication for the benefit of the public at large and to
the detriment of our heirs and successors. We intend this dedication to be an
overt act of relinquishment in perpetuity of all present and future rights to
this software under copyright law.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN
ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION
WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.

For more information, please refer to <https://unlicense.org/>
------------------------------------------------------------------------------
*/
