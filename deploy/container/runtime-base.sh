#!/usr/bin/env bash
# Builds a local stand-in for gcr.io/distroless/cc-debian12 (no registry is reachable
# from the build machines): Debian 12's libc6, libgcc-s1 and netbase unpacked from
# their .deb files (apt-get download), a passwd/group with root and nonroot (65532),
# /tmp, and nothing else (no shell, no package manager), imported as IMAGE.
# Usage: deploy/container/runtime-base.sh [IMAGE]   (default localhost/idemgate-distroless:bookworm)
set -euo pipefail
image=${1:-localhost/idemgate-distroless:bookworm}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root" "$work/debs"

# The same packages distroless/cc is made of, less tzdata and the CA bundle (idemgate
# reads no local time zone and makes no TLS connections yet).
(cd "$work/debs" && apt-get download libc6 libgcc-s1 netbase >/dev/null 2>&1) || {
  apt-get update -qq && (cd "$work/debs" && apt-get download libc6 libgcc-s1 netbase >/dev/null)
}
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
rm -rf "$root"/usr/share/doc "$root"/usr/share/lintian "$root"/usr/share/man "$root"/usr/share/locale

mkdir -p "$root"/tmp "$root"/home/nonroot "$root"/etc
chmod 1777 "$root"/tmp
chown 65532:65532 "$root"/home/nonroot
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root"/etc/passwd
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root"/etc/group
printf 'hosts: files dns\n' >"$root"/etc/nsswitch.conf

tar -C "$root" --numeric-owner -cf - . |
  podman import --quiet --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' - "$image" >/dev/null
echo "runtime-base: $image ($(du -sh "$root" | cut -f1) unpacked)"
