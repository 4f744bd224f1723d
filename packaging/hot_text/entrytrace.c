// entrytrace FUNCTIONS OUT -- CMD...: runs CMD under ptrace with a breakpoint
// at the entry of each function FUNCTIONS lists (one hex address a line, as
// `nm` prints the executable's symbols), and writes the address of each
// function CMD's process, its threads and its children run, in the order they
// first run it, to OUT. A child is followed until it execs another program.
// Exits with the command's own code. scripts/hot-text's tracer: each
// breakpoint is taken once, then put back to the instruction it replaced, so a
// launch costs a few thousand stops, where single-stepping every instruction
// took millions (and half an hour on a slow machine). A sampling profiler
// would miss what runs once.
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

struct site {
  unsigned long addr;  // as listed: the file's address
  unsigned char original;
  int hit;
};

static struct site* sites;
static size_t nsites;
static unsigned long load_bias;  // runtime address = listed address + load_bias
static FILE* out;

static int by_addr(const void* a, const void* b) {
  unsigned long x = ((const struct site*)a)->addr, y = ((const struct site*)b)->addr;
  return x < y ? -1 : x > y;
}

static struct site* find(unsigned long runtime) {
  struct site key = {runtime - load_bias, 0, 0};
  return bsearch(&key, sites, nsites, sizeof *sites, by_addr);
}

// A PIE is loaded at the address of its first mapping; a fixed executable where it says.
static void find_bias(pid_t pid, const char* exe) {
  FILE* f = fopen(exe, "rb");
  Elf64_Ehdr eh;
  int pie = f && fread(&eh, sizeof eh, 1, f) == 1 && eh.e_type == ET_DYN;
  if (f) fclose(f);
  if (!pie) return;
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%d/maps", pid);
  f = fopen(path, "r");
  while (f && fgets(line, sizeof line, f)) {
    unsigned long a, b, off;
    char perms[8], name[PATH_MAX] = "";
    if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095s", &a, &b, perms, &off, name) >= 4 && off == 0 &&
        strcmp(name, exe) == 0) {
      load_bias = a;
      break;
    }
  }
  if (f) fclose(f);
}

static int poke_byte(pid_t pid, unsigned long addr, unsigned char value, unsigned char* old) {
  errno = 0;
  long word = ptrace(PTRACE_PEEKTEXT, pid, (void*)addr, 0);
  if (errno) return -1;
  if (old) *old = (unsigned char)(word & 0xff);
  word = (word & ~0xffL) | value;
  return (int)ptrace(PTRACE_POKETEXT, pid, (void*)addr, (void*)word);
}

static void arm(pid_t pid) {
  size_t armed = 0;
  for (size_t i = 0; i < nsites; ++i)
    if (poke_byte(pid, sites[i].addr + load_bias, 0xcc, &sites[i].original) == 0) ++armed;
  fprintf(stderr, "entrytrace: %zu of %zu function entries armed\n", armed, nsites);
}

static void read_sites(const char* file) {
  FILE* f = fopen(file, "r");
  if (!f) {
    perror(file);
    exit(2);
  }
  size_t cap = 0;
  unsigned long a;
  while (fscanf(f, "%lx", &a) == 1) {
    if (nsites == cap) sites = realloc(sites, (cap = cap ? cap * 2 : 4096) * sizeof *sites);
    sites[nsites++] = (struct site){a, 0, 0};
  }
  fclose(f);
  qsort(sites, nsites, sizeof *sites, by_addr);
  size_t n = 0;  // aliases share an address: one breakpoint
  for (size_t i = 0; i < nsites; ++i)
    if (n == 0 || sites[n - 1].addr != sites[i].addr) sites[n++] = sites[i];
  nsites = n;
}

int main(int argc, char** argv) {
  if (argc < 5 || strcmp(argv[3], "--") != 0) {
    fprintf(stderr, "usage: entrytrace FUNCTIONS OUT -- COMMAND [ARG...]\n");
    return 2;
  }
  read_sites(argv[1]);
  out = fopen(argv[2], "w");
  char exe[PATH_MAX];
  if (!out || !realpath(argv[4], exe)) {
    perror(argv[4]);
    return 2;
  }
  pid_t child = fork();
  if (child == 0) {
    ptrace(PTRACE_TRACEME, 0, 0, 0);
    raise(SIGSTOP);
    execv(argv[4], argv + 4);
    _exit(127);
  }
  int st;
  waitpid(child, &st, 0);
  ptrace(PTRACE_SETOPTIONS, child, 0,
         PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL);
  ptrace(PTRACE_CONT, child, 0, 0);
  int live = 1, execd = 0, rc = 0;
  unsigned long stops = 0;
  while (live > 0) {
    pid_t pid = waitpid(-1, &st, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      if (pid == child) rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      live--;
      continue;
    }
    if (!WIFSTOPPED(st)) continue;
    int sig = WSTOPSIG(st), event = st >> 16, deliver = 0;
    if (event == PTRACE_EVENT_EXEC) {
      if (!execd && pid == child) {
        execd = 1;
        find_bias(pid, exe);
        arm(pid);
      } else {  // a child that became another program
        ptrace(PTRACE_DETACH, pid, 0, 0);
        live--;
        continue;
      }
    } else if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK) {
      live++;  // the new tracee reports its own SIGSTOP
    } else if (sig == SIGTRAP && event == 0 && execd) {
      struct user_regs_struct r;
      ptrace(PTRACE_GETREGS, pid, 0, &r);
      struct site* s = find(r.rip - 1);
      if (s) {
        // Ours: back to the entry with its own first byte. A thread that hit
        // it before another put it back finds it put back already; a forked
        // child has its own copy of the text, armed, and puts back its own.
        poke_byte(pid, r.rip - 1, s->original, NULL);
        r.rip -= 1;
        ptrace(PTRACE_SETREGS, pid, 0, &r);
        if (!s->hit) {
          s->hit = 1;
          fprintf(out, "%lx\n", s->addr);
        }
        ++stops;
      } else {
        deliver = sig;
      }
    } else if (sig == SIGSTOP && event == 0) {
      deliver = 0;  // a new tracee's first stop
    } else if (event == 0) {
      deliver = sig;
    }
    ptrace(PTRACE_CONT, pid, 0, deliver);
  }
  fprintf(stderr, "entrytrace: %lu breakpoints taken\n", stops);
  fclose(out);
  return rc;  // the traced command's own
}
