/*
 * drivercost.c — vpmm-drivercost: what the CUDA VMM calls vpmm's pool is built on cost, and how
 * that cost scales — the measurements behind the allocator-time design choices (bench/RESULTS.md,
 * "Where the time goes").
 *
 *   vpmm-drivercost [--version]
 *
 * Straight on the driver API (no vpmm, no runtime), device 0's primary context, 2 MiB handles
 * (the granularity), medians of 7 repetitions:
 *   1. scaling: k handles (1..256) mapped side by side; cuMemMap per handle; one cuMemSetAccess
 *      over all k against k calls of one handle each; one cuMemUnmap over all k against k calls;
 *      the same while the handles are also mapped at a second address (aliasing: a remap);
 *      cuMemCreate and cuMemRelease per handle; single handles of 8, 32 and 128 MiB.
 *      Does the cost follow handles, bytes or calls?
 *   2. threads: map + set-access of 128 handles on this thread, alone and while another thread
 *      unmaps and maps, creates and releases, or queries an event. Does the driver run two
 *      threads' VMM calls at once (could a background thread take the unmaps off the path)?
 *   3. several devices and processes: the per-handle cycle (create, map, set-access,
 *      unmap, release) with handles created plain and created exportable as POSIX file
 *      descriptors (what CUDA IPC needs: VPMM_IPC), with access for device 0 alone and for
 *      devices 0 and 1 (a peer granted: every later map names it), and the cost of exporting a
 *      handle's descriptor. What do IPC-ready handles and a peer cost on the hot growth path?
 * Prints three tables. Exit status 0, 2 without a device (or a driver), 3 on a driver error.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define TOOL    "vpmm-drivercost"
#define REPS    7
#define NHANDLE 256

#define CK(call)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *s_ = "?";                                                                  \
            cu_.GetErrorString(r_, &s_);                                                           \
            fprintf(stderr, TOOL ": %s failed: %s (%d)\n", #call, s_, (int)r_);                    \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

/* The driver calls this tool makes, from libcuda.so.1 loaded at run time (as the library does):
 * --help and --version work on a machine without a driver, and a missing driver is the tool's
 * "no device" status (2), not a loader error. The names are cuda.h's, versioned entry points
 * included (cuEventDestroy is cuEventDestroy_v2's macro). */
#define CU_FUNCS(X)                                                                                \
    X(CtxSetCurrent)                                                                               \
    X(DeviceCanAccessPeer)                                                                         \
    X(DeviceGet)                                                                                   \
    X(DeviceGetAttribute)                                                                          \
    X(DeviceGetCount)                                                                              \
    X(DevicePrimaryCtxRelease)                                                                     \
    X(DevicePrimaryCtxRetain)                                                                      \
    X(EventCreate)                                                                                 \
    X(EventDestroy)                                                                                \
    X(EventQuery)                                                                                  \
    X(EventRecord)                                                                                 \
    X(GetErrorString)                                                                              \
    X(Init)                                                                                        \
    X(MemAddressFree)                                                                              \
    X(MemAddressReserve)                                                                           \
    X(MemCreate)                                                                                   \
    X(MemExportToShareableHandle)                                                                  \
    X(MemGetAllocationGranularity)                                                                 \
    X(MemMap)                                                                                      \
    X(MemRelease)                                                                                  \
    X(MemSetAccess)                                                                                \
    X(MemUnmap)
#define CU_STR(x)  #x
#define CU_XSTR(x) CU_STR(x)
static struct {
#define CU_FIELD(n) __typeof__(cu##n) *n;
    CU_FUNCS(CU_FIELD)
#undef CU_FIELD
} cu_;

/* 0, or -1 with why in err. */
static int cu_load(char *err, size_t len)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(err, len, "%s", dlerror());
        return -1;
    }
