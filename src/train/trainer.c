/* trainer.c: the training loop, evaluation, logging and checkpoint cadence. */
#include "trainer.h"
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/comm.h"
#include "../runtime/tape.h"
#include "step.h"
#include "../data/loader.h"
#include "../data/shards.h"
#include "../data/tokenizer.h"
#include "../model/model.h"
#include "checkpoint.h"
#include "optimizer.h"
#include "run_dir.h"
#include "schedule.h"
#include "../base/clock.h"
#include "../base/fs.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

void forge_train_install_signal_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void forge_train_options_default(forge_train_options *o) {
    memset(o, 0, sizeof *o);
    o->config = NULL; /* tiny; on resume, the checkpoint's */
    o->configs_dir = "configs";
    o->keep_checkpoints = 2;
    o->out_dir = "runs/tiny";
    forge_runtime_options_default(&o->runtime);
    o->batch_size = 16;
    o->steps = 500;
    o->lr = 3e-3f;
    o->warmup_frac = 0.1f;
    o->min_lr_ratio = 0.1f;
    o->weight_decay = 0.1f;
    o->grad_clip = 1.0f;
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->eps = 1e-8f;
    o->seed = 1337;
    o->eval_every = 100;
    o->eval_batches = 8;
    o->progress = NULL;
    o->bucket_mb = 25.0f;
}

/* x in the interval lo..hi (each end open or closed; hi may be INFINITY) and finite. */
static forge_status check_number(const char *flag, double x, double lo, int lo_open, double hi, int hi_open,
                                 const char *why) {
    int ok = isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
    if (ok) return FORGE_OK;
    char hi_s[32];
    if (isinf(hi)) snprintf(hi_s, sizeof hi_s, "inf");
    else snprintf(hi_s, sizeof hi_s, "%g", hi);
    return forge_error(FORGE_ERR_ARG, "train: %s %g: expected a finite number in %c%g, %s%c%s%s%s", flag, x,
                       lo_open ? '(' : '[', lo, hi_s, hi_open ? ')' : ']', why ? " (" : "", why ? why : "",
                       why ? ")" : "");
}

static forge_status check_count(const char *flag, long x, long lo) {
    if (x >= lo) return FORGE_OK;
    return forge_error(FORGE_ERR_ARG, "train: %s %ld: expected an integer >= %ld", flag, x, lo);
}

forge_status forge_train_options_validate(const forge_train_options *o) {
    if (!o->data_dir || !o->data_dir[0]) return forge_error(FORGE_ERR_ARG, "train: no data directory (--data DIR)");
    if (!o->out_dir || !o->out_dir[0]) return forge_error(FORGE_ERR_ARG, "train: no run directory (--out DIR)");
    if (o->resume && o->init)
        return forge_error(FORGE_ERR_ARG, "train: --resume %s and --init %s: give one (--resume continues a run, "
                           "--init starts a new one from a model's weights)", o->resume, o->init);
    FORGE_TRY(check_count("--batch", o->batch_size, 1));
    FORGE_TRY(check_count("--steps", o->steps, 1));
    FORGE_TRY(check_count("--seq-len", o->seq_len, 0));
    FORGE_TRY(check_count("--tokens-per-step", o->tokens_per_step, 0));
    FORGE_TRY(check_count("--eval-every", o->eval_every, 0));
    FORGE_TRY(check_count("--eval-batches", o->eval_batches, 1));
    FORGE_TRY(check_count("--ckpt-every", o->ckpt_every, 0));
    FORGE_TRY(check_count("--stop-after", o->stop_after, 0));
    FORGE_TRY(check_count("--keep-checkpoints", o->keep_checkpoints, 1));
    FORGE_TRY(check_count("--early-stop", o->early_stop, 0));
    if (o->early_stop > 0 && o->eval_every == 0)
        return forge_error(FORGE_ERR_ARG, "train: --early-stop %d counts evaluations: it needs --eval-every N > 0",
                           o->early_stop);
    FORGE_TRY(check_number("--lr", o->lr, 0, 0, INFINITY, 1, NULL));
    FORGE_TRY(check_number("--warmup-frac", o->warmup_frac, 0, 0, 1, 0, "a fraction of --steps"));
    FORGE_TRY(check_number("--min-lr-ratio", o->min_lr_ratio, 0, 0, 1, 0, "a fraction of --lr"));
    FORGE_TRY(check_number("--weight-decay", o->weight_decay, 0, 0, INFINITY, 1, NULL));
    FORGE_TRY(check_number("--grad-clip", o->grad_clip, 0, 0, INFINITY, 1, "0 = no clipping"));
    FORGE_TRY(check_number("--beta1", o->beta1, 0, 0, 1, 1,
                           "at 1 AdamW's bias correction 1 - beta1^t is 0 and the update 0/0"));
    FORGE_TRY(check_number("--beta2", o->beta2, 0, 0, 1, 1,
                           "at 1 AdamW's bias correction 1 - beta2^t is 0 and the update divides by 0"));
    FORGE_TRY(check_number("--eps", o->eps, 0, 1, INFINITY, 1, "AdamW divides by sqrt(v) + eps, and v can be 0"));
    FORGE_TRY(check_number("--bucket-mb", o->bucket_mb, 0, 0, 1e6, 0,
                           "MiB per gradient bucket; 0 = one reduction after the backward"));
    return FORGE_OK;
}

static void format_duration(double s, char *buf, size_t cap) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60)
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, cap, "%lds", t);
}

/* Entropy (nats) of the token frequencies of the first shard, up to 4M tokens:
 * the loss a model that ignores context would reach. */
