"""A seccomp filter for sandbox steps: refuse the system calls a data step never needs.

Raw classic BPF installed with prctl(PR_SET_SECCOMP) through ctypes; no library needed. Refused calls
fail with EPERM (the step sees an ordinary OSError), an unknown architecture ABI kills the process.
What is refused and why:

- `socket` — no new sockets of any family: no network over IP, no host Unix sockets (database
  servers, the Docker socket), no netlink. `socketpair` (asyncio's self-pipe) stays allowed, and
  because its datagram sockets can be aimed at any Unix socket of the host (syslog's /dev/log, a
  service's socket; an abstract name), `connect`, `bind`, `listen`, `accept`, `sendmsg`/`sendmmsg`
  (a filter cannot read their address) and `sendto` with an address are refused too: a pair talks
  only to itself.
- `ptrace`, `process_vm_readv/writev`, `pidfd_getfd` — no reading other processes' memory or
  taking their descriptors (the supervisor's connection to the bot).
- `mount`, `umount2`, `pivot_root`, `chroot`, the new mount API — the step's filesystem is fixed.
- `unshare`, `setns`, `clone`/`clone3` with namespace flags — no new (user) namespaces.
- `keyctl`, `add_key`, `request_key` — the kernel keyring is shared with the host.
- `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_*` — large kernel attack surface (and io_uring
  can open sockets without a `socket` call).
- SysV IPC (`shm*`, `msg*`, `sem*`) — segments outlive the step and are shared between sessions.
- module loading, kexec, reboot, swap, clock and accounting calls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import platform
import struct

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
NAMESPACE_FLAGS = 0x10000000 | 0x00020000 | 0x40000000 | 0x20000000 | 0x08000000 | 0x04000000 | 0x02000000
# BPF opcodes: load word absolute, jump if equal, jump if any bit set, return.
_LD_W_ABS, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06

# name -> (x86_64, aarch64) syscall numbers.
SYSCALLS: dict[str, tuple[int, int]] = {
    "socket": (41, 198),
    "connect": (42, 203),
    "bind": (49, 200),
    "listen": (50, 201),
    "accept": (43, 202),
    "accept4": (288, 242),
    "sendmsg": (46, 211),
    "sendmmsg": (307, 269),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "unshare": (272, 97),
    "setns": (308, 268),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "shmget": (29, 194),
    "shmat": (30, 196),
    "shmctl": (31, 195),
    "msgget": (68, 186),
    "msgsnd": (69, 189),
    "msgrcv": (70, 188),
    "msgctl": (71, 187),
    "semget": (64, 190),
    "semop": (65, 193),
    "semctl": (66, 191),
    "semtimedop": (220, 192),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "acct": (163, 89),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "syslog": (103, 116),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
}
CLONE, CLONE3 = (56, 220), (435, 435)
SENDTO = (44, 206)  # refused with an address (args[5], its length, not 0): a pair's own send() is sendto
STEP_DENIED = tuple(SYSCALLS)
NAMESPACE_DENIED = ("unshare", "setns")  # what a host without user namespaces refuses (tests)
_ARCHES = {
    "x86_64": (0, 0xC000003E),
    "amd64": (0, 0xC000003E),
    "aarch64": (1, 0xC00000B7),
    "arm64": (1, 0xC00000B7),
}
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported() -> bool:
    """True where we know the syscall numbers (x86_64, aarch64 Linux)."""
    return platform.system() == "Linux" and platform.machine().lower() in _ARCHES


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build_filter(
    denied: tuple[str, ...], *, deny_new_namespaces: bool = True, arch: str | None = None
) -> bytes:
    """The BPF program: EPERM for each `denied` call (and namespace-creating clones), allow the rest."""
    column, audit_arch = _ARCHES[(arch or platform.machine()).lower()]
    eperm = SECCOMP_RET_ERRNO | errno.EPERM
    prog = [
        _insn(_LD_W_ABS, 0, 0, 4),
        _insn(_JEQ, 1, 0, audit_arch),
        _insn(_RET, 0, 0, SECCOMP_RET_KILL_PROCESS),
    ]
    prog.append(_insn(_LD_W_ABS, 0, 0, 0))  # the syscall number
    if column == 0:  # x86_64: refuse the x32 ABI (numbers with bit 30 set) outright
        prog += [_insn(0x35, 0, 1, 0x40000000), _insn(_RET, 0, 0, eperm)]  # jge
    for name in denied:
        prog += [_insn(_JEQ, 0, 1, SYSCALLS[name][column]), _insn(_RET, 0, 0, eperm)]
    if "socket" in denied:  # sendto(fd, buf, len, flags, addr, addrlen): refused when addrlen is not 0
        prog += [
            _insn(_JEQ, 0, 3, SENDTO[column]),
            _insn(_LD_W_ABS, 0, 0, 56),  # args[5] (low 32 bits; socklen_t is 32 bits)
            _insn(_JEQ, 1, 0, 0),
            _insn(_RET, 0, 0, eperm),
            _insn(_LD_W_ABS, 0, 0, 0),  # the syscall number again, for the checks below
        ]
    if deny_new_namespaces:
        # clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back to clone.
        prog += [_insn(_JEQ, 0, 1, CLONE3[column]), _insn(_RET, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS)]
        prog += [
            _insn(_JEQ, 0, 3, CLONE[column]),
            _insn(_LD_W_ABS, 0, 0, 16),  # args[0] (low 32 bits): the clone flags
            _insn(_JSET, 0, 1, NAMESPACE_FLAGS),
            _insn(_RET, 0, 0, eperm),
        ]
    prog.append(_insn(_RET, 0, 0, SECCOMP_RET_ALLOW))
    return b"".join(prog)


def install(denied: tuple[str, ...] = STEP_DENIED, *, deny_new_namespaces: bool = True) -> bool:
    """Install the filter on the calling thread (inherited by its children). Irreversible.

    Sets no_new_privs first (required without CAP_SYS_ADMIN). False where seccomp is unavailable.
    """
    if not supported():
        return False
    program = build_filter(denied, deny_new_namespaces=deny_new_namespaces)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _Fprog(len(program) // 8, ctypes.addressof(buffer))
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0
