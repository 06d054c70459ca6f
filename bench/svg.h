/*
 * svg.h — a memory timeline as a self-contained SVG, against the operation index: a panel of
 * physical memory (live, device-mapped and free bytes) and, when the backend has them, a panel of
 * its own for the VA holes (reserved virtual address space between mapped regions: no memory, so
 * never on the physical axis). Both panels share the x axis (ticks and labels in operations);
 * the title and every label are XML-escaped. No state; not tied to any backend.
 */
#ifndef VPMM_BENCH_SVG_H
#define VPMM_BENCH_SVG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backends.h"

typedef struct svg_point {
    size_t op;
    backend_sample_t s;
} svg_point_t;

/* Writes the timeline to f (the caller opened it, and closes it); returns 0, or -1 when a write
 * failed. has_detail: draw free bytes and the VA-holes panel. */
int svg_write(FILE *f, const char *title, const svg_point_t *pts, size_t n, size_t nops,
              int has_detail);

#endif /* VPMM_BENCH_SVG_H */
