#!/usr/bin/env bash
# vmtest.sh - run one Linux binary as root inside a throw-away qemu guest that
# boots a stock Debian kernel with IPVS, ipset, netfilter, dummy and veth, and
# hand the binary's output and exit status back.
#
#   hack/vmtest/vmtest.sh [OPTIONS] -- BINARY [ARGS...]
#   CGO_ENABLED=0 go test -exec "$PWD/hack/vmtest/vmtest.sh --" ./ipvs/...
#
# Options (environment variable in brackets):
#   --cache DIR      cache of the kernel, busybox and base initramfs
#                    [SVCPROXY_VMTEST_CACHE, default ~/.cache/svcproxy-vmtest]
#   --kernel-pkg P   Debian kernel package [SVCPROXY_VMTEST_KERNEL_PKG,
#                    default linux-image-cloud-amd64, resolved to its versioned package]
#   --suite S        boot the kernel of Debian suite S (bullseye, bookworm, trixie)
#                    with that suite's own tools, libraries, libc and loader in the
#                    guest instead of the host's [SVCPROXY_VMTEST_SUITE]; packages
#                    come from the host's Debian mirror through an apt configuration
#                    of the cache's own (CACHE/suite-S/apt), nothing is installed
#   --mirror URI     the Debian mirror for --suite [SVCPROXY_VMTEST_MIRROR, default:
#                    the one the host's apt sources use for its own release]
#   --mem MB         guest memory [SVCPROXY_VMTEST_MEM, default 1024]
#   --cpus N         guest vCPUs [SVCPROXY_VMTEST_CPUS, default 1]
#   --timeout SEC    kill the guest after SEC seconds: exit 124 [SVCPROXY_VMTEST_TIMEOUT, 900]
#   --env K=V        set a variable in the guest (repeatable); the host's
#                    SVCPROXY_* variables are forwarded as well
#   --copy SRC[:DST] put a host file or directory into the guest (repeatable);
#                    ./testdata, when present, is always copied (for go test)
#   --debug          stream the guest console to stderr
#   --prepare        build the cache and exit
#   --rebuild        rebuild the base initramfs (downloads are reused)
#   --refresh        download the packages again (with --suite: apt-get update too)
#   --info           print the image's kernel and tool versions and exit
#
# How: `apt-get download` of the kernel and busybox-static (nothing installed
# on the host but qemu-system-x86, when missing), `dpkg -x`, busybox depmod
# (the .deb ships no modules.dep), one base newc cpio with busybox, the
# net modules, and the host's ipvsadm/ipset/ip/iptables with their libraries.
# Each run appends a small cpio (binary, arguments, environment, working
# directory) and boots under TCG (KVM only when the CPU shows vmx/svm). The
# guest has only lo. ttyS0: console and the SVCPROXY-EXIT marker; ttyS1: the
# program's stdout+stderr.
#
# Exit status: the binary's; 124 on timeout; 125 when the VM itself failed.
set -euo pipefail

IMAGE_VERSION=1 # bump when the image layout changes

fail() { echo "vmtest: $*" >&2; exit 125; }
say() { [ -n "${SVCPROXY_VMTEST_QUIET:-}" ] || echo "vmtest: $*" >&2; }

CACHE=${SVCPROXY_VMTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/svcproxy-vmtest}
KPKG=${SVCPROXY_VMTEST_KERNEL_PKG:-linux-image-cloud-amd64}
MEM=${SVCPROXY_VMTEST_MEM:-1024}
CPUS=${SVCPROXY_VMTEST_CPUS:-1}
TIMEOUT=${SVCPROXY_VMTEST_TIMEOUT:-900}
DEBUG=${SVCPROXY_VMTEST_DEBUG:-}
SUITE=${SVCPROXY_VMTEST_SUITE:-}
MIRROR=${SVCPROXY_VMTEST_MIRROR:-}
PREPARE_ONLY='' REBUILD='' REFRESH='' INFO=''
ENVS=() COPIES=()

