/*
 * op_list.h: the one list of backend ops. Everything that has to name every
 * op is generated from it: the fields of the forge_backend table
 * (backend.h), the prototypes of each backend's kernels (cpu_ops.h,
 * cuda_ops.h), the bindings that fill the table (cpu_backend.c,
 * cuda_backend.cu), the op enum and name table below, and the generic
 * GPU-vs-CPU parity test (tests_gpu/test_gpu_parity.c), which walks the list
 * and needs nothing per op beyond what an entry says.
 *
 * Adding an op: one entry here, its CPU kernel cpu_NAME, its CUDA kernel
 * cuda_NAME (or none: a NULL entry is "unsupported"), and, if the model
 * differentiates through it, its rule in src/ops/. Nothing else.
 *
 * An entry is X(NAME, DTYPE, FLAGS, ARGS, CASES):
 * - NAME: the table field and the suffix of the kernels (cpu_NAME, cuda_NAME).
 * - DTYPE: the element type the entry computes in (FORGE_F32 today; a bf16
 *   entry is a separate NAME_bf16 with FORGE_BF16), for the coverage listing.
 * - FLAGS: FORGE_OPF_GEMM if the op runs on the backend's matmul path (the
 *   parity test repeats those under every matmul mode).
 * - ARGS: the arguments after `forge_backend *be`, in order, each one
 *   A(KIND, ...). Lengths and tolerances are C expressions in the entry's
 *   SIZE / SCALAR / DIM names.
 *     A(IN, T, name, len, lo, hi)      read-only T[len]; the test fills it uniform in [lo, hi)
 *     A(IN_OPT, T, name, len, lo, hi)  the same, and NULL is allowed
 *     A(IN_TRIL, T, name, len, lo, hi, n)  the same as IN on and below the diagonal of its trailing (n, n)
 *                                       matrices, 0 above it (causal probabilities)
 *     A(OUT, T, name, len, tol)        written (=) in full; the test poisons it with NaN first
 *     A(OUT_OPT, T, name, len, tol)    the same, and NULL is allowed (not written)
 *     A(ACC, T, name, len, tol)        accumulated (+=); the test pre-fills it with random values
 *     A(ACC_OPT, T, name, len, tol)    the same, and NULL is allowed (nothing accumulated)
 *     A(ACC_IF, T, name, len, tol, flag)  accumulated (+=) when the case's SCALAR `flag` is nonzero, else
 *                                       written (=) in full (a fresh gradient: the test poisons it as OUT)
 *     A(ACC_IF_OPT, T, name, len, tol, flag)  the same, and NULL is allowed
 *     A(INOUT, T, name, len, lo, hi, tol)  read, then overwritten
 *     A(IDS, name, len, range, special, pct)  const int32_t[len] in [0, range); pct % of them `special`
 *     A(SPANS, name, n, count)         const forge_adamw_span[count]: the test cuts [0, n) into count random spans,
 *                                       each with weight decay 0 or 0.1
 *     A(SCRATCH, name, len)            float workspace of len, contents undefined before and after
 *     A(SIZE, T, name)                 a size (int or size_t) taken from the case
 *     A(SCALAR, T, name)               a value taken from the case
 *     A(PARAMS, T, name)               a struct passed by value, taken from the case
 *     A(DIM, name)                     a test-only size (not passed) that lengths may use
 *   Tolerances (max abs error of the GPU against the CPU reference, unless REL):
 *     EXACT (1e-6), ABS(x), SUM(K) (a K-long fp32 reduction summed in another
 *     order: 1e-4 * max(1, sqrt(K)/8)), SUMS(f, K) (f * SUM(K)), GEMM(K) (SUM(K)
 *     under fp32 GEMMs; under tf32 the bound of tf32 operand rounding), REL(x)
 *     (relative); bf16 outputs: ULP(k) (k bf16 units in the last place of the reference value; ULP(0) is
 *     bit-identical, and a zero reference wants an exact zero), ULP_SUMS(k, f, K) (k bf16 ulps of the
 *     reference value + f * SUM(K)).
 *   An entry with several optional arguments runs with every subset of them NULL.
 * - CASES: the shapes the parity test runs, K(designated initializers of the
 *   entry's SIZE / SCALAR / PARAMS / DIM fields). Shapes are chosen to miss
 *   every tile size; the test's quick mode skips cases over 1e6 elements.
 *
 * Conventions every op follows: backend.h (top of file).
 * Shape legend: N rows (= B*T), B batch, T time, C channels, OC output
 * channels, V vocabulary, NH query heads, NKV key/value heads, HS head size.
 */
#ifndef FORGE_OP_LIST_H
#define FORGE_OP_LIST_H

#define FORGE_OPF_GEMM 1u

/* A training qkv row: NH query heads, NKV key heads, NKV value heads, HS each. */
/* The range (lo, hi) of a saved logsumexp over n keys of O(1) scores, so the recomputed probabilities are
 * probabilities, as the forward would have saved them. */
#define FORGE_LSE(n) log((double)(n) + 1.0), log((double)(n) + 1.0) + 1.0
#define FORGE_QKV(NH, NKV, HS) ((size_t)((NH) + 2 * (NKV)) * (HS))

