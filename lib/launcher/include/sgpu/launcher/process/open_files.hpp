#pragma once
// RLIMIT_NOFILE for a node's ranks: sgpu holds five descriptors per running
// rank (two output pipes, a pidfd, two log files), so the usual soft limit of 1024
// caps a node near 200 ranks. sgpu raises its soft limit up to the hard
// limit; ranks get the limit sgpu started with.
#include <sys/resource.h>

namespace sgpu::launcher {

// Descriptors sgpu needs to run `ranks` ranks on this node. Pure.
rlim_t open_files_needed(int ranks);

// The soft limit to set: `needed` when the hard limit allows, never lower
// than `soft` already is, never above `hard`. Pure.
rlim_t raised_soft_limit(rlim_t soft, rlim_t hard, rlim_t needed);

// Throws the error raise_open_files_limit would, changing nothing: for a
// backend's check, before the run directory is made.
void check_open_files_limit(int ranks);

// Raises sgpu's soft RLIMIT_NOFILE for `ranks` ranks and returns the limits it
// had before. Throws sgpu::Error when even the hard limit is too low.
rlimit raise_open_files_limit(int ranks);

// Grows the kernel's descriptor table of sgpu to hold `entries` now (up to
// the soft limit), before any rank starts. A rank shares the table from its
// clone until its first call (CLONE_FILES), and a table that grows while
// another process shares it waits for an RCU grace period (expand_fdtable):
// milliseconds, which doubled a launch of 8 ranks whenever its pipes crossed
// the 64 descriptors a new table holds. The table never shrinks.
void reserve_descriptor_table(rlim_t entries);

// A launcher holds a connection per node, and for a moment another one per
// node (the reachability check): on big runs the usual soft limit of 1024
// is too few. Pure: the limit a launcher of `nnodes` nodes raises its own
// to (2 per node and 256), and the least it can work with (1 per node and 32: a run holds about 20 besides).
rlim_t node_connections_wanted(int nnodes);
rlim_t node_connections_needed(int nnodes);

// Raises the soft limit to node_connections_wanted() (and the hard limit,
// where this process may), only when it is below, so ranks of ordinary runs
// inherit the limit they always had. Throws sgpu::Error, naming the limit
// and its value, when even the hard limit is below node_connections_needed().
void allow_node_connections(int nnodes);

}  // namespace sgpu::launcher
