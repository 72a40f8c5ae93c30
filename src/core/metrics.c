/* The metric table (see metrics.h). */
#include <string.h>

#include "core/metrics.h"

#define F(field) offsetof(coll_frame, field)
#define G(field) offsetof(gpu_frame, field)

const metric_def metric_table[] = {
    {"cpu_pct", "%", "system CPU busy, share of all cores", METRIC_GAUGE, 2, F(cpu_pct), "cpu"},
    {"cpu_iowait_pct", "%", "system iowait share", METRIC_GAUGE, 2, F(cpu_iowait_pct), "cpu"},
    {"mem_total_bytes", "bytes", "memory installed", METRIC_GAUGE, 0, F(mem_total_bytes), NULL},
    {"mem_used_bytes", "bytes", "memory used (total - available)", METRIC_GAUGE, 0, F(mem_used_bytes), "memory"},
    {"mem_available_bytes", "bytes", "memory available", METRIC_GAUGE, 0, F(mem_available_bytes), "memory"},
    {"swap_used_bytes", "bytes", "swap used", METRIC_GAUGE, 0, F(swap_used_bytes), "memory"},
    {"psi_cpu_some_pct", "%", "CPU pressure stall (some)", METRIC_GAUGE, 2, F(psi_cpu_some_pct), "pressure"},
    {"psi_mem_some_pct", "%", "memory pressure stall (some)", METRIC_GAUGE, 2, F(psi_mem_some_pct), "pressure"},
    {"psi_mem_full_pct", "%", "memory pressure stall (full)", METRIC_GAUGE, 2, F(psi_mem_full_pct), "pressure"},
    {"psi_io_some_pct", "%", "I/O pressure stall (some)", METRIC_GAUGE, 2, F(psi_io_some_pct), "pressure"},
    {"psi_io_full_pct", "%", "I/O pressure stall (full)", METRIC_GAUGE, 2, F(psi_io_full_pct), "pressure"},
    {"disk_read_bps", "B/s", "disk reads, all block devices", METRIC_RATE, 0, F(disk_read_bps), "io"},
    {"disk_write_bps", "B/s", "disk writes, all block devices", METRIC_RATE, 0, F(disk_write_bps), "io"},
    {"net_rx_bps", "B/s", "network received (not lo)", METRIC_RATE, 0, F(net_rx_bps), "io"},
    {"net_tx_bps", "B/s", "network sent (not lo)", METRIC_RATE, 0, F(net_tx_bps), "io"},
    {"tree_procs", "count", "processes in the watched tree", METRIC_GAUGE, 0, F(tree_procs), "tree"},
    {"tree_threads", "count", "threads in the watched tree", METRIC_GAUGE, 0, F(tree_threads), "tree"},
    {"tree_cpu_pct", "% of one core", "CPU of the watched tree", METRIC_GAUGE, 2, F(tree_cpu_pct), "cpu"},
    {"tree_rss_bytes", "bytes", "resident memory of the watched tree", METRIC_GAUGE, 0, F(tree_rss_bytes), "memory"},
    {"tree_read_bps", "B/s", "storage reads of the watched tree", METRIC_RATE, 0, F(tree_read_bps), "io"},
    {"tree_write_bps", "B/s", "storage writes of the watched tree", METRIC_RATE, 0, F(tree_write_bps), "io"},
    {"main_cpu_pct", "% of one core", "CPU of the root process", METRIC_GAUGE, 2, F(main_cpu_pct), "cpu"},
    {"steps", "count", "steps completed so far, all ranks", METRIC_GAUGE, 0, F(steps), NULL},
    {"step_rate", "steps/s", "steps per second per rank", METRIC_RATE, 3, F(step_rate), "throughput"},
    {"sample_rate", "samples/s", "samples per second", METRIC_RATE, 3, F(sample_rate), "throughput"},
    {"token_rate", "tokens/s", "tokens per second", METRIC_RATE, 3, F(token_rate), "throughput"},
    {"data_wait_share", "0-1", "data-wait share of step time", METRIC_GAUGE, 4, F(data_wait_share), "data_wait"},
    {"tree_runq_pct", "% of one core", "run-queue wait of the tree's threads (schedstat)", METRIC_GAUGE, 2, F(tree_runq_pct), "tree"},
    {"tree_runnable", "count", "runnable threads of the tree", METRIC_GAUGE, 0, F(tree_runnable), "tree"},
    {"cpus_usable", "count", "CPUs the run may use (affinity, cgroup quota)", METRIC_GAUGE, 2, F(cpus_usable), NULL},
    {"cg_throttled_pct", "%", "cgroup CPU throttled time", METRIC_GAUGE, 2, F(cg_throttled_pct), "pressure"},
};
const size_t metric_table_len = sizeof(metric_table) / sizeof(metric_table[0]);