#define FORGE_OP_LIST(X, A, K)                                                                                   \
    /* ---- elementwise --------------------------------------------------------------------------------- */     \
    /* dst[i] += src[i] */                                                                                       \
    X(accumulate, FORGE_F32, 0,                                                                                  \
      A(ACC, float, dst, n, EXACT) A(IN, float, src, n, -3, 3) A(SIZE, size_t, n),                               \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    /* out[i] = a[i] + b[i] (residual add) */                                                                    \
    X(add_forward, FORGE_F32, 0,                                                                                 \
      A(OUT, float, out, n, EXACT) A(IN, float, a, n, -3, 3) A(IN, float, b, n, -3, 3) A(SIZE, size_t, n),       \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    /* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */                                                  \
    X(gelu_forward, FORGE_F32, 0,                                                                                \
      A(OUT, float, out, n, ABS(1e-4)) A(IN, float, inp, n, -3, 3) A(SIZE, size_t, n),                           \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    X(gelu_backward, FORGE_F32, 0,                                                                               \
      A(ACC, float, dinp, n, ABS(1e-4)) A(IN, float, inp, n, -3, 3) A(IN, float, dout, n, -1, 1)                 \
          A(SIZE, size_t, n),                                                                                    \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    /* out = silu(gate) * up, silu(x) = x / (1 + exp(-x)) */                                                     \
    X(swiglu_forward, FORGE_F32, 0,                                                                              \
      A(OUT, float, out, n, ABS(1e-4)) A(IN, float, gate, n, -3, 3) A(IN, float, up, n, -3, 3)                   \
          A(SIZE, size_t, n),                                                                                    \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    X(swiglu_backward, FORGE_F32, 0,                                                                             \
      A(ACC, float, dgate, n, ABS(1e-4)) A(ACC, float, dup, n, ABS(1e-4)) A(IN, float, dout, n, -1, 1)           \
          A(IN, float, gate, n, -3, 3) A(IN, float, up, n, -3, 3) A(SIZE, size_t, n),                            \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    /* The packed form: gu (N,2F) is the output of the MLP's one GEMM on the stacked [gate_w; up_w], row n       \
     * holding gate in columns [0, F) and up in [F, 2F). out (N,F) = silu(gate) up, each element swiglu_forward's \
     * expression; dgu (N,2F) += [dout up silu'(gate) | dout silu(gate)], swiglu_backward's. */                   \
    X(swiglu_packed_forward, FORGE_F32, 0,                                                                       \
      A(OUT, float, out, (size_t)N * F, ABS(1e-4)) A(IN, float, gu, (size_t)N * 2 * F, -3, 3) A(SIZE, int, N)    \
          A(SIZE, int, F),                                                                                       \
      FORGE_SWIGLU_PACKED_CASES(K, FORGE_NO_EXTRA))                                                              \
    X(swiglu_packed_backward, FORGE_F32, 0,                                                                      \
      A(ACC, float, dgu, (size_t)N * 2 * F, ABS(1e-4)) A(IN, float, dout, (size_t)N * F, -1, 1)                  \
          A(IN, float, gu, (size_t)N * 2 * F, -3, 3) A(SIZE, int, N) A(SIZE, int, F),                            \
      FORGE_SWIGLU_PACKED_CASES(K, FORGE_NO_EXTRA))                                                              \
    /* bf16 (docs/mixed-precision.md): fp32 arithmetic on the widened inputs, one rounding where a result is     \
     * stored; a backward rounds dinp after its add (dinp = rn(dinp + dx)). GELU, its gradient and the sigmoid   \
     * are base/fmath.h's, which the CPU reference and the CUDA kernel evaluate op for op (exp and tanh from     \
     * basic operations, every product that meets a sum an explicit fma or rounded on its own), so every bf16    \
     * output here is ULP(0): bit-identical. A backward with `accumulate` = 0 writes its gradient instead (the   \
     * first contribution to a fresh one): the same expression with +0 in place of the old value, rn(0 + dx),    \
     * so the bits are those an add into a zeroed gradient gives (a -0 dx included: it lands as +0). */           \
    /* dst[i] = rn(dst[i] + src[i]) (accumulate = 1) or rn(0 + src[i]) (accumulate = 0) */                       \
    X(accumulate_bf16, FORGE_BF16, 0,                                                                            \
      A(ACC_IF, forge_bf16, dst, n, ULP(0), accumulate) A(IN, forge_bf16, src, n, -3, 3) A(SIZE, size_t, n)      \
          A(SCALAR, int, accumulate),                                                                            \
      FORGE_EW_BF16_BWD_CASES(K))                                                                                \
    /* out = rn(gelu(inp)) */                                                                                    \
    X(gelu_forward_bf16, FORGE_BF16, 0,                                                                          \
      A(OUT, forge_bf16, out, n, ULP(0)) A(IN, forge_bf16, inp, n, -5, 5) A(SIZE, size_t, n),                    \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    /* dinp = rn(dinp + gelu'(inp) dout) (accumulate = 1) or rn(0 + gelu'(inp) dout) (accumulate = 0: written) */ \
    X(gelu_backward_bf16, FORGE_BF16, 0,                                                                         \
      A(ACC_IF, forge_bf16, dinp, n, ULP(0), accumulate) A(IN, forge_bf16, inp, n, -5, 5)                        \
          A(IN, forge_bf16, dout, n, -1, 1) A(SIZE, size_t, n) A(SCALAR, int, accumulate),                       \
      FORGE_EW_BF16_BWD_CASES(K))                                                                                \
    /* An MLP layer's GELU backward and its bias gradient in one pass: dinp (N,OC) = rn(0 + gelu'(inp) dout)      \
     * (written: gelu_backward_bf16's accumulate = 0 bits), dbias (OC) += sum_n dinp, fp32 over the rounded dinp \
     * (may be NULL): matmul_backward_weight_bf16's dbias of dout = dinp. dbias: N-long fp32 sums of terms up to  \
     * 1.13 (max |gelu'| times |dout| <= 1) in another order: SUMS(2, N). */                                     \
    X(gelu_backward_dbias_bf16, FORGE_BF16, 0,                                                                   \
      A(OUT, forge_bf16, dinp, (size_t)N * OC, ULP(0)) A(ACC_OPT, float, dbias, OC, SUMS(2, N))                  \
          A(IN, forge_bf16, inp, (size_t)N * OC, -5, 5) A(IN, forge_bf16, dout, (size_t)N * OC, -1, 1)           \
              A(SIZE, int, N) A(SIZE, int, OC),                                                                  \
      K(.N = 1, .OC = 29) K(.N = 37, .OC = 40) K(.N = 130, .OC = 131) K(.N = 200, .OC = 264)                     \
      K(.N = 1001, .OC = 768) K(.N = 4099, .OC = 64) K(.N = 9000, .OC = 136) K(.N = 333, .OC = 3072))            \
    /* out = rn(silu(gate) up) */                                                                                \
    X(swiglu_forward_bf16, FORGE_BF16, 0,                                                                        \
      A(OUT, forge_bf16, out, n, ULP(0)) A(IN, forge_bf16, gate, n, -6, 6) A(IN, forge_bf16, up, n, -3, 3)       \
          A(SIZE, size_t, n),                                                                                    \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    /* dgate = rn(dgate + dout up silu'(gate)), dup = rn(dup + dout silu(gate)); accumulate = 0: both written */ \
    X(swiglu_backward_bf16, FORGE_BF16, 0,                                                                       \
      A(ACC_IF, forge_bf16, dgate, n, ULP(0), accumulate) A(ACC_IF, forge_bf16, dup, n, ULP(0), accumulate)      \
          A(IN, forge_bf16, dout, n, -1, 1) A(IN, forge_bf16, gate, n, -6, 6) A(IN, forge_bf16, up, n, -3, 3)    \
              A(SIZE, size_t, n) A(SCALAR, int, accumulate),                                                     \
      FORGE_EW_BF16_BWD_CASES(K))                                                                                \
    /* the packed form (swiglu_packed_forward): out (N,F) = rn(silu(gate) up); dgu (N,2F) = rn(dgu + [dout up    \
     * silu'(gate) | dout silu(gate)]) (accumulate = 0: written), each element swiglu_*_bf16's expression */      \
    X(swiglu_packed_forward_bf16, FORGE_BF16, 0,                                                                 \
      A(OUT, forge_bf16, out, (size_t)N * F, ULP(0)) A(IN, forge_bf16, gu, (size_t)N * 2 * F, -6, 6)             \
          A(SIZE, int, N) A(SIZE, int, F),                                                                       \
      FORGE_SWIGLU_PACKED_CASES(K, FORGE_NO_EXTRA))                                                              \
    X(swiglu_packed_backward_bf16, FORGE_BF16, 0,                                                                \
      A(ACC_IF, forge_bf16, dgu, (size_t)N * 2 * F, ULP(0), accumulate)                                          \
          A(IN, forge_bf16, dout, (size_t)N * F, -1, 1) A(IN, forge_bf16, gu, (size_t)N * 2 * F, -6, 6)          \
              A(SIZE, int, N) A(SIZE, int, F) A(SCALAR, int, accumulate),                                        \
      FORGE_SWIGLU_PACKED_CASES(K, FORGE_CASE_ACC) FORGE_SWIGLU_PACKED_CASES(K, FORGE_CASE_WRITE))               \
                                                                                                                 \
    /* ---- embeddings ---------------------------------------------------------------------------------- */     \
    /* out (N,C) = table[ids[n]]; table (V,C); an id outside [0, V) is an error */                               \
    X(embedding_forward, FORGE_F32, 0,                                                                           \
      A(OUT, float, out, (size_t)N * C, EXACT) A(IDS, ids, N, V, 0, 0) A(IN, float, table, (size_t)V * C, -1, 1) \
          A(SIZE, int, N) A(SIZE, int, C) A(SIZE, int, V),                                                       \
      K(.N = 1, .C = 45, .V = 1000) K(.N = 37, .C = 768, .V = 1000) K(.N = 257, .C = 45, .V = 50)                \
          K(.N = 257, .C = 1031, .V = 1000) K(.N = 4099, .C = 64, .V = 7))                                       \
    /* dtable[ids[n]] += dout[n]; rows of ids not in the batch are untouched */                                  \
    X(embedding_backward, FORGE_F32, 0,                                                                          \
      A(ACC, float, dtable, (size_t)V * C, EXACT) A(IN, float, dout, (size_t)N * C, -1, 1) A(IDS, ids, N, V, 0, 0) \
          A(SIZE, int, N) A(SIZE, int, C) A(SIZE, int, V),                                                       \
      K(.N = 1, .C = 45, .V = 1000) K(.N = 37, .C = 768, .V = 1000) K(.N = 257, .C = 45, .V = 50)                \
          K(.N = 257, .C = 1031, .V = 1000) K(.N = 4099, .C = 64, .V = 7))                                       \
    /* out (B,T,C) = inp + wpe[t]; wpe (maxT, C), rows [0, T) read */                                            \
    X(position_forward, FORGE_F32, 0,                                                                            \
      A(OUT, float, out, (size_t)B * T * C, EXACT) A(IN, float, inp, (size_t)B * T * C, -1, 1)                   \
          A(IN, float, wpe, (size_t)maxT * C, -1, 1) A(SIZE, int, B) A(SIZE, int, T) A(SIZE, int, C) A(DIM, maxT), \
      K(.B = 2, .T = 67, .C = 45, .maxT = 80) K(.B = 2, .T = 67, .C = 768, .maxT = 67)                           \
          K(.B = 1, .T = 1, .C = 45, .maxT = 1))                                                                 \
    /* dinp += dout; dwpe[t] += sum_b dout[b,t] (rows t >= T untouched) */                                       \
    X(position_backward, FORGE_F32, 0,                                                                           \
      A(ACC, float, dinp, (size_t)B * T * C, EXACT) A(ACC, float, dwpe, (size_t)maxT * C, EXACT)                 \
          A(IN, float, dout, (size_t)B * T * C, -1, 1) A(SIZE, int, B) A(SIZE, int, T) A(SIZE, int, C)           \
              A(DIM, maxT),                                                                                      \
      K(.B = 2, .T = 67, .C = 45, .maxT = 80) K(.B = 2, .T = 67, .C = 768, .maxT = 67)                           \
          K(.B = 1, .T = 1, .C = 45, .maxT = 1))                                                                 \
    /* bf16: out (B,T,C) = rn(wte[ids[b,t]] + wpe[t]) (wpe NULL: the wte row); wte (V,C), wpe (maxT,C), rows     \
     * [0, T) read. An id outside [0, V) is an error (the CUDA kernel writes a NaN row and poll_errors names     \
     * it). ULP(0): one rounding of the same fp32 sum on both sides. */                                          \
    X(encoder_forward_bf16, FORGE_BF16, 0,                                                                       \
      A(OUT, forge_bf16, out, (size_t)B * T * C, ULP(0)) A(IDS, ids, (size_t)B * T, V, 0, 0)                     \
          A(IN, forge_bf16, wte, (size_t)V * C, -1, 1) A(IN_OPT, forge_bf16, wpe, (size_t)maxT * C, -1, 1)       \
              A(SIZE, int, B) A(SIZE, int, T) A(SIZE, int, C) A(SIZE, int, V) A(DIM, maxT),                      \
      FORGE_ENCODER_CASES(K))                                                                                    \
    /* fp32 accumulators: dwte[ids[n]] += dout[n] in row order n = b*T + t; dwpe[t] += dout[b,t] in order b      \
     * (dwpe NULL: none). EXACT: the CUDA kernels add in the same order (one owner per id and per (t, c)). */    \
    X(encoder_backward_bf16, FORGE_BF16, 0,                                                                      \
      A(ACC, float, dwte, (size_t)V * C, EXACT) A(ACC_OPT, float, dwpe, (size_t)maxT * C, EXACT)                 \
          A(IN, forge_bf16, dout, (size_t)B * T * C, -1, 1) A(IDS, ids, (size_t)B * T, V, 0, 0) A(SIZE, int, B)  \
              A(SIZE, int, T) A(SIZE, int, C) A(SIZE, int, V) A(DIM, maxT),                                      \
      FORGE_ENCODER_CASES(K))                                                                                    \
                                                                                                                 \
    /* ---- matmul: the three training layouts ---------------------------------------------------------- */     \
    /* out (N,OC) = inp (N,C) . weight (OC,C)^T + bias (OC); bias may be NULL */                                 \
    X(matmul_forward, FORGE_F32, FORGE_OPF_GEMM,                                                                 \
      A(OUT, float, out, (size_t)N * OC, GEMM(C)) A(IN, float, inp, (size_t)N * C, -1, 1)                        \
          A(IN, float, weight, (size_t)OC * C, -1, 1) A(IN_OPT, float, bias, OC, -1, 1) A(SIZE, int, N)          \
              A(SIZE, int, C) A(SIZE, int, OC),                                                                  \
      FORGE_MATMUL_CASES(K))                                                                                     \
    /* dinp (N,C) += dout (N,OC) . weight (OC,C) */                                                              \
    X(matmul_backward_input, FORGE_F32, FORGE_OPF_GEMM,                                                          \
      A(ACC, float, dinp, (size_t)N * C, GEMM(OC)) A(IN, float, dout, (size_t)N * OC, -1, 1)                     \
          A(IN, float, weight, (size_t)OC * C, -1, 1) A(SIZE, int, N) A(SIZE, int, C) A(SIZE, int, OC),          \
      FORGE_MATMUL_CASES(K))                                                                                     \
    /* dweight (OC,C) += dout^T . inp; dbias (OC) += sum_n dout (dbias may be NULL) */                           \
    X(matmul_backward_weight, FORGE_F32, FORGE_OPF_GEMM,                                                         \
      A(ACC, float, dweight, (size_t)OC * C, GEMM(N)) A(ACC_OPT, float, dbias, OC, SUM(N))                       \
          A(IN, float, dout, (size_t)N * OC, -1, 1) A(IN, float, inp, (size_t)N * C, -1, 1) A(SIZE, int, N)      \
              A(SIZE, int, C) A(SIZE, int, OC),                                                                  \
      FORGE_MATMUL_CASES(K))                                                                                     \
    /* bf16 linear layer (docs/mixed-precision.md): bf16 activations and weights, fp32 bias, fp32 accumulation,  \
     * one rounding where a bf16 value is stored. Tolerance of a bf16 output: with y_c, y_g the fp32 values the  \
     * CPU and the GPU round last and |y_g - y_c| <= D, |rn(y_g) - rn(y_c)| <= ulp(c) + 2 D, c = rn(y_c) (each   \
     * rounding moves a value by at most half the spacing there; the spacing at rn(y_g) exceeds ulp(c) only past \
     * the next power of two, which y_c is at least ulp(c)/2 below, so D >= ulp(c)/2 then): ULP_SUMS(1, 2 f, K)  \
     * for D <= f SUM(K). The GPU sums the K exact bf16 products in another order: D = SUM(K) (the fp32          \
     * entries' bound). ulps alone would not do: an output near 0 (K terms cancelling) has a tiny ulp. Inputs in \
     * [-1, 1] give |acc| <~ 6 sqrt(K/9) + 1 (mean + 6 sd), which bounds the GELU terms below. */                \
    /* v = inp (N,C) . weight (OC,C)^T + bias (OC) in fp32 (bias may be NULL); pre NULL: out = rn(v); else       \
     * pre = rn(v), out = rn(gelu(v)) (tanh GELU of the fp32 v). GELU: D <= max|gelu'| (1.13) SUM(C) + the       \
     * difference of the two GELU evaluations (fp32 tanhf on the CPU, the GEMM epilogue's exp form on the GPU:   \
     * a few 1e-7 |v|, 1 + tanh cancelling for v < -4), < 0.37 SUM(C) as SUM >= 1e-4: f = 1.5. */                \
    X(matmul_forward_bf16, FORGE_BF16, 0,                                                                        \
      A(OUT, forge_bf16, out, (size_t)N * OC, ULP_SUMS(1, 3, C))                                                 \
          A(OUT_OPT, forge_bf16, pre, (size_t)N * OC, ULP_SUMS(1, 2, C))                                         \
              A(IN, forge_bf16, inp, (size_t)N * C, -1, 1) A(IN, forge_bf16, weight, (size_t)OC * C, -1, 1)      \
                  A(IN_OPT, float, bias, OC, -1, 1) A(SIZE, int, N) A(SIZE, int, C) A(SIZE, int, OC),            \
      FORGE_MATMUL_BF16_CASES(K))                                                                                \
    /* dinp (N,C) = rn(dinp + d) (accumulate = 1) or rn(d) (accumulate = 0: dinp is only written, the first    \
     * gradient of a tensor), d = dout (N,OC) . weight (OC,C), times gelu'(pre) when pre (N,C) is given (it      \
     * may be NULL). D <= 1.13 SUM(OC) + |acc| |the two gelu' evaluations' difference| (the tanh form on both;   \
     * over every bf16 pre in [-3, 3] the CPU's is within 2e-7 of the exact value, the GPU's (tanhf 2 ulps off,  \
     * FMA contraction) within 7.5e-7: < 1e-6, times |acc| <~ 6 sqrt(OC/9) + 1: < 0.2 SUM(OC)) + the fp32 add    \
     * (2^-23 |y|): f = 2. */                                                                                    \
    X(matmul_backward_input_bf16, FORGE_BF16, 0,                                                                 \
      A(ACC, forge_bf16, dinp, (size_t)N * C, ULP_SUMS(1, 4, OC)) A(IN, forge_bf16, dout, (size_t)N * OC, -1, 1) \
          A(IN, forge_bf16, weight, (size_t)OC * C, -1, 1) A(IN_OPT, forge_bf16, pre, (size_t)N * C, -3, 3)      \
              A(SIZE, int, N) A(SIZE, int, C) A(SIZE, int, OC) A(SCALAR, int, accumulate),                       \
      FORGE_MATMUL_BF16_DX_CASES(K))                                                                             \
    /* dweight (OC,C) += dout^T . inp, dbias (OC) += sum_n dout, fp32 (dbias may be NULL): the same N-long sums  \
     * of exact products of [-1, 1] values as the fp32 entry's, in another order: SUM(N) */                      \
    X(matmul_backward_weight_bf16, FORGE_BF16, 0,                                                                \
      A(ACC, float, dweight, (size_t)OC * C, SUM(N)) A(ACC_OPT, float, dbias, OC, SUM(N))                        \
          A(IN, forge_bf16, dout, (size_t)N * OC, -1, 1) A(IN, forge_bf16, inp, (size_t)N * C, -1, 1)            \
              A(SIZE, int, N) A(SIZE, int, C) A(SIZE, int, OC),                                                  \
      FORGE_MATMUL_BF16_CASES(K))                                                                                \
                                                                                                                 \
    /* ---- normalisation ------------------------------------------------------------------------------- */     \
    /* LayerNorm over C: out = (x - mean) * rstd * weight + bias; saves mean, rstd (N) */                        \
    X(layernorm_forward, FORGE_F32, 0,                                                                           \
      A(OUT, float, out, (size_t)N * C, ABS(1e-4)) A(OUT, float, mean, N, ABS(1e-4))                             \
          A(OUT, float, rstd, N, ABS(1e-4)) A(IN, float, inp, (size_t)N * C, -2, 2) A(IN, float, weight, C, -1, 1) \
              A(IN, float, bias, C, -1, 1) A(SIZE, int, N) A(SIZE, int, C) A(SCALAR, float, eps),                \
      FORGE_NORM_CASES(K, FORGE_NORM_EPS))                                                                                       \
    /* dinp, dweight, dbias +=; mean, rstd as the forward saved them */                                         \
    X(layernorm_backward, FORGE_F32, 0,                                                                          \
      A(ACC, float, dinp, (size_t)N * C, SUM(C)) A(ACC, float, dweight, C, SUM(N))                               \
          A(ACC, float, dbias, C, SUM(N)) A(IN, float, dout, (size_t)N * C, -1, 1)                           \
              A(IN, float, inp, (size_t)N * C, -2, 2) A(IN, float, weight, C, -1, 1) A(IN, float, mean, N, -0.5, 0.5) \
                  A(IN, float, rstd, N, 0.5, 2) A(SIZE, int, N) A(SIZE, int, C),                                 \
      FORGE_NORM_CASES(K, FORGE_NORM_NO_EPS))                                                                                       \
    /* RMSNorm over C: out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps); saves rstd (N) */                \
    X(rmsnorm_forward, FORGE_F32, 0,                                                                             \
      A(OUT, float, out, (size_t)N * C, ABS(1e-4)) A(OUT, float, rstd, N, ABS(1e-4))                             \
          A(IN, float, inp, (size_t)N * C, -2, 2) A(IN, float, weight, C, -1, 1) A(SIZE, int, N) A(SIZE, int, C) \
              A(SCALAR, float, eps),                                                                             \
      FORGE_NORM_CASES(K, FORGE_NORM_EPS))                                                                                       \
    X(rmsnorm_backward, FORGE_F32, 0,                                                                            \
      A(ACC, float, dinp, (size_t)N * C, SUM(C)) A(ACC, float, dweight, C, SUM(N))                       \
          A(IN, float, dout, (size_t)N * C, -1, 1) A(IN, float, inp, (size_t)N * C, -2, 2)                       \
              A(IN, float, weight, C, -1, 1) A(IN, float, rstd, N, 0.5, 2) A(SIZE, int, N) A(SIZE, int, C),      \
      FORGE_NORM_CASES(K, FORGE_NORM_NO_EPS))                                                                                       \
    /* bf16 norms: inp/out/dout/dinp bf16, weight/bias/mean/rstd and the parameter gradients fp32. Each row's    \
     * sums over C run in one fixed order that the CPU reference and the CUDA kernel share (32 lane partials,    \
     * partial l summing the 8-wide chunks l, l+32, ... in index order, then xor butterflies 16, 8, 4, 2, 1:     \
     * backend/cpu/norm_bf16.c), so mean, rstd and every per-row value are bit-identical: bf16 outputs ULP(0),   \
     * mean/rstd EXACT. (A 1-ulp bound would not hold for another order: an output near 0 by cancellation,       \
     * x-hat w + b or dinp + dx, carries the ~sqrt(C)-ulp difference of the stats as an absolute error, many     \
     * of its own bf16 ulps.) dweight/dbias are column sums over the N rows, which the GPU adds in row chunks:   \
     * SUM(N), an N-term fp32 sum in another order, terms |dout x-hat| <= 5 (|x - mean| <= 2.5, rstd <= 2 in     \
     * the test) as in the fp32 entries. */                                                                      \
    /* LayerNorm: out = rn((x - mean) rstd weight + bias); saves mean, rstd (N) */                               \
    X(layernorm_forward_bf16, FORGE_BF16, 0,                                                                     \
      A(OUT, forge_bf16, out, (size_t)N * C, ULP(0)) A(OUT, float, mean, N, EXACT) A(OUT, float, rstd, N, EXACT) \
          A(IN, forge_bf16, inp, (size_t)N * C, -2, 2) A(IN, float, weight, C, -1, 1)                            \
              A(IN, float, bias, C, -1, 1) A(SIZE, int, N) A(SIZE, int, C) A(SCALAR, float, eps),                \
      FORGE_NORM_CASES(K, FORGE_NORM_EPS))                                                                       \
    /* res = rn(a + b), then the LayerNorm of res (its bf16 values) into out, mean, rstd. res may be a or b. */  \
    X(residual_layernorm_forward_bf16, FORGE_BF16, 0,                                                            \
      A(OUT, forge_bf16, res, (size_t)N * C, ULP(0)) A(OUT, forge_bf16, out, (size_t)N * C, ULP(0))              \
          A(OUT, float, mean, N, EXACT) A(OUT, float, rstd, N, EXACT) A(IN, forge_bf16, a, (size_t)N * C, -2, 2) \
              A(IN, forge_bf16, b, (size_t)N * C, -1, 1) A(IN, float, weight, C, -1, 1)                          \
                  A(IN, float, bias, C, -1, 1) A(SIZE, int, N) A(SIZE, int, C) A(SCALAR, float, eps),            \
      FORGE_NORM_CASES(K, FORGE_NORM_EPS))                                                                       \
    /* dinp = rn(dinp + dx) (accumulate = 1) or rn(0 + dx) (accumulate = 0: written, a fresh gradient),         \
     * dx = rstd (g - mean(g) - x-hat mean(g x-hat)), g = weight dout, x-hat = (x - mean) rstd;                  \
     * dweight += sum_n dout x-hat, dbias += sum_n dout (fp32, always added) */                                  \
    X(layernorm_backward_bf16, FORGE_BF16, 0,                                                                    \
      A(ACC_IF, forge_bf16, dinp, (size_t)N * C, ULP(0), accumulate) A(ACC, float, dweight, C, SUM(N))           \
          A(ACC, float, dbias, C, SUM(N)) A(IN, forge_bf16, dout, (size_t)N * C, -1, 1)                          \
              A(IN, forge_bf16, inp, (size_t)N * C, -2, 2) A(IN, float, weight, C, -1, 1)                        \
                  A(IN, float, mean, N, -0.5, 0.5) A(IN, float, rstd, N, 0.5, 2) A(SIZE, int, N)                 \
                      A(SIZE, int, C) A(SCALAR, int, accumulate),                                                \
      FORGE_NORM_CASES(K, FORGE_CASE_ACC) FORGE_NORM_CASES(K, FORGE_CASE_WRITE))                                 \
    /* RMSNorm: out = rn(x rstd weight), rstd = 1/sqrt(mean(x^2) + eps); saves rstd (N) */                       \
    X(rmsnorm_forward_bf16, FORGE_BF16, 0,                                                                       \
      A(OUT, forge_bf16, out, (size_t)N * C, ULP(0)) A(OUT, float, rstd, N, EXACT)                               \
          A(IN, forge_bf16, inp, (size_t)N * C, -2, 2) A(IN, float, weight, C, -1, 1) A(SIZE, int, N)            \
              A(SIZE, int, C) A(SCALAR, float, eps),                                                             \
      FORGE_NORM_CASES(K, FORGE_NORM_EPS))                                                                       \
    /* res = rn(a + b), then the RMSNorm of res into out, rstd. res may be a or b. */                            \
    X(residual_rmsnorm_forward_bf16, FORGE_BF16, 0,                                                              \
      A(OUT, forge_bf16, res, (size_t)N * C, ULP(0)) A(OUT, forge_bf16, out, (size_t)N * C, ULP(0))              \
          A(OUT, float, rstd, N, EXACT) A(IN, forge_bf16, a, (size_t)N * C, -2, 2)                               \
              A(IN, forge_bf16, b, (size_t)N * C, -1, 1) A(IN, float, weight, C, -1, 1) A(SIZE, int, N)          \
                  A(SIZE, int, C) A(SCALAR, float, eps),                                                         \
      FORGE_NORM_CASES(K, FORGE_NORM_EPS))                                                                       \
    /* dinp = rn(dinp + dx) (accumulate = 1) or rn(0 + dx) (accumulate = 0), dx = rstd (g - x-hat mean(g x-hat)), \
     * g = weight dout, x-hat = x rstd; dweight += sum_n dout x-hat (fp32, always added) */                      \
    X(rmsnorm_backward_bf16, FORGE_BF16, 0,                                                                      \
      A(ACC_IF, forge_bf16, dinp, (size_t)N * C, ULP(0), accumulate) A(ACC, float, dweight, C, SUM(N))           \
          A(IN, forge_bf16, dout, (size_t)N * C, -1, 1) A(IN, forge_bf16, inp, (size_t)N * C, -2, 2)             \
              A(IN, float, weight, C, -1, 1) A(IN, float, rstd, N, 0.5, 2) A(SIZE, int, N) A(SIZE, int, C)       \
                  A(SCALAR, int, accumulate),                                                                    \
      FORGE_NORM_CASES(K, FORGE_CASE_ACC) FORGE_NORM_CASES(K, FORGE_CASE_WRITE))                                 \
                                                                                                                 \
    /* ---- rotary position embedding ------------------------------------------------------------------- */     \
    /* inp/out (B,T,n_heads,HS); the first n_rot heads rotated, the rest copied (packed qkv: q and k rotate,     \
     * v passes). Hugging Face Llama's rotate-half form: for i < HS/2, angle = t * theta^(-2i/HS):             \
     *   out[i] = x[i] cos - x[i+HS/2] sin,  out[i+HS/2] = x[i+HS/2] cos + x[i] sin. out may be inp. */         \
    X(rope_forward, FORGE_F32, 0,                                                                                \
      A(OUT, float, out, (size_t)B * T * n_heads * HS, EXACT) A(IN, float, inp, (size_t)B * T * n_heads * HS, -1, 1) \
          A(SIZE, int, B) A(SIZE, int, T) A(SIZE, int, n_heads) A(SIZE, int, n_rot) A(SIZE, int, HS)             \
              A(SCALAR, float, theta),                                                                           \
      FORGE_ROPE_CASES(K))                                                                                       \
    X(rope_backward, FORGE_F32, 0,                                                                               \
      A(ACC, float, dinp, (size_t)B * T * n_heads * HS, EXACT)                                                   \
          A(IN, float, dout, (size_t)B * T * n_heads * HS, -1, 1) A(SIZE, int, B) A(SIZE, int, T)                \
              A(SIZE, int, n_heads) A(SIZE, int, n_rot) A(SIZE, int, HS) A(SCALAR, float, theta),                \
      FORGE_ROPE_CASES(K))                                                                                       \
    /* bf16: the rotation in fp32 on the widened values with the fp32 ops' cos/sin table (angles in double,      \
     * rounded once to float), one rounding to bf16; the backward adds into dinp, then rounds. ULP(1): the       \
     * table comes from glibc's and CUDA's double pow/cos/sin, which agree within 1e-12 rad at t = 2047 but      \
     * may, rarely, round an entry to a neighbouring float; the rotation then moves by ~1 fp32 ulp of |x|, its   \
     * bf16 rounding by one ulp (more only if the rotation also cancels below 2^-16 |x|, rarer still).           \
     * Everything else is the reference's fp32 expression in its order. out may be inp. The backward with        \
     * accumulate = 0 writes dinp = rn(0 + r) (a fresh gradient; dinp may then be dout; in place, CUDA leaves  \
     * the unrotated heads' values as they are, so a -0 there stays -0). */                                      \
    X(rope_forward_bf16, FORGE_BF16, 0,                                                                          \
      A(OUT, forge_bf16, out, (size_t)B * T * n_heads * HS, ULP(1))                                              \
          A(IN, forge_bf16, inp, (size_t)B * T * n_heads * HS, -1, 1) A(SIZE, int, B) A(SIZE, int, T)            \
              A(SIZE, int, n_heads) A(SIZE, int, n_rot) A(SIZE, int, HS) A(SCALAR, float, theta),                \
      FORGE_ROPE_CASES(K))                                                                                       \
    X(rope_backward_bf16, FORGE_BF16, 0,                                                                         \
      A(ACC_IF, forge_bf16, dinp, (size_t)B * T * n_heads * HS, ULP(1), accumulate)                              \
          A(IN, forge_bf16, dout, (size_t)B * T * n_heads * HS, -1, 1) A(SIZE, int, B) A(SIZE, int, T)           \
              A(SIZE, int, n_heads) A(SIZE, int, n_rot) A(SIZE, int, HS) A(SCALAR, float, theta)                 \
                  A(SCALAR, int, accumulate),                                                                    \
      FORGE_ROPE_CASES_E(K, FORGE_CASE_ACC) FORGE_ROPE_CASES_E(K, FORGE_CASE_WRITE))                             \
                                                                                                                 \
    /* ---- causal self-attention (reference: materialised scores) -------------------------------------- */     \
    /* qkv packed (B,T,(NH+2NKV)*HS); out (B,T,NH*HS); att (B,NH,T,T) saves the softmax probabilities          \
     * (0 above the diagonal). Scores are scaled by 1/sqrt(HS). */                                               \
    X(attention_forward, FORGE_F32, FORGE_OPF_GEMM,                                                              \
      A(OUT, float, out, (size_t)B * T * NH * HS, ABS(1e-4)) A(OUT, float, att, (size_t)B * NH * T * T, ABS(1e-4)) \
          A(IN, float, qkv, (size_t)B * T * FORGE_QKV(NH, NKV, HS), -1, 1) A(SIZE, int, B) A(SIZE, int, T)       \
              A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS),                                               \
      FORGE_ATTENTION_CASES(K))                                                                                  \
    /* dqkv +=; scratch (B,NH,T,T) is workspace */                                                               \
    X(attention_backward, FORGE_F32, FORGE_OPF_GEMM,                                                             \
      A(ACC, float, dqkv, (size_t)B * T * FORGE_QKV(NH, NKV, HS), SUMS(2, (double)T * (NH / NKV))) \
          A(SCRATCH, scratch, (size_t)B * NH * T * T) A(IN, float, dout, (size_t)B * T * NH * HS, -1, 1)         \
              A(IN, float, qkv, (size_t)B * T * FORGE_QKV(NH, NKV, HS), -1, 1)                                   \
                  A(IN_TRIL, float, att, (size_t)B * NH * T * T, 0, 1, T) A(SIZE, int, B) A(SIZE, int, T)                \
                      A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS),                                       \
      FORGE_ATTENTION_CASES(K))                                                                                  \
                                                                                                                 \
    /* ---- fused (flash) causal self-attention ---------------------------------------------------------- */    \
    /* Same packed qkv and out as attention_forward, but the scores never reach memory: online softmax over    \
     * key tiles. lse (B,NH,T) saves the natural-log logsumexp of each query row's scaled scores. */             \
    X(flash_attention_forward, FORGE_F32, 0,                                                                     \
      A(OUT, float, out, (size_t)B * T * NH * HS, ABS(1e-4)) A(OUT, float, lse, (size_t)B * NH * T, ABS(1e-4))   \
          A(IN, float, qkv, (size_t)B * T * FORGE_QKV(NH, NKV, HS), -1.5, 1.5) A(SIZE, int, B) A(SIZE, int, T)   \
              A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS),                                               \
      FORGE_FLASH_CASES(K))                                                                                      \
    /* dqkv +=; scratch >= B*NH*T floats (holds D = rowsum(dout * out)) */                                       \
    X(flash_attention_backward, FORGE_F32, 0,                                                                    \
      A(ACC, float, dqkv, (size_t)B * T * FORGE_QKV(NH, NKV, HS), ABS(1e-4)) A(SCRATCH, scratch, (size_t)B * NH * T) \
          A(IN, float, dout, (size_t)B * T * NH * HS, -1, 1)                                                     \
              A(IN, float, qkv, (size_t)B * T * FORGE_QKV(NH, NKV, HS), -1.5, 1.5)                               \
                  A(IN, float, out, (size_t)B * T * NH * HS, -1, 1) A(IN, float, lse, (size_t)B * NH * T, FORGE_LSE(T))  \
                      A(SIZE, int, B) A(SIZE, int, T) A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS),       \
      FORGE_FLASH_CASES(K))                                                                                      \
    /* The general form behind both: queries from qkv_q (B,Tq,..), keys/values from qkv_kv (B,Tk,..); causal    \
     * alignment bottom-right: query i sees key j iff j <= i + Tk - Tq. A row with no visible key gets out = 0,  \
     * lse = -INFINITY and zero gradients. dQ goes to the query heads of dqkv_q, dK/dV to the key/value heads    \
     * of dqkv_kv (they may be the same buffer). */                                                              \
    X(flash_attention_forward_ext, FORGE_F32, 0,                                                                 \
      A(OUT, float, out, (size_t)B * Tq * NH * HS, ABS(1e-4)) A(OUT, float, lse, (size_t)B * NH * Tq, ABS(1e-4)) \
          A(IN, float, qkv_q, (size_t)B * Tq * FORGE_QKV(NH, NKV, HS), -1.5, 1.5)                                \
              A(IN, float, qkv_kv, (size_t)B * Tk * FORGE_QKV(NH, NKV, HS), -1.5, 1.5) A(SIZE, int, B)           \
                  A(SIZE, int, Tq) A(SIZE, int, Tk) A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS),         \
      FORGE_FLASH_EXT_CASES(K))                                                                                  \
    X(flash_attention_backward_ext, FORGE_F32, 0,                                                                \
      A(ACC, float, dqkv_q, (size_t)B * Tq * FORGE_QKV(NH, NKV, HS), ABS(1e-4))                                  \
          A(ACC, float, dqkv_kv, (size_t)B * Tk * FORGE_QKV(NH, NKV, HS), ABS(1e-4))                             \
              A(SCRATCH, scratch, (size_t)B * NH * Tq) A(IN, float, dout, (size_t)B * Tq * NH * HS, -1, 1)       \
                  A(IN, float, qkv_q, (size_t)B * Tq * FORGE_QKV(NH, NKV, HS), -1.5, 1.5)                        \
                      A(IN, float, qkv_kv, (size_t)B * Tk * FORGE_QKV(NH, NKV, HS), -1.5, 1.5)                   \
                          A(IN, float, out, (size_t)B * Tq * NH * HS, -1, 1)                                     \
                              A(IN, float, lse, (size_t)B * NH * Tq, FORGE_LSE(Tk)) A(SIZE, int, B) A(SIZE, int, Tq)      \
                                  A(SIZE, int, Tk) A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS),          \
      FORGE_FLASH_EXT_CASES(K))                                                                                  \
    /* ---- decoding with a KV cache ------------------------------------------------------------------------ */  \
    /* One new token at position pos: qkv (FORGE_QKV(NH,NKV,HS)) is its packed qkv row; k_cache, v_cache        \
     * (maxT,NKV,HS) hold the keys and values of positions < pos (pos < maxT). theta > 0 first rotates the      \
     * query and key heads by RoPE at position pos (rope_forward's rotate-half form, angles in double, cos/sin  \
     * rounded once to float); theta = 0 leaves them as they are. Writes the new key and value into row pos of  \
     * the caches (the other rows untouched) and out (NH*HS) = softmax(q . K^T / sqrt(HS)) V over positions     \
     * 0..pos, query head h reading kv head h / (NH / NKV). Tolerances: caches EXACT (rope_forward's expression  \
     * on both sides; a GPU FMA contraction moves a rotated value |r| <= 2.2 by <= 2 fp32 ulps, 5e-7); out      \
     * ABS(1e-4) as flash_attention_forward (the score and output sums in another order). */                    \
    X(attention_decode, FORGE_F32, 0,                                                                            \
      A(OUT, float, out, (size_t)NH * HS, ABS(1e-4))                                                             \
          A(INOUT, float, k_cache, (size_t)maxT * NKV * HS, -1.5, 1.5, EXACT)                                    \
              A(INOUT, float, v_cache, (size_t)maxT * NKV * HS, -1.5, 1.5, EXACT)                                \
                  A(IN, float, qkv, FORGE_QKV(NH, NKV, HS), -1.5, 1.5) A(SIZE, int, pos) A(SIZE, int, maxT)      \
                      A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS) A(SCALAR, float, theta),               \
      FORGE_DECODE_CASES(K))                                                                                     \
    /* attention_decode with its position read from device memory (pos[0], 0 <= pos[0] < maxT): a recorded       \
     * decode step replays for every position (model_decode.c). Same math and tolerances as attention_decode     \
     * (the same kernel bodies, the position passed through). A position outside [0, maxT) is an error: the CPU   \
     * reference refuses it; the CUDA kernel writes a NaN out, leaves the caches and poll_errors names it. */     \
    X(attention_decode_at, FORGE_F32, 0,                                                                         \
      A(OUT, float, out, (size_t)NH * HS, ABS(1e-4))                                                             \
          A(INOUT, float, k_cache, (size_t)maxT * NKV * HS, -1.5, 1.5, EXACT)                                    \
              A(INOUT, float, v_cache, (size_t)maxT * NKV * HS, -1.5, 1.5, EXACT)                                \
                  A(IN, float, qkv, FORGE_QKV(NH, NKV, HS), -1.5, 1.5) A(IDS, pos, 1, maxT, maxT - 1, 25)        \
                      A(SIZE, int, maxT) A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS)                     \
                          A(SCALAR, float, theta),                                                               \
      FORGE_DECODE_AT_CASES(K))                                                                                  \
    /* The decode step's encoder, its token id and position read from device memory: out (C) = wte[id[0]] +      \
     * wpe[pos[0]] (one fp32 add, position_forward's on the same rows: EXACT), or the wte row where wpe is NULL   \
     * (pos not read). wte (V,C), wpe (maxT,C). An id outside [0, V) or a position outside [0, maxT) is an error: \
     * the CPU reference refuses it; the CUDA kernel writes a NaN row and poll_errors names it. */               \
    X(decode_embed, FORGE_F32, 0,                                                                                \
      A(OUT, float, out, C, EXACT) A(IDS, id, 1, V, V - 1, 25) A(IDS, pos, 1, maxT, maxT - 1, 25)                \
          A(IN, float, wte, (size_t)V * C, -1, 1) A(IN_OPT, float, wpe, (size_t)maxT * C, -1, 1) A(SIZE, int, C) \
              A(SIZE, int, V) A(SIZE, int, maxT),                                                                \
      K(.C = 45, .V = 1000, .maxT = 80) K(.C = 768, .V = 50257, .maxT = 1024) K(.C = 1, .V = 1, .maxT = 1)       \
          K(.C = 4099, .V = 7, .maxT = 3))                                                                       \
    /* bf16 (docs/mixed-precision.md): qkv, out, dout, dqkv bf16; lse, the fp32 statistics. Forward: online softmax \
     * in fp32, P rounded to bf16 for P.V; out rounded. Tolerances (FORGE_FLASH_BF16_*_TOL below): out, the bf16 \
     * rounding of P at other points (2 u sum_j P_j |v_j| <= 2 u max|v|, u = 2^-9) plus out's own rounding; lse,  \
     * the fp32 score sums in another order. Inputs in [-1.5, 1.5] as the fp32 entry. The forward's extra cases   \
     * exceed the CUDA fallback's workspace (batch, kv-head and query-head chunks). */                           \
    X(flash_attention_forward_bf16, FORGE_BF16, 0,                                                               \
      A(OUT, forge_bf16, out, (size_t)B * T * NH * HS, ABS(FORGE_FLASH_BF16_OUT_TOL(1.5)))                       \
          A(OUT, float, lse, (size_t)B * NH * T, ABS(FORGE_FLASH_BF16_LSE_TOL(HS, 1.5)))                         \
              A(IN, forge_bf16, qkv, (size_t)B * T * FORGE_QKV(NH, NKV, HS), -1.5, 1.5) A(SIZE, int, B)          \
                  A(SIZE, int, T) A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS),                           \
      FORGE_FLASH_CASES(K) K(.B = 5, .T = 1024, .NH = 8, .NKV = 8, .HS = 32)                                     \
          K(.B = 1, .T = 2100, .NH = 16, .NKV = 16, .HS = 32) K(.B = 1, .T = 1100, .NH = 64, .NKV = 1, .HS = 32)) \
    /* dqkv = rn(dqkv + d) (accumulate = 1) or rn(0 + d) (accumulate = 0: written, a fresh gradient) with P and \
     * dS rounded to bf16 for their products, as the bf16 kernels; scratch: FORGE_FLASH_BF16_SCRATCH floats.     \
     * Tolerance: FORGE_FLASH_BF16_DQKV_TOL. */                                                                  \
    X(flash_attention_backward_bf16, FORGE_BF16, 0,                                                              \
      A(ACC_IF, forge_bf16, dqkv, (size_t)B * T * FORGE_QKV(NH, NKV, HS), ABS(FORGE_FLASH_BF16_DQKV_TOL),          \
        accumulate)                                                                                              \
          A(SCRATCH, scratch, FORGE_FLASH_BF16_SCRATCH(B, T, NH, NKV, HS))                                       \
              A(IN, forge_bf16, dout, (size_t)B * T * NH * HS, -1, 1)                                            \
                  A(IN, forge_bf16, qkv, (size_t)B * T * FORGE_QKV(NH, NKV, HS), -1.5, 1.5)                      \
                      A(IN, forge_bf16, out, (size_t)B * T * NH * HS, -1, 1)                                     \
                          A(IN, float, lse, (size_t)B * NH * T, FORGE_LSE(T)) A(SIZE, int, B) A(SIZE, int, T)    \
                              A(SIZE, int, NH) A(SIZE, int, NKV) A(SIZE, int, HS) A(SCALAR, int, accumulate),    \
      FORGE_FLASH_CASES_E(K, FORGE_CASE_ACC) FORGE_FLASH_BF16_WRITE_CASES(K))                                    \
                                                                                                                 \
    /* ---- fused classifier ------------------------------------------------------------------------------ */   \
    /* For each row n of logits (N,V): losses[n] = -log softmax(logits[n])[targets[n]], and logits[n] is         \
     * OVERWRITTEN by its gradient (softmax - onehot) * grad_scale. Rows whose target == ignore_index get loss 0 \
     * and gradient 0. */                                                                                        \
    X(classifier_forward_backward, FORGE_F32, 0,                                                                 \
      A(OUT, float, losses, N, ABS(1e-4)) A(INOUT, float, logits, (size_t)N * V, -5, 5, ABS(1e-6))               \
          A(IDS, targets, N, V, ignore_index, ignore_pct) A(SIZE, int, N) A(SIZE, int, V)                        \
              A(SCALAR, int, ignore_index) A(SCALAR, float, grad_scale) A(DIM, ignore_pct),                      \
      K(.N = 37, .V = 1000, .ignore_index = -100, .grad_scale = 0.03f, .ignore_pct = 25)                         \
          K(.N = 1, .V = 1000, .ignore_index = -100, .grad_scale = 1.0f, .ignore_pct = 0)                        \
              K(.N = 64, .V = 1001, .ignore_index = -100, .grad_scale = 1.0f, .ignore_pct = 10)                  \
                  K(.N = 8, .V = 7, .ignore_index = -100, .grad_scale = 0.25f, .ignore_pct = 50)                 \
                      K(.N = 5, .V = 50257, .ignore_index = -100, .grad_scale = 0.25f, .ignore_pct = 20))        \
    /* bf16: the lm head's forward and backward fused, FORGE_CLS_BF16_ROWS(N, V) rows at a time (the (N,V) logits \
     * never exist whole): logits = rn(inp wte^T); losses[n] = logsumexp - logit[target] (fp32; 0 for an ignore   \
     * row); dlogits = rn((softmax - onehot) grad_scale) (0 for an ignore row); dinp = rn(dinp + dlogits wte);    \
     * dwte (fp32) += dlogits^T inp (dinp, dwte NULL: not computed; both NULL: the loss alone, for evaluation); \
     * accumulate = 0: dinp = rn(0 + dlogits wte), written (a fresh gradient; dwte is still added into).         \
     * chunk_rows > 0 lowers the rows of a chunk (tests: several chunks at small sizes); 0: FORGE_CLS_BF16_CAP. \
     * A target outside [0, V) that is not ignore_index is an error. scratch:                                    \
     * FORGE_CLS_BF16_SCRATCH floats. Tolerances: FORGE_CLS_BF16_*_TOL below. */                                 \
    X(classifier_bf16, FORGE_BF16, 0,                                                                            \
      A(OUT, float, losses, N, ABS(FORGE_CLS_BF16_LOSS_TOL(C)))                                               \
          A(ACC_IF_OPT, forge_bf16, dinp, (size_t)N * C, ABS(FORGE_CLS_BF16_DINP_TOL(grad_scale)), accumulate)   \
              A(ACC_OPT, float, dwte, (size_t)V * C, ABS(FORGE_CLS_BF16_DWTE_TOL(N, grad_scale)))                \
                  A(SCRATCH, scratch, FORGE_CLS_BF16_SCRATCH(N, C, V, chunk_rows))                               \
                      A(IN, forge_bf16, inp, (size_t)N * C, -1, 1) A(IN, forge_bf16, wte, (size_t)V * C, -0.1, 0.1) \
                          A(IDS, targets, N, V, ignore_index, ignore_pct) A(SIZE, int, N) A(SIZE, int, C)        \
                              A(SIZE, int, V) A(SCALAR, int, ignore_index) A(SCALAR, float, grad_scale)          \
                                  A(SCALAR, int, accumulate) A(SCALAR, int, chunk_rows) A(DIM, ignore_pct),      \
      FORGE_CLS_BF16_CASES(K, FORGE_CASE_ACC) FORGE_CLS_BF16_WRITE_CASES(K))                                     \
                                                                                                                 \
    /* ---- reductions and the optimizer --------------------------------------------------------------------- */   \
    /* *out_sum += sum(x[i]), into a device scalar (the step's loss: no host sync). The GPU sums in a fixed      \
     * order (the same bits every run); the CPU in double. */                                                    \
    X(sum_accumulate, FORGE_F32, 0,                                                                              \
      A(ACC, float, out_sum, 1, REL(1e-5)) A(IN, float, x, n, -1, 1) A(SIZE, size_t, n),                         \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    /* *out_sumsq = sum(x[i]^2) (the global gradient norm's square, for clipping), in one launch on the GPU */   \
    X(sumsq, FORGE_F32, 0,                                                                                       \
      A(OUT, float, out_sumsq, 1, REL(1e-5)) A(IN, float, x, n, -1, 1) A(SIZE, size_t, n),                       \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))                                                         \
    /* AdamW over every tensor of one flat buffer in one launch: span s updates [begin, begin + n) with its      \
     * weight decay. The clip factor min(1, max_norm / sqrt(*grad_sumsq)) comes from the device scalar, folded   \
     * into the gradient read (grad_sumsq NULL or max_grad_norm <= 0: no clipping); a non-finite *grad_sumsq     \
     * leaves everything untouched (a step that overflowed is skipped without a host round trip). The step's     \
     * changing scalars are read from device memory, so a captured step replays with new ones: step[0] = lr,     \
     * step[1] = 1 - beta1^t, step[2] = 1 - beta2^t. param_bf16 (bf16 training) gets rn(param after the update) \
     * in the same pass: one bf16 ulp plus param's own tolerance, 1e-5 (param differs from the reference by a few \
     * fp32 ulps, contracted differently into FMAs, so its rounding can land one bf16 ulp away, or, for a value   \
     * near 0 whose bf16 ulp is below that difference, several). */                                              \
    X(adamw, FORGE_F32, 0,                                                                                       \
      A(INOUT, float, param, n, -1, 1, ABS(1e-5)) A(OUT_OPT, forge_bf16, param_bf16, n, ULP_SUMS(1, 0.1, 1))     \
          A(IN, float, grad, n, -1, 1) A(INOUT, float, m, n, -0.1, 0.1, ABS(1e-5))                               \
              A(INOUT, float, v, n, 1e-4, 1e-2, ABS(1e-5)) A(SIZE, size_t, n) A(SPANS, spans, n, n_spans)        \
                  A(SIZE, int, n_spans) A(IN_OPT, float, grad_sumsq, 1, 1, 100) A(IN, float, step, 3, 0.05, 1)   \
                      A(PARAMS, forge_adamw_params, hp),                                                         \
      FORGE_ADAMW_CASES(K, 37, 1) FORGE_ADAMW_CASES(K, 100003, 7) FORGE_ADAMW_CASES(K, 300001, 40))             \
                                                                                                                 \
    /* ---- conversions ------------------------------------------------------------------------------------ */   \
    /* dst[i] = rn(src[i]): fp32 to bf16, round to nearest even (the parameters' working copy at load) */       \
    X(cast_bf16, FORGE_BF16, 0,                                                                                  \
      A(OUT, forge_bf16, dst, n, ULP(0)) A(IN, float, src, n, -3, 3) A(SIZE, size_t, n),                         \
      K(.n = 1) K(.n = 37) K(.n = 4097) K(.n = 1000003))

