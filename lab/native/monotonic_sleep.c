/* Loaded before libfaketime: libfaketime 0.9.10 shifts an absolute CLOCK_MONOTONIC deadline by the
 * faked wall-clock offset even with FAKETIME_DONT_FAKE_MONOTONIC=1, so after a jump every Python
 * time.sleep() fails with EINVAL (forward) or sleeps the jump's length (back). A monotonic sleep has
 * nothing to do with the wall clock: this goes straight to the kernel for it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req, struct timespec *rem) {
    if (clock_id == CLOCK_MONOTONIC || clock_id == CLOCK_BOOTTIME || clock_id == CLOCK_MONOTONIC_RAW) {
        long r = syscall(SYS_clock_nanosleep, clock_id, flags, req, rem);
        return r == 0 ? 0 : errno;
    }
    static int (*next)(clockid_t, int, const struct timespec *, struct timespec *);
    if (next == NULL) next = dlsym(RTLD_NEXT, "clock_nanosleep");
    return next(clock_id, flags, req, rem);
}
