/* graph.c: a recorded step (graph.h): the backend's graph entries plus the pool's pins. */
#include "graph.h"

#include <stdlib.h>

struct forge_graph {
    forge_pool *pool;
    forge_backend *be;
    void *exec; /* the backend's recorded graph */
};

int forge_graph_supported(const forge_pool *pool) {
    const forge_backend *be = forge_pool_backend(pool);
    return be->capture_begin && be->capture_end && be->graph_launch && be->graph_destroy;
}

forge_status forge_graph_record_begin(forge_pool *pool) {
    forge_backend *be = forge_pool_backend(pool);
    if (!forge_graph_supported(pool))
        return forge_error(FORGE_ERR_UNSUPPORTED, "backend %s cannot record graphs", be->name);
    forge_pool_unpin(pool);
    FORGE_TRY(be->capture_begin(be));
    forge_pool_record_begin(pool);
    return FORGE_OK;
}

forge_status forge_graph_record_end(forge_pool *pool, forge_graph **out) {
    forge_backend *be = forge_pool_backend(pool);
    *out = NULL;
    void *exec = NULL;
    forge_status s = be->capture_end(be, &exec);
    forge_status ps = forge_pool_record_end(pool);
    if (s == FORGE_OK && ps != FORGE_OK) s = ps;
    forge_graph *g = NULL;
    if (s == FORGE_OK) {
        g = calloc(1, sizeof *g);
        if (!g) s = forge_error(FORGE_ERR_OOM, "graph: out of host memory");
    }
    if (s != FORGE_OK) {
        if (exec) be->graph_destroy(be, exec);
        forge_pool_unpin(pool);
        return s;
    }
    g->pool = pool;
    g->be = be;
    g->exec = exec;
    *out = g;
    return FORGE_OK;
}

forge_status forge_graph_replay(forge_graph *g) {
    if (!forge_pool_pinned_free(g->pool))
        return forge_error(FORGE_ERR_STALE, "graph: a block of the recorded step is in use or was freed");
    return g->be->graph_launch(g->be, g->exec);
}

void forge_graph_free(forge_graph *g) {
    if (!g) return;
    g->be->graph_destroy(g->be, g->exec);
    forge_pool_unpin(g->pool);
    free(g);
}
