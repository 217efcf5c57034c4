/* examples/llama/layouts.h - where the Llama model's tensors live on the
   dp x tp mesh, derived from MindSpore-style operator strategies.

   The model declares one strategy per operator, as a MindSpore user would:

     q/k/v, gate, up, lm_head   MatMul   x [N, in] . W [out, in]^T   ((dp,1),(tp,1))   column parallel
     o_proj, down_proj          MatMul   x [N, in] . W [out, in]^T   ((dp,tp),(1,tp))  row parallel
     norms                      RmsNorm  x [N, C], gamma [C]         ((dp,1),(1,))
     embedding                  Gather   table [V, C], ids [N]       ((1,1),(dp,)) replicated (vocab_emb_dp)
                                                                     ((tp,1),(dp,)) vocabulary parallel

   par_op_infer checks each strategy and infers the operator's layouts, forward
   communication and mirror (gradient) groups; par_op_info_on_mesh puts them on
   the trainer's mesh. From that the trainer takes every parameter's layout
   (hence its shard), the forward collective of the row-parallel projections
   (all-reduce, or reduce-scatter under sequence parallelism) and, per
   parameter, the devices its gradient is summed over. Under sequence
   parallelism the norms' and the replicated embedding's inputs are split by
   rows over dp and tp (layout [(dp,tp),-1]); a parameter's gradient is partial
   over the mirror dims that split its operator's activations. */
#ifndef LLAMA_LAYOUTS_H
#define LLAMA_LAYOUTS_H

#include "parallel.h"

typedef enum llama_tensor_kind {
    LLAMA_KIND_COLUMN = 0, /* [out, in], split on out over tp */
    LLAMA_KIND_ROW,        /* [out, in], split on in over tp */
    LLAMA_KIND_NORM,       /* [C], replicated */
    LLAMA_KIND_EMBED       /* [V, C] */
} llama_tensor_kind;

typedef struct llama_tensor_place {
    par_layout layout;       /* the parameter on the mesh */
    uint32_t mirror_mask;    /* device dims holding copies (its gradient's reduction group) */
    uint32_t partial_mask;   /* of those, the dims over which the gradient is a partial sum */
    uint32_t forward_mask;   /* row parallel: the forward collective's dims (tp) */
    par_comm_kind forward;   /* row parallel: all_reduce, or reduce_scatter under sp */
} llama_tensor_place;

typedef struct llama_mesh_info {
    par_mesh mesh;           /* "dp=D,tp=T" */
    int dp, tp, sp, vocab_emb_dp;
    int64_t tokens;          /* global tokens per micro-batch step: batch x seq */
} llama_mesh_info;

static PAR__MAYBE_UNUSED par_status llama_place_op(const llama_mesh_info *m, par_op_desc *op, const char *strategy,
                                                  par_op_info *info) {
    par_strategy st;
    par_status s = par_strategy_parse(strategy, &st);
    if (s != PAR_OK) return s;
    if ((s = par_op_infer(op, &st, par_mesh_size(&m->mesh), info)) != PAR_OK) return s;
    return par_op_info_on_mesh(info, &m->mesh, NULL, info);
}

/* Place one parameter of the given kind and global shape. */
static PAR__MAYBE_UNUSED par_status llama_place_tensor(const llama_mesh_info *m, llama_tensor_kind kind,
                                                      const int64_t *shape, llama_tensor_place *out) {
    par_op_desc op;
    par_op_info info;
    char text[96];
    int param = 1; /* input index of the parameter */
    par_layout act; /* the operator's activation input, whose split dims make the gradient partial */
    par_status s;
    memset(&op, 0, sizeof op);
    memset(out, 0, sizeof *out);
    switch (kind) {
    case LLAMA_KIND_COLUMN:
    case LLAMA_KIND_ROW:
        op.kind = PAR_OP_MATMUL, op.transpose_b = 1, op.params = 2;
        op.ndim[0] = 2, op.shape[0][0] = m->tokens, op.shape[0][1] = shape[1];
        op.ndim[1] = 2, op.shape[1][0] = shape[0], op.shape[1][1] = shape[1];
        op.reduce_scatter = kind == LLAMA_KIND_ROW && m->sp;
        if (kind == LLAMA_KIND_COLUMN) snprintf(text, sizeof text, "((%d,1),(%d,1))", m->dp, m->tp);
        else snprintf(text, sizeof text, "((%d,%d),(1,%d))", m->dp, m->tp, m->tp);
        break;
    case LLAMA_KIND_NORM:
        op.kind = PAR_OP_RMSNORM, op.params = 2;
        op.ndim[0] = 2, op.shape[0][0] = m->tokens, op.shape[0][1] = shape[0];
        op.ndim[1] = 1, op.shape[1][0] = shape[0];
        snprintf(text, sizeof text, "((%d,1),(1,))", m->dp);
        break;
    case LLAMA_KIND_EMBED:
        op.kind = PAR_OP_GATHER, op.params = 1, param = 0;
        op.ndim[0] = 2, op.shape[0][0] = shape[0], op.shape[0][1] = shape[1];
        op.ndim[1] = 1, op.shape[1][0] = m->tokens;
        if (m->vocab_emb_dp || m->tp == 1) snprintf(text, sizeof text, "((1,1),(%d,))", m->dp);
        else snprintf(text, sizeof text, "((%d,1),(%d,))", m->tp, m->dp);
        break;
    default:
        return par_set_error(PAR_EINVAL, "llama_place_tensor: unknown kind %d", (int)kind);
    }
    if ((s = llama_place_op(m, &op, text, &info)) != PAR_OK) return s;
    out->layout = info.inputs[param];
    out->mirror_mask = info.mirror[param].kind == PAR_COMM_NONE ? 0u : info.mirror[param].dev_mask;
    act = info.inputs[kind == LLAMA_KIND_EMBED ? 1 : 0];
    /* under sequence parallelism the norm and embedding rows are split over tp too */
    if (m->sp && m->tp > 1 && (kind == LLAMA_KIND_NORM || kind == LLAMA_KIND_EMBED)) {
        const int tp_dim = par_mesh_dev_dim(&m->mesh, "tp"), dp_dim = par_mesh_dev_dim(&m->mesh, "dp");
        act.map.count[0] = 2, act.map.dev[0][0] = (int8_t)dp_dim, act.map.dev[0][1] = (int8_t)tp_dim;
        if ((s = par_layout_check(&act)) != PAR_OK) return s;
    }
    out->partial_mask = out->mirror_mask & par_layout_split_dims(&act);
    if (info.num_forward > 0) out->forward = info.forward[0].kind, out->forward_mask = info.forward[0].dev_mask;
    return PAR_OK;
}

#endif /* LLAMA_LAYOUTS_H */
