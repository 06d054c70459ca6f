/*
 * driver.c — backend-independent pieces of the driver contract (driver.h): the CUDA names of the
 * entry points, used in last_call and in messages by every backend and by the fault decorator.
 * Stateless, so thread-safe. The table below must list one name per vpmm_drv_entry_t, in enum
 * order; the static assertion catches an entry added to the enum but not here.
 */
#include "driver.h"

static const char *const entry_names[] = {
    [VPMM_DRV_GRANULARITY] = "cuMemGetAllocationGranularity",
    [VPMM_DRV_VA_RESERVE] = "cuMemAddressReserve",
    [VPMM_DRV_VA_FREE] = "cuMemAddressFree",
    [VPMM_DRV_MEM_CREATE] = "cuMemCreate",
    [VPMM_DRV_MEM_RELEASE] = "cuMemRelease",
    [VPMM_DRV_MEM_MAP] = "cuMemMap",
    [VPMM_DRV_MEM_UNMAP] = "cuMemUnmap",
    [VPMM_DRV_SET_ACCESS] = "cuMemSetAccess",
    [VPMM_DRV_EVENT_CREATE] = "cuEventCreate",
    [VPMM_DRV_EVENT_DESTROY] = "cuEventDestroy",
    [VPMM_DRV_EVENT_RECORD] = "cuEventRecord",
    [VPMM_DRV_EVENT_QUERY] = "cuEventQuery",
    [VPMM_DRV_STREAM_WAIT_EVENT] = "cuStreamWaitEvent",
    [VPMM_DRV_CAPTURE_INFO] = "cuStreamGetCaptureInfo",
    [VPMM_DRV_MEM_GET_INFO] = "cuMemGetInfo",
    [VPMM_DRV_SYNCHRONIZE] = "cuCtxSynchronize",
    [VPMM_DRV_BEGIN_CAPTURE] = "cuStreamBeginCapture",
    [VPMM_DRV_END_CAPTURE] = "cuStreamEndCapture",
    [VPMM_DRV_USER_OBJECT_CREATE] = "cuUserObjectCreate",
    [VPMM_DRV_GRAPH_RETAIN_USER_OBJECT] = "cuGraphRetainUserObject",
    [VPMM_DRV_USER_OBJECT_RELEASE] = "cuUserObjectRelease",
    [VPMM_DRV_GRAPH_DESTROY] = "cuGraphDestroy",
    [VPMM_DRV_REVOKE_ACCESS] = "cuMemSetAccess",
    [VPMM_DRV_GET_ACCESS] = "cuMemGetAccess",
    [VPMM_DRV_STREAM_DEVICE] = "cuStreamGetDevice",
    [VPMM_DRV_MEM_EXPORT] = "cuMemExportToShareableHandle",
    [VPMM_DRV_MEM_IMPORT] = "cuMemImportFromShareableHandle",
};

_Static_assert(sizeof(entry_names) / sizeof(entry_names[0]) == VPMM_DRV_ENTRY_COUNT,
               "entry_names must name every vpmm_drv_entry_t");

const char *vpmm_drv_entry_name(vpmm_drv_entry_t entry)
{
    /* The enum may arrive as any int (a cast from a counter loop or garbage): compare unsigned. */
    if ((unsigned)entry >= (unsigned)VPMM_DRV_ENTRY_COUNT)
        return "?";
    return entry_names[entry];
}