#define CU_SYM(n)                                                                                  \
    if ((*(void **)&cu_.n = dlsym(lib, CU_XSTR(cu##n))) == NULL) {                                 \
        snprintf(err, len, "libcuda.so.1 has no %s", CU_XSTR(cu##n));                              \
        return -1;                                                                                 \
    }
    CU_FUNCS(CU_SYM)
#undef CU_SYM
    return 0;
}

static CUcontext ctx;
static CUmemAllocationProp prop;
static CUmemAccessDesc access_rw;
static size_t gran;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[n / 2];
}

static void map_all(CUdeviceptr va, const CUmemGenericAllocationHandle *h, int k)
{
    for (int i = 0; i < k; i++)
        CK(cu_.MemMap(va + (size_t)i * gran, gran, 0, h[i], 0));
}

static void unmap_each(CUdeviceptr va, int k)
{
    for (int i = 0; i < k; i++)
        CK(cu_.MemUnmap(va + (size_t)i * gran, gran));
}

static void scaling(CUdeviceptr va, CUdeviceptr va2, CUmemGenericAllocationHandle *h)
{
    static const int ks[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256 };
    double t0 = now_us();
    for (int i = 0; i < NHANDLE; i++)
        CK(cu_.MemCreate(&h[i], gran, &prop, 0));
    printf("cuMemCreate: %.2f us per %zu KiB handle\n\n", (now_us() - t0) / NHANDLE, gran >> 10);
    printf("%5s %9s %14s %14s %14s %14s %14s %14s\n", "k", "map/h", "access 1 call", "access/h",
           "unmap 1 call", "unmap/h", "alias m+a/h", "alias unmap");
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int k = ks[ki];
        double m[REPS], a1[REPS], ak[REPS], u1[REPS], uk[REPS], am[REPS], au[REPS], t;
        for (int r = 0; r < REPS; r++) {
            t = now_us();
            map_all(va, h, k);
            m[r] = (now_us() - t) / k;
            t = now_us();
            CK(cu_.MemSetAccess(va, (size_t)k * gran, &access_rw, 1));
            a1[r] = now_us() - t;
            t = now_us(); /* the same handles at a second address: what a remap does */
            map_all(va2, h, k);
            CK(cu_.MemSetAccess(va2, (size_t)k * gran, &access_rw, 1));
            am[r] = (now_us() - t) / k;
            t = now_us();
            CK(cu_.MemUnmap(va2, (size_t)k * gran)); /* k mappings in one call */
            au[r] = now_us() - t;
            t = now_us();
            CK(cu_.MemUnmap(va, (size_t)k * gran));
            u1[r] = now_us() - t;
            map_all(va, h, k);
            t = now_us();
            for (int i = 0; i < k; i++)
                CK(cu_.MemSetAccess(va + (size_t)i * gran, gran, &access_rw, 1));
            ak[r] = (now_us() - t) / k;
            t = now_us();
            unmap_each(va, k);
            uk[r] = (now_us() - t) / k;
        }
        printf("%5d %9.2f %14.2f %14.2f %14.2f %14.2f %14.2f %14.2f\n", k, median(m, REPS),
               median(a1, REPS), median(ak, REPS), median(u1, REPS), median(uk, REPS),
               median(am, REPS), median(au, REPS));
    }
    t0 = now_us();
    for (int i = 0; i < NHANDLE; i++)
        CK(cu_.MemRelease(h[i]));
    printf("cuMemRelease: %.2f us per handle\n", (now_us() - t0) / NHANDLE);
    for (size_t mult = 4; mult <= 64; mult *= 4) {
        CUmemGenericAllocationHandle hb;
        double c, mm, aa, uu, rr;
        t0 = now_us();
        CK(cu_.MemCreate(&hb, mult * gran, &prop, 0));
        c = now_us() - t0;
        t0 = now_us();
        CK(cu_.MemMap(va, mult * gran, 0, hb, 0));
        mm = now_us() - t0;
        t0 = now_us();
        CK(cu_.MemSetAccess(va, mult * gran, &access_rw, 1));
        aa = now_us() - t0;
        t0 = now_us();
        CK(cu_.MemUnmap(va, mult * gran));
        uu = now_us() - t0;
        t0 = now_us();
        CK(cu_.MemRelease(hb));
        rr = now_us() - t0;
        printf("one %3zu MiB handle: create %.1f, map %.1f, access %.1f, unmap %.1f, release "
               "%.1f us\n",
               (mult * gran) >> 20, c, mm, aa, uu, rr);
    }
}

/* ---- 2. two threads ---------------------------------------------------------------------- */

enum { NT = 128 };
enum bg_mode { BG_NONE, BG_REMAP, BG_CREATE, BG_QUERY, BG_MAP_UNMAP, BG_MODES };
static const char *const BG_NAMES[BG_MODES] = { "alone", "other thread: map+access, unmap",
                                                "other thread: create, release",
                                                "other thread: event query",
                                                "other thread: map, unmap" };

typedef struct bg {
    enum bg_mode mode;
    CUdeviceptr va;
    CUmemGenericAllocationHandle *h;
    volatile int stop;
    long ops;
    double us;
} bg_t;

static void *background(void *arg)
{
    bg_t *b = arg;
    CUevent ev;
    double t0;
    CK(cu_.CtxSetCurrent(ctx));
    CK(cu_.EventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cu_.EventRecord(ev, 0));
    t0 = now_us();
    while (!b->stop) {
        switch (b->mode) {
        case BG_REMAP:
        case BG_MAP_UNMAP:
            for (int i = 0; i < NT && !b->stop; i++) {
                CK(cu_.MemMap(b->va + (size_t)i * gran, gran, 0, b->h[i], 0));
                if (b->mode == BG_REMAP)
                    CK(cu_.MemSetAccess(b->va + (size_t)i * gran, gran, &access_rw, 1));
            }
            for (int i = 0; i < NT; i++, b->ops++)
                (void)cu_.MemUnmap(b->va + (size_t)i * gran, gran); /* those mapped */
            break;
        case BG_CREATE: {
            CUmemGenericAllocationHandle h;
            CK(cu_.MemCreate(&h, gran, &prop, 0));
            CK(cu_.MemRelease(h));
            b->ops++;
            break;
        }
        default:
            (void)cu_.EventQuery(ev);
            b->ops++;
        }
    }
    b->us = now_us() - t0;
    CK(cu_.EventDestroy(ev));
    return NULL;
}

static double foreground_round(CUdeviceptr va, const CUmemGenericAllocationHandle *h)
{
    double t = now_us(), per;
    for (int i = 0; i < NT; i++) {
        CK(cu_.MemMap(va + (size_t)i * gran, gran, 0, h[i], 0));
        CK(cu_.MemSetAccess(va + (size_t)i * gran, gran, &access_rw, 1));
    }
    per = (now_us() - t) / NT;
    unmap_each(va, NT);
    return per;
}

static void threads(CUdeviceptr va, CUdeviceptr vb)
{
    CUmemGenericAllocationHandle ha[NT], hb[NT];
    for (int i = 0; i < NT; i++) {
        CK(cu_.MemCreate(&ha[i], gran, &prop, 0));
        CK(cu_.MemCreate(&hb[i], gran, &prop, 0));
    }
    printf("\n%-34s %22s %26s\n", "map + set-access on this thread", "us per handle (median)",
           "the other thread's ops");
    for (int mode = BG_NONE; mode < BG_MODES; mode++) {
        bg_t b = { (enum bg_mode)mode, vb, hb, 0, 0, 0 };
        pthread_t th;
        double s[REPS];
        if (mode != BG_NONE && pthread_create(&th, NULL, background, &b) != 0) {
            fprintf(stderr, TOOL ": pthread_create failed\n");
            exit(3);
        }
        for (int r = 0; r < REPS; r++)
            s[r] = foreground_round(va, ha);
        b.stop = 1;
        if (mode != BG_NONE)
            pthread_join(th, NULL);
        if (mode == BG_NONE)
            printf("%-34s %22.2f %26s\n", BG_NAMES[mode], median(s, REPS), "-");
        else
            printf("%-34s %22.2f %14ld, %6.1f us each\n", BG_NAMES[mode], median(s, REPS), b.ops,
                   b.ops ? b.us / (double)b.ops : 0.0);
    }
    for (int i = 0; i < NT; i++) {
        CK(cu_.MemRelease(ha[i]));
        CK(cu_.MemRelease(hb[i]));
    }
}

/* ---- 3. exportable handles, peers -------------------------------------------------------- */

/* Median per-handle microseconds of create, map, access, unmap, release for NHANDLE handles of
 * `types`, with access for ndesc devices (0 and, if 2, device 1). */
static void cycle(CUdeviceptr va, CUmemAllocationHandleType types, int ndesc, double out[5])
{
    CUmemAllocationProp p = prop;
    CUmemAccessDesc desc[2] = { access_rw, access_rw };
    CUmemGenericAllocationHandle *h = malloc(NHANDLE * sizeof *h);
    double v[5][REPS];
    if (h == NULL)
        exit(3);
    p.requestedHandleTypes = types;
    desc[1].location.id = 1;
    for (int r = 0; r < REPS; r++) {
        double t = now_us();
        for (int i = 0; i < NHANDLE; i++)
            CK(cu_.MemCreate(&h[i], gran, &p, 0));
        v[0][r] = (now_us() - t) / NHANDLE;
        t = now_us();
        map_all(va, h, NHANDLE);
        v[1][r] = (now_us() - t) / NHANDLE;
        t = now_us();
        for (int i = 0; i < NHANDLE; i++) /* one call per handle: what growth does per run */
            CK(cu_.MemSetAccess(va + (size_t)i * gran, gran, desc, (size_t)ndesc));
        v[2][r] = (now_us() - t) / NHANDLE;
        t = now_us();
        unmap_each(va, NHANDLE);
        v[3][r] = (now_us() - t) / NHANDLE;
        t = now_us();
        for (int i = 0; i < NHANDLE; i++)
            CK(cu_.MemRelease(h[i]));
        v[4][r] = (now_us() - t) / NHANDLE;
    }
    for (int k = 0; k < 5; k++)
        out[k] = median(v[k], REPS);
    free(h);
}

static void devices_and_processes(CUdeviceptr va)
{
    static const char *const names[] = { "plain", "POSIX fd" };
    const CUmemAllocationHandleType types[] = { CU_MEM_HANDLE_TYPE_NONE,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
    int count = 0, peer = 0, fd_ok = 0;
    CK(cu_.DeviceGetCount(&count));
    if (count >= 2)
        CK(cu_.DeviceCanAccessPeer(&peer, 1, 0));
    CK(cu_.DeviceGetAttribute(&fd_ok,
                              CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
    printf(
        "\nper-handle cycle, %d handles of %zu KiB, medians of %d (us per handle); %d devices%s\n",
        NHANDLE, gran >> 10, REPS, count, peer ? ", 1 reaches 0" : "");
    printf("%-9s %-14s %8s %8s %8s %8s %8s %8s\n", "handles", "access for", "create", "map",
           "access", "unmap", "release", "total");
    for (int t = 0; t < 2; t++) {
        if (t == 1 && !fd_ok) {
            printf("%-9s (the device does not support POSIX fd handles)\n", names[t]);
            continue;
        }
        for (int nd = 1; nd <= (peer ? 2 : 1); nd++) {
            double c[5];
            cycle(va, types[t], nd, c);
            printf("%-9s %-14s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", names[t],
                   nd == 1 ? "device 0" : "devices 0, 1", c[0], c[1], c[2], c[3], c[4],
                   c[0] + c[1] + c[2] + c[3] + c[4]);
        }
    }
    if (fd_ok) {
        CUmemAllocationProp p = prop;
        CUmemGenericAllocationHandle h;
        double e[REPS];
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        CK(cu_.MemCreate(&h, gran, &p, 0));
        for (int r = 0; r < REPS; r++) {
            int fd = -1;
            double t = now_us();
            CK(cu_.MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            e[r] = now_us() - t;
            close(fd);
        }
        CK(cu_.MemRelease(h));
        printf("cuMemExportToShareableHandle (POSIX fd): %.2f us\n", median(e, REPS));
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: " TOOL " [--help] [--version]\n"
               "Times the CUDA VMM calls on device 0: how they scale with handles per call and\n"
               "handle size, and whether two threads' calls overlap. Needs a GPU.\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = { CLI_COMMON_OPTIONS, { NULL, 0, NULL, 0 } };
    CUdevice dev;
    CUdeviceptr va, va2;
    CUmemGenericAllocationHandle *h;
    char why[512];
    int opt;
    cli_check_stdout_at_exit(TOOL);
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
        cli_other_option(TOOL, opt, usage);
    if (optind != argc) {
        usage(stderr);
        return 1;
    }
    if (cu_load(why, sizeof why) != 0) {
        fprintf(stderr, TOOL ": no CUDA driver (%s)\n", why);
        return 2;
    }
    if (cu_.Init(0) != CUDA_SUCCESS || cu_.DeviceGet(&dev, 0) != CUDA_SUCCESS) {
        fprintf(stderr, TOOL ": no CUDA device\n");
        return 2;
    }
    CK(cu_.DevicePrimaryCtxRetain(&ctx, dev));
    CK(cu_.CtxSetCurrent(ctx));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    access_rw.location = prop.location;
    access_rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cu_.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    h = malloc(NHANDLE * sizeof *h);
    if (h == NULL)
        return 3;
    CK(cu_.MemAddressReserve(&va, (size_t)NHANDLE * gran, 0, 0, 0));
    CK(cu_.MemAddressReserve(&va2, (size_t)NHANDLE * gran, 0, 0, 0));
    scaling(va, va2, h);
    threads(va, va2);
    devices_and_processes(va);
    CK(cu_.MemAddressFree(va, (size_t)NHANDLE * gran));
    CK(cu_.MemAddressFree(va2, (size_t)NHANDLE * gran));
    CK(cu_.DevicePrimaryCtxRelease(dev));
    free(h);
    return 0;
}