while [ $# -gt 0 ]; do
  case $1 in
    --cache) CACHE=$2; shift 2 ;;
    --kernel-pkg) KPKG=$2; shift 2 ;;
    --suite) SUITE=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --refresh) REFRESH=1; REBUILD=1; shift ;;
    --info) INFO=1; PREPARE_ONLY=1; shift ;;
    --mem) MEM=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --env) ENVS+=("$2"); shift 2 ;;
    --copy) COPIES+=("$2"); shift 2 ;;
    --debug) DEBUG=1; shift ;;
    --prepare) PREPARE_ONLY=1; shift ;;
    --rebuild) REBUILD=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) fail "unknown option $1 (put -- before the binary)" ;;
    *) break ;;
  esac
done
[ -n "$PREPARE_ONLY" ] || [ $# -ge 1 ] || fail "usage: vmtest.sh [OPTIONS] -- BINARY [ARGS...]"
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
case $SUITE in
  '') ;;
  *[!a-z0-9-]*) fail "--suite: not a Debian suite name: $SUITE" ;;
  *) CACHE=$CACHE/suite-$SUITE; mkdir -p "$CACHE" ;;
esac

# Loaded at boot, in dependency order: what IPVS tests need up front. Every
# other module in the image loads on demand (request_module -> modprobe).
BOOT_MODULES="ip_vs ip_vs_rr ip_vs_wrr ip_vs_lc ip_vs_wlc ip_vs_lblc ip_vs_lblcr ip_vs_dh
ip_vs_sh ip_vs_sed ip_vs_nq ip_vs_mh nf_conntrack dummy veth"
# Module trees (under lib/modules/VER/kernel) put into the image.
MODULE_TREES="net/netfilter net/ipv4 net/ipv6 net/bridge net/802 net/llc net/sched net/core net/xfrm net/key
net/packet net/unix net/8021q
drivers/net/dummy.ko drivers/net/veth.ko"
# Host programs copied into the guest, with their shared libraries, when present.
HOST_TOOLS="dash ipvsadm ipset ip conntrack
iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore
iptables-nft iptables-nft-save iptables-nft-restore ip6tables-nft ip6tables-nft-save ip6tables-nft-restore
iptables-legacy iptables-legacy-save iptables-legacy-restore
ip6tables-legacy ip6tables-legacy-save ip6tables-legacy-restore"

# --suite: the packages whose programs go into the guest, with their Depends
# closure (libraries, libc and its loader) less what only maintainer scripts use.
SUITE_PKGS="dash iptables nftables ipset ipvsadm conntrack iproute2"
SUITE_SKIP="debconf cdebconf debianutils dpkg perl-base tar lsb-base netbase libcap2-bin
libdebian-installer4 libnewt0.52 libslang2 libtextwrap1 init-system-helpers sysvinit-utils
usrmerge usr-is-merged base-files busybox-static"

apt_q() { DEBIAN_FRONTEND=noninteractive apt-get -q -o APT::Sandbox::User=root "$@" >"$CACHE/apt.log" 2>&1 || { tail -n 20 "$CACHE/apt.log" >&2; return 1; }; }

need_qemu() {
  command -v qemu-system-x86_64 >/dev/null && return 0
  [ "$(id -u)" = 0 ] || fail "qemu-system-x86_64 missing: apt-get install --no-install-recommends qemu-system-x86"
  say "installing qemu-system-x86 (apt-get)"
  apt_q install -y --no-install-recommends qemu-system-x86 ||
    { apt_q update && apt_q install -y --no-install-recommends qemu-system-x86; } ||
    fail "apt-get install qemu-system-x86 failed"
}

download() {
  local pkg=$KPKG dep
  command -v apt-get >/dev/null && command -v dpkg >/dev/null || fail "apt-get and dpkg are required"
  if ! apt-cache show "$pkg" >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || fail "apt-cache does not know $pkg: run apt-get update as root"
    apt_q update || fail "apt-get update failed"
  fi
  dep=$(apt-cache depends "$pkg" 2>/dev/null | awk '$1=="Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}')
  [ -z "$dep" ] || pkg=$dep
  say "apt-get download $pkg busybox-static"
  rm -rf "$CACHE/debs"; mkdir -p "$CACHE/debs"
  (cd "$CACHE/debs" && apt_q download "$pkg" busybox-static) || fail "apt-get download $pkg busybox-static failed"
  echo "$KPKG" > "$CACHE/debs/requested"
}

