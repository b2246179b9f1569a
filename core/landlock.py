"""Landlock: an unprivileged process limits its own (and its children's) file access, for good.

Used by the sandbox where user namespaces are refused (Ubuntu's AppArmor default, Docker's seccomp
profile): a step may read only the runtime and the paths it is given, and write only its workspace.
Raw syscalls through ctypes (Linux ≥ 5.13; newer ABIs add rights, all detected). With ABI ≥ 4 TCP
bind/connect is refused too, with ABI ≥ 6 signals to processes outside the step and abstract Unix
sockets are scoped to the step.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import stat
import struct

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same number on every architecture
CREATE_RULESET_VERSION, RULE_PATH_BENEATH = 1, 1
PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 16, 32, 64, 128, 256
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 512, 1024, 2048, 4096
REFER, TRUNCATE, IOCTL_DEV = 8192, 16384, 32768  # ABI 2, 3, 5
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # rights a rule on a file may hold
READ = EXECUTE | READ_FILE | READ_DIR
WRITE = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SYM | MAKE_FIFO | TRUNCATE
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2  # ABI 6

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    if platform.system() != "Linux":
        return 0
    version = _libc.syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(0, int(version))


def handled_fs(abi: int) -> int:
    """Every file right this ABI knows: all of them are denied unless a rule grants them."""
    rights = (1 << 13) - 1  # EXECUTE … MAKE_SYM (ABI 1)
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def restrict(*, read: list[str], write: list[str], abi: int | None = None) -> int:
    """Limit the calling process to reading `read` and reading/writing `write` (paths that do not
    exist are skipped). Irreversible, inherited by children. Returns the ABI used; raises OSError."""
    abi = abi_version() if abi is None else abi
    if abi < 1:
        raise OSError("Landlock is not available on this kernel")
    handled = handled_fs(abi)
    attr = struct.pack("=Q", handled)
    if abi >= 4:
        attr += struct.pack("=Q", NET_BIND_TCP | NET_CONNECT_TCP)
    if abi >= 6:
        attr += struct.pack("=Q", SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _libc.syscall(CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path in read:
            _allow(ruleset, path, READ & handled)
        for path in write:
            _allow(ruleset, path, (READ | WRITE | (REFER if abi >= 2 else 0)) & handled)
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "no_new_privs could not be set")
        if _libc.syscall(RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_ONLY
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        if _libc.syscall(
            ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)
        ):
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)


def scope_to_self() -> bool:
    """Only the scopes (ABI ≥ 6): no signals to processes outside this process's descendants, no
    abstract Unix sockets outside them; file access unchanged. For namespace back ends, where the
    step keeps the bot's uid. False where the kernel lacks scopes."""
    if abi_version() < 6:
        return False
    attr = struct.pack("=QQQ", 0, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _libc.syscall(CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    try:
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        return _libc.syscall(RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0
    finally:
        os.close(ruleset)
