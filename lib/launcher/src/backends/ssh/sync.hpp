#pragma once
// `--sync DIR`: the files of DIR that go to every node, and the tarball that
// carries them. What .gitignore files (DIR's and its subdirectories') and
// the --sync-exclude patterns name stays behind, and so does .git.
#include <string>
#include <vector>

namespace sgpu::launcher {

// Paths relative to `dir`, in a stable order: regular files and symbolic
// links (as links). Throws sgpu::Error when `dir` is not a readable directory.
std::vector<std::string> sync_file_list(const std::string& dir, const std::vector<std::string>& excludes);

// Packs `files` of `dir` into a gzip'ed tar at `out` with the system tar;
// throws sgpu::Error with tar's message when it fails.
void make_sync_tarball(const std::string& dir, const std::vector<std::string>& files, const std::string& out);

}  // namespace sgpu::launcher
