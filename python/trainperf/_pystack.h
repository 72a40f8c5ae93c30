/* _pystack.h — the native reader of the training thread's Python stack
 * (_pystack.c), as methods of trainperf._core. */
#ifndef TRAINPERF_PYSTACK_H
#define TRAINPERF_PYSTACK_H

#include <Python.h>
#include <stddef.h>

PyObject *pystack_start(PyObject *self, PyObject *hz);
PyObject *pystack_stop(PyObject *self, PyObject *unused);
PyObject *pystack_take(PyObject *self, PyObject *unused);
PyObject *pystack_line(PyObject *self, PyObject *args);
/* The line of code unit lasti by a 3.11+ location table (-1: none). */
int pystack_addr2line(const unsigned char *table, size_t n, int firstlineno, int lasti);

#endif
