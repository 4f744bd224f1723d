#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/run_files.hpp"

namespace fs = std::filesystem;
using sgpu::launcher::AppendFile;
using sgpu::launcher::read_file;

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
