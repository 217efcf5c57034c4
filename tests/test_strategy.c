#include "test.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>

/* Expected values below are derived by hand from MindSpore's rules (comments show
   the arithmetic): device matrix = iteration shards, then the repeated dim; map
   value of device-matrix position i (from the left) = n-1-i. */

#define CHECK_NEAR(got, want)                                                                                          \
    do {                                                                                                               \
        double g_ = (got), w_ = (want);                                                                                \
        CHECK_MSG(fabs(g_ - w_) <= 1e-9 * fabs(w_) + 1e-300, "got %.17g, want %.17g", g_, w_);                         \
    } while (0)

/* An op desc from "16x32,32x64" (inputs separated by commas, dims by 'x'). */
static par_op_desc make_op(par_op_kind kind, const char *shapes) {
    par_op_desc op;
    const char *p = shapes;
    int i = 0;
    memset(&op, 0, sizeof op);
    op.kind = kind;
    while (*p) {
        char *end;
        op.shape[i][op.ndim[i]++] = strtoll(p, &end, 10);
        p = end;
        if (*p == ',') i++;
        if (*p) p++;
    }
    if (kind == PAR_OP_ELEMENTWISE) op.num_inputs = i + 1;
    return op;
}

/* Parse and infer; the strategy text must parse. */
static par_status infer(const par_op_desc *op, const char *text, int devices, par_op_info *info) {
    par_strategy st;
    par_status status = par_strategy_parse(text, &st);
    if (status != PAR_OK) {
        fprintf(stderr, "test bug: strategy %s does not parse: %s\n", text, par_last_error());
        return status;
    }
    return par_op_infer(op, &st, devices, info);
}

/* Text of a layout / mesh / strategy (a few rotating buffers). */
static char text_bufs[8][256];
static int text_next;
static char *next_buf(void) { return text_bufs[text_next++ % 8]; }
static const char *L(const par_layout *l) {
    char *b = next_buf();
    par_layout_format(l, b, 256);
    return b;
}
static const char *M(const par_mesh *m) {
    char *b = next_buf();
    par_mesh_format(m, b, 256);
    return b;
}
static const char *S(const par_strategy *s) {
    char *b = next_buf();
    par_strategy_format(s, b, 256);
    return b;
}
static const char *shape_text(const par_layout *l) {
    char *b = next_buf();
    int t, n = 0;
    n += snprintf(b + n, 256 - (size_t)n, "[");
    for (t = 0; t < l->ndim; t++) n += snprintf(b + n, 256 - (size_t)n, "%s%lld", t ? "," : "", (long long)l->shape[t]);
    snprintf(b + n, 256 - (size_t)n, "]");
    return b;
}

static void check_comm(const par_comm_op *c, par_comm_kind kind, int group, uint32_t mask, long long bytes) {
    CHECK_STR(par_comm_kind_name(c->kind), par_comm_kind_name(kind));
    CHECK_INT(c->group, group);
    CHECK_INT(c->dev_mask, mask);
    CHECK_INT(c->bytes, bytes);
}

static void test_names(void) {
    par_op_kind k;
    CHECK_STR(par_op_kind_name(PAR_OP_MATMUL), "matmul");
    CHECK_STR(par_op_kind_name(PAR_OP_CROSS_ENTROPY), "cross_entropy");
    CHECK_STR(par_op_kind_name(PAR_OP_REDUCE_MEAN), "reduce_mean");
    CHECK_STR(par_op_kind_name((par_op_kind)99), "?");
    CHECK_OK(par_op_kind_parse("flash_attention", &k));
    CHECK_INT(k, PAR_OP_FLASH_ATTENTION);
    CHECK_OK(par_op_kind_parse("MatMul", &k));
    CHECK_INT(k, PAR_OP_MATMUL);
    CHECK_OK(par_op_kind_parse("BATCH_MATMUL", &k));
    CHECK_INT(k, PAR_OP_BATCH_MATMUL);
    CHECK_OK(par_op_kind_parse("BatchMatMul", &k));
    CHECK_INT(k, PAR_OP_BATCH_MATMUL);
    CHECK_OK(par_op_kind_parse("Mul", &k));
    CHECK_INT(k, PAR_OP_ELEMENTWISE);
    CHECK_OK(par_op_kind_parse("SoftmaxCrossEntropyWithLogits", &k));
    CHECK_INT(k, PAR_OP_CROSS_ENTROPY);
    CHECK_OK(par_op_kind_parse("FlashAttentionScore", &k));
    CHECK_INT(k, PAR_OP_FLASH_ATTENTION);
    CHECK_OK(par_op_kind_parse("reducemean", &k));
    CHECK_INT(k, PAR_OP_REDUCE_MEAN);
    CHECK_ERR(par_op_kind_parse("Conv2D", &k), PAR_EPARSE, "unknown operator 'Conv2D'");
    CHECK_ERR(par_op_kind_parse(NULL, &k), PAR_EINVAL, "NULL");
    CHECK_STR(par_comm_kind_name(PAR_COMM_NONE), "none");
    CHECK_STR(par_comm_kind_name(PAR_COMM_ALL_REDUCE), "all_reduce");
    CHECK_STR(par_comm_kind_name(PAR_COMM_REDUCE_SCATTER), "reduce_scatter");
    CHECK_STR(par_comm_kind_name(PAR_COMM_ALL_TO_ALL), "all_to_all");
    CHECK_STR(par_comm_kind_name((par_comm_kind)17), "?");
}

static void test_parse_format(void) {
    par_strategy s;
    char buf[64];
    CHECK_OK(par_strategy_parse("((2,1),(1,4))", &s));
    CHECK_INT(s.num_inputs, 2);
    CHECK_INT(s.ndim[0], 2);
    CHECK_INT(s.ndim[1], 2);
    CHECK_INT(s.shard[0][0], 2);
    CHECK_INT(s.shard[0][1], 1);
    CHECK_INT(s.shard[1][0], 1);
    CHECK_INT(s.shard[1][1], 4);
    CHECK_STR(S(&s), "((2,1),(1,4))");
    CHECK_OK(par_strategy_parse("((8,),)", &s));
    CHECK_INT(s.num_inputs, 1);
    CHECK_INT(s.ndim[0], 1);
    CHECK_INT(s.shard[0][0], 8);
    CHECK_STR(S(&s), "((8,),)");
    CHECK_OK(par_strategy_parse("  ( ( 2 , 1 ) ,\t( 1,4 ,) , )  ", &s));
    CHECK_STR(S(&s), "((2,1),(1,4))");
    CHECK_OK(par_strategy_parse("((1,2),(3,),(4,5,6))", &s));
    CHECK_STR(S(&s), "((1,2),(3,),(4,5,6))");
    /* snprintf semantics: full length even when truncated */
    CHECK_INT(par_strategy_format(&s, NULL, 0), 20);
    CHECK_INT(par_strategy_format(&s, buf, 5), 20);
    CHECK_STR(buf, "((1,");

    CHECK_ERR(par_strategy_parse("((2,1)(1,4))", &s), PAR_EPARSE, "expected ',' or ')' at position 6, found '('");
    CHECK_ERR(par_strategy_parse("((2,1),(1,4)", &s), PAR_EPARSE, "expected ',' or ')' at position 12, found the end");
    CHECK_ERR(par_strategy_parse("((2,1),(1,4))x", &s), PAR_EPARSE, "expected the end of the text at position 13");
    CHECK_ERR(par_strategy_parse("2,1", &s), PAR_EPARSE, "expected '(' opening the strategy at position 0");
    CHECK_ERR(par_strategy_parse("(2,1)", &s), PAR_EPARSE,
              "expected '(' opening the shard tuple of input at position 1");
    CHECK_ERR(par_strategy_parse("((2,x))", &s), PAR_EPARSE, "'x' at position 4 is an axis name");
    CHECK_ERR(par_strategy_parse("((2,+))", &s), PAR_EPARSE,
              "expected a shard (a positive integer) at position 4, found '+'");
    CHECK_ERR(par_strategy_parse("((2,,1))", &s), PAR_EPARSE, "at position 4, found ','");
    CHECK_ERR(par_strategy_parse("((99999999999999999999,1))", &s), PAR_EPARSE, "position 2 is too large");
    CHECK_ERR(par_strategy_parse("((1,),(1,),(1,),(1,),(1,))", &s), PAR_EPARSE, "more than 4 input tuples");
    CHECK_ERR(par_strategy_parse("((1,1,1,1,1,1,1,1,1),)", &s), PAR_EPARSE, "input 0 has more than 8 shards");
    CHECK_ERR(par_strategy_parse("((2,0),(1,4))", &s), PAR_ESTRATEGY,
              "input 0 dim 1 has shard 0; shards must be positive");
    CHECK_ERR(par_strategy_parse("((2,1),(-4,1))", &s), PAR_ESTRATEGY, "input 1 dim 0 has shard -4");
    CHECK_ERR(par_strategy_parse(NULL, &s), PAR_EINVAL, "NULL");
}

/* a [16,32] x b [32,64], b a parameter. */
static void test_matmul(void) {
    par_op_desc op = make_op(PAR_OP_MATMUL, "16x32,32x64");
    par_op_info info;
    par_strategy st;
    op.params = 2;

    /* ((2,1),(1,4)) on 8: dev [M,K,N] = [2,1,4]; M->2, K->1, N->0 */
    CHECK_OK(infer(&op, "((2,1),(1,4))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1,4]");
    CHECK_INT(info.repeated, 1);
    CHECK_INT(info.num_inputs, 2);
    CHECK_INT(info.num_outputs, 1);
    CHECK_STR(L(&info.inputs[0]), "[2,1]");
    CHECK_STR(L(&info.inputs[1]), "[1,0]");
    CHECK_STR(L(&info.outputs[0]), "[2,0]");
    CHECK_STR(shape_text(&info.outputs[0]), "[16,64]");
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    /* b is replicated over M's dim (dev 2, size 2): local [32,16] = 2048 B, 2*(1/2)*2048 */
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 2, 0x4, 2048);
    /* flops 2*16*32*64/8; memory a [8,32] 1024 B + b 2048 B + out [8,16] 512 B */
    CHECK_NEAR(info.cost.compute_flops, 8192);
    CHECK_NEAR(info.cost.comm_bytes, 2048);
    CHECK_NEAR(info.cost.memory_bytes, 3584);
    CHECK_NEAR(info.cost.total, 8192 / 1e12 + 2048 / 1e10);

    /* ((1,4),(4,1)) on 4: dev [1,4,1]; K split -> out partial on dev 1 */
    CHECK_OK(infer(&op, "((1,4),(4,1))", 4, &info));
    CHECK_STR(M(&info.dev_matrix), "[1,4,1]");
    CHECK_STR(L(&info.inputs[0]), "[2,1]");
    CHECK_STR(L(&info.inputs[1]), "[1,0]");
    CHECK_STR(L(&info.outputs[0]), "[2,0] partial=1");
    CHECK_INT(info.outputs[0].map.partial, 0x2);
    CHECK_INT(info.num_forward, 1);
    /* out local [16,64] = 4096 B; 2*(3/4)*4096 */
    check_comm(&info.forward[0], PAR_COMM_ALL_REDUCE, 4, 0x2, 6144);
    CHECK_INT(info.forward[0].count, 1);
    CHECK_INT(info.forward[0].tensor_dim, -1);
    /* b's unused dim (dev 2) has size 1: nothing to mirror */
    CHECK_INT(info.mirror[1].kind, PAR_COMM_NONE);

    /* repeated calculation: ((2,1),(1,2)) uses 4 of 8 devices -> dev [2,1,2,2] */
    CHECK_OK(infer(&op, "((2,1),(1,2))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1,2,2]");
    CHECK_INT(info.repeated, 2);
    CHECK_STR(L(&info.inputs[0]), "[3,2]");
    CHECK_STR(L(&info.inputs[1]), "[2,1]");
    CHECK_STR(L(&info.outputs[0]), "[3,1]");
    /* b unused: M (dev 3) x repeated (dev 0) = 4; local [32,32] = 4096 B, 2*(3/4)*4096 */
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 4, 0x9, 6144);

    /* cost model knobs and dtype */
    op.device_flops = 1e9;
    op.link_bandwidth = 2e9;
    op.dtype = PAR_BF16;
    CHECK_OK(infer(&op, "((2,1),(1,4))", 8, &info));
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 2, 0x4, 1024);
    CHECK_NEAR(info.cost.memory_bytes, 1792);
    CHECK_NEAR(info.cost.total, 8192 / 1e9 + 1024 / 2e9);
    op.device_flops = op.link_bandwidth = 0;
    op.dtype = PAR_F32;

    /* reduce_scatter: ((2,4),(4,1)) on 8, dev [2,4,1]; out dim 0 split (M=dev 2, K=dev 1) */
    op.reduce_scatter = 1;
    CHECK_OK(infer(&op, "((2,4),(4,1))", 8, &info));
    CHECK_STR(L(&info.outputs[0]), "[(2,1),0]");
    CHECK_INT(info.outputs[0].map.partial, 0);
    CHECK_INT(info.num_forward, 1);
    /* partial out local [8,64] = 2048 B; (3/4)*2048 */
    check_comm(&info.forward[0], PAR_COMM_REDUCE_SCATTER, 4, 0x2, 1536);
    CHECK_INT(info.forward[0].tensor_dim, 0);
    op.reduce_scatter = 0;

    /* errors */
    CHECK_ERR(infer(&op, "((1,1),(1,1),(1,1))", 8, &info), PAR_ESTRATEGY,
              "matmul: strategy has 3 inputs, the operator takes 2");
    CHECK_ERR(infer(&op, "((1,1,1),(1,1))", 8, &info), PAR_ESTRATEGY,
              "matmul: input 0 strategy has 3 entries, the input has 2 dims");
    CHECK_ERR(infer(&op, "((4,2),(2,2))", 8, &info), PAR_ESTRATEGY,
              "matmul: shards multiply to 16, which does not divide the 8 devices");
    CHECK_ERR(infer(&op, "((2,2),(2,2))", 12, &info), PAR_ESTRATEGY,
              "shards multiply to 8, which does not divide the 12 devices");
    CHECK_ERR(infer(&op, "((1,2),(4,1))", 8, &info), PAR_ESTRATEGY,
              "matmul: contraction dim split 2 in input 0 dim 1 but 4 in input 1 dim 0 (they must match)");
    CHECK_ERR(infer(&op, "((3,1),(1,1))", 3, &info), PAR_ESTRATEGY,
              "input 0 dim 0 (size 16) is not divisible by its shard 3");
    par_strategy_parse("((1,1),(1,1))", &st);
    st.shard[0][0] = 0;
    CHECK_ERR(par_op_infer(&op, &st, 8, &info), PAR_ESTRATEGY,
              "matmul: input 0 dim 0 has shard 0; shards must be positive integers");
    st.shard[0][0] = 1;
    st.shard[1][1] = -2;
    CHECK_ERR(par_op_infer(&op, &st, 8, &info), PAR_ESTRATEGY, "input 1 dim 1 has shard -2");
    CHECK_ERR(par_op_infer(&op, &st, 0, &info), PAR_EINVAL, "matmul: 0 devices");
    CHECK_ERR(par_op_infer(&op, NULL, 8, &info), PAR_EINVAL, "NULL");

    /* the operator's own name in messages */
    op = make_op(PAR_OP_MATMUL, "16x30,30x64");
    op.name = "MatMul";
    CHECK_ERR(infer(&op, "((1,1),(4,1))", 8, &info), PAR_ESTRATEGY, "");
    CHECK_STR(par_last_error(), "MatMul: input 1 dim 0 (size 30) is not divisible by its shard 4");

    /* reduce_scatter that does not divide: M=4 split 2, K group 4 -> 4 % 8 */
    op = make_op(PAR_OP_MATMUL, "4x32,32x64");
    op.reduce_scatter = 1;
    CHECK_ERR(infer(&op, "((2,4),(4,1))", 8, &info), PAR_ESTRATEGY,
              "reduce_scatter splits output dim 0 (size 4, already split 2 ways) 4 more ways");

    /* desc errors */
    op = make_op(PAR_OP_MATMUL, "16x32,30x64");
    CHECK_ERR(infer(&op, "((1,1),(1,1))", 1, &info), PAR_ESHAPE,
              "contraction sizes differ: input 0 dim 1 is 32, input 1 dim 0 is 30");
    op = make_op(PAR_OP_MATMUL, "16,32x64");
    CHECK_ERR(infer(&op, "((1,),(1,1))", 1, &info), PAR_ESHAPE, "matmul: inputs need at least 2 dims");
    op = make_op(PAR_OP_MATMUL, "16x0,32x64");
    CHECK_ERR(infer(&op, "((1,1),(1,1))", 1, &info), PAR_ESHAPE, "input 0 dim 1 has size 0");
    op = make_op(PAR_OP_MATMUL, "16x32,32x64");
    op.num_inputs = 3;
    CHECK_ERR(infer(&op, "((1,1),(1,1))", 1, &info), PAR_EINVAL, "num_inputs is 3; the operator takes 2");
    op.num_inputs = 0;
    op.dtype = (par_dtype)42;
    CHECK_ERR(infer(&op, "((1,1),(1,1))", 1, &info), PAR_EINVAL, "dtype 42");
    op.dtype = PAR_F32;
    op.kind = (par_op_kind)42;
    CHECK_ERR(infer(&op, "((1,1),(1,1))", 1, &info), PAR_EINVAL, "unknown operator kind 42");
}