/* Shape sets shared by several entries. */
#define FORGE_MATMUL_CASES(K)                                                                                    \
    K(.N = 1, .C = 45, .OC = 29) K(.N = 37, .C = 45, .OC = 29) K(.N = 37, .C = 768, .OC = 29)                    \
    K(.N = 130, .C = 129, .OC = 131) K(.N = 64, .C = 64, .OC = 64) K(.N = 257, .C = 768, .OC = 3072)             \
    K(.N = 257, .C = 3072, .OC = 768) K(.N = 1031, .C = 200, .OC = 2100)                                         \
    K(.N = 1001, .C = 45, .OC = 130) /* tf32: dW (130x45, K = 1001) takes split-K with scalar loads */          \
    K(.N = 1, .C = 768, .OC = 1031) /* one row: the fp32 forward's GEMV, float4 loads (N = 1, C = 45: scalar) */
/* The bf16 GEMMs' fast paths need 8 | K and 8 | the columns of a backward output (TMA's 16-byte rows): all of
 * them (64, 40, 256, 768, 2304, 3072), the forward's only (OC 29, 2100: direct store of a bf16 C), none (odd C).
 * 4099 x 1032 exceeds the workspace that stages dX (two row chunks) and takes dW's split-K. */
#define FORGE_MATMUL_BF16_CASES(K)                                                                               \
    K(.N = 1, .C = 45, .OC = 29) K(.N = 37, .C = 768, .OC = 29) K(.N = 130, .C = 129, .OC = 131)                 \
    K(.N = 64, .C = 64, .OC = 64) K(.N = 37, .C = 64, .OC = 40) K(.N = 200, .C = 256, .OC = 384)                 \
    K(.N = 1001, .C = 45, .OC = 130) K(.N = 256, .C = 768, .OC = 2304) K(.N = 257, .C = 3072, .OC = 768)         \
    K(.N = 1031, .C = 200, .OC = 2100) K(.N = 4099, .C = 1032, .OC = 64)
