/*
 * fuzz_internal.h — what the operation fuzzer's files share: fuzz_ops.c (the input, the streams,
 * captures and graph pools, the tracked allocations and every check after an operation),
 * fuzz_order.c (the stream-order model and its check), fuzz_threads.c (the workers an operation
 * may run on) and fuzz_devices.c (several devices, peer access, CUDA IPC between two pools of the
 * input, the segment hook's mirror). One input's whole state is one fz_t; the helpers declared at
 * the end are fuzz_ops.c's, used by fuzz_devices.c, and the dev_* ones fuzz_devices.c's, called by
 * fuzz_ops.c at the points of an input's life they name. The input encoding is described at the
 * top of fuzz_ops.c.
 */
#ifndef VPMM_FUZZ_INTERNAL_H
#define VPMM_FUZZ_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "api.h"
#include "driver_fault.h"
#include "driver_host.h"
#include "core.h"
#include "vpmm.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#define VA_SIZE     (64 * MiB)
#define MAX_LIVE    1024
#define MAX_FREED   64
#define MAX_GP      8
#define MAX_CK      8
#define MAX_GRAPHS  16
#define MAX_EXECS   8
#define MAX_PEND    64 /* freed memory whose stream's work is not complete yet */
#define MAX_OBLIG   64 /* stream-order obligations not yet discharged */
#define MAX_RETIRED 64 /* vpmm's records of released streams followed at once */
#define MAX_SHARES  64 /* exported allocations followed (fuzz_devices.c) */
#define MAX_HANDLES 8  /* IPC handles kept for OPEN */
#define MAX_OPENS   16 /* the importer's pointers not closed yet */

#define NTHREADS 4 /* operations run on the main thread or on one of three workers */
#define NCREATED 4 /* created streams S1..S4 */
#define NPEER    2 /* created streams of device 1, P1 and P2 (two devices only) */
#define NSLOTS1  7 /* stream operand, one device: NULL, 0x1, S1..S4, 0x2 */
#define NSLOTS2  9 /* two devices: the same, then P1, P2 */
#define SLOT_PT  6
#define SLOT_P1  7

/* The streams of one input, told apart as the host backend tells them apart: the legacy stream
 * (NULL unless per-thread, and 0x1), the created streams, each thread's per-thread stream, and
 * the created streams of device 1 (used only on a node of two devices). */
enum {
    ID_LEGACY = 0,
    ID_S1 = 1,
    ID_PT0 = ID_S1 + NCREATED,
    ID_P1 = ID_PT0 + NTHREADS,
    NIDENT = ID_P1 + NPEER
};
#define MAX_CAPS NIDENT       /* at most one capture begun per stream */
#define MAX_USES (NIDENT + 1) /* other streams of an allocation: one per record of vpmm's */

/* Another stream that uses an allocation (vpmm_record_stream). */
typedef struct use {
    int ident;    /* the stream */
    int rec;      /* vpmm's record of it (rec_of) */
    int released; /* vpmm_stream_release(stream) since: its work ended at item upto */
    uint64_t upto;
} use_t;

typedef struct live {
    unsigned char *p;
    size_t size;
    uint64_t stamp;
    uint16_t serial; /* the malloc op that made it (revived ones get a fresh number) */
    int ident;       /* the stream it was allocated on; -1: in a capture, or revived */
    int rec;         /* vpmm's record of that stream (rec_of) */
    int released;    /* vpmm_stream_release(stream) since: its work ended at item upto */
    uint64_t upto;
    int own_rec;  /* vpmm's record of its allocation stream, captures and revived ones too
                     (-1: not known) */
    int own_gone; /* that record was released since (a later stream on the handle is another) */
    const vpmm_stream_rec_t *strm; /* vpmm's record itself: after a reapply, the same one says the
                                same allocation (it keeps its uses), another says a revived one */
    use_t uses[MAX_USES];          /* its other streams (vpmm_record_stream) */
    size_t nuses;
    int share; /* its record in fz_t.shares once exported (vpmm_ipc_export), else -1 */
} live_t;

/* Bytes [lo, hi) of one physical allocation (a driver handle of the pool's pages). */
typedef struct piece {
    vpmm_drv_handle_t handle;
    size_t lo, hi;
} piece_t;

/* A stream recorded on a freed allocation whose work was not complete at the free: the memory
 * goes to no stream (its own included) before `ident` has completed `seq`. */
typedef struct gate {
    int ident;
    uint64_t seq;
} gate_t;

/* Memory freed while the work its stream had enqueued, or the work of a stream recorded on it
 * (vpmm_record_stream), was not complete, or while it was shared with the importer: until the
 * recorded streams' work is done and its shares are over, no stream may get these addresses or
 * these physical bytes; until its own stream's is, any other stream that gets them must wait for
 * it. */
