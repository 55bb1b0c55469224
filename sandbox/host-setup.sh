#!/usr/bin/env bash
# Make this machine able to run sandboxes: Podman with runc and netavark, debootstrap for
# a registry-free base image, iptables for the sandbox firewall. Idempotent; needs root.
#
# Podman on these machines needs a containers.conf drop-in: root lacks CAP_SYS_RESOURCE,
# so the default 1048576 nofile/nproc limits fail, and crun fails on hybrid cgroups.
set -eu
need=""
for bin in podman runc netavark debootstrap iptables ip6tables; do
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/lib/podman/$bin" ] || need="yes"
done
if [ -n "$need" ]; then
  if [ "$(id -u)" != 0 ]; then echo "host-setup: installing Podman needs root" >&2; exit 1; fi
  echo "host-setup: installing podman runc netavark aardvark-dns catatonit debootstrap iptables" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq podman runc netavark aardvark-dns catatonit debootstrap iptables uidmap >/dev/null
fi
conf=/etc/containers/containers.conf.d/50-mitmchaos.conf
if [ ! -f "$conf" ] && [ "$(id -u)" = 0 ]; then
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] || [ "$nofile" -gt 1024 ] && nofile=1024
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 1024 ] && nproc=1024
  mkdir -p "$(dirname "$conf")"
  cat > "$conf" <<CONF
# written by mitmchaos sandbox/host-setup.sh
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
[network]
network_backend = "netavark"
CONF
fi
podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.NetworkBackend}}' >/dev/null
