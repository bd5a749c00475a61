/* See numa_binding.h. */
#include "agent/numa_binding.h"

#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCI_VENDOR_NVIDIA 0x10de

const char *numa_mode_name(numa_mode mode) {
    switch (mode) {
    case NUMA_NODE: return "node";
    case NUMA_SOCKET: return "socket";
    case NUMA_EXCLUSIVE: return "exclusive";
    case NUMA_CORE_COMPLEX: return "core-complex";
    default: return "none";
    }
}

/* The CPUs near the k-th NVIDIA GPU (a display or 3D controller, in the
 * PCI order hwloc lists them), or NULL when there are not that many. */
static hwloc_const_cpuset_t gpu_cpus(hwloc_topology_t topo, int k) {
    int idx = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(topo, o)) != NULL;) {
        if (o->attr->pcidev.vendor_id != PCI_VENDOR_NVIDIA || (o->attr->pcidev.class_id >> 8) != 3)
            continue;
        if (idx++ == k) {
            hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
            return anc ? anc->cpuset : NULL;
        }
    }
    return NULL;
}

/* Sets home to the CPUs of the NUMA nodes that near intersects, and writes
 * their numbers ("0,1") to names. */
static void nodes_of(hwloc_topology_t topo, hwloc_const_cpuset_t near, hwloc_bitmap_t home,
                     char *names, size_t len) {
    hwloc_bitmap_zero(home);
    size_t k = 0;
    names[0] = '\0';
    for (hwloc_obj_t n = NULL; (n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n));) {
        if (!hwloc_bitmap_intersects(n->cpuset, near)) continue;
        hwloc_bitmap_or(home, home, n->cpuset);
        int w = snprintf(names + k, len - k, "%s%u", k ? "," : "", n->os_index);
        if (w > 0 && (size_t)w < len - k) k += (size_t)w;
    }
    if (hwloc_bitmap_iszero(home)) hwloc_bitmap_copy(home, near);
}

/* The union of the objects of a type that intersect set (set itself when
 * there are none). */
static void widen_to(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_const_cpuset_t set,
                     hwloc_bitmap_t out) {
    hwloc_bitmap_zero(out);
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_obj_by_type(topo, type, o));)
        if (hwloc_bitmap_intersects(o->cpuset, set)) hwloc_bitmap_or(out, out, o->cpuset);
    if (hwloc_bitmap_iszero(out)) hwloc_bitmap_copy(out, set);
}

/* Share j of m of home's cores (all their hardware threads); the PUs when
 * the topology shows no cores. */
static int exclusive_share(hwloc_topology_t topo, hwloc_const_cpuset_t home, int j, int m,
                           hwloc_bitmap_t out, char *err, size_t errlen, const char *nodes) {
    hwloc_obj_type_t type = HWLOC_OBJ_CORE;
    int ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, home, type);
    if (ncores <= 0) type = HWLOC_OBJ_PU, ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, home, type);
    if (ncores < m) {
        snprintf(err, errlen, "--numa-binding exclusive: %d workers share NUMA node %s, which has "
                 "only %d cores; use --numa-binding node, or fewer workers", m, nodes, ncores);
        return -EINVAL;
    }
    hwloc_bitmap_zero(out);
    for (int c = j * ncores / m; c < (j + 1) * ncores / m; c++) {
        hwloc_obj_t o = hwloc_get_obj_inside_cpuset_by_type(topo, home, type, (unsigned)c);
        if (o) hwloc_bitmap_or(out, out, o->cpuset);
    }
    return 0;
}

/* L3 domain j (mod their count) of home; home when it has none. Returns
 * whether the domain is shared with another worker. */
static int core_complex(hwloc_topology_t topo, hwloc_const_cpuset_t home, int j, int m,
                        hwloc_bitmap_t out) {
    int nl3 = hwloc_get_nbobjs_inside_cpuset_by_type(topo, home, HWLOC_OBJ_L3CACHE);
    if (nl3 <= 0) {
        hwloc_bitmap_copy(out, home);
        return m > 1;
    }
    hwloc_obj_t o = hwloc_get_obj_inside_cpuset_by_type(topo, home, HWLOC_OBJ_L3CACHE,
                                                        (unsigned)(j % nl3));
    hwloc_bitmap_copy(out, o ? o->cpuset : home);
    return m > nl3;
}

