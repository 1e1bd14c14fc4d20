#!/usr/bin/env bash
# Build the session sandbox image from a static busybox: /bin/sh plus the usual applets.
# No registry is needed: the root filesystem is assembled here and `docker import`ed.
set -euo pipefail
image="${1:-mango-sandbox:latest}"
# Debian's busybox-static installs a static /bin/busybox.
busybox="${BUSYBOX:-/bin/busybox}"
[ -x "$busybox" ] || { echo "busybox-static is required (apt-get install busybox-static)" >&2; exit 1; }
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,tmp,etc,root,mnt/session/outputs,mnt/session/uploads,workspace}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
echo "root:x:0:0:root:/root:/bin/sh" > "$root/etc/passwd"
echo "root:x:0:" > "$root/etc/group"
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/bin' --change 'WORKDIR /workspace' --change 'CMD ["/bin/sh"]' \
  - "$image" >/dev/null
echo "built sandbox image $image" >&2
