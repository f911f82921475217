/*
 * graph.cu: recording a stream of ops as a CUDA graph and replaying it
 * (backend.h, "graphs"). The trainer records one whole step (forward,
 * backward, optimizer) once and replays it every step: a replay costs one
 * launch instead of one per kernel, and the host does no per-op work.
 *
 * The decisions a reader would get wrong:
 * - Capture is cudaStreamCaptureModeRelaxed: an op that lazily creates
 *   something (cudaFuncSetAttribute, a first cudaMalloc of a workspace) must
 *   not invalidate the capture; anything that synchronises the stream still
 *   does, and capture_end then reports it so the caller runs eagerly.
 * - A graph holds raw pointers. The pool's blocks stay valid because the
 *   caller pins them (runtime/graph.c); the backend's own workspaces are
 *   covered by ws_generation: a graph recorded before a workspace was
 *   replaced refuses to launch (FORGE_ERR_STALE) instead of writing freed
 *   memory.
 */
#include <stdlib.h>

#include "cuda_ops.h"

typedef struct {
    cudaGraphExec_t exec;
    unsigned ws_generation; /* the context's when recorded */
} cuda_graph;

forge_status cuda_capture_begin(forge_backend *be) {
    CUDA_TRY(cudaStreamBeginCapture(cuda_get_ctx(be)->stream, cudaStreamCaptureModeRelaxed));
    return FORGE_OK;
}

forge_status cuda_capture_end(forge_backend *be, void **out) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    *out = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(ctx->stream, &graph);
    if (e != cudaSuccess || !graph) {
        (void)cudaGetLastError();
        if (graph) cudaGraphDestroy(graph);
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuda: recording the step as a graph failed: %s",
                           cudaGetErrorString(e));
    }
    cuda_graph *g = (cuda_graph *)calloc(1, sizeof *g);
    if (!g) {
        cudaGraphDestroy(graph);
        return forge_error(FORGE_ERR_OOM, "cuda: out of host memory for a graph");
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(g);
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuda: instantiating the recorded step failed: %s",
                           cudaGetErrorString(e));
    }
    g->ws_generation = ctx->ws_generation;
    *out = g;
    return FORGE_OK;
}

forge_status cuda_graph_launch(forge_backend *be, void *graph) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    cuda_graph *g = (cuda_graph *)graph;
    if (g->ws_generation != ctx->ws_generation)
        return forge_error(FORGE_ERR_STALE, "cuda: a workspace the recorded step uses was replaced since");
    CUDA_TRY(cudaGraphLaunch(g->exec, ctx->stream));
    return FORGE_OK;
}

void cuda_graph_destroy(forge_backend *be, void *graph) {
    (void)be;
    cuda_graph *g = (cuda_graph *)graph;
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    free(g);
}
