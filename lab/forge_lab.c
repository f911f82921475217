/*
 * forge_lab.c: `forge-lab COMMAND...`, the lab's driver: looks the command up
 * in the table below and runs it. Every entry's code is in its own file.
 */
#include <stdio.h>
#include <string.h>

#include "lab.h"
#include "characterize/characterize.h"
#include "classifier/classifier_lab.h"
#include "elementwise/elementwise_lab.h"
#include "flash/flash_lab.h"
#include "gemm_bf16/dw_dbias.h"
#include "gemm_bf16/gemm_bf16_variants.h"
#include "gemm_fp8/gemm_fp8_lab.h"
#include "gemm_mma/gemm_mma_lab.h"
#include "norm/norm_lab.h"

static const lab_command COMMANDS[] = {
    {"test flash16", "bf16 flash attention variants vs float64 [--quick]", lab_test_flash16},
    {"bench attention-variants", "bf16 flash kernels and variants vs unfused fp32 [--quick] [--reps N]",
     lab_bench_attention_variants},
    {"bench flash16-bwd-fused",
     "the three-kernel flash backward vs the fused one and fused2 at (16, 12|8, 1024, 64), at D = 128 vs forge's fused "
     "backward, at D = 64 vs its D = 64 instance at (16,12,1024,64), (64,6,512,64), (64,8,1024,64) [--reps N]",
     lab_bench_flash16_bwd_fused},
    {"bench flash16-fwd-1cta",
     "forge's flash forward (two CTAs per SM) vs the one-CTA one at (16,12,1024,64), (64,6,512,64), (64,8,1024,64) "
     "[--reps N]",
     lab_bench_flash16_fwd_1cta},
    {"bench flash16-host",
     "the flash entries' host cost: enqueue time, a call alone vs back to back, and the host primitives they call "
     "[--reps N]",
     lab_bench_flash16_host},
    {"bench flash16-bwd-2cta",
     "forge's flash backward vs the two-CTA-per-SM dQ / dK/dV kernels at (16,12,1024,64), (64,6,512,64), "
     "(64,8,1024,64), whole calls and per kernel [--reps N]",
     lab_bench_flash16_bwd_2cta},
    {"bench cls16t-passes",
     "the bf16 classifier's column passes: forge's, ahead, walk and the fast (ex2) passes vs the row pair, interleaved "
     "[--reps N] [--widths]",
     lab_bench_cls16t_passes},
    {"bench gelu16-bwd", "the bf16 GELU backward: computed gelu' vs the table kernel, interleaved [--reps N]",
     lab_bench_gelu16_bwd},
    {"bench gelu16-bwd-dbias",
     "GELU backward + the fc bias gradient: the previous fused kernel vs the op, two passes, row unrolls [--reps N]",
     lab_bench_gelu16_bwd_dbias},
    {"bench norm16-bwd", "the bf16 norm backward's fused kernel: previous vs default vs stage counts [--reps N]",
     lab_bench_norm16_bwd},
    {"bench gemm-bf16-variants", "bf16 GEMM variants vs the default (gemm_bf16/)", lab_bench_gemm_bf16_variants},
    {"bench pp-bf16-epi", "bf16-out forward GEMMs: cooperative vs ping-pong kernel, interleaved, bitwise [--reps N]",
     lab_bench_pp_bf16_epi},
    {"bench dw-plan", "the step's dW GEMMs: the default plan vs explicit (tile, splits) plans, interleaved [--reps N]",
     lab_bench_dw_plan},
    {"test gemm-bf16", "parity of the bf16 GEMM variants (gemm_bf16/)", lab_test_gemm_bf16},
    {"bench dw-dbias",
     "matmul_backward_weight_bf16 at the GPT-2 shapes: the op (dbias fused on 128x256) vs GEMM + separate dbias pass, "
     "interleaved [--reps N]",
     lab_bench_dw_dbias},
    {"test dw-dbias", "matmul_backward_weight_bf16's dbias vs float64, dW bitwise vs the GEMM without dbias [--quick]",
     lab_test_dw_dbias},
    {"bench gemm-fp8", "fp8/tf32 wgmma GEMMs and their variants vs cuBLASLt fp8 / cuBLAS tf32", lab_bench_gemm_fp8},
    {"test gemm-fp8", "the fp8/tf32 wgmma GEMM variants against a double reference", lab_test_gemm_fp8},
    {"bench gemm-mma", "mma.sync GEMMs (forge's tf32, the lab's bf16) vs cuBLAS", lab_bench_gemm_mma},
    {"test gemm-mma", "the bf16 mma.sync GEMM against a double reference", lab_test_gemm_mma},
    {"bench characterize", "Hopper characterization: library GEMMs, matrix units, clocks", lab_bench_characterize},
    {NULL, NULL, NULL},
};

static void usage(FILE *out) {
    fputs("usage: forge-lab COMMAND [options]: the kernel laboratory (lab/README.md)\n", out);
    for (const lab_command *c = COMMANDS; c->name; c++) fprintf(out, "  %-28s %s\n", c->name, c->help);
    fputs("every bench command takes --reps N, --results DIR and --only \"pat1|pat2\" (only the cells whose\n"
          "\"name@group\" contains a pattern, as `forge bench --only`); `forge-lab bench NAME --help` prints its usage\n",
          out);
}

/* Matches argv's leading words against a command name of one or more words; returns how many it took. */
static int match(const char *name, int argc, char **argv) {
    int used = 0;
    size_t pos = 0, len = strlen(name);
    while (pos < len) {
        size_t w = strcspn(name + pos, " ");
        if (used >= argc || strlen(argv[used]) != w || strncmp(argv[used], name + pos, w) != 0) return 0;
        used++;
        pos += w;
        while (name[pos] == ' ') pos++;
    }
    return used;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    for (const lab_command *c = COMMANDS; c->name; c++) {
        int used = match(c->name, argc - 1, argv + 1);
        if (used) return c->run(argc - 1 - used, argv + 1 + used);
    }
    fprintf(stderr, "forge-lab: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
