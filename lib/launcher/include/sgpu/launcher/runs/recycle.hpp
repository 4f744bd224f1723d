#pragma once
// A new run's directory made out of a retired one. In the steady state of a
// user's runs directory (it holds --keep-runs runs, and each launch retires
// one into the trash) a launch that made its directory afresh and a deleter
// that removed the old one cost the file system ~20 inodes made and ~20
// freed a launch; on ext4 without a journal each new inode is searched for
// past every inode freed in the last half minute or so, which made a launch
// in a busy runs directory cost up to twice one in a new home. Taking a
// retired run's directory instead reuses its inodes that hold no data: its
// directory, its ranks' directories, its empty lock and empty logs (one
// inode for all the ranks that wrote nothing), and the inodes of the files
// the new run writes whole (state, spec, summary: kept as hidden spares that
// the new run's writes overwrite, io/run_files.hpp). Everything else that
// holds data goes to the trash, for the deleter: freeing written-out blocks
// waits for the device where the file system discards them (~75 us a file
// on this machine's ext4), and an old run's logs may hold gigabytes. The new
// run sees what a new directory holds, but for the spares. In the steady
// state a launch makes three inodes (events.jsonl, the control socket, the
// port's lock file) and frees as many.
#include <optional>
#include <string>

namespace sgpu::launcher {

// What a run directory holds at the start, from a retired one: the run
// directory (mode 0700) with ranks/<r>/ for r in first_rank ..
// first_rank+ranks-1, an empty lock (its mtime now) where the old run had
// one, and in each rank's directory the old logs that were empty; the old
// state.json, spec.json and summary.json, and the old run's own spares, as
// spares (.spare-<n>, at most kMaxSpares, each at most kMaxSpareBytes and
// of one name). Everything else the old run left (its events, logs written
// to, results, other ranks' directories, ...) is moved, unread, into the
// trash as <root>/.trash/.old-<run_id>-<n>, which the trash's deleter
// removes.
//
// It is made under the trash (a hidden claim name, so no listing sees it and
// two launches never take the same one) and renamed to <root>/<run_id> when
// ready. Retention orders one second's runs by their lock's mtime, which
// the reset sets (a reused directory's birth time is its old run's).
// Nothing is taken while the trash's deleter works (its lock), nor from an
// empty trash: nullopt then, and after any failure (what was claimed stays
// in the trash for the deleter).
std::optional<std::string> recycle_retired_run(const std::string& root, const std::string& run_id, int ranks,
                                               int first_rank = 0);

// A run's directory at launch: a retired one recycled when the trash has
// one, else a new one (create_run_dir). Throws sgpu::Error as create_run_dir.
std::string make_run_dir(const std::string& root, const std::string& run_id, int ranks, int first_rank = 0);

}  // namespace sgpu::launcher
