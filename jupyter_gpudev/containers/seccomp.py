"""The seccomp profile of dev containers: Docker's default, minus setuid and setgid bits.

Root inside a dev container owns what it creates in a bind-mounted host folder (the workspace)
as root on the host too: ``chmod u+s`` there makes a setuid-root program that any host user who
can reach the folder runs as root. Dropping capabilities does not stop it (the owner of a file
may always set its mode bits; measured on Engine 20.10 with ``--cap-drop ALL``), nor does a
``nosuid`` mount inside the container (the bit lives in the inode; ``nosuid`` only changes how
that one mount executes). What stops it is refusing the system calls that would write
``S_ISUID``/``S_ISGID``: ``chmod``/``fchmod``/``fchmodat``, ``open``/``openat``/``creat`` with
``O_CREAT``, and ``mknod``/``mknodat``, with such a mode fail with ``EPERM``. ``openat2``,
``fchmodat2`` and io_uring (whose arguments a filter cannot read) answer ``ENOSYS``, so that
libraries fall back to the calls that are checked.

Everything else is Docker's default profile (moby ``profiles/seccomp/default.json``, Apache
License 2.0), rules for capabilities and architectures included: the engine evaluates them
against the container's capabilities exactly as it does for its own default.
"""

from __future__ import annotations

import json
from typing import Any

#: The mode bits refused: S_ISUID | S_ISGID.
SETID_BITS = 0o6000
#: ``O_CREAT | __O_TMPFILE`` on the architectures listed in ``_GENERIC_FLAG_ARCHES``.
_CREATE_FLAGS = 0o100 | 0o20000000
_GENERIC_FLAG_ARCHES = ["amd64", "x32", "x86", "386", "arm64", "arm", "ppc64le", "s390x", "riscv64"]
ENOSYS = 38

#: System calls checked by argument here, left out of the unconditional list below.
_CHECKED = {
    # name: index of the mode argument
    "chmod": 1,
    "fchmod": 1,
    "fchmodat": 2,
    "creat": 1,
    "mknod": 1,
    "mknodat": 2,
    "open": 2,
    "openat": 3,
}
#: name: index of the flags argument, for opens that create nothing (the mode is then unused).
_OPEN_FLAGS = {"open": 1, "openat": 2}
_UNCHECKABLE = (
    "openat2",
    "fchmodat2",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)

# Docker's default allow list, without the calls above.
_ALLOWED = """
accept accept4 access adjtimex alarm bind brk capget capset chdir chown chown32 clock_adjtime
clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64 clock_nanosleep
clock_nanosleep_time64 close close_range connect copy_file_range dup dup2 dup3 epoll_create
epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd
eventfd2 execve execveat exit exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate
fanotify_mark fchdir fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr
flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate
ftruncate64 futex futex_time64 futex_waitv futimesat getcpu getcwd getdents getdents64 getegid
getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid
getpgrp getpid getppid getpriority getrandom getresgid getresgid32 getresuid getresuid32
getrlimit get_robust_list getrusage getsid getsockname getsockopt get_thread_area gettid
gettimeofday getuid getuid32 getxattr inotify_add_watch inotify_init inotify_init1
inotify_rm_watch io_cancel ioctl io_destroy io_getevents io_pgetevents io_pgetevents_time64
ioprio_get ioprio_set io_setup io_submit ipc kill landlock_add_rule landlock_create_ruleset
landlock_restrict_self lchown lchown32 lgetxattr link linkat listen listxattr llistxattr _llseek
lremovexattr lseek lsetxattr lstat lstat64 madvise membarrier memfd_create memfd_secret mincore
mkdir mkdirat mlock mlock2 mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open
mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl
msgget msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep newfstatat
_newselect pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll
ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6
pselect6_time64 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv recvfrom
recvmmsg recvmmsg_time64 recvmsg remap_file_pages removexattr rename renameat renameat2
restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo
rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo
sched_getaffinity sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min
sched_getscheduler sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity
sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop
semtimedop semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid
setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid
setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32
setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setuid32
setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 sigprocmask sigreturn
socketcall socketpair splice stat stat64 statfs statfs64 statx symlink symlinkat sync
sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete timer_getoverrun
timer_gettime timer_gettime64 timer_settime timer_settime64 timerfd_create timerfd_gettime
timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill truncate truncate64 ugetrlimit
umask uname unlink unlinkat utime utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid
waitpid write writev
""".split()  # noqa: SIM905 - Docker's list, kept readable

_ARCH_MAP = [
    ("SCMP_ARCH_X86_64", ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]),
    ("SCMP_ARCH_AARCH64", ["SCMP_ARCH_ARM"]),
    ("SCMP_ARCH_MIPS64", ["SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64N32"]),
    ("SCMP_ARCH_MIPS64N32", ["SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64"]),
    ("SCMP_ARCH_MIPSEL64", ["SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64N32"]),
    ("SCMP_ARCH_MIPSEL64N32", ["SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64"]),
    ("SCMP_ARCH_S390X", ["SCMP_ARCH_S390"]),
    ("SCMP_ARCH_RISCV64", []),
]

_NAMESPACE_FLAGS = 2114060288  # CLONE_NEWNS | CLONE_NEWUTS | ... : clone may not make namespaces


def _allow(names: list[str], **extra: Any) -> dict[str, Any]:
    return {"names": names, "action": "SCMP_ACT_ALLOW", **extra}