static double unigram_entropy(const forge_loader *ld, int vocab) {
    forge_shard sh;
    if (forge_shard_open(&sh, forge_loader_shard_path(ld, 0), 0) != FORGE_OK) return NAN;
    uint64_t n = sh.n_tokens < 4000000 ? sh.n_tokens : 4000000;
    double *counts = calloc((size_t)vocab, sizeof *counts);
    double h = NAN;
    if (counts && n > 0) {
        for (uint64_t i = 0; i < n; i++) {
            int32_t t = forge_shard_token(&sh, i);
            if (t >= 0 && t < vocab) counts[t] += 1;
        }
        h = 0;
        for (int v = 0; v < vocab; v++)
            if (counts[v] > 0) h -= counts[v] / n * log(counts[v] / n);
    }
    free(counts);
    forge_shard_close(&sh);
    return h;
}

typedef struct {
    const forge_train_options *o;
    FILE *out;
    forge_runtime_options runtime; /* o->runtime, with a resumed run's precision where none was given */
    forge_backend *be;
    forge_pool *pool;
    forge_tape *tape;
    forge_model *model;
    forge_optimizer *opt;
    forge_loader *train, *val;
    forge_tokenizer *tok;
    forge_step *step;            /* the device step: its batches, loss and recorded graph */
    int32_t *host_ids, *host_targets; /* (accum, B, T): the step's micro-batches */
    FILE *log;
    char log_path[1100];
    int lock_fd;
    int B, T, accum;             /* accum: this rank's micro-batches per step */
    int rank, ranks;             /* data parallel: this process's rank of `ranks` (one: 0 of 1) */
    FILE *null_out;              /* ranks other than 0 print nowhere */
    forge_train_state state;
    char last_ckpt[1200]; /* the newest checkpoint known good: saved by this run (checked) or resumed from */
    /* the val losses so far (rank 0; a resumed run reads its log): the lowest, its step, evaluations since */
    float best_val;
    int best_step, evals_since_best;
    char best_ckpt[1200]; /* --early-stop: the checkpoint of best_val ("" if none) */
} trainer;

