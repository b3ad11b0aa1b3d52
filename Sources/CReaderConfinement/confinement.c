// A seccomp filter for ferry-metalink-reader, written for it: an allow list of the
// system calls the reader makes once it has its document, checked against the
// architecture it was built for (a call made through another ABI, such as x32 on
// x86-64, matches no entry and is refused).

#include "CReaderConfinement.h"

#include <errno.h>

#if defined(__x86_64__) || defined(__aarch64__)

#include <stddef.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define READER_AUDIT_ARCH AUDIT_ARCH_X86_64
#else
#define READER_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#define ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define REFUSE BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define ALLOW_NR(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), ALLOW
// Loads the low 32 bits of argument `i` (little-endian) into the accumulator.
#define LOAD_ARG(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]))
// `nr` only when its argument `i` has none of the bits of `bits` (then its rule ends
// there; any other call goes on to the next rule with the number still loaded).
#define ALLOW_NR_WITHOUT(nr, i, bits) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 4), \
    LOAD_ARG(i), \
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, (bits), 1, 0), \
    ALLOW, \
    REFUSE
// `nr` only when its argument `i` is `value`.
#define ALLOW_NR_WITH(nr, i, value) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 4), \
    LOAD_ARG(i), \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (value), 0, 1), \
    ALLOW, \
    REFUSE

int ferry_confine_reader(void) {
    const unsigned int self = (unsigned int)getpid();
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, READER_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        // The descriptors it has (its three standard streams). Not fstat: glibc asks
        // newfstatat, which takes a path too, and stdio does without it.
        ALLOW_NR(__NR_read),
        ALLOW_NR(__NR_write),
        ALLOW_NR(__NR_writev),
        ALLOW_NR(__NR_close),
        // Memory (never executable: nothing is loaded or compiled from here on) and
        // threads' waits.
        ALLOW_NR(__NR_brk),
        ALLOW_NR(__NR_munmap),
        ALLOW_NR(__NR_mremap),
        ALLOW_NR(__NR_madvise),
        ALLOW_NR(__NR_futex),
        ALLOW_NR(__NR_sched_yield),
        // Signals (its own), the clock, who it is, randomness, the end.
        ALLOW_NR(__NR_rt_sigreturn),
        ALLOW_NR(__NR_rt_sigprocmask),
        ALLOW_NR(__NR_rt_sigaction),
        ALLOW_NR(__NR_clock_gettime),
        ALLOW_NR(__NR_gettimeofday),
        ALLOW_NR(__NR_getpid),
        ALLOW_NR(__NR_gettid),
        ALLOW_NR(__NR_getrandom),
        ALLOW_NR(__NR_exit),
        ALLOW_NR(__NR_exit_group),
        // Rules that load an argument come last: each ends in a verdict.
        ALLOW_NR_WITHOUT(__NR_mmap, 2, PROT_EXEC),
        ALLOW_NR_WITHOUT(__NR_mprotect, 2, PROT_EXEC),
        // tgkill(pid, tid, sig) only to itself (abort raises SIGABRT so).
        ALLOW_NR_WITH(__NR_tgkill, 0, self),
        REFUSE,
    };
    struct sock_fprog program = {
        .len = (unsigned short)(sizeof(filter) / sizeof(filter[0])),
        .filter = filter,
    };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
    // With TSYNC every thread gets the filter; a positive answer names a thread that
    // could not take it (and then none has).
    long rc = syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program);
    if (rc < 0) return errno;
    return rc == 0 ? 0 : EBUSY;
}

#else

// Another architecture: no filter written for it, so the reader reads no document there.
int ferry_confine_reader(void) {
    return ENOSYS;
}

#endif
