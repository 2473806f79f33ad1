# shellcheck shell=bash
# Shared by the lab/* commands: where the cached image and the running lab's state live.
# Sourced, not executed. The recipe hash covers only what changes the image (lab/build,
# lab/packages.txt, lab/image/), so editing the boot or ssh helpers never forces a rebuild.

lab_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(cd "$lab_dir/.." && pwd)
lab_cache_root=${GPUHOST_LAB_CACHE:-${HOME:-/root}/.cache/gpuhost-lab}
# Runtime state (overlay disk, console log, pid, port) of the running lab. Kept outside the
# cache so a run never dirties the cached base image, and next to the checkout by default
# so the console log of a failed run is easy to find.
lab_run_dir=${GPUHOST_LAB_RUN:-$lab_dir/.run}

lab_log() { printf '[lab] %s\n' "$*" >&2; }
lab_die() { printf '[lab] ERROR: %s\n' "$*" >&2; exit 1; }

# Free as QEMU's user-mode network binds it: with SO_REUSEADDR (libslirp sets it), so a
# port whose last lab just stopped, its connections in TIME_WAIT, counts as free, while a
# port something listens on does not (molecule's create after destroy met this, 2026-12-02).
lab_port_free() {
  python3 - "$1" <<'PY'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
PY
}

# The image variant (GPUHOST_LAB_VARIANT): "default" (initramfs-tools) or the name of a
# directory of lab/variants/ (dracut: the same image with dracut as its initramfs
# generator). A variant's files (packages.txt: more packages; rootfs/:
# copied over image/rootfs; customize: run after image/customize) are part of its recipe
# only, so editing a variant never rebuilds the default image. Its image has its own
# recipe directory and its own link, <cache>/current-<variant>.
#
# A variant may build on another: its `extends` file names that variant, whose files go
# in first (el9like: the dracut variant on Debian 11). Its `suite` file names the Debian
# suite of the image (default bookworm). lab_variant_dirs lists them in build order.
lab_variant=${GPUHOST_LAB_VARIANT:-default}
lab_variant_dirs=()
lab_variant_resolve() {
  local name=$1 dir
  case $name in
    default|*[!a-z0-9-]*|"") lab_die "GPUHOST_LAB_VARIANT=$lab_variant: expected default or a directory name of lab/variants ($name)" ;;
  esac
  dir=$lab_dir/variants/$name
  [ -d "$dir" ] || lab_die "GPUHOST_LAB_VARIANT=$lab_variant: no $dir"
  [ ${#lab_variant_dirs[@]} -lt 4 ] || lab_die "GPUHOST_LAB_VARIANT=$lab_variant: its extends files loop"
  [ ! -f "$dir/extends" ] || lab_variant_resolve "$(tr -d '[:space:]' < "$dir/extends")"
  lab_variant_dirs+=("$dir")
}
case $lab_variant in
  default) lab_variant_dir= ;;
  *) lab_variant_resolve "$lab_variant"; lab_variant_dir=$lab_dir/variants/$lab_variant ;;
esac

# The image's Debian suite: the last `suite` file of the variant's chain, else bookworm.
lab_suite() {
  local suite=bookworm dir
  for dir in "${lab_variant_dirs[@]}"; do
    [ ! -f "$dir/suite" ] || suite=$(tr -d '[:space:]' < "$dir/suite")
  done
  printf '%s\n' "$suite"
}

lab_recipe_hash() {
  (
    cd "$lab_dir" || exit 1
    {
      printf '%s\n' build packages.txt
      find image -type f -o -type l
      # The default recipe's list stays as it was, so its hash (and cached image) too.
      for dir in "${lab_variant_dirs[@]}"; do find "variants/$(basename "$dir")" -type f -o -type l; done
    } | LC_ALL=C sort | while read -r f; do
      printf '== %s\n' "$f"
      if [ -L "$f" ]; then readlink "$f"; else cat "$f"; fi
    done | sha256sum | cut -c1-16
  )
}

lab_image_dir() { printf '%s/%s\n' "$lab_cache_root" "$(lab_recipe_hash)"; }

# <cache>/current for the default image, <cache>/current-<variant> for a variant's.
lab_current_link() {
  if [ -z "$lab_variant_dir" ]; then printf '%s/current\n' "$lab_cache_root"
  else printf '%s/current-%s\n' "$lab_cache_root" "$lab_variant"; fi
}

# The variant an image directory was built as (image.info's variant=; images built before
# variants existed are the default's).
lab_image_variant() {
  local variant
  variant=$(sed -n 's/^variant=//p' "$1/image.info" 2>/dev/null | head -n1)
  printf '%s\n' "${variant:-default}"
}