typedef struct pend {
    uintptr_t lo, hi; /* the freed allocation (rounded size) */
    piece_t *pc;      /* the physical bytes behind it when freed */
    size_t npc;
    int ident;    /* its allocation stream; -1: none to wait for (made in a capture, or done) */
    uint64_t seq; /* that stream's work items enqueued when it was freed */
    gate_t gates[MAX_USES]; /* its other streams whose work was pending at the free */
    size_t ngates;
    int share;    /* its share record (fz_t.shares) if shares were not over at the free, else -1 */
    unsigned gp;  /* the graph pool that held it at the free (0: the shared pool) */
    uint64_t nop; /* the FREE */
} pend_t;

/* A malloc on stream `user` got memory of a pend entry: no work item `user` enqueues after
 * `after` (the malloc) may complete before `owner` has completed `seq`. */
typedef struct oblig {
    int user, owner;
    int user_rec; /* vpmm's record of user (rec_of) */
    uint64_t after, seq;
    uint64_t nop_free, nop_malloc;
    uintptr_t addr;
} oblig_t;

/* A capture the input began (with vpmm_capture_begin or outside vpmm), as long as it lasts. */
typedef struct cap {
    uint64_t id;
    int ident;       /* the stream that began it */
    unsigned thread; /* the thread that began it: the only one that may end it unless RELAXED */
    int mode;        /* vpmm_stream_capture_mode_t; external captures are GLOBAL */
    int seen;        /* vpmm held a record of it after the previous operation */
    int tainted;     /* the input did what invalidates it (SYNC; legacy work, for a per-thread
                        stream's capture) */
    unsigned gp;     /* id of the graph pool serving it, once known (0: not yet) */
} cap_t;

typedef struct gref {
    vpmm_graph_pool_t *gp;
    unsigned refs; /* handle references this harness holds */
} gref_t;

/* ---- several devices and CUDA IPC (fuzz_devices.c) ------------------------------------------ */

/* What the model knows of an exported allocation's share slot (one record per allocation, from
 * its first export until its slot surely went back). */
enum {
    SH_UNUSED = 0, /* a free record */
    SH_LIVE,       /* the allocation is live */
    SH_DEFERRED,   /* freed while shares were not over: its memory is nobody's until they are */
    SH_MAYBE,      /* freed, every share over since: a slow path may have given its slot back */
    SH_GONE        /* its slot went back (freed with no share left, or its memory reused) */
};

typedef struct share {
    int state;
    uintptr_t addr;
    size_t size;    /* requested */
    uint32_t count; /* shares not over (exports, less closes that ended one, 0 at an unshare) */
    uint32_t slot, gen;
    uint64_t stamp; /* the allocation's contents when freed (SH_DEFERRED: still there) */
    uint64_t nop_free;
} share_t;

/* Handle bytes vpmm_ipc_export wrote, kept for OPEN. */
typedef struct ipc_handle {
    unsigned char *b;
    size_t len;
    int share;
} ipc_handle_t;

/* A pointer vpmm_ipc_open returned in the importer, not closed yet (one per open). */
typedef struct ipc_open {
    unsigned char *q;
    int share;
} ipc_open_t;

typedef struct fz_dev {
    int devices;             /* devices of the node: 1 or 2 */
    int isolated;            /* device 1 has no peer access (the host's isolated option) */
    vpmm_driver_t *peer;     /* a view of device 1 (two devices) */
    vpmm_stream_t pc[NPEER]; /* P1, P2: created streams of device 1 */
    int granted;             /* device 1 was granted access to the pool */
    /* The segment hook's mirror: built from its events alone. */
    vpmm_segment_info_t *seg;
    size_t nseg, segcap;
    uint64_t seg_events, seg_sorted_at; /* events so far; at the mirror's last sort */
    int seg_broken;                     /* an event a collective library would refuse */
    char seg_why[200];
    /* The importer: a second pool, on a node of its own (another process's), made at the first
     * OPEN; its fault decorator takes the arming when OPEN or CLOSE runs. */
    vpmm_pool_t *ipool;
    vpmm_driver_t *ifault, *ihost;
    share_t shares[MAX_SHARES];
    ipc_handle_t handles[MAX_HANDLES];
    size_t nhandles, handle_at;
    ipc_open_t opens[MAX_OPENS];
    size_t nopens;
    uintptr_t closed; /* the last pointer closed (a bad pointer for CLOSE once not open) */
    uint64_t exports; /* successful vpmm_ipc_export calls */
    long fds;         /* descriptors open at the start of the input */
} fz_dev_t;

