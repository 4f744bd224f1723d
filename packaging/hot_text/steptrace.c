// steptrace OUT -- CMD...: runs CMD under ptrace, single-stepping every thread
// and every child until it execs another program, and writes each distinct
// instruction address inside CMD's own executable (as an offset from the
// file's first mapping: its address in the file for a PIE) to OUT, in the
// order first executed. Exits with the command's own code. scripts/hot-text's tracer: slow (a few microseconds
// an instruction) and exact, where sampling would miss what runs once.
#define _GNU_SOURCE
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

static unsigned long base, end_;
static unsigned char* seen;  // one bit per byte offset
static FILE* out;

static void find_base(pid_t pid, const char* exe) {
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%d/maps", pid);
  FILE* f = fopen(path, "r");
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b, off;
    char perms[8];
    char name[PATH_MAX] = "";
    if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095s", &a, &b, perms, &off, name) >= 4 && strcmp(name, exe) == 0) {
      if (off == 0 && base == 0) base = a;
      if (b > end_) end_ = b;
    }
  }
  fclose(f);
}

int main(int argc, char** argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0) {
    fprintf(stderr, "usage: steptrace OUT -- COMMAND [ARG...]\n");
    return 2;
  }
  out = fopen(argv[1], "w");
  char exe[PATH_MAX];
  if (!realpath(argv[3], exe)) {
    perror(argv[3]);
    return 2;
  }
  pid_t child = fork();
  if (child == 0) {
    ptrace(PTRACE_TRACEME, 0, 0, 0);
    raise(SIGSTOP);
    execv(argv[3], argv + 3);
    _exit(127);
  }
  int st;
  waitpid(child, &st, 0);
  ptrace(PTRACE_SETOPTIONS, child, 0,
         PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL);
  ptrace(PTRACE_CONT, child, 0, 0);
  int live = 1, execd = 0, rc = 0;
  unsigned long steps = 0;
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
        find_base(pid, exe);
        seen = calloc((end_ - base) / 8 + 1, 1);
        fprintf(stderr, "steptrace: %s at %lx-%lx\n", exe, base, end_);
      } else {
        ptrace(PTRACE_DETACH, pid, 0, 0);
        live--;
        continue;
      }  // a child that became another program
    } else if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK) {
      live++;  // the new tracee reports its own SIGSTOP
    } else if (sig == SIGTRAP) {
      if (seen) {
        struct user_regs_struct r;
        ptrace(PTRACE_GETREGS, pid, 0, &r);
        if (r.rip >= base && r.rip < end_) {
          unsigned long o = r.rip - base;
          if (!(seen[o / 8] & (1 << (o % 8)))) {
            seen[o / 8] |= 1 << (o % 8);
            fprintf(out, "%lx\n", o);
          }
        }
        steps++;
      }
    } else if (sig == SIGSTOP && event == 0) {
      deliver = 0;  // a new tracee's first stop
    } else {
      deliver = sig;
    }
    ptrace(seen ? PTRACE_SINGLESTEP : PTRACE_CONT, pid, 0, deliver);
  }
  fprintf(stderr, "steptrace: %lu steps\n", steps);
  fclose(out);
  return rc;  // the traced command's own
}
