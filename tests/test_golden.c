/*
 * test_golden.c: forge's CPU backend against PyTorch + Hugging Face.
 *
 * tests/golden/<name>_init.safetensors is a forge-initialised model
 * (`forge init`); tools/torch_reference.py loaded it into transformers'
 * GPT2LMHeadModel / LlamaForCausalLM and wrote <name>_golden.safetensors:
 * the batch, logits, loss, every gradient, and 10 AdamW losses. Agreement
 * checks forge's model definition, HF naming and layouts, every op's maths,
 * and the optimizer at once. If they disagree, the CPU reference is wrong.
 *
 * FORGE_GOLDEN_DEVICE=cuda runs the same comparison on the GPU backend (the
 * device script does); the default is the CPU reference backend.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/model/model.h"
#include "../src/model/safetensors.h"
#include "../src/train/checkpoint.h"
#include "../src/train/optimizer.h"
#include "test.h"

static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d) / fmax(sqrt(r), 1e-30);
}

static double max_abs_err(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void golden_case(const char *name) {
    char init[256], gold[256], label[128];
    snprintf(label, sizeof label, "%s: logits, loss, gradients and 10 AdamW steps match PyTorch", name);
    TEST_CASE(label);
    snprintf(init, sizeof init, "tests/golden/%s_init.safetensors", name);
    snprintf(gold, sizeof gold, "tests/golden/%s_golden.safetensors", name);
    forge_model_config cfg;
    CHECK_OK(forge_checkpoint_read_config(init, &cfg));
    forge_safetensors *g = NULL;
    CHECK_OK(forge_safetensors_open(&g, gold));
    if (test_case_failed()) return;
    const forge_st_entry *ids_e = forge_safetensors_find(g, "input_ids");
    const forge_st_entry *tgt_e = forge_safetensors_find(g, "targets");
    const forge_st_entry *logits_e = forge_safetensors_find(g, "logits");
    const forge_st_entry *loss_e = forge_safetensors_find(g, "loss");
    const forge_st_entry *adamw_e = forge_safetensors_find(g, "adamw_losses");
    CHECK(ids_e && tgt_e && logits_e && loss_e && adamw_e);
    if (test_case_failed()) {
        forge_safetensors_close(g);
        return;
    }
    int B = (int)ids_e->shape[0], T = (int)ids_e->shape[1], N = B * T, V = cfg.vocab_size;
    float lr = strtof(forge_safetensors_meta(g, "lr"), NULL);

    forge_backend *be;
    forge_pool *pool;
    forge_tape *tape;
    forge_model *m;
    const char *device = getenv("FORGE_GOLDEN_DEVICE");
    forge_runtime_options rt;
    forge_runtime_options_default(&rt);
    if (device && strcmp(device, "cpu") != 0) {
        CHECK_OK(forge_device_parse("FORGE_GOLDEN_DEVICE", device, &rt.device, &rt.device_index));
        CHECK_OK(forge_backend_create(&be, rt.device, &rt));
    } else
        CHECK_OK(forge_backend_create_cpu(&be, 0, 1));
    if (test_case_failed()) {
        forge_safetensors_close(g);
        return;
    }
    float *host = malloc((size_t)N * V * sizeof(float));
    CHECK_OK(forge_pool_create(&pool, be));
    CHECK_OK(forge_tape_create(&tape, pool));
    CHECK_OK(forge_model_create(&m, &cfg, pool, 0));
    CHECK_OK(forge_checkpoint_load_weights(init, m));
    int64_t shape[2] = {B, T};
    forge_tensor *ids, *tgt, *out;
    CHECK_OK(forge_pool_tensor(pool, &ids, FORGE_I32, 2, shape, 1));
    CHECK_OK(forge_pool_tensor(pool, &tgt, FORGE_I32, 2, shape, 1));
    CHECK_OK(be->copy_to_device(be, ids->data, ids_e->data, (size_t)N * 4));
    CHECK_OK(be->copy_to_device(be, tgt->data, tgt_e->data, (size_t)N * 4));

    /* logits */
    forge_tape_set_recording(tape, 0);
    CHECK_OK(forge_model_forward(m, tape, ids, NULL, 0, &out));
    CHECK_OK(be->copy_to_host(be, host, out->data, (size_t)N * V * sizeof(float)));
    double le = max_abs_err(host, logits_e->data, (size_t)N * V);
    CHECK_MSG(le <= 1e-4, "logits max abs error %.3g", le);
    forge_tape_reset(tape);
    forge_tape_set_recording(tape, 1);

    /* loss and gradients */
    CHECK_OK(forge_model_zero_grad(m));
    CHECK_OK(forge_model_forward(m, tape, ids, tgt, 1.0f / N, &out));
    CHECK_OK(be->copy_to_host(be, host, out->data, (size_t)N * sizeof(float)));
    double loss = 0;
    for (int i = 0; i < N; i++) loss += host[i];
    loss /= N;
    CHECK_OK(forge_tape_backward(tape));
    forge_tape_reset(tape);
    float ref_loss = ((const float *)loss_e->data)[0];
    CHECK_MSG(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss), "loss %.8f vs PyTorch %.8f", loss, ref_loss);
    float *grads = malloc(m->n_elements * sizeof(float));
    CHECK_OK(forge_model_get_grads(m, grads));
    char gpath[600];
    snprintf(gpath, sizeof gpath, "%s/grads.safetensors", test_tmpdir());
    CHECK_OK(forge_checkpoint_write_values(gpath, m, grads));
    forge_safetensors *mine = NULL;
    CHECK_OK(forge_safetensors_open(&mine, gpath));
    int compared = 0;
    for (int i = 0; mine && i < forge_safetensors_count(mine); i++) {
        const forge_st_entry *e = forge_safetensors_entry(mine, i);
        char key[200];
        snprintf(key, sizeof key, "grad.%s", e->name);
        const forge_st_entry *ref = forge_safetensors_find(g, key);
        CHECK_MSG(ref != NULL, "golden file has no %s", key);
        if (!ref || ref->bytes != e->bytes) continue;
        size_t n = e->bytes / 4;
        double err = max_abs_err(e->data, ref->data, n);
        CHECK_MSG(err <= 1e-4, "%s: max abs error %.3g (relative %.3g)", e->name, err,
                  rel_err(e->data, ref->data, n));
        compared++;
    }
    CHECK(compared == m->n_params + (cfg.family == FORGE_FAMILY_LLAMA ? 2 * cfg.n_layers : 0));
    if (mine) forge_safetensors_close(mine);
    free(grads);

    /* 10 AdamW steps on the batch, constant lr */
    forge_optimizer *opt;
    forge_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    CHECK_OK(forge_optimizer_create(&opt, m, ac));
    CHECK_OK(forge_checkpoint_load_weights(init, m));
    const float *ref_losses = adamw_e->data;
    int steps = (int)adamw_e->shape[0];
    for (int step = 0; step < steps && !test_case_failed(); step++) {
        CHECK_OK(forge_model_zero_grad(m));
        CHECK_OK(forge_model_forward(m, tape, ids, tgt, 1.0f / N, &out));
        CHECK_OK(be->copy_to_host(be, host, out->data, (size_t)N * sizeof(float)));
        double l = 0;
        for (int i = 0; i < N; i++) l += host[i];
        l /= N;
        CHECK_OK(forge_tape_backward(tape));
        forge_tape_reset(tape);
        CHECK_MSG(fabs(l - ref_losses[step]) <= 1e-5 * fabs(ref_losses[step]) + 1e-6,
                  "AdamW step %d: loss %.8f vs PyTorch %.8f", step + 1, l, ref_losses[step]);
        CHECK_OK(forge_optimizer_begin_step(opt, lr));
        CHECK_OK(forge_optimizer_grad_norm(opt));
        CHECK_OK(forge_optimizer_update(opt));
    }
    free(host);
    forge_optimizer_free(opt);
    forge_model_free(m);
    forge_tape_destroy(tape);
    forge_pool_destroy(pool);
    forge_backend_destroy(be);
    forge_safetensors_close(g);
}

void suite_golden(void) {
    golden_case("gpt2-tiny");
    golden_case("llama-tiny");
}