typedef struct fz {
    const uint8_t *in;
    size_t len, pos;
    uint64_t nop; /* index of the current operation in this input */
    int op;       /* and its code */
    unsigned cfg;
    size_t page_size, memory_limit, max_bytes, granularity;
    vpmm_pool_t *pool;
    vpmm_driver_t *fault, *host;
    unsigned cfg2;                   /* the second config byte */
    int ptd_default;                 /* stream 0 is the calling thread's per-thread stream */
    int nslots;                      /* stream operand values: NSLOTS1, or NSLOTS2 (two devices) */
    unsigned thread;                 /* the thread operations run on: 0 main, 1..3 workers */
    vpmm_stream_t created[NCREATED]; /* S1..S4 */
    vpmm_stream_t ptkey[NTHREADS];   /* vpmm_host_thread_stream of each thread */
    uint64_t token[NTHREADS];        /* vpmm's identity of each thread (vpmm_i_thread_token) */
    int rec_slot;                    /* the stream operand of the RECORD_STREAM being run */
    const vpmm_stream_rec_t
        *retired[MAX_RETIRED];              /* vpmm's released stream records, and the markers */
    uint64_t retired_recorded[MAX_RETIRED]; /* each had when first seen released */
    size_t nretired;
    cap_t caps[MAX_CAPS];
    size_t ncaps;
    pend_t pend[MAX_PEND];
    size_t npend;
    oblig_t obl[MAX_OBLIG];
    size_t nobl;
    int arg;           /* an operand for a helper handed to another thread (cleanup) */
    size_t waits_seen; /* GPU-side waits already traced (FUZZ_OPS_VERBOSE) */
    live_t live[MAX_LIVE];
    size_t nlive;
    uint16_t next_serial;
    uintptr_t freed[MAX_FREED]; /* a ring of freed addresses (double-free candidates) */
    size_t nfreed, freed_at;
    gref_t gps[MAX_GP];
    size_t ngp;
    vpmm_checkpoint_t *cks[MAX_CK];
    size_t nck;
    vpmm_graph_t graphs[MAX_GRAPHS];
    size_t ngraphs;
    vpmm_host_exec_t execs[MAX_EXECS];
    size_t nexec;
    int armed;                     /* a fault is armed for the current operation */
    int arm_mode, arm_n, arm_undo; /* the FAULT armed: its mode, n, and whether the undo fails */
    vpmm_drv_entry_t arm_entry;
    vpmm_dres_t arm_res;
    int destroy_fault;
    uint64_t destroy_fault_n;
    vpmm_dres_t destroy_fault_res;
    fz_dev_t dev;
} fz_t;

typedef struct snap {
    vpmm_stats_t stats;
    size_t regions;
    uint64_t hash;
} snap_t;

/* A call on a pointer that the tracked set says is bad or reused: vpmm_free, vpmm_record_stream
 * (on the record slot's stream), vpmm_ipc_export or vpmm_ipc_unshare; a live pointer goes to
 * live (a valid call). */
typedef struct ptr_op {
    const char *name;
    void (*live)(fz_t *z, size_t i);
    vpmm_status_t (*call)(fz_t *z, void *p);
} ptr_op_t;

typedef int (*target_fn)(fz_t *z, uintptr_t a, int foreign);

#define S(st) (1u << (unsigned)(st))

/* ---- fuzz_ops.c ------------------------------------------------------------------------------ */

extern int fz_verbose; /* FUZZ_OPS_VERBOSE=1: every operation and status on stderr */

/* Prints what was expected and what happened, then abort(): libFuzzer records a crash. */
__attribute__((format(printf, 2, 3), noreturn)) void finding(const fz_t *z, const char *fmt, ...);
/* st must be in `allowed`; an armed fault adds DRIVER and OUT_OF_MEMORY unless exact. */
void expect_status(const fz_t *z, const char *call, vpmm_status_t st, unsigned allowed, int exact);
/* Operand bytes (0 past the end of the input). */
unsigned rd8(fz_t *z);
unsigned rd16(fz_t *z);
uint32_t rd32(fz_t *z);
/* An allocation's size as the pool rounds it. */
size_t rnd(size_t n);
/* The pool's statistics; a snapshot of them and of its regions; a finding if it changed. */
vpmm_stats_t stats_of(const fz_t *z);
void snap_take(const fz_t *z, snap_t *s);
void snap_same(const fz_t *z, const snap_t *before, const char *call);
/* The tracked allocation starting at a (-1: none). */
ptrdiff_t live_find(const fz_t *z, uintptr_t a);
/* The live allocation v as FREE picks it (the one malloc #v made, else live[v % n]); -1: none. */
ptrdiff_t live_pick(const fz_t *z, unsigned v);
/* The stamp written at both ends of [p, p + size); whether it is still there. */
void stamp_put(unsigned char *p, size_t size, uint64_t stamp);
int stamp_there(const unsigned char *p, size_t size, uint64_t stamp);
void stamp_check(const fz_t *z, const live_t *l, const char *when);
/* The id of the graph pool that owns the allocation at a (0: the shared pool). */
unsigned pool_of_alloc(const fz_t *z, uintptr_t a);
/* Calls op on an arbitrary address; FREE_BAD's address kinds 1-6 (bad_target). */
int ptr_any(fz_t *z, uintptr_t a, int foreign, const ptr_op_t *op);
int bad_target(fz_t *z, unsigned kind, unsigned v, uint32_t off, target_fn act);
/* The driver (fault wrapper w) holds exactly what pool p believes it holds, imports included. */
void driver_matches_pool(const fz_t *z, const vpmm_pool_t *p, vpmm_driver_t *w);
/* Arms wrapper w with the current operation's FAULT (z->arm_*). */
void arm_apply(fz_t *z, vpmm_driver_t *w);