# sapt apt-get|apt-cache ARGS: apt over the suite's own sources, lists and
# cache under CACHE/apt; the host's sources, lists and dpkg status are not used.
sapt() {
  local a=$CACHE/apt
  "$1" -q -o APT::Sandbox::User=root -o Dir::Etc::sourcelist="$a/sources.list" -o Dir::Etc::sourceparts=- \
    -o Dir::State::Lists="$a/lists" -o Dir::Cache="$a/cache" -o Dir::State::status="$a/status" \
    -o Acquire::Languages=none "${@:2}"
}

# host_mirror: the Debian mirror the host's apt uses for its own release
host_mirror() {
  local rel
  rel=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Created-By: Packages' 2>/dev/null |
    awk -v r="$rel" '$2 == r { print $1; exit }'
}

suite_download() {
  local a=$CACHE/apt pkg dep pkgs kr=/usr/share/keyrings/debian-archive-keyring.gpg
  command -v apt-get >/dev/null && command -v dpkg >/dev/null || fail "apt-get and dpkg are required"
  if [ -n "$REFRESH" ] || [ ! -s "$a/sources.list" ] || [ -z "$(ls "$a/lists" 2>/dev/null | grep _Packages)" ]; then
    [ -n "$MIRROR" ] || MIRROR=$(host_mirror)
    [ -n "$MIRROR" ] || fail "--suite: no Debian mirror found in the host's apt sources: pass --mirror URI"
    [ -r "$kr" ] || fail "--suite: $kr missing (apt-get install debian-archive-keyring)"
    rm -rf "$a"; mkdir -p "$a/lists/partial" "$a/cache/archives/partial"; : > "$a/status"
    echo "deb [signed-by=$kr] $MIRROR $SUITE main" > "$a/sources.list"
    say "apt-get update for $SUITE (lists of its own in $a)"
    sapt apt-get update >"$CACHE/apt.log" 2>&1 || { tail -n 20 "$CACHE/apt.log" >&2; fail "apt-get update for $SUITE failed"; }
  fi
  pkg=$KPKG
  dep=$(sapt apt-cache depends "$pkg" 2>/dev/null | awk '$1=="Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}')
  [ -z "$dep" ] || pkg=$dep
  pkgs=$(sapt apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances $SUITE_PKGS 2>/dev/null | grep -v '^[ <]' | sort -u |
    grep -vxF -f <(printf '%s\n' $SUITE_SKIP)) || fail "apt-cache depends for $SUITE failed"
  say "apt-get download ($SUITE): $pkg busybox-static" $pkgs
  rm -rf "$CACHE/debs"; mkdir -p "$CACHE/debs"
  (cd "$CACHE/debs" && sapt apt-get download "$pkg" busybox-static $pkgs >"$CACHE/apt.log" 2>&1) ||
    { tail -n 20 "$CACHE/apt.log" >&2; fail "apt-get download from $SUITE failed"; }
  echo "$SUITE $KPKG" > "$CACHE/debs/requested"
}

# closure FILE_OF_PATHS: the paths plus every (transitive) dependency in modules.dep
closure() {
  awk 'NR==FNR { S[$1] = 1; next }
       { p = $1; sub(/:$/, "", p); if (p in S) { print p; for (i = 2; i <= NF; i++) print $i } }' "$1" "$KMOD/modules.dep" | sort -u
}

