// A seccomp filter for ferry-metalink-reader, written for it: an allow list of the
// system calls the reader makes once it has its document, checked against the
// architecture it was built for (a call made through another ABI, such as x32 on
// x86-64, matches no entry and is refused).

#include "CReaderConfinement.h"

#include <errno.h>
#include <stddef.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define READER_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define READER_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "ferry-metalink-reader's confinement knows x86-64 and AArch64 only"
#endif

#define LOAD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define ALLOW_NR(nr) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define REFUSE BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))

int ferry_confine_reader(void) {
    const unsigned int self = (unsigned int)getpid();
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, READER_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        LOAD_NR,
        // The descriptors it has (its three standard streams).
        ALLOW_NR(__NR_read),
        ALLOW_NR(__NR_write),
        ALLOW_NR(__NR_writev),
        ALLOW_NR(__NR_close),
        ALLOW_NR(__NR_fstat),
        // Memory and threads' waits.
        ALLOW_NR(__NR_brk),
        ALLOW_NR(__NR_mmap),
        ALLOW_NR(__NR_munmap),
        ALLOW_NR(__NR_mremap),
        ALLOW_NR(__NR_mprotect),
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
        // tgkill(pid, tid, sig) only to itself (abort raises SIGABRT so).
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_tgkill, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, self, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
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
