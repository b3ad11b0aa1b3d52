#ifndef FERRY_READER_CONFINEMENT_H
#define FERRY_READER_CONFINEMENT_H

/// Confines the calling process, every thread of it, for good: from here on only the
/// system calls a parser needs to compute and answer succeed (reading and writing the
/// descriptors it has, memory that is never executable, futexes, signals to itself,
/// the clock, exit); every other call fails with EPERM: no open, socket, exec, fork,
/// kill of another process, ptrace or file system change. Sets no_new_privs first (the
/// kernel asks for it). Returns 0, or the errno of what failed (then no filter is in
/// place, though no_new_privs may be; ENOSYS on an architecture it has no filter for).
int ferry_confine_reader(void);

#endif
