#!/usr/bin/env bash
# Boots a minimal arm64 Linux under qemu-system-aarch64 (Debian's arm64 kernel, busybox) and runs
# one static aarch64 binary in it with an empty environment: a full-system emulator, because
# qemu-user lacks socket options Pingora sets (see tests/integration/arm64.rs).
#
#   scripts/arm64-vm.sh BINARY CONFIG HOST_PORT
#
# The guest runs `BINARY --config /config.toml` (CONFIG copied in). Its port 4000 is forwarded
# from 127.0.0.1:HOST_PORT here, so CONFIG should listen on 0.0.0.0:4000; the guest reaches this
# machine's loopback at 10.0.2.2 (qemu's user-mode network). The guest's console (kernel
# messages and the binary's output) goes to stdout; the guest powers off when the binary exits.
# The kernel, its virtio network modules and busybox come from ARM64_VM_DIR (default
# target/arm64-vm), where `scripts/bootstrap.sh arm64-vm` puts them.
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: $0 BINARY CONFIG HOST_PORT" >&2; exit 2; }
BIN=$1
CONFIG=$2
PORT=$3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${ARM64_VM_DIR:-$ROOT/target/arm64-vm}
for f in vmlinuz busybox modules; do
  [ -e "$DIR/$f" ] || { echo "arm64-vm: $DIR/$f is missing: run scripts/bootstrap.sh arm64-vm" >&2; exit 1; }
done

guest=$(mktemp -d "${TMPDIR:-/tmp}/sturnus-arm64-vm.XXXXXX")
trap 'rm -rf "$guest"' EXIT
mkdir -p "$guest"/{bin,modules,proc,sys,dev,tmp}
cp "$DIR/busybox" "$guest/bin/busybox"
cp "$DIR"/modules/*.ko "$guest/modules/"
cp "$BIN" "$guest/bin/guest"
cp "$CONFIG" "$guest/config.toml"
cat >"$guest/init" <<'INIT'
#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sys /sys
$bb mount -t devtmpfs dev /dev
for m in failover net_failover virtio_mmio virtio_net; do $bb insmod /modules/$m.ko; done
$bb ip link set lo up
$bb ip link set eth0 up
$bb ip addr add 10.0.2.15/24 dev eth0
$bb ip route add default via 10.0.2.2
echo "arm64-vm: $($bb uname -m) guest up, starting the binary"
$bb env -i /bin/guest --config /config.toml
echo "arm64-vm: the binary exited with $?"
$bb poweroff -f
INIT
chmod +x "$guest/init"
# The initrd is read when qemu starts, so it can live beside the kernel while the guest runs.
initrd="$DIR/initrd-$PORT.cpio.gz"
(cd "$guest" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd"
rm -rf "$guest"
trap - EXIT

exec qemu-system-aarch64 -M virt -cpu max -smp 2 -m 512 -nographic -no-reboot \
  -kernel "$DIR/vmlinuz" -initrd "$initrd" -append "console=ttyAMA0 quiet panic=-1" \
  -netdev "user,id=net0,hostfwd=tcp:127.0.0.1:$PORT-:4000" -device virtio-net-device,netdev=net0
