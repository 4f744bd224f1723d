// A retired run's directory taken for a new run: what the new run finds in
// it is what a new directory holds, and the old run's inodes are reused.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/runs/recycle.hpp"

namespace fs = std::filesystem;
using namespace sgpu::launcher;

namespace {
constexpr const char* kOld = "20261203-000001-000001";
constexpr const char* kNew = "20261203-000002-00000a";

struct Root {
  fs::path path = fs::temp_directory_path() / ("sgpu-recycle-" + std::to_string(::getpid()));
  Root() {
    fs::remove_all(path);
    fs::create_directories(path / ".trash");
  }
  ~Root() { fs::remove_all(path); }
  [[nodiscard]] fs::path old_run() const { return path / ".trash" / kOld; }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A finished run of `ranks` ranks as sgpu leaves one: rank 0 wrote, the
// other ranks' logs are links to one empty file, and each rank left more.
void make_old_run(const fs::path& dir, int ranks) {
  for (const char* f : {"state.json", "spec.json", "summary.json", "events.jsonl", "metrics.jsonl", "state.json.tmp"})
    write(dir / f, std::string("old ") + f);
  write(dir / "lock", "");
  const timespec old[2] = {{1000000000, 0}, {1000000000, 0}};  // 2001
  REQUIRE(::utimensat(AT_FDCWD, (dir / "lock").c_str(), old, 0) == 0);
  write(dir / "stacks/20261203-000001/0.txt", "old stack");
  write(dir / "ranks/0/stdout", "old out");
  write(dir / "ranks/0/stderr", "old err");
  write(dir / "ranks/0/attempt-0/stdout", "old attempt");
  write(dir / "ranks/1/stdout", "");
  for (int r = 1; r < ranks; ++r) {
    for (const char* log : {"stdout", "stderr"}) {
      auto p = dir / "ranks" / std::to_string(r) / log;
      fs::create_directories(p.parent_path());
      if (!fs::exists(p)) fs::create_hard_link(dir / "ranks/1/stdout", p);
    }
    write(dir / "ranks" / std::to_string(r) / "result", "old result");
    write(dir / "ranks" / std::to_string(r) / "error.json", "{}");
  }
  write(dir / "ranks/not-a-rank/x", "x");
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
}

// Every path under `dir`, relative, with " <size>" for files.
std::set<std::string> tree(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    auto rel = fs::relative(e.path(), dir).string();
    out.insert(e.is_directory() ? rel + "/" : rel + " " + std::to_string(fs::file_size(e.path())));
  }
  return out;
}

time_t mtime(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mtim.tv_sec;
}

ino_t inode(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_ino;
}
}  // namespace

