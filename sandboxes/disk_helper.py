"""The disk helper's program (standard library only, run by python3 as root in a short-lived
helper container; sandboxes/docker/disks.py starts it). It gives a sandbox its on-disk filesystems:
for each disk it makes a sparse file of the disk's size in the helper's scratch volume, an ext4
filesystem in it (root directory root-owned 1777, no lost+found, no journal), attaches it to a
free loop device with autoclear and direct I/O, unlinks the file, and makes a device node for the
loop in a directory of the scratch volume that dockerd reaches on the host. It prints one line,
``ready {"name": "/host/path/of/node", ...}``, and then holds the loop devices open until its
stdin closes (the sandbox container has started: dockerd has mounted the filesystems), removes the
nodes and exits.

Why this shape:
* The filesystem's size is the quota: a write past it fails with ENOSPC inside, on any host
  filesystem (ext4 + overlay2 included), with no xfs project quota, and the pages are not tmpfs
  (they do not count as the sandbox's memory beyond reclaimable cache; direct I/O keeps the loop
  from caching the backing file a second time).
* Autoclear + unlinked file: the loop device goes away when nothing holds it (the helper has
  exited and dockerd has unmounted the volume when the container stopped or was removed), and
  with it the file's blocks. A crash anywhere leaks neither a loop device nor disk space.
* The device node exists only while the helper runs: a volume that names it can be mounted by
  dockerd only while the sandbox is being created. Restarting a stopped sandbox (its disks are
  gone) fails instead of mounting whatever filesystem a reused loop number holds by then.
"""

import fcntl
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import time

LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LO_FLAGS_AUTOCLEAR = 4
LO_FLAGS_DIRECT_IO = 16
BLOCK_SIZE = 4096
STALE_SECONDS = 600  # a helper that was killed left its node directory: no creation takes this long


def sweep(root: str, keep: str) -> None:
    now = time.time()
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if path != keep and now - os.lstat(path).st_mtime > STALE_SECONDS:
            shutil.rmtree(path, ignore_errors=True)


def make_filesystem(image: str, size: int, label: str) -> None:
    with open(image, "wb") as handle:
        handle.truncate(size)
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-b", str(BLOCK_SIZE), "-m", "0", "-L", label[:16],
         "-E", "lazy_itable_init=1,nodiscard,root_owner=0:0", image],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    subprocess.run(
        ["debugfs", "-w", "-f", "-", image],
        input=b"sif / mode 041777\nrmdir lost+found\n",
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def attach(image: str, node: str, name: str) -> int:
    """Attach `image` to a free loop device with autoclear and direct I/O; make `node` for it.
    Returns the open loop descriptor (holding it keeps the device until the mount does)."""
    backing = os.open(image, os.O_RDWR)
    try:
        for _attempt in range(50):
            control = os.open("/dev/loop-control", os.O_RDWR)
            try:
                number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
            finally:
                os.close(control)
            with open(f"/sys/devices/virtual/block/loop{number}/dev") as handle:
                major, minor = (int(part) for part in handle.read().split(":"))
            if os.path.exists(node):
                os.unlink(node)
            os.mknod(node, 0o600 | stat.S_IFBLK, os.makedev(major, minor))
            loop = os.open(node, os.O_RDWR)
            info = struct.pack(
                "=5Q4I64s64s32s2Q", 0, 0, 0, 0, 0, 0, 0, 0,
                LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO, name.encode()[:63], b"", b"", 0, 0,
            )  # fmt: skip
            try:
                fcntl.ioctl(loop, LOOP_CONFIGURE, struct.pack("=II", backing, BLOCK_SIZE) + info + bytes(64))
                return loop
            except OSError:  # another helper took the device first
                os.close(loop)
                time.sleep(0.01)
        raise RuntimeError("no free loop device")
    finally:
        os.close(backing)


def main() -> None:
    config = json.loads(os.environ["MANGO_DISKS"])
    root, incarnation = "/disks", config["incarnation"]
    directory = os.path.join(root, incarnation)
    sweep(root, keep=directory)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    held, nodes = [], {}
    try:
        for disk in config["disks"]:
            image = os.path.join(directory, disk["name"] + ".img")
            node = os.path.join(directory, disk["name"])
            make_filesystem(image, disk["bytes"], disk["name"])
            held.append(attach(image, node, f"mango:{incarnation}:{disk['name']}"))
            os.unlink(image)  # the loop device holds the file; its blocks go with the device
            nodes[disk["name"]] = os.path.join(config["host_root"], incarnation, disk["name"])
        sys.stdout.write("ready " + json.dumps(nodes) + "\n")
        sys.stdout.flush()
        sys.stdin.read()  # until the worker closes it (or dies): the container has mounted them
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        for loop in held:
            os.close(loop)


if __name__ == "__main__":
    main()
