// A fake libnccl.so.2 for tests on machines without GPUs. Ranks are separate
// processes; a communicator is a control file (a process-shared barrier on a
// futex, zero-filled so it needs no set-up) plus one data file per rank, all
// in $SGPU_FAKE_NCCL_DIR and named by the unique id. Only float32 sums.
// Faults (README "Test hooks"): SGPU_FAKE_NCCL_WRONG=RANK (an element off by
// one), SGPU_FAKE_NCCL_HANG=RANK (blocks for ever in its first all-reduce),
// SGPU_FAKE_NCCL_CRASH=RANK (aborts there), SGPU_FAKE_NCCL_HANG_INIT=RANK (never
// joins the communicator), SGPU_FAKE_NCCL_BUSBW=GBPS (each
// all-reduce takes at least the time of that bus bandwidth). Never for production.
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_config.hpp"

namespace {

struct Control {
  std::atomic<unsigned> arrived;
  std::atomic<unsigned> generation;
};
static_assert(std::atomic<unsigned>::is_always_lock_free);

struct Comm {
  int rank = 0, nranks = 1;
  std::string base;
  Control* control = nullptr;
  int fd = -1;
};

void futex(std::atomic<unsigned>* word, int op, unsigned value) {
  ::syscall(SYS_futex, reinterpret_cast<unsigned*>(word), op, value, nullptr, nullptr, 0);
}

void barrier(Comm& c) {
  unsigned gen = c.control->generation.load();
  if (c.control->arrived.fetch_add(1) + 1 == static_cast<unsigned>(c.nranks)) {
    c.control->arrived.store(0);
    c.control->generation.fetch_add(1);
    futex(&c.control->generation, FUTEX_WAKE, INT_MAX);
    return;
  }
  while (c.control->generation.load() == gen) futex(&c.control->generation, FUTEX_WAIT, gen);
}

std::string directory() {
  const char* d = std::getenv("SGPU_FAKE_NCCL_DIR");
  return d != nullptr ? d : "/tmp";
}

}  // namespace

extern "C" {
using ncclResult_t = int;
struct ncclUniqueId {
  char internal[128];
};
using ncclComm_t = Comm*;

ncclResult_t ncclGetVersion(int* v) {
  *v = 22809;
  return 0;
}
const char* ncclGetErrorString(ncclResult_t r) { return r == 4 ? "invalid argument (fake)" : "fake NCCL error"; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::random_device random;
  std::snprintf(id->internal, sizeof id->internal, "fake-nccl-%08x%08x", random(), random());
  return 0;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  auto* c = new Comm;
  c->rank = rank;
  c->nranks = nranks;
  id.internal[sizeof id.internal - 1] = '\0';
  c->base = directory() + "/" + id.internal;
  if (sgpu_fake::keyed("SGPU_FAKE_NCCL_HANG_INIT", rank, 0) != 0) {
    for (;;) ::pause();
  }
  c->fd = ::open((c->base + ".ctl").c_str(), O_RDWR | O_CREAT, 0600);
  if (c->fd < 0 || ::ftruncate(c->fd, 4096) != 0) return 2;  // ncclSystemError
  void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
  if (m == MAP_FAILED) return 2;
  c->control = static_cast<Control*>(m);
  barrier(*c);  // as NCCL: init returns once every rank has joined
  *out = c;
  return 0;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, int datatype, int op, ncclComm_t c, void*) {
  if (datatype != 7 || op != 0) return 4;  // ncclFloat32, ncclSum only
  auto started = std::chrono::steady_clock::now();
  if (sgpu_fake::keyed("SGPU_FAKE_NCCL_CRASH", c->rank, 0) != 0) std::abort();
  if (sgpu_fake::keyed("SGPU_FAKE_NCCL_HANG", c->rank, 0) != 0) {
    for (;;) ::pause();
  }
  std::size_t bytes = count * sizeof(float);
  auto mine = c->base + "." + std::to_string(c->rank);
  int fd = ::open(mine.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ::pwrite(fd, send, bytes, 0) != static_cast<ssize_t>(bytes)) return 2;
  ::close(fd);
  barrier(*c);
  std::vector<float> sum(count, 0.0f), part(count);
  for (int r = 0; r < c->nranks; ++r) {
    int in = ::open((c->base + "." + std::to_string(r)).c_str(), O_RDONLY);
    if (in < 0 || ::pread(in, part.data(), bytes, 0) != static_cast<ssize_t>(bytes)) return 2;
    ::close(in);
    for (std::size_t i = 0; i < count; ++i) sum[i] += part[i];
  }
  barrier(*c);  // nobody rewrites its file before every rank has read it
  if (sgpu_fake::keyed("SGPU_FAKE_NCCL_WRONG", c->rank, 0) != 0 && count > 0) sum[5 % count] += 1.0f;
  std::memcpy(recv, sum.data(), bytes);
  if (const char* busbw = std::getenv("SGPU_FAKE_NCCL_BUSBW"); busbw != nullptr && c->nranks > 1) {
    double gbps = std::atof(busbw);
    double seconds = static_cast<double>(bytes) * 2 * (c->nranks - 1) / c->nranks / (gbps * 1e9);
    std::this_thread::sleep_until(started + std::chrono::duration<double>(seconds));
  }
  return 0;
}

// Local, as NCCL's is: no barrier. A rank that leaves early (its worker saw
// wrong values) must leave its peers waiting in their next all-reduce, as
// NCCL would, not count as their arrival there and pull its file from under
// them. Its own file is read by nobody once its last all-reduce returned.
ncclResult_t ncclCommDestroy(ncclComm_t c) {
  ::unlink((c->base + "." + std::to_string(c->rank)).c_str());
  if (c->rank == 0) ::unlink((c->base + ".ctl").c_str());
  ::munmap(c->control, 4096);
  ::close(c->fd);
  delete c;
  return 0;
}
}