/* dX: every shape accumulating, the shapes the wgmma path takes also writing (accumulate = 0) */
#define FORGE_MATMUL_BF16_DX_CASES(K)                                                                            \
    K(.N = 1, .C = 45, .OC = 29, .accumulate = 1) K(.N = 37, .C = 768, .OC = 29, .accumulate = 1)                \
    K(.N = 130, .C = 129, .OC = 131, .accumulate = 1) K(.N = 64, .C = 64, .OC = 64, .accumulate = 1)             \
    K(.N = 37, .C = 64, .OC = 40, .accumulate = 1) K(.N = 200, .C = 256, .OC = 384, .accumulate = 1)             \
    K(.N = 1001, .C = 45, .OC = 130, .accumulate = 1) K(.N = 256, .C = 768, .OC = 2304, .accumulate = 1)         \
    K(.N = 257, .C = 3072, .OC = 768, .accumulate = 1) K(.N = 1031, .C = 200, .OC = 2100, .accumulate = 1)       \
    K(.N = 4099, .C = 1032, .OC = 64, .accumulate = 1) K(.N = 130, .C = 129, .OC = 131, .accumulate = 0)         \
    K(.N = 64, .C = 64, .OC = 64, .accumulate = 0) K(.N = 200, .C = 256, .OC = 384, .accumulate = 0)             \
    K(.N = 257, .C = 3072, .OC = 768, .accumulate = 0) K(.N = 1031, .C = 200, .OC = 2100, .accumulate = 0)
