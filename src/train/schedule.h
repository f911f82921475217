/*
 * schedule.h: the learning-rate schedule: linear warm-up from 0 over the first
 * warmup_steps, then cosine decay from peak to min_ratio * peak at the last
 * step. A pure function of the step, so a resumed run recomputes it exactly.
 */
#ifndef FORGE_SCHEDULE_H
#define FORGE_SCHEDULE_H

typedef struct {
    float peak_lr;
    int warmup_steps;
    int total_steps;
    float min_ratio; /* final lr = min_ratio * peak_lr */
} forge_lr_schedule;

/* step is 0-based: the lr used by the (step+1)-th optimizer update. */
float forge_lr_at(const forge_lr_schedule *s, int step);

#endif