stage_host_tools() { # ROOT WORKDIR: the host's tools and their libraries
  local st=$1 w=$2 t p r
  : > "$w/elfs"
  for t in $HOST_TOOLS; do
    p=$(command -v "$t" 2>/dev/null) || continue
    r=$(readlink -f "$p")
    mkdir -p "$st${r%/*}" "$st${p%/*}"
    [ -e "$st$r" ] || { cp -L "$r" "$st$r"; echo "$r" >> "$w/elfs"; }
    [ "$p" = "$r" ] || ln -sf "$r" "$st$p"
    [ -e "$st/usr/sbin/$t" ] || ln -sf "$r" "$st/usr/sbin/$t"
  done
  for p in /usr/lib/x86_64-linux-gnu/xtables /usr/lib/x86_64-linux-gnu/ipset; do
    [ -d "$p" ] || continue
    mkdir -p "$st$p"; cp -a "$p/." "$st$p/"; find "$p" -name '*.so*' -type f >> "$w/elfs"
  done
  while read -r p; do ldd "$p" 2>/dev/null || true; done < "$w/elfs" |
    awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
    while read -r r; do [ -e "$st$r" ] || { mkdir -p "$st${r%/*}"; cp -L "$r" "$st$r"; }; done
  for p in /etc/protocols /etc/services /etc/ethertypes /etc/iproute2 /usr/share/iproute2 /etc/ld.so.cache; do
    [ -e "$p" ] || continue; mkdir -p "$st${p%/*}"; cp -a "$p" "$st$p"
  done
}

stage_suite_tools() { # ROOT WORKDIR: the suite's tools, libraries, libc and loader
  local st=$1 w=$2 sys=$2/sys f d t
  mkdir -p "$sys"
  for f in "$CACHE"/debs/*.deb; do
    case ${f##*/} in linux-image-*|busybox-static_*) continue ;; esac
    dpkg -x "$f" "$sys"
  done
  # fold the pre-usrmerge directories of older suites into /usr
  for d in bin sbin lib lib64; do
    [ -d "$sys/$d" ] && [ ! -L "$sys/$d" ] || continue
    mkdir -p "$sys/usr/$d"; cp -a "$sys/$d/." "$sys/usr/$d/"; rm -rf "${sys:?}/$d"
  done
  rm -rf "$sys"/usr/share/{doc,man,info,locale,lintian,bash-completion,zsh} "$sys"/usr/lib/x86_64-linux-gnu/gconv
  cp -a "$sys/usr/." "$st/usr/"
  [ ! -d "$sys/etc" ] || cp -a "$sys/etc/." "$st/etc/"
  # update-alternatives runs in postinst: iptables is iptables-nft, as Debian's default
  for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    [ -e "$st/usr/sbin/$t" ] || [ ! -e "$st/usr/sbin/${t/tables/tables-nft}" ] || ln -s "${t/tables/tables-nft}" "$st/usr/sbin/$t"
  done
  for p in /etc/protocols /etc/services /etc/ethertypes; do
    [ -e "$st$p" ] || [ ! -e "$p" ] || cp -a "$p" "$st$p"
  done
  {
    for t in $SUITE_PKGS; do
      f=$(ls "$CACHE/debs/${t}_"*.deb 2>/dev/null | head -n1) && [ -n "$f" ] && printf ' %s=%s' "$t" "$(dpkg-deb -f "$f" Version)"
    done
    f=$(ls "$CACHE"/debs/libc6_*.deb | head -n1) && printf ' libc6=%s' "$(dpkg-deb -f "$f" Version)"
  } > "$w/toolinfo"
}