static void test_matmul_transposed(void) {
    par_op_desc op = make_op(PAR_OP_MATMUL, "16x32,64x32"); /* b is [N,K] */
    par_op_info info;
    op.transpose_b = 1;
    op.params = 2;
    /* dev [M,K,N] = [2,1,4]: b dims (N,K) -> [0,1] */
    CHECK_OK(infer(&op, "((2,1),(4,1))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1,4]");
    CHECK_STR(L(&info.inputs[0]), "[2,1]");
    CHECK_STR(L(&info.inputs[1]), "[0,1]");
    CHECK_STR(L(&info.outputs[0]), "[2,0]");
    CHECK_STR(shape_text(&info.outputs[0]), "[16,64]");
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 2, 0x4, 2048);
    CHECK_ERR(infer(&op, "((1,2),(1,4))", 8, &info), PAR_ESTRATEGY,
              "contraction dim split 2 in input 0 dim 1 but 4 in input 1 dim 1");

    op = make_op(PAR_OP_MATMUL, "32x16,32x64"); /* a is [K,M] */
    op.transpose_a = 1;
    CHECK_OK(infer(&op, "((1,2),(1,4))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1,4]");
    CHECK_STR(L(&info.inputs[0]), "[1,2]");
    CHECK_STR(L(&info.outputs[0]), "[2,0]");
    CHECK_ERR(infer(&op, "((2,1),(1,4))", 8, &info), PAR_ESTRATEGY,
              "contraction dim split 2 in input 0 dim 0 but 1 in input 1 dim 0");
}

static void test_batch_matmul(void) {
    par_op_desc op = make_op(PAR_OP_BATCH_MATMUL, "4x16x32,4x32x64");
    par_op_info info;
    /* dev [batch,M,K,N] = [2,2,1,2]: batch->3, M->2, K->1, N->0 */
    CHECK_OK(infer(&op, "((2,2,1),(2,1,2))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,2,1,2]");
    CHECK_STR(L(&info.inputs[0]), "[3,2,1]");
    CHECK_STR(L(&info.inputs[1]), "[3,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[3,2,0]");
    CHECK_INT(info.num_forward, 0);
    CHECK_NEAR(info.cost.compute_flops, 2.0 * 4 * 16 * 32 * 64 / 8);
    CHECK_ERR(infer(&op, "((2,1,1),(4,1,1))", 8, &info), PAR_ESTRATEGY,
              "batch_matmul: batch dim 0 split 2 in input 0 dim 0 but 4 in input 1 dim 0 (they must match)");
    CHECK_ERR(infer(&op, "((1,1,2),(1,1,1))", 8, &info), PAR_ESTRATEGY,
              "contraction dim split 2 in input 0 dim 2 but 1 in input 1 dim 1");

    /* shared 2-D weights: b [32,64] has only K, N entries; dev [2,1,2,2] */
    op = make_op(PAR_OP_BATCH_MATMUL, "4x16x32,32x64");
    op.params = 2;
    CHECK_OK(infer(&op, "((2,1,2),(2,2))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1,2,2]");
    CHECK_STR(L(&info.inputs[0]), "[3,2,1]");
    CHECK_STR(L(&info.inputs[1]), "[1,0]");
    CHECK_STR(L(&info.outputs[0]), "[3,2,0] partial=1");
    /* out local [2,16,32] = 4096 B, 2*(1/2)*4096 */
    check_comm(&info.forward[0], PAR_COMM_ALL_REDUCE, 2, 0x2, 4096);
    /* b unused: batch (dev 3, size 2); M (dev 2) has size 1; local [16,32] = 2048 B */
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 2, 0x8, 2048);

    op = make_op(PAR_OP_BATCH_MATMUL, "4x16x32,2x32x64");
    CHECK_ERR(infer(&op, "((1,1,1),(1,1,1))", 1, &info), PAR_ESHAPE,
              "batch dim 0 differs: 4 in input 0 (dim 0), 2 in input 1 (dim 0); batch dims must be equal or 1");
    /* batch dims align from the right: b's 3 meets a's dim 1 (4) */
    op = make_op(PAR_OP_BATCH_MATMUL, "2x4x16x32,3x32x64");
    CHECK_ERR(infer(&op, "((1,1,1,1),(1,1,1))", 1, &info), PAR_ESHAPE,
              "batch dim 1 differs: 4 in input 0 (dim 1), 3 in input 1 (dim 0)");
}

static void test_elementwise(void) {
    par_op_desc op = make_op(PAR_OP_ELEMENTWISE, "8x16,16"); /* x + bias */
    par_op_info info;
    op.params = 2;
    /* dev = broadcast output [8,16] shards [2,4]; bias aligned to output dim 1 */
    CHECK_OK(infer(&op, "((2,4),(4,))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4]");
    CHECK_STR(L(&info.inputs[0]), "[1,0]");
    CHECK_STR(L(&info.inputs[1]), "[0]");
    CHECK_STR(L(&info.outputs[0]), "[1,0]");
    CHECK_INT(info.num_forward, 0);
    /* bias [4] local = 16 B, replicated over dev 1 (size 2): 2*(1/2)*16 */
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 2, 0x2, 16);
    CHECK_NEAR(info.cost.compute_flops, 8 * 16 / 8);
    /* on 16 devices: repeated 2 -> dev [2,4,2]; bias mirror over dev 2 and dev 0 */
    CHECK_OK(infer(&op, "((2,4),(4,))", 16, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,2]");
    CHECK_STR(L(&info.inputs[0]), "[2,1]");
    CHECK_STR(L(&info.inputs[1]), "[1]");
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 4, 0x5, 24);
    CHECK_ERR(infer(&op, "((2,4),(2,))", 8, &info), PAR_ESTRATEGY,
              "elementwise: output dim 1 split 4 in input 0 dim 1 but 2 in input 1 dim 0 (they must match)");

    /* size-1 dims broadcast: they map to -1 and may not be split */
    op = make_op(PAR_OP_ELEMENTWISE, "8x16,1x16");
    CHECK_OK(infer(&op, "((2,4),(1,4))", 8, &info));
    CHECK_STR(L(&info.inputs[1]), "[-1,0]");
    CHECK_ERR(infer(&op, "((2,4),(2,4))", 8, &info), PAR_ESTRATEGY,
              "input 1 dim 0 has size 1 and is broadcast against size 8, so it may not be split (shard 2)");
    op = make_op(PAR_OP_ELEMENTWISE, "8x1,1x16");
    CHECK_OK(infer(&op, "((2,1),(1,4))", 8, &info));
    CHECK_STR(L(&info.inputs[0]), "[1,-1]");
    CHECK_STR(L(&info.inputs[1]), "[-1,0]");
    CHECK_STR(L(&info.outputs[0]), "[1,0]");
    CHECK_STR(shape_text(&info.outputs[0]), "[8,16]");

    /* three inputs, different ranks */
    op = make_op(PAR_OP_ELEMENTWISE, "8x16,8x1,16");
    CHECK_OK(infer(&op, "((2,4),(2,1),(4,))", 8, &info));
    CHECK_STR(L(&info.inputs[1]), "[1,-1]");
    CHECK_STR(L(&info.inputs[2]), "[0]");

    op = make_op(PAR_OP_ELEMENTWISE, "8x16,3");
    CHECK_ERR(infer(&op, "((1,1),(1,))", 1, &info), PAR_ESHAPE,
              "input 1 dim 0 (size 3) does not broadcast against input 0 dim 1 (size 16)");
    op.num_inputs = 5;
    CHECK_ERR(infer(&op, "((1,1),(1,))", 1, &info), PAR_EINVAL, "num_inputs is 5; the operator takes 1 to 4");
}

static void test_norms(void) {
    par_op_desc op = make_op(PAR_OP_RMSNORM, "4x8x16,16");
    par_op_info info;
    op.params = 2;
    /* dev [2,4,1]; gamma walks the normalized dim (dev 0, size 1) */
    CHECK_OK(infer(&op, "((2,4,1),(1,))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,1]");
    CHECK_STR(L(&info.inputs[0]), "[2,1,0]");
    CHECK_STR(L(&info.inputs[1]), "[0]");
    CHECK_STR(L(&info.outputs[0]), "[2,1,0]");
    CHECK_INT(info.num_forward, 0);
    /* gamma 64 B replicated on all 8: 2*(7/8)*64 */
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 8, 0x6, 112);
    CHECK_NEAR(info.cost.compute_flops, 5.0 * 2 * 2 * 16);
    CHECK_ERR(infer(&op, "((1,1,2),(2,))", 8, &info), PAR_ESTRATEGY,
              "rmsnorm: input 0 dim 2 is a normalized axis and may not be split (shard 2)");
    CHECK_ERR(infer(&op, "((2,1,1),(2,))", 8, &info), PAR_ESTRATEGY,
              "input 1 dim 0 is a normalized axis and may not be split");
    op.axes = 0x2;
    CHECK_ERR(infer(&op, "((1,1,1),(1,))", 1, &info), PAR_EINVAL, "the normalized axes 0x2 must be the trailing dims");
    op.axes = 0x10;
    CHECK_ERR(infer(&op, "((1,1,1),(1,))", 1, &info), PAR_EINVAL, "axes 0x10 name dims beyond input 0's 3");
    op = make_op(PAR_OP_RMSNORM, "4x8x16,8");
    CHECK_ERR(infer(&op, "((1,1,1),(1,))", 1, &info), PAR_ESHAPE, "input 1 (gamma) has shape [8]; it must be [16]");

    /* LayerNorm over the last two dims on 4 devices with 2 used: dev [2,1,1,2] */
    op = make_op(PAR_OP_LAYERNORM, "4x16x8,16x8,16x8");
    op.axes = 0x6;
    op.params = 0x6;
    CHECK_OK(infer(&op, "((2,1,1),(1,1),(1,1))", 4, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1,1,2]");
    CHECK_STR(L(&info.inputs[0]), "[3,2,1]");
    CHECK_STR(L(&info.inputs[1]), "[2,1]");
    CHECK_STR(L(&info.inputs[2]), "[2,1]");
    CHECK_STR(L(&info.outputs[0]), "[3,2,1]");
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    /* gamma, beta [16,8] = 512 B, unused: batch (dev 3) x repeated (dev 0) = 4; 2*(3/4)*512 */
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 4, 0x9, 768);
    check_comm(&info.mirror[2], PAR_COMM_ALL_REDUCE, 4, 0x9, 768);
    CHECK_ERR(infer(&op, "((1,2,1),(1,1),(1,1))", 4, &info), PAR_ESTRATEGY,
              "layernorm: input 0 dim 1 is a normalized axis");
    CHECK_ERR(infer(&op, "((1,1,1),(1,1))", 4, &info), PAR_ESTRATEGY, "strategy has 2 inputs, the operator takes 3");
    op.num_inputs = 2;
    CHECK_ERR(infer(&op, "((1,1,1),(1,1))", 4, &info), PAR_EINVAL, "num_inputs is 2; the operator takes 3");
    op = make_op(PAR_OP_LAYERNORM, "4x16x8,16x8,8");
    op.axes = 0x6;
    CHECK_ERR(infer(&op, "((1,1,1),(1,1),(1,))", 1, &info), PAR_ESHAPE,
              "input 2 (beta) has shape [8]; it must be [16,8]");
}

static void test_softmax(void) {
    par_op_desc op = make_op(PAR_OP_SOFTMAX, "8x4");
    par_op_info info;
    op.name = "Softmax";
    CHECK_ERR(infer(&op, "((1,2),)", 2, &info), PAR_ESTRATEGY, "");
    CHECK_STR(par_last_error(), "Softmax: input 0 dim 1 is the softmax axis and may not be split (shard 2)");
    CHECK_OK(infer(&op, "((2,1),)", 2, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1]");
    CHECK_STR(L(&info.inputs[0]), "[1,0]");
    CHECK_STR(L(&info.outputs[0]), "[1,0]");
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    CHECK_NEAR(info.cost.compute_flops, 5.0 * 4 * 4);
    op.axes = 0x1; /* softmax over dim 0 */
    CHECK_OK(infer(&op, "((1,2),)", 2, &info));
    CHECK_STR(M(&info.dev_matrix), "[1,2]");
    CHECK_ERR(infer(&op, "((2,1),)", 2, &info), PAR_ESTRATEGY, "input 0 dim 0 is the softmax axis");
    op.axes = 0x3;
    CHECK_ERR(infer(&op, "((1,1),)", 1, &info), PAR_EINVAL, "axes 0x3 must name exactly one");

    /* 2^61 f32 elements are 2^63 bytes: byte counts saturate instead of wrapping */
    op = make_op(PAR_OP_SOFTMAX, "2305843009213693952");
    op.params = 1;
    CHECK_OK(infer(&op, "((1,),)", 2, &info));
    CHECK(info.mirror[0].bytes > ((int64_t)1 << 62));
    CHECK(info.cost.memory_bytes > 0 && info.cost.comm_bytes > 0 && info.cost.total > 0);
}

/* table [1000,64] (parameter), indices [8,128] -> out [8,128,64] */
static void test_gather(void) {
    par_op_desc op = make_op(PAR_OP_GATHER, "1000x64,8x128");
    par_op_info info;
    op.params = 1;
    /* vocab- and hidden-parallel table: dev [1,1,4,2]; idx->3,2; V->1; H->0 */
    CHECK_OK(infer(&op, "((4,2),(1,1))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[1,1,4,2]");
    CHECK_STR(L(&info.inputs[0]), "[1,0]");
    CHECK_STR(L(&info.inputs[1]), "[3,2]");
    CHECK_STR(L(&info.outputs[0]), "[3,2,0] partial=1");
    CHECK_STR(shape_text(&info.outputs[0]), "[8,128,64]");
    /* out local [8,128,32] = 131072 B; 2*(3/4)*131072 */
    check_comm(&info.forward[0], PAR_COMM_ALL_REDUCE, 4, 0x2, 196608);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);

    /* data-parallel indices: dev [8,1,1,1]; table mirrored over all 8 */
    CHECK_OK(infer(&op, "((1,1),(8,1))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[8,1,1,1]");
    CHECK_STR(L(&info.outputs[0]), "[3,2,0]");
    CHECK_INT(info.num_forward, 0);
    /* table 1000*64*4 = 256000 B; 2*(7/8)*256000 */
    check_comm(&info.mirror[0], PAR_COMM_ALL_REDUCE, 8, 0x8, 448000);
    /* table 256000 + indices [1,128] i32 512 + out [1,128,64] 32768 */
    CHECK_NEAR(info.cost.memory_bytes, 289280);
    CHECK_NEAR(info.cost.compute_flops, 128 * 64);

    /* vocab-parallel + sequence-parallel exit: reduce-scatter on out dim 0 */
    op.reduce_scatter = 1;
    CHECK_OK(infer(&op, "((4,1),(2,1))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1,4,1]");
    CHECK_STR(L(&info.outputs[0]), "[(3,1),2,0]");
    /* partial out local [4,128,64] = 131072 B; (3/4)*131072 */
    check_comm(&info.forward[0], PAR_COMM_REDUCE_SCATTER, 4, 0x2, 98304);
    CHECK_INT(info.forward[0].tensor_dim, 0);
    op.reduce_scatter = 0;

    CHECK_ERR(infer(&op, "((3,1),(1,1))", 3, &info), PAR_ESTRATEGY,
              "gather: input 0 dim 0 (size 1000) is not divisible by its shard 3");
    op = make_op(PAR_OP_GATHER, "10x1000x64,8");
    CHECK_ERR(infer(&op, "((1,1,1),(1,))", 1, &info), PAR_ESHAPE, "input 0 (the table) must be 2-D");
}

/* logits [8,512], labels [8] */
static void test_cross_entropy(void) {
    par_op_desc op = make_op(PAR_OP_CROSS_ENTROPY, "8x512,8");
    par_op_info info;
    /* vocab-parallel loss: dev [2,4]; rows->1, C->0 */
    CHECK_OK(infer(&op, "((2,4),(2,))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4]");
    CHECK_STR(L(&info.inputs[0]), "[1,0]");
    CHECK_STR(L(&info.inputs[1]), "[1]");
    CHECK_STR(L(&info.outputs[0]), "[1]");
    CHECK_INT(info.num_forward, 1);
    /* 3 all-reduces of 4 local rows * 4 B = 16 B: 2*(3/4)*16 = 24 each */
    check_comm(&info.forward[0], PAR_COMM_ALL_REDUCE, 4, 0x1, 24);
    CHECK_INT(info.forward[0].count, 3);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    CHECK_NEAR(info.cost.comm_bytes, 72);
    CHECK_NEAR(info.cost.compute_flops, 4.0 * 4 * 128);
    /* rows only: no communication */
    CHECK_OK(infer(&op, "((8,1),(8,))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[8,1]");
    CHECK_INT(info.num_forward, 0);
    CHECK_ERR(infer(&op, "((2,4),(4,))", 8, &info), PAR_ESTRATEGY,
              "cross_entropy: row dim 0 split 2 in input 0 dim 0 but 4 in input 1 dim 0 (they must match)");
    op = make_op(PAR_OP_CROSS_ENTROPY, "2x4x100,2x4");
    CHECK_OK(infer(&op, "((2,2,1),(2,2))", 4, &info));
    CHECK_STR(L(&info.inputs[0]), "[2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[2,1]");
    op = make_op(PAR_OP_CROSS_ENTROPY, "8x512,4");
    CHECK_ERR(infer(&op, "((1,1),(1,))", 1, &info), PAR_ESHAPE, "input 1 (labels) has shape [4]; it must be [8]");
}

static void test_reshape(void) {
    par_op_desc op = make_op(PAR_OP_RESHAPE, "4x8x6");
    par_op_info info;
    op.out_ndim = 2;
    op.out_shape[0] = 4;
    op.out_shape[1] = 48;
    /* [4,8/2,6] slices merge contiguously into [4,48/2] */
    CHECK_OK(infer(&op, "((2,2,1),)", 4, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,2,1]");
    CHECK_STR(L(&info.inputs[0]), "[2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[2,1]");
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    CHECK_NEAR(info.cost.compute_flops, 0);
    /* splitting the 6 leaves each rank 8 runs of 3: not one slice of the 48 */
    CHECK_ERR(infer(&op, "((1,1,2),)", 2, &info), PAR_ESTRATEGY,
              "reshape: strategy ((1,1,2),) would need data movement");
    CHECK(strstr(par_last_error(), "is not local") != NULL);
    op.out_shape[1] = 47;
    CHECK_ERR(infer(&op, "((1,1,1),)", 1, &info), PAR_ESHAPE,
              "cannot reshape [4,8,6] (192 elements) to [4,47] (188 elements)");
    op.out_ndim = 0;
    CHECK_ERR(infer(&op, "((1,1,1),)", 1, &info), PAR_EINVAL, "out_ndim is 0");
    /* splitting direction: [4,48] -> [4,8,6], the 48's split lands on the 8 */
    op = make_op(PAR_OP_RESHAPE, "4x48");
    op.out_ndim = 3;
    op.out_shape[0] = 4;
    op.out_shape[1] = 8;
    op.out_shape[2] = 6;
    CHECK_OK(infer(&op, "((2,2),)", 4, &info));
    CHECK_STR(L(&info.outputs[0]), "[1,0,-1]");
}

static void test_transpose(void) {
    par_op_desc op = make_op(PAR_OP_TRANSPOSE, "4x8x16");
    par_op_info info;
    op.perm[0] = 0;
    op.perm[1] = 2;
    op.perm[2] = 1;
    CHECK_OK(infer(&op, "((2,4,1),)", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,1]");
    CHECK_STR(L(&info.inputs[0]), "[2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[2,0,1]");
    CHECK_STR(shape_text(&info.outputs[0]), "[4,16,8]");
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    op.perm[1] = 0;
    CHECK_ERR(infer(&op, "((1,1,1),)", 1, &info), PAR_EINVAL, "transpose: perm [0,0,1] is not a permutation of 0..2");
    op.perm[1] = 3;
    CHECK_ERR(infer(&op, "((1,1,1),)", 1, &info), PAR_EINVAL, "perm [0,3,1] is not a permutation");
}

/* q [2,8,128,64], k, v [2,2,128,64]: GQA with 4 query heads per kv head */
static void test_flash_attention(void) {
    par_op_desc op = make_op(PAR_OP_FLASH_ATTENTION, "2x8x128x64,2x2x128x64,2x2x128x64");
    par_op_info info;
    CHECK_OK(infer(&op, "((2,2,1,1),(2,2,1,1),(2,2,1,1))", 4, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,2,1,1]");
    CHECK_STR(L(&info.inputs[0]), "[3,2,1,0]");
    CHECK_STR(L(&info.inputs[1]), "[3,2,1,0]");
    CHECK_STR(L(&info.inputs[2]), "[3,2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[3,2,1,0]");
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    CHECK_INT(info.mirror[1].kind, PAR_COMM_NONE);
    CHECK_INT(info.mirror[2].kind, PAR_COMM_NONE);
    /* 4*B*Nq*S*S*D/(b*n) = 4*2*8*128*128*64/4 */
    CHECK_NEAR(info.cost.compute_flops, 4.0 * 2 * 8 * 128 * 128 * 64 / 4);
    CHECK_OK(infer(&op, "((2,2,1,1),(2,2,1,1),(2,2,1,1))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,2,1,1,2]");
    CHECK_STR(L(&info.inputs[0]), "[4,3,2,1]");

    CHECK_ERR(infer(&op, "((1,1,2,1),(1,1,2,1),(1,1,2,1))", 2, &info), PAR_ESTRATEGY,
              "flash_attention: input 0 dim 2 is the sequence dim and may not be split (shard 2): sequence splits "
              "need a context-parallel algorithm (ring, ulysses), not an operator strategy");
    CHECK_ERR(infer(&op, "((1,1,1,2),(1,1,1,2),(1,1,1,2))", 2, &info), PAR_ESTRATEGY,
              "input 0 dim 3 is the head-size dim and may not be split (shard 2)");
    CHECK_ERR(infer(&op, "((1,4,1,1),(1,4,1,1),(1,4,1,1))", 4, &info), PAR_ESTRATEGY,
              "input 1 (k) has 2 kv heads, which its head shard 4 does not divide");
    CHECK_ERR(infer(&op, "((1,4,1,1),(1,2,1,1),(1,2,1,1))", 4, &info), PAR_ESTRATEGY,
              "head dim split 4 in input 0 dim 1 but 2 in input 1 dim 1 (they must match)");
    CHECK_ERR(infer(&op, "((2,1,1,1),(1,1,1,1),(1,1,1,1))", 2, &info), PAR_ESTRATEGY,
              "batch dim split 2 in input 0 dim 0 but 1 in input 1 dim 0");
    op = make_op(PAR_OP_FLASH_ATTENTION, "2x6x128x64,2x4x128x64,2x4x128x64");
    CHECK_ERR(infer(&op, "((1,1,1,1),(1,1,1,1),(1,1,1,1))", 1, &info), PAR_ESHAPE,
              "6 query heads are not a multiple of 4 kv heads");
    op = make_op(PAR_OP_FLASH_ATTENTION, "2x8x128x64,2x2x128x64,2x2x128x32");
    CHECK_ERR(infer(&op, "((1,1,1,1),(1,1,1,1),(1,1,1,1))", 1, &info), PAR_ESHAPE, "must have the same shape");
}

/* x [8,16,32] */
static void test_reduce(void) {
    par_op_desc op = make_op(PAR_OP_REDUCE_SUM, "8x16x32");
    par_op_info info;
    op.axes = 0x2;
    CHECK_OK(infer(&op, "((2,4,1),)", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,1]");
    CHECK_STR(L(&info.inputs[0]), "[2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[2,0] partial=1");
    CHECK_STR(shape_text(&info.outputs[0]), "[8,32]");
    /* out local [4,32] = 512 B; 2*(3/4)*512 */
    check_comm(&info.forward[0], PAR_COMM_ALL_REDUCE, 4, 0x2, 768);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    CHECK_NEAR(info.cost.compute_flops, 4 * 4 * 32);
    op.keep_dims = 1;
    CHECK_OK(infer(&op, "((2,4,1),)", 8, &info));
    CHECK_STR(L(&info.outputs[0]), "[2,-1,0] partial=1");
    CHECK_STR(shape_text(&info.outputs[0]), "[8,1,32]");
    op.keep_dims = 0;
    /* reduced dim unsplit: no comm */
    CHECK_OK(infer(&op, "((2,1,4),)", 8, &info));
    CHECK_STR(L(&info.outputs[0]), "[2,0]");
    CHECK_INT(info.num_forward, 0);

    /* ReduceMean over everything: a scalar, partial over both split dims */
    op = make_op(PAR_OP_REDUCE_MEAN, "8x16x32");
    CHECK_OK(infer(&op, "((2,4,1),)", 8, &info));
    CHECK_INT(info.outputs[0].ndim, 0);
    CHECK_STR(L(&info.outputs[0]), "[] partial=(2,1)");
    /* 4 B scalar: 2*(7/8)*4 = 7 */
    check_comm(&info.forward[0], PAR_COMM_ALL_REDUCE, 8, 0x6, 7);
    op.reduce_scatter = 1;
    CHECK_ERR(infer(&op, "((2,4,1),)", 8, &info), PAR_ESTRATEGY,
              "reduce_scatter needs an output with at least one dim");
    op.axes = 0x8;
    CHECK_ERR(infer(&op, "((1,1,1),)", 1, &info), PAR_EINVAL, "axes 0x8 name dims beyond input 0's 3");
}

/* ---- enumeration ---- */

static int same_strategy(const par_strategy *a, const par_strategy *b) {
    char x[128], y[128];
    par_strategy_format(a, x, sizeof x);
    par_strategy_format(b, y, sizeof y);
    return strcmp(x, y) == 0;
}

/* Distinct, valid, costs as par_op_infer says, sorted by total (then memory). */
static void check_listing(const par_op_desc *op, int devices, const par_strategy *s, const par_op_cost *c, int n) {
    int i, j, distinct = 1, valid = 1, sorted = 1, costs_agree = 1;
    par_op_info info;
    for (i = 0; i < n; i++) {
        for (j = 0; j < i; j++)
            if (same_strategy(&s[i], &s[j])) distinct = 0;
        if (par_op_infer(op, &s[i], devices, &info) != PAR_OK)
            valid = 0;
        else if (info.cost.total != c[i].total || info.cost.memory_bytes != c[i].memory_bytes)
            costs_agree = 0;
        if (i > 0 && (c[i].total < c[i - 1].total ||
                      (c[i].total == c[i - 1].total && c[i].memory_bytes < c[i - 1].memory_bytes)))
            sorted = 0;
    }
    CHECK(distinct);
    CHECK(valid);
    CHECK(costs_agree);
    CHECK(sorted);
}

static void test_enumerate_matmul(void) {
    par_op_desc op = make_op(PAR_OP_MATMUL, "12x18,18x10");
    par_strategy all[256], few[3];
    par_op_cost costs[256], few_costs[3];
    int a, b, c, want = 0, n = -1, m = -1, i, has_three = 0;
    /* brute force: a | M, b | K, c | N and a*b*c | devices */
    for (a = 1; a <= 12; a++)
        for (b = 1; b <= 12; b++)
            for (c = 1; c <= 12; c++)
                if (12 % a == 0 && 18 % b == 0 && 10 % c == 0 && 12 % (a * b * c) == 0) want++;
    CHECK_OK(par_op_strategies(&op, 12, all, costs, 256, &n));
    CHECK_INT(n, want);
    CHECK_STR(par_last_error(), "");
    check_listing(&op, 12, all, costs, n);
    for (i = 0; i < n; i++)
        if (all[i].shard[0][0] % 3 == 0 || all[i].shard[1][0] % 3 == 0) has_three = 1;
    CHECK(has_three);
    /* No parameters, so only a split K communicates; the two comm-free ways to use
       all 12 devices, (a,c) = (6,2) and (12,1), tie on flops 2*12*18*10/12 and the
       tie goes to less memory: (6,2) holds 36+90+10 elements, (12,1) 18+180+10. */
    CHECK_STR(S(&all[0]), "((6,1),(1,2))");
    CHECK_STR(S(&all[1]), "((12,1),(1,1))");
    CHECK_NEAR(costs[0].total, 2.0 * 12 * 18 * 10 / 12 / 1e12);

    /* too small: the cheapest three, and the total count */
    CHECK_ERR(par_op_strategies(&op, 12, few, few_costs, 3, &m), PAR_ECAPACITY, "capacity is 3");
    CHECK_INT(m, want);
    for (i = 0; i < 3; i++) CHECK_STR(S(&few[i]), S(&all[i]));
    /* costs may be NULL; capacity 0 only counts */
    CHECK_ERR(par_op_strategies(&op, 12, few, NULL, 3, &m), PAR_ECAPACITY, "valid strategies");
    for (i = 0; i < 3; i++) CHECK_STR(S(&few[i]), S(&all[i]));
    CHECK_ERR(par_op_strategies(&op, 12, NULL, NULL, 0, &m), PAR_ECAPACITY, "capacity is 0");
    CHECK_INT(m, want);
    CHECK_ERR(par_op_strategies(&op, 0, all, costs, 256, &m), PAR_EINVAL, "0 devices");
    CHECK_ERR(par_op_strategies(&op, 12, NULL, NULL, 4, &m), PAR_EINVAL, "NULL");

    /* with b a parameter, ties and order still hold */
    op.params = 2;
    CHECK_OK(par_op_strategies(&op, 12, all, costs, 256, &n));
    CHECK_INT(n, want);
    check_listing(&op, 12, all, costs, n);
}

static void test_enumerate_others(void) {
    par_strategy s[512];
    par_op_cost c[512];
    par_op_desc op;
    int n = -1, want, a, b, i, ok;

    /* broadcasting: x [6,4], y [1,4] on 6; y's dim 0 is never split */
    op = make_op(PAR_OP_ELEMENTWISE, "6x4,1x4");
    want = 0;
    for (a = 1; a <= 6; a++)
        for (b = 1; b <= 6; b++)
            if (6 % a == 0 && 4 % b == 0 && 6 % (a * b) == 0) want++;
    CHECK_OK(par_op_strategies(&op, 6, s, c, 512, &n));
    CHECK_INT(n, want);
    check_listing(&op, 6, s, c, n);
    for (ok = 1, i = 0; i < n; i++)
        if (s[i].shard[1][0] != 1) ok = 0;
    CHECK(ok);

    /* softmax [4,6] on 6: the axis stays whole, dim 0 takes 1 or 2 */
    op = make_op(PAR_OP_SOFTMAX, "4x6");
    CHECK_OK(par_op_strategies(&op, 6, s, c, 512, &n));
    CHECK_INT(n, 2);
    for (ok = 1, i = 0; i < n; i++)
        if (s[i].shard[0][1] != 1) ok = 0;
    CHECK(ok);

    /* attention on 4: (b, n) with b | 2, n | 2 (the kv heads), S and D whole */
    op = make_op(PAR_OP_FLASH_ATTENTION, "2x8x16x8,2x2x16x8,2x2x16x8");
    CHECK_OK(par_op_strategies(&op, 4, s, c, 512, &n));
    CHECK_INT(n, 4);
    for (ok = 1, i = 0; i < n; i++)
        if (s[i].shard[0][2] != 1 || s[i].shard[0][3] != 1 || s[i].shard[1][1] != s[i].shard[0][1]) ok = 0;
    CHECK(ok);

    /* reshape [4,8,6] -> [4,48] on 4: the 6 must stay whole (else the merge is not
       local), so (a, b) with a | 4, b | 8, a*b | 4: 6 strategies */
    op = make_op(PAR_OP_RESHAPE, "4x8x6");
    op.out_ndim = 2;
    op.out_shape[0] = 4;
    op.out_shape[1] = 48;
    CHECK_OK(par_op_strategies(&op, 4, s, c, 512, &n));
    CHECK_INT(n, 6);
    for (ok = 1, i = 0; i < n; i++)
        if (s[i].shard[0][2] != 1) ok = 0;
    CHECK(ok);
}

/* 8 iteration dims over 4096 devices stays fast: only strategies using every
   device are valid (a repeated dim would make a 9th device-matrix dim); each dim
   of 64 takes 2^e, e in 0..6, with the e summing to 12. */
static void test_enumerate_bounded(void) {
    par_op_desc op = make_op(PAR_OP_ELEMENTWISE, "64x64x64x64x64x64x64x64,64x64x64x64x64x64x64x64");
    par_strategy s[16];
    long long ways[9][13];
    int n = -1, k, e, sum;
    memset(ways, 0, sizeof ways);
    ways[0][0] = 1;
    for (k = 1; k <= 8; k++)
        for (sum = 0; sum <= 12; sum++)
            for (e = 0; e <= 6 && e <= sum; e++) ways[k][sum] += ways[k - 1][sum - e];
    CHECK_ERR(par_op_strategies(&op, 4096, s, NULL, 16, &n), PAR_ECAPACITY, "capacity is 16");
    CHECK_INT(n, ways[8][12]);
}

/* par_op_info_on_mesh: a Megatron layer's strategies on a "dp=2,tp=4" mesh
   (dp = device dim 1, tp = device dim 0). Expected maps worked out by hand. */
static void test_on_mesh(void) {
    par_mesh mesh, swapped, small;
    par_op_info info, m;
    par_op_desc col = make_op(PAR_OP_MATMUL, "16x32,64x32"), row = make_op(PAR_OP_MATMUL, "16x64,32x64");
    par_op_desc norm = make_op(PAR_OP_RMSNORM, "16x32,32");
    const int swap_map[3] = {1, -1, 0}, bad_map[3] = {0, 1, -1}, drop_map[3] = {-1, -1, 1};
    CHECK_OK(par_mesh_parse("dp=2,tp=4", &mesh));
    CHECK_OK(par_mesh_parse("tp=4,dp=2", &swapped));
    CHECK_OK(par_mesh_parse("dp=2,tp=2", &small));
    /* column parallel y = x W^T, W [N,K] split on N: dev matrix [2,1,4] */
    col.transpose_b = 1, col.params = 2;
    CHECK_OK(infer(&col, "((2,1),(4,1))", 8, &info));
    CHECK_OK(par_op_info_on_mesh(&info, &mesh, NULL, &m));
    CHECK_STR(M(&m.dev_matrix), "[dp=2,tp=4]");
    CHECK_STR(L(&m.inputs[0]), "[1,-1]");  /* x: rows over dp, K whole (its dev dim had size 1) */
    CHECK_STR(L(&m.inputs[1]), "[0,-1]");  /* W: output features over tp */
    CHECK_STR(L(&m.outputs[0]), "[1,0]");
    CHECK_INT(m.num_forward, 0);
    CHECK_INT(m.mirror[1].dev_mask, 0x2); /* W's gradient summed over dp */
    /* row parallel, W [N,K] split on K: the output is partial over tp */
    row.transpose_b = 1, row.params = 2;
    CHECK_OK(infer(&row, "((2,4),(1,4))", 8, &info));
    CHECK_OK(par_op_info_on_mesh(&info, &mesh, NULL, &info)); /* in place */
    CHECK_STR(L(&info.inputs[0]), "[1,0]");
    CHECK_STR(L(&info.inputs[1]), "[-1,0]");
    CHECK_STR(L(&info.outputs[0]), "[1,-1] partial=0");
    CHECK_INT(info.num_forward, 1);
    CHECK_INT(info.forward[0].dev_mask, 0x1); /* all_reduce over tp */
    CHECK_INT(info.mirror[1].dev_mask, 0x2);
    /* a norm on dp only: tp is the repeated-calculation dim, gamma's mirror spans both */
    norm.params = 2;
    CHECK_OK(infer(&norm, "((2,1),(1,))", 8, &info));
    CHECK_OK(par_op_info_on_mesh(&info, &mesh, NULL, &m));
    CHECK_STR(L(&m.inputs[0]), "[1,-1]");
    CHECK_STR(L(&m.inputs[1]), "[-1]");
    CHECK_INT(m.mirror[1].dev_mask, 0x3);
    /* a mesh listing tp first needs the axis map */
    CHECK_OK(infer(&col, "((2,1),(4,1))", 8, &info));
    CHECK_ERR(par_op_info_on_mesh(&info, &swapped, NULL, &m), PAR_EINVAL, "pass an axis_map");
    CHECK_OK(par_op_info_on_mesh(&info, &swapped, swap_map, &m));
    CHECK_STR(L(&m.inputs[0]), "[0,-1]");
    CHECK_STR(L(&m.inputs[1]), "[1,-1]");
    CHECK_INT(m.mirror[1].dev_mask, 0x1);
    CHECK_ERR(par_op_info_on_mesh(&info, &mesh, bad_map, &m), PAR_EINVAL,
              "device-matrix axis 1 (size 1) cannot be mesh axis 1 (size 4)");
    CHECK_ERR(par_op_info_on_mesh(&info, &mesh, drop_map, &m), PAR_EINVAL, "only size-1 axes may map to -1");
    CHECK_ERR(par_op_info_on_mesh(&info, &small, NULL, &m), PAR_EINVAL, "the device matrix has 8 devices, the mesh 4");
    CHECK_ERR(par_op_info_on_mesh(NULL, &mesh, NULL, &m), PAR_EINVAL, "NULL argument");
}

/* Strategies written with mesh axis names (the documentation's and the trainer's form). */
static void test_named(void) {
    par_mesh mesh, unnamed, swapped, other, cp;
    par_strategy s;
    par_op_info info, m;
    par_op_desc col = make_op(PAR_OP_MATMUL, "16x32,64x32"), row = make_op(PAR_OP_MATMUL, "16x64,32x64");
    par_op_desc norm = make_op(PAR_OP_RMSNORM, "16x32,32");
    CHECK_OK(par_mesh_parse("dp=2,tp=4", &mesh));
    CHECK_OK(par_mesh_parse("2,4", &unnamed));
    CHECK_OK(par_mesh_parse("tp=4,dp=2", &swapped));
    CHECK_OK(par_mesh_parse("dp=4,tp=2", &other));
    CHECK_OK(par_mesh_parse("dp=2,cp=2,tp=2", &cp));

    /* parse: names are sizes, "None" is 1, the axis each came from is kept */
    CHECK_OK(par_strategy_parse_mesh("((dp,1),(tp,None))", &mesh, &s));
    CHECK_STR(S(&s), "((2,1),(4,1))");
    CHECK_INT(s.axis[0][0], 1); /* dp = axis 0 */
    CHECK_INT(s.axis[0][1], 0);
    CHECK_INT(s.axis[1][0], 2); /* tp = axis 1 */
    CHECK_INT(s.axis[1][1], 0); /* None is a number */
    CHECK_STR(s.names[0], "dp");
    CHECK_STR(s.names[1], "tp");
    CHECK_OK(par_strategy_parse_mesh(" ( ( dp , tp ) , ( 1 , tp , ) ) ", &mesh, &s));
    CHECK_STR(S(&s), "((2,4),(1,4))");
    CHECK_OK(par_strategy_parse_mesh("((2,1),(4,1))", &mesh, &s)); /* numbers: no names recorded */
    CHECK_INT(s.axis[0][0], 0);
    CHECK_STR(s.names[0], "");
    CHECK_ERR(par_strategy_parse_mesh("((dp,1),(xp,1))", &mesh, &s), PAR_EPARSE,
              "strategy '((dp,1),(xp,1))': 'xp' at position 9 is not an axis of the mesh (its axes: dp, tp)");
    CHECK_ERR(par_strategy_parse_mesh("((dp,1),)", &unnamed, &s), PAR_EPARSE, "its axes: none: the mesh is unnamed");
    CHECK_ERR(par_strategy_parse_mesh("((dp,0),)", &mesh, &s), PAR_ESTRATEGY, "input 0 dim 1 has shard 0");
    CHECK_ERR(par_strategy_parse_mesh("((dp,1),", &mesh, &s), PAR_EPARSE, "found the end of the text");
    CHECK_ERR(par_strategy_parse_mesh(NULL, &mesh, &s), PAR_EINVAL, "par_strategy_parse_mesh: NULL argument");
    CHECK_ERR(par_strategy_parse_mesh("((1,),)", NULL, &s), PAR_EINVAL, "par_strategy_parse_mesh: NULL argument");
    {
        par_mesh bad = mesh;
        bad.ndim = 0;
        CHECK_ERR(par_strategy_parse_mesh("((1,),)", &bad, &s), PAR_EINVAL,
                  "par_strategy_parse_mesh: invalid mesh: mesh has 0 axes");
    }
    /* numbers only without a mesh, and the error says where names go */
    CHECK_ERR(par_strategy_parse("((dp,1),(tp,1))", &s), PAR_EPARSE,
              "'dp' at position 2 is an axis name; par_strategy_parse takes numbers only (use "
              "par_strategy_parse_mesh");
    CHECK_OK(par_strategy_parse("((None,2),)", &s)); /* None needs no mesh */
    CHECK_STR(S(&s), "((1,2),)");

    /* infer names the device matrix; the repeated dim stays unnamed */
    col.transpose_b = 1, col.params = 2;
    CHECK_OK(par_strategy_parse_mesh("((dp,1),(tp,1))", &mesh, &s));
    CHECK_OK(par_op_infer(&col, &s, 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[dp=2,1,tp=4]");
    norm.params = 2;
    CHECK_OK(par_strategy_parse_mesh("((dp,1),(1,))", &mesh, &s));
    CHECK_OK(par_op_infer(&norm, &s, 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[dp=2,1,4]");
    /* the repeated dim of a named strategy may span several mesh axes: on
       "dp=2,pp=2,cp=2,tp=2" ((dp,1),(tp,1)) repeats over pp x cp (device dims
       2 and 1), so W's gradient is summed over dp, pp and cp */
    {
        par_mesh four;
        CHECK_OK(par_mesh_parse("dp=2,pp=2,cp=2,tp=2", &four));
        CHECK_OK(par_strategy_parse_mesh("((dp,1),(tp,1))", &four, &s));
        CHECK_OK(par_op_infer(&col, &s, 16, &info));
        CHECK_STR(M(&info.dev_matrix), "[dp=2,1,tp=2,4]");
        CHECK_OK(par_op_info_on_mesh(&info, &four, NULL, &m));
        CHECK_STR(L(&m.inputs[0]), "[3,-1]");
        CHECK_STR(L(&m.inputs[1]), "[0,-1]");
        CHECK_INT(m.mirror[1].dev_mask, 0xE);
        /* sizes that do not multiply up stay an error */
        CHECK_OK(par_mesh_parse("dp=2,pp=3,tp=2", &four));
        CHECK_OK(par_strategy_parse_mesh("((dp,1),(tp,1))", &four, &s));
        CHECK_OK(par_op_infer(&col, &s, 12, &info));
        CHECK_OK(par_op_info_on_mesh(&info, &four, NULL, &m)); /* one axis of 3: one to one */
        CHECK_INT(m.mirror[1].dev_mask, 0x6);
    }
    /* numeric entries beside named ones of the same dim agree; the name sticks */
    row.transpose_b = 1, row.params = 2;
    CHECK_OK(par_strategy_parse_mesh("((dp,4),(1,tp))", &mesh, &s));
    CHECK_OK(par_op_infer(&row, &s, 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[dp=2,tp=4,1]");
    /* one dim named two ways; one axis naming two dims */
    CHECK_OK(par_strategy_parse_mesh("((dp,cp),(1,tp))", &cp, &s));
    CHECK_ERR(par_op_infer(&row, &s, 8, &info), PAR_ESTRATEGY,
              "matmul: the contraction dim is named 'cp' in input 0 dim 1 but 'tp' in input 1 dim 1");
    CHECK_OK(par_strategy_parse_mesh("((dp,dp),(1,dp))", &mesh, &s));
    CHECK_ERR(par_op_infer(&row, &s, 4, &info), PAR_ESTRATEGY,
              "matmul: mesh axis 'dp' splits both the row dim and the contraction dim");
    /* a hand-filled axis index pointing at no name */
    CHECK_OK(par_strategy_parse_mesh("((dp,1),(tp,1))", &mesh, &s));
    s.axis[1][0] = 5;
    CHECK_ERR(par_op_infer(&col, &s, 8, &info), PAR_EINVAL, "strategy input 1 dim 0 refers to axis name 4");
    /* enumerated strategies carry no names */
    {
        par_strategy list[64];
        int n = 0, i, named = 0, d;
        CHECK_OK(par_op_strategies(&col, 8, list, NULL, 64, &n));
        for (i = 0; i < n && i < 64; i++)
            for (d = 0; d < 2; d++) named |= list[i].axis[0][d] | list[i].axis[1][d] | list[i].names[0][0];
        CHECK(n > 0 && !named);
    }

    /* on a mesh by name: the order of the mesh's axes no longer matters */
    CHECK_OK(par_strategy_parse_mesh("((dp,1),(tp,1))", &mesh, &s));
    CHECK_OK(par_op_infer(&col, &s, 8, &info));
    CHECK_OK(par_op_info_on_mesh(&info, &mesh, NULL, &m));
    CHECK_STR(L(&m.inputs[0]), "[1,-1]");
    CHECK_STR(L(&m.inputs[1]), "[0,-1]");
    CHECK_INT(m.mirror[1].dev_mask, 0x2);
    CHECK_OK(par_op_info_on_mesh(&info, &swapped, NULL, &m)); /* tp=4,dp=2: dp is device dim 0 now */
    CHECK_STR(L(&m.inputs[0]), "[0,-1]");
    CHECK_STR(L(&m.inputs[1]), "[1,-1]");
    CHECK_STR(L(&m.outputs[0]), "[0,1]");
    CHECK_INT(m.mirror[1].dev_mask, 0x1);
    CHECK_OK(par_op_info_on_mesh(&info, &unnamed, NULL, &m)); /* no names to match: by order */
    CHECK_STR(L(&m.inputs[1]), "[0,-1]");
    CHECK_ERR(par_op_info_on_mesh(&info, &cp, NULL, &m), PAR_EINVAL,
              "device-matrix axis 2 'tp' has size 4 but mesh axis 2 'tp' has size 2 (was the strategy parsed with "
              "another mesh?)");
    CHECK_ERR(par_op_info_on_mesh(&info, &other, NULL, &m), PAR_EINVAL,
              "device-matrix axis 0 'dp' has size 2 but mesh axis 0 'dp' has size 4");
    {
        par_mesh xy;
        CHECK_OK(par_mesh_parse("x=2,y=4", &xy));
        CHECK_ERR(par_op_info_on_mesh(&info, &xy, NULL, &m), PAR_EINVAL,
                  "the strategy names device-matrix axis 0 'dp', which mesh [x=2,y=4] lacks; pass an axis_map");
    }
    /* the repeated dim takes the mesh axis no name claimed */
    CHECK_OK(par_strategy_parse_mesh("((dp,1),(1,))", &mesh, &s));
    CHECK_OK(par_op_infer(&norm, &s, 8, &info));
    CHECK_OK(par_op_info_on_mesh(&info, &swapped, NULL, &m));
    CHECK_STR(L(&m.inputs[0]), "[0,-1]");
    CHECK_INT(m.mirror[1].dev_mask, 0x3);
    /* row parallel on tp=4,dp=2 */
    CHECK_OK(par_strategy_parse_mesh("((dp,tp),(1,tp))", &swapped, &s));
    CHECK_OK(par_op_infer(&row, &s, 8, &info));
    CHECK_OK(par_op_info_on_mesh(&info, &swapped, NULL, &m));
    CHECK_STR(L(&m.inputs[0]), "[0,1]");
    CHECK_STR(L(&m.outputs[0]), "[0,-1] partial=1");
    CHECK_INT(m.forward[0].dev_mask, 0x2);
}

/* Activation-gradient communication: the local dx is partial over the split
   iteration dims x does not use. Hand-derived, plus Megatron-LM's f/g operators
   (column-parallel input: identity forward, all-reduce backward over tp;
   row-parallel: all-reduce forward, identity backward). */
static void test_backward(void) {
    par_op_desc op;
    par_op_info info, m;
    par_mesh mesh;
    int i;
    CHECK_OK(par_mesh_parse("dp=2,tp=4", &mesh));

    /* column parallel x[16,32] . W[64,32]^T ((2,1),(4,1)): dev [M=2,K=1,N=4] (N = dev 0).
       dx = dy . W with dy split over N: partial over the 4-way dim. x local [8,32] = 1024 B,
       2*(3/4)*1024 = 1536 */
    op = make_op(PAR_OP_MATMUL, "16x32,64x32");
    op.transpose_b = 1, op.params = 2;
    CHECK_OK(infer(&op, "((2,1),(4,1))", 8, &info));
    check_comm(&info.backward[0], PAR_COMM_ALL_REDUCE, 4, 0x1, 1536);
    CHECK_INT(info.backward[0].count, 1);
    CHECK_INT(info.backward[0].tensor_dim, -1);
    CHECK_INT(info.backward[1].kind, PAR_COMM_NONE); /* W is a parameter: its mirror says it */
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 2, 0x4, 2048);
    /* on the model's mesh: over tp (device dim 0) */
    CHECK_OK(par_op_info_on_mesh(&info, &mesh, NULL, &m));
    CHECK_INT(m.backward[0].dev_mask, 0x1);
    CHECK_INT(m.backward[0].group, 4);
    /* W not a parameter: dW = dy^T . x is partial over the M dim W does not use (dev 2):
       W local [16,32] = 2048 B, 2*(1/2)*2048 */
    op.params = 0;
    CHECK_OK(infer(&op, "((2,1),(4,1))", 8, &info));
    check_comm(&info.backward[1], PAR_COMM_ALL_REDUCE, 2, 0x4, 2048);
    CHECK_INT(info.mirror[1].kind, PAR_COMM_NONE);
    /* the cost is forward + mirror, as before */
    CHECK_NEAR(info.cost.comm_bytes, 0);

    /* row parallel x[16,64] . W[32,64]^T ((2,4),(1,4)): x uses M and K, nothing else splits */
    op = make_op(PAR_OP_MATMUL, "16x64,32x64");
    op.transpose_b = 1, op.params = 2;
    CHECK_OK(infer(&op, "((2,4),(1,4))", 8, &info));
    CHECK_INT(info.backward[0].kind, PAR_COMM_NONE);
    CHECK_INT(info.backward[0].group, 1);
    CHECK_INT(info.backward[0].dev_mask, 0);

    /* RMSNorm ((2,1),(1,)) on 8: the 4-way dim is the repeated one, not a split */
    op = make_op(PAR_OP_RMSNORM, "16x32,32");
    op.params = 2;
    CHECK_OK(infer(&op, "((2,1),(1,))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1,4]");
    CHECK_INT(info.backward[0].kind, PAR_COMM_NONE);
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 8, 0x5, 224); /* dev 2 and 0; gamma 128 B, 2*(7/8)*128 */

    /* x[8,16] + b[16], b an activation ((2,4),(4,)): dev [2,4]; db sums over the 2-way
       dim (dev 1). b local [4] = 16 B, 2*(1/2)*16 = 16. x uses both: none. */
    op = make_op(PAR_OP_ELEMENTWISE, "8x16,16");
    CHECK_OK(infer(&op, "((2,4),(4,))", 8, &info));
    CHECK_INT(info.backward[0].kind, PAR_COMM_NONE);
    check_comm(&info.backward[1], PAR_COMM_ALL_REDUCE, 2, 0x2, 16);
    /* a broadcast size-1 dim counts as unused: y[1,16] against x[8,16] ((2,4),(1,4)) */
    op = make_op(PAR_OP_ELEMENTWISE, "8x16,1x16");
    CHECK_OK(infer(&op, "((2,4),(1,4))", 8, &info));
    check_comm(&info.backward[1], PAR_COMM_ALL_REDUCE, 2, 0x2, 16);

    /* integer inputs have no gradient: Gather's indices, CrossEntropy's labels */
    op = make_op(PAR_OP_GATHER, "1000x64,8x128");
    CHECK_OK(infer(&op, "((4,2),(1,1))", 8, &info));
    CHECK_INT(info.backward[1].kind, PAR_COMM_NONE);
    /* a non-parameter table: dtable sums over the indices' split dims (dev 3, 2 ways):
       table local [250,32] = 32000 B, 2*(1/2)*32000 */
    CHECK_OK(infer(&op, "((4,2),(2,1))", 16, &info));
    check_comm(&info.backward[0], PAR_COMM_ALL_REDUCE, 2, 0x8, 32000);
    CHECK_INT(info.backward[1].kind, PAR_COMM_NONE);
    op = make_op(PAR_OP_CROSS_ENTROPY, "8x100,8");
    CHECK_OK(infer(&op, "((2,4),(2,))", 8, &info));
    CHECK_INT(info.backward[0].kind, PAR_COMM_NONE); /* the vocab-split gradient is local */
    CHECK_INT(info.backward[1].kind, PAR_COMM_NONE);

    /* batch matmul a[4,16,32] . b[4,32,64] ((2,1,2),(2,2,1)): dev [B=2,M=1,K=2,N=1]; a uses all
       split dims: none. b uses B,K,N: M is size 1: none. */
    op = make_op(PAR_OP_BATCH_MATMUL, "4x16x32,4x32x64");
    CHECK_OK(infer(&op, "((2,1,2),(2,2,1))", 4, &info));
    CHECK_INT(info.backward[0].kind, PAR_COMM_NONE);
    CHECK_INT(info.backward[1].kind, PAR_COMM_NONE);
    /* ... ((2,2,1),(2,1,2)): dev [2,2,1,2]; da partial over N (dev 0): a local [2,8,32]
       = 2048 B, 2*(1/2)*2048; db over M (dev 2): b local [2,32,32] = 8192 B */
    CHECK_OK(infer(&op, "((2,2,1),(2,1,2))", 8, &info));
    check_comm(&info.backward[0], PAR_COMM_ALL_REDUCE, 2, 0x1, 2048);
    check_comm(&info.backward[1], PAR_COMM_ALL_REDUCE, 2, 0x4, 8192);

    /* inputs past num_inputs stay NONE */
    for (i = 2; i < PAR_MAX_INPUTS; i++) CHECK_INT(info.backward[i].kind, PAR_COMM_NONE);
}

/* Every strategy the documentation shows (a quoted or backquoted "((...))" in
   README.md, examples/llama/README.md and every .md file of docs/) must parse: numeric
   ones with par_strategy_parse, named ones with par_strategy_parse_mesh on a mesh
   with those axes (dp=2, tp=4, any other name 2). */

/* The repository root: "." when run from it, else the directory above the
   tests/ dir this file is in. */
static const char *repo_root(void) {
    static char root[512];
    const char *slash = strrchr(__FILE__, '/');
    FILE *f = fopen("README.md", "rb");
    if (f || !slash) {
        if (f) fclose(f);
        return ".";
    }
    snprintf(root, sizeof root, "%.*s/..", (int)(slash - __FILE__), __FILE__);
    return root;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = n >= 0 ? (char *)malloc((size_t)n + 1) : NULL;
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (text) text[n] = 0;
    fclose(f);
    return text;
}

/* Parse every strategy of one file's text; adds to *numeric and *named. */
static void check_doc_strategies(const char *name, const char *doc, int *numeric, int *named) {
    const char *p;
    for (p = strstr(doc, "(("); p; p = strstr(p + 2, "((")) {
        char text[128], mesh_text[128], word[32];
        const char *q = p;
        int depth = 0, has_name = 0;
        size_t len, m = 0;
        par_strategy st;
        par_mesh mesh;
        if (p == doc || (p[-1] != '`' && p[-1] != '"')) continue;
        do depth += *q == '(' ? 1 : *q == ')' ? -1 : 0;
        while (*++q && depth > 0 && *q != '\n');
        len = (size_t)(q - p);
        if (depth != 0 || *q != p[-1] || len >= sizeof text) continue; /* not a quoted strategy */
        memcpy(text, p, len);
        text[len] = 0;
        mesh_text[0] = 0;
        for (q = text; *q;) { /* the axis names used, each once */
            size_t w = 0;
            if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_')) {
                q++;
                continue;
            }
            while (((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_' || (*q >= '0' && *q <= '9')) &&
                   w + 1 < sizeof word)
                word[w++] = *q++;
            word[w] = 0;
            if (strcmp(word, "None") == 0) continue;
            has_name = 1;
            {
                char key[40];
                snprintf(key, sizeof key, "%s=", word);
                if (strstr(mesh_text, key) == mesh_text ||
                    (strstr(mesh_text, key) && strstr(mesh_text, key)[-1] == ','))
                    continue;
            }
            m += (size_t)snprintf(mesh_text + m, sizeof mesh_text - m, "%s%s=%d", m ? "," : "", word,
                                  strcmp(word, "tp") == 0 ? 4 : 2);
        }
        if (has_name) {
            CHECK_MSG(par_mesh_parse(mesh_text, &mesh) == PAR_OK, "%s: strategy %s: mesh %s", name, text, mesh_text);
            CHECK_MSG(par_strategy_parse_mesh(text, &mesh, &st) == PAR_OK, "%s: strategy %s on mesh %s", name, text,
                      mesh_text);
            (*named)++;
        } else {
            CHECK_MSG(par_strategy_parse(text, &st) == PAR_OK, "%s: strategy %s", name, text);
            (*numeric)++;
        }
    }
}

static int compare_names(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

static void test_doc_strategies(void) {
    static char names[64][128];
    const char *root = repo_root();
    char path[768];
    int n = 0, docs = 0, numeric = 0, named = 0, i;
    DIR *dir;
    struct dirent *e;
    snprintf(names[n++], sizeof names[0], "README.md");
    snprintf(names[n++], sizeof names[0], "examples/llama/README.md");
    snprintf(path, sizeof path, "%.511s/docs", root);
    dir = opendir(path);
    CHECK_MSG(dir != NULL, "cannot list %s (run from the repository root)", path);
    while (dir && (e = readdir(dir)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".md") != 0 || e->d_name[0] == '.') continue;
        CHECK_MSG(n < 64, "more than 64 documentation files");
        if (n >= 64) break;
        snprintf(names[n++], sizeof names[0], "docs/%.120s", e->d_name);
        docs++;
    }
    if (dir) closedir(dir);
    qsort(names + 2, (size_t)docs, sizeof names[0], compare_names);
    CHECK_MSG(docs >= 1, "no docs/*.md found under %s", root);
    for (i = 0; i < n; i++) {
        char *text;
        snprintf(path, sizeof path, "%.511s/%.127s", root, names[i]);
        text = read_text(path);
        CHECK_MSG(text != NULL, "cannot read %s (run from the repository root)", path);
        if (!text) continue;
        check_doc_strategies(names[i], text, &numeric, &named);
        free(text);
    }
    /* the documentation shows both kinds (the concepts' numbers, the trainer's names) */
    CHECK_MSG(numeric >= 2 && named >= 2, "strategies found in %d files: %d numeric, %d named", n, numeric, named);
}


/* ---- issue 14's operators, simulated end to end ------------------------------
   Every rank computes the operator on its own slices (par_sim_scatter gives
   each its input slices as laid out by par_op_infer), the forward collective
   runs on the mesh simulator (an all_reduce plan for a partial output), and
   every rank must then hold exactly its slice of the operator applied to the
   whole tensors. The local and the global computation are the same code, so a
   wrong strategy rule (a split axis that needed the whole row, a broadcast dim
   split, a missing AllReduce) shows as a mismatch. */

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    int t;
    for (t = 0; t < ndim; t++) n *= shape[t];
    return n;
}

/* Row-major [outer, n, inner] around dim d. */
static void around(int ndim, const int64_t *shape, int d, int64_t *outer, int64_t *inner) {
    int t;
    *outer = *inner = 1;
    for (t = 0; t < d; t++) *outer *= shape[t];
    for (t = d + 1; t < ndim; t++) *inner *= shape[t];
}

/* LOG_SOFTMAX / L2_NORMALIZE along `axis` of x (shape). */
static void ref_axis_op(par_op_kind kind, int ndim, const int64_t *shape, int axis, const double *x, double *y) {
    int64_t outer, inner, n = shape[axis], o, i, k;
    around(ndim, shape, axis, &outer, &inner);
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const double *px = x + o * n * inner + i;
            double *py = y + o * n * inner + i, acc = 0, mx = px[0];
            if (kind == PAR_OP_LOG_SOFTMAX) {
                for (k = 1; k < n; k++) mx = px[k * inner] > mx ? px[k * inner] : mx;
                for (k = 0; k < n; k++) acc += exp(px[k * inner] - mx);
                for (k = 0; k < n; k++) py[k * inner] = px[k * inner] - mx - log(acc);
            } else {
                for (k = 0; k < n; k++) acc += px[k * inner] * px[k * inner];
                for (k = 0; k < n; k++) py[k * inner] = px[k * inner] / sqrt(acc > 1e-24 ? acc : 1e-24);
            }
        }
}

/* PRELU: y = x if x > 0 else slope * x, slope per channel (dim 1) or shared. */
static void ref_prelu(int ndim, const int64_t *shape, const double *x, int64_t wlen, const double *w, double *y) {
    int64_t outer, inner, numel = 1, i;
    int t;
    for (t = 0; t < ndim; t++) numel *= shape[t];
    around(ndim, shape, 1, &outer, &inner);
    for (i = 0; i < numel; i++) {
        int64_t c = (i / inner) % shape[1];
        double slope = w[wlen == 1 ? 0 : c];
        y[i] = x[i] > 0 ? x[i] : slope * x[i];
    }
}

/* Batched matmul with numpy batch broadcasting (no transposes). */
static void ref_matmul(int an, const int64_t *as, const double *a, int bn, const int64_t *bs, const double *b,
                       double *y) {
    int nb_a = an - 2, nb_b = bn - 2, nb = nb_a > nb_b ? nb_a : nb_b, i;
    int64_t M = as[an - 2], K = as[an - 1], N = bs[bn - 1], batches = 1, bi, m, n, k;
    int64_t out_batch[8];
    for (i = 0; i < nb; i++) {
        int da = i - (nb - nb_a), db = i - (nb - nb_b);
        int64_t sa = da >= 0 ? as[da] : 1, sb = db >= 0 ? bs[db] : 1;
        out_batch[i] = sa > sb ? sa : sb;
        batches *= out_batch[i];
    }
    for (bi = 0; bi < batches; bi++) {
        int64_t rest = bi, ao = 0, bo = 0, astride = 1, bstride = 1;
        for (i = nb - 1; i >= 0; i--) { /* this batch's offsets in a and b (broadcast dims stay at 0) */
            int da = i - (nb - nb_a), db = i - (nb - nb_b);
            int64_t idx = rest % out_batch[i];
            rest /= out_batch[i];
            if (da >= 0) {
                ao += (as[da] == 1 ? 0 : idx) * astride;
                astride *= as[da];
            }
            if (db >= 0) {
                bo += (bs[db] == 1 ? 0 : idx) * bstride;
                bstride *= bs[db];
            }
        }
        for (m = 0; m < M; m++)
            for (n = 0; n < N; n++) {
                double acc = 0;
                for (k = 0; k < K; k++) acc += a[ao * M * K + m * K + k] * b[bo * K * N + k * N + n];
                y[(bi * M + m) * N + n] = acc;
            }
    }
}

/* The operator on one set of tensors (whole or one rank's slices). */
static void run_op(const par_op_desc *op, int ndim0, const int64_t *s0, const double *x0, int ndim1, const int64_t *s1,
                   const double *x1, const par_layout *y_layout, int rank, double *y) {
    int axis = 0;
    if (op->axes) while (!(op->axes >> axis & 1u)) axis++;
    else axis = ndim0 - 1;
    switch (op->kind) {
    case PAR_OP_LOG_SOFTMAX:
    case PAR_OP_L2_NORMALIZE: ref_axis_op(op->kind, ndim0, s0, axis, x0, y); break;
    case PAR_OP_PRELU: ref_prelu(ndim0, s0, x0, s1[0], x1, y); break;
    case PAR_OP_MATMUL:
    case PAR_OP_BATCH_MATMUL: ref_matmul(ndim0, s0, x0, ndim1, s1, x1, y); break;
    case PAR_OP_DROPOUT: { /* y = x * mask / keep, the mask from the global element index */
        int64_t n = par_layout_local_numel(y_layout), i;
        uint8_t *mask = (uint8_t *)malloc((size_t)n);
        CHECK_OK(par_dropout_mask(y_layout, rank, 1234, 0.75, mask));
        for (i = 0; i < n; i++) y[i] = mask[i] ? x0[i] / 0.75 : 0.0;
        free(mask);
        break;
    }
    case PAR_OP_ONE_HOT: { /* y[..., c] = (index == c), c counted from this rank's class offset */
        int64_t off[PARALLEL_MAX_DIMS], n = numel_of(ndim0, s0), c, i, lc = y_layout->shape[ndim0];
        int64_t ls[PARALLEL_MAX_DIMS];
        CHECK_OK(par_layout_local_offset(y_layout, rank, off));
        par_layout_local_shape(y_layout, ls);
        lc = ls[ndim0];
        for (i = 0; i < n; i++)
            for (c = 0; c < lc; c++) y[i * lc + c] = x0[i] == (double)(off[ndim0] + c) ? 1.0 : 0.0;
        break;
    }
    default: CHECK_MSG(0, "run_op: no reference for %s", par_op_kind_name(op->kind));
    }
}

/* Infer `strategy` on `devices`, run every rank, complete the forward comm on
   the simulator and compare with the whole-tensor result. */
static void simulate_op(const par_op_desc *op, const char *strategy, int devices) {
    par_op_info info;
    par_layout whole_y, y_done;
    par_mesh one;
    double *global[2] = {NULL, NULL}, *ref, *locals_in[2][64], *locals_out[64];
    int64_t local_shape[2][PARALLEL_MAX_DIMS], cap, i;
    int ranks, r, k, ones[1] = {1};
    if (infer(op, strategy, devices, &info) != PAR_OK) {
        CHECK_MSG(0, "%s %s: %s", par_op_kind_name(op->kind), strategy, par_last_error());
        return;
    }
    ranks = par_mesh_size(&info.dev_matrix);
    for (k = 0; k < info.num_inputs; k++) {
        int64_t n = numel_of(op->ndim[k], op->shape[k]);
        global[k] = (double *)malloc(sizeof(double) * (size_t)n);
        for (i = 0; i < n; i++) global[k][i] = (double)((i * 7 + k * 3) % 11) - 5; /* small integers, both signs */
    }
    /* the whole result: the same code on one device */
    CHECK_OK(par_mesh_init(&one, 1, ones, NULL));
    CHECK_OK(par_layout_init(&whole_y, &one, info.outputs[0].ndim, info.outputs[0].shape, NULL, 0));
    ref = (double *)malloc(sizeof(double) * (size_t)numel_of(whole_y.ndim, whole_y.shape));
    run_op(op, op->ndim[0], op->shape[0], global[0], op->ndim[1], op->shape[1], global[1], &whole_y, 0, ref);
    /* every rank on its slices */
    y_done = info.outputs[0];
    y_done.map.partial = 0;
    cap = par_layout_local_numel(&info.outputs[0]);
    for (k = 0; k < info.num_inputs; k++) {
        par_layout_local_shape(&info.inputs[k], local_shape[k]);
        for (r = 0; r < ranks; r++)
            locals_in[k][r] = (double *)malloc(sizeof(double) * (size_t)par_layout_local_numel(&info.inputs[k]));
        CHECK_OK(par_sim_scatter(&info.inputs[k], global[k], locals_in[k]));
    }
    for (r = 0; r < ranks; r++) {
        locals_out[r] = (double *)malloc(sizeof(double) * (size_t)cap);
        run_op(op, op->ndim[0], local_shape[0], locals_in[0][r], op->ndim[1], local_shape[1],
               info.num_inputs > 1 ? locals_in[1][r] : NULL, &info.outputs[0], r, locals_out[r]);
    }
    if (info.outputs[0].map.partial) { /* the forward AllReduce, as a plan on the simulator */
        par_plan plan;
        CHECK_INT(info.num_forward, 1);
        CHECK_OK(par_plan_redistribution(&info.outputs[0], &y_done, NULL, &plan));
        CHECK_INT(plan.num_ops, 1);
        CHECK_INT(plan.ops[0].kind, PAR_REDIST_ALL_REDUCE);
        CHECK_INT(plan.ops[0].group, info.forward[0].group);
        CHECK_OK(par_sim_run(&plan, locals_out));
    } else {
        CHECK_INT(info.num_forward, 0);
    }
    CHECK_MSG(par_sim_matches(&y_done, ref, locals_out), "%s %s on %d devices: %s", par_op_kind_name(op->kind),
              strategy, devices, par_last_error());
    for (r = 0; r < ranks; r++) {
        free(locals_out[r]);
        for (k = 0; k < info.num_inputs; k++) free(locals_in[k][r]);
    }
    for (k = 0; k < info.num_inputs; k++) free(global[k]);
    free(ref);
}

/* log_softmax_info_test.cc (MindSpore): x [2,4,8,16], axis -2, strategy
   ((2,4,1,16)) on 128 devices: device matrix [2,4,1,16], maps [3,2,1,0], no
   forward and no mirror ops; CheckStrategy1-3 refuse two tuples, three entries
   and a split axis. Here the same expectations, then simulated. */
static void test_log_softmax(void) {
    par_op_desc op = make_op(PAR_OP_LOG_SOFTMAX, "2x4x8x16");
    par_op_info info;
    op.axes = 1u << 2;
    CHECK_OK(infer(&op, "((2,4,1,16),)", 128, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,1,16]");
    CHECK_STR(L(&info.inputs[0]), "[3,2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[3,2,1,0]");
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    CHECK_ERR(infer(&op, "((2,2,8,16),(2,4,16,1))", 128, &info), PAR_ESTRATEGY, "strategy has 2 inputs");
    CHECK_ERR(infer(&op, "((2,4,8),)", 128, &info), PAR_ESTRATEGY, "input 0 strategy has 3 entries");
    CHECK_ERR(infer(&op, "((2,4,8,16),)", 1024, &info), PAR_ESTRATEGY,
              "log_softmax: input 0 dim 2 is the log_softmax axis and may not be split (shard 8)");
    CHECK_INT(par_op_kind_parse("LogSoftmax", &op.kind), PAR_OK);
    CHECK_INT(op.kind, PAR_OP_LOG_SOFTMAX);
    op = make_op(PAR_OP_LOG_SOFTMAX, "4x6x8");
    simulate_op(&op, "((2,3,1),)", 6);
    simulate_op(&op, "((1,1,1),)", 4); /* repeated calculation */
    op.axes = 1u;
    simulate_op(&op, "((1,3,4),)", 12);
}

/* l2_normalize_info_test.cc (MindSpore): x [32,64,96], axis 0 there, strategy
   ((1,4,8)) on 32 devices: device matrix [1,4,8], no forward op; a split axis
   is refused. */
static void test_l2_normalize(void) {
    par_op_desc op = make_op(PAR_OP_L2_NORMALIZE, "32x64x96");
    par_op_info info;
    op.axes = 1u;
    CHECK_OK(infer(&op, "((1,4,8),)", 32, &info));
    CHECK_STR(M(&info.dev_matrix), "[1,4,8]");
    CHECK_STR(L(&info.inputs[0]), "[2,1,0]"); /* MindSpore's map too; dim 2 has size 1 and splits nothing */
    CHECK_INT(info.num_forward, 0);
    CHECK_ERR(infer(&op, "((2,4,4),)", 32, &info), PAR_ESTRATEGY,
              "l2_normalize: input 0 dim 0 is the normalized axis and may not be split (shard 2)");
    CHECK_ERR(infer(&op, "((1,4,8),)", 12, &info), PAR_ESTRATEGY, "does not divide the 12 devices");
    op = make_op(PAR_OP_L2_NORMALIZE, "6x8x4");
    simulate_op(&op, "((3,2,1),)", 6);
    op.axes = 2u;
    simulate_op(&op, "((2,1,4),)", 16);
}

/* prelu_test.cc (MindSpore): x [64,4,8,16], weight [4], strategy
   ((2,1,8,16),(1,)) on 256 devices: device matrix [2,1,8,16]; the weight's
   split must match x's channel split (CheckStrategy: ((2,4,8,16),(2,)) fails);
   the weight is a parameter, so its gradient is all-reduced over the dims it
   does not use (mirror). */
static void test_prelu(void) {
    par_op_desc op = make_op(PAR_OP_PRELU, "64x4x8x16,4");
    par_op_info info;
    op.params = 2;
    CHECK_OK(infer(&op, "((2,1,8,16),(1,))", 256, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,1,8,16]");
    CHECK_STR(L(&info.inputs[0]), "[3,2,1,0]");
    CHECK_STR(L(&info.inputs[1]), "[2]");
    CHECK_STR(L(&info.outputs[0]), "[3,2,1,0]");
    CHECK_INT(info.num_forward, 0);
    /* weight unsplit: summed over devs 3 (2), 1 (8), 0 (16) = 256 ranks; [4] f32 = 16 B, 2*255/256*16 */
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 256, 0xb, 31);
    CHECK_ERR(infer(&op, "((2,4,8,16),(2,))", 1024, &info), PAR_ESTRATEGY,
              "prelu: channel dim split 4 in input 0 dim 1 but 2 in input 1 dim 0 (they must match)");
    /* one shared slope: broadcast, never split */
    op = make_op(PAR_OP_PRELU, "8x4x6,1");
    CHECK_ERR(infer(&op, "((1,2,1),(2,))", 2, &info), PAR_ESTRATEGY, "input 1 dim 0 has size 1 and is broadcast");
    op = make_op(PAR_OP_PRELU, "8x4x6,3");
    CHECK_ERR(infer(&op, "((1,1,1),(1,))", 1, &info), PAR_ESHAPE, "with x's 4 channels (dim 1) or 1 shared slope");
    op = make_op(PAR_OP_PRELU, "8,8");
    CHECK_ERR(infer(&op, "((1,),(1,))", 1, &info), PAR_ESHAPE, "needs at least 2 dims");
    op = make_op(PAR_OP_PRELU, "4x6x5,6");
    op.params = 2;
    simulate_op(&op, "((2,3,1),(3,))", 6);
    simulate_op(&op, "((2,1,1),(1,))", 4);
    op = make_op(PAR_OP_PRELU, "4x6x5,1");
    simulate_op(&op, "((2,3,1),(1,))", 6);
}

/* dropout_do_mask_info_test.cc (MindSpore) splits Dropout like any elementwise
   op; the keep mask is a second output laid out like y, and replicas must draw
   the same mask: par_dropout_mask hashes the global element index. */
static void test_dropout(void) {
    par_op_desc op = make_op(PAR_OP_DROPOUT, "8x12");
    par_op_info info;
    par_mesh mesh, one;
    par_layout split, whole;
    uint8_t full[96], part[96];
    int r, ones[1] = {1}, kept = 0;
    int64_t off[2], i, j;
    CHECK_OK(infer(&op, "((2,3),)", 12, &info));
    CHECK_INT(info.num_outputs, 2);
    CHECK_STR(L(&info.outputs[1]), L(&info.outputs[0]));
    CHECK_STR(M(&info.dev_matrix), "[2,3,2]"); /* repeated dim 2 on the right */
    CHECK_INT(info.num_forward, 0);
    /* the whole mask once; every rank's slice of any layout must be its part of it */
    CHECK_OK(par_mesh_init(&one, 1, ones, NULL));
    CHECK_OK(par_layout_init(&whole, &one, 2, op.shape[0], NULL, 0));
    CHECK_OK(par_dropout_mask(&whole, 0, 99, 0.5, full));
    for (i = 0; i < 96; i++) kept += full[i];
    CHECK_MSG(kept > 30 && kept < 66, "keep_prob 0.5 kept %d of 96", kept);
    CHECK_OK(par_mesh_parse("2,3,2", &mesh));
    CHECK_OK(par_layout_parse(&split, &mesh, 2, op.shape[0], "[2,1]"));
    for (r = 0; r < 12; r++) { /* ranks 2k and 2k+1 are replicas: both must match the whole mask */
        CHECK_OK(par_dropout_mask(&split, r, 99, 0.5, part));
        CHECK_OK(par_layout_local_offset(&split, r, off));
        for (i = 0; i < 4; i++)
            for (j = 0; j < 4; j++)
                CHECK_MSG(part[i * 4 + j] == full[(off[0] + i) * 12 + off[1] + j], "rank %d element (%lld,%lld)", r,
                          (long long)i, (long long)j);
    }
    CHECK_OK(par_dropout_mask(&whole, 0, 99, 1.0, part));
    for (i = 0, kept = 0; i < 96; i++) kept += part[i];
    CHECK_INT(kept, 96);
    CHECK_ERR(par_dropout_mask(&whole, 0, 99, 1.5, part), PAR_EINVAL, "keep_prob 1.5 must be in [0,1]");
    CHECK_ERR(par_dropout_mask(&split, 12, 99, 0.5, part), PAR_EINVAL, "rank 12 is outside");
    CHECK_ERR(par_dropout_mask(NULL, 0, 99, 0.5, part), PAR_EINVAL, "NULL");
    CHECK_ERR(infer(&op, "((2,3,1),)", 12, &info), PAR_ESTRATEGY, "input 0 strategy has 3 entries");
    simulate_op(&op, "((2,3),)", 12);
    simulate_op(&op, "((4,1),)", 8);
}

/* MatMul / BatchMatMul batch broadcasting: the seed's data-parallel example
   ((2^N,1,1),(1,1,1)) with a [1,K,N] weight, a 2-D left operand against a
   batched right one, and batched inputs to matmul. */
static void test_matmul_broadcast(void) {
    par_op_desc op = make_op(PAR_OP_BATCH_MATMUL, "8x4x6,1x6x10");
    par_op_info info;
    op.params = 2;
    CHECK_OK(infer(&op, "((8,1,1),(1,1,1))", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[8,1,1,1]");
    CHECK_STR(L(&info.inputs[0]), "[3,2,1]");
    CHECK_STR(L(&info.inputs[1]), "[-1,1,0]"); /* the size-1 batch dim is broadcast: never split */
    CHECK_STR(L(&info.outputs[0]), "[3,2,0]");
    CHECK_INT(info.num_forward, 0);
    /* the weight [1,6,10] f32 = 240 B is the same on all 8 ranks: 2*7/8*240 */
    check_comm(&info.mirror[1], PAR_COMM_ALL_REDUCE, 8, 0x8, 420);
    CHECK_ERR(infer(&op, "((8,1,1),(2,1,1))", 16, &info), PAR_ESTRATEGY,
              "input 1 dim 0 has size 1 and is broadcast against size 8, so it may not be split");
    simulate_op(&op, "((8,1,1),(1,1,1))", 8);
    simulate_op(&op, "((2,2,3),(1,3,1))", 12); /* contraction split: partial output, all_reduce */
    simulate_op(&op, "((2,1,1),(1,1,2))", 4);
    /* a [M,K] against b [B,K,N]: out [B,M,N]; a is shared by every batch */
    op = make_op(PAR_OP_BATCH_MATMUL, "4x6,3x6x10");
    CHECK_OK(infer(&op, "((2,1),(3,1,1))", 6, &info));
    CHECK_STR(shape_text(&info.outputs[0]), "[3,4,10]");
    /* device matrix [batch 3, M 2, K 1, N 1]: batch -> 3, M -> 2, K -> 1, N -> 0 */
    CHECK_STR(L(&info.inputs[0]), "[2,1]");
    CHECK_STR(L(&info.inputs[1]), "[3,1,0]");
    /* a's gradient is summed over the batch split it does not see: a local [2,6] f32 = 48 B, 2*2/3*48 */
    check_comm(&info.backward[0], PAR_COMM_ALL_REDUCE, 3, 0x8, 64);
    simulate_op(&op, "((2,1),(3,1,1))", 6);
    simulate_op(&op, "((1,2),(3,2,5))", 30);
    /* matmul takes batched inputs like batch_matmul */
    op = make_op(PAR_OP_MATMUL, "2x3x4x6,3x6x5");
    CHECK_OK(infer(&op, "((2,3,1,2),(3,2,1))", 12, &info));
    CHECK_STR(shape_text(&info.outputs[0]), "[2,3,4,5]");
    simulate_op(&op, "((2,3,1,2),(3,2,1))", 12);
    simulate_op(&op, "((1,1,4,1),(1,1,5))", 20);
}


/* Dense-label cross entropy on each rank's slices, the class-split sums on the
   simulator (Z = sum exp(x), L = sum labels, D = sum labels * x per row, all
   plain sums, so one all_reduce of a [rows...,3] partial tensor), then loss =
   log(Z) L - D and gradient = exp(x) / Z * L - labels. Compared with the whole
   tensors within 1e-12 (the class sums add in another order). */
static void simulate_dense_cross_entropy(const par_op_desc *op, const char *strategy, int devices) {
    par_op_info info;
    par_layout sums_l, sums_done;
    int nd = op->ndim[0], ranks, r, t, k;
    int64_t C = op->shape[0][nd - 1], rows = numel_of(nd - 1, op->shape[0]), i, c;
    int64_t lshape[PARALLEL_MAX_DIMS], off[PARALLEL_MAX_DIMS], sums_shape[PARALLEL_MAX_DIMS];
    double *x, *lab, *want_loss, *want_grad, *lx[64], *ll[64], *sums[64];
    double worst = 0;
    if (infer(op, strategy, devices, &info) != PAR_OK) {
        CHECK_MSG(0, "cross_entropy %s: %s", strategy, par_last_error());
        return;
    }
    CHECK_INT(info.num_outputs, 2);
    ranks = par_mesh_size(&info.dev_matrix);
    x = (double *)malloc(sizeof(double) * (size_t)(rows * C));
    lab = (double *)malloc(sizeof(double) * (size_t)(rows * C));
    want_loss = (double *)malloc(sizeof(double) * (size_t)rows);
    want_grad = (double *)malloc(sizeof(double) * (size_t)(rows * C));
    for (i = 0; i < rows * C; i++) {
        x[i] = (double)((i * 5) % 9) / 4 - 1;
        lab[i] = (double)((i * 3) % 4) / 8;
    }
    for (i = 0; i < rows; i++) { /* the whole tensors */
        double z = 0, l = 0, d = 0;
        for (c = 0; c < C; c++) z += exp(x[i * C + c]), l += lab[i * C + c], d += lab[i * C + c] * x[i * C + c];
        want_loss[i] = log(z) * l - d;
        for (c = 0; c < C; c++) want_grad[i * C + c] = exp(x[i * C + c]) / z * l - lab[i * C + c];
    }
    /* the sums tensor [rows...,3]: split like the loss, partial over the class split */
    memcpy(sums_shape, op->shape[0], sizeof(int64_t) * (size_t)(nd - 1));
    sums_shape[nd - 1] = 3;
    sums_l = info.inputs[0];
    sums_l.shape[nd - 1] = 3;
    sums_l.map.count[nd - 1] = 0;
    sums_l.map.partial = info.forward[0].dev_mask;
    sums_done = sums_l;
    sums_done.map.partial = 0;
    CHECK_OK(par_layout_check(&sums_l));
    par_layout_local_shape(&info.inputs[0], lshape);
    for (r = 0; r < ranks; r++) {
        lx[r] = (double *)malloc(sizeof(double) * (size_t)par_layout_local_numel(&info.inputs[0]));
        ll[r] = (double *)malloc(sizeof(double) * (size_t)par_layout_local_numel(&info.inputs[1]));
        sums[r] = (double *)malloc(sizeof(double) * (size_t)par_layout_local_numel(&sums_l));
    }
    CHECK_OK(par_sim_scatter(&info.inputs[0], x, lx));
    CHECK_OK(par_sim_scatter(&info.inputs[1], lab, ll));
    {
        int64_t lrows = par_layout_local_numel(&info.inputs[0]) / lshape[nd - 1], lc = lshape[nd - 1];
        for (r = 0; r < ranks; r++)
            for (i = 0; i < lrows; i++) {
                double z = 0, l = 0, d = 0;
                for (c = 0; c < lc; c++) z += exp(lx[r][i * lc + c]), l += ll[r][i * lc + c], d += ll[r][i * lc + c] * lx[r][i * lc + c];
                sums[r][i * 3] = z, sums[r][i * 3 + 1] = l, sums[r][i * 3 + 2] = d;
            }
        if (sums_l.map.partial) { /* the forward all_reduce, on the simulator */
            par_plan plan;
            CHECK_OK(par_plan_redistribution(&sums_l, &sums_done, NULL, &plan));
            CHECK_INT(plan.ops[0].kind, PAR_REDIST_ALL_REDUCE);
            CHECK_INT(plan.ops[0].group, info.forward[0].group);
            CHECK_OK(par_sim_run(&plan, sums));
        } else {
            CHECK_INT(info.num_forward, 0);
        }
        for (r = 0; r < ranks; r++) { /* finish on every rank, compare with the whole result */
            CHECK_OK(par_layout_local_offset(&info.inputs[0], r, off));
            for (i = 0; i < lrows; i++) {
                int64_t row = 0, rest = i;
                double z = sums[r][i * 3], l = sums[r][i * 3 + 1], d = sums[r][i * 3 + 2];
                for (t = nd - 2, k = 1; t >= 0; t--) { /* the global row of local row i */
                    row += (off[t] + rest % lshape[t]) * k;
                    rest /= lshape[t];
                    k = (int)(k * op->shape[0][t]);
                }
                worst = fmax(worst, fabs(log(z) * l - d - want_loss[row]));
                for (c = 0; c < lc; c++)
                    worst = fmax(worst, fabs(exp(lx[r][i * lc + c]) / z * l - ll[r][i * lc + c] -
                                             want_grad[row * C + off[nd - 1] + c]));
            }
        }
    }
    CHECK_MSG(worst < 1e-12, "dense cross_entropy %s on %d devices: off by %g", strategy, devices, worst);
    for (r = 0; r < ranks; r++) free(lx[r]), free(ll[r]), free(sums[r]);
    free(x), free(lab), free(want_loss), free(want_grad);
    (void)sums_shape;
}

/* softmax_entropy_loss_info_test.cc (MindSpore): logits and dense labels
   [2,4,8,16], strategy ((2,4,8,1),(2,4,8,1)) on 64 devices: device matrix
   [2,4,8,1], both maps [3,2,1,0], the gradient output [3,2,1,0], no forward and
   no mirror ops; CheckStrategy1-2 refuse mismatched tuples. (MindSpore's loss
   there is 1-D [2], map [3]; ours keeps every row, [2,4,8], map [3,2,1].) */
static void test_dense_cross_entropy(void) {
    par_op_desc op = make_op(PAR_OP_CROSS_ENTROPY, "2x4x8x16,2x4x8x16");
    par_op_info info;
    CHECK_OK(infer(&op, "((2,4,8,1),(2,4,8,1))", 64, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,8,1]");
    CHECK_STR(L(&info.inputs[0]), "[3,2,1,0]");
    CHECK_STR(L(&info.inputs[1]), "[3,2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[3,2,1]");
    CHECK_STR(L(&info.outputs[1]), "[3,2,1,0]");
    CHECK_STR(shape_text(&info.outputs[1]), "[2,4,8,16]");
    CHECK_INT(info.num_outputs, 2);
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    CHECK_INT(info.backward[1].kind, PAR_COMM_NONE);
    CHECK_ERR(infer(&op, "((2,2,8,16),(2,4,16,1))", 64, &info), PAR_ESTRATEGY, "input 1 dim 2 (size 8) is not divisible by its shard 16");
    CHECK_ERR(infer(&op, "((2,2,1,1),(2,4,1,1))", 16, &info), PAR_ESTRATEGY, "row dim 1 split 2 in input 0 dim 1 but 4 in input 1 dim 1");
    CHECK_ERR(infer(&op, "((2,4,8),)", 64, &info), PAR_ESTRATEGY, "strategy has 1 input");
    /* vocab-parallel: the class dim split 4 ways, three all-reduces per row */
    CHECK_OK(infer(&op, "((2,1,1,4),(2,1,1,4))", 8, &info));
    CHECK_INT(info.num_forward, 1);
    CHECK_INT(info.forward[0].count, 3);
    CHECK_INT(info.forward[0].group, 4);
    op = make_op(PAR_OP_CROSS_ENTROPY, "8x512,8x500");
    CHECK_ERR(infer(&op, "((1,1),(1,1))", 1, &info), PAR_ESHAPE, "or input 0's own shape (dense labels)");
    op = make_op(PAR_OP_CROSS_ENTROPY, "4x6x10,4x6x10");
    simulate_dense_cross_entropy(&op, "((2,3,1),(2,3,1))", 6);
    simulate_dense_cross_entropy(&op, "((2,1,5),(2,1,5))", 10);
    simulate_dense_cross_entropy(&op, "((1,1,2),(1,1,2))", 4);
}


/* matmul_info_test.cc (MindSpore), TestMatmulInfo: batched MatMul inputs and a
   2-D left operand against a batched right one, on a 1024-device stage. */
static void test_mindspore_matmul_info(void) {
    par_op_desc m1 = make_op(PAR_OP_MATMUL, "2x4x8x16,2x4x16x32");
    par_op_desc m2 = make_op(PAR_OP_MATMUL, "2x4x8x16,32x16");
    par_op_desc m3 = make_op(PAR_OP_MATMUL, "8x16,2x4x32x16");
    par_op_info info;
    int64_t slice[PARALLEL_MAX_DIMS];
    m2.transpose_b = m3.transpose_b = 1;
    m1.params = m2.params = m3.params = 2;
    /* InferDevMatrixShape1, InferTensorMap1, InferSliceShape1, GetForwardOp1 */
    CHECK_OK(infer(&m1, "((2,4,8,16),(2,4,16,1))", 1024, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,8,16,1]");
    CHECK_STR(L(&info.inputs[0]), "[4,3,2,1]");
    CHECK_STR(L(&info.inputs[1]), "[4,3,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[4,3,2,0] partial=1");
    par_layout_local_shape(&info.inputs[1], slice);
    CHECK(slice[0] == 1 && slice[1] == 1 && slice[2] == 1 && slice[3] == 32);
    CHECK_INT(info.num_forward, 1);
    CHECK_INT(info.forward[0].kind, PAR_COMM_ALL_REDUCE);
    CHECK_INT(info.forward[0].group, 16);
    /* GetMirrorOPs1: b is not split along M (dev 2, 8 ways): its mirror group */
    CHECK_INT(info.mirror[1].kind, PAR_COMM_ALL_REDUCE);
    CHECK_INT(info.mirror[1].group, 8);
    /* InferDevMatrixShape2 */
    CHECK_OK(infer(&m1, "((2,4,8,8),(2,4,8,2))", 1024, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,8,8,2]");
    /* GetForwardOp2: contraction unsplit, no forward op */
    CHECK_OK(infer(&m1, "((2,4,8,1),(2,4,1,16))", 1024, &info));
    CHECK_INT(info.num_forward, 0);
    /* CheckStrategy1-3: batch mismatch, wrong entry count, contraction mismatch */
    CHECK_ERR(infer(&m1, "((2,2,8,16),(2,4,16,1))", 1024, &info), PAR_ESTRATEGY, "batch dim 1 split 2");
    CHECK_ERR(infer(&m1, "((2,4,8,16),(4,16,1))", 1024, &info), PAR_ESTRATEGY, "input 1 strategy has 3 entries");
    CHECK_ERR(infer(&m1, "((2,4,8,16),(2,4,8,1))", 1024, &info), PAR_ESTRATEGY, "contraction dim split 16");
    /* matmul2 (transpose_b, shared 2-D weight): InferDevMatrixShape3-4, InferTensorMap2, InferSliceShape2 */
    CHECK_OK(infer(&m2, "((2,4,8,16),(1,16))", 1024, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,8,16,1]");
    CHECK_STR(L(&info.inputs[0]), "[4,3,2,1]");
    CHECK_STR(L(&info.inputs[1]), "[0,1]");
    CHECK_STR(L(&info.outputs[0]), "[4,3,2,0] partial=1");
    par_layout_local_shape(&info.inputs[1], slice);
    CHECK(slice[0] == 32 && slice[1] == 1);
    CHECK_OK(infer(&m2, "((2,4,8,8),(2,8))", 1024, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,8,8,2]");
    /* matmul3 (a 2-D left operand, batched right): InferDevMatrixShape5-6, InferTensorMap3, InferSliceShape3 */
    CHECK_OK(infer(&m3, "((8,16),(2,4,1,16))", 1024, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,8,16,1]");
    CHECK_STR(L(&info.inputs[0]), "[2,1]");
    CHECK_STR(L(&info.inputs[1]), "[4,3,0,1]");
    CHECK_STR(L(&info.outputs[0]), "[4,3,2,0] partial=1");
    CHECK_STR(shape_text(&info.outputs[0]), "[2,4,8,32]");
    par_layout_local_shape(&info.inputs[1], slice);
    CHECK(slice[0] == 1 && slice[1] == 1 && slice[2] == 32 && slice[3] == 1);
    CHECK_OK(infer(&m3, "((8,8),(2,4,2,8))", 1024, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,8,8,2]");
}


/* onehot_info_test.cc (MindSpore): indices [64], depth 10, on an 8-device
   stage. ((8,1)): device matrix [8,1], maps [1] and [1,0], slices [8] and
   [8,10]; ((4,1)): [4,1,2] (2 copies); ((4,2)): [4,2], output slice [16,5];
   ((2,2)): output slice [32,5]; no mirror ops; CheckStrategy1: ((16,)) fails.
   MindSpore's empty tuples for on/off values are not written here. */
static void test_one_hot(void) {
    par_op_desc op = make_op(PAR_OP_ONE_HOT, "64");
    par_op_info info;
    int64_t slice[PARALLEL_MAX_DIMS];
    op.depth = 10;
    CHECK_OK(infer(&op, "((8,1),)", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[8,1]");
    CHECK_STR(L(&info.inputs[0]), "[1]");
    CHECK_STR(L(&info.outputs[0]), "[1,0]");
    par_layout_local_shape(&info.outputs[0], slice);
    CHECK(slice[0] == 8 && slice[1] == 10);
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    CHECK_INT(info.backward[0].kind, PAR_COMM_NONE); /* integer indices have no gradient */
    CHECK_OK(infer(&op, "((4,1),)", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[4,1,2]");
    CHECK_OK(infer(&op, "((4,2),)", 8, &info));
    CHECK_STR(M(&info.dev_matrix), "[4,2]");
    par_layout_local_shape(&info.outputs[0], slice);
    CHECK(slice[0] == 16 && slice[1] == 5);
    CHECK_OK(infer(&op, "((2,2),)", 8, &info));
    par_layout_local_shape(&info.outputs[0], slice);
    CHECK(slice[0] == 32 && slice[1] == 5);
    CHECK_ERR(infer(&op, "((16,),)", 8, &info), PAR_ESTRATEGY,
              "one_hot: input 0 strategy has 1 entry; it needs 2, one per index dim and one for depth");
    CHECK_ERR(infer(&op, "((1,3),)", 3, &info), PAR_ESTRATEGY, "input 0 dim 1 (size 10) is not divisible by its shard 3");
    op.depth = 0;
    CHECK_ERR(infer(&op, "((8,1),)", 8, &info), PAR_EINVAL, "set par_op_desc.depth");
    {   /* enumeration writes the depth entry too */
        par_strategy all[64];
        int count = 0, k, seen_depth_split = 0;
        op.depth = 10;
        CHECK_OK(par_op_strategies(&op, 4, all, NULL, 64, &count));
        for (k = 0; k < count && k < 64; k++) {
            CHECK_INT(all[k].ndim[0], 2);
            seen_depth_split |= all[k].shard[0][1] > 1;
        }
        CHECK(seen_depth_split);
    }
    op = make_op(PAR_OP_ONE_HOT, "6x4");
    op.depth = 6;
    simulate_op(&op, "((2,2,3),)", 12);
    simulate_op(&op, "((3,1,2),)", 12);
    simulate_op(&op, "((1,1,1),)", 2);
}


/* Reshape whose output layout the next operator decides (MindSpore's default):
   desc.out_map gives the consumer's map; when it is not the local view the
   forward step is a reshape redistribution, run here on the simulator. */
static void test_reshape_consumer(void) {
    par_op_desc op = make_op(PAR_OP_RESHAPE, "4x8x6");
    par_op_info info;
    int want_cols[2] = {-1, 0}, local_view[2] = {2, 1}, bad_dim[2] = {-1, 5}, bad_div[2] = {0, -1};
    op.out_ndim = 2;
    op.out_shape[0] = 4;
    op.out_shape[1] = 48;
    /* ((1,1,2)) alone is refused (8 runs of 3 per rank); with the consumer's [-1,0] it is a redistribution */
    op.out_map = want_cols;
    CHECK_OK(infer(&op, "((1,1,2),)", 2, &info));
    CHECK_STR(M(&info.dev_matrix), "[1,1,2]");
    CHECK_STR(L(&info.inputs[0]), "[2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[-1,0]");
    CHECK_INT(info.output_redistribution, 1);
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    { /* the forward step on the simulator: every rank ends with its slice of the reshaped tensor */
        double global[192], *locals[2];
        par_plan plan;
        int r, i;
        for (i = 0; i < 192; i++) global[i] = i + 1;
        CHECK_OK(par_plan_redistribution(&info.inputs[0], &info.outputs[0], NULL, &plan));
        CHECK(plan.total_bytes > 0);
        for (r = 0; r < 2; r++) locals[r] = (double *)malloc(sizeof(double) * (size_t)plan.max_local_numel);
        CHECK_OK(par_sim_scatter(&info.inputs[0], global, locals));
        CHECK_OK(par_sim_run(&plan, locals));
        CHECK_MSG(par_sim_matches(&info.outputs[0], global, locals), "reshape to the consumer's layout: %s",
                  par_last_error());
        for (r = 0; r < 2; r++) free(locals[r]);
    }
    /* the consumer asks for the local view: nothing moves */
    op.out_map = local_view;
    CHECK_OK(infer(&op, "((2,2,1),)", 4, &info));
    CHECK_STR(L(&info.outputs[0]), "[2,1]");
    CHECK_INT(info.output_redistribution, 0);
    op.out_map = bad_dim;
    CHECK_ERR(infer(&op, "((2,2,1),)", 4, &info), PAR_ESTRATEGY,
              "reshape: out_map[1] is 5; it must be -1 or a device dim 0..2 of the device matrix");
    op.out_map = bad_div;
    CHECK_ERR(infer(&op, "((1,1,3),)", 3, &info), PAR_ESTRATEGY, "reshape: out_map is no layout of the output");
    {   /* a 2-D consumer on a batched reshape, simulated the same way: [2,4,6] -> [8,6], rows split 2 */
        int rows[2] = {1, -1};
        double global[48], *locals[4];
        par_plan plan;
        int r, i;
        op = make_op(PAR_OP_RESHAPE, "2x4x6");
        op.out_ndim = 2;
        op.out_shape[0] = 8;
        op.out_shape[1] = 6;
        op.out_map = rows;
        CHECK_OK(infer(&op, "((1,2,2),)", 4, &info)); /* dev [1,2,2]: the 4 by dev 1, the 6 by dev 0 */
        CHECK_INT(info.output_redistribution, 1);
        for (i = 0; i < 48; i++) global[i] = 2 * i + 1;
        CHECK_OK(par_plan_redistribution(&info.inputs[0], &info.outputs[0], NULL, &plan));
        for (r = 0; r < 4; r++) locals[r] = (double *)malloc(sizeof(double) * (size_t)plan.max_local_numel);
        CHECK_OK(par_sim_scatter(&info.inputs[0], global, locals));
        CHECK_OK(par_sim_run(&plan, locals));
        CHECK_MSG(par_sim_matches(&info.outputs[0], global, locals), "batched reshape: %s", par_last_error());
        for (r = 0; r < 4; r++) free(locals[r]);
    }
}


/* tensor_add_info_test.cc (MindSpore), TestTensorAddInfo on a 32-device stage. */
static void test_mindspore_tensor_add_info(void) {
    par_op_desc op = make_op(PAR_OP_ELEMENTWISE, "32x64x96,32x64x96");
    par_op_info info;
    int64_t slice[PARALLEL_MAX_DIMS];
    /* InferDevMatrixShape1, InferSliceShape1, GetTensorLayout1, GetForwardOp1, GetMirrorOPs1, CheckStrategy4 */
    CHECK_OK(infer(&op, "((2,4,4),(2,4,4))", 32, &info));
    CHECK_STR(M(&info.dev_matrix), "[2,4,4]");
    CHECK_STR(L(&info.inputs[0]), "[2,1,0]");
    CHECK_STR(L(&info.inputs[1]), "[2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[2,1,0]");
    par_layout_local_shape(&info.outputs[0], slice);
    CHECK(slice[0] == 16 && slice[1] == 16 && slice[2] == 24);
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    CHECK_INT(info.mirror[1].kind, PAR_COMM_NONE);
    /* CheckStrategy1-3: mismatched split (64 is not divisible by 6), too many devices, one tuple */
    CHECK_ERR(infer(&op, "((2,4,4),(2,6,4))", 32, &info), PAR_ESTRATEGY, "input 1 dim 1 (size 64) is not divisible");
    CHECK_ERR(infer(&op, "((2,4,8),(2,4,8))", 32, &info), PAR_ESTRATEGY, "shards multiply to 64");
    CHECK_ERR(infer(&op, "((2,4,6),)", 32, &info), PAR_ESTRATEGY, "strategy has 1 input, the operator takes 2");
    /* mirror_ops: [1,48] + [48,1] -> [48,48], ((1,8),(4,1)); input 1 (a parameter here) is
       summed over the 8-way dim it does not see */
    op = make_op(PAR_OP_ELEMENTWISE, "1x48,48x1");
    op.params = 2;
    CHECK_OK(infer(&op, "((1,8),(4,1))", 32, &info));
    CHECK_STR(M(&info.dev_matrix), "[4,8]");
    CHECK_STR(L(&info.outputs[0]), "[1,0]");
    CHECK_INT(info.mirror[1].kind, PAR_COMM_ALL_REDUCE);
    CHECK_INT(info.mirror[1].group, 8);
    CHECK_INT(info.mirror[1].dev_mask, 0x1);
}


/* reduce_method_test.cc (MindSpore), TestReduceSumInfo: x [16,32,64], axis -1,
   keep_dims false, 32-device stage (the input treated as a parameter, as the
   test's mirror expectations assume). */
static void test_mindspore_reduce_sum_info(void) {
    par_op_desc op = make_op(PAR_OP_REDUCE_SUM, "16x32x64");
    par_op_info info;
    int64_t slice[PARALLEL_MAX_DIMS];
    op.axes = 1u << 2;
    op.params = 1;
    /* InferDevMatrixShape1, InferSliceShape1, GetTensorLayout1, GetForwardOp1, GetMirrorOPs1, CheckStrategy4 */
    CHECK_OK(infer(&op, "((4,8,1),)", 32, &info));
    CHECK_STR(M(&info.dev_matrix), "[4,8,1]");
    CHECK_STR(L(&info.inputs[0]), "[2,1,0]");
    CHECK_STR(L(&info.outputs[0]), "[2,1]");
    par_layout_local_shape(&info.inputs[0], slice);
    CHECK(slice[0] == 4 && slice[1] == 4 && slice[2] == 64);
    par_layout_local_shape(&info.outputs[0], slice);
    CHECK(slice[0] == 4 && slice[1] == 4);
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    /* GetForwardOp2, CheckStrategy3: the reduced axis split 2 ways -> AllReduce (sum) */
    CHECK_OK(infer(&op, "((4,4,2),)", 32, &info));
    CHECK_INT(info.num_forward, 1);
    CHECK_INT(info.forward[0].kind, PAR_COMM_ALL_REDUCE);
    CHECK_INT(info.forward[0].group, 2);
    /* GetMirrorOPs2: 16 of 32 devices used, the repeated dim (2) holds copies */
    CHECK_OK(infer(&op, "((4,4,1),)", 32, &info));
    CHECK_STR(M(&info.dev_matrix), "[4,4,1,2]");
    CHECK_INT(info.mirror[0].kind, PAR_COMM_ALL_REDUCE);
    CHECK_INT(info.mirror[0].group, 2);
    /* CheckStrategy1-2: four entries, two tuples */
    CHECK_ERR(infer(&op, "((2,2,8,16),)", 32, &info), PAR_ESTRATEGY, "input 0 strategy has 4 entries");
    CHECK_ERR(infer(&op, "((2,4,8),(2,4,8))", 32, &info), PAR_ESTRATEGY, "strategy has 2 inputs");
}


/* transpose_test.cc (MindSpore), TestTransposeInfo: x [128,64], perm (1,0), on
   a 32-device stage. */
static void test_mindspore_transpose_info(void) {
    par_op_desc op = make_op(PAR_OP_TRANSPOSE, "128x64");
    par_op_info info;
    int64_t slice[PARALLEL_MAX_DIMS];
    int ranks[32], n = 0;
    op.perm[0] = 1;
    op.perm[1] = 0;
    /* InferDevMatrixShape1, InferSliceShape1, GetTensorLayout1, GetForwardOp1, GetMirrorOPs1, CheckStrategy3 */
    CHECK_OK(infer(&op, "((4,8),)", 32, &info));
    CHECK_STR(M(&info.dev_matrix), "[4,8]");
    CHECK_STR(L(&info.inputs[0]), "[1,0]");
    CHECK_STR(L(&info.outputs[0]), "[0,1]");
    par_layout_local_shape(&info.inputs[0], slice);
    CHECK(slice[0] == 32 && slice[1] == 8);
    par_layout_local_shape(&info.outputs[0], slice);
    CHECK(slice[0] == 8 && slice[1] == 32);
    CHECK_INT(info.num_forward, 0);
    CHECK_INT(info.mirror[0].kind, PAR_COMM_NONE);
    /* InferDevMatrixShape2: ((4,1)) on 32 devices; MindSpore's expected [8,4,1] has the
       8 copies on the left, ours on the right ([4,1,8]): the same partition, 8 ranks per slice */
    CHECK_OK(infer(&op, "((4,1),)", 32, &info));
    CHECK_STR(M(&info.dev_matrix), "[4,1,8]");
    CHECK_INT(info.repeated, 8);
    par_layout_local_shape(&info.inputs[0], slice);
    CHECK(slice[0] == 32 && slice[1] == 64);
    CHECK_OK(par_layout_replica_group(&info.inputs[0], 0, ranks, &n));
    CHECK_INT(n, 8);
    /* CheckStrategy1-2: three entries, two tuples */
    CHECK_ERR(infer(&op, "((1,4,8),)", 32, &info), PAR_ESTRATEGY, "input 0 strategy has 3 entries");
    CHECK_ERR(infer(&op, "((2,4,8),(2,4,8))", 32, &info), PAR_ESTRATEGY, "strategy has 2 inputs");
}

int main(void) {
    test_names();
    test_parse_format();
    test_matmul();
    test_matmul_transposed();
    test_batch_matmul();
    test_elementwise();
    test_norms();
    test_softmax();
    test_gather();
    test_cross_entropy();
    test_reshape();
    test_transpose();
    test_flash_attention();
    test_reduce();
    test_enumerate_matmul();
    test_enumerate_others();
    test_enumerate_bounded();
    test_on_mesh();
    test_named();
    test_doc_strategies();
    test_backward();
    test_log_softmax();
    test_l2_normalize();
    test_prelu();
    test_dropout();
    test_matmul_broadcast();
    test_dense_cross_entropy();
    test_mindspore_matmul_info();
    test_one_hot();
    test_reshape_consumer();
    test_mindspore_tensor_add_info();
    test_mindspore_reduce_sum_info();
    test_mindspore_transpose_info();
    return TEST_END("strategy");
}