/* EXTRA(): more initializers of every case (the forward's eps). The bf16 kernels' paths: C = 45 element by element
 * (C % 8 != 0); 96, 648 a last 256-column chunk the row ends inside (lanes with no chunk there); 512, 768, 1024 whole
 * chunks; 3072 past the fused backward's 1024 */
#define FORGE_NORM_CASES(K, EXTRA)                                                                               \
    K(.N = 1, .C = 45 EXTRA()) K(.N = 37, .C = 768 EXTRA()) K(.N = 257, .C = 45 EXTRA())                         \
    K(.N = 4099, .C = 45 EXTRA()) K(.N = 257, .C = 3072 EXTRA()) K(.N = 9000, .C = 96 EXTRA())                   \
    K(.N = 300, .C = 512 EXTRA()) K(.N = 77, .C = 1024 EXTRA()) K(.N = 65, .C = 648 EXTRA())
#define FORGE_NO_EXTRA()
#define FORGE_NORM_EPS() , .eps = 1e-5f
#define FORGE_NORM_NO_EPS()
/* EXTRA() of a backward that writes or adds its gradient: the `accumulate` scalar of every case */
#define FORGE_CASE_ACC() , .accumulate = 1
#define FORGE_CASE_WRITE() , .accumulate = 0
/* the bf16 elementwise backward entries: each length adding and writing */
#define FORGE_EW_BF16_BWD_CASES(K)                                                                               \
    K(.n = 1, .accumulate = 1) K(.n = 37, .accumulate = 1) K(.n = 4097, .accumulate = 1)                         \
    K(.n = 1000003, .accumulate = 1) K(.n = 1, .accumulate = 0) K(.n = 37, .accumulate = 0)                      \
    K(.n = 4097, .accumulate = 0) K(.n = 1000003, .accumulate = 0)