TEST_CASE("launcher::recycle_retired_run makes a retired run's directory into a new run's") {
  struct Row {
    int old_ranks;
    int ranks;
    int first_rank;
    std::vector<std::string> rank_dirs;  // under ranks/, with the logs each keeps
  };
  for (const auto& row : {
           Row{4, 4, 0, {"0/", "1/ stdout stderr", "2/ stdout stderr", "3/ stdout stderr"}},
           Row{4, 2, 0, {"0/", "1/ stdout stderr"}},
           Row{2, 4, 0, {"0/", "1/ stdout stderr", "2/", "3/"}},
           Row{4, 2, 2, {"2/ stdout stderr", "3/ stdout stderr"}},
           Row{4, 1, 7, {"7/"}},
       }) {
    CAPTURE(row.old_ranks);
    CAPTURE(row.ranks);
    CAPTURE(row.first_rank);
    Root root;
    make_old_run(root.old_run(), row.old_ranks);
    auto dir_inode = inode(root.old_run());
    auto lock_inode = inode(root.old_run() / "lock");
    auto empty_log_inode = inode(root.old_run() / "ranks/1/stdout");
    std::set<ino_t> written_whole;  // the files the new run's writes overwrite
    for (const char* f : {"state.json", "spec.json", "summary.json"}) written_whole.insert(inode(root.old_run() / f));
    auto before = ::time(nullptr);

    auto dir = recycle_retired_run(root.path.string(), kNew, row.ranks, row.first_rank);
    REQUIRE(dir);
    CHECK(*dir == (root.path / kNew).string());
    std::set<std::string> expected = {"lock 0", "ranks/"};
    for (const auto& rank : row.rank_dirs) {
      auto name = rank.substr(0, rank.find('/'));
      expected.insert("ranks/" + name + "/");
      for (const char* log : {"stdout", "stderr"})
        if (rank.find(log) != std::string::npos) {
          expected.insert("ranks/" + name + "/" + log + " 0");
          CHECK(inode(fs::path(*dir) / "ranks" / name / log) == empty_log_inode);
        }
    }
    // The old state, spec and summary are spares (io/run_files.hpp), hidden.
    auto got = tree(*dir);
    std::set<ino_t> spares;
    for (const char* spare : {".spare-0", ".spare-1", ".spare-2"}) {
      auto it = std::find_if(got.begin(), got.end(), [&](const auto& e) { return e.starts_with(spare); });
      REQUIRE(it != got.end());
      spares.insert(inode(fs::path(*dir) / spare));
      got.erase(it);
    }
    CHECK(spares == written_whole);
    CHECK(got == expected);
    // The same inodes: no file made for what stays, none freed on the way.
    CHECK(inode(*dir) == dir_inode);
    CHECK(inode(fs::path(*dir) / "lock") == lock_inode);
    CHECK(mtime(fs::path(*dir) / "lock") >= before - 1);  // when the run started, not the old run's
    CHECK((fs::status(*dir).permissions() & fs::perms::all) == fs::perms::owner_all);
    // What the old run left waits in the trash for the deleter, unread.
    std::set<std::string> trash;
    for (const auto& e : fs::directory_iterator(root.path / ".trash")) trash.insert(e.path().filename().string());
    std::set<std::string> numbered;
    for (std::size_t i = 0; i < trash.size(); ++i) numbered.insert(fmt::format(".old-{}-{}", kNew, i));
    CHECK(trash == numbered);
    std::size_t old_bytes = 0;
    for (const auto& e : fs::recursive_directory_iterator(root.path / ".trash"))
      if (e.is_regular_file()) old_bytes += fs::file_size(e.path());
    CHECK(old_bytes > 0);
  }
}

TEST_CASE("launcher::recycle_retired_run: a log written to leaves the other ranks' empty logs empty") {
  Root root;
  make_old_run(root.old_run(), 3);
  auto dir = recycle_retired_run(root.path.string(), kNew, 3);
  REQUIRE(dir);
  auto log = [&](int r, const char* s) { return fs::path(*dir) / "ranks" / std::to_string(r) / s; };
  CHECK(inode(log(1, "stdout")) == inode(log(2, "stderr")));  // still one inode's names
  auto out = AppendFile::deferred(log(2, "stdout").string());
  CHECK(out.append("new"));
  CHECK(fs::file_size(log(2, "stdout")) == 3);
  for (const auto& other : {log(1, "stdout"), log(1, "stderr"), log(2, "stderr")}) CHECK(fs::file_size(other) == 0);
  // At the end, the logs nothing was written to stand as they are.
  auto empty = AppendFile::deferred(log(0, "stdout").string());
  empty.create();
  auto linked = AppendFile::deferred(log(1, "stdout").string());
  CHECK(linked.create_as_link_to(log(0, "stdout").string()));
  CHECK(fs::file_size(log(1, "stdout")) == 0);
}