const metric_def metric_core = {"cpu%d_pct", "%", "CPU busy of one core", METRIC_GAUGE, 2, 0, NULL};

const metric_def metric_gpu_table[] = {
    {"util_pct", "%", "GPU utilisation", METRIC_GAUGE, 2, G(util_pct), "gpu"},
    {"mem_util_pct", "%", "memory-controller utilisation", METRIC_GAUGE, 2, G(mem_util_pct), "gpu"},
    {"mem_used_bytes", "bytes", "device memory used", METRIC_GAUGE, 0, G(mem_used_bytes), "gpu"},
    {"mem_total_bytes", "bytes", "device memory", METRIC_GAUGE, 0, G(mem_total_bytes), NULL},
    {"temp_c", "C", "temperature", METRIC_GAUGE, 1, G(temp_c), "gpu"},
    {"power_w", "W", "power draw", METRIC_GAUGE, 2, G(power_w), "gpu"},
    {"energy_j", "J", "energy used in the interval", METRIC_GAUGE, 3, G(energy_j), NULL},
    {"sm_mhz", "MHz", "SM clock", METRIC_GAUGE, 0, G(sm_mhz), "gpu"},
    {"mem_mhz", "MHz", "memory clock", METRIC_GAUGE, 0, G(mem_mhz), NULL},
    {"throttle", "", "clock-event reasons", METRIC_TEXT, 0, G(throttle), NULL},
    {"pcie_rx_bps", "B/s", "PCIe received", METRIC_RATE, 0, G(pcie_rx_bps), NULL},
    {"pcie_tx_bps", "B/s", "PCIe sent", METRIC_RATE, 0, G(pcie_tx_bps), NULL},
    {"nvlink_rx_bps", "B/s", "NVLink received", METRIC_RATE, 0, G(nvlink_rx_bps), NULL},
    {"nvlink_tx_bps", "B/s", "NVLink sent", METRIC_RATE, 0, G(nvlink_tx_bps), NULL},
    {"proc_mem_bytes", "bytes", "device memory of the watched tree", METRIC_GAUGE, 0, G(proc_mem_bytes), NULL},
    {"proc_sm_pct", "%", "SM share of the watched tree", METRIC_GAUGE, 2, G(proc_sm_pct), NULL},
};
const size_t metric_gpu_table_len = sizeof(metric_gpu_table) / sizeof(metric_gpu_table[0]);

const fval *metric_val(const metric_def *m, const void *base)
{
    if (m->kind == METRIC_TEXT) return NULL;
    return (const fval *)((const char *)base + m->off);
}

const char *metric_text(const metric_def *m, const void *base)
{
    if (m->kind != METRIC_TEXT) return "";
    return (const char *)base + m->off;
}

const metric_def *metric_find(const char *name)
{
    for (size_t i = 0; i < metric_table_len; i++)
        if (strcmp(metric_table[i].name, name) == 0) return &metric_table[i];
    return NULL;
}