/* Packed SwiGLU rows (N, 2F): F odd and F % 8 = 4 (a row boundary inside every 8-wide chunk: element by element),
 * F % 8 = 0 (16-byte vectors: gpt-25m's 1408, and 704), one row (the decoder's), and a case over the quick limit. */
#define FORGE_SWIGLU_PACKED_CASES(K, EXTRA)                                                                      \
    K(.N = 1, .F = 1 EXTRA()) K(.N = 37, .F = 5 EXTRA()) K(.N = 1, .F = 1031 EXTRA()) K(.N = 3, .F = 4097 EXTRA()) \
    K(.N = 61, .F = 1412 EXTRA()) K(.N = 130, .F = 1408 EXTRA()) K(.N = 257, .F = 1000 EXTRA())                \
    K(.N = 700, .F = 704 EXTRA())
/* Token rows B*T and channels C that miss every tile (C = 45, 1031: no 8-wide vectors), V small (ids repeat:
 * several rows per owner) and large. */
#define FORGE_ENCODER_CASES(K)                                                                                   \
    K(.B = 1, .T = 1, .C = 45, .V = 1000, .maxT = 1) K(.B = 2, .T = 67, .C = 768, .V = 1000, .maxT = 80)         \
    K(.B = 4, .T = 64, .C = 45, .V = 50, .maxT = 64) K(.B = 1, .T = 257, .C = 1031, .V = 1000, .maxT = 300)      \
    K(.B = 4, .T = 1025, .C = 64, .V = 7, .maxT = 1100)                                                        \
    K(.B = 2, .T = 67, .C = 40, .V = 20011, .maxT = 67) /* the id scan's tiles of 8192: two full and a partial */
#define FORGE_ROPE_CASES_E(K, EXTRA)                                                                             \
    /* qkv NH=6, NKV=2 */                                                                                        \
    K(.B = 2, .T = 67, .n_heads = 10, .n_rot = 8, .HS = 64, .theta = 10000.0f EXTRA())                           \
    K(.B = 2, .T = 67, .n_heads = 10, .n_rot = 8, .HS = 6, .theta = 10000.0f EXTRA())                            \
    K(.B = 2, .T = 67, .n_heads = 6, .n_rot = 6, .HS = 64, .theta = 10000.0f EXTRA())                            \
    K(.B = 1, .T = 1, .n_heads = 3, .n_rot = 0, .HS = 2, .theta = 10000.0f EXTRA())                              \
    K(.B = 1, .T = 2048, .n_heads = 4, .n_rot = 2, .HS = 128, .theta = 10000.0f EXTRA()) /* large angles */
#define FORGE_ROPE_CASES(K) FORGE_ROPE_CASES_E(K, FORGE_NO_EXTRA)
#define FORGE_ATTENTION_CASES(K)                                                                                 \
    K(.B = 2, .T = 67, .NH = 6, .NKV = 2, .HS = 64) K(.B = 2, .T = 67, .NH = 6, .NKV = 6, .HS = 64)              \
    K(.B = 2, .T = 67, .NH = 6, .NKV = 2, .HS = 6) K(.B = 2, .T = 67, .NH = 6, .NKV = 6, .HS = 6)                \
    K(.B = 1, .T = 1, .NH = 2, .NKV = 1, .HS = 8) K(.B = 1, .T = 130, .NH = 6, .NKV = 3, .HS = 64)               \
    K(.B = 2, .T = 200, .NH = 4, .NKV = 2, .HS = 32) K(.B = 1, .T = 257, .NH = 4, .NKV = 1, .HS = 64)
/* Head sizes 64 and 128 (the register-blocked kernels), 16 and 32, and the zero-padded path (6, 7, 8, 100). */
#define FORGE_FLASH_CASES_E(K, EXTRA)                                                                            \
    K(.B = 1, .T = 1, .NH = 2, .NKV = 1, .HS = 64 EXTRA())                                                       \
    K(.B = 2, .T = 67, .NH = 6, .NKV = 2, .HS = 64 EXTRA())                                                      \
    K(.B = 2, .T = 67, .NH = 6, .NKV = 6, .HS = 64 EXTRA())                                                      \
    K(.B = 1, .T = 130, .NH = 6, .NKV = 3, .HS = 64 EXTRA())                                                     \
    K(.B = 1, .T = 257, .NH = 4, .NKV = 1, .HS = 64 EXTRA())                                                     \
    K(.B = 2, .T = 200, .NH = 4, .NKV = 2, .HS = 128 EXTRA())                                                    \
    K(.B = 1, .T = 129, .NH = 2, .NKV = 2, .HS = 128 EXTRA())                                                    \
    K(.B = 1, .T = 1, .NH = 2, .NKV = 2, .HS = 128 EXTRA())                                                      \
    K(.B = 2, .T = 67, .NH = 4, .NKV = 2, .HS = 32 EXTRA())                                                      \
    K(.B = 2, .T = 67, .NH = 4, .NKV = 2, .HS = 16 EXTRA())                                                      \
    K(.B = 1, .T = 1031, .NH = 4, .NKV = 2, .HS = 64 EXTRA())                                                    \
    K(.B = 1, .T = 700, .NH = 2, .NKV = 1, .HS = 128 EXTRA())                                                    \
    K(.B = 2, .T = 67, .NH = 6, .NKV = 2, .HS = 6 EXTRA())                                                       \
    K(.B = 2, .T = 67, .NH = 4, .NKV = 2, .HS = 8 EXTRA())                                                       \
    K(.B = 1, .T = 150, .NH = 4, .NKV = 2, .HS = 100 EXTRA())