def _with_cap(names: list[str], cap: str) -> dict[str, Any]:
    return _allow(names, includes={"caps": [cap]})


def _masked_zero(index: int, mask: int) -> list[dict[str, Any]]:
    return [{"index": index, "value": mask, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]


def _docker_conditional_rules() -> list[dict[str, Any]]:
    """Docker's default rules beyond the plain allow list (arguments, arches, capabilities)."""
    rules: list[dict[str, Any]] = [
        _allow(["process_vm_readv", "process_vm_writev", "ptrace"], includes={"minKernel": "4.8"}),
        _allow(["socket"], args=[{"index": 0, "value": 40, "op": "SCMP_CMP_NE"}]),
    ]
    rules += [
        _allow(["personality"], args=[{"index": 0, "value": value, "op": "SCMP_CMP_EQ"}])
        for value in (0, 8, 131072, 131080, 4294967295)
    ]
    rules += [
        _allow(["sync_file_range2", "swapcontext"], includes={"arches": ["ppc64le"]}),
        _allow(
            [
                "arm_fadvise64_64",
                "arm_sync_file_range",
                "sync_file_range2",
                "breakpoint",
                "cacheflush",
                "set_tls",
            ],
            includes={"arches": ["arm", "arm64"]},
        ),
        _allow(["arch_prctl"], includes={"arches": ["amd64", "x32"]}),
        _allow(["modify_ldt"], includes={"arches": ["amd64", "x32", "x86"]}),
        _allow(
            ["s390_pci_mmio_read", "s390_pci_mmio_write", "s390_runtime_instr"],
            includes={"arches": ["s390", "s390x"]},
        ),
        _allow(["riscv_flush_icache"], includes={"arches": ["riscv64"]}),
        _with_cap(["open_by_handle_at"], "CAP_DAC_READ_SEARCH"),
        _with_cap(
            [
                "bpf",
                "clone",
                "clone3",
                "fanotify_init",
                "fsconfig",
                "fsmount",
                "fsopen",
                "fspick",
                "lookup_dcookie",
                "mount",
                "mount_setattr",
                "move_mount",
                "open_tree",
                "perf_event_open",
                "quotactl",
                "quotactl_fd",
                "setdomainname",
                "sethostname",
                "setns",
                "syslog",
                "umount",
                "umount2",
                "unshare",
            ],
            "CAP_SYS_ADMIN",
        ),
        _allow(
            ["clone"],
            args=[{"index": 0, "value": _NAMESPACE_FLAGS, "op": "SCMP_CMP_MASKED_EQ"}],
            excludes={"caps": ["CAP_SYS_ADMIN"], "arches": ["s390", "s390x"]},
        ),
        _allow(
            ["clone"],
            args=[{"index": 1, "value": _NAMESPACE_FLAGS, "op": "SCMP_CMP_MASKED_EQ"}],
            includes={"arches": ["s390", "s390x"]},
            excludes={"caps": ["CAP_SYS_ADMIN"]},
        ),
        {
            "names": ["clone3"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": ENOSYS,
            "excludes": {"caps": ["CAP_SYS_ADMIN"]},
        },
        _with_cap(["reboot"], "CAP_SYS_BOOT"),
        _with_cap(["chroot"], "CAP_SYS_CHROOT"),
        _with_cap(["delete_module", "init_module", "finit_module"], "CAP_SYS_MODULE"),
        _with_cap(["acct"], "CAP_SYS_PACCT"),
        _with_cap(
            [
                "kcmp",
                "pidfd_getfd",
                "process_madvise",
                "process_vm_readv",
                "process_vm_writev",
                "ptrace",
            ],
            "CAP_SYS_PTRACE",
        ),
        _with_cap(["iopl", "ioperm"], "CAP_SYS_RAWIO"),
        _with_cap(["settimeofday", "stime", "clock_settime", "clock_settime64"], "CAP_SYS_TIME"),
        _with_cap(["vhangup"], "CAP_SYS_TTY_CONFIG"),
        _with_cap(
            ["get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"], "CAP_SYS_NICE"
        ),
        _with_cap(["syslog"], "CAP_SYSLOG"),
        _with_cap(["bpf"], "CAP_BPF"),
        _with_cap(["perf_event_open"], "CAP_PERFMON"),
    ]
    return rules


def _setid_rules() -> list[dict[str, Any]]:
    """Mode-setting calls allowed only without S_ISUID/S_ISGID; the uncheckable ones ENOSYS."""
    rules = [
        _allow([name], args=_masked_zero(index, SETID_BITS)) for name, index in _CHECKED.items()
    ]
    rules += [
        _allow(
            [name],
            args=_masked_zero(index, _CREATE_FLAGS),
            includes={"arches": _GENERIC_FLAG_ARCHES},
        )
        for name, index in _OPEN_FLAGS.items()
    ]
    rules.append({"names": list(_UNCHECKABLE), "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS})
    return rules


def profile() -> dict[str, Any]:
    """The profile, as Docker's ``--security-opt seccomp=`` JSON takes it."""
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "archMap": [
            {"architecture": arch, "subArchitectures": subs or None} for arch, subs in _ARCH_MAP
        ],
        "syscalls": [_allow(list(_ALLOWED)), *_docker_conditional_rules(), *_setid_rules()],
    }


def security_opt() -> str:
    """``seccomp=<the profile>``, an entry of the create call's ``security_opt``."""
    return "seccomp=" + json.dumps(profile(), separators=(",", ":"))
