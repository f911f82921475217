/*
 * plot.h: loss curves of one or more runs as a PNG (`forge plot`; `forge train`
 * draws its own at the end).
 *
 * Each run directory's log.jsonl gives the training loss and the val loss
 * against the tokens trained on (the "tokens" field; a log written before it
 * existed is drawn against steps, and then every run is). Runs are overlaid,
 * one colour each, the val loss as points on a line. gnuplot draws it
 * (pngcairo), run as a separate process.
 */
#ifndef FORGE_PLOT_H
#define FORGE_PLOT_H

#include "../base/status.h"

/* Draws runs[0..n) into png. FORGE_ERR_IO naming the file for a log that cannot be read or holds no loss, or
 * when gnuplot cannot be run (its message is passed on). */
forge_status forge_plot_runs(const char *const *runs, int n, const char *png);

#endif