void numa_plan_free(numa_plan *plan) {
    free(plan->cpus);
    free(plan->near);
    plan->cpus = NULL;
    plan->near = NULL;
    plan->n = 0;
}

int numa_plan_make(numa_mode mode, int nproc, const int *gpu, numa_plan *plan, char *err,
                   size_t errlen) {
    memset(plan, 0, sizeof *plan);
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) {
        snprintf(err, errlen, "--numa-binding: cannot read the machine's topology (hwloc)");
        return -EIO;
    }
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        snprintf(err, errlen, "--numa-binding: cannot read the machine's topology (hwloc)");
        return -EIO;
    }
    plan->n = nproc;
    plan->this_system = hwloc_topology_is_thissystem(topo);
    plan->cpus = calloc((size_t)nproc, sizeof *plan->cpus);
    plan->near = calloc((size_t)nproc, sizeof *plan->near);
    hwloc_bitmap_t *home = calloc((size_t)nproc, sizeof *home);
    char(*nodes)[32] = calloc((size_t)nproc, sizeof *nodes);
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int rc = plan->cpus && plan->near && home && nodes && set ? 0 : -ENOMEM;
    if (rc) snprintf(err, errlen, "--numa-binding: out of memory");
    int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    int ngpu_found = 0;
    for (int i = 0; rc == 0 && i < nproc; i++) {
        int g = gpu && gpu[i] >= 0 ? gpu[i] : i;
        ngpu_found += gpu_cpus(topo, g) != NULL;
    }
    int by_gpu = ngpu_found == nproc; /* else share the nodes out evenly */
    for (int i = 0; rc == 0 && i < nproc; i++) {
        home[i] = hwloc_bitmap_alloc();
        int g = gpu && gpu[i] >= 0 ? gpu[i] : i;
        hwloc_const_cpuset_t near = NULL;
        if (by_gpu) {
            near = gpu_cpus(topo, g);
        } else if (nnuma > 0) {
            hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE,
                                                  (unsigned)((long)i * nnuma / nproc));
            near = n ? n->cpuset : NULL;
        }
        if (!near) near = hwloc_get_root_obj(topo)->cpuset;
        nodes_of(topo, near, home[i], nodes[i], sizeof nodes[i]);
        if (by_gpu)
            snprintf(plan->near[i], sizeof plan->near[i], "NUMA node %s, near GPU %d", nodes[i], g);
        else
            snprintf(plan->near[i], sizeof plan->near[i], "NUMA node %s of %d; %s",
                     nodes[i], nnuma > 0 ? nnuma : 1,
                     ngpu_found ? "fewer GPUs than workers, nodes shared out"
                                : "no GPU, nodes shared out");
    }
    for (int i = 0; rc == 0 && i < nproc; i++) {
        int j = 0, m = 0; /* this worker's place among those with the same nodes */
        for (int k = 0; k < nproc; k++) {
            if (!hwloc_bitmap_isequal(home[k], home[i])) continue;
            j += k < i;
            m++;
        }
        switch (mode) {
        case NUMA_SOCKET: widen_to(topo, HWLOC_OBJ_PACKAGE, home[i], set); break;
        case NUMA_EXCLUSIVE:
            rc = exclusive_share(topo, home[i], j, m, set, err, errlen, nodes[i]);
            break;
        case NUMA_CORE_COMPLEX:
            if (core_complex(topo, home[i], j, m, set)) {
                size_t len = strlen(plan->near[i]);
                snprintf(plan->near[i] + len, sizeof plan->near[i] - len, ", L3 shared");
            }
            break;
        default: hwloc_bitmap_copy(set, home[i]); break;
        }
        if (rc == 0) hwloc_bitmap_list_snprintf(plan->cpus[i], sizeof plan->cpus[i], set);
    }
    for (int i = 0; home && i < nproc; i++)
        if (home[i]) hwloc_bitmap_free(home[i]);
    free(home);
    free(nodes);
    if (set) hwloc_bitmap_free(set);
    hwloc_topology_destroy(topo);
    if (rc) numa_plan_free(plan);
    return rc;
}