/* Streams (fuzz_ops.c): how many identities this input has, one's name and key, and the work
 * the host backend says was enqueued on and completed by identity id. */
int nident(const fz_t *z);
const char *ident_name(int id);
vpmm_stream_t ident_key(const fz_t *z, int id);
uint64_t enqueued_on(const fz_t *z, int id);
uint64_t completed_on(const fz_t *z, int id);

/* ---- fuzz_order.c: the stream-order model ---------------------------------------------------- */

/* Frees that gave their memory gates (other streams' uses): printed at exit. */
extern uint64_t gated_frees;

/* Whether a recorded stream of e has not completed its work yet, or its shares are not over:
 * nobody may have its memory. */
int gate_pending(const fz_t *z, const pend_t *e);
/* Tracked allocation l is about to be freed (its shares not over if share >= 0). */
void pend_note(fz_t *z, const live_t *l, int share);
/* A malloc (in a capture or not) or a reapply gave l: none of it may be memory whose recorded
 * streams have not completed the work they had enqueued when it was freed. */
void gates_check(const fz_t *z, const live_t *l, const char *call);
/* A malloc outside any capture gave l (on stream l->ident): what it got of memory still in use
 * by another stream becomes an obligation. */
void pend_reused(fz_t *z, const live_t *l);
/* vpmm_stream_release retired vpmm's record rec (of stream id): the application destroys that
 * stream; later work on the same handle is another stream's, and never uses what was allocated
 * on the old one. */
void stream_released(fz_t *z, int rec, int id);
/* FUZZ_OPS_VERBOSE: the GPU-side waits vpmm made during the operation. */
void trace_waits(fz_t *z);
/* After every operation: no stream ran ahead of the work it must wait for. */
void stream_order_check(fz_t *z);

/* ---- fuzz_threads.c ------------------------------------------------------------------------ */

typedef int (*op_fn)(fz_t *z); /* an operation: 0 if it had nothing to act on */

/* The three workers, started once (the main thread is thread 0). */
void workers_start(void);
/* Runs fn on thread z->thread (handing it to that worker and waiting) and returns its result. */
int run_here(fz_t *z, op_fn fn);
/* Runs fn on thread t (z->thread is t meanwhile). */
int run_on(fz_t *z, unsigned t, op_fn fn);
/* At exit. A worker still running an operation (exit from a signal handler) is left alone. */
void workers_stop_all(void);

/* ---- fuzz_devices.c ------------------------------------------------------------------------ */

int op_grant(fz_t *z);
int op_export(fz_t *z);
int op_open(fz_t *z);
int op_close(fz_t *z);
int op_unshare(fz_t *z);

/* After the pool is made: device 1's view and streams, the segment hook and its mirror. */
void dev_setup(fz_t *z);
/* After every executed operation. */
void dev_check(fz_t *z);
/* Tracked allocation l is about to be freed: its share record's index if shares are not over
 * (the memory is nobody's until they are), else -1. */
int dev_freed(fz_t *z, const live_t *l);
/* A malloc or a reapply gave [a, a + size) (checked first against pending shares). */
void dev_given(fz_t *z, uintptr_t a, size_t size);
/* Whether share record i still has shares that are not over. */
int dev_share_pending(const fz_t *z, int i);
/* Cleanup, after every tracked allocation was freed: the importer's opens closed and the
 * importer destroyed, with no leak. */
void dev_cleanup(fz_t *z);
/* After the pool's destruction: the mirror is empty; device 1's view closed. */
void dev_after_destroy(fz_t *z);
/* After the node is closed: no descriptor left open (the exporter's, the importer's). */
void dev_fds_check(fz_t *z);
/* Descriptors the process has open now. */
long dev_fd_count(void);
/* At exit: what the device operations did. */
void dev_report(void);

#endif /* VPMM_FUZZ_INTERNAL_H */