TEST_CASE("launcher::recycle_retired_run takes nothing it must not") {
  SUBCASE("no trash") {
    Root root;
    fs::remove(root.path / ".trash");
    CHECK_FALSE(recycle_retired_run(root.path.string(), kNew, 2));
  }
  SUBCASE("only hidden entries: another launch's claim, what a taken run held") {
    Root root;
    make_old_run(root.path / ".trash" / ".new-20261203-000001-00000b", 2);
    make_old_run(root.path / ".trash" / ".old-20261203-000001-00000c", 2);
    CHECK_FALSE(recycle_retired_run(root.path.string(), kNew, 2));
    CHECK(fs::exists(root.path / ".trash" / ".new-20261203-000001-00000b" / "summary.json"));
    CHECK_FALSE(fs::exists(root.path / kNew));
  }
  SUBCASE("a run of the new run's own second is taken too (retention orders them by the lock)") {
    Root root;
    make_old_run(root.path / ".trash" / "20261203-000002-0000ff", 2);
    CHECK(recycle_retired_run(root.path.string(), kNew, 2));
  }
  SUBCASE("the trash's deleter at work") {
    Root root;
    make_old_run(root.old_run(), 2);
    int fd = ::open((root.path / ".trash").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
    CHECK_FALSE(recycle_retired_run(root.path.string(), kNew, 2));
    ::close(fd);
    CHECK(recycle_retired_run(root.path.string(), kNew, 2));
  }
  SUBCASE("a directory of the new run's name there already (another node of the run on this host)") {
    Root root;
    make_old_run(root.old_run(), 2);
    fs::create_directories(root.path / kNew);
    CHECK_FALSE(recycle_retired_run(root.path.string(), kNew, 2));
    CHECK(fs::is_empty(root.path / kNew));
  }
}

TEST_CASE("launcher::make_run_dir makes a new directory when there is nothing to recycle") {
  Root root;
  auto dir = make_run_dir(root.path.string(), kNew, 2, 0);
  CHECK(tree(dir) == std::set<std::string>{"ranks/", "ranks/0/", "ranks/1/"});
  make_old_run(root.old_run(), 2);
  auto again = make_run_dir(root.path.string(), "20261203-000003-00000c", 1, 0);
  CHECK(fs::exists(fs::path(again) / "lock"));  // the old run's
  CHECK(fs::exists(root.path / ".trash" / ".old-20261203-000003-00000c-0"));
}

TEST_CASE("launcher::recycle_retired_run keeps at most four small files as spares, in the slots' names") {
  for (bool full : {false, true}) {
    CAPTURE(full);
    Root root;
    auto old = root.old_run();
    make_old_run(old, 1);
    write(old / ".spare-0", "a spare the old run kept");
    write(old / ".spare-9", "a spare of no slot's name");  // renamed to a free slot
    if (full) {
      write(old / ".spare-1", "another");
      write(old / ".spare-2", "and another");
    }
    write(old / "summary.json", std::string(kMaxSpareBytes + 1, 'x'));  // too large: overwriting frees blocks
    fs::create_hard_link(old / "spec.json", old / "spec-link");         // another name's file: never overwritten
    std::set<ino_t> small;                                              // what may be kept
    for (const char* f : {"state.json", ".spare-0", ".spare-1", ".spare-2", ".spare-9"})
      if (fs::exists(old / f)) small.insert(inode(old / f));
    auto slot_0 = inode(old / ".spare-0");
    auto dir = recycle_retired_run(root.path.string(), kNew, 1);
    REQUIRE(dir);
    std::set<ino_t> spares;
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(*dir)) {
      auto name = e.path().filename().string();
      if (name.starts_with(".spare-")) {
        names.insert(name);
        spares.insert(inode(e.path()));
      }
    }
    if (full) {  // five small ones: the four slots' names, one of the two to be renamed goes
      CHECK(names == std::set<std::string>{".spare-0", ".spare-1", ".spare-2", ".spare-3"});
      CHECK(std::includes(small.begin(), small.end(), spares.begin(), spares.end()));
    } else {
      CHECK(names == std::set<std::string>{".spare-0", ".spare-1", ".spare-2"});
      CHECK(spares == small);
    }
    CHECK(inode(fs::path(*dir) / ".spare-0") == slot_0);
    CHECK_FALSE(fs::exists(fs::path(*dir) / "summary.json"));
    CHECK_FALSE(fs::exists(fs::path(*dir) / "spec-link"));
    CHECK_FALSE(fs::exists(fs::path(*dir) / "spec.json"));
  }
}