# State written by lab/up, read by the other commands and by the test harness.
lab_state_file=$lab_run_dir/state
lab_console_log=$lab_run_dir/console.log
lab_pid_file=$lab_run_dir/qemu.pid
lab_monitor_sock=$lab_run_dir/monitor.sock
# Used by the scripts that source this file (lab/up, lab/reset), not here.
# shellcheck disable=SC2034
lab_overlay=$lab_run_dir/overlay.qcow2
# shellcheck disable=SC2034
lab_port_file=$lab_run_dir/ssh-port

lab_running() {
  [ -f "$lab_pid_file" ] || return 1
  local pid
  pid=$(cat "$lab_pid_file" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q qemu "/proc/$pid/cmdline" 2>/dev/null
}

# QEMU's user-mode forward accepts the TCP connection before sshd runs, and sshd under a
# busy TCG guest can take many seconds to send its banner: ConnectTimeout is generous.
# A shared master connection makes every later command skip the handshake and the PAM
# session set-up, which cost seconds each under TCG.
lab_ssh_opts() {
  local key=$1 port=$2
  printf '%s\n' -i "$key" -p "$port" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o LogLevel=ERROR -o BatchMode=yes -o ConnectTimeout=30 -o IdentitiesOnly=yes \
    -o ServerAliveInterval=10 -o ServerAliveCountMax=6 \
    -o ControlMaster=auto -o ControlPath="$lab_run_dir/ssh-%p.sock" -o ControlPersist=120
}

# Loads PORT and KEY of the running lab into lab_port/lab_key.
lab_load_state() {
  [ -f "$lab_state_file" ] || lab_die "the lab is not up (no $lab_state_file); run lab/up"
  lab_port=$(sed -n 's/^port=//p' "$lab_state_file")
  lab_key=$(sed -n 's/^key=//p' "$lab_state_file")
}

lab_ssh() {
  local opts
  mapfile -t opts < <(lab_ssh_opts "$lab_key" "$lab_port")
  # The arguments are a command line for the lab's shell, as ssh passes them.
  # shellcheck disable=SC2029
  ssh "${opts[@]}" root@127.0.0.1 "$@"
}

# Ends the shared SSH master connection (before a reboot or poweroff, so no command
# waits on a connection whose guest is gone).
lab_ssh_close() {
  local opts
  mapfile -t opts < <(lab_ssh_opts "$lab_key" "$lab_port")
  ssh "${opts[@]}" -O exit root@127.0.0.1 >/dev/null 2>&1 || true
}

# Sends one command to the QEMU monitor (quit, system_reset, ...), the way the boot
# watchdog does.
lab_monitor() {
  python3 -B -c 'import sys; sys.path.insert(0, sys.argv[1]); import watchdog; watchdog.send_monitor(sys.argv[2], sys.argv[3])' \
    "$lab_dir" "$lab_monitor_sock" "$1"
}

# Reads console output on stdin: prints why the kernel's own reports say the boot will
# not finish and returns 0, or returns 1. The rule is watchdog.py's kernel_stall_report
# (a task reported hung twice, a CPU reported stuck for minutes). Seen: a CI boot's
# modprobe hung in virtio_blk's probe, and a boot whose CPUs all stayed stuck in
# stop_machine; both kept the console busy with reports, so only the boot timeout ended
# the wait.
lab_kernel_stall() {
  python3 -B -c 'import sys; sys.path.insert(0, sys.argv[1]); import watchdog
reason = watchdog.kernel_stall_report(sys.stdin.buffer.read())
print(reason or "", end="")
sys.exit(0 if reason else 1)' "$lab_dir"
}

# Waits until SSH answers with a boot id other than $1 (empty: any). Returns 0 when it
# does, 2 when QEMU exited first, 3 on timeout, 4 when the guest stalled: no SSH and
# either no new console output for GPUHOST_LAB_STALL_TIMEOUT seconds (default 240; a
# healthy boot under load prints something at least every minute or so) or a stall the
# kernel reports (lab_kernel_stall) on the console since the wait began.
# lab_stall_reason says which. Callers name the console log.
lab_try_wait_boot() {
  local old_boot=$1 timeout=${2:-${GPUHOST_LAB_BOOT_TIMEOUT:-600}} deadline boot
  local stall=${GPUHOST_LAB_STALL_TIMEOUT:-240} size last_size=-1 last_change now
  local start_size
  deadline=$(( $(date +%s) + timeout ))
  last_change=$(date +%s)
  start_size=$(stat -c %s "$lab_console_log" 2>/dev/null || echo 0)
  lab_stall_reason=
  while :; do
    boot=$(lab_ssh cat /proc/sys/kernel/random/boot_id 2>/dev/null) || boot=
    if [ -n "$boot" ] && [ "$boot" != "$old_boot" ]; then return 0; fi
    [ -z "$boot" ] && lab_ssh_close
    lab_running || return 2
    now=$(date +%s)
    size=$(stat -c %s "$lab_console_log" 2>/dev/null || echo 0)
    if [ "$size" != "$last_size" ]; then
      last_size=$size; last_change=$now
      # Only what this wait saw: the log of an earlier boot or reset may hold old reports.
      if [ -z "$boot" ] && [ "$size" -gt "$start_size" ] &&
          lab_stall_reason=$(tail -c +"$(( start_size + 1 ))" "$lab_console_log" | lab_kernel_stall); then
        return 4
      fi
    fi
    if [ -z "$boot" ] && [ $(( now - last_change )) -ge "$stall" ]; then
      lab_stall_reason="no SSH and no console output for ${stall}s"
      return 4
    fi
    [ "$now" -lt "$deadline" ] || return 3
    sleep 3
  done
}

# The same, but a stalled guest is reset once (QEMU 7.2's multi-threaded TCG hung one
# boot of the lab's kernel for good right after "sched_clock: Marking stable"; a reset
# boots it normally). The stalled boot's console is kept as console-stall.log.
lab_try_wait_boot_resetting() {
  local rc=0
  lab_try_wait_boot "$@" || rc=$?
  [ "$rc" -eq 4 ] || return "$rc"
  cp -f "$lab_console_log" "$lab_run_dir/console-stall.log" || true
  lab_log "the guest stalled ($lab_stall_reason; its console is kept as $lab_run_dir/console-stall.log); resetting it once"
  lab_monitor system_reset || true
  rc=0
  lab_try_wait_boot "$@" || rc=$?
  return "$rc"
}

# The same, failing with the console log's tail and path.
lab_wait_boot() {
  local rc=0 timeout=${2:-${GPUHOST_LAB_BOOT_TIMEOUT:-600}}
  lab_try_wait_boot_resetting "$1" "$timeout" || rc=$?
  [ "$rc" -eq 0 ] && return 0
  tail -n 30 "$lab_console_log" >&2 || true
  case $rc in
    2) lab_die "QEMU exited while waiting for the lab; console log: $lab_console_log (QEMU stderr: $lab_run_dir/qemu.stderr)" ;;
    4) lab_die "the guest stalled again after a reset ($lab_stall_reason); console log: $lab_console_log" ;;
    *) lab_die "no SSH on 127.0.0.1:$lab_port after ${timeout}s; console log: $lab_console_log" ;;
  esac
}