static int same_dir(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* How to continue from the last good checkpoint: "--resume OUT" when OUT's latest names it. */
static const char *resume_hint(const trainer *tr, char *buf, size_t cap) {
    char own[1024];
    if (forge_checkpoint_resolve(tr->o->out_dir, own, sizeof own) == FORGE_OK && same_dir(own, tr->last_ckpt))
        snprintf(buf, cap, "--resume %s", tr->o->out_dir);
    else
        snprintf(buf, cap, "--resume %s --out %s", tr->last_ckpt, tr->o->out_dir);
    return buf;
}

/* A failed log write stops the run like a failed checkpoint write: the error names the file. */
static forge_status log_failed(trainer *tr, int err) {
    return forge_error(FORGE_ERR_IO, "%s: cannot write the log after step %d: %s; stopping (the last checkpoint is %s)",
                       tr->log_path, tr->state.step, strerror(err), tr->last_ckpt[0] ? tr->last_ckpt : "(none)");
}

static forge_status log_printf(trainer *tr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static forge_status log_printf(trainer *tr, const char *fmt, ...) {
    if (!tr->log) return FORGE_OK; /* a rank other than 0 */
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int r = vfprintf(tr->log, fmt, ap);
    va_end(ap);
    if (r < 0 || ferror(tr->log)) return log_failed(tr, errno ? errno : EIO);
    return FORGE_OK;
}

static forge_status log_flush(trainer *tr) {
    if (!tr->log) return FORGE_OK;
    errno = 0;
    if (fflush(tr->log) != 0 || ferror(tr->log)) return log_failed(tr, errno ? errno : EIO);
    return FORGE_OK;
}

static forge_status evaluate(trainer *tr, float *val_loss) {
    *val_loss = NAN;
    if (!tr->val) return FORGE_OK;
    int batches = tr->o->eval_batches;
    uint64_t avail = forge_loader_val_num_batches(tr->val);
    if ((uint64_t)batches > avail) batches = (int)avail;
    if (batches < 1) batches = 1;
    forge_tape_set_recording(tr->tape, 0);
    double sum = 0;
    forge_status s = FORGE_OK;
    for (int i = 0; i < batches && s == FORGE_OK; i++) {
        double batch_sum = 0;
        s = forge_loader_val_batch(tr->val, (uint64_t)i, tr->host_ids, tr->host_targets);
        if (s == FORGE_OK) s = forge_step_eval(tr->step, tr->host_ids, tr->host_targets, &batch_sum);
        sum += batch_sum;
    }
    forge_tape_set_recording(tr->tape, 1);
    forge_tape_reset(tr->tape);
    FORGE_TRY(s);
    *val_loss = (float)(sum / ((double)batches * tr->B * tr->T));
    return FORGE_OK;
}

/* best: the checkpoint is the run's best so far (early stop): marked before the collection, which keeps the best,
 * so the previous best goes with the other old checkpoints */
static forge_status save_checkpoint(trainer *tr, int best) {
    const forge_train_options *o = tr->o;
    char name[64], dir[1100];
    snprintf(name, sizeof name, "ckpt_%06d", tr->state.step);
    snprintf(dir, sizeof dir, "%s/%s", o->out_dir, name);
    /* Data parallel: every rank holds the same weights; with ZeRO-1 rank 0 first gathers every rank's range of
     * the moments, then writes alone the files of a single-process run (so any number of ranks resumes them).
     * The others wait at the barrier: a rank 0 that fails aborts them (cli/forge.c), one that dies trips their
     * watchdog, and the files are written by rename as ever, so no one can leave a torn checkpoint. */
    FORGE_TRY(forge_optimizer_gather(tr->opt));
    if (tr->rank != 0) {
        snprintf(tr->last_ckpt, sizeof tr->last_ckpt, "%s", dir);
        return forge_comm_barrier(o->comm);
    }
    forge_status s = forge_checkpoint_save(dir, tr->model, tr->opt, &tr->state, tr->tok);
    forge_optimizer_release_gathered(tr->opt);
    if (s == FORGE_ERR_NUMERIC) {
        char why[1600], hint[2400];
        snprintf(why, sizeof why, "%s", forge_error_message());
        if (tr->last_ckpt[0])
            return forge_error(FORGE_ERR_NUMERIC,
                               "step %d: %s; stopping. The last good checkpoint is %s (resume with %s and a lower "
                               "--lr)",
                               tr->state.step, why, tr->last_ckpt, resume_hint(tr, hint, sizeof hint));
        return forge_error(FORGE_ERR_NUMERIC, "step %d: %s; stopping. There is no good checkpoint of this run yet",
                           tr->state.step, why);
    }
    FORGE_TRY(s);
    FORGE_TRY(forge_checkpoint_set_latest(o->out_dir, name));
    if (best) FORGE_TRY(forge_checkpoint_set_best(o->out_dir, name));
    snprintf(tr->last_ckpt, sizeof tr->last_ckpt, "%s", dir);
    /* Keep the newest N (a checkpoint that turns out bad still has a predecessor), whatever earlier,
     * interrupted runs of this directory left behind. */
    if (forge_run_dir_collect(o->out_dir, tr->state.step, o->keep_checkpoints) != FORGE_OK)
        fprintf(tr->out, "note: old checkpoints not collected: %s\n", forge_error_message());
    return forge_comm_barrier(o->comm);
}

/* The first field that differs between two configs (the name aside), as "FIELD A vs B"; 0 if none. */
static int config_differs(const forge_model_config *a, const forge_model_config *b, char *what, size_t cap) {
#define INT_FIELD(f)                                                                  \
    if (a->f != b->f) {                                                               \
        snprintf(what, cap, "%s %d in --config, %d in the checkpoint", #f, (int)a->f, (int)b->f); \
        return 1;                                                                     \
    }
#define FLOAT_FIELD(f)                                                                \
    if (a->f != b->f) {                                                               \
        snprintf(what, cap, "%s %g in --config, %g in the checkpoint", #f, a->f, b->f); \
        return 1;                                                                     \
    }
    INT_FIELD(family)
    INT_FIELD(vocab_size)
    INT_FIELD(context_length)
    INT_FIELD(d_model)
    INT_FIELD(n_layers)
    INT_FIELD(n_heads)
    INT_FIELD(n_kv_heads)
    INT_FIELD(ffn_hidden)
    INT_FIELD(norm)
    FLOAT_FIELD(norm_eps)
    INT_FIELD(positions)
    FLOAT_FIELD(rope_theta)
    INT_FIELD(activation)
    INT_FIELD(bias)
    INT_FIELD(tied_embeddings)
    FLOAT_FIELD(init_std)
#undef INT_FIELD
#undef FLOAT_FIELD
    return 0;
}

/* The config of the checkpoint (or Hugging Face directory) `from`, resolved into ckpt_dir; a --config that differs
 * is refused, naming the field, `whose` checkpoint it is and `why` it wins. */
static forge_status checkpoint_config(const forge_train_options *o, const char *from, char *ckpt_dir, size_t cap,
                                      forge_model_config *cfg, const char *whose, const char *why) {
    FORGE_TRY(forge_checkpoint_resolve(from, ckpt_dir, cap));
    FORGE_TRY(forge_checkpoint_read_config(ckpt_dir, cfg));
    if (!o->config) return FORGE_OK;
    forge_model_config given;
    char what[256];
    FORGE_TRY(forge_config_resolve(&given, o->config, o->configs_dir));
    if (config_differs(&given, cfg, what, sizeof what))
        return forge_error(FORGE_ERR_ARG,
                           "train: --config %s conflicts with the config %s %s (%s): %s; leave --config out or give "
                           "the same one",
                           o->config, whose, ckpt_dir, what, why);
    return FORGE_OK;
}

/* The step's precision as the runs name it: fp32, tf32 (fp32 with the tf32 GEMMs) or bf16. */
static const char *run_precision(const forge_runtime_options *r) {
    if (r->precision == FORGE_TRAIN_BF16) return "bf16";
    return r->device == FORGE_DEVICE_CUDA && r->matmul == FORGE_MATMUL_TF32 ? "tf32" : "fp32";
}

/* On the CPU a micro-batch that cannot fit is not refused by malloc (Linux overcommits): the kernel kills the
 * process once the pages are touched. So a micro-batch whose activations certainly exceed the machine's memory is
 * refused up front. The bound is a floor, never an estimate: the logits (B T V floats) and, per layer, at least four
 * C-wide activations a token that the backward keeps (the block's input, its normalised input, the attention's
 * output, the MLP's); the step needs more. (On a GPU the allocation itself fails and says so.) */
static forge_status check_host_memory(const forge_model_config *cfg, int B, int T) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return FORGE_OK;
    const double gib = 1073741824.0, ram = (double)pages * (double)page, tokens = (double)B * T;
    const double logits = tokens * cfg->vocab_size * 4.0;
    const double floor_bytes = logits + tokens * 4.0 * cfg->d_model * cfg->n_layers * 4.0;
    if (floor_bytes <= ram) return FORGE_OK;
    return forge_error(FORGE_ERR_OOM,
                       "train: a micro-batch of batch %d x seq-len %d needs at least %.1f GiB of activations (the "
                       "logits alone %.1f GiB), more than this machine's %.1f GiB: lower --batch (keep the step's "
                       "size with --tokens-per-step) or --seq-len",
                       B, T, floor_bytes / gib, logits / gib, ram / gib);
}

/* What every checkpoint of the run records so that a bare --resume continues the same run (checkpoint.h): the
 * resolved batch geometry, the schedule, AdamW, the evaluations and checkpoints, and --data as an absolute path
 * (the run may be resumed from another directory). */
static void record_run_settings(forge_run_settings *r, const forge_train_options *o, int B, int T, long tps) {
    r->recorded = 1;
    r->batch_size = B;
    r->seq_len = T;
    r->tokens_per_step = tps;
    r->lr = o->lr, r->warmup_frac = o->warmup_frac, r->min_lr_ratio = o->min_lr_ratio;
    r->weight_decay = o->weight_decay, r->grad_clip = o->grad_clip;
    r->beta1 = o->beta1, r->beta2 = o->beta2, r->eps = o->eps;
    r->eval_every = o->eval_every, r->eval_batches = o->eval_batches, r->ckpt_every = o->ckpt_every;
    r->keep_checkpoints = o->keep_checkpoints, r->early_stop = o->early_stop;
    char *abs = o->data_dir ? realpath(o->data_dir, NULL) : NULL;
    const char *d = abs ? abs : o->data_dir ? o->data_dir : "";
    snprintf(r->data_dir, sizeof r->data_dir, "%s", strlen(d) < sizeof r->data_dir ? d : "");
    free(abs);
}

/* A resumed run's ids must mean what they meant: the checkpoint's tokenizer (saved with it) and the one of --data
 * (whose shards the run now reads) must map every id to the same bytes. Another --data, or none (which runs the demo
 * corpus), would otherwise go on training the weights on text encoded with other ids. Nothing to compare when
 * either has no tokenizer. */
static forge_status check_resume_tokenizer(const trainer *tr, const char *ckpt_dir) {
    char enc[1100];
    snprintf(enc, sizeof enc, "%s/encoder.json", ckpt_dir);
    if (!tr->tok || access(enc, R_OK) != 0) return FORGE_OK;
    forge_tokenizer *ck = NULL;
    FORGE_TRY(forge_tokenizer_load(&ck, ckpt_dir));
    const int n_ck = forge_tokenizer_vocab_size(ck), n_data = forge_tokenizer_vocab_size(tr->tok);
    int first = n_ck != n_data ? (n_ck < n_data ? n_ck : n_data) : -1;
    for (int32_t id = 0; id < n_ck && id < n_data && first < 0; id++) {
        size_t la = 0, lb = 0;
        const uint8_t *a = forge_tokenizer_token_bytes(ck, id, &la), *b = forge_tokenizer_token_bytes(tr->tok, id, &lb);
        if (la != lb || (la && memcmp(a, b, la) != 0)) first = id;
    }
    forge_tokenizer_free(ck);
    if (first < 0) return FORGE_OK;
    return forge_error(FORGE_ERR_DATA,
                       "train: --resume: the tokenizer of the checkpoint (%s, %d ids) and the one of --data %s (%d "
                       "ids) differ from id %d on: the run's shards were made with another tokenizer; expected "
                       "--data DIR of the run being resumed (without --data, forge train uses the demo corpus)",
                       enc, n_ck, tr->o->data_dir, n_data, first);
}

/* A resumed run continues in its checkpoint's precision unless --precision (or --matmul) says otherwise; either
 * way a change is said once (the fp32 masters and moments carry over, so any precision can continue any run). */
static forge_status resume_precision(trainer *tr, const char *ckpt_dir) {
    char was[8];
    FORGE_TRY(forge_checkpoint_read_precision(ckpt_dir, was, sizeof was));
    const char *now = run_precision(&tr->runtime);
    if (!was[0] || strcmp(was, now) == 0) return FORGE_OK;
    if (tr->o->precision_given) {
        fprintf(tr->out, "note: continuing in %s as asked; the checkpoint %s trained in %s\n", now, ckpt_dir, was);
        return FORGE_OK;
    }
    if (strcmp(was, "tf32") == 0 && tr->runtime.device != FORGE_DEVICE_CUDA) {
        fprintf(tr->out, "note: the checkpoint %s trained in tf32, which is CUDA's; continuing in %s\n", ckpt_dir,
                now);
        return FORGE_OK;
    }
    tr->runtime.precision = strcmp(was, "bf16") == 0 ? FORGE_TRAIN_BF16 : FORGE_TRAIN_FP32;
    if (strcmp(was, "tf32") == 0) tr->runtime.matmul = FORGE_MATMUL_TF32;
    else if (tr->runtime.matmul == FORGE_MATMUL_TF32) tr->runtime.matmul = FORGE_MATMUL_FP32;
    fprintf(tr->out, "note: continuing in %s, the checkpoint's precision (--precision to change it)\n", was);
    return FORGE_OK;
}

/* A resumed run's val losses (its log, already cut back to the checkpoint's step): the lowest, its step and the
 * evaluations since, so --early-stop continues counting where the run stopped; and the checkpoint `best` names. */
static void read_val_history(trainer *tr) {
    FILE *f = fopen(tr->log_path, "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            const char *v = strstr(line, "\"val_loss\": ");
            int step;
            float val;
            if (!v || sscanf(line, "{\"step\": %d", &step) != 1 || sscanf(v, "\"val_loss\": %f", &val) != 1) continue;
            if (isnan(tr->best_val) || val < tr->best_val) {
                tr->best_val = val;
                tr->best_step = step;
                tr->evals_since_best = 0;
            } else {
                tr->evals_since_best++;
            }
        }
        fclose(f);
    }
    char name[256];
    forge_run_dir_pointer(tr->o->out_dir, "best", name, sizeof name);
    if (name[0]) snprintf(tr->best_ckpt, sizeof tr->best_ckpt, "%s/%s", tr->o->out_dir, name);
}

static forge_status setup(trainer *tr, forge_model_config *cfg) {
    const forge_train_options *o = tr->o;
    FORGE_TRY(forge_train_options_validate(o));
    tr->rank = forge_comm_rank(o->comm);
    tr->ranks = forge_comm_size(o->comm);
    if (tr->rank != 0) {
        tr->null_out = fopen("/dev/null", "w");
        if (!tr->null_out) return forge_error(FORGE_ERR_IO, "train: rank %d: cannot open /dev/null: %s", tr->rank,
                                              strerror(errno));
        tr->out = tr->null_out;
    }
    /* One run per directory: taken before anything in it is read or written (by rank 0, the one that writes). */
    if (tr->rank == 0) {
        FORGE_TRY(forge_mkdir_p(o->out_dir));
        FORGE_TRY(forge_run_dir_lock(o->out_dir, &tr->lock_fd));
    }

    char ckpt_dir[1024] = "";
    if (o->init || o->resume) {
        /* --init: the model (config and weights) comes from DIR; the run itself is new (step 0, fresh AdamW
         * moments, this run's seed and data order). --resume: the run continues, config and all. */
        FORGE_TRY(checkpoint_config(o, o->init ? o->init : o->resume, ckpt_dir, sizeof ckpt_dir, cfg,
                                    o->init ? "of --init" : "of the checkpoint",
                                    o->init ? "the weights fix the architecture"
                                            : "a resumed run keeps its checkpoint's config"));
    } else {
        FORGE_TRY(forge_config_resolve(cfg, o->config ? o->config : "tiny", o->configs_dir));
    }
    tr->B = o->batch_size;
    tr->T = o->seq_len > 0 ? o->seq_len : cfg->context_length;
    if (tr->T > cfg->context_length)
        return forge_error(FORGE_ERR_ARG, "train: --seq-len %d exceeds the config's context_length %d", tr->T,
                           cfg->context_length);
    long per_micro = (long)tr->B * tr->T;
    long tps = o->tokens_per_step > 0 ? o->tokens_per_step : per_micro;
    if (tps % per_micro != 0)
        return forge_error(FORGE_ERR_ARG,
                           "train: --tokens-per-step %ld is not a multiple of batch x seq-len = %ld", tps,
                           per_micro);
    tr->accum = (int)(tps / per_micro);
    /* The global step is the same micro-batches whatever the number of ranks: rank r runs the r-th 1/N of them. */
    if (tr->accum % tr->ranks != 0)
        return forge_error(FORGE_ERR_ARG,
                           "train: --tokens-per-step %ld is %d micro-batch(es) of batch x seq-len = %ld: expected a "
                           "multiple of the %d ranks (each rank runs the same number; the global batch never "
                           "depends on the ranks), e.g. --tokens-per-step %ld for one micro-batch per rank",
                           tps, tr->accum, per_micro, tr->ranks, per_micro * tr->ranks);
    tr->accum /= tr->ranks;
    record_run_settings(&tr->state.run, o, tr->B, tr->T, tps);

    tr->runtime = o->runtime;
    if (tr->runtime.device == FORGE_DEVICE_CPU) FORGE_TRY(check_host_memory(cfg, tr->B, tr->T));
    if (o->resume) FORGE_TRY(resume_precision(tr, ckpt_dir));
    FORGE_TRY(forge_backend_create(&tr->be, tr->runtime.device, &tr->runtime));
    FORGE_TRY(forge_pool_create(&tr->pool, tr->be));
    FORGE_TRY(forge_tape_create(&tr->tape, tr->pool));
    forge_tape_set_grad_lending(tr->tape, !o->no_grad_lending);

    char tok_json[1100];
    snprintf(tok_json, sizeof tok_json, "%s/encoder.json", o->data_dir);
    if (access(tok_json, R_OK) == 0) {
        FORGE_TRY(forge_tokenizer_load(&tr->tok, o->data_dir));
        if (forge_tokenizer_vocab_size(tr->tok) > cfg->vocab_size)
            return forge_error(FORGE_ERR_CONFIG,
                               "%s: vocab_size %d is smaller than the tokenizer's %d ids in %s", cfg->name,
                               cfg->vocab_size, forge_tokenizer_vocab_size(tr->tok), o->data_dir);
    }

    FORGE_TRY(forge_model_create(&tr->model, cfg, tr->pool, o->seed));
    forge_adamw_config ac = {o->beta1, o->beta2, o->eps, o->weight_decay, o->grad_clip};
    FORGE_TRY(forge_optimizer_create_dist(&tr->opt, tr->model, ac, o->comm, o->zero1));
    tr->state.total_steps = o->steps;
    tr->state.seed = o->seed;
    if (o->init) FORGE_TRY(forge_checkpoint_load_weights(ckpt_dir, tr->model));
    if (o->resume) {
        FORGE_TRY(check_resume_tokenizer(tr, ckpt_dir));
        FORGE_TRY(forge_checkpoint_load_weights(ckpt_dir, tr->model));
        FORGE_TRY(forge_checkpoint_load_state(ckpt_dir, tr->opt, &tr->state));
        if (tr->state.step > o->steps)
            return forge_error(FORGE_ERR_ARG,
                               "train: the checkpoint %s is at step %d, past --steps %d: expected --steps >= %d",
                               ckpt_dir, tr->state.step, o->steps, tr->state.step);
        if (tr->state.total_steps != o->steps)
            fprintf(tr->out, "note: the checkpoint planned %d steps; continuing to --steps %d\n",
                    tr->state.total_steps, o->steps);
        if (tr->state.seed != o->seed)
            fprintf(tr->out, "note: continuing with the checkpoint's seed %llu (the data order), not --seed %llu\n",
                    (unsigned long long)tr->state.seed, (unsigned long long)o->seed);
        tr->state.total_steps = o->steps;
        snprintf(tr->last_ckpt, sizeof tr->last_ckpt, "%s", ckpt_dir);
        /* Continuing this directory's own latest checkpoint: collect what the interrupted run left (it may
         * have died before its last collection), so the directory never holds more than keep + 1. */
        char own[1024];
        if (tr->rank == 0 && forge_checkpoint_resolve(o->out_dir, own, sizeof own) == FORGE_OK &&
            same_dir(own, ckpt_dir) && forge_run_dir_collect(o->out_dir, tr->state.step, o->keep_checkpoints) != FORGE_OK)
            fprintf(tr->out, "note: old checkpoints not collected: %s\n", forge_error_message());
    }
    /* Batch k is a function of (seed, k): the checkpoint's seed and counter continue its data order. */
    FORGE_TRY(forge_loader_open(&tr->train, o->data_dir, "train", tr->B, tr->T, tr->state.seed, cfg->vocab_size));
    forge_status vs =
        forge_loader_open(&tr->val, o->data_dir, "val", tr->B, tr->T, tr->state.seed, cfg->vocab_size);
    if (vs != FORGE_OK) {
        fprintf(tr->out, "note: no validation split (%s); val loss is skipped\n", forge_error_message());
        tr->val = NULL;
    }
    if (o->resume) FORGE_TRY(forge_loader_seek(tr->train, tr->state.loader_batches));
    forge_step_options so = {.B = tr->B,
                             .T = tr->T,
                             .accum = tr->accum,
                             .grad_scale = 1.0f / (float)((long)tr->B * tr->T * tr->accum * tr->ranks),
                             .use_graph = !o->no_graph,
                             .comm = o->comm,
                             /* any positive size is at least one bucket's minimum (buckets.h) */
                             .bucket_bytes = o->bucket_mb > 0 ? (size_t)((double)o->bucket_mb * 1048576.0) + 1 : 0};
    FORGE_TRY(forge_step_create(&tr->step, tr->model, tr->tape, tr->opt, &so));
    size_t n = (size_t)tr->accum * tr->B * tr->T;
    tr->host_ids = malloc(n * sizeof(int32_t));
    tr->host_targets = malloc(n * sizeof(int32_t));
    if (!tr->host_ids || !tr->host_targets)
        return forge_error(FORGE_ERR_OOM, "train: out of host memory for batch buffers");

    snprintf(tr->log_path, sizeof tr->log_path, "%s/log.jsonl", o->out_dir);
    if (tr->rank != 0) return FORGE_OK; /* the log and the run directory are rank 0's */
    if (o->resume) {
        /* The interrupted run may have logged steps past its checkpoint: they are trained again. */
        int dropped = 0;
        FORGE_TRY(forge_run_dir_cut_log(tr->log_path, tr->state.step, &dropped));
        if (dropped)
            fprintf(tr->out, "note: %s cut back to step %d (%d line(s) after the checkpoint dropped)\n",
                    tr->log_path, tr->state.step, dropped);
        read_val_history(tr);
    } else {
        char newest[256];
        int old = forge_run_dir_count_checkpoints(o->out_dir, newest, sizeof newest);
        if (old)
            fprintf(tr->out,
                    "note: %s holds %d checkpoint(s) of an earlier run (newest %s); this new run replaces them at "
                    "its first checkpoint (continue that run with --resume %s instead)\n",
                    o->out_dir, old, newest, o->out_dir);
    }
    tr->log = fopen(tr->log_path, o->resume ? "a" : "w");
    if (!tr->log) return forge_error(FORGE_ERR_IO, "train: cannot open %s: %s", tr->log_path, strerror(errno));
    return FORGE_OK;
}

static void teardown(trainer *tr) {
    if (tr->log) fclose(tr->log);
    if (tr->null_out) fclose(tr->null_out);
    forge_run_dir_unlock(tr->lock_fd);
    free(tr->host_ids);
    free(tr->host_targets);
    forge_step_free(tr->step);
    forge_optimizer_free(tr->opt);
    forge_model_free(tr->model);
    forge_loader_free(tr->train);
    forge_loader_free(tr->val);
    forge_tokenizer_free(tr->tok);
    forge_tape_destroy(tr->tape);
    forge_pool_destroy(tr->pool);
    forge_backend_destroy(tr->be);
}

/* A micro-batch that does not fit the device: name the batch, what the run holds and what was asked (the
 * allocator's message, which stays at the end), and what to change. */
static forge_status out_of_memory(trainer *tr) {
    const forge_model *m = tr->model;
    const double mib = 1048576.0;
    const double fixed = (double)m->n_elements * (4.0 /* masters */ + 4.0 /* grads */ + 8.0 /* moments */ +
                                                  (m->working_data ? 2.0 : 0.0)) / mib;
    forge_pool_stats ps = forge_pool_get_stats(tr->pool);
    return forge_error_context(FORGE_ERR_OOM,
                               "out of device memory for a micro-batch of batch %d x seq-len %d (%ld tokens): the "
                               "model's parameters, gradients and AdamW moments take %.0f MiB, and the pool had "
                               "reserved %.0f MiB when it asked for more; lower --batch (keep the step's size with "
                               "--tokens-per-step) or --seq-len. ",
                               tr->B, tr->T, (long)tr->B * tr->T, fixed, ps.bytes_reserved / mib);
}

static forge_status run(trainer *tr, forge_train_result *res) {
    const forge_train_options *o = tr->o;
    forge_model_config *cfg = &tr->model->cfg;
    FILE *out = tr->out;
    forge_lr_schedule sched = {o->lr, (int)(o->warmup_frac * o->steps), o->steps, o->min_lr_ratio};
    if (sched.warmup_steps < 1 && o->warmup_frac > 0) sched.warmup_steps = 1;

    double h = unigram_entropy(tr->train, cfg->vocab_size);
    fprintf(out,
            "model %s (%s): %zu parameters | device %s%s | precision %s | %d layers, d_model %d, %d heads (%d kv)\n",
            cfg->name, forge_family_name(cfg->family), tr->model->n_elements, tr->be->name,
            tr->be->kind == FORGE_DEVICE_CUDA && tr->be->options.pdl ? " (programmatic dependent launch: --pdl)" : "",
            run_precision(&tr->be->options), cfg->n_layers,
            cfg->d_model, cfg->n_heads, cfg->n_kv_heads);
    fprintf(out, "data %s: %llu train tokens | batch %d x %d, %d micro-batch(es) per step = %ld tokens/step\n",
            o->data_dir, (unsigned long long)forge_loader_num_tokens(tr->train), tr->B, tr->T, tr->accum * tr->ranks,
            (long)tr->B * tr->T * tr->accum * tr->ranks);
    if (forge_comm_active(o->comm))
        fprintf(out, "data parallel: %d ranks (%s), %d micro-batch(es) each per step | optimizer state %s\n",
                tr->ranks, forge_comm_name(o->comm), tr->accum,
                o->zero1 ? "sharded (ZeRO-1): gradients reduce-scattered, weights all-gathered"
                         : "replicated: gradients all-reduced");
    size_t bucket_elements = 0;
    int buckets = forge_step_buckets(tr->step, &bucket_elements);
    if (buckets > 0)
        fprintf(out, "gradient buckets: %d of %.3g MiB, each reduced as soon as the backward has finished it%s\n",
                buckets, (double)bucket_elements * sizeof(float) / 1048576.0,
                forge_comm_pieces_overlap(o->comm, tr->be) ? " (NCCL, on a side stream: overlapping the backward)"
                                                           : " (MPI: in the backward, one after the other)");
    else if (forge_comm_active(o->comm))
        fprintf(out, "gradient buckets: none (--bucket-mb 0): the whole block is reduced after the backward\n");
    fprintf(out, "steps %d (from %d) | lr %.2e, warm-up %d, cosine to %.0f%% | unigram entropy %.3f nats\n",
            o->steps, tr->state.step, o->lr, sched.warmup_steps, 100.0 * o->min_lr_ratio, h);
    fflush(out);

    snprintf(tr->state.precision, sizeof tr->state.precision, "%s", run_precision(&tr->be->options));
    double t_start = forge_now_seconds(), avg_step = 0;
    long tokens_per_step = (long)tr->B * tr->T * tr->accum * tr->ranks;
    const size_t micro_tokens = (size_t)tr->B * tr->T;
    res->first_loss = NAN;
    res->last_val_loss = NAN;
    while (tr->state.step < o->steps) {
        double t0 = forge_now_seconds();
        /* global micro-batch k of the step is loader batch loader_batches + k; rank r runs k = r * accum ..
         * (r + 1) * accum - 1, so the ranks' micro-batches, in rank order, are a single process's */
        const uint64_t step_first = tr->state.loader_batches;
        FORGE_TRY(forge_loader_seek(tr->train, step_first + (uint64_t)tr->rank * tr->accum));
        for (int micro = 0; micro < tr->accum; micro++) {
            FORGE_TRY(forge_loader_next(tr->train, tr->host_ids + micro * micro_tokens,
                                        tr->host_targets + micro * micro_tokens));
        }
        tr->state.loader_batches = step_first + (uint64_t)tr->accum * tr->ranks;
        float lr = forge_lr_at(&sched, tr->state.step);
        float loss, norm;
        forge_status ss = forge_step_launch(tr->step, tr->host_ids, tr->host_targets, lr);
        if (ss == FORGE_OK) ss = forge_step_finish(tr->step, &loss, &norm);
        if (ss == FORGE_ERR_OOM) return out_of_memory(tr);
        FORGE_TRY(ss);
        int mode_changed;
        const char *mode = forge_step_mode(tr->step, &mode_changed);
        if (mode_changed && !o->quiet) fprintf(out, "note: the steps now run %s\n", mode);
        /* A non-finite norm made AdamW skip the update on the device: the parameters are the last step's. */
        if (!isfinite(loss) || !isfinite(norm)) {
            if (!tr->last_ckpt[0])
                return forge_error(FORGE_ERR_NUMERIC,
                                   "step %d: the %s is %g; stopping without saving. There is no good checkpoint "
                                   "of this run yet (start again with a lower --lr)",
                                   tr->state.step + 1, isfinite(loss) ? "gradient norm" : "loss",
                                   isfinite(loss) ? norm : loss);
            char hint[2400];
            return forge_error(FORGE_ERR_NUMERIC,
                               "step %d: the %s is %g; stopping without saving. The last good checkpoint is "
                               "%s (resume with %s and a lower --lr)",
                               tr->state.step + 1, isfinite(loss) ? "gradient norm" : "loss",
                               isfinite(loss) ? norm : loss, tr->last_ckpt, resume_hint(tr, hint, sizeof hint));
        }
        tr->state.step++;
        tr->state.tokens_seen += (double)tokens_per_step;
        double dt = forge_now_seconds() - t0;
        avg_step = avg_step == 0 ? dt : 0.9 * avg_step + 0.1 * dt;
        double tok_s = tokens_per_step / dt;
        if (isnan(res->first_loss)) res->first_loss = loss;
        res->last_loss = loss;
        res->steps_done++;
        if (o->loss_out && tr->state.step - 1 < o->loss_out_cap) o->loss_out[tr->state.step - 1] = loss;
        forge_pool_stats ps = forge_pool_get_stats(tr->pool);
        FORGE_TRY(log_printf(tr,
                             "{\"step\": %d, \"tokens\": %.0f, \"loss\": %.6f, \"lr\": %.6e, \"grad_norm\": %.6f, "
                             "\"tokens_per_s\": %.1f, \"step_s\": %.4f, \"peak_mib\": %.1f}\n",
                             tr->state.step, tr->state.tokens_seen, loss, lr, norm, tok_s, dt,
                             ps.peak_reserved / 1048576.0));
        int last = tr->state.step == o->steps;
        if (!o->quiet && (tr->state.step % 10 == 0 || tr->state.step <= 3 || last)) {
            char eta[32];
            format_duration(avg_step * (o->steps - tr->state.step), eta, sizeof eta);
            fprintf(out, "step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %8.0f tok/s | mem %.0f MiB | ETA %s\n",
                    tr->state.step, o->steps, loss, lr, norm, tok_s, ps.peak_reserved / 1048576.0, eta);
            fflush(out);
        }
        int stopping = stop_requested || (o->stop_after > 0 && tr->state.step >= o->stop_after);
        FORGE_TRY(forge_comm_any(o->comm, stopping, &stopping)); /* a signal may reach the ranks at other steps */
        int interrupted;
        FORGE_TRY(forge_comm_any(o->comm, stop_requested, &interrupted));
        /* rank 0 alone evaluates (the others wait for it at the next collective) */
        int improved = 0, early = 0;
        if (tr->rank == 0 && ((o->eval_every > 0 && tr->state.step % o->eval_every == 0) || last)) {
            float vl;
            FORGE_TRY(evaluate(tr, &vl));
            if (!isnan(vl)) {
                res->last_val_loss = vl;
                FORGE_TRY(log_printf(tr, "{\"step\": %d, \"tokens\": %.0f, \"val_loss\": %.6f}\n", tr->state.step,
                                     tr->state.tokens_seen, vl));
                if (!o->quiet) fprintf(out, "step %5d/%d | val loss %.4f\n", tr->state.step, o->steps, vl);
                if (isnan(tr->best_val) || vl < tr->best_val) {
                    tr->best_val = vl;
                    tr->best_step = tr->state.step;
                    tr->evals_since_best = 0;
                    improved = 1;
                } else {
                    tr->evals_since_best++;
                }
                early = o->early_stop > 0 && tr->evals_since_best >= o->early_stop;
            }
        }
        if (o->early_stop > 0) { /* rank 0's decisions, for every rank (the checkpoint is collective) */
            FORGE_TRY(forge_comm_any(o->comm, improved, &improved));
            FORGE_TRY(forge_comm_any(o->comm, early, &early));
            if (early && !stopping && !o->quiet)
                fprintf(out, "early stop: no val loss below %.4f (step %d) in %d evaluations\n", tr->best_val,
                        tr->best_step, tr->evals_since_best);
            stopping |= early;
            res->early_stopped = early;
        }
        FORGE_TRY(log_flush(tr)); /* before the checkpoint: a checkpoint's steps are always in the log */
        const int save_best = o->early_stop > 0 && improved;
        if ((o->ckpt_every > 0 && tr->state.step % o->ckpt_every == 0) || last || stopping || save_best)
            FORGE_TRY(save_checkpoint(tr, save_best));
        if (save_best) snprintf(tr->best_ckpt, sizeof tr->best_ckpt, "%s", tr->last_ckpt);
        if (stopping) {
            if (interrupted)
                return forge_error(FORGE_ERR_INTERRUPTED,
                                   "interrupted at step %d; saved %s (continue with --resume %s)",
                                   tr->state.step, tr->last_ckpt, o->out_dir);
            break;
        }
    }
    FILE *log = tr->log;
    tr->log = NULL;
    errno = 0;
    if (log && fclose(log) != 0) return log_failed(tr, errno ? errno : EIO);
    double elapsed = forge_now_seconds() - t_start;
    res->tokens_per_second = res->steps_done ? res->steps_done * (double)tokens_per_step / elapsed : 0;
    res->peak_bytes = forge_pool_get_stats(tr->pool).peak_reserved;
    res->peak_in_use = forge_pool_get_stats(tr->pool).peak_in_use;
    res->grads_lent = forge_tape_grads_lent(tr->tape);
    snprintf(res->last_checkpoint, sizeof res->last_checkpoint, "%s", tr->last_ckpt);
    snprintf(res->best_checkpoint, sizeof res->best_checkpoint, "%s", tr->best_ckpt);
    res->best_val_loss = tr->best_val;
    res->best_val_step = tr->best_step;
    if (!o->quiet && res->steps_done == 0) /* a resumed run already at --steps: nothing trained, no loss to give */
        fprintf(out, "done: nothing to train, the checkpoint is at step %d of %d | %s\n", tr->state.step, o->steps,
                tr->last_ckpt);
    else if (!o->quiet)
        fprintf(out, "done: %d steps in %.1fs (%.0f tok/s) | final loss %.4f (unigram entropy %.3f) | %s\n",
                res->steps_done, elapsed, res->tokens_per_second, res->last_loss, h, tr->last_ckpt);
    if (!o->quiet && !isnan(tr->best_val))
        fprintf(out, "best val loss %.4f (perplexity %.2f) at step %d%s%s\n", tr->best_val, exp(tr->best_val),
                tr->best_step, tr->best_ckpt[0] ? ": " : "", tr->best_ckpt);
    if (!o->quiet && tr->rank == 0) { /* the loss curve beside the log; without gnuplot, a note instead */
        char png[1100];
        snprintf(png, sizeof png, "%s/loss.png", o->out_dir);
        const char *runs[1] = {o->out_dir};
        if (forge_plot_runs(runs, 1, png) == FORGE_OK) fprintf(out, "loss curve: %s\n", png);
        else fprintf(out, "note: no loss curve: %s\n", forge_error_message());
        forge_error_clear();
    }
    return FORGE_OK;
}

forge_status forge_train(const forge_train_options *o, forge_train_result *result) {
    trainer tr;
    memset(&tr, 0, sizeof tr);
    tr.lock_fd = -1;
    tr.best_val = NAN;
    tr.o = o;
    tr.out = o->progress ? o->progress : stdout;
    forge_train_result local;
    forge_train_result *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    res->best_val_loss = NAN;
    forge_model_config cfg;
    forge_status s = setup(&tr, &cfg);
    if (s == FORGE_OK) s = run(&tr, res);
    teardown(&tr);
    return s;
}
