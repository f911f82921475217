/*
 * corpus.h: forge's default training text, built from Debian's `fortunes`
 * package so a first run needs no download.
 *
 * The package keeps one plain file per topic in /usr/share/games/fortunes/
 * (art, computers, ...), each a list of entries separated by lines holding
 * only "%". Beside them are strfile indexes (*.dat), *.u8 symlinks to the same
 * files, and possibly an off/ directory of offensive fortunes; all of those
 * are skipped (as are dot-files and anything that is not a regular file after
 * following symlinks). Files are taken in byte-wise sorted name order, so
 * the output is the same on every machine with the same package version.
 *
 * Output: each entry, with trailing whitespace removed, followed by
 * "\n<|endoftext|>\n"; blank entries are dropped. The text is passed through
 * unchanged otherwise (the package's files are UTF-8). Written to a temp file
 * and renamed, so out_path is never half-written.
 */
#ifndef FORGE_CORPUS_H
#define FORGE_CORPUS_H

#include <stddef.h>

#include "../base/status.h"

#define FORGE_FORTUNES_DIR "/usr/share/games/fortunes"

/* Builds the corpus from FORGE_FORTUNES_DIR; *n_docs (may be NULL) gets the
 * number of entries written. */
forge_status forge_corpus_fortunes(const char *out_path, size_t *n_docs);
/* The same from another directory laid out like the package's. */
forge_status forge_corpus_fortunes_from(const char *fortunes_dir, const char *out_path,
                                        size_t *n_docs);

#endif
