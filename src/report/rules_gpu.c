/* GPU rules land here: rules on what the GPU records of a run say (kernels,
 * copies, memory per step). Each is a check (rules.h: drule_check) and one
 * entry of diag_rules[] (diag.c), declared under "rules_gpu.c" in rules.h;
 * the GPU figures per step are loaded with the run (report_load.c) into
 * diag_run, and a check reads them from there. None yet: throttling and
 * host-bound, which read NVML samples, are in rules_contention.c and
 * rules_hostcode.c. */
#include "report/rules.h"
