/*
 * core.h — every header of the core, for the files that use all of it (the white-box tests, the
 * fuzzer). A core file includes pool.h (the data model and its invariants) and the headers of
 * the files it calls, jemalloc-style: one header per concern, declared next to nothing else.
 */
#ifndef VPMM_CORE_H
#define VPMM_CORE_H

#include "pool.h"

#include "arena.h"
#include "cache.h"
#include "defrag.h"
#include "entry.h"
#include "graph_hooks.h"
#include "pages.h"
#include "peer.h"
#include "policy.h"
#include "record.h"
#include "region.h"
#include "report.h"
#include "segment.h"
#include "share.h"
#include "stats.h"
#include "stream.h"
#include "trim.h"
#include "uses.h"
#include "va.h"
#include "worker.h"

#endif /* VPMM_CORE_H */
