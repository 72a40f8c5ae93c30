/* Internal error helpers. */
#ifndef TPF_UTIL_ERR_H
#define TPF_UTIL_ERR_H

/* Map an errno value to a TPF_E* code (0 stays 0). */
int err_from_errno(int e);

#endif
