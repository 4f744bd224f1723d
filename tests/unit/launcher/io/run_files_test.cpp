#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/run_files.hpp"

namespace fs = std::filesystem;
using sgpu::launcher::AppendFile;
using sgpu::launcher::rank_dir;
using sgpu::launcher::rank_log_path;
using sgpu::launcher::read_file;
using sgpu::launcher::Stream;

TEST_CASE("launcher::rank_dir and rank_log_path join as a path's / would") {
  struct Row {
    std::string run_dir;
    int rank;
    std::string dir, out, err;
  };
  for (const auto& row : std::vector<Row>{
           {"/h/runs/20261207-1", 0, "/h/runs/20261207-1/ranks/0", "/h/runs/20261207-1/ranks/0/stdout",
            "/h/runs/20261207-1/ranks/0/stderr"},
           {"/h/runs/x/", 12, "/h/runs/x/ranks/12", "/h/runs/x/ranks/12/stdout", "/h/runs/x/ranks/12/stderr"},
           {"rel", 3, "rel/ranks/3", "rel/ranks/3/stdout", "rel/ranks/3/stderr"},
           {"", 1, "ranks/1", "ranks/1/stdout", "ranks/1/stderr"},
       }) {
    CAPTURE(row.run_dir);
    CHECK(rank_dir(row.run_dir, row.rank) == row.dir);
    CHECK(rank_dir(row.run_dir, row.rank) == (fs::path(row.run_dir) / "ranks" / std::to_string(row.rank)).string());
    CHECK(rank_log_path(row.run_dir, row.rank, Stream::Out) == row.out);
    CHECK(rank_log_path(row.run_dir, row.rank, Stream::Err) == row.err);
  }
}

TEST_CASE("launcher::AppendFile::deferred creates nothing until it is used") {
  auto dir = fs::temp_directory_path() / ("sgpu-run-files-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);  // the run directory
  auto written = (dir / "ranks" / "7" / "stdout").string();
  auto empty = (dir / "ranks" / "8" / "stderr").string();
  {
    auto w = AppendFile::deferred(written);
    auto e = AppendFile::deferred(empty);
    CHECK_FALSE(fs::exists(dir / "ranks"));  // nothing on disk yet, not even the directory
    CHECK(w.append("line 1\n"));
    CHECK(w.append("line 2\n"));
    CHECK(read_file(written, 100) == std::string("line 1\nline 2\n"));
    CHECK_FALSE(fs::exists(empty));
    e.create();  // a rank that never wrote still gets its (empty) log
    CHECK(read_file(empty, 100) == std::string());
    CHECK(e.error().empty());
    AppendFile moved = std::move(w);  // the deferral and the open file move along
    CHECK(moved.append("line 3\n"));
    CHECK(read_file(written, 100) == std::string("line 1\nline 2\nline 3\n"));
  }
  SUBCASE("a path that cannot be created is an error, not an exception") {
    fs::create_directories(dir);
    auto blocker = dir / "file";
    { AppendFile(blocker.string()).append("x"); }
    auto f = AppendFile::deferred((blocker / "stdout").string());  // under a regular file
    CHECK_FALSE(f.append("x"));
    CHECK(f.error().find("cannot create it") != std::string::npos);
    CHECK_FALSE(f.append("y"));  // later appends are skipped
  }
  SUBCASE("a run directory deleted meanwhile is not made again") {
    fs::remove_all(dir);
    auto f = AppendFile::deferred(written);
    CHECK_FALSE(f.append("x"));
    CHECK(f.error().find("No such file or directory") != std::string::npos);
    CHECK_FALSE(fs::exists(dir));
  }
  fs::remove_all(dir);
}

TEST_CASE("launcher::write_file_atomic leaves no temporary file when it fails") {
  auto dir = fs::temp_directory_path() / ("sgpu-atomic-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "state.json" / "in-the-way");  // rename cannot replace a non-empty directory
  CHECK_THROWS_AS(sgpu::launcher::write_file_atomic((dir / "state.json").string(), "{}"), sgpu::Error);
  CHECK_FALSE(fs::exists(dir / "state.json.tmp"));
  sgpu::launcher::write_file_atomic((dir / "summary.json").string(), "{}");
  CHECK(read_file((dir / "summary.json").string(), 100) == std::string("{}"));
  CHECK_FALSE(fs::exists(dir / "summary.json.tmp"));
  fs::remove_all(dir);
}

namespace {
ino_t inode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_ino;
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}
}  // namespace

TEST_CASE("launcher::write_run_file overwrites a spare inode and keeps the file it replaces as one") {
  using sgpu::launcher::write_run_file;
  auto dir = fs::temp_directory_path() / ("sgpu-spares-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto state = (dir / "state.json").string();
  SUBCASE("a recycled directory's spares") {
    std::ofstream(dir / ".spare-0") << std::string(5000, 'o');  // longer than what replaces it, over a block
    std::ofstream(dir / ".spare-1") << "old";
    auto a = inode_of(dir / ".spare-0");
    auto b = inode_of(dir / ".spare-1");
    write_run_file(state, "{\"state\": \"running\"}");
    CHECK(read_file(state, 10000) == std::string("{\"state\": \"running\"}"));  // nothing of the old left
    CHECK(inode_of(state) == a);
    CHECK(names_in(dir) == std::set<std::string>{".spare-1", "state.json"});
    write_run_file(state, "{\"state\": \"succeeded\", \"exit_code\": 0}");
    CHECK(read_file(state, 10000) == std::string("{\"state\": \"succeeded\", \"exit_code\": 0}"));
    CHECK(inode_of(state) == b);
    // The file it replaced waits for the next write, or the next run.
    CHECK(names_in(dir) == std::set<std::string>{".spare-0", "state.json"});
    CHECK(inode_of(dir / ".spare-0") == a);
    write_run_file((dir / "summary.json").string(), "{}");
    CHECK(inode_of(dir / "summary.json") == a);
    CHECK(read_file((dir / "summary.json").string(), 10000) == std::string("{}"));
    CHECK(names_in(dir) == std::set<std::string>{"state.json", "summary.json"});
  }
  SUBCASE("a new directory: files made, the replaced one kept") {
    write_run_file(state, "first");
    auto first = inode_of(state);
    write_run_file(state, "second");
    CHECK(read_file(state, 100) == std::string("second"));
    CHECK(names_in(dir) == std::set<std::string>{".spare-0", "state.json"});
    CHECK(inode_of(dir / ".spare-0") == first);
  }
  SUBCASE("a failed write leaves no temporary file, and the spare is no more") {
    std::ofstream(dir / ".spare-0") << "old";
    fs::create_directories(dir / "state.json" / "in-the-way");
    CHECK_THROWS_AS(write_run_file(state, "{}"), sgpu::Error);
    CHECK(names_in(dir) == std::set<std::string>{"state.json"});
  }
  fs::remove_all(dir);
}