#define FORGE_FLASH_CASES(K) FORGE_FLASH_CASES_E(K, FORGE_NO_EXTRA)
/* the bf16 backward writing dqkv: the tensor-core head sizes (64, 128; GQA and not) and the fallback (32, 6) */
#define FORGE_FLASH_BF16_WRITE_CASES(K)                                                                          \
    K(.B = 1, .T = 1, .NH = 2, .NKV = 1, .HS = 64, .accumulate = 0)                                              \
    K(.B = 2, .T = 67, .NH = 6, .NKV = 2, .HS = 64, .accumulate = 0)                                             \
    K(.B = 1, .T = 257, .NH = 4, .NKV = 4, .HS = 64, .accumulate = 0)                                            \
    K(.B = 2, .T = 200, .NH = 4, .NKV = 2, .HS = 128, .accumulate = 0)                                           \
    K(.B = 2, .T = 67, .NH = 4, .NKV = 2, .HS = 32, .accumulate = 0)                                             \
    K(.B = 2, .T = 67, .NH = 6, .NKV = 2, .HS = 6, .accumulate = 0)
/* Tq != Tk: fewer keys than queries (rows with no visible key when Tk < Tq), more keys, none. */
#define FORGE_FLASH_EXT_CASES(K)                                                                                 \
    K(.B = 2, .Tq = 67, .Tk = 67, .NH = 6, .NKV = 2, .HS = 64)                                                   \
    K(.B = 1, .Tq = 100, .Tk = 37, .NH = 4, .NKV = 2, .HS = 64)                                                  \
    K(.B = 1, .Tq = 150, .Tk = 10, .NH = 2, .NKV = 1, .HS = 128)                                                 \
    K(.B = 1, .Tq = 70, .Tk = 0, .NH = 2, .NKV = 1, .HS = 64)                                                    \
    K(.B = 1, .Tq = 50, .Tk = 130, .NH = 4, .NKV = 2, .HS = 64)                                                  \
    K(.B = 1, .Tq = 45, .Tk = 30, .NH = 3, .NKV = 3, .HS = 7)
/* The first position (nothing cached), positions that miss every tile and block size, the cache's last row, GQA
 * groups of 1 to 12, head sizes odd-sized for the thread blocks (6, 100) and above one block's threads (300),
 * with RoPE (Llama's thetas) and without (GPT-2). */
#define FORGE_DECODE_CASES(K)                                                                                    \
    K(.pos = 0, .maxT = 1, .NH = 2, .NKV = 1, .HS = 8, .theta = 10000.0f)                                        \
    K(.pos = 66, .maxT = 80, .NH = 6, .NKV = 2, .HS = 64, .theta = 10000.0f)                                     \
    K(.pos = 66, .maxT = 67, .NH = 6, .NKV = 6, .HS = 64, .theta = 0.0f)                                         \
    K(.pos = 129, .maxT = 200, .NH = 6, .NKV = 3, .HS = 6, .theta = 10000.0f)                                    \
    K(.pos = 37, .maxT = 50, .NH = 3, .NKV = 3, .HS = 100, .theta = 0.0f)                                        \
    K(.pos = 300, .maxT = 301, .NH = 2, .NKV = 1, .HS = 300, .theta = 500000.0f)                                 \
    K(.pos = 1030, .maxT = 1031, .NH = 12, .NKV = 1, .HS = 128, .theta = 500000.0f)                              \
    K(.pos = 2047, .maxT = 2048, .NH = 4, .NKV = 2, .HS = 64, .theta = 10000.0f)                                 \
    K(.pos = 1500, .maxT = 2100, .NH = 12, .NKV = 12, .HS = 64, .theta = 0.0f)
/* attention_decode's shapes, the position drawn from [0, maxT) (the last row a quarter of the time) */
#define FORGE_DECODE_AT_CASES(K)                                                                                 \
    K(.maxT = 1, .NH = 2, .NKV = 1, .HS = 8, .theta = 10000.0f)                                                  \
    K(.maxT = 80, .NH = 6, .NKV = 2, .HS = 64, .theta = 10000.0f)                                                \
    K(.maxT = 67, .NH = 6, .NKV = 6, .HS = 64, .theta = 0.0f)                                                    \
    K(.maxT = 200, .NH = 6, .NKV = 3, .HS = 6, .theta = 10000.0f)                                                \
    K(.maxT = 301, .NH = 2, .NKV = 1, .HS = 300, .theta = 500000.0f)                                             \
    K(.maxT = 1031, .NH = 12, .NKV = 1, .HS = 128, .theta = 500000.0f)                                           \
    K(.maxT = 2048, .NH = 4, .NKV = 2, .HS = 64, .theta = 10000.0f)
/* ---- sizes and tolerances of the bf16 entries ------------------------------------------------------------
 * Flash attention (bf16). Scratch of the backward, in floats, for the path the head size selects
 * (FORGE_FLASH_BF16_TC: the CUDA entry's own choice): head sizes 64 and 128 run the tensor-core kernels, which
 * need dq, dk, dv in fp32 (B*T*FORGE_QKV) and delta (B*NH*T), as the CPU reference does; any other head size runs
 * the CUDA fallback, which widens qkv, dqkv, dout and out to fp32 and runs the fp32 flash backward, whose D takes
 * B*NH*T (a layout the tensor-core kernels refuse at head size 64 or 128 takes the fallback too, with a
 * stream-ordered buffer of its own). +4 aligns the pieces to 16 bytes.
 * Tolerances (max abs error against the CPU reference; u = 2^-9, the bf16 unit roundoff):
 * - out: the kernels round P = exp(s - m) at the running max of their key tiles (the fallback does not round it),
 *   the reference at the final max; each rounding moves a term of sum_j P_j v_j / l by <= u of it, so the two
 *   exact outputs differ by <= 2u sum_j (P_j / l) |v_j| <= 2u max|v|; each is then rounded to bf16, which can land
 *   one bf16 ulp apart: 2^-7 for |out| <= max|v| = 1.5 < 2.
 * - lse: fp32 score sums of exact bf16 products in another order: <= (HS-1) 2^-24 sum_e |q_e k_e| * scale
 *   <= qmax^2 HS^1.5 2^-24 (qmax = max|q|, |k| <= qmax), plus 2e-5 for exp / log and the final fp32 operations
 *   (lse <= log(T+1) + 3, a few fp32 ulps of it).
 * - dqkv = rn(dqkv + d), |dqkv| < 2 here: one bf16 ulp (2^-7) for the rounding of the sum, plus the error of d:
 *   the rounding of P and dS on either side moves each term of a gradient sum by <= u of it, so d differs by
 *   <= 2u sum|terms|; with these inputs max|d| <= 0.8 (measured over the cases: the gradients of a softmax with a
 *   saved lse, |dout| <= 1) and d's error <= 1.2e-3 (the fp32 fallback against the reference); bounded by 2^-6,
 *   ~2% of max|d|, as the bf16 kernels' own tests bound it at 3e-2 max|ref|. */
#define FORGE_FLASH_BF16_TC(HS) ((HS) == 64 || (HS) == 128)
/* The tensor-core backward's row statistics (the `delta` scratch of forge_flash_bf16_backward*, CUDA's
 * flash_attention_bf16.h), in floats: two planes of (B, NH) rows of T padded to FORGE_FLASH_BF16_ROWS_PAD
 * (FORGE_FLASH_BF16_ROWS_TPAD(T) floats a row). */
#define FORGE_FLASH_BF16_ROWS_PAD 128
#define FORGE_FLASH_BF16_ROWS_TPAD(T)                                                                            \
    (((size_t)(T) + FORGE_FLASH_BF16_ROWS_PAD - 1) / FORGE_FLASH_BF16_ROWS_PAD * FORGE_FLASH_BF16_ROWS_PAD)
#define FORGE_FLASH_BF16_ROWSTATS(B, NH, T) (2 * (size_t)(B) * (NH) * FORGE_FLASH_BF16_ROWS_TPAD(T))
/* The whole `delta` scratch of the Hopper backward, in floats: the row statistics, and at HS = 64 and 128 (the
 * fused backward) the turn counters of its dQ hand-off (2 per (B, NH) query tile of 64 rows, rounded up to 4 so
 * what follows stays 16-byte aligned) and an fp32 dQ accumulator (B, T, NH, HS) that bf16 gradients go through. */
#define FORGE_FLASH_BF16_TURNS(B, NH, T) (((size_t)(B) * (NH) * (((size_t)(T) + 63) / 64) * 2 + 3) / 4 * 4)
#define FORGE_FLASH_BF16_BWD_SCRATCH(B, NH, T, HS)                                                               \
    (FORGE_FLASH_BF16_ROWSTATS(B, NH, T) +                                                                       \
     ((HS) == 64 || (HS) == 128 ? FORGE_FLASH_BF16_TURNS(B, NH, T) + (size_t)(B) * (T) * (NH) * (HS) : 0))
#define FORGE_FLASH_BF16_SCRATCH_TC(B, T, NH, NKV, HS)                                                           \
    ((size_t)(B) * (T) * FORGE_QKV(NH, NKV, HS) + FORGE_FLASH_BF16_BWD_SCRATCH(B, NH, T, HS) + 4)
#define FORGE_FLASH_BF16_SCRATCH_WIDE(B, T, NH, NKV, HS)                                                         \
    ((size_t)(B) * (T) * (2 * FORGE_QKV(NH, NKV, HS) + 2 * (size_t)(NH) * (HS)) + (size_t)(B) * (NH) * (T) + 4)
#define FORGE_FLASH_BF16_SCRATCH(B, T, NH, NKV, HS)                                                              \
    (FORGE_FLASH_BF16_TC(HS) ? FORGE_FLASH_BF16_SCRATCH_TC(B, T, NH, NKV, HS)                                    \
                             : FORGE_FLASH_BF16_SCRATCH_WIDE(B, T, NH, NKV, HS))