build() {
  local w=$CACHE/build st kbase kver kdeb bbdeb m t p r
  kdeb=$(ls "$CACHE"/debs/linux-image-*.deb 2>/dev/null | head -n1)
  bbdeb=$(ls "$CACHE"/debs/busybox-static_*.deb 2>/dev/null | head -n1)
  [ -n "$kdeb" ] && [ -n "$bbdeb" ] || fail "downloads missing in $CACHE/debs"
  rm -rf "$w"; mkdir -p "$w/k" "$w/bb"
  dpkg -x "$kdeb" "$w/k"; dpkg -x "$bbdeb" "$w/bb"
  BB=$w/bb/bin/busybox
  [ -x "$BB" ] || BB=$w/bb/usr/bin/busybox # trixie: merged /usr
  [ -x "$BB" ] || fail "no busybox in $bbdeb"
  kbase=$w/k
  [ -d "$kbase/lib/modules" ] || kbase=$w/k/usr # trixie: merged /usr
  kver=$(ls "$kbase/lib/modules" | head -n1)
  KMOD=$kbase/lib/modules/$kver
  grep -q '^CONFIG_IP_VS=[ym]' "$w"/k/boot/config-* || fail "$kdeb: kernel without CONFIG_IP_VS"
  cp "$w"/k/boot/vmlinuz-* "$CACHE/vmlinuz"
  # compressed modules (newer Debian): decompress for busybox insmod
  find "$KMOD" -name '*.ko.xz' -exec "$BB" unxz {} +
  find "$KMOD" -name '*.ko.gz' -exec "$BB" gunzip {} +
  [ -z "$(find "$KMOD" -name '*.ko.zst' -print -quit)" ] || fail "zstd-compressed modules are not supported"
  "$BB" depmod -b "$kbase" "$kver"

  st=$w/root
  mkdir -p "$st"/{usr/bin,usr/sbin,etc/modprobe.d,proc,sys,dev,tmp,run,root,svcproxy}
  if [ -n "$SUITE" ]; then
    # merged /usr (what trixie ships; older suites are folded into it)
    mkdir -p "$st"/usr/{lib,lib64}
    for m in bin sbin lib lib64; do ln -s "usr/$m" "$st/$m"; done
  else
    mkdir -p "$st"/{bin,sbin}
  fi

  # modules: the trees, plus the boot set, plus their closure
  : > "$w/sel"
  for t in $MODULE_TREES; do
    [ -e "$KMOD/kernel/$t" ] && (cd "$KMOD" && find "kernel/$t" -name '*.ko' -type f) >> "$w/sel"
  done
  for m in $BOOT_MODULES; do
    grep -E "/$m\.ko:" "$KMOD/modules.dep" | cut -d: -f1 >> "$w/boot" || say "note: no module $m"
  done
  cat "$w/boot" >> "$w/sel"
  closure "$w/sel" | while read -r m; do mkdir -p "$st/lib/modules/$kver/${m%/*}"; cp "$KMOD/$m" "$st/lib/modules/$kver/$m"; done
  cp "$KMOD"/modules.builtin "$KMOD"/modules.order "$st/lib/modules/$kver/" 2>/dev/null || true
  "$BB" depmod -b "$st" "$kver"
  # boot order: the closure sorted by dependency count (busybox writes
  # transitive lists, so that is a topological order)
  closure "$w/boot" > "$w/bootall"
  awk 'NR==FNR { S[$1] = 1; next } { p = $1; sub(/:$/, "", p); if (p in S) print NF - 1, p }' \
    "$w/bootall" "$KMOD/modules.dep" | sort -n -k1,1 -k2,2 |
    awk '{ print $2 ($2 ~ /\/dummy\.ko$/ ? " numdummies=0" : "") }' > "$st/etc/boot-modules"
  echo 'options dummy numdummies=0' > "$st/etc/modprobe.d/dummy.conf"
  echo "$kver" > "$st/etc/kver"

  if [ -n "$SUITE" ]; then stage_suite_tools "$st" "$w"; else stage_host_tools "$st" "$w"; fi
  # busybox: the applets where no real tool of that name is (sh stays dash)
  cp "$BB" "$st/bin/busybox"
  for m in $("$BB" --list); do [ "$m" = busybox ] || [ -e "$st/bin/$m" ] || [ -L "$st/bin/$m" ] || ln -s busybox "$st/bin/$m"; done
  for m in modprobe insmod poweroff; do [ -e "$st/sbin/$m" ] || ln -sf /bin/busybox "$st/sbin/$m"; done
  # busybox sh prefers its own applets to PATH (its "ip" is not iproute2): use dash
  [ ! -x "$st/usr/bin/dash" ] || ln -sf /usr/bin/dash "$st/bin/sh"
  printf 'root:x:0:0:root:/root:/bin/sh\n' > "$st/etc/passwd"
  printf 'root:x:0:\n' > "$st/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' > "$st/etc/hosts"

  cat > "$st/init" <<'INIT'
#!/bin/busybox sh
# svcproxy vmtest guest init (PID 1)
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mkdir -p /dev/pts /dev/shm /sys/fs/cgroup
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
chmod 1777 /tmp # rootfs is tmpfs already; mounting over /tmp would hide payload files
ln -sf /proc/self/fd /dev/fd
echo /sbin/modprobe > /proc/sys/kernel/modprobe
ip link set lo up
KVER=$(cat /etc/kver)
while read -r m args; do
  insmod "/lib/modules/$KVER/$m" $args || echo "guest: insmod $m failed"
done < /etc/boot-modules
stty -F /dev/ttyS1 raw -echo 2>/dev/null
[ ! -f /svcproxy/env ] || . /svcproxy/env
cd "$(cat /svcproxy/cwd)" 2>/dev/null || cd /
/bin/sh /svcproxy/run.sh </dev/null >/dev/ttyS1 2>&1
rc=$?
stty -F /dev/ttyS1 raw -echo 2>/dev/null # drains the UART before poweroff
printf '\nSVCPROXY-EXIT=%s\n' "$rc"
poweroff -f
INIT
  chmod 755 "$st/init"
  (cd "$st" && find . -mindepth 1 | LC_ALL=C sort | "$BB" cpio -o -H newc 2>/dev/null) > "$CACHE/base.cpio.new"
  mv "$CACHE/base.cpio.new" "$CACHE/base.cpio"
  cp "$BB" "$CACHE/busybox"
  echo "${SUITE:+suite=$SUITE }kernel=$(basename "$kdeb") kver=$kver modules=$(wc -l < "$w/bootall")+$(closure "$w/sel" | wc -l)$(cat "$w/toolinfo" 2>/dev/null)" > "$CACHE/info"
  rm -rf "$w"
}

