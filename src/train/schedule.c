/* schedule.c: warm-up + cosine decay. */
#include "schedule.h"

#include <math.h>

float forge_lr_at(const forge_lr_schedule *s, int step) {
    double peak = s->peak_lr, floor_lr = s->min_ratio * s->peak_lr;
    if (step < s->warmup_steps) return (float)(peak * (step + 1) / s->warmup_steps);
    int decay_steps = s->total_steps - s->warmup_steps;
    if (decay_steps <= 1) return (float)peak;
    double progress = (double)(step - s->warmup_steps) / (decay_steps - 1);
    if (progress > 1.0) progress = 1.0;
    double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    return (float)(floor_lr + (peak - floor_lr) * cosine);
}
