/* Error codes: one table (TPF_ERRNO_MAP in trainperf.h) gives enum, names, messages. */
#include "trainperf.h"

#include <errno.h>

#include "util/err.h"

const char *tpf_strerror(int err)
{
    switch (err) {
    case TPF_OK: return "success";
#define TPF_ERR_MSG_(name, val, msg) \
    case (val): return (msg);
        TPF_ERRNO_MAP(TPF_ERR_MSG_)
#undef TPF_ERR_MSG_
    default: return "unknown error";
    }
}

const char *tpf_errname(int err)
{
    switch (err) {
    case TPF_OK: return "OK";
#define TPF_ERR_NAME_(name, val, msg) \
    case (val): return #name;
        TPF_ERRNO_MAP(TPF_ERR_NAME_)
#undef TPF_ERR_NAME_
    default: return "UNKNOWN";
    }
}

const char *tpf_version(void) { return TPF_VERSION_STRING; }

int err_from_errno(int e)
{
    switch (e) {
    case 0: return TPF_OK;
    case ENOMEM: return TPF_ENOMEM;
    case ENOENT: case ENOTDIR: return TPF_ENOENT;
    case EEXIST: return TPF_EEXIST;
    case EACCES: case EPERM: case EROFS: return TPF_EACCES;
    case EINVAL: return TPF_EINVAL;
    case EFBIG: return TPF_ETOOBIG;
    case ENOSPC: case EDQUOT: return TPF_ENOSPC;
    case EIO: return TPF_EIO;
    default: return TPF_ESYS;
    }
}