prepare() {
  local key
  # The key names the host tools found too: an image built before ipvsadm
  # or ipset was installed must not be reused without them.
  key="$IMAGE_VERSION $KPKG suite=$SUITE $(cksum < "${BASH_SOURCE[0]}" | cut -d' ' -f1) tools=$(for t in $HOST_TOOLS; do command -v "$t" >/dev/null && printf '%s,' "$t"; done; true)"
  [ -z "$SUITE" ] || key=${key% tools=*} # the suite's tools, not the host's
  ready() { [ -z "$REBUILD" ] && [ "$(cat "$CACHE/ready" 2>/dev/null)" = "$key" ] && [ -s "$CACHE/base.cpio" ] && [ -s "$CACHE/vmlinuz" ]; }
  ready && return 0
  exec 9>"$CACHE/.lock"; flock 9
  ready && { exec 9>&-; return 0; }
  need_qemu
  if [ -n "$SUITE" ]; then
    [ -z "$REFRESH" ] && [ "$(cat "$CACHE/debs/requested" 2>/dev/null)" = "$SUITE $KPKG" ] || suite_download
  else
    [ -z "$REFRESH" ] && [ "$(cat "$CACHE/debs/requested" 2>/dev/null)" = "$KPKG" ] || download
  fi
  say "building the base initramfs in $CACHE"
  build
  echo "$key" > "$CACHE/ready"
  say "prepared: $(cat "$CACHE/info")"
  exec 9>&-
}

RUN=''
QPID=''
cleanup() {
  [ -z "$QPID" ] || kill "$QPID" 2>/dev/null || true
  [ -z "$RUN" ] || rm -rf "$RUN"
}
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