# The lab images' apt sources and options, from the build machine's own apt configuration
# (tools/apt_sources.py): its Debian mirror and security archive for the image's suite,
# and its proxy and Release-date settings, which mmdebstrap's own apt would not read.
# The image keeps these sources, so the roles' package installs inside the lab use the
# same mirror. Sets apt_sources and apt_options (arrays) for mmdebstrap.
lab_apt_sources() {
  local suite=$1 line
  mapfile -t apt_sources < <(python3 "$repo_dir/tools/apt_sources.py" mmdebstrap "$suite") \
    || lab_die "no apt sources for the lab image (tools/apt_sources.py mmdebstrap $suite)"
  [ ${#apt_sources[@]} -gt 0 ] || lab_die "no apt sources for the lab image: configure apt on this machine"
  apt_options=()
  while IFS= read -r line; do
    [ -n "$line" ] && apt_options+=("--aptopt=$line")
  done < <(python3 "$repo_dir/tools/apt_sources.py" aptopts)
}

# Removes the images of older recipes of this variant, keeping the newest one besides
# $1 (the image just built: a checkout of the previous commit boots without a rebuild);
# about 1 GB each. Another variant's images are never touched (a dracut build must not
# take the default image from a run that boots it, nor the other way round), and neither
# is an image that a current link names. Recipe directories are the 16-hex-digit ones;
# apt-archives and the links stay.
lab_prune_images() {
  local keep=$1 in_use link old
  in_use=$(for link in "$lab_cache_root"/current "$lab_cache_root"/current-*; do
    [ -L "$link" ] && printf '%s/%s\n' "$lab_cache_root" "$(readlink "$link")"; done || true)
  # shellcheck disable=SC2012
  ls -1dt "$lab_cache_root"/*/ 2>/dev/null | sed 's:/*$::' \
    | { grep -E '/[0-9a-f]{16}$' || true; } | { grep -vxF "$keep" || true; } \
    | while read -r old; do
        [ "$(lab_image_variant "$old")" = "$lab_variant" ] || continue
        printf '%s\n' "$in_use" | grep -qxF "$old" && continue
        printf '%s\n' "$old"
      done | tail -n +2 \
    | while read -r old; do
        lab_log "removing the image of an older $lab_variant recipe: $old"
        rm -rf --one-file-system "$old"
      done
}