#define FORGE_FLASH_BF16_OUT_TOL(vmax) (2.0 * ldexp((vmax), -9) + ldexp(1.0, -7))
#define FORGE_FLASH_BF16_LSE_TOL(HS, qmax) ((qmax) * (qmax) * pow((double)(HS), 1.5) * ldexp(1.0, -24) + 2e-5)
#define FORGE_FLASH_BF16_DQKV_TOL (ldexp(1.0, -7) + ldexp(1.0, -6))
/* Classifier (bf16). Rows per chunk: at most the limit, which is chunk_rows when in (0, cap), else the cap
 * FORGE_CLS_BF16_CAP(V) = FORGE_CLS_BF16_CHUNK / V (at least 1, at most FORGE_CLS_BF16_MAX_ROWS), above 128 rounded
 * down to a multiple of 128 (the GEMMs' row tile). N rows above the limit are cut into equal chunks, each rounded up to a multiple of 8
 * where the limit is one (so every chunk but the last takes the CUDA kernel's transposed layout); else chunks of the
 * limit. Scratch, in floats: the chunk's logits (rows, V) bf16 (the CUDA transposed layout writes the dlogits over
 * them; its row layout takes half the rows at a time, logits and dlogits side by side, so at least 2 rows' worth)
 * and its (rows, C) fp32 product dlogits . wte, +16 to align the pieces to 16 bytes.
 * Tolerances (inputs: inp in [-1, 1], wte in [-0.1, 0.1], so a logit is a C-term sum of std 0.033 sqrt(C) and
 * |logit| <= Lmax = 0.2 sqrt(C) (6 std)). A GPU logit is rn() of an fp32 sum in another order, so it can land one
 * bf16 ulp (<= 2^-7 |logit|) from the reference's (the fp32 sums differ by ~sqrt(C) 2^-24 |logit|, so this is rare:
 * the bounds take one such event per output, not two):
 * - loss = lse - logit[target]: one ulp of the target's logit, 2^-7 Lmax, plus 1e-4 for the fp32 sum of V
 *   exponentials in another order (relative ~sqrt(V) 2^-24 of lse).
 * - dinp = rn(dinp + dx), |dinp| < 1 + 2 * 0.1 grad_scale < 2: one bf16 ulp (2^-7) for the rounding of the sum,
 *   plus one dlogit landing one ulp away (<= 2^-7 grad_scale) times |wte| <= 0.1 (< 2^-9 grad_scale).
 * - dwte (fp32) += an N-long sum: SUM(N) for the order, plus one dlogit one ulp away (<= 2^-7 grad_scale, the
 *   target's: |p - 1| grad_scale <= grad_scale) times |inp| <= 1. */
/* 2^30 logits a chunk (2 GiB of bf16), at most 16384 rows: GPT-2's 50257-id vocabulary takes gpt2-124m's
 * 16 x 1024 rows in one chunk, so each of the three GEMMs runs once over the batch and dwte's fp32
 * read-modify-write happens once (docs/results.md has the measurements behind the sizes) */
#define FORGE_CLS_BF16_CHUNK (1 << 30)
#define FORGE_CLS_BF16_MAX_ROWS 16384
#define FORGE_CLS_BF16_CAP(V)                                                                                    \
    (FORGE_CLS_BF16_CHUNK / (V) >= FORGE_CLS_BF16_MAX_ROWS ? FORGE_CLS_BF16_MAX_ROWS                             \
     : FORGE_CLS_BF16_CHUNK / (V) >= 128                   ? FORGE_CLS_BF16_CHUNK / (V) / 128 * 128              \
     : FORGE_CLS_BF16_CHUNK / (V) >= 1                     ? FORGE_CLS_BF16_CHUNK / (V)                          \
                                                           : 1)
#define FORGE_CLS_BF16_LIMIT(V, cr) ((cr) > 0 && (cr) < FORGE_CLS_BF16_CAP(V) ? (cr) : FORGE_CLS_BF16_CAP(V))
#define FORGE_CLS_BF16_NCHUNKS(N, V, cr) (((N) + FORGE_CLS_BF16_LIMIT(V, cr) - 1) / FORGE_CLS_BF16_LIMIT(V, cr))
#define FORGE_CLS_BF16_ROWS(N, V, cr)                                                                            \
    ((N) <= FORGE_CLS_BF16_LIMIT(V, cr)       ? (N)                                                              \
     : FORGE_CLS_BF16_LIMIT(V, cr) % 8 != 0 ? FORGE_CLS_BF16_LIMIT(V, cr)                                        \
                                            : (((N) + FORGE_CLS_BF16_NCHUNKS(N, V, cr) - 1) /                    \
                                                   FORGE_CLS_BF16_NCHUNKS(N, V, cr) + 7) / 8 * 8)
#define FORGE_CLS_BF16_SCRATCH(N, C, V, cr)                                                                      \
    (((size_t)(FORGE_CLS_BF16_ROWS(N, V, cr) == 1 ? 2 : FORGE_CLS_BF16_ROWS(N, V, cr)) * (size_t)(V) + 1) / 2 +  \
     (size_t)FORGE_CLS_BF16_ROWS(N, V, cr) * (size_t)(C) + 16)
#define FORGE_CLS_BF16_LOSS_TOL(C) (0.2 * sqrt((double)(C)) * ldexp(1.0, -7) + 1e-4)
#define FORGE_CLS_BF16_DINP_TOL(gs) (ldexp(1.0, -7) + (gs) * ldexp(1.0, -9))
#define FORGE_CLS_BF16_DWTE_TOL(N, gs) (1e-4 * fmax(1.0, sqrt((double)(N)) / 8) + (gs) * ldexp(1.0, -7))
/* C % 8 != 0 (the SIMT fallback of every GEMM), V % 8 != 0 (the vocabulary tail), V < 8 (tail only), several
 * chunks (chunk_rows 127: 127 + 127 + 46 rows; chunk_rows 896 at N = 1803: 608 + 608 + 587 rows); chunks of
 * rows % 8 == 0 with C % 8 == 0 take the CUDA kernel's transposed layout, the rows past a multiple of 8 the row
 * layout (N = 64, 8, 256, 257: 256 + 1, 1803: ... + 584 + 3, V odd) */
#define FORGE_CLS_BF16_CASES(K, EXTRA)                                                                           \
    K(.N = 37, .C = 45, .V = 1000, .ignore_index = -100, .grad_scale = 0.03f, .ignore_pct = 25 EXTRA())          \
    K(.N = 1, .C = 64, .V = 1000, .ignore_index = -100, .grad_scale = 1.0f, .ignore_pct = 0 EXTRA())             \
    K(.N = 64, .C = 64, .V = 1001, .ignore_index = -100, .grad_scale = 1.0f, .ignore_pct = 10 EXTRA())           \
    K(.N = 8, .C = 16, .V = 7, .ignore_index = -100, .grad_scale = 0.25f, .ignore_pct = 50 EXTRA())              \
    K(.N = 257, .C = 200, .V = 131, .ignore_index = -100, .grad_scale = 0.5f, .ignore_pct = 10 EXTRA())          \
    K(.N = 300, .C = 128, .V = 8192, .ignore_index = -100, .grad_scale = 0.01f, .ignore_pct = 10 EXTRA())        \
    K(.N = 5, .C = 768, .V = 50257, .ignore_index = -100, .grad_scale = 0.25f, .ignore_pct = 20 EXTRA())         \
    K(.N = 300, .C = 8, .V = 1048579, .ignore_index = -100, .grad_scale = 0.1f, .ignore_pct = 10,                 \
      .chunk_rows = 127 EXTRA())                                                                                 \
    K(.N = 256, .C = 64, .V = 50257, .ignore_index = -100, .grad_scale = 0.25f, .ignore_pct = 10 EXTRA())        \
    K(.N = 1803, .C = 8, .V = 131101, .ignore_index = -100, .grad_scale = 0.1f, .ignore_pct = 10,                \
      .chunk_rows = 896 EXTRA())
/* the shapes dinp is written in (accumulate = 0): one chunk with the SIMT GEMMs, one on the wgmma path, one in the
 * transposed layout, several chunks */
#define FORGE_CLS_BF16_WRITE_CASES(K)                                                                            \
    K(.N = 37, .C = 45, .V = 1000, .grad_scale = 0.03f, .ignore_index = -100, .ignore_pct = 25, .accumulate = 0) \
    K(.N = 300, .C = 128, .V = 8192, .grad_scale = 0.01f, .ignore_index = -100, .ignore_pct = 10, .accumulate = 0) \
    K(.N = 256, .C = 64, .V = 50257, .grad_scale = 0.25f, .ignore_index = -100, .ignore_pct = 10, .accumulate = 0) \
    K(.N = 1800, .C = 8, .V = 131101, .grad_scale = 0.1f, .ignore_index = -100, .ignore_pct = 10, .accumulate = 0, \
      .chunk_rows = 896)
/* clipping active (norm above max_grad_norm), inactive (below), disabled (0); grad_sumsq NULL is the parity
 * test's optional-argument pass. n_spans_ random spans cover the n_ elements. */
#define FORGE_ADAMW_HP(max_norm_) {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = (max_norm_)}
#define FORGE_ADAMW_CASES(K, n_, n_spans_)                                                                       \
    K(.n = n_, .n_spans = n_spans_, .hp = FORGE_ADAMW_HP(1.0f))                                                  \
    K(.n = n_, .n_spans = n_spans_, .hp = FORGE_ADAMW_HP(1e9f))                                                  \
    K(.n = n_, .n_spans = n_spans_, .hp = FORGE_ADAMW_HP(0.0f))

/* The op enum and names (FORGE_OP_accumulate, ...; forge_op_name). */
#define FORGE_OP_ENUM_ENTRY(name, dtype, flags, args, cases) FORGE_OP_##name,
#define FORGE_OP_NOTHING(...)
typedef enum { FORGE_OP_LIST(FORGE_OP_ENUM_ENTRY, FORGE_OP_NOTHING, FORGE_OP_NOTHING) FORGE_OP_COUNT } forge_op;

/* Argument lists in declaration form: A(...) of an entry -> ", type name". */
#define FORGE_ARG_DECL(kind, ...) FORGE_ARG_DECL_##kind(__VA_ARGS__)
#define FORGE_ARG_DECL_IN(T, name, ...) , const T *name
#define FORGE_ARG_DECL_IN_OPT(T, name, ...) , const T *name
#define FORGE_ARG_DECL_IN_TRIL(T, name, ...) , const T *name
#define FORGE_ARG_DECL_OUT(T, name, ...) , T *name
#define FORGE_ARG_DECL_OUT_OPT(T, name, ...) , T *name
#define FORGE_ARG_DECL_ACC(T, name, ...) , T *name
#define FORGE_ARG_DECL_ACC_OPT(T, name, ...) , T *name
#define FORGE_ARG_DECL_ACC_IF(T, name, ...) , T *name
#define FORGE_ARG_DECL_ACC_IF_OPT(T, name, ...) , T *name
#define FORGE_ARG_DECL_INOUT(T, name, ...) , T *name
#define FORGE_ARG_DECL_IDS(name, ...) , const int32_t *name
#define FORGE_ARG_DECL_SPANS(name, ...) , const forge_adamw_span *name
#define FORGE_ARG_DECL_SCRATCH(name, ...) , float *name
#define FORGE_ARG_DECL_SIZE(T, name) , T name
#define FORGE_ARG_DECL_SCALAR(T, name) , T name
#define FORGE_ARG_DECL_PARAMS(T, name) , T name
#define FORGE_ARG_DECL_DIM(name)

/* Prototypes of one backend's kernels, PREFIX##NAME(forge_backend *be, ...): cpu_ops.h, cuda_ops.h. */
#define FORGE_OP_PROTOTYPE_CPU(name, dtype, flags, args, cases) forge_status cpu_##name(forge_backend *be args);
#define FORGE_OP_PROTOTYPE_CUDA(name, dtype, flags, args, cases) forge_status cuda_##name(forge_backend *be args);
/* The table binding: be->NAME = PREFIX##NAME. */
#define FORGE_OP_BIND_CPU(name, dtype, flags, args, cases) be->name = cpu_##name;
#define FORGE_OP_BIND_CUDA(name, dtype, flags, args, cases) be->name = cuda_##name;

#endif
