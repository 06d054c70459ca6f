/*
 * driver_cuda.h — the CUDA backend's opener (driver_cuda.c): the real driver behind the table of
 * src/driver/driver.h, loaded at run time from libcuda.so.1. Only the API floor's backend
 * factory (src/api/pool.c) and the backend's own tests include it; nothing here needs cuda.h.
 */
#ifndef VPMM_DRIVER_CUDA_H
#define VPMM_DRIVER_CUDA_H

#include <stddef.h>

#include "driver.h"

/* vpmm_driver_cuda_open's flags. */
#define VPMM_DRV_OPEN_EXPORTABLE 1u /* create exportable handles where the device can (rule 10) */

/*
 * Opens the CUDA backend on a device (-1: the calling thread's current device, else 0).
 * VPMM_DRV_NO_DEVICE when libcuda.so.1 is missing, cuInit fails or there is no such device;
 * VPMM_DRV_NOT_SUPPORTED when the device has no VMM support. With VPMM_DRV_OPEN_EXPORTABLE, handles
 * are created as POSIX file descriptors when the device supports it (`exportable` says whether).
 * Defined in driver_cuda.c.
 */
vpmm_dres_t vpmm_driver_cuda_open(int device, unsigned flags, vpmm_driver_t **out);

/* Number of CUDA devices usable by the CUDA backend (0 when there is no driver). */
int vpmm_driver_cuda_device_count(void);

/*
 * Why the CUDA driver could not be loaded, in words, into buf (always terminated): "libcuda.so.1
 * could not be loaded", "cuInit: no CUDA-capable device", "cuInit failed (CUresult 999)"...;
 * "" when it loaded and has devices. Loads it first if nobody has.
 */
void vpmm_driver_cuda_load_error(char *buf, size_t len);

#endif /* VPMM_DRIVER_CUDA_H */
