/*
 * svg.h — a memory timeline as a self-contained SVG: live, device (mapped), free and VA holes
 * against the operation index, with axes, a legend and a title. No state; not tied to any backend.
 */
#ifndef VPMM_BENCH_SVG_H
#define VPMM_BENCH_SVG_H

#include <stddef.h>
#include <stdint.h>

#include "backends.h"

typedef struct svg_point {
    size_t op;
    backend_sample_t s;
} svg_point_t;

/* Writes the timeline to path; returns 0 or -1 (errno set). has_detail: draw free and holes. */
int svg_write(const char *path, const char *title, const svg_point_t *pts, size_t n, size_t nops,
              int has_detail);

#endif /* VPMM_BENCH_SVG_H */