run() {
  local bin=$1 name a e src dst
  shift
  [ -f "$bin" ] && [ -x "$bin" ] || fail "not an executable file: $bin"
  need_qemu
  RUN=$(mktemp -d "${TMPDIR:-/tmp}/svcproxy-vmtest.XXXXXX")
  trap cleanup EXIT
  trap 'exit 130' INT TERM HUP
  local pl=$RUN/payload
  name=${bin##*/}
  mkdir -p "$pl/svcproxy" "$pl$PWD"
  cp "$bin" "$pl/svcproxy/$name"
  echo "$PWD" > "$pl/svcproxy/cwd"
  { printf 'exec %s' "$(quote "/svcproxy/$name")"; for a in "$@"; do printf ' %s' "$(quote "$a")"; done; echo; } > "$pl/svcproxy/run.sh"
  {
    for e in $(compgen -e | grep '^SVCPROXY_' || true); do printf 'export %s=%s\n' "$e" "$(quote "${!e}")"; done
    for e in "${ENVS[@]+"${ENVS[@]}"}"; do printf 'export %s=%s\n' "${e%%=*}" "$(quote "${e#*=}")"; done
  } > "$pl/svcproxy/env"
  # go test hands output paths of the host; make their directories exist
  for a in "$@"; do
    case $a in -test.gocoverdir=*|-test.outputdir=*) mkdir -p "$pl${a#*=}" ;; esac
  done
  # go test runs the binary in the package directory and tests read ./testdata
  [ ! -d "$PWD/testdata" ] || COPIES+=("$PWD/testdata:$PWD/testdata")
  for a in "${COPIES[@]+"${COPIES[@]}"}"; do
    src=${a%%:*}; dst=${a#*:}; [ "$dst" != "$a" ] || dst=$(readlink -f "$src")
    [ -e "$src" ] || fail "--copy: no such file: $src"
    mkdir -p "$pl${dst%/*}"; cp -a "$src" "$pl$dst"
  done
  (cd "$pl" && find . -mindepth 1 | "$CACHE/busybox" cpio -o -H newc 2>/dev/null) > "$RUN/run.cpio"
  cat "$CACHE/base.cpio" "$RUN/run.cpio" > "$RUN/initrd"
  rm -rf "$pl" "$RUN/run.cpio"

  local accel=tcg,thread=multi cpu=max
  if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then accel=kvm cpu=host; fi
  [ -z "${SVCPROXY_VMTEST_ACCEL:-}" ] || { accel=${SVCPROXY_VMTEST_ACCEL}; [ "$accel" = kvm ] && cpu=host || { accel=tcg,thread=multi; cpu=max; }; }
  # no_timer_check: under TCG on a loaded host the kernel's IO-APIC timer
  # check can miss its ticks and panic ("IO-APIC + timer doesn't work",
  # seen with bullseye's 5.10 at a host load of 40)
  local append="console=ttyS0 panic=-1 8250.nr_uarts=2 edd=off rdinit=/init no_timer_check"
  [ -n "$DEBUG" ] || append="$append quiet loglevel=3"
  local con=$RUN/console.log tailpid='' rc=0
  : > "$con"
  if [ -n "$DEBUG" ]; then tail -n +1 -f "$con" >&2 & tailpid=$!; fi
  # background + wait, so that a signal to this script runs cleanup at once
  timeout -k 5 "$TIMEOUT" qemu-system-x86_64 \
    -nodefaults -no-user-config -nographic -no-reboot \
    -machine q35 -accel "$accel" -cpu "$cpu" -smp "$CPUS" -m "$MEM" \
    -kernel "$CACHE/vmlinuz" -initrd "$RUN/initrd" -append "$append" \
    -chardev file,id=con,path="$con" -serial chardev:con \
    -chardev stdio,id=out,signal=off -serial chardev:out \
    -nic none </dev/null 2>"$RUN/qemu.err" &
  QPID=$!
  wait "$QPID" || rc=$?
  QPID=''
  [ -z "$tailpid" ] || { kill "$tailpid" 2>/dev/null || true; }
  local code
  # (|| true: no marker is a failed guest, reported below, not a silent
  # exit of this script through pipefail)
  code=$(tr -d '\r' < "$con" | grep -ao 'SVCPROXY-EXIT=[0-9][0-9]*' | tail -n1 | cut -d= -f2 || true)
  [ -z "$code" ] || return "$code"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "vmtest: guest timed out after ${TIMEOUT}s; console tail:" >&2; tail -n 30 "$con" >&2; return 124
  fi
  echo "vmtest: the guest ended without an exit marker (qemu status $rc)" >&2
  [ ! -s "$RUN/qemu.err" ] || { echo "--- qemu stderr:" >&2; tail -n 20 "$RUN/qemu.err" >&2; }
  echo "--- console tail:" >&2; tail -n 40 "$con" >&2
  return 125
}

prepare
[ -z "$PREPARE_ONLY" ] || { cat "$CACHE/info"; exit 0; }
BIN=$1; shift
case $BIN in */*) ;; *) BIN=$(command -v "$BIN" || echo "$BIN") ;; esac
run "$BIN" "$@"
